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

import random
import shutil
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from common import emit, fake_store, machine, parser, progress, scratch_dir, timed

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
    with fake_store(path, index=index) as memory:
        for start in range(0, n, 1000):
            memory.store_batch(items[start : start + 1000])


def bench(n: int, index: str, *, baseline: bool) -> dict[str, Any]:
    with scratch_dir("remindful-retention-") as root:
        progress(f"building {n:,} memories ({index} index)")
        build(root / "base", n, index)
        out: dict[str, Any] = {"n": n, "index": index}
        for name in ("plan", "clean", "baseline") if baseline else ("plan", "clean"):
            shutil.copytree(root / "base", root / name)

        with fake_store(root / "plan", index=index) as memory:
            progress("cleanup --dry-run")
            memory.search("warm up")  # open the catalog and the index outside the timing
            out["dry_run_s"], report = timed(memory.cleanup, dry_run=True)
            plan_phases = report.phases
            doomed = report.ids
            out["planned"] = report.deleted
            out["by_reason"] = report.by_reason
            catalog = memory.engine.catalog
            out["baseline_list_s"], _ = timed(
                catalog.read, "SELECT id, type, created_at, metadata, access_count FROM memories"
            )

        with fake_store(root / "clean", index=index) as memory:
            progress("cleanup")
            memory.search("warm up")
            started, cpu = time.perf_counter(), time.thread_time()
            out["cleanup_s"], report = timed(memory.cleanup)
            out["cleanup_cpu_s"] = round(time.thread_time() - cpu, 3)
            memory.flush()
            out["index_caught_up_s"] = round(time.perf_counter() - started, 3)
            out["deleted"] = report.deleted
            out["freed_mb"] = report.freed_mb
            out["phases"] = report.phases
            out["plan_phases"] = plan_phases

        if baseline:
            with fake_store(root / "baseline", index=index) as memory:
                progress(f"baseline: delete() one by one, {SAMPLE} ids")
                memory.search("warm up")
                sample = doomed[:SAMPLE]
                seconds, _ = timed(lambda: [memory.delete(i) for i in sample])
                out["baseline_one_by_one_s"] = round(seconds * len(doomed) / max(len(sample), 1), 3)
        progress(None)
    for key in ("dry_run_s", "cleanup_s", "baseline_list_s"):
        out[key] = round(out[key], 3)
    out["machine"] = machine()
    return out


def lines(out: dict[str, Any]) -> list[str]:
    result = [
        f"{out['n']:,} memories, {out['index']} index: {out['deleted']:,} deleted ({out['by_reason']})",
        f"{'cleanup (plan + delete)':<38}{out['cleanup_s']:>9.3f} s   target ≤ 1 s (spec: < 5 s)",
        f"{'  CPU time of the calling thread':<38}{out['cleanup_cpu_s']:>9.3f} s   (busy machine: wall > CPU)",
        f"{'  phases':<38}{', '.join(f'{k} {v:.3f}' for k, v in out['phases'].items())}",
        f"{'  … index and windows caught up (flush)':<38}{out['index_caught_up_s']:>9.3f} s   (in the background)",
        f"{'cleanup --dry-run (plan only)':<38}{out['dry_run_s']:>9.3f} s",
        f"{'baseline: list the rows':<38}{out['baseline_list_s']:>9.3f} s",
    ]
    if "baseline_one_by_one_s" in out:
        seconds = out["baseline_one_by_one_s"]
        result.append(f"{'baseline: delete() one by one':<38}{seconds:>9.3f} s   (extrapolated from {SAMPLE})")
    return result


def main(argv: list[str] | None = None) -> int:
    args_parser = parser(__doc__)
    args_parser.add_argument("--n", type=int, default=10_000)
    args_parser.add_argument("--index", choices=["chroma", "memory"], default="chroma")
    args_parser.add_argument("--no-baseline", action="store_true", help="skip the (slow) one-by-one delete baseline")
    args = args_parser.parse_args(argv)
    emit(bench(args.n, args.index, baseline=not args.no_baseline), args.json, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
