"""The Markdown watcher with real files and real file events in a tmp directory."""

from __future__ import annotations

import errno
import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from remindful.api import MemoryManager
from remindful.errors import RemindfulError
from remindful.services.ingest.watcher import SYSCTL_HINT, MarkdownWatcher
from remindful.testing import open_fake


def words(n: int, tag: str = "w") -> str:
    return " ".join(f"{tag}{i}" for i in range(n))


def chunks_of(memory: MemoryManager, path: Path) -> list[Any]:
    found = [
        m for m in memory.list(type="document", limit=10_000) if m.metadata.get("file_path") == str(path.resolve())
    ]
    return sorted(found, key=lambda m: m.metadata["chunk_index"])


@pytest.fixture
def memory(tmp_path: Path) -> Iterator[MemoryManager]:
    with open_fake(tmp_path / "store") as manager:
        yield manager


def wait_for(condition: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def test_create_modify_unchanged_delete(memory: MemoryManager, tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    note = docs / "test.md"
    note.write_text(words(500))
    watcher = MarkdownWatcher(memory.engine, [docs])
    assert watcher.process_file(note) == "indexed"
    first = chunks_of(memory, note)
    assert len(first) == 3  # TC-P1-05
    meta = first[1].metadata
    assert (meta["chunk_index"], meta["total_chunks"], meta["word_offset"]) == (1, 3, 150)
    assert len(meta["file_hash"]) == 64 and first[1].source.value == "md_file"
    assert first[1].chunk is not None and first[1].chunk.parent_id == str(note.resolve())
    assert watcher.process_file(note) == "unchanged"
    note.write_text(words(1000, "v"))
    assert watcher.process_file(note) == "indexed"
    second = chunks_of(memory, note)
    assert len(second) == 7  # TC-P1-06 with the spec's exact stride (see chunker docstring)
    assert not {m.id for m in first} & {m.id for m in memory.list(type="document", limit=1000)}
    assert all(m.content.startswith("v") for m in second)
    note.unlink()
    assert watcher.handle("deleted", str(note)) == "removed"
    assert chunks_of(memory, note) == []
    assert memory.engine.catalog.read("SELECT count(*) FROM file_hashes")[0][0] == 0


def test_non_utf8_and_large_files(memory: MemoryManager, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    bad = tmp_path / "bad.md"
    bad.write_bytes(b"caf\xe9 \xff\xfe")
    big = tmp_path / "big.md"
    big.write_text(("Lorem ipsum dolor sit amet. " * 40_000)[:1_100_000])
    watcher = MarkdownWatcher(memory.engine, [tmp_path])
    with caplog.at_level(logging.INFO, "remindful.services.ingest"):
        counts = watcher.scan()
    assert f"Skipping non-UTF8 file: {bad.resolve()}" in caplog.text
    assert f"Large file {big.resolve()} will create" in caplog.text
    assert counts == {"skipped": 1, "indexed": 1}
    assert len(chunks_of(memory, big)) > 1000


def test_file_vanishing_mid_read_keeps_its_chunks(
    memory: MemoryManager, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    note = tmp_path / "a.md"
    note.write_text(words(300))
    watcher = MarkdownWatcher(memory.engine, [tmp_path])
    watcher.process_file(note)
    note.write_text(words(300, "new"))

    def vanish(self: Path) -> bytes:
        raise FileNotFoundError(2, "No such file or directory", str(self))

    monkeypatch.setattr(Path, "read_bytes", vanish)
    with caplog.at_level(logging.ERROR, "remindful.services.ingest"):
        assert watcher.process_file(note) == "vanished"
    assert "disappeared while reading" in caplog.text
    assert len(chunks_of(memory, note)) == 2


def test_missing_directory_is_an_error_at_start(memory: MemoryManager, tmp_path: Path) -> None:
    with pytest.raises(RemindfulError, match=f"Watch directory does not exist: {tmp_path / 'nope'}"):
        MarkdownWatcher(memory.engine, [tmp_path / "nope"])


def test_files_trigger_off_and_redaction(tmp_path: Path) -> None:
    note = tmp_path / "docs" / "n.md"
    note.parent.mkdir()
    note.write_text("Contact ops@example.com for the deploy key.")
    with open_fake(tmp_path / "off", **{"auto_capture.triggers.files": False}) as memory:
        assert MarkdownWatcher(memory.engine, [note.parent]).process_file(note) == "skipped"
        assert memory.list() == []
    with open_fake(tmp_path / "on") as memory:
        MarkdownWatcher(memory.engine, [note.parent]).process_file(note)
        assert memory.list()[0].content == "Contact [EMAIL_REDACTED] for the deploy key."


def test_scan_forgets_files_deleted_while_not_watching(memory: MemoryManager, tmp_path: Path) -> None:
    note = tmp_path / "gone.md"
    note.write_text(words(20))
    (tmp_path / "notes.txt").write_text("not markdown")
    watcher = MarkdownWatcher(memory.engine, [tmp_path])
    assert watcher.scan() == {"indexed": 1}
    note.unlink()
    assert watcher.scan() == {"removed": 1}
    assert memory.list() == []


@pytest.mark.slow
def test_real_file_events(memory: MemoryManager, tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    (docs / "sub").mkdir(parents=True)
    (docs / "old.md").write_text(words(50, "old"))
    watcher = MarkdownWatcher(memory.engine, [docs])
    stop = threading.Event()
    thread = threading.Thread(target=watcher.run, args=(stop,), daemon=True)
    thread.start()
    try:
        assert wait_for(lambda: len(chunks_of(memory, docs / "old.md")) == 1), "initial scan"
        time.sleep(0.3)  # let the OS watch settle
        note = docs / "sub" / "new.md"
        note.write_text(words(400, "a"))
        assert wait_for(lambda: len(chunks_of(memory, note)) == 3), "created"
        note.write_text(words(100, "b"))
        assert wait_for(lambda: [m.content[:2] for m in chunks_of(memory, note)] == ["b0"]), "modified"
        (docs / "ignored.txt").write_text("x")
        note.unlink()
        assert wait_for(lambda: chunks_of(memory, note) == []), "deleted"
        assert len(chunks_of(memory, docs / "old.md")) == 1
    finally:
        stop.set()
        thread.join(10)
    assert not thread.is_alive()


def test_watch_limit_gives_the_sysctl_and_falls_back_to_polling(
    memory: MemoryManager, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import watchfiles

    calls: list[Any] = []

    def fake_watch(*dirs: Any, **kwargs: Any) -> Iterator[Any]:
        calls.append(kwargs.get("force_polling"))
        if len(calls) == 1:
            raise OSError(errno.ENOSPC, "OS file watch limit reached. about [...]")
        kwargs["stop_event"].set()
        return iter(())

    monkeypatch.setattr(watchfiles, "watch", fake_watch)
    watcher = MarkdownWatcher(memory.engine, [tmp_path])
    with caplog.at_level(logging.ERROR, "remindful.services.ingest"):
        watcher.run(threading.Event(), initial_scan=False)
    assert calls == [None, True]
    assert SYSCTL_HINT in caplog.text and "fs.inotify.max_user_watches" in caplog.text
