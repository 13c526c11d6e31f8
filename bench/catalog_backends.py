"""The PostgreSQL catalog against the embedded SQLite catalog, in one run, on the same rows.

For each backend: ingest throughput (rows per second, batches of ``--batch`` rows each committed in
one transaction with their counts and session windows: a committed row is lexically searchable at
once, so this is also ingest-until-lexically-searchable), store acknowledgement p50 (one row per
transaction), and lexical search p50 at ``--memories`` rows over both lexical spaces (the memory's
text, its session window) for the LoCoMo questions. The SQLite catalog is the baseline; the issue's
targets (whole search through PostgreSQL and a Chroma server <= 2x, store ack <= 3x, ingest >= 0.7x)
are about the whole path, of which this measures the catalog's part: the vector side (Chroma
server against embedded Chroma) is not measured here.

PostgreSQL: ``--url postgresql://...`` (an empty database), or a throwaway PostgreSQL 15 cluster this
bench starts (``/usr/lib/postgresql/15/bin``; as the ``postgres`` user when run as root) and stops.
Run it under ``nice``; the figures carry the machine's load.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from common import (
    add_data_option,
    emit,
    load_locomo,
    machine,
    parser,
    pct,
    progress,
    scratch_dir,
    turn_texts,
    versus,
)

PG_BIN = Path("/usr/lib/postgresql/15/bin")
WORD = re.compile(r"[a-z0-9]{3,}")
STOP = {"the", "and", "was", "what", "when", "did", "does", "how", "who", "which", "for", "with", "her", "his"}


@contextlib.contextmanager
def throwaway_cluster(keep: Path | None = None, settings: str = "") -> Iterator[str]:
    """A PostgreSQL 15 cluster on a free port; its URL; stopped and removed afterwards. ``keep``: a
    folder whose cluster is kept when stopped (created there the first time, started from it after);
    ``settings``: server options for this start (``-c shared_buffers=1GB``)."""
    as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    root = Path(tempfile.mkdtemp(prefix="remindful-bench-pg-")) if keep is None else keep
    root.mkdir(parents=True, exist_ok=True)
    if as_user:
        shutil.chown(root, "postgres", "postgres")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    data = root / "data"
    run = [*as_user, str(PG_BIN / "pg_ctl"), "-D", str(data)]
    if not (data / "PG_VERSION").exists():
        subprocess.run([*as_user, str(PG_BIN / "initdb"), "-D", str(data), "-A", "trust", "-U", "bench"],
                       check=True, capture_output=True)  # fmt: skip
    subprocess.run([*run, "-l", str(root / "log"), "-o", f"-p {port} -k {root} -h 127.0.0.1 {settings}", "-w", "start"],
                   check=True, capture_output=True)  # fmt: skip
    try:
        yield f"postgresql://bench@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*run, "-m", "fast", "-w", "stop"], capture_output=True)
        if keep is None:
            shutil.rmtree(root, ignore_errors=True)


def rows_for(texts: list[str], n: int, start: float) -> list[Any]:
    """``n`` memories cycling through ``texts`` (numbered, so each is distinct), 20 per session."""
    from remindful.engine.catalog import MemoryRow

    out = []
    for i in range(n):
        text = f"{texts[i % len(texts)]} (#{i})"
        out.append(
            MemoryRow(
                id=f"conversation_{i:08d}",
                type="conversation",
                content=text,
                metadata="{}",
                source="bench",
                memory_class="episodic",
                session_id=f"s{i // 20}",
                created_at=start + i,
                content_hash=f"h{i}",
                scope="user",
                redacted=True,
            )
        )
    return out


def workload(data_path: Any, memories: int, queries: int) -> tuple[list[Any], list[list[str]]]:
    """``memories`` catalog rows of LoCoMo turns, and the terms of up to ``queries`` of its questions."""
    data = load_locomo(data_path)
    rows = rows_for(turn_texts(data, speaker=True), memories, 1_700_000_000.0)
    questions = [qa["question"] for sample in data for qa in sample.get("qa", [])][:queries]
    return rows, [[w for w in WORD.findall(q.lower()) if w not in STOP] or ["memory"] for q in questions]


def measure(name: str, catalog: Any, rows: list[Any], queries: list[list[str]], batch: int) -> dict[str, Any]:
    from remindful.engine.sqlfilter import build_filter

    started = time.perf_counter()
    for at in range(0, len(rows), batch):
        chunk = rows[at : at + batch]
        catalog.write(lambda conn, c=chunk: catalog.insert_memories(conn, c))
        progress(f"{name}: {at + len(chunk)} rows")
    ingest_s = time.perf_counter() - started
    acks = []
    for i, row in enumerate(rows_for(["one more memory to acknowledge"], 200, 2_000_000_000.0)):
        row.id = f"ack_{i}"
        t = time.perf_counter()
        catalog.write(lambda conn, r=row: catalog.insert_memories(conn, [r]))
        acks.append((time.perf_counter() - t) * 1000)
    flt = build_filter(scopes=["user"])
    for terms in queries[:20]:  # warm the caches and the document frequencies
        catalog.lexical(terms, flt, 50)
    text_ms, window_ms = [], []
    for terms in queries:
        t = time.perf_counter()
        catalog.lexical(terms, flt, 50)
        text_ms.append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        catalog.lexical(terms, flt, 50, table="context_fts")
        window_ms.append((time.perf_counter() - t) * 1000)
    trips = []
    for _ in range(200):  # the floor under every statement: one round trip (in-process for SQLite)
        t = time.perf_counter()
        catalog.read("SELECT 1")
        trips.append((time.perf_counter() - t) * 1000)
    progress(None)
    return {
        "round_trip_p50_ms": pct(trips, 0.5),
        "ingest_rows_per_s": round(len(rows) / ingest_s, 1),
        "ack_p50_ms": pct(acks, 0.5),
        "search_text_p50_ms": pct(text_ms, 0.5),
        "search_window_p50_ms": pct(window_ms, 0.5),
        "search_text_p95_ms": pct(text_ms, 0.95),
    }


def main() -> None:
    p = parser(__doc__)
    add_data_option(p)
    p.add_argument("--memories", type=int, default=100_000, help="rows in each catalog (default 100000)")
    p.add_argument("--batch", type=int, default=500, help="rows per ingest transaction")
    p.add_argument("--queries", type=int, default=300, help="lexical queries timed per space")
    p.add_argument("--url", help="an empty PostgreSQL database (default: a throwaway cluster)")
    args = p.parse_args()

    from remindful.engine.catalog import Catalog
    from remindful.engine.postgres.catalog import PostgresCatalog
    from remindful.engine.redact import StoreRedactor, build_redactor

    rows, queries = workload(args.data, args.memories, args.queries)

    result: dict[str, Any] = {"memories": args.memories, "batch": args.batch, "queries": len(queries)}
    with scratch_dir() as tmp, contextlib.ExitStack() as stack:
        redaction = StoreRedactor(build_redactor(), tmp)
        sqlite = Catalog(tmp / "catalog.sqlite3", redaction=redaction)
        result["sqlite"] = measure("sqlite", sqlite, [_copy(r) for r in rows], queries, args.batch)
        sqlite.close()
        url = args.url or stack.enter_context(throwaway_cluster())
        postgres = PostgresCatalog(url, redaction=redaction)
        result["postgres"] = measure("postgres", postgres, [_copy(r) for r in rows], queries, args.batch)
        postgres.close()
    result["machine"] = machine()
    emit(result, args.json, lines)


def _copy(row: Any) -> Any:
    from remindful.engine.catalog import MemoryRow

    return MemoryRow(**{f: getattr(row, f) for f in MemoryRow.__slots__})


def lines(r: dict[str, Any]) -> list[str]:
    s, pg = r["sqlite"], r["postgres"]
    return [
        f"catalog backends, {r['memories']} memories (20 per session), batches of {r['batch']}, "
        f"{r['queries']} queries per lexical space",
        versus("ingest PostgreSQL", pg["ingest_rows_per_s"], "SQLite", s["ingest_rows_per_s"], unit="rows/s"),
        versus("store ack p50 PostgreSQL", pg["ack_p50_ms"], "SQLite", s["ack_p50_ms"]),
        versus("lexical search (text) p50 PostgreSQL", pg["search_text_p50_ms"], "SQLite", s["search_text_p50_ms"]),
        versus(
            "lexical search (window) p50 PostgreSQL", pg["search_window_p50_ms"], "SQLite", s["search_window_p50_ms"]
        ),
        versus("lexical search (text) p95 PostgreSQL", pg["search_text_p95_ms"], "SQLite", s["search_text_p95_ms"]),
        versus("one statement (SELECT 1) p50 PostgreSQL", pg["round_trip_p50_ms"], "SQLite", s["round_trip_p50_ms"]),
        "not measured here: the vector side (a Chroma server against embedded Chroma), the embedder",
    ]


if __name__ == "__main__":
    main()
