"""``remindful migrate``: a local store copied into a real PostgreSQL 15 and a real Chroma server,
every part counted on both sides; a password never on the command line or in what is printed."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

import remindful
from conftest_chroma import chroma_server  # noqa: F401
from remindful.api import MemoryManager
from remindful.engine.captures import forget_key
from remindful.engine.postgres.catalog import PostgresCatalog
from remindful.engine.postgres.repositories import PostgresRepositories
from remindful.engine.postgres.schema import SCHEMA_VERSION
from remindful.engine.redact import StoreRedactor, build_redactor
from remindful.engine.repositories import Repositories
from remindful.engine.sqlfilter import build_filter
from remindful.errors import StorageError
from remindful.testing import FakeEmbedder, open_fake


@pytest.fixture
def empty_chroma(chroma_server: tuple[str, int]) -> tuple[str, int]:  # noqa: F811
    """The session's Chroma server with no collection (a migration refuses one holding vectors)."""
    from remindful.index import ChromaServerIndex

    index = ChromaServerIndex(*chroma_server)
    try:
        index.reset()
    finally:
        index.close()
    return chroma_server


def filled(path: Path) -> MemoryManager:
    memory = open_fake(path)
    for i in range(12):
        memory.store(f"step {i}: ran the deploy script", type="action", session_id=f"s{i % 3}", scope="project:shop")
    memory.store("Always use uv for Python projects", type="knowledge", scope="user")
    doomed = memory.store("The staging port is 8081", type="knowledge", scope="user")
    assert memory.delete(doomed)
    Repositories.over(memory.engine.catalog).ledger.record(
        at=1.0, session_id="s0", project="demo", event="SessionStart", tokens=120, memory_ids=["x"]
    )
    assert memory.flush(30)
    return memory


@pytest.mark.slow
def test_a_local_store_is_copied_and_verified(
    tmp_path: Path,
    postgres_url: str,
    empty_chroma: tuple[str, int],
) -> None:
    host, port = empty_chroma
    memory = filled(tmp_path / "store")
    try:
        report = memory.migrate(postgres_url, f"http://{host}:{port}")
        local_total = memory.stats().total_memories
    finally:
        memory.close()
    assert report.counts["memories"] == (13, 13) == (local_total, local_total)
    assert report.counts["vectors"] == (13, 13)
    assert report.counts["sessions"][0] == report.counts["sessions"][1] >= 3
    assert report.counts["tombstones"] == (1, 1) and report.counts["injections"] == (1, 1)
    # (A store with no team yet is one person's: their private vectors go to the index too.)
    assert report.collections == {"action_memories": 12, "knowledge_memories": 1}

    target = PostgresCatalog(postgres_url, redaction=StoreRedactor(build_redactor(), tmp_path))
    try:
        repos = PostgresRepositories.over(target)
        assert target.type_counts() == {"action": 12, "knowledge": 1}
        assert repos.captures.buried([forget_key("The staging port is 8081")]) == {
            forget_key("The staging port is 8081")
        }
        assert [m for m, _ in target.lexical(["uv"], build_filter(), 5)] != []
        assert repos.stats.unindexed() == 0  # every copied vector is in the Chroma server
        assert repos.ledger.total().tokens == 120
    finally:
        target.close()
    moved = remindful.open(
        tmp_path / "moved",
        embedder=FakeEmbedder(),
        **{"catalog.url": postgres_url, "storage.chromadb.mode": "server", "storage.chromadb.host": host,
           "storage.chromadb.port": port, "search.min_score": 0.0},
    )  # fmt: skip
    try:  # found by its vector
        hits = moved.search("Always use uv for Python projects", limit=3, types=["knowledge"])
        assert hits and hits[0].content == "Always use uv for Python projects" and "dense" in hits[0].sources
    finally:
        moved.close()

    again = open_fake(tmp_path / "store")
    try:  # a second run would mix two stores: refused, nothing copied
        with pytest.raises(StorageError, match="already holds 13 memories"):
            again.migrate(postgres_url, f"http://{host}:{port}")
    finally:
        again.close()


def test_the_cli_refuses_a_password_on_the_command_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from remindful.shells.cli import app

    monkeypatch.setenv("MEMORY_STORAGE_PATH", str(tmp_path / "store"))
    result = CliRunner().invoke(app, ["migrate", "--to", "postgresql://alice:hunter2@db.example/memory"])
    assert result.exit_code == 2
    assert "PGPASSWORD" in result.output and "hunter2" not in result.output


def test_a_bad_chroma_url_is_one_line(tmp_path: Path) -> None:
    from remindful.errors import ValidationError

    memory = open_fake(tmp_path / "store")
    try:
        with pytest.raises(ValidationError, match=r"chroma.*http://HOST:8000"):
            memory.migrate("postgresql://a@b/c", "ftp://x")
    finally:
        memory.close()


# -- doctor ---------------------------------------------------------------------------------------


def test_doctor_checks_the_shared_catalog_its_schema_the_clocks_and_the_chroma_server(
    tmp_path: Path,
    postgres_url: str,
    chroma_server: tuple[str, int],  # noqa: F811
) -> None:
    host, port = chroma_server
    with_password = postgres_url.replace("remindful@", "remindful:p4ss-w0rd@")  # trust auth ignores it
    memory = open_fake(
        tmp_path / "store",
        **{"catalog.url": with_password, "storage.chromadb.mode": "server", "storage.chromadb.port": port},
    )
    try:
        fresh = {c.part: c for c in memory.doctor().checks}
        assert fresh["shared catalog"].ok and "no schema yet" in fresh["shared catalog"].detail
        PostgresCatalog(postgres_url, redaction=StoreRedactor(build_redactor(), tmp_path)).close()
        checks = {c.part: c for c in memory.doctor().checks}
    finally:
        memory.close()
    assert checks["shared catalog"].ok and f"schema {SCHEMA_VERSION}" in checks["shared catalog"].detail
    assert checks["clock skew"].ok and "against the catalog server" in checks["clock skew"].detail
    assert checks["vector index"].ok and f"{host}:{port} answers" in checks["vector index"].detail
    shown = " ".join(f"{c.detail} {c.fix}" for c in checks.values())
    assert "p4ss-w0rd" not in shown and "remindful:***@" in shown


def test_doctor_names_a_server_that_does_not_answer_without_its_password(tmp_path: Path) -> None:
    from conftest_chroma import free_port

    url = f"postgresql://alice:hunter2@127.0.0.1:{free_port()}/memory"
    memory = open_fake(
        tmp_path / "store",
        **{"catalog.url": url, "storage.chromadb.mode": "server", "storage.chromadb.port": free_port()},
    )
    try:
        diagnosis = memory.doctor()
    finally:
        memory.close()
    checks = {c.part: c for c in diagnosis.checks}
    assert not diagnosis.healthy
    assert not checks["shared catalog"].ok and "does not answer" in checks["shared catalog"].detail
    assert not checks["vector index"].ok and "Chroma server" in checks["vector index"].detail
    assert "hunter2" not in str(diagnosis.to_dict())


@pytest.mark.slow
def test_export_reads_the_same_from_either_backend(
    tmp_path: Path,
    postgres_url: str,
    empty_chroma: tuple[str, int],
) -> None:
    import json

    host, port = empty_chroma
    memory = filled(tmp_path / "store")
    try:
        memory.migrate(postgres_url, f"http://{host}:{port}")
        local = memory.export(output_path=tmp_path / "local.json")
    finally:
        memory.close()
    with_password = postgres_url.replace("remindful@", "remindful:s3cret-pw@")
    shared_manager = open_fake(tmp_path / "store", **{"catalog.url": with_password})
    try:
        shared = shared_manager.export(output_path=tmp_path / "shared.json", shared=True)
    finally:
        shared_manager.close()
    assert shared.count == local.count == 13
    local_doc, shared_doc = (json.loads(Path(p).read_text()) for p in (local.path, shared.path))
    assert shared_doc["memories"] == local_doc["memories"]  # ids, texts, times, metadata, vectors
    assert "s3cret-pw" not in Path(shared.path).read_text()
