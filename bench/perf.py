"""Storage and search performance of the real stack (ONNX MiniLM + embedded Chroma + SQLite).

Prints, each against a baseline measured in the same run:
- store_batch ingest rate of 1,000 memories vs the raw embedder's rate on the same texts, when the
  call returns (acknowledged: catalog committed) and when Chroma holds every vector (``flush``);
- a batch of 50 vs 50 single stores, the same two ways;
- first-use init (open → first store), get, stats;
- search p50/p95 (including query embedding, query cache off) at each size, with and without a
  session filter, against plain Chroma queries on the same collection; and p50 with two broad
  restrictions (one type, which every memory here has; the newer half by time); and p50 of searches
  made after IDLE_S of idleness (as an agent's are), against Chroma queries made the same way.

    python bench/perf.py --sizes 10000,100000 [--json]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

import remindful
from remindful.embed import OnnxMiniLMEmbedder

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo_dev.json"
#: Searches "after idleness" wait this long before each: longer than any cache the searches keep warm.
IDLE_S = 1.5
IDLE_QUERIES = 12


def corpus(n: int, seed: int = 7) -> list[str]:
    """n distinct, realistic texts: LoCoMo turns with a varying detail appended."""
    base = []
    for sample in json.loads(DATA.read_text()):
        conv = sample["conversation"]
        for key, value in conv.items():
            if key.startswith("session_") and isinstance(value, list):
                base += [f"{t['speaker']}: {t['text']}" for t in value]
    rng = random.Random(seed)
    words = " ".join(base).split()
    return [f"{base[i % len(base)]} {' '.join(rng.choices(words, k=4))} #{i}" for i in range(n)]


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)


class NoCache:
    """The raw ONNX embedder under another name, so that no vector stored by an earlier run is
    reused; with ``embeddings.cache_size: 0`` (no in-process LRU) every query pays for its embedding."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name, self.dimension = inner.name + "-nocache", inner.dimension

    def embed(self, texts: list[str]) -> np.ndarray:
        return self.inner.embed(texts)

    def embed_query(self, text: str) -> np.ndarray:
        return self.inner.embed_query(text)


def bench_ingest(embedder: Any, root: Path) -> dict[str, Any]:
    texts = corpus(1000, seed=1)
    started = time.perf_counter()
    embedder.embed(texts)
    raw_rate = len(texts) / (time.perf_counter() - started)
    with remindful.open(root / "ingest", embedder=NoCache(embedder)) as memory:
        memory.store("warm up the index")
        memory.flush()
        started = time.perf_counter()
        memory.store_batch([{"content": t} for t in corpus(1000, seed=2)])
        acknowledged = time.perf_counter() - started
        memory.flush()  # until Chroma holds every vector: the whole cost of the batch
        indexed = time.perf_counter() - started
        fifty = corpus(100, seed=3)
        started = time.perf_counter()
        memory.store_batch([{"content": t} for t in fifty[:50]])
        batch50 = time.perf_counter() - started
        memory.flush()
        batch50_indexed = time.perf_counter() - started
        started = time.perf_counter()
        for t in fifty[50:]:
            memory.store(t)
        single50 = time.perf_counter() - started
        memory.flush()
        single50_indexed = time.perf_counter() - started
    return {
        "raw_embed_per_s": round(raw_rate, 1),
        "store_batch_per_s": round(1000 / acknowledged, 1),
        "store_batch_indexed_per_s": round(1000 / indexed, 1),
        "ingest_ratio_vs_raw": round(1000 / acknowledged / raw_rate, 3),
        "ingest_indexed_ratio_vs_raw": round(1000 / indexed / raw_rate, 3),
        "batch50_s": round(batch50, 3),
        "single50_s": round(single50, 3),
        "batch50_speedup": round(single50 / batch50, 2),
        "batch50_indexed_speedup": round(single50_indexed / batch50_indexed, 2),
    }


def bench_size(embedder: Any, root: Path, size: int, queries: int, *, reuse: bool = False) -> dict[str, Any]:
    texts = corpus(size)
    path = root / f"s{size}"
    ingest_s = None
    with remindful.open(path, embedder=embedder, **{"retention.max_items_per_collection": size * 2}) as memory:
        built = reuse and memory.stats()["total_memories"] == size
        started = time.perf_counter()
        for start in range(0, 0 if built else size, 2000):
            memory.store_batch(
                [
                    {"content": t, "type": "conversation", "session_id": f"session_{(start + i) % 1000:04d}"}
                    for i, t in enumerate(texts[start : start + 2000])
                ]
            )
        if not built:
            ingest_s = time.perf_counter() - started
    # A fresh process-like open: nothing cached but the files.
    started = time.perf_counter()
    memory = remindful.open(path, embedder=NoCache(embedder), **{"embeddings.cache_size": 0})
    open_ms = (time.perf_counter() - started) * 1000
    started = time.perf_counter()
    memory.search("warm up")
    first_search_ms = (time.perf_counter() - started) * 1000
    rng = random.Random(3)
    qs = [" ".join(t.split()[1:8]) for t in rng.sample(texts, queries)]
    plain, filtered, gets, stats_ms = [], [], [], []
    ids = [m.id for m in memory.list(limit=200)]
    for q in qs:
        t0 = time.perf_counter()
        memory.search(q, limit=10)
        plain.append((time.perf_counter() - t0) * 1000)
    for i, q in enumerate(qs):
        t0 = time.perf_counter()
        memory.search(q, limit=10, session_id=f"session_{i % 1000:04d}")
        filtered.append((time.perf_counter() - t0) * 1000)
    # Broad restrictions: one type (every memory here) and the newer half by time.
    half = memory.engine.catalog.read(  # type: ignore[union-attr]
        "SELECT created_at FROM memories ORDER BY created_at LIMIT 1 OFFSET ?", [size // 2]
    )[0][0]
    typed, broad = [], []
    for q in qs:
        t0 = time.perf_counter()
        memory.search(q, limit=10, types=["conversation"])
        typed.append((time.perf_counter() - t0) * 1000)
        t0 = time.perf_counter()
        memory.search(q, limit=10, since=half)
        broad.append((time.perf_counter() - t0) * 1000)
    # After idleness, alternating with the baseline (embedding + plain Chroma) made the same way.
    collection = memory.engine.index._collection("conversation_memories")  # type: ignore[union-attr]
    idle, base_idle = [], []
    for q in qs[:IDLE_QUERIES]:
        time.sleep(IDLE_S)
        t0 = time.perf_counter()
        memory.search(q, limit=10)
        idle.append((time.perf_counter() - t0) * 1000)
        time.sleep(IDLE_S)
        t0 = time.perf_counter()
        collection.query(query_embeddings=embedder.embed([q]).tolist(), n_results=10)
        base_idle.append((time.perf_counter() - t0) * 1000)
    for memory_id in ids:
        t0 = time.perf_counter()
        memory.get(memory_id)
        gets.append((time.perf_counter() - t0) * 1000)
    for _ in range(20):
        t0 = time.perf_counter()
        memory.stats()
        stats_ms.append((time.perf_counter() - t0) * 1000)
    # Baseline: plain Chroma on the same collection, same query vectors (embedding included).
    base_plain, base_filtered = [], []
    for i, q in enumerate(qs):
        t0 = time.perf_counter()
        collection.query(query_embeddings=embedder.embed([q]).tolist(), n_results=10)
        base_plain.append((time.perf_counter() - t0) * 1000)
        t0 = time.perf_counter()
        collection.query(
            query_embeddings=embedder.embed([q]).tolist(), n_results=10, where={"session_id": f"session_{i % 1000:04d}"}
        )
        base_filtered.append((time.perf_counter() - t0) * 1000)
    memory.close()
    return {
        "size": size,
        "ingest_per_s": round(size / ingest_s, 1) if ingest_s else None,
        "open_ms": round(open_ms, 2),
        "first_search_ms": round(first_search_ms, 1),
        "search_p50_ms": pct(plain, 0.5),
        "search_p95_ms": pct(plain, 0.95),
        "session_search_p50_ms": pct(filtered, 0.5),
        "session_search_p95_ms": pct(filtered, 0.95),
        "type_search_p50_ms": pct(typed, 0.5),
        "half_search_p50_ms": pct(broad, 0.5),
        "idle_search_p50_ms": pct(idle, 0.5),
        "chroma_idle_p50_ms": pct(base_idle, 0.5),
        "chroma_p50_ms": pct(base_plain, 0.5),
        "chroma_session_p50_ms": pct(base_filtered, 0.5),
        "get_p50_ms": pct(gets, 0.5),
        "stats_p50_ms": pct(stats_ms, 0.5),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000", help="comma-separated store sizes (e.g. 10000,100000)")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--store-dir",
        type=Path,
        default=None,
        help="keep the sized stores here and reuse them on the next run (no ingest figure then)",
    )
    parser.add_argument("--search-only", action="store_true", help="skip init and ingest measurements")
    args = parser.parse_args(argv)
    embedder = OnnxMiniLMEmbedder()
    started = time.perf_counter()
    embedder.embed(["load the model"])
    result: dict[str, Any] = {"model_load_ms": round((time.perf_counter() - started) * 1000, 1)}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        if not args.search_only:
            started = time.perf_counter()
            with remindful.open(root / "init", embedder=embedder) as memory:
                memory.store("first memory")
                result["first_use_init_ms"] = round((time.perf_counter() - started) * 1000, 1)
            result["ingest"] = bench_ingest(embedder, root)
        stores = args.store_dir or root
        result["sizes"] = [
            bench_size(embedder, stores, int(s), args.queries, reuse=args.store_dir is not None)
            for s in args.sizes.split(",")
        ]
    if args.json:
        print(json.dumps(result))
        return 0
    if "ingest" in result:
        print(f"model load {result['model_load_ms']} ms; first-use init {result['first_use_init_ms']} ms")
        ing = result["ingest"]
        print(
            f"ingest: store_batch {ing['store_batch_per_s']}/s acknowledged, {ing['store_batch_indexed_per_s']}/s "
            f"indexed, vs raw embedder {ing['raw_embed_per_s']}/s = {ing['ingest_ratio_vs_raw']}x / "
            f"{ing['ingest_indexed_ratio_vs_raw']}x; batch of 50 {ing['batch50_speedup']}x faster than 50 singles "
            f"({ing['batch50_indexed_speedup']}x until indexed)"
        )
    for s in result["sizes"]:
        print(
            f"{s['size']:>7} memories: search p50 {s['search_p50_ms']} ms (p95 {s['search_p95_ms']}), "
            f"session-filtered p50 {s['session_search_p50_ms']} ms (p95 {s['session_search_p95_ms']}); "
            f"one type p50 {s['type_search_p50_ms']} ms; newer half p50 {s['half_search_p50_ms']} ms; "
            f"plain Chroma p50 {s['chroma_p50_ms']} / filtered {s['chroma_session_p50_ms']} ms; "
            f"after {IDLE_S} s idle: search p50 {s['idle_search_p50_ms']} ms vs Chroma {s['chroma_idle_p50_ms']} ms; "
            f"get {s['get_p50_ms']} ms; stats {s['stats_p50_ms']} ms; open {s['open_ms']} ms; "
            f"ingest {s['ingest_per_s']}/s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
