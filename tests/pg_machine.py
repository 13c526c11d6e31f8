"""One "machine" of the PostgreSQL fault test (``tests/reliability/test_postgres_kill.py``): its own
local store, where it spools a burst of events (each acknowledged once the local spool committed it,
written to the ``acks`` file then), and a forwarder handing them to the shared PostgreSQL catalog,
whatever happens to the server meanwhile. Run as ``python pg_machine.py NAME STORE URL COUNT ACKS``.
Prints one line on stderr per failed hand-over (the server down)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from remindful.engine import spool
from remindful.engine.captures import CaptureRepository
from remindful.engine.catalog import Catalog, MemoryRow
from remindful.engine.postgres.catalog import PostgresCatalog
from remindful.engine.postgres.forward import SpoolForwarder
from remindful.engine.redact import StoreRedactor, build_redactor
from remindful.errors import StorageError

ROUND = 20  # events spooled per round
PAUSE_S = 0.15  # between rounds: the burst lasts a few seconds, long enough to be killed in


def to_rows(kind: str, payload: str) -> list[MemoryRow]:
    record = json.loads(payload)
    return [
        MemoryRow(
            id=record["id"],
            type="knowledge",
            content=record["content"],
            metadata="{}",
            source="hook",
            memory_class="semantic",
            session_id=record["machine"],
            created_at=record["at"],
            content_hash=record["id"],
            scope="project:fault",
        )
    ]


def main(name: str, store: str, url: str, count: int, acks: str) -> int:
    Path(store).mkdir(parents=True, exist_ok=True, mode=0o700)
    redaction = StoreRedactor(build_redactor(), store)
    local = Catalog(Path(store) / "catalog.sqlite3", redaction=redaction)
    captures = CaptureRepository(local)
    target: PostgresCatalog | None = None
    written = 0
    deadline = time.monotonic() + 150
    with open(acks, "a", encoding="utf-8") as ack:
        while time.monotonic() < deadline:
            for _ in range(min(ROUND, count - written)):
                key = f"{name}-{written:05d}"
                record = {"id": key, "machine": name, "content": f"event {written} of {name}", "at": time.time()}
                local.write(
                    lambda c, k=key, r=record: spool.append(c, k, "memory", r, time.time(), redaction=redaction)
                )
                ack.write(key + "\n")
                ack.flush()
                written += 1
            try:
                if target is None:
                    target = PostgresCatalog(url, redaction=redaction, connect_timeout=1)
                moved = SpoolForwarder(captures, target, to_rows).forward_once()
            except StorageError as exc:
                print(f"{name}: hand-over failed: {exc.message[:160]}", file=sys.stderr, flush=True)
                time.sleep(0.2)
                continue
            if written >= count and moved == 0 and not captures.spool_waiting(5):
                break
            if written < count:
                time.sleep(PAUSE_S)
    drained = written >= count and not captures.spool_waiting(5)
    if target is not None:
        target.close()
    local.close()
    return 0 if drained else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]))
