"""Issue 31: which memories a prompt's context holds and how search ranks them, on the real embedder.

The right memory comes back for a paraphrase in a small project store ("how do I deploy this
project?" finds the three deploy facts among deploy logs), nothing comes back for a prompt no memory
is about, a statement is never carried by a neighbour or by the prompt that taught it, and a stored
prompt is not its own answer."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

import remindful
from remindful.api import MemoryManager

pytestmark = pytest.mark.slow

DEPLOY_FACTS = [
    "The deploy script needs AWS_PROFILE=prod",
    "Deploys run through GitHub Actions on every tag",
    "You must be on the office VPN before you deploy",
]
PNPM = "We use pnpm in this repo, never npm."
ZOD = "We decided to use Zod for validation of all API request payloads"


def _logs() -> list[dict[str, Any]]:
    steps = ["uploading artifacts", "running migrations", "restarting workers", "warming caches", "health check ok"]
    return [
        {
            "content": f"deploy log {i}: [{steps[i % 5]}] build {1000 + i} step {i % 7} finished in {3 + i % 11}s",
            "type": "action",
            "source": "hook",
            "session_id": f"deploy-{i // 10}",
            "metadata": {"kind": "activity", "tool_name": "Bash", "success": True},
        }
        for i in range(30)
    ]


@pytest.fixture
def project(tmp_path: Path, onnx_embedder: Any) -> Iterator[tuple[MemoryManager, dict[str, str]]]:
    with remindful.open(tmp_path / "project", embedder=onnx_embedder) as memory:
        ids = {}
        for text in DEPLOY_FACTS:
            # One at a time, as a user states them: each is embedded alone. The int8 model scales its
            # activations per model call, so a fact embedded in one call with others moves by up to
            # ~0.01 of score, and a fact at a floor's edge would come and go with the timing.
            ids[text] = memory.store(text, type="knowledge", metadata={"category": "fact"})
            memory.flush()
        memory.store_batch(_logs())
        ids[PNPM] = memory.store(PNPM, type="knowledge", metadata={"category": "preference"}, session_id="s1")
        ids[ZOD] = memory.store(ZOD, type="knowledge", metadata={"category": "decision"}, session_id="s0")
        memory.store(
            "Edited config/staging.env: DB_PORT=5432 -> DB_PORT=6543",
            type="action",
            source="hook",
            session_id="s1",
            metadata={"kind": "change", "tool_name": "Edit", "success": True},
        )
        yield memory, ids


def injected(memory: MemoryManager, prompt: str) -> list[str]:
    return [hit.content for hit in memory.context(prompt).hits]


def test_how_do_i_deploy_gets_the_three_deploy_facts(project: tuple[MemoryManager, dict[str, str]]) -> None:
    memory, _ = project
    got = injected(memory, "how do I deploy this project?")
    assert set(DEPLOY_FACTS) <= set(got), got


def test_a_paraphrase_of_the_package_manager_gets_the_pnpm_rule(project: tuple[MemoryManager, dict[str, str]]) -> None:
    memory, _ = project
    assert PNPM in injected(memory, "which package manager should I run the tests with?")


def test_a_paraphrase_of_the_validation_library_gets_the_decision(
    project: tuple[MemoryManager, dict[str, str]],
) -> None:
    memory, _ = project
    assert ZOD in injected(memory, "What library do we validate input with?")


@pytest.mark.parametrize("prompt", ["write a haiku about autumn", "give me a banana bread recipe"])
def test_a_prompt_no_memory_is_about_gets_nothing(project: tuple[MemoryManager, dict[str, str]], prompt: str) -> None:
    memory, _ = project
    assert memory.context(prompt).text == ""


def test_a_statement_is_not_carried_by_the_prompt_that_taught_it(
    project: tuple[MemoryManager, dict[str, str]],
) -> None:
    # "We use pnpm" was injected at the prompt's score (0.93) for the port question: the prompt that
    # taught it also named the port. What a prompt taught stands on its own words.
    memory, ids = project
    memory.store(
        f"{PNPM} The staging database listens on port 6543, not 5432.",
        type="conversation",
        source="hook",
        session_id="s1",
        metadata={"kind": "intent", "role": "user", "learned": [ids[PNPM]]},
    )
    assert PNPM not in injected(memory, "what port is the staging db on?")
    hits = memory.search("what port is the staging db on?", limit=10)
    assert all(hit.content != PNPM or hit.score < 0.5 for hit in hits)


def test_a_stored_prompt_ranks_below_the_facts_that_answer_it(project: tuple[MemoryManager, dict[str, str]]) -> None:
    memory, _ = project
    asked = "how do I deploy this project?"
    memory.store(asked, type="conversation", source="hook", metadata={"kind": "intent", "role": "user"})
    hits = memory.search(asked, limit=10)
    kinds = ["intent" if hit.metadata.get("kind") == "intent" else "other" for hit in hits]
    assert "intent" in kinds  # still found when asked for
    assert kinds == sorted(kinds, key=lambda kind: kind == "intent"), [h.content for h in hits]
    assert all(a.score >= b.score for a, b in pairwise(hits))
