"""Two Claude Code sessions in one git project, simulated with Claude Code's hook payloads (prompts,
Read/Edit/Bash calls, a failing build, Stop, SessionEnd) through the real hook entry, drained as the
daemon drains, answered as the daemon answers a hook: what the second session is told of the first.

The real MiniLM embedder (the in-memory index): the questions are paraphrases, not keywords.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent_in_process import AgentSession
from remindful.services.context import BRIEF_HEADER, HEADER, MAYBE_HEADER
from remindful.testing import open_fake

pytestmark = pytest.mark.slow

KINDS = (
    "fact|decision|preference|rule|observation|correction|open failure|procedure|change|answer|summary|document|note"
    "|activity"
)
#: An explained line: its id, then why it is there (kind, relevance unless a brief's, date), then the text.
EXPLAINED = re.compile(
    rf"^- \[\w+\] \(({KINDS}|resolved failure), [^,()]+, (\d\.\d\d, )?\d{{4}}-\d\d-\d\d(, \+\d+ similar)?\) \S"
)

FIRST_PROMPTS = (
    "We use pnpm, not npm, in this repo. Add the lodash dependency please.",
    "Install the dependencies.",
    "Check the staging database settings.",
    "The staging database moved to port 6543, update the config. "
    "We decided to keep the staging settings in .env.staging, not in config.yaml.",
    "Run the build.",
    "I prefer small commits with conventional commit messages.",
)
BUILD_ERROR = "Exit code 2\nsrc/db.ts(14,7): error TS2322: Type 'string' is not assignable to type 'number'."


def git_project(path: Path) -> Path:
    path.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    return path


@pytest.fixture
def world(tmp_path: Path, onnx_embedder: Any) -> Iterator[tuple[Path, Path, Path]]:
    yield tmp_path / "store", git_project(tmp_path / "shop"), git_project(tmp_path / "blog")


def explained(text: str, header: str) -> list[str]:
    """The lines of an injected block (the "maybe relevant" tier's included: a line of standing
    knowledge near the main floor falls on either side of it from one machine to another: the
    decision about .env.staging scored 0.49 on one, where this test had passed on another), each
    checked to say why it is there."""
    lines = [line for line in text.splitlines() if line != MAYBE_HEADER]
    assert lines[0] == header, text
    assert lines[1:] and all(EXPLAINED.match(line) for line in lines[1:]), text
    return lines[1:]


def first_session(store: Path, shop: Path) -> AgentSession:
    s = AgentSession(store, shop)
    s.start()
    s.prompt(FIRST_PROMPTS[0])
    s.bash("pnpm add lodash", "Packages: +1\n+ lodash 4.17.21\nDone in 1.4s", description="Add lodash")
    s.answer("I added lodash with `pnpm add lodash`; pnpm-lock.yaml is updated.", in_payload=True)
    s.prompt(FIRST_PROMPTS[1])
    s.bash("pnpm install", "Lockfile is up to date\nDone in 2.1s", description="Install dependencies")
    s.answer("Installed the dependencies with `pnpm install`.", in_payload=True)
    s.prompt(FIRST_PROMPTS[2])
    env = shop / ".env.staging"
    s.read(str(env), "DB_HOST=staging-db.internal\nDB_PORT=5432\nDB_USER=app\nDB_PASSWORD=hunter2-s3cret-value\n")
    s.answer("The staging database is staging-db.internal on port 5432, user app.", in_payload=True)
    s.prompt(FIRST_PROMPTS[3])
    s.edit(str(env), "DB_PORT=5432", "DB_PORT=6543")
    s.answer("Updated DB_PORT to 6543 in .env.staging.", in_payload=True)
    s.prompt(FIRST_PROMPTS[4])
    s.bash("pnpm run build", error=BUILD_ERROR)
    s.answer(
        "The build fails: src/db.ts line 14 assigns the port as a string where a number is expected.", in_payload=True
    )
    s.prompt(FIRST_PROMPTS[5])
    s.answer("Noted: small commits with conventional commit messages.", in_payload=True)
    s.end()
    return s


def test_the_next_session_starts_with_what_the_last_one_learned(
    world: tuple[Path, Path, Path], onnx_embedder: Any
) -> None:
    store, shop, blog = world
    first = first_session(store, shop)
    assert set(first.codes) == {0}
    with open_fake(store, embedder=onnx_embedder) as memory:
        assert memory.drain_spool() > 0  # as the daemon does

        # One memory per tool call, with its outcome; the edit keeps old → new.
        calls = [m for m in memory.list(source="hook", limit=200) if m.type.value == "action"]
        assert len(calls) == 5 and len({m.metadata["tool_use_id"] for m in calls}) == 5
        by_tool = {m.metadata["tool_name"]: m for m in calls if m.metadata["tool_name"] != "Bash"}
        assert by_tool["Edit"].content == 'Edited .env.staging: "DB_PORT=5432" → "DB_PORT=6543"'
        read = by_tool["Read"]
        assert "hunter2" not in read.content and read.metadata["superseded_by"] == by_tool["Edit"].id
        failed = next(m for m in calls if m.metadata.get("success") is False)
        assert failed.content.startswith("Ran `pnpm run build`: failed: Exit code 2") and "TS2322" in failed.content

        second = AgentSession(store, shop)
        # The SessionStart brief: the decisions, the open failure and the preferences of the first session.
        brief = explained(second.context(memory, second.start()), BRIEF_HEADER)
        assert any(line.startswith("- [") and "(decision, " in line and ".env.staging" in line for line in brief)
        assert any("(open failure, " in line and "pnpm run build" in line for line in brief)
        assert any("(preference, " in line and "small commits" in line for line in brief)
        assert any("(fact, " in line and "pnpm, not npm" in line for line in brief)

        # A paraphrased question gets the fact, not the earlier questions.
        install = explained(
            second.context(memory, second.prompt("How do I install the dependencies for this repo?")), HEADER
        )
        assert "(activity, " not in install[0] and "pnpm" in install[0]  # what was said or answered comes first
        assert any("We use pnpm, not npm, in this repo." in line for line in install)
        # The port: the edited value, not the read of the file nor what was said before the edit.
        port = "\n".join(
            explained(second.context(memory, second.prompt("What port is the staging database listening on?")), HEADER)
        )
        assert "6543" in port and "5432 DB_USER" not in port and "on port 5432" not in port
        for text in (install, port.splitlines()):
            assert not any(prompt in line for line in text for prompt in FIRST_PROMPTS), text
        # Nothing for what no memory is about.
        assert second.context(memory, second.prompt("What is a good recipe for banana bread?")) == ""

        # The failed build, from its tool and arguments, as the hooks store them.
        second.bash("pnpm run build", error=BUILD_ERROR)
        memory.drain_spool()
        (warning,) = memory.suggest("Bash(pnpm run build)").warnings
        assert warning.failures == 2 and warning.message.startswith("This action failed 2 times previously")
        assert memory.suggest(
            "about to build", action={"tool_name": "Bash", "arguments": {"command": "pnpm run build"}}
        ).warnings

        # Forgotten stays forgotten: the user deletes the fact; the next turn saying it again teaches nothing.
        (fact,) = [
            m for m in memory.list(type="knowledge", limit=50) if m.content == "We use pnpm, not npm, in this repo."
        ]
        assert memory.delete(fact.id)
        second.prompt("We use pnpm, not npm, in this repo. Bump lodash please.")
        second.answer("Bumped lodash with pnpm.", in_payload=True)
        memory.drain_spool()
        assert not [m for m in memory.list(type="knowledge", limit=50) if "pnpm, not npm" in m.content]
        assert memory.stats().learning["dropped"].get("forgotten") == 1

        # A fix that works resolves the failure: the next brief has no open failure.
        second.edit(str(shop / "src" / "db.ts"), "const port: number = env.DB_PORT", "const port = Number(env.DB_PORT)")
        second.bash("pnpm run build", "Build succeeded in 3.2s")
        second.end()
        memory.drain_spool()
        third = AgentSession(store, shop)
        assert "open failure" not in third.context(memory, third.start())

        # Another project gets none of this project's facts, decisions or failures (user-level
        # preferences go everywhere).
        elsewhere = AgentSession(store, blog)
        other = elsewhere.context(memory, elsewhere.start())
        assert "pnpm" not in other and ".env.staging" not in other and "failure" not in other

        # The ledger: what was injected, per session and per project.
        injection = memory.stats().injection
        assert injection is not None and injection["injections"] >= 4 and injection["tokens"] > 0
        (shop_row,) = [p for p in injection["by_project"] if p["project"] == memory.project_of(shop).key]  # type: ignore[union-attr]
        assert shop_row["injections"] >= 4 and shop_row["tokens"] > 0
        assert second.session_id in {s["session_id"] for s in injection["by_session"]}
        assert injection["forgotten"] >= 1
