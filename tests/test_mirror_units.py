"""The mirror's collaborators on their own: the view protocol (:mod:`remindful.engine.index_view`),
the locks (:mod:`remindful.engine.index_locks`), the backlog (:mod:`remindful.engine.backlog`), exact
scoring (:mod:`remindful.engine.exact`), dense queries (:mod:`remindful.engine.dense`) and the deletes
finisher (:mod:`remindful.engine.index_deletes`), each over a real catalog."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from remindful.api import MemoryManager
from remindful.engine import backlog as backlog_module
from remindful.engine import index_open
from remindful.engine.backlog import Backlog
from remindful.engine.catalog import Catalog
from remindful.engine.exact import ExactScorer
from remindful.engine.index_deletes import IndexDeletes
from remindful.engine.index_locks import IndexHolders, IndexLock, ViewLock
from remindful.engine.index_open import IndexOpening
from remindful.engine.index_view import IndexView
from remindful.errors import CorruptionError, StorageError
from remindful.model import MemoryType
from remindful.testing import InMemoryIndex, open_fake


class ReloadCounting(InMemoryIndex):
    """An index that keeps a copy of the files: counts how often it is reloaded."""

    def __init__(self) -> None:
        super().__init__()
        self.reloads = 0

    def reload(self) -> None:
        self.reloads += 1


@pytest.fixture
def memory(tmp_path: Path) -> Iterator[MemoryManager]:
    with open_fake(tmp_path / "store", **{"performance.async_indexing": False}) as m:
        yield m


def catalog_of(memory: MemoryManager) -> Catalog:
    catalog = memory.engine.catalog
    assert isinstance(catalog, Catalog)
    return catalog


def test_a_write_reloads_a_view_another_process_made_stale(memory: MemoryManager, tmp_path: Path) -> None:
    catalog = catalog_of(memory)
    lock = IndexLock(tmp_path / "index.lock")
    mine, other = IndexView(catalog, lock, ViewLock()), IndexView(catalog, lock, ViewLock())
    mine_index, other_index = ReloadCounting(), ReloadCounting()
    with lock(write=False) as generation:
        mine.load(mine_index, generation)
        other.load(other_index, generation)
    with mine.writing(mine_index):
        pass
    assert mine_index.reloads == 1  # loaded once, and current at its own write
    with other.writing(other_index):
        pass
    assert other_index.reloads == 2  # the other's write made it stale: reloaded before writing
    with mine.writing(mine_index):
        pass
    assert mine_index.reloads == 2
    with lock(write=False) as generation:
        mine.catch_up(mine_index, generation)  # nobody wrote since: nothing to reload
    assert mine_index.reloads == 2
    mine.invalidate()
    with mine.writing(mine_index):
        pass
    assert mine_index.reloads == 3


def test_the_view_floor_stops_below_the_first_unindexed_row(memory: MemoryManager, tmp_path: Path) -> None:
    ids = [memory.store(f"note {i}") for i in range(4)]
    catalog = catalog_of(memory)
    view = IndexView(catalog, IndexLock(tmp_path / "index.lock"), ViewLock())
    top = int(catalog.read("SELECT max(rowid) FROM memories")[0][0])
    assert view.floor() == top
    catalog.mark_indexed([ids[2]], value=False)
    third = int(catalog.read("SELECT rowid FROM memories WHERE id = ?", (ids[2],))[0][0])
    assert view.floor() == third - 1


def test_the_index_lock_counts_writes_only(tmp_path: Path) -> None:
    lock = IndexLock(tmp_path / "index.lock")
    assert lock.generation() == 0
    with lock(write=False) as generation:
        assert generation == 0
    assert lock.generation() == 0
    with pytest.raises(RuntimeError), lock():
        raise RuntimeError("a write that half happened still counts")
    assert lock.generation() == 1


def test_a_query_never_waits_for_a_reload() -> None:
    copy = ViewLock()
    entered, release = threading.Event(), threading.Event()

    def reload() -> None:
        with copy.exclusive():
            entered.set()
            release.wait(30)

    worker = threading.Thread(target=reload)
    worker.start()
    assert entered.wait(30)
    with copy.shared() as usable:
        assert not usable  # held alone: the query scores elsewhere instead of waiting
    release.set()
    worker.join(30)
    with copy.shared() as usable:
        assert usable


def test_holders_tell_live_others_from_crashed(tmp_path: Path) -> None:
    holders = IndexHolders(tmp_path / "holders")
    holders.hold()
    assert holders.others() == [] and holders.crashed() == []
    (tmp_path / "holders" / str(os.getppid())).touch()
    assert holders.others() == [os.getppid()]
    holders.release()
    assert not (tmp_path / "holders" / str(os.getpid())).exists()


def test_the_backlog_is_indexed_here_when_nobody_else_holds_the_index(memory: MemoryManager, tmp_path: Path) -> None:
    ids = [memory.store(f"left behind {i}") for i in range(5)]
    assert memory.flush(60)  # the store's own indexer is done: it marks none of them while the backlog runs
    catalog = catalog_of(memory)
    catalog.mark_indexed(ids, value=False)
    batches: list[list[str]] = []

    def index_ids(batch: list[str]) -> None:
        batches.append(batch)
        catalog.mark_indexed(batch)

    stopping = threading.Event()
    backlog = Backlog(catalog, IndexHolders(tmp_path / "holders"), index_ids, stopping=stopping, batch=2)
    backlog.queue(int(catalog.read("SELECT max(rowid) FROM memories")[0][0]))
    assert backlog.wait(60)
    backlog.close()
    assert [len(b) for b in batches] == [2, 2, 1]
    assert sorted(i for b in batches for i in b) == sorted(ids)


def test_a_flush_does_not_wait_for_a_backlog_another_process_may_index(
    memory: MemoryManager, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(backlog_module, "BACKLOG_WATCH_S", 3600.0)
    ids = [memory.store(f"theirs {i}") for i in range(3)]
    catalog = catalog_of(memory)
    catalog.mark_indexed(ids, value=False)
    holders = IndexHolders(tmp_path / "holders")
    holders.hold()
    (tmp_path / "holders" / str(os.getppid())).touch()  # another live process has the index open
    indexed: list[str] = []
    stopping = threading.Event()
    backlog = Backlog(catalog, holders, indexed.extend, stopping=stopping, batch=10)
    backlog.queue(int(catalog.read("SELECT max(rowid) FROM memories")[0][0]))
    assert backlog.wait(0)  # theirs: not waited for
    stopping.set()  # closing: the watch gives up
    backlog.close()
    assert indexed == []


def test_exact_scoring_finds_the_nearest_and_forgets_on_replacement(memory: MemoryManager) -> None:
    ids = [memory.store(text) for text in ("the staging port is 8443", "lunch was pasta", "deploy on friday")]
    catalog = catalog_of(memory)
    scorer = ExactScorer(catalog)
    vectors = catalog.embeddings(ids)
    found = scorer.query([MemoryType.ACTION], {"action": 3}, np.asarray(vectors[ids[1]]), 1)
    assert [mid for mid, _score in found] == [ids[1]]
    assert scorer.holds_copy
    scorer.forget()
    assert not scorer.holds_copy


def test_a_store_too_large_to_copy_is_scored_from_the_catalog_a_part_at_a_time(
    memory: MemoryManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same answer as scoring every vector at once, with one part's vectors in memory (a
    million as float32 took 1.5 GB)."""
    from remindful.engine import exact as exact_module
    from remindful.engine import flat as flat_module
    from remindful.engine.retrieval.search import top_k_exact
    from remindful.engine.sqlfilter import build_filter

    monkeypatch.setattr(flat_module, "MAX_ROWS", 2)
    monkeypatch.setattr(exact_module, "PART_ROWIDS", 3)
    ids = memory.store_batch([{"content": f"note {i} about port {i * 7}"} for i in range(20)])
    memory.delete(ids[4])
    catalog = catalog_of(memory)
    query = np.asarray(catalog.embeddings([ids[9]])[ids[9]])
    whole_ids, whole = catalog.filtered_embeddings(build_filter(types=["action"]))
    assert whole is not None
    expected = top_k_exact(query, whole_ids, whole, 5)
    read: list[int] = []
    original = catalog.filtered_embeddings

    def counting(flt: Any) -> Any:
        found = original(flt)
        read.append(len(found[0]))
        return found

    monkeypatch.setattr(catalog, "filtered_embeddings", counting)
    found = ExactScorer(catalog).query([MemoryType.ACTION], {"action": 19}, query, 5)
    # the same scores at every rank, and the same memories above the last one (ties aside)
    assert [round(score, 6) for _, score in found] == [round(score, 6) for _, score in expected]
    last = round(expected[-1][1], 6)
    assert {m for m, x in found if round(x, 6) > last} == {m for m, x in expected if round(x, 6) > last}
    assert found[0][0] == ids[9] and ids[4] not in {mid for mid, _ in found}
    assert max(read) <= 3 and sum(read) == 19


def test_deletes_are_skipped_until_drained(memory: MemoryManager, tmp_path: Path) -> None:
    catalog = catalog_of(memory)
    view = IndexView(catalog, IndexLock(tmp_path / "index.lock"), ViewLock())
    index: InMemoryIndex | None = None
    deletes = IndexDeletes(catalog, view, lambda: index, stopping=threading.Event(), may_start=lambda: False)
    deletes.track([("a", "action"), ("b", "action")])
    assert deletes.skipped("action") == {"a", "b"} and deletes.any_queued()
    assert deletes.drain(10) == 0  # no usable index: nothing drained, still skipped
    deletes.kick()  # no thread may start: nothing happens
    assert deletes.flush(0)
    index = InMemoryIndex()
    deletes.unindex(index, [("a", "action")])
    assert deletes.skipped("action") == {"b"}
    deletes.forget()
    assert not deletes.any_queued()


def test_reconcile_drops_stale_vectors_and_marks_missing_rows_unindexed(memory: MemoryManager, tmp_path: Path) -> None:
    kept, lost = memory.store("kept in the index"), memory.store("missing from the index")
    catalog = catalog_of(memory)
    index = InMemoryIndex()
    vectors = catalog.embeddings([kept, lost])
    collection = MemoryType.ACTION.collection
    meta = {"source": "manual"}
    # Three vectors for two indexed rows: the counts differ, so the ids are compared.
    index.upsert(collection, [kept, "gone", "gone too"], np.stack([vectors[kept]] * 3), [meta] * 3)
    view = IndexView(catalog, IndexLock(tmp_path / "index.lock"), ViewLock())
    assert view.reconcile(index) == []
    assert sorted(index.ids(collection)) == [kept]
    unindexed = [r[0] for r in catalog.read("SELECT id FROM memories WHERE indexed = 0")]
    assert unindexed == [lost]


def test_reconcile_keeps_every_vector_when_the_catalog_cannot_see_every_row(
    memory: MemoryManager, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A team member's catalog (row-level security, an admin role that it binds too) cannot tell
    another person's private memory from a deleted one: no vector is taken for stale then, and
    its own missing rows are still marked for indexing."""
    kept, lost = memory.store("kept in the index"), memory.store("missing from the index")
    catalog = catalog_of(memory)
    monkeypatch.setattr(catalog, "indexed_ids", lambda memory_type: None)
    index = InMemoryIndex()
    vectors = catalog.embeddings([kept, lost])
    collection = MemoryType.ACTION.collection
    others = ["someone's private", "another's private"]  # (three vectors, two rows: compared)
    index.upsert(collection, [kept, *others], np.stack([vectors[kept]] * 3), [{}] * 3)
    view = IndexView(catalog, IndexLock(tmp_path / "index.lock"), ViewLock())
    assert view.reconcile(index) == []
    assert sorted(index.ids(collection)) == sorted([kept, *others])
    assert [r[0] for r in catalog.read("SELECT id FROM memories WHERE indexed = 0")] == [lost]


def test_dense_queries_score_exactly_until_the_index_is_usable_then_skip_queued_deletes(
    memory: MemoryManager, tmp_path: Path
) -> None:
    from remindful.engine.dense import DenseQueries, IndexHandle

    ids = [memory.store(text) for text in ("the staging port is 8443", "lunch was pasta", "deploy on friday")]
    catalog = catalog_of(memory)
    vectors = catalog.embeddings(ids)
    view = IndexView(catalog, IndexLock(tmp_path / "index.lock"), ViewLock())
    index: InMemoryIndex | None = None
    deletes = IndexDeletes(catalog, view, lambda: index, stopping=threading.Event(), may_start=lambda: False)
    asked: list[bool] = []
    handle = IndexHandle(
        opening=lambda: index is None,
        searchable=lambda: index,
        opened=lambda: index,
        refresh=lambda reload=False: asked.append(reload),
        pending_after=lambda: 0,
        newest=lambda: 3,
        generation=lambda: 0,
    )
    dense = DenseQueries(catalog, handle, copy=ViewLock(), deletes=deletes, snapshot=None)
    counts = {"action": 3}
    query = np.asarray(vectors[ids[1]])
    before = dense.source([MemoryType.ACTION], counts)
    assert before.pending_after == 3  # no index: every row is scored exactly from the catalog
    assert [mid for mid, _ in before.query(query, 1)] == [ids[1]] and dense.exact.holds_copy
    index = InMemoryIndex()
    index.upsert("action_memories", ids, np.stack([vectors[i] for i in ids]), [{}, {}, {}])
    deletes.track([(ids[1], "action")])  # deleted, its vector still queued for removal
    after = dense.source([MemoryType.ACTION], counts)
    assert [mid for mid, _ in after.query(query, 1)] != [ids[1]]
    assert ids[1] not in {mid for mid, _ in after.query(query, 3)}
    assert len(after.query(query, 2)) == 2  # more asked of the index to make up for the skipped one


@pytest.mark.parametrize("remote", [True, False])
def test_dense_queries_send_a_remote_indexs_collections_at_once_and_ask_a_local_one_in_turn(
    memory: MemoryManager, tmp_path: Path, remote: bool
) -> None:
    """A Chroma server answers each collection in a round trip of its own (3-12 ms at 100,000
    memories): a search over three types waited for three in a row."""
    from remindful.engine.dense import DenseQueries, IndexHandle

    ids = [memory.store("the staging port is 8443", type="action"), memory.store("deploy on friday", type="knowledge")]
    catalog = catalog_of(memory)
    vectors = catalog.embeddings(ids)
    both = threading.Barrier(2, timeout=5)  # passed only by two queries at once
    threads: set[str] = set()

    class Server(InMemoryIndex):
        def query(self, collection: str, embedding: np.ndarray, k: int) -> list[tuple[str, float]]:
            threads.add(threading.current_thread().name)
            if remote:
                both.wait()
            return super().query(collection, embedding, k)

    index = Server()
    index.remote = remote
    index.upsert("action_memories", ids[:1], np.stack([vectors[ids[0]]]), [{}])
    index.upsert("knowledge_memories", ids[1:], np.stack([vectors[ids[1]]]), [{}])
    view = IndexView(catalog, IndexLock(tmp_path / "index.lock"), ViewLock())
    deletes = IndexDeletes(catalog, view, lambda: index, stopping=threading.Event(), may_start=lambda: False)
    handle = IndexHandle(
        opening=lambda: False, searchable=lambda: index, opened=lambda: index, refresh=lambda reload=False: None,
        pending_after=lambda: 0, newest=lambda: 2, generation=lambda: 0,
    )  # fmt: skip
    dense = DenseQueries(catalog, handle, copy=ViewLock(), deletes=deletes, snapshot=None)
    try:
        source = dense.source([MemoryType.ACTION, MemoryType.KNOWLEDGE], {"action": 1, "knowledge": 1})
        hits = source.query(np.asarray(vectors[ids[1]]), 2)
        assert [mid for mid, _ in hits] == [ids[1], ids[0]]
        assert len(threads) == (2 if remote else 1)
    finally:
        dense.close()


def test_an_uncounted_scope_copy_reads_a_row_committed_late_once_with_the_next_store() -> None:
    """The private memories of a team store are copied without a count (the person sees only
    theirs). A server's writers commit rowids out of order: a row whose rowid is below the last
    one read arrives late; it is read with the next store, and no row is read twice."""
    from remindful.engine import vectors as stored_vectors
    from remindful.engine.exact import ScopeVectors

    blob = stored_vectors.encode(np.eye(384, dtype=np.float32)[0])
    committed: list[tuple[int, str, str, bytes]] = []

    class Rows:
        reads = 0

        def read(self, sql: str, params: list[object]) -> list[tuple[int, str, str, bytes]]:
            self.reads += 1
            after = int(params[-1])  # type: ignore[call-overload]
            return sorted(r for r in committed if r[0] > after)

    rows = Rows()
    copy = ScopeVectors("user")
    committed += [(1, "a", "knowledge", blob), (3, "c", "knowledge", blob)]
    copy.refresh(rows, generation=0, newest=3, count=None)  # type: ignore[arg-type]
    assert copy.ids == ["a", "c"]
    copy.refresh(rows, generation=0, newest=3, count=None)  # type: ignore[arg-type]
    assert rows.reads == 1  # nothing stored since: nothing read
    committed.append((2, "b", "knowledge", blob))  # (rowid 2, committed after 3)
    committed.append((4, "d", "knowledge", blob))
    copy.refresh(rows, generation=0, newest=4, count=None)  # type: ignore[arg-type]
    assert sorted(copy.ids) == ["a", "b", "c", "d"] and len(copy.ids) == 4
    copy.refresh(rows, generation=1, newest=4, count=None)  # type: ignore[arg-type]  (a delete, say)
    assert sorted(copy.ids) == ["a", "b", "c", "d"]  # read afresh


class FlakyIndex(InMemoryIndex):
    """An index whose opening fails with ``failure`` (a StorageError: passing; a CorruptionError:
    damage) while it is set, and waits for ``gate`` if one is given."""

    def __init__(self, failure: Exception | None = None, gate: threading.Event | None = None) -> None:
        super().__init__()
        self.failure = failure
        self.gate = gate

    def preload(self) -> None:
        if self.gate is not None:
            assert self.gate.wait(30)
        if self.failure is not None:
            raise self.failure


def opening_of(
    memory: MemoryManager, tmp_path: Path, index: InMemoryIndex, opened: list[list[tuple[str, str]]]
) -> IndexOpening:
    catalog = catalog_of(memory)
    lock = IndexLock(tmp_path / "opening.lock")
    return IndexOpening(
        catalog,
        lambda: index,
        view=IndexView(catalog, lock, ViewLock()),
        index_lock=lock,
        holders=IndexHolders(tmp_path / "opening.holders"),
        snapshot=None,
        stopping=threading.Event(),
        search_wait_s=0.05,
        may_start=lambda: True,
        exiting=lambda: False,
        after_open=opened.append,
    )


def test_an_opening_that_failed_in_passing_is_retried_after_a_while_and_damage_is_not(
    memory: MemoryManager, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(index_open, "INDEX_RETRY_S", 1.0)
    index = FlakyIndex(StorageError("the index server is not answering"))
    opened: list[list[tuple[str, str]]] = []
    opening = opening_of(memory, tmp_path, index, opened)
    assert opening.state() == {"opened": False, "available": None, "error": None}
    assert opening.get() is None
    assert opening.state()["available"] is False and "not answering" in str(opening.error)
    index.failure = None
    assert not opening.due() and opening.get() is None  # not before INDEX_RETRY_S
    time.sleep(1.1)
    assert opening.due() and opening.get() is index
    assert opening.error is None and opened == [[]]
    damaged = FlakyIndex(CorruptionError("data_level0.bin is truncated"))
    opening = opening_of(memory, tmp_path, damaged, opened)
    assert opening.get() is None and "truncated" in str(opening.error)
    damaged.failure = None
    assert not opening.due() and opening.get() is None  # damage waits for a rebuild, however long
    opening.rebuilt(damaged)
    assert opening.get() is damaged and opening.error is None


class SlowLoadingIndex(InMemoryIndex):
    """An index whose files take until ``gate`` opens to load (under the index lock)."""

    def __init__(self, gate: threading.Event) -> None:
        super().__init__()
        self.gate = gate
        self.loading = threading.Event()

    def reload(self) -> None:
        self.loading.set()
        assert self.gate.wait(30)


def test_a_search_of_a_large_store_waits_past_its_budget_for_an_index_that_is_loading(
    memory: MemoryManager, tmp_path: Path
) -> None:
    """Scoring the catalog instead would cost more than the load (and wait for it: chromadb holds
    the GIL while it loads); an opening that waits for another process's lock is not waited for."""
    gate = threading.Event()
    index = SlowLoadingIndex(gate)
    opening = opening_of(memory, tmp_path, index, [])
    got: list[object] = []
    try:
        assert opening.searchable() is None
        assert index.loading.wait(30)
        waiter = threading.Thread(target=lambda: got.append(opening.await_open()))
        waiter.start()
        waiter.join(0.5)
        assert waiter.is_alive()  # ten times its budget (0.05 s), the load still going
        gate.set()
        waiter.join(30)
        assert got == [index]
    finally:
        gate.set()
        opening.stop_viewer()
    # another process holds the index lock: the opening waits for it, the search does not
    held = IndexLock(tmp_path / "opening.lock")
    index = SlowLoadingIndex(threading.Event())
    index.gate.set()
    opening = opening_of(memory, tmp_path, index, [])
    try:
        with held(write=True):
            started = time.monotonic()
            assert opening.searchable() is None
            assert opening.await_open() is None
            assert time.monotonic() - started < 5
            assert not index.loading.is_set()
    finally:
        opening.stop_viewer()


def test_a_search_never_waits_for_the_opening_it_asks_for(memory: MemoryManager, tmp_path: Path) -> None:
    gate = threading.Event()
    index = FlakyIndex(gate=gate)
    opened: list[list[tuple[str, str]]] = []
    opening = opening_of(memory, tmp_path, index, opened)
    try:
        started = time.monotonic()
        assert opening.searchable() is None  # asked, in the background
        assert opening.await_open() is None  # waited the search's budget (0.05 s), no more
        assert time.monotonic() - started < 10
        gate.set()
        assert opening.wait(30) and opening.searchable() is index and opened == [[]]
    finally:
        gate.set()
        opening.stop_viewer()


def test_a_large_stores_small_projects_are_copied_once_its_index_opens(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A project's first search in a process read its rows itself (20,000 spread over a catalog of
    1,000,000: 0.3 s, the small project's p99 at 1M); the most recently active projects a search
    scores exactly are copied once the index opens, and their first search reads nothing."""
    from remindful.engine import exact as exact_module
    from remindful.engine import flat as flat_module

    monkeypatch.setattr(flat_module, "MAX_ROWS", 20)
    path = tmp_path / "s"
    with open_fake(path) as memory:
        memory.store_batch([{"content": f"big note {i}", "scope": "project:big"} for i in range(190)])
        memory.store_batch([{"content": f"small note {i} on ports", "scope": "project:small"} for i in range(6)])
        memory.flush()
    reads: list[str | None] = []
    original = exact_module.ScopeVectors._read

    def counting(self: Any, catalog: Any, *, late: int = 0) -> None:
        reads.append(self.scope)
        original(self, catalog, late=late)

    monkeypatch.setattr(exact_module.ScopeVectors, "_read", counting)
    with open_fake(path) as memory:
        memory.search("anything")  # the index opens, in the background
        memory.flush()
        assert reads == ["project:small"]  # not project:big: 97 % of the store, the index finds it
        hits = memory.search("small note 3 on ports", scope=["project:small"], limit=3)
        assert hits and all(h.scope == "project:small" for h in hits)
        assert reads == ["project:small"]  # the first search of the project read nothing more
    monkeypatch.setattr(flat_module, "MAX_ROWS", 50_000)
    reads.clear()
    with open_fake(path) as memory:  # a small store: nothing copied ahead
        memory.search("anything")
        memory.flush()
        assert reads == []
