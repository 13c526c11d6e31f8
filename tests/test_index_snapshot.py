"""The compact copy of the index's vectors a fresh process's first searches scan while the index
opens (remindful.engine.index_snapshot): same answers as the index, kept in step by every write,
never used once something else wrote the index. Real Chroma; the store counts as large here
(``flat.MAX_ROWS`` lowered), as a store of a million memories does."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import remindful
from remindful.engine import flat as flat_module
from remindful.engine import index_snapshot
from remindful.engine.index_locks import IndexLock
from remindful.engine.index_snapshot import FILE_NAME, PENDING_SUFFIX, VectorSnapshot, record_dtype, records
from remindful.model import MemoryType
from remindful.testing import FakeEmbedder

TOPICS = ["deploy", "lunch", "invoice", "backup", "kernel", "garden", "piano", "ferry", "tax", "oven"]


@pytest.fixture(autouse=True)
def large(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(flat_module, "MAX_ROWS", 40)


@pytest.fixture
def scans(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many results each scan of the snapshot gave, in order."""
    seen: list[int] = []
    query = VectorSnapshot.query

    def counting(self: VectorSnapshot, *args: Any, **kwargs: Any) -> list[tuple[str, float]]:
        found = query(self, *args, **kwargs)
        seen.append(len(found))
        return found

    monkeypatch.setattr(VectorSnapshot, "query", counting)
    return seen


def open_store(path: Path) -> Any:
    return remindful.open(path, embedder=FakeEmbedder(), **{"search.min_score": 0.0, "context.min_score": 0.0})


def texts(n: int, start: int = 0) -> list[str]:
    return [f"note {i} about the {TOPICS[i % len(TOPICS)]} and item{i} in week {i // 7}" for i in range(start, n)]


def ids_of(memory: Any, query: str, **kwargs: Any) -> list[str]:
    return [hit.id for hit in memory.search(query, limit=5, **kwargs)]


Answer = list[tuple[str, float]]


def answer_of(memory: Any, query: str) -> Answer:
    return [(hit.id, round(hit.score, 6)) for hit in memory.search(query, limit=5)]


def assert_same_answers(got: list[Answer], want: list[Answer]) -> None:
    """The same scores at every rank and the same memories above the last score. Memories tied
    with the last one are equally right there: these texts tie by the dozen under the hashing
    embedder, and which of the tied ones an approximate index hands back as candidates is its own
    choice (it follows the order its batches were written in)."""
    for one, other in zip(got, want, strict=True):
        assert [score for _, score in one] == [score for _, score in other]
        last = one[-1][1] if one else 0.0
        assert [mid for mid, score in one if score > last] == [mid for mid, score in other if score > last]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Path]:
    """A store of 120 memories whose snapshot a search wrote (a fresh process's first search,
    finding none, waits for the index and has the snapshot written once it is open)."""
    path = tmp_path / "s"
    with open_store(path) as memory:
        memory.store_batch([{"content": t} for t in texts(120)])
        memory.flush()
    assert not (path / FILE_NAME).exists()
    with open_store(path) as memory:
        memory.search("warm")
        assert memory.engine.mirror.settle(timeout=60)  # the snapshot written (a flush does not wait for it)
    assert (path / FILE_NAME).exists()
    yield path


QUERIES = ["item17 kernel", "the garden in week 3", "piano note", "ferry item88", "tax"]


def test_a_fresh_process_answers_its_first_searches_from_the_snapshot_as_the_index_does(
    store: Path, scans: list[int]
) -> None:
    with open_store(store) as memory:
        first = [answer_of(memory, q) for q in QUERIES]
        assert scans and all(n > 0 for n in scans)  # the snapshot answered
        memory.flush()  # the index opened meanwhile, in the background
        scanned = len(scans)
        later = [answer_of(memory, q) for q in QUERIES]
        assert len(scans) == scanned  # the index answered these
    assert_same_answers(first, later)


def test_writes_carry_the_snapshot_along(store: Path, scans: list[int]) -> None:
    with open_store(store) as memory:
        memory.search("warm")
        memory.flush()
        added = memory.store("the zeppelin hangar opens on friday")
        changed = ids_of(memory, "item17 kernel")[0]
        memory.update(changed, content="the walrus sleeps on the pier")
        gone = ids_of(memory, "ferry item88")[0]
        memory.delete(gone)
        memory.flush()
        asked = ("zeppelin hangar friday", "walrus pier", "ferry item88", "item17 kernel")
        expected = [answer_of(memory, q) for q in asked]
    scans.clear()
    with open_store(store) as memory:
        first = [answer_of(memory, q) for q in asked]
        assert scans  # still matching the index files: used
    assert_same_answers(first, expected)
    assert first[0][0][0] == added and first[1][0][0] == changed
    assert gone not in [mid for mid, _ in first[2]]
    with open_store(store) as memory:  # its old vector, still in the file, is not the one scored
        snapshot = VectorSnapshot(store / FILE_NAME, store / "index.lock", memory.engine.catalog)
        header = snapshot.header()
        assert header is not None and header.repeats
        query = memory.engine.embedder.embed(["item17 kernel"])[0]
        scored: dict[str, float] = {}
        for mid, score in snapshot.query(header, list(MemoryType), query, 200):
            scored.setdefault(mid, score)  # best first
        now = memory.engine.catalog.embeddings([changed])[changed]
        assert scored[changed] == pytest.approx(float(np.dot(now, query)), abs=0.01)


def test_a_write_that_does_not_carry_it_along_leaves_it_unused_until_it_is_written_again(
    store: Path, scans: list[int]
) -> None:
    with open_store(store) as memory:
        expected = [answer_of(memory, q) for q in QUERIES]
    with IndexLock(store / "index.lock")():  # another build of remindful writes the index, say
        pass
    scans.clear()
    with open_store(store) as memory:
        first = [answer_of(memory, q) for q in QUERIES]
        assert not scans  # stale: the search waited for the index
        assert memory.engine.mirror.settle(timeout=60)  # and the snapshot was written again once it opened
    assert_same_answers(first, expected)
    with open_store(store) as memory:
        assert_same_answers([answer_of(memory, q) for q in QUERIES], expected)
        assert scans


@pytest.mark.parametrize("rebuild", ["reindex", "restore"])
def test_a_reindex_or_a_restore_leaves_it_written_for_the_next_process(
    store: Path, scans: list[int], rebuild: str
) -> None:
    """A reindex and a restore write the index whole without carrying the file along: they write
    the file whole too, before they return, so that the next fresh process's first searches do
    not wait for the index (10.6 s at 1,000,000 memories)."""
    with open_store(store) as memory:
        if rebuild == "reindex":
            memory.reindex()
        else:
            archive = memory.backup("before").path
            memory.store("a note the restore takes away again")
            memory.restore(archive, confirm=True)
        expected = [answer_of(memory, q) for q in QUERIES]
    snapshot = VectorSnapshot(store / FILE_NAME, store / "index.lock", None)  # type: ignore[arg-type]
    assert snapshot.usable(IndexLock(store / "index.lock").generation()) is not None
    scans.clear()
    with open_store(store) as memory:
        first = [answer_of(memory, q) for q in QUERIES]
        assert scans and all(n > 0 for n in scans)  # the snapshot answered
    assert_same_answers(first, expected)


def test_a_rowid_given_to_a_later_row_is_not_taken_for_the_old_one(store: Path, scans: list[int]) -> None:
    with open_store(store) as memory:
        newest = memory.store("the office closes at six")
        memory.flush()
    with open_store(store) as memory:
        memory.delete(newest)
        successor = memory.store("lunch is served at noon by the canteen")  # SQLite gives it the same rowid
        memory.flush()
    scans.clear()
    with open_store(store) as memory:
        assert newest not in ids_of(memory, "office closes six")
        assert ids_of(memory, "lunch served noon canteen")[0] == successor
        assert scans
        # The file without the successor's record (as while it is not indexed yet): the old
        # record of that rowid is not taken for it.
        snapshot = VectorSnapshot(store / FILE_NAME, store / "index.lock", memory.engine.catalog)
        header = snapshot.header()
        assert header is not None
        size = (store / FILE_NAME).stat().st_size
        with open(store / FILE_NAME, "r+b") as f:
            f.truncate(size - record_dtype(header.dimension).itemsize)
        query = memory.engine.embedder.embed(["the office closes at six"])[0]
        assert successor not in dict(snapshot.query(header, list(MemoryType), query, 3))


def test_it_is_written_whole_again_once_it_holds_many_deleted_rows(store: Path) -> None:
    with open_store(store) as memory:
        gone = [r[0] for r in memory.engine.catalog.read("SELECT id FROM memories ORDER BY rowid LIMIT 40")]
        assert memory.delete_many(gone) == 40
        memory.flush()
    snapshot = VectorSnapshot(store / FILE_NAME, store / "index.lock", None)  # type: ignore[arg-type]
    header = snapshot.header()
    assert header is not None and snapshot.records_held(header) == 120  # carried along, still holding them
    with open_store(store) as memory:
        found = {mid for q in QUERIES for mid in ids_of(memory, q)}
        assert not found & set(gone)
        assert memory.engine.mirror.settle(timeout=60)  # the index opened: the file was written again
    header = snapshot.header()
    assert header is not None and snapshot.records_held(header) == 80


def test_a_flush_does_not_wait_for_the_snapshot_to_be_written(store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Writing the file whole is upkeep for the next process (~6 s at 1,000,000 memories): a flush
    waits for this process's writes, not for it (it waited 9.95 s there before)."""
    with IndexLock(store / "index.lock")():  # stale: the next process writes it whole
        pass
    started, release = threading.Event(), threading.Event()
    rebuild = VectorSnapshot.rebuild

    def held(self: VectorSnapshot, *args: Any, **kwargs: Any) -> bool:
        started.set()
        release.wait(30)
        return rebuild(self, *args, **kwargs)

    monkeypatch.setattr(VectorSnapshot, "rebuild", held)
    try:
        with open_store(store) as memory:
            memory.search("warm")  # opens the index, then has the file written
            assert started.wait(30)
            assert memory.flush(timeout=5)  # nothing of this process's to index: at once
            release.set()
            assert memory.engine.mirror.settle(timeout=30)  # the upkeep itself can be waited for
            generation = IndexLock(store / "index.lock").generation()
            assert VectorSnapshot(store / FILE_NAME, store / "index.lock", None).usable(generation)  # type: ignore[arg-type]
    finally:
        release.set()


class Pause:
    """Holds the first reading of the rows while the file is written whole, ``before`` it reads
    them or ``after``: ``held`` is set once it is held, ``release`` lets it go on (``let_go`` is
    set once it did, or gave up waiting); ``readings``: one entry a reading."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, pause: str) -> None:
        self.held, self.release, self.let_go = threading.Event(), threading.Event(), threading.Event()
        self.readings: list[int] = []
        write_rows = VectorSnapshot._write_rows

        def paused(snapshot: VectorSnapshot, *args: Any, **kwargs: Any) -> tuple[int, int]:
            self.readings.append(1)
            first = len(self.readings) == 1
            if first and pause == "before":
                self.hold()
            result = write_rows(snapshot, *args, **kwargs)
            if first and pause == "after":
                self.hold()
            return result

        monkeypatch.setattr(VectorSnapshot, "_write_rows", paused)

    def hold(self) -> None:
        self.held.set()
        self.release.wait(60)
        self.let_go.set()


@contextlib.contextmanager
def rewriting(store: Path, monkeypatch: pytest.MonkeyPatch, when: str) -> Iterator[tuple[Any, Pause]]:
    """A process of the store whose snapshot another writer left stale, writing it whole after its
    first search, its reading of the rows held (``when``: before it reads them, or after)."""
    with IndexLock(store / "index.lock")():  # another writer: stale
        pass
    pause = Pause(monkeypatch, when)
    try:
        with open_store(store) as memory:
            memory.search("warm")  # opens the index, then has the file written
            assert pause.held.wait(30)
            yield memory, pause
    finally:
        pause.release.set()


def usable_now(store: Path) -> bool:
    generation = IndexLock(store / "index.lock").generation()
    snapshot = VectorSnapshot(store / FILE_NAME, store / "index.lock", None)  # type: ignore[arg-type]
    return snapshot.usable(generation) is not None


@pytest.mark.parametrize("when", ["before", "after"])
def test_writes_go_on_while_it_is_written_whole_and_are_in_it(
    store: Path, scans: list[int], monkeypatch: pytest.MonkeyPatch, when: str
) -> None:
    """Writing it whole reads every indexed row (5-6 s at 1,000,000 memories), not under the index
    lock that writers need: a store, an update and a delete made meanwhile (here while the reading
    is held, before it reads the rows or after) are indexed at once, and are in the file."""
    asked = ("zeppelin hangar friday", "walrus pier", "ferry item88", "item17 kernel")
    with rewriting(store, monkeypatch, when) as (memory, pause):
        added = memory.store("the zeppelin hangar opens on friday")
        changed = ids_of(memory, "item17 kernel")[0]
        memory.update(changed, content="the walrus sleeps on the pier")
        gone = ids_of(memory, "ferry item88")[0]
        memory.delete(gone)
        assert memory.flush(timeout=10)
        assert not pause.let_go.is_set()  # indexed while the rows were being read
        pause.release.set()
        assert memory.engine.mirror.settle(timeout=60)
        expected = [answer_of(memory, q) for q in asked]
    assert len(pause.readings) == 1  # the writes meanwhile came from the pending file: the rows read once
    assert not (store / (FILE_NAME + PENDING_SUFFIX)).exists()
    assert usable_now(store)
    scans.clear()
    with open_store(store) as memory:
        first = [answer_of(memory, q) for q in asked]
        assert scans and all(n > 0 for n in scans)  # the file answered
    assert_same_answers(first, expected)
    assert first[0][0][0] == added and first[1][0][0] == changed
    assert gone not in [mid for mid, _ in first[2]]


def test_a_write_that_leaves_nothing_while_it_is_written_has_the_rows_read_again(
    store: Path, scans: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write that does not say what it wrote (another build of remindful, a backup's hold of the
    lock) while the rows are read: they are read again under the lock, and the file still matches."""
    with rewriting(store, monkeypatch, "after") as (memory, pause):
        with IndexLock(store / "index.lock")():  # the other writer
            pass
        pause.release.set()
        assert memory.engine.mirror.settle(timeout=60)
        expected = [answer_of(memory, q) for q in QUERIES]
    assert len(pause.readings) == 2
    assert usable_now(store)
    scans.clear()
    with open_store(store) as memory:
        assert_same_answers([answer_of(memory, q) for q in QUERIES], expected)
        assert scans


def test_a_pending_file_no_rebuild_holds_is_not_written_to(store: Path) -> None:
    """A rebuild that died left its pending file: writes do not grow it for nobody."""
    pending = store / (FILE_NAME + PENDING_SUFFIX)
    pending.write_bytes(b"RMVPEND1")
    with open_store(store) as memory:
        memory.search("warm")
        memory.store("the zeppelin hangar opens on friday")
        assert memory.flush(timeout=30)
        assert memory.engine.mirror.settle(timeout=60)
    assert pending.read_bytes() == b"RMVPEND1"
    assert usable_now(store)


CHILD_WRITE = """
import sys
import remindful
from remindful.testing import FakeEmbedder
with remindful.open(sys.argv[1], embedder=FakeEmbedder()) as memory:
    print(memory.store("the lighthouse keeper feeds the gulls at dawn"))
    assert memory.flush(timeout=60)
"""


def test_another_process_writes_while_it_is_written_whole_and_its_vectors_are_in_it(
    store: Path, scans: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """As a hook process does while a server writes the file whole: its write is indexed at once
    and leaves its vectors for the file (the pending file is shared through the directory)."""
    with rewriting(store, monkeypatch, "after") as (memory, pause):
        child = subprocess.run(
            [sys.executable, "-c", CHILD_WRITE, str(store)], capture_output=True, text=True, timeout=120
        )
        assert child.returncode == 0, child.stderr
        added = child.stdout.split()[-1]
        assert not pause.let_go.is_set()  # the child did not wait for the rows to be read
        pause.release.set()
        assert memory.engine.mirror.settle(timeout=60)
    assert len(pause.readings) == 1
    assert usable_now(store)
    scans.clear()
    with open_store(store) as memory:
        assert ids_of(memory, "lighthouse keeper gulls dawn")[0] == added
        assert scans and all(n > 0 for n in scans)


def test_a_write_torn_in_the_pending_file_is_written_over(tmp_path: Path) -> None:
    """A writer that died as it added its records left part of them: the next write goes where
    they began, and the rebuild reads the whole writes only (the torn one's generation is missing,
    or written again by the next holder of the lock)."""
    snapshot = VectorSnapshot(tmp_path / FILE_NAME, tmp_path / "index.lock", None)  # type: ignore[arg-type]
    blob = np.concatenate([[113], np.zeros(4, np.uint8), np.arange(8, dtype=np.uint8)]).astype(np.uint8).tobytes()
    one = records([7], ["m7"], ["conversation"], [blob])
    two = records([8], ["m8"], ["conversation"], [blob])
    with snapshot._collecting() as fd:
        snapshot._leave_pending([one], 5)
        pending = tmp_path / (FILE_NAME + PENDING_SUFFIX)
        whole = pending.stat().st_size
        with open(pending, "ab") as f:
            f.write(index_snapshot._CHUNK.pack(6, 8, 3) + two.tobytes() * 2)  # says three records, holds two
        snapshot._leave_pending([], 6)
        snapshot._leave_pending([two], 7)
        got = index_snapshot._read_pending(fd)
        assert pending.stat().st_size == whole + 2 * index_snapshot._CHUNK.size + two.nbytes
    assert [(g, [int(r) for r in part["rowid"]]) for g, part in got] == [(5, [7]), (6, []), (7, [8])]
    assert not pending.exists()  # removed as the rebuild ends


def test_a_process_whose_first_use_is_a_write_still_keeps_it(store: Path, scans: list[int]) -> None:
    """A server whose first request stores (a hook's event) opens the index for that write: its
    first search still has the stale file written whole, for the next process's first searches."""
    with IndexLock(store / "index.lock")():
        pass
    with open_store(store) as memory:
        memory.store("the zeppelin hangar opens on friday")
        assert memory.flush(timeout=30)  # the index opened for the write
        assert memory.engine.mirror.settle(timeout=30)
        assert not usable_now(store)  # a write keeps no snapshot
        memory.search("warm")
        assert memory.engine.mirror.settle(timeout=60)
        expected = [answer_of(memory, q) for q in QUERIES]
    assert usable_now(store)
    scans.clear()
    with open_store(store) as memory:
        assert_same_answers([answer_of(memory, q) for q in QUERIES], expected)
        assert scans
