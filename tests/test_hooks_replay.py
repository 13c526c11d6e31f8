"""Replay keys: a replayed event is spooled once, and distinct events are never taken for replays —
above all Stop events without ``last_assistant_message``, whose answer is read from the transcript
(issue 27: ten such answers in one session, two stored)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from remindful.embed import FakeEmbedder
from remindful.services.ingest.events import build_record, idem_key
from remindful.shells.hook import run
from remindful.testing import open_fake


def answer_turn(transcript: Path, n: int, text: str) -> None:
    """Append one prompt and the assistant's answer to a Claude Code transcript (JSONL)."""
    with transcript.open("a", encoding="utf-8") as f:
        f.write(json.dumps({"type": "user", "uuid": f"u{n}", "message": {"role": "user", "content": f"q{n}"}}) + "\n")
        entry = {
            "type": "assistant",
            "uuid": f"a{n}",
            "message": {"role": "assistant", "content": [{"type": "text", "text": text}]},
        }
        f.write(json.dumps(entry) + "\n")


def stop_payload(transcript: Path) -> dict[str, Any]:
    """What Claude Code sends at Stop (no last_assistant_message in older versions): the same every turn."""
    return {
        "session_id": "sess-1",
        "transcript_path": str(transcript),
        "cwd": "/home/dev/project",
        "permission_mode": "default",
        "hook_event_name": "Stop",
        "stop_hook_active": False,
    }


def hook(store: Path, event: str, payload: dict[str, Any]) -> None:
    assert run(["--path", str(store), "hook", event, "--no-context"], stdin=io.StringIO(json.dumps(payload))) == 0


def test_ten_stop_events_of_one_session_store_ten_answers(tmp_path: Path) -> None:
    store, transcript = tmp_path / "store", tmp_path / "t.jsonl"
    for n in range(10):
        answer_turn(transcript, n, f"Answer {n}: step {n} of the migration is done and verified.")
        hook(store, "Stop", stop_payload(transcript))
    with open_fake(store) as memory:
        memory.drain_spool()
        kept = memory.list(session_id="sess-1", limit=100)
    said = sorted(f"Answer {n}: step {n} of the migration is done and verified." for n in range(10))
    assert sorted(m.content for m in kept if m.type.value == "conversation") == said
    # each answer is also learned once as the assistant's observation (2eb6052), no more
    learned = [m for m in kept if m.type.value == "knowledge"]
    assert sorted(m.content for m in learned) == said
    assert {(m.origin, m.metadata["category"]) for m in learned} == {("assistant", "observation")}
    assert len(kept) == 20


def test_a_replayed_stop_is_spooled_once(tmp_path: Path) -> None:
    store, transcript = tmp_path / "store", tmp_path / "t.jsonl"
    answer_turn(transcript, 0, "The build passes on Python 3.11 and 3.12.")
    hook(store, "Stop", stop_payload(transcript))
    hook(store, "Stop", stop_payload(transcript))  # the same event again: nothing new in the transcript
    with open_fake(store, embedder=FakeEmbedder()) as memory:
        catalog = memory.engine.catalog
        assert catalog.read("SELECT count(*) FROM spool WHERE kind = 'Stop'")[0][0] == 1


def test_keys_follow_the_turn_not_only_the_payload(tmp_path: Path) -> None:
    transcript = tmp_path / "t.jsonl"
    answer_turn(transcript, 0, "Same words.")
    first, _ = build_record("Stop", stop_payload(transcript), 1.0)
    answer_turn(transcript, 1, "Same words.")  # the same answer in a later turn is another event
    second, _ = build_record("Stop", stop_payload(transcript), 2.0)
    keys = {idem_key("Stop", stop_payload(transcript), record) for record in (first, second)}
    assert len(keys) == 2
    again, _ = build_record("Stop", stop_payload(transcript), 3.0)
    assert idem_key("Stop", stop_payload(transcript), again) == idem_key("Stop", stop_payload(transcript), second)
    with_message = {**stop_payload(transcript), "last_assistant_message": "Given by the agent."}
    record, _ = build_record("Stop", with_message, 4.0)
    assert idem_key("Stop", with_message, record) != idem_key("Stop", stop_payload(transcript), second)


def test_an_event_whose_drain_failed_is_stored_by_the_next_drain_not_skipped_as_its_own_repeat(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """The capture filters' min-interval memory saw the event at the failed drain: the retry took it
    for a repeat of itself and finished it unstored (found by the PostgreSQL fault test: the batch
    in flight at each kill -9 was lost)."""
    from remindful.errors import StorageError

    store = tmp_path / "store"
    hook(
        store, "UserPromptSubmit", {"session_id": "sess-1", "prompt": "the staging port is 8443", "cwd": str(tmp_path)}
    )
    with open_fake(store) as memory:
        engine = memory.engine
        real = engine.store_batch
        calls = []

        def failing_once(items: Any, **kwargs: Any) -> list[str]:
            calls.append(len(items))
            if len(calls) == 1:
                raise StorageError("the catalog does not answer")
            return real(items, **kwargs)

        monkeypatch.setattr(engine, "store_batch", failing_once)
        with pytest.raises(StorageError):
            memory.drain_spool()
        memory.drain_spool()
        assert [m.content for m in memory.list(type="conversation", limit=10)] == ["the staging port is 8443"]
