"""kill -9 of the PostgreSQL server, twice, during a burst of writes from two "machines" (two
processes, each with its own local spool): every acknowledged event is in the shared catalog once,
none twice, and each machine said clearly what failed while the server was down."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from conftest_postgres import PostgresCluster, run_machines_through_two_kills
from remindful.engine.postgres.catalog import PostgresCatalog
from remindful.engine.redact import StoreRedactor, build_redactor

MACHINE = Path(__file__).resolve().parents[1] / "pg_machine.py"
EVENTS = 600  # per machine


@pytest.mark.slow
def test_two_machines_lose_nothing_and_duplicate_nothing_through_two_kill_9s(
    postgres_cluster: PostgresCluster, postgres_url: str, tmp_path: Path
) -> None:
    catalog = PostgresCatalog(postgres_url, redaction=StoreRedactor(build_redactor(), tmp_path))
    catalog.close()  # the schema exists before the machines start
    argv_of = {
        name: [sys.executable, str(MACHINE), name, str(tmp_path / name), postgres_url, str(EVENTS)]
        for name in ("laptop", "desktop")
    }
    machines = run_machines_through_two_kills(postgres_cluster, argv_of, tmp_path, up=1.5, down=1.0, timeout=240)

    catalog = PostgresCatalog(postgres_url, redaction=StoreRedactor(build_redactor(), tmp_path))
    try:
        rows = catalog.read("SELECT id, count(*) FROM memories GROUP BY id")
        counts = catalog.type_counts()
    finally:
        catalog.close()
    acknowledged = {key for acks, _err in machines.values() for key in acks.read_text().split()}
    assert len(acknowledged) == 2 * EVENTS
    stored = {mid: n for mid, n in rows}
    assert acknowledged - set(stored) == set(), "acknowledged but lost"
    assert [mid for mid, n in stored.items() if n > 1] == [], "stored twice"
    assert set(stored) == acknowledged and counts == {"knowledge": 2 * EVENTS}
    for name, (_acks, err) in machines.items():
        text = err.read_text()
        assert "hand-over failed" in text, f"{name} never met the server down: the test did not test"
        assert "Traceback" not in text
