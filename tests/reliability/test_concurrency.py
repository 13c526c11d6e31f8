"""Several processes storing and searching one storage path (issue 15: concurrent processes switched
the vector index off with "Error finding id", and left rows un-indexed).

Real processes and the real embedded Chroma; a model-free embedder, because the defect is in how the
processes share the index files and loading the ONNX model in four processes on two cores would
triple the test's time without testing anything more. Its vectors are the fake embedder's hashed
words plus a small random part seeded by the text: the hashed words alone give these near-identical
texts many exactly equal distances, on which HNSW leaves some nodes unreachable from its entry point
(an approximate index's property, found in any process's view alike, not a sharing defect), and the
test would then fail by chance.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

import remindful
from remindful.embed.fake import FakeEmbedder
from remindful.engine.index_view import IndexView
from remindful.testing import catalog_rows

pytestmark = pytest.mark.slow

WORKER = r"""
import hashlib, json, logging, os, sys, time
import numpy as np
import remindful
from remindful.embed.fake import FakeEmbedder
from remindful.testing import catalog_rows

class Scattered(FakeEmbedder):  # hashed words plus a small random part seeded by the text
    def embed(self, texts):
        out = super().embed(texts)
        for row, text in enumerate(texts):
            seed = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")
            out[row] += np.random.default_rng(seed).normal(size=out.shape[1]).astype(np.float32) * 0.1
            out[row] /= np.linalg.norm(out[row])
        return out

path, me, n, workers = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
problems = []

class Catch(logging.Handler):
    def emit(self, record):
        if record.levelno >= logging.WARNING:
            problems.append(record.getMessage()[:300])

logging.getLogger("remindful").addHandler(Catch())
memory = remindful.open(path, embedder=Scattered())
for i in range(n):
    memory.store(f"worker{me} note{i} subject{me}x{i}", type="action")
    if i % 5 == 0:
        memory.search(f"subject{me}x{i}")
assert memory.flush(timeout=120)  # this process's vectors are in the index...
open(f"{path}/flushed-{me}", "w").close()
deadline = time.monotonic() + 180  # ...and every other process's (a guard against hanging, not a target)
while sum(os.path.exists(f"{path}/flushed-{w}") for w in range(workers)) < workers and time.monotonic() < deadline:
    time.sleep(0.05)
missed = []
for other in range(workers):
    for i in (0, n // 2, n - 1):
        text = f"worker{other} note{i} subject{other}x{i}"
        hits = memory.search(text, limit=3)
        if not hits or hits[0].content != text or "dense" not in hits[0].sources:
            missed.append([text, [(h.content, h.sources) for h in hits]])
memory.close()
print(json.dumps({"problems": problems, "missed": missed}))
"""


@pytest.fixture(scope="module")
def shared_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int, int, list[dict[str, list[object]]]]:
    """Four processes storing and searching one store, once for the tests below: the store, the
    number of workers and memories each, and what each process reported."""
    path, workers, n = tmp_path_factory.mktemp("shared") / "store", 4, 60
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, str(path), str(me), str(n), str(workers)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for me in range(workers)
    ]
    reports = []
    for proc in procs:
        out, err = proc.communicate(timeout=180)
        assert proc.returncode == 0, err[-2000:]
        reports.append(json.loads(out.strip().splitlines()[-1]))
    return path, workers, n, reports


def test_processes_sharing_a_store_keep_the_index_on_and_complete(shared_run: tuple[Path, int, int, list[Any]]) -> None:
    path, workers, n, reports = shared_run
    assert [r["problems"] for r in reports] == [[]] * workers  # no "Vector index unavailable", no retry that failed
    assert catalog_rows(path, "SELECT indexed, count(*) FROM memories GROUP BY indexed") == [(1, n * workers)]
    counted = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, chromadb; c = chromadb.PersistentClient(sys.argv[1]);"
            "print(c.get_collection('action_memories').count())",
            str(path / "chroma"),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert int(counted.stdout) == n * workers


def test_every_memory_is_dense_searchable_in_every_process_once_its_writer_flushed(
    shared_run: tuple[Path, int, int, list[Any]],
) -> None:
    _path, workers, _n, reports = shared_run
    assert [r["missed"] for r in reports] == [[]] * workers


def test_a_store_opening_while_another_indexes_keeps_the_others_vectors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression (issue 15): a store opening compared the index with the catalog without the index
    lock. Rows another process had upserted but not yet marked indexed looked stale, and it deleted
    their vectors: they stayed marked indexed, and dense retrieval never found them again (in one run
    of three of the four-process test, the first memory of each process). The interleaving is forced
    here: B is held between loading its view and comparing; A between its upsert and marking."""
    path = tmp_path / "store"
    a = remindful.open(path, embedder=FakeEmbedder(), **{"performance.async_indexing": False})
    a.store("first memory of A", type="action")
    store_a = a.engine
    b_loaded, go_b, b_writes, a_upserted, release_a = (threading.Event() for _ in range(5))

    reconcile, writing = IndexView.reconcile, IndexView.writing
    view_a = store_a.mirror._view

    def held_reconcile(self: IndexView, index: Any, *args: Any, **kwargs: Any) -> Any:
        if self is not view_a:
            b_loaded.set()
            go_b.wait(30)
        return reconcile(self, index, *args, **kwargs)

    def noted_writing(self: IndexView, index: Any, *args: Any) -> Any:
        if self is not view_a:
            b_writes.set()  # B decided what to delete (old code), or waits for the lock first (fixed)
        return writing(self, index, *args)

    monkeypatch.setattr(IndexView, "reconcile", held_reconcile)
    monkeypatch.setattr(IndexView, "writing", noted_writing)
    mark_indexed = store_a.catalog.mark_indexed

    def held_mark(ids: Any, value: bool = True) -> Any:
        if value and not a_upserted.is_set():
            a_upserted.set()
            release_a.wait(30)
        return mark_indexed(ids, value=value)

    monkeypatch.setattr(store_a.catalog, "mark_indexed", held_mark)
    b = remindful.open(path, embedder=FakeEmbedder(), **{"performance.async_indexing": False})
    opener = threading.Thread(target=lambda: b.engine.index)
    opener.start()
    assert b_loaded.wait(30)
    writer = threading.Thread(target=lambda: a.store("second memory of A", type="action"))
    writer.start()
    assert a_upserted.wait(30)
    go_b.set()
    b_writes.wait(10)  # the old code's B has compared by now; the fixed B is waiting for the lock
    release_a.set()
    writer.join(60)
    opener.join(60)
    index = b.engine.index
    assert index is not None
    assert catalog_rows(path, "SELECT count(*) FROM memories WHERE indexed = 1") == [(2,)]
    assert index.count("action_memories") == 2
    a.close()
    b.close()
