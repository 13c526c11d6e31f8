"""The real path through two kill -9s of the PostgreSQL server: two writer processes ("machines",
each with its own storage directory and spool) spool prompts through the hook and store memories
directly for 60 s, each draining its spool into the shared catalog as the daemon does; the server
is killed and restarted twice meanwhile. Every acknowledged memory is in the shared catalog exactly
once, and each machine said in one line what failed while the server was down."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from conftest_chroma import chroma_server  # noqa: F401  (session fixture)
from conftest_postgres import PostgresCluster, run_machines_through_two_kills
from remindful.engine.postgres.catalog import PostgresCatalog
from remindful.engine.redact import StoreRedactor, build_redactor

WRITER = Path(__file__).resolve().parents[1] / "pg_writer.py"
SECONDS = 60


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_every_acknowledged_memory_is_stored_once_through_two_kill_9s_of_the_server(
    postgres_cluster: PostgresCluster,
    postgres_url: str,
    chroma_server: tuple[str, int],  # noqa: F811
    tmp_path: Path,
) -> None:
    catalog = PostgresCatalog(postgres_url, redaction=StoreRedactor(build_redactor(), tmp_path))
    catalog.close()  # the schema exists before the machines start
    host, port = chroma_server
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(WRITER.parent), os.environ.get("PYTHONPATH", "")])}
    argv_of = {
        name: [sys.executable, str(WRITER), name, str(tmp_path / name), postgres_url, host, str(port), str(SECONDS)]
        for name in ("laptop", "desktop")
    }
    machines = run_machines_through_two_kills(
        postgres_cluster, argv_of, tmp_path, up=SECONDS / 4, down=3.0, timeout=400, env=env
    )

    catalog = PostgresCatalog(postgres_url, redaction=StoreRedactor(build_redactor(), tmp_path))
    try:
        prompts = dict(catalog.read("SELECT content, count(*) FROM memories WHERE type = 'conversation' GROUP BY 1"))
        facts = {
            mid: content for mid, content in catalog.read("SELECT id, content FROM memories WHERE type = 'knowledge'")
        }
    finally:
        catalog.close()
    acked = [json.loads(line) for acks, _err in machines.values() for line in acks.read_text().splitlines()]
    spooled = [a["spooled"] for a in acked if "spooled" in a]
    stored = {a["stored"]: a["content"] for a in acked if "stored" in a}
    assert len(spooled) > 500 and len(stored) > 50, "too few writes: the test did not test"
    assert [p for p in spooled if p not in prompts] == [], "spooled, acknowledged, but lost"
    assert {p: n for p, n in prompts.items() if n > 1} == {}, "stored twice"
    assert {mid: c for mid, c in stored.items() if facts.get(mid) != c} == {}, "stored, acknowledged, but lost"
    assert sorted(c for c in facts.values() if c in stored.values()) == sorted(stored.values()), "stored twice"
    for name, (_acks, err) in machines.items():
        text = err.read_text()
        assert "does not answer" in text, f"{name} never met the server down: the test did not test"
