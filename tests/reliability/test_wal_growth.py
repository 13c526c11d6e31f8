"""The catalog's write-ahead log under readers that always overlap (bench/concurrency.py: 12 processes
on one store grew ``catalog.sqlite3-wal`` to 770 MB beside a 16 MB database within a minute, over the
size quota, and every read scanned a larger WAL index). SQLite's automatic checkpoint copies only the
frames no reader still needs, so with some reader always behind the last write it never completes and
the log never starts over: the writer now checkpoints it in full once it is large, waiting briefly
for the readers of the moment to finish."""

from __future__ import annotations

import os
import sqlite3
import threading
from pathlib import Path

import pytest

from remindful.engine import catalog as catalog_module
from remindful.engine import connection
from remindful.engine.catalog import Catalog


def test_the_wal_stays_bounded_while_readers_overlap_without_pause(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(catalog_module, "WAL_CHECKPOINT_BYTES", 1_000_000)
    monkeypatch.setattr(catalog_module, "WAL_CHECK_INTERVAL_S", 0.0)
    catalog = Catalog(tmp_path / "catalog.sqlite3")
    catalog.write(lambda conn: conn.execute("CREATE TABLE filler (body BLOB)"))
    wal = str(catalog.path) + "-wal"
    stop = threading.Event()
    started = threading.Event()

    def readers() -> None:
        """Two connections taking turns: one holds a read snapshot at every moment, each for a
        few milliseconds (as searches of several processes do)."""
        conns = [connection.connect(catalog.path, check_same_thread=False) for _ in range(2)]
        held = conns[0]
        held.execute("BEGIN")
        held.execute("SELECT count(*) FROM filler").fetchone()
        started.set()
        turn = 1
        while not stop.wait(0.003):
            other = conns[turn % 2]
            other.execute("BEGIN")
            other.execute("SELECT count(*) FROM filler").fetchone()  # the snapshot is taken here
            held.execute("COMMIT")
            held, turn = other, turn + 1
        held.execute("COMMIT")
        for conn in conns:
            conn.close()

    thread = threading.Thread(target=readers)
    thread.start()
    started.wait()
    largest = 0
    try:
        for _ in range(1500):
            catalog.write(lambda conn: conn.execute("INSERT INTO filler VALUES (?)", (os.urandom(8000),)))
            largest = max(largest, os.stat(wal).st_size)
    finally:
        stop.set()
        thread.join()
        catalog.close()
    # 1,500 writes of two pages and more each: ~25 MB of log if it never starts over.
    assert largest < 8_000_000, f"the WAL grew to {largest / 1e6:.1f} MB"


def test_a_reader_holding_its_snapshot_long_does_not_stall_the_writer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The checkpoint waits for the readers of the moment only briefly: a reader that keeps its
    snapshot (a long export, say) costs the writer that wait once per check, not a failed write."""
    monkeypatch.setattr(catalog_module, "WAL_CHECKPOINT_BYTES", 100_000)
    monkeypatch.setattr(catalog_module, "WAL_CHECK_INTERVAL_S", 0.0)
    catalog = Catalog(tmp_path / "catalog.sqlite3")
    catalog.write(lambda conn: conn.execute("CREATE TABLE filler (body BLOB)"))
    reader = sqlite3.connect(catalog.path, isolation_level=None)
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM filler").fetchone()
    try:
        for _ in range(12):
            catalog.write(lambda conn: conn.execute("INSERT INTO filler VALUES (?)", (os.urandom(8000),)))
        assert catalog.read("SELECT count(*) FROM filler") == [(12,)]
    finally:
        reader.execute("COMMIT")
        reader.close()
        catalog.close()
