"""Retention and dedup on a team store (PostgreSQL + a Chroma server): what a member's cleanup and
dedup may delete (their own memories outside projects), what only the store's admin connection
cleans (the projects' memories, by its settings), refused by the database itself for a member's
policy deletions; and what the other people then see: rows, vectors on the Chroma server, the
audit log with who deleted, the scope counts, a dedup merge's record."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import remindful
from conftest_chroma import chroma_server  # noqa: F401  (session fixture)
from remindful.api import MemoryManager
from remindful.engine.postgres.catalog import PostgresCatalog
from remindful.engine.postgres.team import TeamRepository
from remindful.engine.redact import StoreRedactor, build_redactor
from remindful.errors import AccessDeniedError

psycopg = pytest.importorskip("psycopg")

DAY = 86_400.0


@pytest.fixture
def chroma(chroma_server: tuple[str, int]) -> tuple[str, int]:  # noqa: F811
    return chroma_server


@pytest.fixture
def admin(postgres_url: str, tmp_path: Path) -> Iterator[PostgresCatalog]:
    """The admin's catalog (the database's superuser): creates the schema, issues tokens."""
    opened = PostgresCatalog(postgres_url, redaction=StoreRedactor(build_redactor(), tmp_path))
    try:
        yield opened
    finally:
        opened.close()


def env_of(home: Path, url: str, chroma: tuple[str, int], token: str | None) -> dict[str, str]:
    from agent_session import agent_env

    host, port = chroma
    extra = {
        "REMINDFUL_CATALOG__URL": url,
        "REMINDFUL_STORAGE__CHROMADB__MODE": "server",
        "REMINDFUL_STORAGE__CHROMADB__HOST": host,
        "REMINDFUL_STORAGE__CHROMADB__PORT": str(port),
    }
    if token is not None:
        extra["REMINDFUL_CATALOG__TOKEN"] = token
    return agent_env(home, **extra)


def cli(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    from agent_session import SCRIPT

    return subprocess.run([SCRIPT, *argv], env=env, capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.slow
def test_remindful_cleanup_runs_on_a_shared_catalog(postgres_url: str, chroma: tuple[str, int], tmp_path: Path) -> None:
    """The defect: every method of the PostgreSQL retention repository refused, so `remindful
    cleanup` (and dedup, the daemon's schedule) failed on any store with ``catalog.url``."""
    home = tmp_path / "one"
    home.mkdir()
    env = env_of(home, postgres_url, chroma, None)
    assert cli(env, "store", "the staging database listens on port 6543", "--type", "knowledge").returncode == 0
    for argv in (("cleanup", "--dry-run", "--json"), ("cleanup", "--json"), ("dedup", "--json")):
        done = cli(env, *argv)
        assert done.returncode == 0, done.stdout + done.stderr
        assert json.loads(done.stdout)["success"] is True
