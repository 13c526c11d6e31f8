"""Hook events end to end in-process: payload fixtures for every event → spool → drain → memories."""

from __future__ import annotations

import io
import json
import logging
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from remindful.services.ingest.drainer import drain_spool
from remindful.services.ingest.events import build_record, last_assistant_text, normalize_event
from remindful.shells.hook import run
from remindful.testing import open_fake

FIXTURES = Path(__file__).parent / "fixtures" / "hooks"
EVENTS = ["SessionStart", "UserPromptSubmit", "PreToolUse", "PostToolUse", "Stop", "SessionEnd"]


def payload(event: str, **changes: Any) -> dict[str, Any]:
    data = json.loads((FIXTURES / f"{event}.json").read_text())
    data["transcript_path"] = str(FIXTURES / "transcript.jsonl")
    data.update(changes)
    return data


def fire(store: Path, event: str, data: dict[str, Any] | str, *, context: bool = False) -> tuple[int, str]:
    out = io.StringIO()
    text = data if isinstance(data, str) else json.dumps(data)
    argv = ["--path", str(store), "hook", event] + ([] if context else ["--no-context"])
    return run(argv, stdin=io.StringIO(text), stdout=out), out.getvalue()


def spool_rows(store: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(store / "catalog.sqlite3") as conn:
        return conn.execute("SELECT kind, payload FROM spool ORDER BY seq").fetchall()


def test_every_event_fixture_is_captured(tmp_path: Path) -> None:
    store = tmp_path / "s"
    for event in EVENTS:
        assert fire(store, event, payload(event)) == (0, "")
    assert [kind for kind, _ in spool_rows(store)] == EVENTS
    with open_fake(store) as memory:
        assert memory.stats().spool_pending == len(EVENTS)  # opening the store stores nothing
        # The owner's explicit step. The start of a call (toolu_01PRE) waits for its outcome...
        assert memory.drain_spool() == len(EVENTS) - 1
        assert memory.stats().spool_pending == 1
        # ... until it is drained.HOLD_S old: then it is stored as started, outcome unknown.
        assert drain_spool(memory.engine, resolve=memory.project_of, hold_s=0) == 1
        assert memory.stats().spool_pending == 0
        everything = memory.list(session_id="sess-abc123", limit=50)
        # Beside the hooks' own memories, what was learned from the turn: the assistant's observation.
        (learned,) = [m for m in everything if m.type.value == "knowledge"]
        assert (learned.origin, learned.metadata["category"]) == ("assistant", "observation")
        found = [m for m in everything if m is not learned]
        by_event = {m.metadata["hook_event"]: m for m in found}
        pre, post = by_event["PreToolUse"], by_event["PostToolUse"]
        assert (pre.type.value, pre.source.value) == ("action", "hook")
        # TC-P1-04: the description, with what it did and to what
        assert pre.content == "Read config.yaml (Reading file config.yaml) (started; no outcome recorded)"
        assert pre.metadata["file"] == "/home/dev/project-x/config.yaml" and "success" not in pre.metadata
        assert (
            post.content
            == "Ran `pytest -q tests/test_config.py` (Run the config tests): ok: 3 failed, 12 passed in 0.41s"
        )
        assert post.metadata["success"] is True and post.metadata["tool_use_id"] == "toolu_01POST"
        assert post.metadata["arguments"] == {"command": "pytest -q tests/test_config.py"}
        project = memory.project_of("/home/dev/project-x")
        assert project is not None and post.scope == project.scope
        assert post.metadata["project_id"] == project.key and post.metadata["kind"] == "activity"
        prompt = by_event["UserPromptSubmit"]
        assert (prompt.type.value, prompt.metadata["role"], prompt.metadata["kind"]) == (
            "conversation",
            "user",
            "intent",
        )
        response = by_event["Stop"]  # SessionEnd read the same final answer: stored once
        assert response.source.value == "response"
        assert response.content.startswith("The loader calls yaml.safe_load")  # the text after the last tool
        assert "guard it with `or {}`" in response.content
        assert "SessionEnd" not in by_event
        assert len(found) == 4 and {m.session_id for m in found} == {"sess-abc123"}  # TC-P1-07
        session = memory.engine.catalog.read(
            "SELECT ended_at, metadata, started_at FROM sessions WHERE id = 'sess-abc123'"
        )[0]
        assert session[0] is not None and session[0] >= session[2]  # SessionEnd closed it, after its start
        meta = json.loads(session[1])
        assert meta["start_source"] == "startup" and meta["end_reason"] == "prompt_input_exit"


def test_replayed_event_is_stored_once_even_after_the_drain(tmp_path: Path) -> None:
    store = tmp_path / "s"
    fire(store, "PostToolUse", payload("PostToolUse"))
    fire(store, "PostToolUse", payload("PostToolUse"))
    assert len(spool_rows(store)) == 1
    with open_fake(store) as memory:
        memory.drain_spool()
        assert len(memory.list(type="action")) == 1
    fire(store, "PostToolUse", payload("PostToolUse"))  # replay after the drain
    assert spool_rows(store) == []
    with open_fake(store) as memory:
        assert memory.drain_spool() == 0
        assert len(memory.list(type="action")) == 1


def test_crash_between_store_and_spool_delete_does_not_duplicate(tmp_path: Path) -> None:
    store = tmp_path / "s"
    fire(store, "PostToolUse", payload("PostToolUse"))
    [(kind, body)] = spool_rows(store)
    with open_fake(store) as memory:
        memory.drain_spool()
        assert len(memory.list()) == 1
        # Simulate the crash: the row comes back as if its delete had never committed.
        memory.engine.catalog.write(
            lambda c: c.execute(
                "INSERT INTO spool (idem_key, kind, payload, created_at) VALUES ('k-again', ?, ?, 0)", (kind, body)
            )
        )
        first_key = memory.list()[0].metadata["spool_key"]
        memory.engine.catalog.write(lambda c: c.execute("UPDATE spool SET idem_key = ?", (first_key,)))
        assert drain_spool(memory.engine, resolve=memory.project_of) == 1
        assert len(memory.list()) == 1


def test_missing_session_id_is_err_p1_03(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _ = fire(tmp_path / "s", "PreToolUse", payload("PreToolUse", session_id=None))
    assert code == 1
    assert "session_id is required for memory capture" in capsys.readouterr().err
    assert "session_id is required" in (tmp_path / "s" / "logs" / "hooks.log").read_text()


def test_empty_description_is_skipped_with_the_spec_warning(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _ = fire(tmp_path / "s", "PreToolUse", payload("PreToolUse", tool_name="", tool_input={"description": "  "}))
    assert code == 0
    assert "Skipping empty hook description for PreToolUse" in capsys.readouterr().err
    assert not (tmp_path / "s" / "catalog.sqlite3").exists() or spool_rows(tmp_path / "s") == []


@pytest.mark.parametrize("stdin", ["", "not json", "[1, 2]"])
def test_bad_input_is_a_clear_non_blocking_error(
    tmp_path: Path, stdin: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert fire(tmp_path / "s", "PreToolUse", stdin)[0] == 1
    assert "expected a JSON object" in capsys.readouterr().err


def test_unknown_event_and_event_names(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert fire(tmp_path / "s", "Bogus", payload("PreToolUse"))[0] == 1
    assert "unknown event 'Bogus'" in capsys.readouterr().err
    assert normalize_event("pre-tool-use") == normalize_event("pretooluse") == "PreToolUse"


def test_an_event_nothing_can_take_is_said_to_be_lost(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Neither the catalog nor the fallback file opens and no daemon runs to keep the event: the
    hook says it is lost and exits 1, a non-blocking error Claude Code shows the user (issue 32: it
    exited 0, and the line went where nobody looks)."""
    store = tmp_path / "s"
    for name in ("catalog.sqlite3", "spool-fallback.jsonl"):  # neither the catalog nor the fallback opens
        (store / name).mkdir(parents=True)
    assert fire(store, "PreToolUse", payload("PreToolUse"))[0] == 1
    err = capsys.readouterr().err
    assert "the PreToolUse event is lost: it could not be written" in err and "remindful doctor" in err


def test_a_storage_path_that_is_a_file_is_a_config_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The settings refuse it (storage.path), and so does the hook, by the same rule."""
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert fire(blocker, "PreToolUse", payload("PreToolUse"))[0] == 0
    err = capsys.readouterr().err
    assert "config invalid, nothing captured" in err and "is not a directory" in err


def test_excluded_session_writes_nothing_but_an_audit_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REMINDFUL_PRIVACY__EXCLUDE_SESSIONS", '["banking_*"]')
    store = tmp_path / "s"
    for event in EVENTS:
        assert fire(store, event, payload(event, session_id="banking_2024"))[0] == 0
    assert spool_rows(store) == []
    with open_fake(store) as memory:
        assert memory.list() == []
        assert memory.stats().capture["skipped_excluded"] >= 4
        audit = memory.engine.catalog.read("SELECT detail FROM audit_log WHERE action = 'capture_excluded'")
        assert audit and "banking_2024" in audit[0][0]
        assert memory.engine.catalog.read("SELECT count(*) FROM sessions")[0][0] == 0


@pytest.mark.parametrize("trigger", ["true", "false"])
def test_hooks_trigger_off_captures_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, trigger: str) -> None:
    """With the trigger off nothing reaches the spool, so the owner's drain stores nothing; the same
    event with it on is stored (what shows the drain below would see a capture)."""
    monkeypatch.setenv("REMINDFUL_AUTO_CAPTURE__TRIGGERS__HOOKS", trigger)
    fire(tmp_path / "s", "UserPromptSubmit", payload("UserPromptSubmit"))
    with open_fake(tmp_path / "s") as memory:
        memory.drain_spool()
        stored = memory.list()
    if trigger == "false":
        assert stored == []
    else:
        assert [m.metadata["hook_event"] for m in stored] == ["UserPromptSubmit"]


def test_secrets_are_redacted_before_the_spool(tmp_path: Path) -> None:
    store = tmp_path / "s"
    data = payload(
        "PreToolUse", tool_input={"command": "curl -H 'Authorization: token ghp_abcdefghijklmnopqrstuvwxyz0123456789'"}
    )
    fire(store, "PreToolUse", data)
    raw = b"".join(p.read_bytes() for p in store.glob("catalog.sqlite3*"))
    assert b"ghp_abcdef" not in raw
    assert "GITHUB_TOKEN_REDACTED" in spool_rows(store)[0][1]


def test_long_response_is_chunked_with_a_shared_response_id(tmp_path: Path) -> None:
    store = tmp_path / "s"
    answer = " ".join(f"word{i}" + ("." if i % 12 == 11 else "") for i in range(1200))
    fire(store, "Stop", payload("Stop", last_assistant_message=answer))
    with open_fake(store) as memory:
        memory.drain_spool()
        chunks = sorted(memory.list(limit=100), key=lambda m: m.chunk.index if m.chunk else -1)
        assert len(chunks) == 8
        assert len({m.metadata["response_id"] for m in chunks}) == 1
        assert [m.chunk.index for m in chunks if m.chunk] == list(range(8))
        assert all(m.chunk and m.chunk.total == 8 and m.source.value == "response" for m in chunks)
    fire(store, "SessionEnd", payload("SessionEnd", last_assistant_message=answer))
    with open_fake(store) as memory:
        memory.drain_spool()
        assert len(memory.list(limit=100)) == 8  # the same answer at SessionEnd is not stored again


def test_transcript_reading(tmp_path: Path) -> None:
    assert last_assistant_text(FIXTURES / "transcript.jsonl").startswith("The loader calls yaml.safe_load")
    assert last_assistant_text(tmp_path / "missing.jsonl") == ""
    broken = tmp_path / "t.jsonl"
    broken.write_text('{"type": "assistant", "message": {"content": "plain answer"}}\nnot json\n')
    assert last_assistant_text(broken) == "plain answer"


def test_record_building_is_pure() -> None:
    record, warnings = build_record(
        "PostToolUseFailure",
        {"session_id": "s", "tool_name": "Bash", "tool_input": {"command": "make"}, "error": "exit 2"},
        1.0,
    )
    assert record["memories"][0]["content"] == "Ran `make`: failed: exit 2"
    assert record["memories"][0]["metadata"]["success"] is False and warnings == []


def test_a_broken_spooled_event_is_set_aside_not_retried_forever(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = tmp_path / "s"
    fire(store, "UserPromptSubmit", payload("UserPromptSubmit"))
    fire(store, "PostToolUse", payload("PostToolUse"))
    with sqlite3.connect(store / "catalog.sqlite3") as conn:
        conn.execute("UPDATE spool SET payload = '{\"broken\": true}' WHERE kind = 'UserPromptSubmit'")
    with caplog.at_level(logging.WARNING), open_fake(store) as memory:
        assert memory.drain_spool() == 2
        assert len(memory.list()) == 1  # the good event behind it is stored
        assert memory.engine.catalog.read("SELECT count(*) FROM spool")[0][0] == 0
    (rejected,) = (store / "spool-rejected.jsonl").read_text().splitlines()
    assert "KeyError" in json.loads(rejected)["error"] and json.loads(rejected)["kind"] == "UserPromptSubmit"
    assert (store / "spool-rejected.jsonl").stat().st_mode & 0o777 == 0o600
    assert "set aside in spool-rejected.jsonl" in caplog.text


def test_embedding_failure_keeps_the_event_for_a_retry(tmp_path: Path) -> None:
    from remindful.embed import FakeEmbedder
    from remindful.errors import EmbedderError

    class Broken(FakeEmbedder):
        def embed(self, texts: Any) -> Any:
            raise EmbedderError("Failed to generate embeddings for memory: minilm failed with test error")

    store = tmp_path / "s"
    fire(store, "PostToolUse", payload("PostToolUse"))
    with open_fake(store, embedder=Broken()) as memory:  # ERR-P1-01: not stored, error kept, no crash
        assert memory.drain_spool() == 1
        assert memory.engine.catalog.count() == 0
        row = memory.engine.catalog.read("SELECT attempts, last_error FROM spool")[0]
        assert row[0] == 1 and "Failed to generate embeddings" in row[1]
    with open_fake(store) as memory:  # the next drain stores it
        memory.drain_spool()
        assert len(memory.list()) == 1
        assert memory.stats().spool_pending == 0


def test_a_hook_writes_into_a_catalog_made_before_its_tables_were_created_at_open(tmp_path: Path) -> None:
    """A schema-6 catalog has no capture_stats table: the hook creates what it writes (the DDL of
    engine/schema.py), and the next open brings the catalog up to date without losing the counts."""
    store = tmp_path / "s"
    with open_fake(store) as memory:
        memory.store("an older memory")
    with sqlite3.connect(store / "catalog.sqlite3") as conn:
        conn.executescript("DROP TABLE capture_stats; DROP TABLE spool_done; PRAGMA user_version = 6;")
    data = {"session_id": "old", "tool_name": "Bash", "tool_input": {"command": "mail bob@example.com"}}
    assert fire(store, "PostToolUse", data) == (0, "")
    with open_fake(store) as memory:
        memory.drain_spool()
        assert memory.stats().capture == {"redacted_email": 1}
        assert {m.content for m in memory.list()} == {"an older memory", "Ran `mail [EMAIL_REDACTED]`: ok"}
    with sqlite3.connect(store / "catalog.sqlite3") as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] >= 7


def test_context_not_ready_by_the_deadline_is_left_out_and_logged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A context that would come after the hook's timeout is not printed at all (not even late,
    half-way through the exit), and the log says so; the event is still captured."""
    import threading

    from remindful.shells import hook

    release, entered = threading.Event(), threading.Event()

    def slow_context(*args: Any) -> str:
        entered.set()
        release.wait(30)
        return "Relevant memories: too late"

    monkeypatch.setattr(hook, "context_text", slow_context)
    monkeypatch.setitem(hook.CONTEXT_DEADLINE_S, "UserPromptSubmit", 0.05)
    store = tmp_path / "s"
    code, out = fire(store, "UserPromptSubmit", payload("UserPromptSubmit"), context=True)
    assert code == 0 and out == ""
    assert entered.wait(30)
    release.set()
    assert "no context for UserPromptSubmit: not ready within 0.05 s" in (store / "logs" / "hooks.log").read_text()
    assert len(spool_rows(store)) == 1


def test_context_ready_in_time_is_printed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from remindful.shells import hook

    monkeypatch.setattr(hook, "context_text", lambda *args: "Relevant memories: in time")
    code, out = fire(tmp_path / "s", "UserPromptSubmit", payload("UserPromptSubmit"), context=True)
    assert code == 0
    assert json.loads(out)["hookSpecificOutput"]["additionalContext"] == "Relevant memories: in time"


def test_every_hook_memory_records_whose_words_it_holds(tmp_path: Path) -> None:
    """The prompt is the user's, the answer the assistant's, a tool call its tool's, a fetched page
    its address's (redacted as the line is); what is learned from the turn, the user's."""
    store = tmp_path / "s"
    token = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    fire(store, "UserPromptSubmit", payload("UserPromptSubmit", prompt="FYI: the staging database listens on 6543."))
    fire(store, "PostToolUse", payload("PostToolUse", tool_name="Bash", tool_input={"command": "make test"}))
    fetch = {"url": f"https://docs.example.com/deploy?token={token}", "prompt": "read it"}
    fire(store, "PostToolUse", payload("PostToolUse", tool_name="WebFetch", tool_input=fetch, tool_use_id="toolu_w"))
    fire(store, "Stop", payload("Stop", last_assistant_message="The tests pass."))
    with open_fake(store) as memory:
        memory.drain_spool()
        found = memory.list(session_id="sess-abc123", limit=50)
    origins = {m.content: m.origin for m in found}
    assert origins["FYI: the staging database listens on 6543."] == "user"
    assert origins["The tests pass."] == "assistant"
    assert [o for c, o in origins.items() if c.startswith("Ran `make test`")] == ["tool:Bash"]
    (page,) = [m.origin for m in found if m.content.startswith("Fetched")]
    assert page.startswith("web:https://docs.example.com/deploy") and token not in page
    learned = [m for m in found if m.type.value == "knowledge"]
    assert [(m.content, m.origin) for m in learned] == [("The staging database listens on 6543.", "user")]
