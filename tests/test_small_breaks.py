"""Issue 28 item 8, the smaller breaks: each one reproduced here first, then fixed.

The dashboard overview answered 500 after any cleanup (the cleanup time was a float); a metadata
``bookmarked: "no"`` bookmarked the memory; an ``importance`` of 7 or "high" was accepted and
ignored; the Stop hook hung on a transcript path naming a FIFO; ``patterns --days -1`` was
accepted; ``watch FILE`` exited 1 (a remindful error) instead of 2 (bad input).
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient
from typer.testing import CliRunner

from remindful import ValidationError
from remindful.api import MemoryManager
from remindful.services.ingest.events import last_assistant_text
from remindful.services.learning.conversation import last_assistant_message
from remindful.shells.cli.app import app
from remindful.web import build_app

TOKEN = "test-token-0123456789"


@pytest.fixture
def client(memory: MemoryManager) -> TestClient:
    return TestClient(build_app(memory, TOKEN, hosts=["testserver"]), headers={"Authorization": f"Bearer {TOKEN}"})


def test_the_dashboard_overview_answers_after_a_cleanup(memory: MemoryManager, client: TestClient) -> None:
    memory.store("something to keep", type="knowledge")
    memory.cleanup()
    page = client.get("/")
    assert page.status_code == 200, page.text[:300]  # was 500: 'float' object has no attribute 'astimezone'
    assert "last cleanup" in page.text and "UTC · 0 deleted" in page.text
    assert isinstance(memory.stats().last_cleanup["at"], str)  # ISO 8601, as last_backup's "at"


@pytest.mark.parametrize("bound", ["until", "since"])
def test_a_listing_bounded_by_the_last_representable_day_answers(client: TestClient, bound: str) -> None:
    assert client.get(f"/memories?{bound}=9999-12-31").status_code == 200


@pytest.mark.parametrize(
    ("metadata", "field"),
    [
        ({"bookmarked": "no"}, "metadata.bookmarked"),
        ({"bookmarked": 1}, "metadata.bookmarked"),
        ({"manual_save": "yes"}, "metadata.manual_save"),
        ({"importance": 7}, "metadata.importance"),
        ({"importance": "high"}, "metadata.importance"),
        ({"importance": True}, "metadata.importance"),
        ({"importance": -0.1}, "metadata.importance"),
    ],
)
def test_protected_metadata_keys_take_their_form_or_are_refused(
    memory: MemoryManager, metadata: dict[str, Any], field: str
) -> None:
    with pytest.raises(ValidationError) as info:
        memory.store("a note", metadata=metadata)
    assert info.value.field == field
    assert "\n" not in str(info.value)
    assert memory.list() == []  # nothing stored
    kept = memory.store("a note")
    with pytest.raises(ValidationError) as info:
        memory.update(kept, metadata=metadata)
    assert info.value.field == field
    assert memory.get(kept).bookmarked is False and memory.get(kept).importance == 0.5


def test_protected_metadata_keys_in_their_form_take_effect(memory: MemoryManager) -> None:
    kept = memory.store("a note", metadata={"bookmarked": False, "importance": 0.9})
    note = memory.get(kept)
    assert (note.bookmarked, note.importance) == (False, 0.9)
    updated = memory.update(kept, metadata={"bookmarked": True, "importance": 0.2})
    assert (updated.bookmarked, updated.importance) == (True, 0.2)  # importance was ignored by update
    assert memory.get(memory.store("b", metadata={"bookmarked": None, "importance": None})).importance == 0.5


def test_a_batch_names_the_item_of_a_bad_importance(memory: MemoryManager) -> None:
    with pytest.raises(ValidationError) as info:
        memory.store_batch([{"content": "fine"}, {"content": "bad", "metadata": {"importance": "high"}}])
    assert info.value.field == "items[1].metadata.importance"
    assert "expected a number from 0 to 1" in str(info.value)


def test_reading_a_transcript_that_is_a_fifo_returns_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "transcript.jsonl"
    os.mkfifo(fifo)
    # Both used to block in open() until a writer appeared: forever.
    assert last_assistant_text(fifo) == ""
    assert last_assistant_message(str(fifo)) is None
    assert last_assistant_text(tmp_path) == ""  # a directory is no transcript either


def test_the_stop_hook_does_not_hang_on_a_fifo_transcript(tmp_path: Path) -> None:
    fifo = tmp_path / "transcript.jsonl"
    os.mkfifo(fifo)
    event = {"session_id": "s-fifo", "transcript_path": str(fifo), "hook_event_name": "Stop", "cwd": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "remindful.shells.entry", "--path", str(tmp_path / "store"), "hook", "Stop"],
        input=json.dumps(event),
        capture_output=True,
        text=True,
        timeout=60,  # the hook used to block forever in open()
    )
    assert done.returncode == 0, done.stderr


@pytest.fixture
def cli_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("REMINDFUL_EMBEDDINGS__BACKEND", "fake")
    path = tmp_path / "cli-store"
    monkeypatch.setenv("MEMORY_STORAGE_PATH", str(path))
    return path


@pytest.mark.parametrize("days", ["-1", "0", "nan", "inf"])
def test_patterns_refuses_a_days_window_that_is_not_positive(cli_store: Path, days: str) -> None:
    result = CliRunner().invoke(app, ["patterns", "--days", days])
    assert result.exit_code == 2, result.output
    assert "Invalid 'days'" in result.output and "positive number" in result.output


def test_watch_names_bad_input_with_exit_2(cli_store: Path, tmp_path: Path) -> None:
    note = tmp_path / "note.md"
    note.write_text("# a note\n")
    for target in (note, tmp_path / "missing"):
        result = CliRunner().invoke(app, ["watch", str(target), "--once"])
        assert result.exit_code == 2, result.output
        assert "Invalid 'dirs'" in result.output and str(target) in result.output


def test_a_token_file_is_never_left_empty_when_its_write_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # `remindful token` on a full disk left an empty http_token: every HTTP surface then refused to start.
    from remindful.errors import StorageFullError
    from remindful.services import access

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    store = tmp_path / "store"
    monkeypatch.delenv(access.TOKEN_ENV, raising=False)
    monkeypatch.setattr(access.os, "fsync", full)
    with pytest.raises(StorageFullError, match="disk is full"):
        access.http_token(store)
    assert list(store.iterdir()) == []  # no token file, no temporary left
    monkeypatch.undo()
    monkeypatch.delenv(access.TOKEN_ENV, raising=False)
    token = access.http_token(store)
    assert len(token) > 20 and access.http_token(store) == token
    assert (store / access.TOKEN_FILE).stat().st_mode & 0o777 == 0o600


def test_a_process_that_met_a_damaged_catalog_writes_nothing_more_and_says_so(tmp_path: Path) -> None:
    # `store` on a catalog with garbled pages wrote into it, exited 0 and left a traceback of the
    # indexer, which met the damage reading the catalog. Damage met by any read now stops the writes.
    import sqlite3

    from remindful.engine.catalog import with_retries
    from remindful.errors import CorruptionError
    from remindful.testing import open_fake

    def malformed() -> None:
        raise sqlite3.DatabaseError("database disk image is malformed")

    with open_fake(tmp_path / "store") as memory:
        memory.store("stored before the damage was met")
        catalog = memory.engine.catalog
        with pytest.raises(CorruptionError):
            catalog._noting_damage(lambda: with_retries(malformed))  # as a read meeting it (the indexer's)
        with pytest.raises(CorruptionError, match="catalog database is damaged") as refused:
            memory.store("stored after")
        assert "Nothing was changed" in str(refused.value.suggestion)
        with pytest.raises(CorruptionError, match="catalog database is damaged") as flushed:
            memory.flush()
        assert "may be lost" in str(flushed.value.suggestion)
        assert [m.content for m in memory.list()] == ["stored before the damage was met"]
