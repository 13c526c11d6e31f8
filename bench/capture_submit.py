"""How long a captured tool call holds up its answer: ``CaptureWorker.submit`` (redact, commit to the
store's spool, enqueue) against a bare SQLite insert and commit of the same record in WAL mode.

    python bench/capture_submit.py [--calls 500] [--json]

The store uses the fake embedder and the in-memory index: what is measured is the spool commit on
the host's path, not the worker storing the memory afterwards. Target: well under a millisecond.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import remindful
from remindful.embed import FakeEmbedder
from remindful.index import InMemoryIndex
from remindful.services.capture.middleware import CaptureWorker, ToolCall


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)


def call(i: int) -> ToolCall:
    return ToolCall("click", {"x": i, "selector": f"#button-{i}"}, True, 12.5, result=f"clicked {i}")


def bench(calls: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        with remindful.open(root / "store", embedder=FakeEmbedder(), index=InMemoryIndex()) as memory:
            worker = CaptureWorker(lambda: memory)
            worker.submit(call(-1))  # waits for the worker to make the spool
            assert worker.flush(30)
            submits = []
            for i in range(calls):
                started = time.perf_counter()
                worker.submit(call(i))
                submits.append((time.perf_counter() - started) * 1000)
            worker.close(timeout=120)
            captured = worker.stats["captured"]
        conn = sqlite3.connect(root / "bare.sqlite3", isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("CREATE TABLE spool (seq INTEGER PRIMARY KEY, key TEXT, record TEXT)")
        bare = []
        for i in range(calls):
            record = json.dumps({"tool": "click", "arguments": {"x": i, "selector": f"#button-{i}"}})
            started = time.perf_counter()
            conn.execute("BEGIN")
            conn.execute("INSERT INTO spool (key, record) VALUES (?, ?)", (f"k{i}", record))
            conn.execute("COMMIT")
            bare.append((time.perf_counter() - started) * 1000)
        conn.close()
    return {
        "calls": calls,
        "captured": captured,
        "submit_p50_ms": pct(submits, 0.5),
        "submit_p95_ms": pct(submits, 0.95),
        "bare_commit_p50_ms": pct(bare, 0.5),
        "bare_commit_p95_ms": pct(bare, 0.95),
        "submit_vs_bare": round(statistics.median(submits) / statistics.median(bare), 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = bench(args.calls)
    if args.json:
        print(json.dumps(result))
        return 0
    print(
        f"submit p50 {result['submit_p50_ms']} ms (p95 {result['submit_p95_ms']}) vs bare SQLite insert+commit "
        f"p50 {result['bare_commit_p50_ms']} ms (p95 {result['bare_commit_p95_ms']}) = {result['submit_vs_bare']}x; "
        f"{result['captured']} of {result['calls'] + 1} calls stored by the worker"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
