"""Retention cleanup speed: 10,000 memories planned and cleaned, against baselines in the same run.

The store holds ``--n`` memories (default 10,000) of three types spread over 60 days, 10 %
bookmarked, some repeated (near-duplicates for the dedup step). Measured on copies of the same
store, with the embedded Chroma index (``--index chroma``, the default) or the in-memory one:

- ``cleanup(dry_run=True)``: the plan (every tier, dedup, quotas) without deleting;
- ``cleanup()``: plan + delete from catalog and FTS + consolidation records, with its phases;
  a large delete leaves the vectors and the neighbours' session windows to a background thread
  after the call returns, so the time until ``flush()`` returns (counted from the start of the
  call) is reported too: that is when the vector index and the windows have caught up;
- baseline 1: listing the same memories (``SELECT`` of the rows the plan reads);
- baseline 2: deleting the same ids one by one with ``delete()`` (a 300-id sample, extrapolated).

The calling thread's CPU time is printed too: on a shared machine the wall time also counts the
time other processes had the cores.

    python bench/retention.py [--n 10000] [--index chroma|memory] [--json] [--no-baseline]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import remindful
from remindful.embed import FakeEmbedder
from remindful.index import InMemoryIndex

TYPES = ("screen", "action", "workflow")
SAMPLE = 300


def build(path: Path, n: int, index: str) -> None:
    rng = random.Random(11)
    now = datetime.now(UTC)
    words = [
        "login",
        "click",
        "submit",
        "form",
        "page",
        "dialog",
        "button",
        "settings",
        "profile",
        "search",
        "result",
        "open",
        "close",
        "save",
    ]
    items = []
    for i in range(n):
        repeated = i % 10 == 0
        items.append(
            {
                "content": "Settings dialog opened" if repeated else f"{' '.join(rng.choices(words, k=6))} #{i}",
                "type": TYPES[i % 3],
                "metadata": {"bookmarked": True} if i % 10 == 1 else {"success": rng.random() < 0.7},
                "timestamp": now - timedelta(days=rng.uniform(0, 60)),
                "source": "hook",
            }
        )
    with open_store(path, index) as memory:
        for start in range(0, n, 1000):
            memory.store_batch(items[start : start + 1000])


def open_store(path: Path, index: str) -> Any:
    extra = {"index": InMemoryIndex()} if index == "memory" else {}
    return remindful.open(path, embedder=FakeEmbedder(), **extra)


def timed(fn: Any) -> tuple[float, Any]:
    started = time.perf_counter()
    result = fn()
    return time.perf_counter() - started, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--index", choices=["chroma", "memory"], default="chroma")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--no-baseline", action="store_true", help="skip the (slow) one-by-one delete baseline")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="remindful-retention-"))
    try:
        print(f"building {args.n:,} memories ({args.index} index)…", flush=True)
        build(root / "base", args.n, args.index)
        out: dict[str, Any] = {"n": args.n, "index": args.index}
        for name in ("plan", "clean") if args.no_baseline else ("plan", "clean", "baseline"):
            shutil.copytree(root / "base", root / name)

        with open_store(root / "plan", args.index) as memory:
            memory.search("warm up")  # open the catalog and the index outside the timing
            out["dry_run_s"], report = timed(lambda: memory.cleanup(dry_run=True))
            plan_phases = report["phases"]
            doomed = report["ids"]
            out["planned"] = report["deleted"]
            out["by_reason"] = report["by_reason"]
            catalog = memory.engine.catalog
            out["baseline_list_s"], _ = timed(
                lambda: catalog.read("SELECT id, type, created_at, metadata, access_count FROM memories")
            )

        with open_store(root / "clean", args.index) as memory:
            memory.search("warm up")
            started, cpu = time.perf_counter(), time.thread_time()
            out["cleanup_s"], report = timed(memory.cleanup)
            out["cleanup_cpu_s"] = round(time.thread_time() - cpu, 3)
            memory.flush()
            out["index_caught_up_s"] = round(time.perf_counter() - started, 3)
            out["deleted"] = report["deleted"]
            out["freed_mb"] = report["freed_mb"]
            out["phases"] = report["phases"]
            out["plan_phases"] = plan_phases

        if not args.no_baseline:
            with open_store(root / "baseline", args.index) as memory:
                memory.search("warm up")
                sample = doomed[:SAMPLE]
                seconds, _ = timed(lambda: [memory.delete(i) for i in sample])
                out["baseline_one_by_one_s"] = round(seconds * len(doomed) / max(len(sample), 1), 3)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    for key in ("dry_run_s", "cleanup_s", "baseline_list_s"):
        out[key] = round(out[key], 3)
    if args.json:
        print(json.dumps(out, indent=2))
        return
    print(f"\n{args.n:,} memories, {args.index} index: {out['deleted']:,} deleted ({out['by_reason']})")
    print(f"{'cleanup (plan + delete)':<38}{out['cleanup_s']:>9.3f} s   target ≤ 1 s (spec: < 5 s)")
    print(f"{'  CPU time of the calling thread':<38}{out['cleanup_cpu_s']:>9.3f} s   (busy machine: wall > CPU)")
    print(f"{'  phases':<38}{', '.join(f'{k} {v:.3f}' for k, v in out['phases'].items())}")
    print(f"{'  … index and windows caught up (flush)':<38}{out['index_caught_up_s']:>9.3f} s   (in the background)")
    print(f"{'cleanup --dry-run (plan only)':<38}{out['dry_run_s']:>9.3f} s")
    print(f"{'baseline: list the rows':<38}{out['baseline_list_s']:>9.3f} s")
    if "baseline_one_by_one_s" in out:
        seconds = out["baseline_one_by_one_s"]
        print(f"{'baseline: delete() one by one':<38}{seconds:>9.3f} s   (extrapolated from {SAMPLE})")


if __name__ == "__main__":
    main()
