"""Learning from what the user says, measured on fixed sets (quality gates, as bench/learning.py
prints them beside today's rules): the LongMemEval dev turns that hold the evidence of a later
question, hand-written coding-agent prompts that state nothing to keep, and prompts that state facts."""

from __future__ import annotations

import json
import lzma
from collections.abc import Iterator
from pathlib import Path

import pytest

from remindful.api import MemoryManager
from remindful.model import MemoryType
from remindful.testing import open_fake
from requirements import bench_data, missing

FIXTURES = Path(__file__).parent / "fixtures" / "learning"
LONGMEMEVAL = bench_data("longmemeval")  # $REMINDFUL_BENCH_LONGMEMEVAL, else ../shared/data/longmemeval_dev.json.xz


def prompt_set(name: str) -> list[tuple[str, str]]:
    """``(head, prompt)`` of each block of a prompt set (the format its header describes)."""
    out = []
    for block in (FIXTURES / name).read_text(encoding="utf-8").split("\n---\n"):
        lines = [line for line in block.strip("\n").split("\n") if not line.startswith("# ") and line != "#"]
        out.append((lines[0].removeprefix("#").strip(), "\n".join(lines[1:])))
    return out


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MemoryManager]:
    with open_fake(tmp_path_factory.mktemp("learning") / "store") as memory:
        yield memory


def learned(store: MemoryManager, text: str, conversation: str) -> list[str]:
    found = store.capture_conversation({"user_message": text, "conversation_id": conversation})
    return [m.content for m in found if m.type is MemoryType.KNOWLEDGE and m.origin == "user"]


def test_the_sets_are_what_they_say() -> None:
    negatives = prompt_set("nothing_to_keep.txt")
    assert len(negatives) >= 200
    assert {label for label, _ in negatives} == {"request", "question", "code", "log", "chitchat", "mixed"}
    assert len(prompt_set("states_facts.txt")) >= 60


def test_prompts_that_state_nothing_are_rarely_learned(store: MemoryManager) -> None:
    negatives = prompt_set("nothing_to_keep.txt")
    wrong = [text for i, (_, text) in enumerate(negatives) if learned(store, text, f"n{i}")]
    assert len(wrong) / len(negatives) <= 0.05, wrong


def test_stated_facts_are_learned(store: MemoryManager) -> None:
    stated = found = 0
    for i, (head, text) in enumerate(prompt_set("states_facts.txt")):
        memories = learned(store, text, f"f{i}")
        for wanted in head.split(" | "):
            stated += 1
            found += any(wanted.lower() in m.lower() for m in memories)
    assert found / stated >= 0.85


def test_the_issue_s_examples_each_become_a_memory(store: MemoryManager) -> None:
    assert [m for m in learned(store, "FYI: the staging database listens on port 6543.", "e1") if "6543" in m]
    both = learned(
        store, "We use pnpm in this repo, never npm. The staging database listens on port 6543, not 5432.", "e2"
    )
    assert any("pnpm" in m for m in both) and any("6543" in m for m in both) and len(both) == 2
    assert learned(store, "Our CI always runs on Node 20.", "e3") == ["Our CI always runs on Node 20."]


def test_most_evidence_turns_of_longmemeval_yield_the_fact(store: MemoryManager) -> None:
    if not LONGMEMEVAL.is_file():
        missing(f"the LongMemEval data at {LONGMEMEVAL}")
    with lzma.open(LONGMEMEVAL, "rt", encoding="utf-8") as fh:
        questions = json.load(fh)
    turns = [
        (q["answer"], t["content"]) for q in questions for s in q["sessions"] for t in s["turns"] if t.get("has_answer")
    ]
    kept = 0
    for i, (answer, text) in enumerate(turns):
        memories = learned(store, text, f"l{i}")
        if answer.lower() in text.lower():
            kept += any(answer.lower() in m.lower() for m in memories)
        else:
            kept += bool(memories)
    assert len(turns) == 250 and kept / len(turns) >= 0.8
