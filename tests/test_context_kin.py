"""The "maybe relevant" tier's kin (issue 31): stated knowledge under ``context.maybe_min_score`` but
from ``context.kin_min_score`` joins a prompt's context only when the block already holds a line and
the kin's own text holds a word of the prompt that such a line holds. The searcher is a stand-in with
set scores (the real embedder's example is tests/test_injection_decision.py's deploy store)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest

from remindful.model import MemoryType, SearchHit
from remindful.services.context import MAYBE_HEADER, build_context

QUESTION = "how do I deploy this project?"


class Scored:
    """A searcher whose hits score what they are given, whatever the query."""

    def __init__(self, scored: dict[str, tuple[str, float]], **context: float) -> None:
        values = {"maybe_min_score": 0.25, "maybe_lines": 5, "kin_min_score": 0.2, **context}
        self.settings = SimpleNamespace(context=SimpleNamespace(**values))
        self.hits = [
            SearchHit(
                id=f"m{i}",
                type=MemoryType(kind),
                content=text,
                metadata={"category": "fact"} if kind == "knowledge" else {"kind": "activity"},
                score=score,
                created_at=datetime(2026, 1, 1, tzinfo=UTC),
            )
            for i, (text, (kind, score)) in enumerate(scored.items())
        ]

    def search(self, query: str, *, types: Sequence[str] | None = None, limit: int, min_score: float, **_: Any):  # type: ignore[no-untyped-def]
        found = [h for h in self.hits if h.score >= min_score and (types is None or h.type.value in types)]
        return sorted(found, key=lambda h: -h.score)[:limit]

    def get_batch(self, ids: Sequence[str]) -> list[None]:
        return [None for _ in ids]


def injected(searcher: Scored, query: str = QUESTION) -> list[str]:
    return [hit.content for hit in build_context(searcher, query).hits]


VPN = "You must be on the office VPN before you deploy"
AWS = "The deploy script needs AWS_PROFILE=prod"


def test_a_fact_on_the_blocks_subject_joins_it_under_the_maybe_floor() -> None:
    searcher = Scored({VPN: ("knowledge", 0.36), AWS: ("knowledge", 0.23)})
    context = build_context(searcher, QUESTION)
    assert [hit.content for hit in context.hits] == [VPN, AWS]
    assert context.text.splitlines()[1] == MAYBE_HEADER


def test_kin_never_start_a_block() -> None:
    # Alone under the "maybe" floor, the same fact gets the prompt nothing: whether the store
    # holds anything about it is for a line over a floor to say.
    assert injected(Scored({AWS: ("knowledge", 0.23)})) == []


def test_kin_must_hold_a_word_of_the_prompt_that_a_shown_line_holds() -> None:
    unrelated = "Our CI always runs on Node 20 for this project"  # "project", which no shown line holds
    searcher = Scored({VPN: ("knowledge", 0.36), unrelated: ("knowledge", 0.24), AWS: ("knowledge", 0.21)})
    assert injected(searcher) == [VPN, AWS]


def test_kin_stop_at_their_floor_and_are_only_stated_knowledge() -> None:
    log = "deploy log 3: build 1003 finished in 6s"
    searcher = Scored({VPN: ("knowledge", 0.36), AWS: ("knowledge", 0.19), log: ("action", 0.24)})
    assert injected(searcher) == [VPN]


@pytest.mark.parametrize("kin_min_score", [0.25, 0.5])
def test_a_kin_floor_at_the_maybe_floor_or_over_turns_kin_off(kin_min_score: float) -> None:
    searcher = Scored({VPN: ("knowledge", 0.36), AWS: ("knowledge", 0.23)}, kin_min_score=kin_min_score)
    assert injected(searcher) == [VPN]


def test_kin_count_among_the_maybe_lines() -> None:
    facts = {f"Deploy step {n}: run the migration number {n}": ("knowledge", 0.3 - n / 100) for n in range(4)}
    searcher = Scored({**facts, AWS: ("knowledge", 0.22)}, maybe_lines=4)
    assert injected(searcher) == list(facts)
