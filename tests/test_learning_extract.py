"""Rule-based extraction: unit behaviour, and sensible memories on real LoCoMo conversations."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

import pytest

from remindful.config import DEFAULT_TRIGGER_PATTERNS
from remindful.services.learning.corrections import synthesize_rule
from remindful.services.learning.extract import classify, extract, third_person
from remindful.services.learning.types import ConversationTurn
from requirements import bench_data, missing

LOCOMO = bench_data("locomo")  # $REMINDFUL_BENCH_DATA, else ../shared/data/locomo_dev.json
PATTERNS = [re.compile(p, re.IGNORECASE) for p in DEFAULT_TRIGGER_PATTERNS]


def kept(text: str, name: str | None = None, at: datetime | None = None) -> list[tuple[str, str, str]]:
    turn = ConversationTurn(text, user_name=name, timestamp=at or datetime(2023, 5, 8, 13, 56, tzinfo=UTC))
    return [(e.content, e.category, e.memory_class.value) for e in extract(turn, PATTERNS) if e.confidence >= 0.7]


@pytest.mark.parametrize(
    ("sentence", "expected"),
    [
        ("I love painting.", "Ann loves painting."),
        ("I really enjoy hiking with my dog.", "Ann really enjoys hiking with Ann's dog."),
        ("I'm a nurse and I've worked nights.", "Ann is a nurse and Ann has worked nights."),
        ("I went to the park; it made me happy.", "Ann went to the park; it made Ann happy."),
        ("I don't like tea.", "Ann doesn't like tea."),
        ("I watch movies.", "Ann watches movies."),
        ("I try my best.", "Ann tries Ann's best."),
    ],
)
def test_third_person(sentence: str, expected: str) -> None:
    assert third_person(sentence, "Ann") == expected


def test_categories() -> None:
    assert classify("We decided to use FastAPI for the backend.", from_user=True)[0] == "decision"
    assert classify("I prefer tabs over spaces.", from_user=True)[:2] == ("preference", "semantic")
    assert classify("The project uses PostgreSQL 16.", from_user=True)[0] == "fact"
    assert classify("To release, first run the tests, then tag the commit.", from_user=True)[0] == "procedure"
    assert classify("How are you doing today?", from_user=True)[2] < 0.7
    assert classify("Maybe I might prefer tabs, not sure.", from_user=True)[2] < 0.7  # hedged
    assert classify("I prefer to answer briefly.", from_user=False)[0] == "small_talk"  # the agent's own "I"


def test_numbered_steps_become_one_procedure() -> None:
    message = "Here is how to deploy the docs:\n1. Build with mkdocs\n2. Run the link checker\n3. Push to gh-pages"
    assert kept(message)[0] == (
        "To deploy the docs: 1) Build with mkdocs, 2) Run the link checker, 3) Push to gh-pages.",
        "procedure",
        "procedural",
    )


def test_code_and_pasted_text_are_not_statements() -> None:
    message = "We decided to use ruff.\n```python\nI prefer = 'this is code'\n```\n" + "I saw " + "log line " * 80
    assert [c for c, _, _ in kept(message)] == ["We decided to use ruff."]


def test_corrections_state_the_rule() -> None:
    assert synthesize_rule("The default port is 8080", "The default port is 8443") == (
        "The default port is 8443, not 8080."
    )
    assert synthesize_rule("Dear Sir,", "Hi Sam,", "email greetings") == (
        'Use "Hi Sam," rather than "Dear Sir," (email greetings).'
    )


def _locomo() -> list[dict[str, Any]]:
    if not LOCOMO.is_file():
        missing(f"the LoCoMo data at {LOCOMO} (set REMINDFUL_BENCH_DATA to its path)")
    return json.loads(LOCOMO.read_text(encoding="utf-8"))


def test_sensible_memories_from_real_locomo_turns() -> None:
    conv = _locomo()[0]["conversation"]  # conv-26: Caroline and Melanie, session 1 on 8 May 2023
    turns = {t["dia_id"]: t for t in conv["session_1"]}

    def on(dia_id: str) -> list[tuple[str, str, str]]:
        return kept(turns[dia_id]["text"], turns[dia_id]["speaker"])

    assert on("D1:3") == [
        (
            "Caroline went to a LGBTQ support group yesterday and it was so powerful (said on 8 May 2023).",
            "event",
            "episodic",
        )
    ]
    assert on("D1:11")[0] == (
        "Caroline is keen on counseling or working in mental health - Caroline would love to support those "
        "with similar issues.",
        "preference",
        "semantic",
    )
    assert on("D1:14") == [("Melanie painted that lake sunrise last year (said on 8 May 2023).", "event", "episodic")]
    assert ("Melanie is off to go swimming with the kids.", "plan", "episodic") in on("D1:18")
    assert on("D1:1") == []  # "Hey Mel! Good to see you! How have you been?"
    assert on("D1:4") == []  # questions and compliments


def test_rules_find_most_turns_that_carry_an_observation() -> None:
    """LoCoMo annotates each session with observations (facts) and the turn each comes from.
    Measured: 79 % of those turns yield a memory, and 57 % of the turns that yield one carry an
    observation (the base rate is 41 %)."""
    hits = observed = extracted = extracted_observed = 0
    for item in _locomo():
        with_observation = {
            did
            for session in item["observation"].values()
            for facts in session.values()
            for _, dids in facts
            for did in (dids if isinstance(dids, list) else [dids])
        }
        for key, turns in item["conversation"].items():
            if not key.startswith("session_") or key.endswith("date_time"):
                continue
            for t in turns:
                found = bool(kept(t["text"], t["speaker"]))
                has = t["dia_id"] in with_observation
                observed += has
                hits += found and has
                extracted += found
                extracted_observed += found and has
    assert hits / observed >= 0.75
    assert extracted_observed / extracted >= 0.5
