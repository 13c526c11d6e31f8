"""Embedded Chroma under damage and contention: corruption checks, reset, retries, full disk, laziness."""

from __future__ import annotations

import errno
import json
import os
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from chromadb.errors import InternalError

import remindful.index.chroma as chroma_mod
import remindful.index.chroma_base as base_mod
from conftest_chroma import free_port
from remindful.errors import CorruptionError, StorageError, StorageFullError, StorageLockedError
from remindful.index import ChromaEmbeddedIndex, ChromaServerIndex, chroma_template
from remindful.index.keys import unpack

COL = "test_memories"
RECOVERY = "remindful reindex --reset"


def vectors(n: int, dim: int = 16, seed: int = 0) -> np.ndarray:
    v = np.random.default_rng(seed).normal(size=(n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def filled(path: Path, n: int = 300) -> ChromaEmbeddedIndex:
    """A closed store whose HNSW segment was persisted: sync_threshold 100 flushes it to disk at 300 items.

    chromadb 1.x writes index_metadata.pickle (and reads the HNSW files back at open) only once a
    collection has passed ``sync_threshold`` (default 1000) items; below that the segment is rebuilt
    from the log and damage to its files is harmless.
    """
    index = ChromaEmbeddedIndex(path, hnsw={"sync_threshold": 100, "batch_size": 50})
    index.upsert(COL, [f"m{i}" for i in range(n)], vectors(n), [{"i": i} for i in range(n)])
    index.close()
    return index


def segment_file(path: Path, name: str) -> Path:
    [found] = [p for p in path.glob(f"*/{name}") if (p.parent / "index_metadata.pickle").exists()]
    return found


def truncate_half(file: Path) -> None:
    os.truncate(file, file.stat().st_size // 2)


# -- corruption ------------------------------------------------------------------------------------


def test_healthy_store_passes_check_and_keeps_its_data(tmp_path: Path) -> None:
    index = filled(tmp_path / "chroma")
    index.check()
    assert index.count(COL) == 300
    assert not list(tmp_path.glob("chroma.corrupt-*"))
    index.close()


def test_the_check_runs_no_code_of_the_working_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The daemon a hook starts works in the agent's project: the probe's process (``python -c``)
    must not import a ``json.py`` found there (the working directory first on ``sys.path``)."""
    index = filled(tmp_path / "chroma")
    project, marker = tmp_path / "project", tmp_path / "imported"
    project.mkdir()
    (project / "json.py").write_text(f"open({str(marker)!r}, 'w').close()\nraise ImportError('project code')\n")
    monkeypatch.chdir(project)
    index.check()
    assert not marker.exists()
    assert index.count(COL) == 300
    index.close()


def test_check_of_a_store_that_does_not_exist_yet_passes(tmp_path: Path) -> None:
    ChromaEmbeddedIndex(tmp_path / "nothing").check()


@pytest.mark.parametrize("how", ["half", "empty"])
def test_truncated_sqlite_is_detected_and_backed_up(tmp_path: Path, how: str) -> None:
    path = tmp_path / "chroma"
    index = filled(path)
    db = path / "chroma.sqlite3"
    if how == "half":
        truncate_half(db)
    else:
        os.truncate(db, 0)  # chromadb alone would silently start a new, empty store here
    with pytest.raises(CorruptionError) as info:
        index.check()
    err = info.value
    assert "chroma.sqlite3" in str(err)
    assert RECOVERY in str(err)
    assert err.backup_path is not None
    backup = Path(err.backup_path)
    assert backup.is_dir()
    assert backup.name.startswith("chroma.corrupt-")
    assert (backup / "chroma.sqlite3").stat().st_size == db.stat().st_size  # a copy of the damaged files
    assert path.exists()  # check() copies; only reset_files() moves


@pytest.mark.parametrize(
    "name", ["header.bin", "data_level0.bin", "link_lists.bin", "length.bin", "index_metadata.pickle"]
)
def test_truncated_hnsw_file_is_detected(tmp_path: Path, name: str) -> None:
    path = tmp_path / "chroma"
    index = filled(path)
    target = segment_file(path, name)
    truncate_half(target)
    with pytest.raises(CorruptionError) as info:
        index.check()
    message = str(info.value)
    if name != "index_metadata.pickle":  # found by the probe's file checks, which name the file
        assert f"{target.parent.name}/{name}" in message
    else:  # found by chromadb itself: "Error deserializing pickle file"
        assert "pickle" in message
    assert info.value.backup_path and Path(info.value.backup_path, target.parent.name, name).exists()


def test_check_survives_a_crashing_probe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A native crash in the probe (as a half header.bin causes in chromadb 1.5.9 on write) is reported."""
    index = filled(tmp_path / "chroma", n=20)
    real_run = subprocess.run
    crash = 'import os, signal; print(\'{"stage": "querying collection x"}\', flush=True); os.kill(os.getpid(), 11)'

    def run(cmd: list[str], **kwargs: Any) -> Any:
        return real_run([cmd[0], "-c", crash, *cmd[3:]], **kwargs)

    monkeypatch.setattr(chroma_mod.subprocess, "run", run)
    with pytest.raises(CorruptionError, match=r"signal 11 while querying collection x"):
        index.check()


def test_runtime_corruption_error_is_typed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    index = ChromaEmbeddedIndex(tmp_path / "chroma")
    index.count(COL)
    fail = FailingCall(InternalError("Error executing plan: Error loading hnsw index"), times=99)
    monkeypatch.setattr(index._collection(COL), "count", fail)
    with pytest.raises(CorruptionError, match=RECOVERY):
        index.count(COL)
    assert fail.calls == 1
    index.close()


def test_reset_files_moves_the_store_aside_and_starts_empty(tmp_path: Path) -> None:
    path = tmp_path / "chroma"
    index = filled(path)
    assert index.count(COL) == 300  # reopens lazily after close()
    backup = index.reset_files()
    assert backup is not None and (backup / "chroma.sqlite3").exists()
    assert index.count(COL) == 0
    index.upsert(COL, ["new"], vectors(1), [{}])
    assert index.ids(COL) == ["new"]
    assert (path.stat().st_mode & 0o777) == 0o700
    index.close()
    assert ChromaEmbeddedIndex(backup).count(COL) == 300  # the backup is a working store


def test_close_then_reopen_same_path_in_process(tmp_path: Path) -> None:
    path = tmp_path / "chroma"
    first = ChromaEmbeddedIndex(path)
    first.upsert(COL, ["a"], vectors(1), [{"k": "v"}])
    first.close()
    first.close()  # idempotent
    second = ChromaEmbeddedIndex(path)
    assert second.ids(COL) == ["a"]
    second.close()
    assert (path.stat().st_mode & 0o777) == 0o700


# -- retries -----------------------------------------------------------------------------------------


class FailingCall:
    """Raises ``error`` on the first ``times`` calls, then returns ``result``."""

    def __init__(self, error: BaseException, times: int, result: Any = 7) -> None:
        self.error, self.times, self.result, self.calls = error, times, result, 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        if self.calls <= self.times:
            raise self.error
        return self.result


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    slept: list[float] = []
    monkeypatch.setattr(base_mod.time, "sleep", slept.append)
    return slept


@pytest.fixture
def embedded(tmp_path: Path) -> Any:
    index = ChromaEmbeddedIndex(tmp_path / "chroma")
    index.count(COL)  # creates the client and caches the collection handle
    yield index
    index.close()


def test_an_open_that_failed_leaves_nothing_behind_in_the_process(tmp_path: Path) -> None:
    """chromadb keeps a system per path, made before it starts: one whose start failed (here on
    a file that is not a database; a full disk fails there too) stayed, and every later open of
    the path in the process failed on it, long after the cause was gone."""
    path = tmp_path / "chroma"
    path.mkdir()
    (path / "chroma.sqlite3").write_bytes(b"planted")
    with pytest.raises(StorageError, match="not a database"):
        ChromaEmbeddedIndex(path).count(COL)
    (path / "chroma.sqlite3").unlink()  # the cause is gone: the store is made anew
    index = ChromaEmbeddedIndex(path)
    index.upsert(COL, ["a"], vectors(1), [{}])
    assert index.count(COL) == 1
    index.close()


@pytest.mark.parametrize(
    "error",
    [
        InternalError("error returned from database: (code: 5) database is locked"),
        sqlite3.OperationalError("database is locked"),
    ],
    ids=["chroma", "sqlite"],
)
def test_transient_lock_is_retried_then_succeeds(
    embedded: Any, monkeypatch: pytest.MonkeyPatch, sleeps: list[float], error: BaseException
) -> None:
    fail = FailingCall(error, times=2)
    monkeypatch.setattr(embedded._collection(COL), "count", fail)
    assert embedded.count(COL) == 7
    assert fail.calls == 3
    assert sleeps == [0.05, 0.1]


def test_lock_that_outlasts_the_retries_raises_storage_locked(
    embedded: Any, monkeypatch: pytest.MonkeyPatch, sleeps: list[float]
) -> None:
    fail = FailingCall(InternalError("database is busy"), times=99)
    monkeypatch.setattr(embedded._collection(COL), "count", fail)
    with pytest.raises(StorageLockedError, match="3 retries"):
        embedded.count(COL)
    assert fail.calls == 4  # the call and exactly 3 retries
    assert sleeps == [0.05, 0.1, 0.2]


@pytest.mark.parametrize(
    "error",
    [
        OSError(errno.ENOSPC, "No space left on device"),
        InternalError("Query error: Database error: error returned from database: (code: 13) database or disk is full"),
    ],
    ids=["enospc", "sqlite-full"],
)
def test_full_disk_raises_storage_full_without_retry(
    embedded: Any, monkeypatch: pytest.MonkeyPatch, sleeps: list[float], error: BaseException
) -> None:
    fail = FailingCall(error, times=99)
    monkeypatch.setattr(embedded._collection(COL), "upsert", fail)
    with pytest.raises(StorageFullError, match="Storage full, unable to save memory"):
        embedded.upsert(COL, ["a"], vectors(1), [{}])
    assert fail.calls == 1
    assert sleeps == []


def test_vague_write_error_on_nearly_full_disk_is_storage_full(embedded: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """chromadb 1.5.9 on a full tmpfs says only "Error in compaction: Failed to apply logs to the metadata segment"."""
    monkeypatch.setattr(
        embedded._collection(COL), "upsert", FailingCall(InternalError("Error in compaction: Error purging logs"), 99)
    )
    monkeypatch.setattr(chroma_mod.shutil, "disk_usage", lambda _: Usage())
    with pytest.raises(StorageFullError):
        embedded.upsert(COL, ["a"], vectors(1), [{}])


class Usage:
    total, used, free = 10**9, 10**9 - 1024, 1024


def test_stale_collection_handle_is_refetched(embedded: Any) -> None:
    embedded.upsert(COL, ["a"], vectors(1), [{}])
    embedded._get_client().delete_collection(COL)  # as another process's reset would
    assert embedded.count(COL) == 0


def test_unreachable_server_names_host_and_port(monkeypatch: pytest.MonkeyPatch, sleeps: list[float]) -> None:
    port = free_port()
    index = ChromaServerIndex("127.0.0.1", port)  # lazy: nothing contacted yet
    with pytest.raises(StorageError, match=f"127.0.0.1:{port}"):
        index.count(COL)
    assert sleeps == [0.05, 0.1, 0.2]
    index.close()


def test_query_falls_back_to_count_when_chroma_rejects_k(embedded: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Older chromadb releases refuse n_results > count; 1.5 does not, so the count is only a fallback."""
    embedded.upsert(COL, ["a", "b"], vectors(2), [{}, {}])
    col = embedded._collection(COL)
    real = col.query
    asked: list[int] = []

    def query(**kw: Any) -> Any:
        asked.append(kw["n_results"])
        if kw["n_results"] > 2:
            raise InternalError("Number of requested results 50 is greater than number of elements in index 2")
        return real(**kw)

    monkeypatch.setattr(col, "query", query)
    assert [i for i, _ in embedded.query(COL, vectors(2)[0], 50)] == ["a", "b"]
    assert asked == [50, 2]


def test_metadata_only_change_skips_the_vector_rewrite(embedded: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    v = vectors(3)
    embedded.upsert(COL, ["a", "b"], v[:2], [{"k": 1}, {"k": 1}])
    col = embedded._collection(COL)
    upserted: list[list[str]] = []
    real = col.upsert
    monkeypatch.setattr(col, "upsert", lambda **kw: (upserted.append(kw["ids"]), real(**kw)))
    embedded.upsert(COL, ["a", "b", "c"], np.stack([v[0], v[2], v[2]]), [{"k": 2}, {"k": 2}, {"k": 2}])
    # "a" kept its vector: metadata update only (Chroma sees the keys, remindful.index.keys)
    assert [[unpack(COL, key) for key in keys] for keys in upserted] == [["b", "c"]]
    assert sorted(i for i, _ in embedded.query(COL, v[0], 5)) == ["a", "b", "c"]


def test_the_upsert_that_makes_a_collection_looks_up_no_old_records(
    embedded: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fresh store's first write goes straight in (the lookup cost 3-4 ms of its flush); every
    later one, and one into a collection a search made earlier, looks up what is there."""
    from chromadb.api.models.Collection import Collection

    looked: list[int] = []
    real = Collection.get
    monkeypatch.setattr(
        Collection, "get", lambda self, **kw: (looked.append(len(kw.get("ids") or ())), real(self, **kw))[1]
    )
    v = vectors(4)
    embedded.upsert(COL, ["a", "b"], v[:2], [{}, {}])
    assert looked == []
    embedded.upsert(COL, ["b", "c"], v[1:3], [{}, {}])
    assert looked == [2]
    assert embedded.query("made_by_a_search", v[3], 3) == []
    embedded.upsert("made_by_a_search", ["d"], v[3:], [{}])
    assert looked == [2, 1]
    assert sorted(i for i, _ in embedded.query(COL, v[0], 5)) == ["a", "b", "c"]
    assert [i for i, _ in embedded.query("made_by_a_search", v[3], 5)] == ["d"]


def test_a_missing_collection_is_told_apart_from_a_failing_lookup() -> None:
    """Whether the upsert makes the collection (and so skips the lookup of old records) rests on
    this answer: an older server says "does not exist" with a ValueError; a lock is no answer."""

    class Client:
        def __init__(self, error: Exception) -> None:
            self.error = error

        def get_collection(self, name: str, embedding_function: Any = None) -> Any:
            raise self.error

    assert base_mod.ChromaIndexBase._existing(Client(ValueError("Collection c does not exist.")), "c") is None
    with pytest.raises(Exception, match="locked"):
        base_mod.ChromaIndexBase._existing(Client(RuntimeError("database is locked")), "c")


def test_each_chroma_client_gets_its_own_settings() -> None:
    """chromadb writes the client's path into the settings it is given: one object shared by two
    stores' clients would carry the second's path into the first's."""
    first, second = chroma_mod.chroma_settings(allow_reset=True), chroma_mod.chroma_settings(allow_reset=True)
    assert first is not second and first == second
    first.persist_directory = "/one/store"
    assert second.persist_directory != "/one/store"
    assert chroma_mod.chroma_settings().persist_directory != "/one/store"
    assert first.allow_reset and not chroma_mod.chroma_settings().allow_reset
    assert not first.anonymized_telemetry


def test_upsert_is_chunked_below_the_max_batch_size(embedded: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    col = embedded._collection(COL)
    sizes: list[int] = []
    real = col.upsert
    monkeypatch.setattr(col, "upsert", lambda **kw: (sizes.append(len(kw["ids"])), real(**kw)))
    embedded._max_batch = 7
    embedded.upsert(COL, [f"m{i}" for i in range(20)], vectors(20), [{} for _ in range(20)])
    assert sizes == [7, 7, 6]
    assert embedded.count(COL) == 20


# -- laziness, no network, no default model -------------------------------------------------------


def test_constructing_an_index_imports_nothing_heavy(tmp_path: Path) -> None:
    code = (
        "import sys; from pathlib import Path\n"
        "from remindful.index import ChromaEmbeddedIndex, ChromaServerIndex\n"
        f"ChromaEmbeddedIndex(Path({str(tmp_path / 'c')!r})); ChromaServerIndex('127.0.0.1', 1)\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('chromadb', 'onnxruntime'))))"
    )
    out = subprocess.run([sys.executable, "-c", "import json\n" + code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []
    assert not (tmp_path / "c").exists()


def test_embedded_use_touches_no_network_and_no_default_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, isolated_env: Path
) -> None:
    attempts: list[Any] = []
    real_connect = socket.socket.connect

    def guarded(self: socket.socket, address: Any) -> Any:
        if self.family != socket.AF_UNIX:
            attempts.append(address)
            raise OSError("network disabled in this test")
        return real_connect(self, address)

    monkeypatch.setattr(socket.socket, "connect", guarded)
    index = ChromaEmbeddedIndex(tmp_path / "chroma")
    index.upsert(COL, ["a", "b"], vectors(2), [{}, {}])
    assert index.query(COL, vectors(2)[0], 1)[0][0] == "a"
    index.close()
    assert attempts == []
    assert not list(isolated_env.rglob("onnx_models")) and not (isolated_env / ".cache" / "chroma").exists()


def test_a_small_collection_is_searched_exhaustively_a_large_one_with_the_usual_candidates(tmp_path: Path) -> None:
    """HNSW at its usual candidate list missed a distinct memory among 1,100 near-identical ones
    (tests/reliability/test_damage.py has the real case); a collection of up to EXHAUSTIVE_BELOW rows
    is asked for all of them, so HNSW visits every node it can reach."""
    from remindful.engine.mirror import EXHAUSTIVE_BELOW
    from remindful.index import InMemoryIndex
    from remindful.testing import open_fake

    class Recording(InMemoryIndex):
        def __init__(self) -> None:
            super().__init__()
            self.asked: list[tuple[str, int]] = []

        def query(self, collection: str, embedding: np.ndarray, k: int) -> list[tuple[str, float]]:
            self.asked.append((collection, k))
            return super().query(collection, embedding, k)

    index = Recording()
    memory = open_fake(tmp_path / "s", index=index, **{"performance.async_indexing": False})
    memory.store_batch([{"content": f"note {i} about deploying", "type": "action"} for i in range(300)])
    memory.store_batch([{"content": f"fact {i}", "type": "knowledge"} for i in range(EXHAUSTIVE_BELOW + 1)])
    index.asked.clear()
    memory.search("deploying", limit=5, types=["action"])
    assert index.asked and all(k >= 300 for c, k in index.asked if c == "action_memories")  # candidates: 50
    index.asked.clear()
    memory.search("fact", limit=5, types=["knowledge"])
    assert index.asked and all(k < EXHAUSTIVE_BELOW for c, k in index.asked if c == "knowledge_memories")
    memory.close()


# -- free pages ------------------------------------------------------------------------------------------


_PAGE_PRAGMAS = ("freelist_count", "page_count", "auto_vacuum")


def sqlite_pages(path: Path) -> tuple[int, int, int]:
    """(free pages, all pages, auto_vacuum mode) of the Chroma store's SQLite file."""
    conn = sqlite3.connect(path / "chroma.sqlite3")
    try:
        free, pages, mode = (int(conn.execute(f"PRAGMA {p}").fetchone()[0]) for p in _PAGE_PRAGMAS)
        return free, pages, mode
    finally:
        conn.close()


def test_a_close_after_writes_gives_back_the_pages_of_chromas_purged_log(tmp_path: Path) -> None:
    """Chroma logs each vector in its SQLite file until the HNSW files are saved, then deletes the
    rows: their pages stayed in the file, free (a third of it at 10,000 memories)."""
    path = tmp_path / "chroma"
    filled(path, n=600)
    free, _, mode = sqlite_pages(path)
    assert free == 0 and mode == 2  # incremental: later closes give pages back without a rewrite
    reopened = ChromaEmbeddedIndex(path, hnsw={"sync_threshold": 100, "batch_size": 50})
    assert reopened.count(COL) == 600
    assert reopened.query(COL, vectors(600)[7], 1)[0][0] == "m7"
    more = vectors(400, seed=1)
    reopened.upsert(COL, [f"n{i}" for i in range(400)], more, [{} for _ in range(400)])
    reopened.close()
    assert sqlite_pages(path)[0] == 0
    assert ChromaEmbeddedIndex(path).count(COL) == 1000
    assert (path / "chroma.sqlite3").stat().st_mode & 0o777 == 0o600


def test_a_store_made_before_is_rewritten_once_its_free_pages_are_many(tmp_path: Path) -> None:
    path = tmp_path / "chroma"
    filled(path, n=600)
    conn = sqlite3.connect(path / "chroma.sqlite3", isolation_level=None)
    conn.execute("PRAGMA auto_vacuum = NONE")
    conn.execute("VACUUM")
    conn.execute("CREATE TABLE filler (x BLOB)")  # free pages, as Chroma's purged log leaves them
    conn.execute("INSERT INTO filler SELECT zeroblob(3000) FROM (SELECT 1 FROM embeddings LIMIT 600)")
    conn.execute("DROP TABLE filler")
    conn.close()
    assert sqlite_pages(path)[0] > 0 and sqlite_pages(path)[2] == 0
    index = ChromaEmbeddedIndex(path)
    index.upsert(COL, ["x"], vectors(1, seed=2), [{}])
    index.close()
    assert sqlite_pages(path)[0] == 0 and sqlite_pages(path)[2] == 2
    assert ChromaEmbeddedIndex(path).count(COL) == 601


def test_a_busy_file_is_left_as_it_is(tmp_path: Path) -> None:
    """Another process holding the file (here: a connection with a read transaction open) makes the
    compaction give up at once; the store stays whole."""
    path = tmp_path / "chroma"
    filled(path, n=600)
    index = ChromaEmbeddedIndex(path)
    index.upsert(COL, [f"n{i}" for i in range(300)], vectors(300, seed=3), [{} for _ in range(300)])
    other = sqlite3.connect(path / "chroma.sqlite3", isolation_level=None)
    other.execute("BEGIN")
    other.execute("SELECT count(*) FROM embeddings").fetchone()
    index.close()  # does not wait for the reader
    other.execute("COMMIT")
    other.close()
    assert sqlite_pages(path)[0] > 0  # left free, for Chroma to reuse
    assert ChromaEmbeddedIndex(path).count(COL) == 900


def test_no_compaction_while_another_client_of_this_process_has_the_file(tmp_path: Path) -> None:
    """Two index objects on one path share chromadb's system: the file stays open after the first
    closes, and a second descriptor of it closed by the compaction would drop the other's locks."""
    path = tmp_path / "chroma"
    filled(path, n=600)
    other = ChromaEmbeddedIndex(path)
    assert other.count(COL) == 600
    index = ChromaEmbeddedIndex(path)
    index.upsert(COL, [f"n{i}" for i in range(300)], vectors(300, seed=3), [{} for _ in range(300)])
    index.close()
    assert other.count(COL) == 900
    other.close()  # it wrote nothing: it leaves the file as it is
    assert sqlite_pages(path)[0] > 0


def test_a_new_store_is_in_incremental_vacuum_mode_from_its_creation(tmp_path: Path) -> None:
    """A store built in one go closes once, large, with few free pages: made incremental when it is
    created, its later closes give pages back without ever rewriting it."""
    path = tmp_path / "chroma"
    index = ChromaEmbeddedIndex(path)
    index.upsert(COL, ["a", "b"], vectors(2), [{}, {}])
    index.close()
    assert sqlite_pages(path)[2] == 2
    assert ChromaEmbeddedIndex(path).count(COL) == 2


def test_a_new_store_starts_from_the_template_the_first_one_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """chromadb makes a new file by running its migrations (20-30 ms, holding the interpreter
    lock); the first store keeps its file, before any collection, as a template in this user's
    cache, and later new stores start from a copy of it."""
    seeded: list[bool] = []
    seed = chroma_template.seed
    monkeypatch.setattr(chroma_template, "seed", lambda db: seeded.append(seed(db)) or seeded[-1])
    first = ChromaEmbeddedIndex(tmp_path / "first")
    first.upsert(COL, ["a", "b"], vectors(2), [{}, {}])
    first.close()
    template = chroma_template.template_path()
    assert template.is_relative_to(Path.home()) and template.stat().st_mode & 0o777 == 0o600
    conn = sqlite3.connect(template)
    try:  # nothing of the first store's: kept before its first collection
        assert conn.execute("SELECT count(*) FROM collections").fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM embeddings_queue").fetchone()[0] == 0
    finally:
        conn.close()
    second = ChromaEmbeddedIndex(tmp_path / "second")
    second.upsert(COL, ["c"], vectors(1, seed=5), [{}])
    assert second.query(COL, vectors(1, seed=5)[0], 1)[0][0] == "c"
    second.close()
    assert seeded == [False, True]
    assert sqlite_pages(tmp_path / "second")[2] == 2  # incremental, as a store made anew
    assert (tmp_path / "second" / "chroma.sqlite3").stat().st_mode & 0o777 == 0o600
    assert ChromaEmbeddedIndex(tmp_path / "second").count(COL) == 1


def test_a_template_others_could_write_or_chromadb_cannot_open_is_not_used(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    template = chroma_template.template_path()
    template.parent.mkdir(parents=True, mode=0o700)
    template.write_bytes(b"planted")
    template.chmod(0o666)  # another local user could have written it
    index = ChromaEmbeddedIndex(tmp_path / "a")
    index.upsert(COL, ["a"], vectors(1), [{}])
    index.close()
    assert "Chroma template" in caplog.text and "writable by other users" in caplog.text
    assert ChromaEmbeddedIndex(tmp_path / "a").count(COL) == 1
    template.chmod(0o600)  # this user's now, but not a file chromadb can open
    index = ChromaEmbeddedIndex(tmp_path / "b")
    index.upsert(COL, ["b"], vectors(1), [{}])
    index.close()
    assert ChromaEmbeddedIndex(tmp_path / "b").count(COL) == 1
    assert template.read_bytes()[:16] == b"SQLite format 3\x00"  # replaced by a sound one
    assert not list((tmp_path / "b").glob("*.seed"))
