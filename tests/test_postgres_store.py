"""The store on a shared catalog: PostgreSQL for the rows and a Chroma server for the vectors, the
real path every shell takes (``catalog.url`` set), from two "machines" (two storage directories
and their spools)."""

from __future__ import annotations

import io
import json
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

import remindful
from conftest_chroma import chroma_server  # noqa: F401  (session fixture)
from conftest_postgres import PostgresCluster
from remindful.api import MemoryManager
from remindful.errors import StaleVersionError, StorageError
from remindful.shells.hook import run
from remindful.testing import FakeEmbedder

pytest.importorskip("psycopg")


@pytest.fixture
def chroma(chroma_server: tuple[str, int]) -> tuple[str, int]:  # noqa: F811
    """The session's ``chroma run`` server."""
    return chroma_server


def machine(root: Path, url: str, chroma: tuple[str, int], **overrides: object) -> MemoryManager:
    """A store as one machine opens it: its own storage directory, the shared catalog and index."""
    host, port = chroma
    overrides.setdefault("embedder", FakeEmbedder())
    return remindful.open(
        root,
        **{
            "catalog.url": url,
            "storage.chromadb.mode": "server",
            "storage.chromadb.host": host,
            "storage.chromadb.port": port,
            "search.min_score": 0.0,
            "context.min_score": 0.0,
            **overrides,
        },
    )


def test_what_one_machine_stores_another_finds_reads_updates_and_deletes(
    postgres_url: str, chroma: tuple[str, int], tmp_path: Path
) -> None:
    a = machine(tmp_path / "a", postgres_url, chroma)
    b = machine(tmp_path / "b", postgres_url, chroma)
    try:
        mid = a.store("the staging server listens on port 8443", type="knowledge")
        ids = a.store_batch([{"content": "deploys go out on tuesdays"}, {"content": "the build needs node 20"}])
        a.flush()
        assert b.get(mid).content == "the staging server listens on port 8443"
        hits = b.search("which port does staging listen on", limit=3)
        assert hits and hits[0].id == mid
        assert "dense" in hits[0].sources or "lexical" in hits[0].sources
        assert {m.id for m in b.list(limit=10)} == {mid, *ids}
        assert b.stats().total_memories == 3
        assert [s.memory_count for s in b.list_sessions()] == [3]
        assert "staging" in b.context("where does staging listen").text

        b.update(mid, content="the staging server listens on port 9443")
        assert a.get(mid).content == "the staging server listens on port 9443"
        b.flush()
        assert a.search("staging port", limit=1)[0].id == mid

        assert a.delete(ids[0])
        assert b.get_batch([ids[0]]) == [None]
        assert ids[0] not in {h.id for h in b.search("deploys tuesdays", limit=5)}
    finally:
        a.close()
        b.close()


def test_search_and_list_filter_on_metadata_as_on_the_local_store(
    postgres_url: str, chroma: tuple[str, int], tmp_path: Path
) -> None:
    a = machine(tmp_path / "a", postgres_url, chroma)
    try:
        ok = a.store("ran the deploy script", metadata={"tool": "Bash", "success": True, "exit": 0})
        failed = a.store("ran the deploy script again", metadata={"tool": "Bash", "success": False, "exit": 2})
        a.store("read the deploy notes", metadata={"tool": "Read"})
        a.flush()
        assert [h.id for h in a.search("deploy script", filters={"success": True}, limit=5)] == [ok]
        hits = a.search("deploy", filters={"tool": "Bash", "exit": {"$gt": 0}}, limit=5)
        assert [h.id for h in hits] == [failed]
    finally:
        a.close()


def test_a_correction_made_on_a_stale_copy_is_refused_with_one_line(
    postgres_url: str, chroma: tuple[str, int], tmp_path: Path
) -> None:
    a = machine(tmp_path / "a", postgres_url, chroma)
    b = machine(tmp_path / "b", postgres_url, chroma)
    try:
        mid = a.store("the release branch is main", type="knowledge")
        seen = b.version_of(mid)
        assert seen == 1
        a.update(mid, content="the release branch is release/2.x", version=a.version_of(mid))
        with pytest.raises(StaleVersionError) as refused:
            b.update(mid, content="the release branch is trunk", version=seen)
        assert "\n" not in str(refused.value)
        assert f"memory {mid} is at version 2, the change was made on version 1" in str(refused.value)
        assert b.get(mid).content == "the release branch is release/2.x"
    finally:
        a.close()
        b.close()


def hook(store: Path, event: str, payload: dict[str, Any]) -> None:
    """A hook process's work, in-process: the event spooled in the machine's own spool."""
    assert run(["--path", str(store), "hook", event, "--no-context"], stdin=io.StringIO(json.dumps(payload))) == 0


def test_hooks_spool_on_the_machine_and_its_drain_delivers_each_event_once_after_the_server_returns(
    postgres_url: str, chroma: tuple[str, int], postgres_cluster: PostgresCluster, tmp_path: Path
) -> None:
    a_path, b_path = tmp_path / "a", tmp_path / "b"
    a = machine(a_path, postgres_url, chroma)
    b = machine(b_path, postgres_url, chroma)
    prompts = [f"remember that the payments service {n} retries webhooks five times" for n in range(3)]
    try:
        a.store("opened before the server went away")  # the catalog is open: its connection will break
        postgres_cluster.stop()
        try:
            for prompt in prompts:
                hook(a_path, "UserPromptSubmit", {"session_id": "sess-a", "prompt": prompt, "cwd": str(tmp_path)})
            with pytest.raises(StorageError) as down:
                a.drain_spool()
            assert "does not answer" in str(down.value) and "\n" not in down.value.message
            brief = a.hook_context({"event": "SessionStart", "session_id": "sess-a", "cwd": str(tmp_path)})
            assert "does not answer" in brief.text and "3 events captured on this machine wait" in brief.text
            report = {c.part: c for c in a.doctor().checks}["shared catalog"]
            assert not report.ok and "3 events captured on this machine wait in its spool" in report.detail
        finally:
            postgres_cluster.start()
        assert a.drain_spool() == 3
        assert a.drain_spool() == 0  # nothing left, nothing stored twice
        stored = [m.content for m in b.list(type="conversation", limit=50)]
        assert sorted(stored) == sorted(prompts)
        assert {h.content for h in b.search("how often are webhooks retried", limit=5)} & set(prompts)
    finally:
        a.close()
        b.close()


@pytest.mark.slow
def test_the_cli_on_two_machines_shares_one_memory_and_never_shows_the_password(
    postgres_url: str, chroma: tuple[str, int], tmp_path: Path
) -> None:
    """``remindful store`` on the laptop, ``remindful search`` on the desktop (two HOMEs, two
    storage directories), the real embedder; the URL's password reaches no process's command
    line, no file under either storage directory, no output of doctor or export."""
    from agent_session import SCRIPT, agent_env

    secret = "pw-" + "7f3a9c1e5b"
    url = postgres_url.replace("remindful@", f"remindful:{secret}@")  # trust auth: any password
    host, port = chroma
    homes = {name: tmp_path / name for name in ("laptop", "desktop")}
    outputs = []

    def cli(name: str, *argv: str) -> str:
        env = agent_env(
            homes[name],
            REMINDFUL_CATALOG__URL=url,
            REMINDFUL_STORAGE__CHROMADB__HOST=host,
            REMINDFUL_STORAGE__CHROMADB__PORT=str(port),
        )
        done = subprocess.run([SCRIPT, *argv], env=env, capture_output=True, text=True, timeout=300, check=False)
        outputs.append(done.stdout + done.stderr)
        assert done.returncode == 0, done.stderr
        running = [p.read_bytes() for p in Path("/proc").glob("[0-9]*/cmdline") if p.exists()]
        assert not any(secret.encode() in cmdline for cmdline in running)
        return done.stdout

    for home in homes.values():
        home.mkdir()
    cli("laptop", "store", "The staging database listens on port 6543", "--type", "knowledge")
    found = cli("desktop", "search", "which port does the staging database use", "--limit", "3")
    assert "6543" in found
    cli("desktop", "doctor")
    cli("desktop", "export", str(tmp_path / "export.jsonl"))
    assert secret not in "".join(outputs)
    written = [p for home in homes.values() for p in home.rglob("*") if p.is_file()]
    assert written and not [p for p in written if secret.encode() in p.read_bytes()]
    assert secret not in (tmp_path / "export.jsonl").read_text()


def test_two_clones_of_a_repository_on_two_machines_share_its_project(
    postgres_url: str, chroma: tuple[str, int], tmp_path: Path
) -> None:
    clones = []
    for place, url in (
        ("laptop/shop", "git@github.com:team/shop.git"),
        ("desktop/w/shop2", "https://github.com/team/shop"),
    ):
        (tmp_path / place / ".git").mkdir(parents=True)
        (tmp_path / place / ".git" / "config").write_text(f'[remote "origin"]\n\turl = {url}\n')
        clones.append(tmp_path / place)
    a = machine(tmp_path / "a", postgres_url, chroma, project=clones[0])
    b = machine(tmp_path / "b", postgres_url, chroma, project=clones[1])
    try:
        mid = a.store("the shop's tests need redis running", type="knowledge")
        scope = b.get(mid).scope
        assert scope is not None and scope.startswith("project:shop-")
        assert b.store("the shop deploys from main", type="knowledge") and {m.scope for m in b.list(limit=10)} == {
            scope
        }
    finally:
        a.close()
        b.close()


def test_a_new_memory_is_one_pipelined_transaction_from_its_begin(
    postgres_url: str, chroma: tuple[str, int], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The acknowledgement waits for one round trip and the commit's flush: a new memory's write
    reads nothing back, so it is pipelined from its BEGIN (a quota eviction, which reads, is not)."""
    from remindful.engine.postgres.catalog import PostgresCatalog

    plain = PostgresCatalog.transaction
    seen: list[bool] = []

    def spy(self: PostgresCatalog, *, durable: bool = True, pipelined: bool = False) -> Any:
        # The store's own (a background indexer marking the first memory indexed may commit between them)
        if durable and threading.current_thread() is threading.main_thread():
            seen.append(pipelined)
        return plain(self, durable=durable, pipelined=pipelined)

    memory = machine(tmp_path / "a", postgres_url, chroma)
    try:
        monkeypatch.setattr(PostgresCatalog, "transaction", spy)
        first = memory.store("the staging database listens on port 6543", type="knowledge")
        second = memory.store("deploys run through GitHub Actions on every tag", type="knowledge", session_id="s1")
        assert seen == [True, True]
        monkeypatch.undo()
        memory.flush()
        assert [h.id for h in memory.search("which port does staging listen on", limit=1)] == [first]
        assert memory.get(second).session_id == "s1"
    finally:
        memory.close()
