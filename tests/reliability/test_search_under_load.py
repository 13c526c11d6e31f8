"""Search under write load (issue 28, item 6): a search never waits for the index writer, a store
that evicts never embeds a backlog on its caller's thread, and closing never leaves a background
thread inside the index or the catalog.

Another process writing the vector index is played by this one: it holds ``IndexLock`` on the
same file through a descriptor of its own (flock locks belong to the open file, so the store's
own attempts wait for it as they would for another process). A call that must not wait runs in a
thread of its own; :data:`DEADLOCK_GUARD_S` is not a speed target: a call that waits for the lock
waits for as long as the test holds it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pytest

from remindful.embed.fake import FakeEmbedder
from remindful.engine import mirror as mirror_module
from remindful.engine.mirror import IndexLock
from remindful.errors import EmbedderError, StorageError
from remindful.index import InMemoryIndex
from remindful.testing import open_fake

T = TypeVar("T")
DEADLOCK_GUARD_S = 60.0
WANTED = "the staging database listens on port 5433"
QUERY = "staging database port"


def answered(call: Callable[[], T]) -> T:
    """``call()``, run in a thread of its own while the test holds what it must not wait for."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(DEADLOCK_GUARD_S)
    assert not thread.is_alive(), "the call waited for what the test holds"
    if "error" in box:
        raise box["error"]
    return box["value"]  # type: ignore[no-any-return]


def seeded(path: Path) -> str:
    """Store the wanted memory among others (indexed, closed); returns its id."""
    with open_fake(path) as writer:
        wanted = writer.store(WANTED)
        writer.store_batch([{"content": f"note {i}: lunch is at noon on floor {i}"} for i in range(20)])
        assert writer.flush(timeout=30)
    return wanted


def test_the_first_search_of_a_process_does_not_wait_for_the_index_lock(tmp_path: Path) -> None:
    path = tmp_path / "s"
    wanted = seeded(path)
    reader = open_fake(path)  # has not opened the index yet
    try:
        with IndexLock(path / "index.lock")():
            hits = answered(lambda: reader.search(QUERY))
        assert hits[0].id == wanted and "dense" in hits[0].sources  # scored exactly from the catalog
    finally:
        reader.close()


def test_a_search_whose_view_is_stale_does_not_wait_for_the_index_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows another process indexed since this one loaded its view are scored exactly; when they
    grow many the view is reloaded, which needs the lock: not by the search."""
    monkeypatch.setattr(mirror_module, "PENDING_REFRESH", 5)
    path = tmp_path / "s"
    with open_fake(path) as reader:
        reader.search("open the index")
        assert reader.flush(timeout=30)
        wanted = seeded(path)  # another process
        with IndexLock(path / "index.lock")():
            hits = answered(lambda: reader.search(QUERY))
        assert hits[0].id == wanted and "dense" in hits[0].sources


class FailingQueries(InMemoryIndex):
    """Queries fail once ``failing`` is set, as Chroma's do on a view another process made stale."""

    failing = False

    def query(self, collection: str, embedding: np.ndarray, k: int) -> list[tuple[str, float]]:
        if self.failing:
            raise StorageError("Error creating hnsw segment reader: Nothing found on disk")
        return super().query(collection, embedding, k)


def test_a_search_whose_query_fails_does_not_wait_for_the_index_lock(tmp_path: Path) -> None:
    index = FailingQueries()
    path = tmp_path / "s"
    with open_fake(path, index=index) as memory:
        wanted = memory.store(WANTED)
        memory.store_batch([{"content": f"note {i}: lunch is at noon"} for i in range(20)])
        memory.search("open the index")
        assert memory.flush(timeout=30)
        index.failing = True
        with IndexLock(path / "index.lock")():
            hits = answered(lambda: memory.search(QUERY))
        assert hits[0].id == wanted and "dense" in hits[0].sources


def test_a_search_does_not_wait_for_a_write_of_another_thread(tmp_path: Path) -> None:
    """A write holds the catalog's shared connection while it waits for another process's
    transaction (up to the busy timeout, then retries): reads go around it."""
    with open_fake(tmp_path / "s") as memory:
        wanted = memory.store(WANTED)
        assert memory.flush(timeout=30)
        catalog = memory.engine.catalog
        inside, release = threading.Event(), threading.Event()

        def long_write(conn: Any) -> None:
            inside.set()
            release.wait(DEADLOCK_GUARD_S * 2)

        writer = threading.Thread(target=lambda: catalog.write(long_write), daemon=True)
        writer.start()
        assert inside.wait(30)
        try:
            hits = answered(lambda: memory.search(QUERY))
        finally:
            release.set()
            writer.join(30)
        assert hits[0].id == wanted


class FailingEmbedder(FakeEmbedder):
    def embed(self, texts: Sequence[str]) -> np.ndarray:
        raise EmbedderError("the model is away")


class RecordingEmbedder(FakeEmbedder):
    """The fake embedder, noting which thread embedded what."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: list[tuple[str, list[str]]] = []

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.threads.append((threading.current_thread().name, list(texts)))
        return super().embed(texts)


def test_a_store_that_evicts_does_not_embed_the_backlog_on_its_thread(tmp_path: Path) -> None:
    """The first eviction of a process used to open the index on the caller's thread, and the
    open embedded and indexed every row left un-indexed: one store blocked 10-54 s."""
    path = tmp_path / "s"
    quota = {"retention.max_items_per_collection": 5}
    with open_fake(path, embedder=FailingEmbedder(), **quota) as earlier:  # left its rows without vectors
        backlog = earlier.store_batch([{"content": f"backlog note {i}"} for i in range(5)])
    embedder = RecordingEmbedder()
    with open_fake(path, embedder=embedder, **quota) as memory:
        memory.store("the newest note")  # evicts the least important memory
        caller = threading.current_thread().name
        assert [texts for thread, texts in embedder.threads if thread == caller] == []
        assert memory.flush(timeout=30)
        kept = [mid for mid in backlog if memory.get_batch([mid]) != [None]]
        assert len(kept) == 4
        assert set(memory.engine.catalog.embeddings(kept)) == set(kept)  # embedded in the background
        assert memory.index_status().unindexed == 0


#: Threads that may outlive a close: the lexical search pool (shared by every store, idle) and a
#: given-up wait for the index lock (blocked in flock on a descriptor of its own, which it unlocks
#: and closes once granted: it touches nothing else).
OUTLIVE_CLOSE = ("remindful-lexical", "remindful-index-lock-wait")


def our_threads() -> set[threading.Thread]:
    """The store's background threads alive now."""
    return {t for t in threading.enumerate() if t.name.startswith("remindful") and not t.name.startswith(OUTLIVE_CLOSE)}


def test_close_stops_every_background_thread_while_another_process_holds_the_index_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Closing (at exit too) waited 30 s for the indexer, then closed the index and the catalog
    under it: the indexer went on with them once it got the lock (``AssertionError: call ready()
    first``, a reopened catalog, chromadb's native code on a closed client: SIGSEGV). Now the
    indexer gives up its wait, and its rows stay un-indexed for the next open."""
    monkeypatch.setattr(mirror_module, "CLOSE_BUDGET_S", 0.5, raising=False)
    path = tmp_path / "s"
    before = our_threads()
    memory = open_fake(path)
    memory.search("open the index")
    assert memory.flush(timeout=30)
    with IndexLock(path / "index.lock")():
        stored = memory.store(WANTED)
        memory.engine.vectors_ready()  # embedded; the indexer now waits for the lock
        answered(memory.close)
        assert our_threads() - before == set()
    with open_fake(path) as again:
        assert again.search(QUERY)[0].id == stored
        assert again.flush(timeout=30)
        assert again.index_status().unindexed == 0


class _FailingEmbedder(FakeEmbedder):
    """Every call fails: what a process that ended before embedding its rows leaves."""

    def embed(self, texts: Any) -> Any:
        raise EmbedderError("the model is not loaded yet")


def test_a_search_that_embeds_a_candidate_does_not_wait_for_another_process_writing(tmp_path: Path) -> None:
    """A candidate stored without a vector is embedded by the search that finds it, and its vector
    kept if the catalog takes it at once; while another process writes, it is kept another time
    (its writer, or the next search, saves it) rather than the search waiting for the write lock
    (bench/concurrency.py: 7 of 25 s of a searcher's time under 8 writers, and the busy timeout
    then failed the search)."""
    import sqlite3

    path = tmp_path / "s"
    with open_fake(path, embedder=_FailingEmbedder()) as first:
        stored = first.store("Automated Google search in three steps", type="workflow")
        first.flush(timeout=5)
        assert first.engine.catalog.embeddings([stored]) == {}  # acknowledged, never embedded
    # another process holds the index, so the reader leaves the row to it: embedded by the reader's
    # own backlog, its vector's save waited on the held write with the thread lock taken, and the
    # search after COMMIT could not start its write at once (1 run in 5 passed on a loaded machine)
    with IndexLock(path / "index.lock")():
        reader = open_fake(path)
        other = sqlite3.connect(path / "catalog.sqlite3", isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")  # another process's write transaction, held
            hits = answered(lambda: reader.search("Google automation"))
            assert [h.id for h in hits] == [stored]
            assert reader.engine.catalog.embeddings([stored]) == {}  # not kept: the catalog was busy
            other.execute("COMMIT")
            reader.search("Google automation")  # the catalog is free: this one keeps the vector
            assert stored in reader.engine.catalog.embeddings([stored])
        finally:
            other.close()
            reader.close()


CLOSE_WHILE_READING = """
import sys, threading, time
from pathlib import Path
from remindful.engine.catalog import Catalog
from remindful.errors import RemindfulError

SLOW_READ = (
    "SELECT count(*), sum(length(a.name)) FROM capture_stats a, capture_stats b "
    "WHERE a.value = b.value AND b.name < 'n3'"
)
for attempt in range(5):
    catalog = Catalog(Path(sys.argv[1]) / f"c{attempt}" / "catalog.sqlite3")
    catalog.write(lambda conn: conn.executemany("INSERT INTO capture_stats (name, value) VALUES (?, 0)",
                                                [(f"n{i}",) for i in range(2000)]))
    stop = threading.Event()

    def read():
        while not stop.is_set():
            try:
                catalog.read(SLOW_READ, private=True)
            except (RemindfulError, Exception):
                pass

    threads = [threading.Thread(target=read, daemon=True) for _ in range(3)]
    for thread in threads:
        thread.start()
    time.sleep(0.3)
    catalog.close()  # the readers are mid-query on their own connections
    time.sleep(0.1)
    stop.set()
    for thread in threads:
        thread.join()
print("done")
"""


@pytest.mark.slow
def test_closing_the_catalog_never_closes_a_connection_under_a_running_read(tmp_path: Path) -> None:
    """A search thread reads on a connection of its own; closing the catalog closed those under
    running queries: the process died with SIGSEGV (a program searching from threads as it exits,
    the store closed at exit; bench/concurrency.py saw a writer die so)."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", CLOSE_WHILE_READING, str(tmp_path)], capture_output=True, text=True, timeout=300
    )
    assert (done.returncode, done.stdout.strip()) == (0, "done"), done.stderr[-2000:]
