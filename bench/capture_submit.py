"""How long a captured tool call holds up its answer: ``CaptureWorker.submit`` (redact, commit to the
store's spool, enqueue) against a bare SQLite insert and commit of the same record in WAL mode.

    python bench/capture_submit.py [--calls 500] [--json]

The store uses the fake embedder and the in-memory index: what is measured is the spool commit on
the host's path, not the worker storing the memory afterwards. Target: well under a millisecond.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from typing import Any

from common import elapsed_ms, emit, fake_store, machine, parser, pct, percentile, scratch_dir, versus
from remindful.services.ingest.calls import ToolCall
from remindful.services.ingest.worker import CaptureWorker


def call(i: int) -> ToolCall:
    return ToolCall("click", {"x": i, "selector": f"#button-{i}"}, True, 12.5, result=f"clicked {i}")


def bench(calls: int) -> dict[str, Any]:
    with scratch_dir() as root:
        with fake_store(root / "store") as memory:
            worker = CaptureWorker(lambda: memory.engine)
            worker.submit(call(-1))  # waits for the worker to make the spool
            assert worker.flush(30)
            submits = [elapsed_ms(worker.submit, call(i)) for i in range(calls)]
            worker.close(timeout=120)
            captured = worker.stats["captured"]
        conn = sqlite3.connect(root / "bare.sqlite3", isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("CREATE TABLE spool (seq INTEGER PRIMARY KEY, key TEXT, record TEXT)")

        def bare_commit(i: int) -> None:
            record = json.dumps({"tool": "click", "arguments": {"x": i, "selector": f"#button-{i}"}})
            conn.execute("BEGIN")
            conn.execute("INSERT INTO spool (key, record) VALUES (?, ?)", (f"k{i}", record))
            conn.execute("COMMIT")

        bare = [elapsed_ms(bare_commit, i) for i in range(calls)]
        conn.close()
    return {
        "calls": calls,
        "captured": captured,
        "submit_p50_ms": pct(submits, 0.5),
        "submit_p95_ms": pct(submits, 0.95),
        "bare_commit_p50_ms": pct(bare, 0.5),
        "bare_commit_p95_ms": pct(bare, 0.95),
        "submit_vs_bare": round(percentile(submits, 0.5) / percentile(bare, 0.5), 2),
        "machine": machine(),
    }


def lines(result: dict[str, Any]) -> list[str]:
    return [
        versus(
            "submit p50",
            result["submit_p50_ms"],
            "bare SQLite insert+commit p50",
            result["bare_commit_p50_ms"],
            ratio=result["submit_vs_bare"],
        ),
        f"p95: submit {result['submit_p95_ms']} ms, bare {result['bare_commit_p95_ms']} ms; "
        f"{result['captured']} of {result['calls'] + 1} calls stored by the worker",
    ]


def main(argv: list[str] | None = None) -> int:
    args_parser = parser(__doc__)
    args_parser.add_argument("--calls", type=int, default=500)
    args = args_parser.parse_args(argv)
    emit(bench(args.calls), args.json, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
