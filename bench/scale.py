"""How remindful holds up as a store grows: the same figures at each size, side by side.

Usage:
    python bench/scale.py [--sizes 10000,100000] [--cache DIR] [--pool 100000] [--queries 100]
                          [--ops] [--ops-max N] [--ops-skip reindex,restore] [--ops-only] [--compare REV]
                          [--fake-embedder] [--ingest-more N] [--json]

For each size a store is built once (cached in ``--cache``, default ``~/.cache/remindful-bench/scale``,
and reused while it holds that many memories): realistic mixed texts, the LoCoMo turns cycled with a
varying detail, one in five a tool-call record and one in ten a Markdown chunk, stored with
``store_batch`` in sessions of 20 over a few projects (scopes). Reported, per size:

- ingest rate until searchable (store_batch and the flush that follows: every vector indexed),
  on a fresh build only, beside the bare embedder's rate on the same texts;
- search latency p50/p95/p99: unscoped, scoped to a small project, filtered to one session;
- ``get`` and ``stats`` latency;
- open + first search of a fresh process, how long until its index is open (the searches that
  follow are measured after it), and that process's peak RSS after its searches;
- disk by component (catalog, Chroma, total, per memory; see bench/disk.py for the catalog's tables);
- with ``--ops``: backup, restore, reindex, export and dedup (dry run) times, on a copy of the store
  (with dedup, the clusters it found); ``--ops-only`` times those alone, on a copy of each cached
  store (nothing built or served; the process's peak RSS is reported), and with ``--compare`` the
  other tree works on copies of the same cached stores.

The model's vectors (real all-MiniLM-L6-v2, ONNX) are kept per text in ``<cache>/vectors.sqlite3``
(:class:`PooledEmbedder`): ``--pool`` distinct texts are embedded once, ever; memory ``i`` past the
pool is pool text ``i % pool`` with its own number, and its vector is that text's vector with a small
deterministic perturbation (cosine ~0.99), so a million memories cost the model ``--pool`` texts. A
build's ingest rate is measured with the vectors the cache already held taken from it (the row says
how many texts the model embedded during the build); the bare embedder's rate is measured on pool
texts in the same run, and the rate with the model is estimated by adding, at that bare rate, the
model's time for every text whose vector came from the cache (the background indexer embeds and
writes in turn, so the two times add up).

``--ingest-more N`` measures ingest on a store that already holds each size instead (nothing built
or served): on a copy of each cached store, in a fresh process whose index is open, ``N`` new texts
(the next numbers after the store's, every one embedded by the model: no vector cache) stored with
``store_batch`` and flushed until searchable, beside the bare model's rate on the same texts in the
same process (before and after, averaged). This is the rate a user at that size gets, with the
model's time measured rather than estimated. Before that, five short memories are stored and
flushed three times while the copy's vector snapshot (stale in a copy) is written whole, and three
times once it is written: a write's wait on that upkeep, beside the same write without it (after a
first write, which pays the process's first use of the index and the quota's reading). After it,
searches every 0.2 s while another thread stores 2,000 of the texts again, made new (an import under way in a
serving process), beside the same searches just before with nothing stored.

``--compare REV`` builds and measures the tree at commit REV too (a temporary ``git worktree``, its
``src`` first on PYTHONPATH, its stores cached under ``<cache>/<REV>``), in the same run.
``--fake-embedder`` (hash vectors) measures everything but the model, for a quick look.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from common import REPO, add_data_option, emit, load_locomo, machine, pct, timed, turn_texts
from disk import catalog_tables, dir_bytes

BATCH = 2000
SESSION_TURNS = 20
SMALL_PROJECT = "project:small"
#: The number a memory past the pool carries, stripped to find its pool text.
_NUMBER = re.compile(r" #(\d+)$")


def texts_for(base: list[str], n: int, pool: int, seed: int = 11) -> list[str]:
    """``n`` distinct texts: turns with a varying detail, tool-call records, Markdown chunks; past
    ``pool`` texts, the pool's texts again, each with its own number."""
    rng = random.Random(seed)
    words = " ".join(base).split()
    core = []
    for i in range(min(n, pool)):
        turn = base[i % len(base)]
        if i % 5 == 4:
            core.append(f"tool Bash: ran `grep -rn {rng.choice(words)} src/` exit 0, {rng.randint(1, 40)} matches")
        elif i % 10 == 3:
            core.append(f"## {' '.join(rng.choices(words, k=3))}\n\n{turn}\n\n- {' '.join(rng.choices(words, k=6))}")
        else:
            core.append(f"{turn} {' '.join(rng.choices(words, k=3))}")
    return [core[i % len(core)] + f" #{i}" for i in range(n)]


class PooledEmbedder:
    """The default embedder with every pool text's vector kept in a SQLite file (see the module
    docstring): a text ``core #i`` past the pool gets the vector of the pool text numbered ``i % pool``,
    perturbed by ``i``. Queries are embedded by the model."""

    def __init__(self, path: Path, texts_by_number: dict[int, str], pool: int) -> None:
        import sqlite3

        from remindful.embed import OnnxMiniLMEmbedder

        self.inner = OnnxMiniLMEmbedder()
        self._pool = pool
        self._texts = texts_by_number
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(path, check_same_thread=False)
        self._db.execute("CREATE TABLE IF NOT EXISTS vectors (text TEXT PRIMARY KEY, vector BLOB NOT NULL)")
        self.model_texts = 0

    @property
    def name(self) -> str:
        return str(self.inner.name)

    @property
    def dimension(self) -> int:
        return int(self.inner.dimension)

    def embed_query(self, text: str) -> Any:
        return self.inner.embed_query(text)

    def _pool_text(self, text: str) -> tuple[str, int]:
        found = _NUMBER.search(text)
        number = int(found.group(1)) if found else -1
        if number >= self._pool:
            return self._texts[number % self._pool], number
        return text, -1

    def embed(self, texts: Sequence[str]) -> Any:
        import numpy as np

        keys = [self._pool_text(t) for t in texts]
        wanted = sorted({k for k, _ in keys})
        have: dict[str, Any] = {}
        for start in range(0, len(wanted), 500):
            part = wanted[start : start + 500]
            marks = ",".join("?" * len(part))
            for text, blob in self._db.execute(f"SELECT text, vector FROM vectors WHERE text IN ({marks})", part):
                have[text] = np.frombuffer(blob, dtype=np.float32)
        missing = [t for t in wanted if t not in have]
        if missing:
            vectors = np.asarray(self.inner.embed(missing), dtype=np.float32)
            self.model_texts += len(missing)
            rows = [(t, v.tobytes()) for t, v in zip(missing, vectors, strict=True)]
            self._db.executemany("INSERT OR REPLACE INTO vectors VALUES (?, ?)", rows)
            self._db.commit()
            have.update(zip(missing, vectors, strict=True))
        out = np.empty((len(texts), self.dimension), dtype=np.float32)
        for row, (key, number) in enumerate(keys):
            vector = have[key]
            if number >= 0:
                noise = np.random.default_rng(number).standard_normal(vector.shape[0]).astype(np.float32)
                vector = vector + 0.004 * noise
                vector = vector / np.linalg.norm(vector)
            out[row] = vector
        return out


def scope_of(i: int) -> str:
    return SMALL_PROJECT if i % 50 == 0 else f"project:large-{i % 4}"


def make_embedder(args: argparse.Namespace, texts: list[str] | None = None) -> Any:
    if args.fake_embedder:
        from remindful.testing import FakeEmbedder

        return FakeEmbedder()
    pool = texts[: args.pool] if texts is not None else []
    return PooledEmbedder(args.cache / "vectors.sqlite3", dict(enumerate(pool)), args.pool)


def open_store(path: Path, embedder: Any, **settings: Any) -> Any:
    import remindful

    return remindful.open(path, embedder=embedder, **settings)


def store_texts(memory: Any, texts: list[str], sessions: str, progress: str | None = None) -> None:
    """``texts`` stored with ``store_batch``, ``BATCH`` at a time, in sessions of ``SESSION_TURNS``
    (named ``sessions`` and a number) over the projects of :func:`scope_of`."""
    for start in range(0, len(texts), BATCH):
        if progress:
            print(f"\r{progress}: {start:,}", end="", file=sys.stderr, flush=True)
        memory.store_batch(
            [
                {
                    "content": t,
                    "type": "conversation",
                    "session_id": f"{sessions}{(start + i) // SESSION_TURNS:07d}",
                    "scope": scope_of(start + i),
                }
                for i, t in enumerate(texts[start : start + BATCH])
            ]
        )


def build(path: Path, size: int, texts: list[str], embedder: Any) -> dict[str, Any] | None:
    """Build the store (or reuse it); the ingest figures, None when reused."""
    with open_store(path, embedder, **{"retention.max_items_per_collection": size * 2}) as memory:
        total = memory.stats().total_memories
        if total == size:
            return None
        if total:
            raise SystemExit(f"{path} holds {total:,} memories, not {size:,}: remove it to build again")
        started = time.perf_counter()
        store_texts(memory, texts, "s", progress=f"building {size:,}")
        memory.flush()
        print(file=sys.stderr)
        seconds = time.perf_counter() - started
    return {"seconds": round(seconds, 1), "model_texts": embedder_texts(embedder)}


def embedder_texts(embedder: Any) -> int:
    return int(getattr(embedder, "model_texts", 0))


def bare_rate(embedder: Any, texts: list[str]) -> float | None:
    """The throughput of ``embedder``'s model (:func:`model_rate`), None without one (hash vectors)."""
    inner = getattr(embedder, "inner", None)
    return None if inner is None else model_rate(inner, texts)


def model_rate(model: Any, texts: list[str]) -> float:
    """The model's own throughput (texts/s) on ``texts`` in batches of 32 (the store's default)."""
    model.embed(texts[:32])  # warm
    started = time.perf_counter()
    for start in range(0, len(texts), 32):
        model.embed(texts[start : start + 32])
    return len(texts) / (time.perf_counter() - started)


def latencies(fn: Any, args: list[Any]) -> list[float]:
    out = []
    for a in args:
        started = time.perf_counter()
        fn(a)
        out.append((time.perf_counter() - started) * 1000)
    return out


def warm(path: Path, fake: bool) -> None:
    """In a process of its own (the graph it loads stays out of the measuring ones): open the
    index, which writes the compact copy of its vectors a fresh process's first searches scan
    (engine/index_snapshot.py) if the store has none that matches it."""
    embedder = None
    if fake:
        from remindful.testing import FakeEmbedder

        embedder = FakeEmbedder()
    with open_store(path, embedder) as memory:
        memory.search("warm")
        memory.engine.mirror.settle()  # the snapshot written (a flush does not wait for it)


def peak_rss() -> int:
    """This process's peak RSS in bytes: VmHWM, of this program's memory alone (``ru_maxrss`` also
    counts what the process that started it held when it did: Linux carries it over ``exec``)."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def serve(path: Path, queries: list[str], fake: bool) -> dict[str, Any]:
    """In this (fresh) process: open + first search, then the searches, get, stats, and peak RSS."""
    embedder = None
    if fake:
        from remindful.testing import FakeEmbedder

        embedder = FakeEmbedder()
    started = time.perf_counter()
    with open_store(path, embedder) as memory:
        memory.search(queries[0])
        first = (time.perf_counter() - started) * 1000
        memory.engine.mirror.settle()  # the index opened in the background: what follows is the steady state
        ready = (time.perf_counter() - started) * 1000
        # The objects the open made (modules, the index's maps: ~100,000) call for a full collection
        # soon after (20-40 ms whatever the store's size): it belongs to the open, not to one of the
        # searches below (a p99 of 100 is their second slowest). A serving process pays it once.
        gc.collect()
        ids = [r[0] for r in memory.engine.catalog.read("SELECT id FROM memories ORDER BY random() LIMIT 50")]
        session = memory.engine.catalog.read(
            "SELECT session_id FROM memories LIMIT 1 OFFSET (SELECT count(*) / 2 FROM memories)"
        )[0][0]
        unscoped = latencies(memory.search, queries)
        small = latencies(lambda q: memory.search(q, scope=[SMALL_PROJECT]), queries)
        in_session = latencies(lambda q: memory.search(q, session_id=session), queries)
        gets = latencies(memory.get, ids)
        stats = latencies(lambda _: memory.stats(), list(range(10)))
    rss = peak_rss()
    return {
        "open_first_search_ms": round(first, 1),
        "index_ready_ms": round(ready, 1),
        "search_ms": {
            name: [pct(v, 0.5, 1), pct(v, 0.95, 1), pct(v, 0.99, 1)]
            for name, v in (("unscoped", unscoped), ("small project", small), ("one session", in_session))
        },
        "get_ms": pct(gets, 0.5, 2),
        "stats_ms": pct(stats, 0.5, 2),
        "rss_mib": round(rss / 2**20),
    }


def operations(path: Path, embedder: Any, skip: frozenset[str] = frozenset()) -> dict[str, Any]:
    """Seconds of export, backup, dedup (dry run), reindex and restore, on a copy of the store
    (but those in ``skip``; restore needs the backup)."""
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="remindful-scale-ops-", dir=path.parent) as scratch:
        copy = Path(scratch) / "store"
        shutil.copytree(path, copy, ignore=shutil.ignore_patterns("backups", "*.lock", "*.gate"))
        with open_store(copy, embedder) as memory:
            for name, fn in (
                ("export", lambda: memory.export("json", Path(scratch) / "export.json")),
                ("backup", lambda: memory.backup("scale")),
                ("dedup (dry run)", lambda: memory.dedup(dry_run=True)),
                ("reindex", lambda: memory.reindex()),
            ):
                if name.split()[0] in skip:
                    continue
                started = time.perf_counter()
                result = fn()
                out[name] = round(time.perf_counter() - started, 1)
                if name == "backup":
                    archive = result.path
                if name.startswith("dedup"):
                    out["dedup clusters"] = f"{result.clusters:,} / {result.deleted:,}"
            if "restore" not in skip and "backup" not in skip:
                started = time.perf_counter()
                memory.restore(archive, confirm=True)
                out["restore"] = round(time.perf_counter() - started, 1)
    return out


def wait_for(check: Any, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def probe_write(memory: Any, label: str) -> float:
    """Seconds to store five short memories and have them searchable."""

    def write() -> None:
        memory.store_batch([{"content": f"probe {label} {i}: the ferry leaves at {i} pm"} for i in range(5)])
        memory.flush()

    return timed(write)[0]


def seconds(values: list[float] | None) -> str:
    return "-" if not values else ", ".join(f"{v:.2f}" for v in values)


def ingest_more(path: Path, texts: list[str]) -> dict[str, Any]:
    """In this (fresh) process: ``texts`` stored into the store at ``path`` (a copy) once its index
    is open, until searchable, beside the bare model's rate on the same texts before and after."""
    from remindful.embed import OnnxMiniLMEmbedder

    model = OnnxMiniLMEmbedder()
    before = model_rate(model, texts)
    # The build's quota: at the default (10,000 a type) the first store would evict the rest.
    with open_store(path, model, **{"retention.max_items_per_collection": 100_000_000}) as memory:
        total = memory.stats().total_memories
        probe_write(memory, "first")  # a process's first write (its index opened, its quota read)
        memory.search("warm")
        # A copy's snapshot is stale: written whole once a search asked (~6 s at 1,000,000), its
        # rows read while writes go on. Small writes then, beside the same once it is done.
        rewriting = wait_for(lambda: (path / "vectors.snapshot.pending").exists(), 60)
        during = [probe_write(memory, f"during {n}") for n in range(3)]
        # Its upkeep done: what follows is a store at its size, not one opening.
        memory.engine.mirror.settle()
        idle = [probe_write(memory, f"after {n}") for n in range(3)]
        started, cpu = time.perf_counter(), time.process_time()
        store_texts(memory, texts, "new")
        memory.flush()
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
        found = memory.search(texts[-1], limit=1)
        searching = searches_during_ingest(memory, texts)
    model_cpu = time.process_time()
    after = model_rate(model, texts)
    model_cpu = time.process_time() - model_cpu
    return {
        "store_before": total,
        "texts": len(texts),
        "seconds": round(seconds, 1),
        "per_s": round(len(texts) / seconds, 1),
        "bare_per_s": round((before + after) / 2, 1),
        "bare_before_after": [round(before, 1), round(after, 1)],
        # CPU a text (ms, both cores): the bare model's (loaded; its warm-up batch included), the ingest's in all
        "cpu_ms_bare_ingest": [round(model_cpu * 1000 / len(texts), 2), round(cpu * 1000 / len(texts), 2)],
        "last_found": bool(found) and found[0].content == texts[-1],
        "probe_during_rewrite_s": [round(x, 3) for x in during] if rewriting else None,
        "probe_after_s": [round(x, 3) for x in idle],
        "rss_mib": round(peak_rss() / 2**20),
        **searching,
    }


#: Searches during an import: how many texts the import stores (again, under new sessions), and
#: the pause between two searches.
IMPORT_TEXTS = 2000
SEARCH_EVERY_S = 0.2


def searches_during_ingest(memory: Any, texts: list[str]) -> dict[str, Any]:
    """Search latency (ms, p50/p95/max) while another thread stores ``IMPORT_TEXTS`` of ``texts``
    made new (a suffix) with ``store_batch`` until searchable (an import under way in a serving
    process), beside the same searches just before, with nothing stored."""
    queries = [" ".join(t.split()[1:8]) for t in random.Random(7).sample(texts, 40)]
    idle = [timed(memory.search, q)[0] * 1000 for q in queries[:20]]
    again = [f"{t} (imported)" for t in texts[:IMPORT_TEXTS]]
    importing = threading.Thread(target=lambda: (store_texts(memory, again, "import"), memory.flush()))
    importing.start()
    during: list[float] = []
    while importing.is_alive():
        during.append(timed(memory.search, queries[len(during) % len(queries)])[0] * 1000)
        time.sleep(SEARCH_EVERY_S)
    importing.join()
    return {
        "search_idle_ms": [pct(idle, 0.5, 1), pct(idle, 0.95, 1), round(max(idle), 1)],
        "search_during_import_ms": [pct(during, 0.5, 1), pct(during, 0.95, 1), round(max(during), 1)],
        "searches_during_import": len(during),
    }


def ingest_on_copy(path: Path, size: int, args: argparse.Namespace) -> dict[str, Any]:
    """:func:`ingest_more` on a copy of the cached store at ``path``, in a process of its own."""
    base = turn_texts(load_locomo(args.data), speaker=True)
    texts = texts_for(base, size + args.ingest_more, args.pool)[size:]
    with tempfile.TemporaryDirectory(prefix="remindful-scale-ingest-", dir=path.parent) as scratch:
        copy = Path(scratch) / "store"
        shutil.copytree(path, copy, ignore=shutil.ignore_patterns("backups", "*.lock", "*.gate"))
        command = [sys.executable, __file__, "--ingest-into", str(copy), "--data", str(args.data)]
        done = subprocess.run(command, input=json.dumps(texts), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"ingesting into a copy of {path} failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def measure(size: int, args: argparse.Namespace, cache: Path) -> dict[str, Any]:
    base = turn_texts(load_locomo(args.data), speaker=True)
    texts = texts_for(base, size, args.pool)
    path = cache / f"{'fake' if args.fake_embedder else 'onnx'}-{size}"
    embedder = make_embedder(args, texts)
    if (args.ops_only or args.ingest_more) and not (path / "catalog.sqlite3").exists():
        raise SystemExit(f"--ops-only and --ingest-more need a cached store at {path}: run without them once")
    if args.ingest_more:
        return {"ingest_more": ingest_on_copy(path, size, args)}
    if args.ops_only:
        ops = operations(path, embedder, args.ops_skip)
        return {"ops_s": ops, "rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}
    ingest = build(path, size, texts, embedder)
    bare = bare_rate(embedder, random.Random(5).sample(texts[: args.pool], min(1000, size)))
    queries = [" ".join(t.split()[1:8]) for t in random.Random(3).sample(texts, args.queries)]
    command = [sys.executable, __file__, "--serve", str(path), "--data", str(args.data)]
    command += ["--fake-embedder"] if args.fake_embedder else []
    warmed = subprocess.run([*command[:2], "--warm", *command[3:]], capture_output=True, text=True, check=False)
    if warmed.returncode != 0:
        raise SystemExit(f"opening {path} failed:\n{warmed.stderr[-3000:]}")
    done = subprocess.run(command, input=json.dumps(queries), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"serving {path} failed:\n{done.stderr[-3000:]}")
    served = json.loads(done.stdout.strip().splitlines()[-1])
    catalog = path / "catalog.sqlite3"
    chroma = sum(dir_bytes(p) for p in path.iterdir() if p.is_dir() and "chroma" in p.name)
    total = dir_bytes(path) - sum(dir_bytes(p) for p in path.glob("backups"))
    result: dict[str, Any] = {
        "ingest": ingest,
        "bare_embedder_per_s": None if bare is None else round(bare, 1),
        **served,
        "disk": {
            "catalog": catalog.stat().st_size,
            "chroma": chroma,
            "total": total,
            "per_memory": round(total / size),
            "tables": catalog_tables(catalog),
        },
    }
    if args.ops and size <= args.ops_max:
        result["ops_s"] = operations(path, embedder, args.ops_skip)
    return result


def ingest_text(x: dict[str, Any], size: int) -> str:
    """Memories per second until searchable, and how many texts the model embedded meanwhile."""
    ingest = x["ingest"]
    if ingest is None:
        return "cached"
    return f"{size / ingest['seconds']:,.0f} ({ingest['model_texts']:,})"


def with_model(x: dict[str, Any], size: int) -> str:
    """Ingest rate with the model's time added, at the bare rate, for every text whose vector came
    from the cache (an estimate: see the module docstring), and its ratio to the bare rate."""
    ingest, bare = x["ingest"], x["bare_embedder_per_s"]
    if ingest is None or not bare:
        return "-"
    rate = size / (ingest["seconds"] + (size - ingest["model_texts"]) / bare)
    return f"{rate:,.0f} ({rate / bare:.2f}x)"


def lines(result: dict[str, Any]) -> list[str]:
    columns = [(tree, s) for tree, sizes in result["trees"].items() for s in sizes]
    out = [f"{'':30}" + "".join(f"{tree[:10] + ' ' + format(int(s), ','):>24}" for tree, s in columns)]

    def row(label: str, get: Any) -> None:
        out.append(f"{label:30}" + "".join(f"{get(result['trees'][t][s], int(s)):>24}" for t, s in columns))

    if result.get("ingest_more"):

        def more(key: str) -> Any:
            return lambda x, n: x["ingest_more"][key]

        row("memories added", more("texts"))
        row("until searchable s", more("seconds"))
        row("ingest /s", more("per_s"))
        row("bare model /s (before, after)", lambda x, n: "{}, {}".format(*x["ingest_more"]["bare_before_after"]))
        row("ingest / bare", lambda x, n: f"{x['ingest_more']['per_s'] / x['ingest_more']['bare_per_s']:.2f}x")
        row("CPU ms a text: bare, ingest", lambda x, n: "{}, {}".format(*x["ingest_more"]["cpu_ms_bare_ingest"]))
        row("last one found", more("last_found"))
        row("5 stored+flushed: rewrite s", lambda x, n: seconds(x["ingest_more"].get("probe_during_rewrite_s")))
        row("5 stored+flushed: after s", lambda x, n: seconds(x["ingest_more"].get("probe_after_s")))
        row("search ms p50/95/max: idle", lambda x, n: "/".join(map(str, x["ingest_more"]["search_idle_ms"])))
        row("  during an import", lambda x, n: "/".join(map(str, x["ingest_more"]["search_during_import_ms"])))
        row("peak RSS MiB", more("rss_mib"))
        return out
    if result.get("ops_only"):
        row("peak RSS of the ops MiB", lambda x, n: x["rss_mib"])
        for op in sorted({k for t, s in columns for k in result["trees"][t][s]["ops_s"]}):
            row(op if op == "dedup clusters" else f"{op} s", lambda x, n, op=op: x["ops_s"].get(op, "-"))
        return out
    row("ingest /s (texts embedded)", ingest_text)
    row("bare embedder /s", lambda x, n: x["bare_embedder_per_s"] or "-")
    row("ingest with the model /s (est)", with_model)
    for name in ("unscoped", "small project", "one session"):
        row(f"search {name} p50/95/99", lambda x, n, name=name: "/".join(str(v) for v in x["search_ms"][name]))
    row("get p50 ms", lambda x, n: x["get_ms"])
    row("stats p50 ms", lambda x, n: x["stats_ms"])
    row("open + first search ms", lambda x, n: x["open_first_search_ms"])
    row("open until index ready ms", lambda x, n: x.get("index_ready_ms", "-"))
    row("peak RSS serving MiB", lambda x, n: x["rss_mib"])
    row("disk catalog MiB", lambda x, n: round(x["disk"]["catalog"] / 2**20, 1))
    row("disk Chroma MiB", lambda x, n: round(x["disk"]["chroma"] / 2**20, 1))
    row("disk total MiB", lambda x, n: round(x["disk"]["total"] / 2**20, 1))
    row("disk per memory B", lambda x, n: x["disk"]["per_memory"])
    ops = sorted({k for t, s in columns for k in result["trees"][t][s].get("ops_s", {})})
    for op in ops:
        label = op if op == "dedup clusters" else f"{op} s"
        row(label, lambda x, n, op=op: x.get("ops_s", {}).get(op, "-"))
    if result["fake_embedder"]:
        out.append("(hash vectors: the model's cost is not in these figures)")
    else:
        out.append(f"(vectors of {result['pool']:,} distinct texts reused past them: see the module docstring)")
    return out


def git(*args: str) -> str:
    done = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"git {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout.strip()


def run_tree(src: Path, cache: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Measure every size in a process of its own, importing remindful from ``src``."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(src), os.environ.get("PYTHONPATH")]))}
    command = [sys.executable, __file__, "--worker", str(cache), *sys.argv[1:]]
    done = subprocess.run(command, env=env, stdout=subprocess.PIPE, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"measuring {src} failed")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000,100000", help="comma-separated store sizes (default 10000,100000)")
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "remindful-bench" / "scale")
    parser.add_argument("--pool", type=int, default=100_000, help="distinct texts the model embeds (default 100,000)")
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--ops", action="store_true", help="time export, backup, dedup, reindex and restore too")
    parser.add_argument(
        "--ops-max", type=int, default=100_000, help="only at sizes up to this many (default 100,000; reindex is slow)"
    )
    parser.add_argument(
        "--ops-skip",
        type=lambda value: frozenset(filter(None, value.split(","))),
        default=frozenset(),
        help="comma-separated ops not to time (export, backup, dedup, reindex, restore)",
    )
    parser.add_argument(
        "--ops-only", action="store_true", help="time the ops alone, on copies of the cached stores (nothing built)"
    )
    parser.add_argument(
        "--ingest-more",
        type=int,
        default=0,
        metavar="N",
        help="measure ingest of N new texts on a copy of each cached store (nothing built or served)",
    )
    parser.add_argument("--compare", metavar="REV", help="measure the tree at this commit too, in the same run")
    parser.add_argument("--fake-embedder", action="store_true", help="hash vectors instead of the ONNX model")
    parser.add_argument("--serve", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--warm", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--ingest-into", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--json", action="store_true")
    add_data_option(parser)
    args = parser.parse_args()
    if args.warm:
        warm(args.warm, args.fake_embedder)
        return 0
    if args.ingest_into:
        print(json.dumps(ingest_more(args.ingest_into, json.loads(sys.stdin.read()))))
        return 0
    if args.serve:
        print(json.dumps(serve(args.serve, json.loads(sys.stdin.read()), args.fake_embedder)))
        return 0
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.worker:
        args.worker.mkdir(parents=True, exist_ok=True)
        print(json.dumps({str(s): measure(s, args, args.worker) for s in sizes}))
        return 0
    args.cache.mkdir(parents=True, exist_ok=True)
    trees: dict[str, Any] = {}
    if args.compare:
        sha = git("rev-parse", "--short", args.compare)
        with tempfile.TemporaryDirectory(prefix="remindful-scale-") as scratch:
            tree = Path(scratch) / "tree"
            git("worktree", "add", "--detach", "--quiet", str(tree), sha)
            try:
                cached = "this" if args.ops_only or args.ingest_more else sha
                trees[sha] = run_tree(tree / "src", args.cache / cached, args)
            finally:
                git("worktree", "remove", "--force", str(tree))
    trees["this tree"] = run_tree(REPO / "src", args.cache / "this", args)
    result = {"trees": trees, "pool": args.pool, "fake_embedder": args.fake_embedder, "machine": machine()}
    result["ops_only"] = args.ops_only
    result["ingest_more"] = args.ingest_more
    emit(result, args.json, lines)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
