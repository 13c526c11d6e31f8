"""How remindful holds up as a store grows: the same figures at each size, side by side.

Usage:
    python bench/scale.py [--sizes 10000,100000] [--cache DIR] [--queries 100] [--fake-embedder] [--json]

For each size a store is built once (cached in ``--cache``, default ``~/.cache/remindful-bench/scale``,
and reused while it holds that many memories): realistic mixed texts, the LoCoMo turns cycled with a
varying detail, one in five a tool-call record and one in ten a Markdown chunk, stored with
``store_batch`` in sessions of 20 over a few projects (scopes). Reported, per size:

- ingest rate until searchable (store_batch and the flush that follows: every vector indexed),
  on a fresh build only;
- search latency p50/p95/p99: unscoped, scoped to a small project, filtered to one session;
- ``get`` and ``stats`` latency;
- open + first search of a fresh process, and that process's peak RSS after its searches;
- disk by component (catalog, Chroma, total, per memory; see bench/disk.py for the catalog's tables).

1,000,000 memories is a size like any other (``--sizes 100000,1000000``), but building it embeds a
million texts: hours on a laptop's two cores. ``--fake-embedder`` (hash vectors) measures everything
but the model, for a quick look at the storage side.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from common import REPO, add_data_option, emit, load_locomo, machine, pct, turn_texts
from disk import dir_bytes

BATCH = 2000
SESSION_TURNS = 20
SMALL_PROJECT = "project:small"


def texts_for(base: list[str], n: int, seed: int = 11) -> list[str]:
    """``n`` distinct texts: turns with a varying detail, tool-call records, Markdown chunks."""
    rng = random.Random(seed)
    words = " ".join(base).split()
    out = []
    for i in range(n):
        turn = base[i % len(base)]
        if i % 5 == 4:
            out.append(f"tool Bash: ran `grep -rn {rng.choice(words)} src/` exit 0, {rng.randint(1, 40)} matches #{i}")
        elif i % 10 == 3:
            out.append(
                f"## {' '.join(rng.choices(words, k=3))}\n\n{turn}\n\n- {' '.join(rng.choices(words, k=6))} #{i}"
            )
        else:
            out.append(f"{turn} {' '.join(rng.choices(words, k=3))} #{i}")
    return out


def scope_of(i: int) -> str:
    return SMALL_PROJECT if i % 50 == 0 else f"project:large-{i % 4}"


def open_store(path: Path, fake: bool, **settings: Any) -> Any:
    import remindful

    embedder = None
    if fake:
        from remindful.testing import FakeEmbedder

        embedder = FakeEmbedder()
    return remindful.open(path, embedder=embedder, **settings)


def build(path: Path, size: int, texts: list[str], fake: bool) -> float | None:
    """Build the store (or reuse it); the ingest rate until searchable, None when reused."""
    with open_store(path, fake, **{"retention.max_items_per_collection": size * 2}) as memory:
        total = memory.stats().total_memories
        if total == size:
            return None
        if total:
            raise SystemExit(f"{path} holds {total:,} memories, not {size:,}: remove it to build again")
        started = time.perf_counter()
        for start in range(0, size, BATCH):
            print(f"\rbuilding {size:,}: {start:,}", end="", file=sys.stderr, flush=True)
            memory.store_batch(
                [
                    {
                        "content": t,
                        "type": "conversation",
                        "session_id": f"s{(start + i) // SESSION_TURNS:07d}",
                        "scope": scope_of(start + i),
                    }
                    for i, t in enumerate(texts[start : start + BATCH])
                ]
            )
        memory.flush()
        print(file=sys.stderr)
        return size / (time.perf_counter() - started)


def latencies(fn: Any, args: list[Any]) -> list[float]:
    out = []
    for a in args:
        started = time.perf_counter()
        fn(a)
        out.append((time.perf_counter() - started) * 1000)
    return out


def serve(path: Path, queries: list[str], fake: bool) -> dict[str, Any]:
    """In this (fresh) process: open + first search, then the searches, get, stats, and peak RSS."""
    import resource

    started = time.perf_counter()
    with open_store(path, fake) as memory:
        memory.search(queries[0])
        first = (time.perf_counter() - started) * 1000
        ids = [r[0] for r in memory.engine.catalog.read("SELECT id FROM memories ORDER BY random() LIMIT 50")]
        session = memory.engine.catalog.read("SELECT session_id FROM memories LIMIT 1 OFFSET 777")[0][0]
        unscoped = latencies(memory.search, queries)
        small = latencies(lambda q: memory.search(q, scope=[SMALL_PROJECT]), queries)
        in_session = latencies(lambda q: memory.search(q, session_id=session), queries)
        gets = latencies(memory.get, ids)
        stats = latencies(lambda _: memory.stats(), list(range(10)))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {
        "open_first_search_ms": round(first, 1),
        "search_ms": {
            name: [pct(v, 0.5, 1), pct(v, 0.95, 1), pct(v, 0.99, 1)]
            for name, v in (("unscoped", unscoped), ("small project", small), ("one session", in_session))
        },
        "get_ms": pct(gets, 0.5, 2),
        "stats_ms": pct(stats, 0.5, 2),
        "rss_mib": round(rss / 2**20),
    }


def measure(size: int, args: argparse.Namespace) -> dict[str, Any]:
    base = turn_texts(load_locomo(args.data), speaker=True)
    texts = texts_for(base, size)
    path = args.cache / f"{'fake' if args.fake_embedder else 'onnx'}-{size}"
    rate = build(path, size, texts, args.fake_embedder)
    queries = [" ".join(t.split()[1:8]) for t in random.Random(3).sample(texts, args.queries)]
    command = [sys.executable, __file__, "--serve", str(path), "--data", str(args.data)]
    command += ["--fake-embedder"] if args.fake_embedder else []
    done = subprocess.run(command, input=json.dumps(queries), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"serving {path} failed:\n{done.stderr[-3000:]}")
    served = json.loads(done.stdout.strip().splitlines()[-1])
    catalog = path / "catalog.sqlite3"
    chroma = sum(dir_bytes(p) for p in path.iterdir() if p.is_dir() and "chroma" in p.name)
    total = dir_bytes(path)
    return {
        "ingest_per_s": None if rate is None else round(rate, 1),
        **served,
        "disk": {
            "catalog": catalog.stat().st_size,
            "chroma": chroma,
            "total": total,
            "per_memory": round(total / size),
        },
    }


def lines(result: dict[str, Any]) -> list[str]:
    sizes = list(result["sizes"])
    r = result["sizes"]
    out = [f"{'':28}" + "".join(f"{int(s):>22,}" for s in sizes)]

    def row(label: str, get: Any) -> None:
        out.append(f"{label:28}" + "".join(f"{get(r[s]):>22}" for s in sizes))

    row("ingest until searchable /s", lambda x: "cached" if x["ingest_per_s"] is None else x["ingest_per_s"])
    for name in ("unscoped", "small project", "one session"):
        row(f"search {name} p50/95/99 ms", lambda x, n=name: "/".join(str(v) for v in x["search_ms"][n]))
    row("get p50 ms", lambda x: x["get_ms"])
    row("stats p50 ms", lambda x: x["stats_ms"])
    row("open + first search ms", lambda x: x["open_first_search_ms"])
    row("peak RSS serving MiB", lambda x: x["rss_mib"])
    row("disk catalog MiB", lambda x: round(x["disk"]["catalog"] / 2**20, 1))
    row("disk Chroma MiB", lambda x: round(x["disk"]["chroma"] / 2**20, 1))
    row("disk total MiB", lambda x: round(x["disk"]["total"] / 2**20, 1))
    row("disk per memory B", lambda x: x["disk"]["per_memory"])
    if result["fake_embedder"]:
        out.append("(hash vectors: the model's cost is not in these figures)")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000,100000", help="comma-separated store sizes (default 10000,100000)")
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "remindful-bench" / "scale")
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--fake-embedder", action="store_true", help="hash vectors instead of the ONNX model")
    parser.add_argument("--serve", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--json", action="store_true")
    add_data_option(parser)
    args = parser.parse_args()
    if args.serve:
        print(json.dumps(serve(args.serve, json.loads(sys.stdin.read()), args.fake_embedder)))
        return 0
    args.cache.mkdir(parents=True, exist_ok=True)
    sizes = [int(s) for s in args.sizes.split(",")]
    result = {
        "sizes": {str(s): measure(s, args) for s in sizes},
        "fake_embedder": args.fake_embedder,
        "repo": str(REPO),
        "machine": machine(),
    }
    emit(result, args.json, lines)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
