"""A real PostgreSQL 15 server for the catalog's contract tests: a throwaway cluster, once per session.

``initdb`` and ``pg_ctl`` from ``/usr/lib/postgresql/15/bin`` (Debian's ``postgresql`` package), run
as the ``postgres`` user when the tests run as root (the server refuses root), in a directory that
user owns, on a free port, listening on loopback and on a socket inside that directory. Each test
gets a database of its own (:func:`postgres_url`), dropped after it. Without PostgreSQL the tests
that need it skip, except in CI (``CI=true``), where they fail: ``.ci/run`` installs it.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from requirements import missing

PG_BIN = Path(os.environ.get("REMINDFUL_TEST_PG_BIN", "/usr/lib/postgresql/15/bin"))
STARTUP_TIMEOUT = 60.0
SUPERUSER = "remindful"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _missing(why: str) -> None:
    missing(f"PostgreSQL 15 ({why})")


class PostgresCluster:
    """A running throwaway cluster: ``url(db)`` names a database on it; :meth:`stop`,
    :meth:`kill` (``kill -9`` of the postmaster) and :meth:`start` for the fault tests."""

    def __init__(self, root: Path, port: int, as_user: list[str]) -> None:
        self.root, self.port, self._as_user = root, port, as_user
        self.data = root / "data"

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{database}"

    def _run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run([*self._as_user, *argv], capture_output=True, check=check, timeout=120)

    def start(self) -> None:
        options = f"-p {self.port} -k {self.root} -h 127.0.0.1 -c fsync=off -c full_page_writes=off"
        done = self._run(
            str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-l", str(self.root / "server.log"), "-o", options,
            "-w", "-t", str(int(STARTUP_TIMEOUT)), "start", check=False,
        )  # fmt: skip
        if done.returncode != 0:
            log = (self.root / "server.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"pg_ctl start failed: {done.stderr.decode(errors='replace')}\n{log}")

    def stop(self) -> None:
        self._run(str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop", check=False)

    def kill(self) -> None:
        """``kill -9`` of the postmaster and of its backends, as a crashing machine would; returns
        once none of them runs (so that :meth:`start` can follow)."""
        try:
            pid = int((self.data / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return
        family = [pid, *_children(pid)]
        for member in family:
            with contextlib.suppress(ProcessLookupError):
                os.kill(member, 9)
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while any(Path(f"/proc/{p}").exists() for p in family) and time.monotonic() < deadline:
            time.sleep(0.05)


def run_machines_through_two_kills(
    cluster: PostgresCluster,
    argv_of: dict[str, list[str]],
    tmp_path: Path,
    *,
    up: float,
    down: float,
    timeout: float,
    env: dict[str, str] | None = None,
) -> dict[str, tuple[Path, Path]]:
    """Start one process per "machine" (``argv_of[name]``, to which the path of its acknowledgement
    file is appended), kill -9 the server twice while they run (each time after ``up`` seconds,
    back after ``down``), and wait for them to exit 0. Returns each machine's acknowledgement file
    and stderr file. A machine still running when the test fails is killed."""
    machines = {}
    for name, argv in argv_of.items():
        acks, err = tmp_path / f"{name}.acks", tmp_path / f"{name}.err"
        acks.touch()
        with err.open("wb") as stderr:
            machines[name] = (subprocess.Popen([*argv, str(acks)], stderr=stderr, env=env), acks, err)
    try:
        for _ in range(2):
            time.sleep(up)
            cluster.kill()
            time.sleep(down)
            cluster.start()
        for name, (proc, _acks, err) in machines.items():
            assert proc.wait(timeout=timeout) == 0, f"{name}: {err.read_text()[-3000:]}"
    finally:
        for proc, _acks, _err in machines.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return {name: (acks, err) for name, (_proc, acks, err) in machines.items()}


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (from /proc)."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry.name))
    return out


@pytest.fixture(scope="session")
def postgres_cluster() -> Iterator[PostgresCluster]:
    """A PostgreSQL 15 cluster started for this session, stopped (and its files removed) at its end."""
    if not (PG_BIN / "initdb").is_file():
        _missing(f"no PostgreSQL binaries in {PG_BIN} (apt-get install postgresql)")
    as_user: list[str] = []
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            _missing("running as root and there is no `postgres` user to run the server as")
        as_user = ["runuser", "-u", "postgres", "--"]
    root = Path(tempfile.mkdtemp(prefix="remindful-pg-"))
    if as_user:
        shutil.chown(root, "postgres", "postgres")
    cluster = PostgresCluster(root, _free_port(), as_user)
    init = cluster._run(
        str(PG_BIN / "initdb"), "-D", str(cluster.data), "-A", "trust", "-U", SUPERUSER, "-E", "UTF8", check=False
    )
    if init.returncode != 0:
        shutil.rmtree(root, ignore_errors=True)
        _missing(f"initdb failed: {init.stderr.decode(errors='replace')[-500:]}")
    try:
        cluster.start()
    except RuntimeError as exc:
        shutil.rmtree(root, ignore_errors=True)
        pytest.fail(str(exc))
    try:
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def postgres_url(postgres_cluster: PostgresCluster) -> Iterator[str]:
    """The URL of a fresh, empty database on the session's cluster, dropped after the test."""
    psycopg = pytest.importorskip("psycopg")
    name = "t_" + uuid.uuid4().hex[:16]
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while True:  # a fault test may have left the server restarting
        try:
            with psycopg.connect(postgres_cluster.url(), autocommit=True, connect_timeout=5) as conn:
                conn.execute(f'CREATE DATABASE "{name}"')
            break
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    yield postgres_cluster.url(name)
    with (
        contextlib.suppress(psycopg.Error),
        psycopg.connect(postgres_cluster.url(), autocommit=True, connect_timeout=5) as conn,
    ):
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


#: A team member's login role: no superuser, not the tables' owner, so row-level security applies.
MEMBER = "remindful_member"


@pytest.fixture
def member_url(postgres_url: str) -> str:
    """``postgres_url`` as a team member connects to it: the login role :data:`MEMBER` (created
    once per cluster, trust auth), which owns nothing and is no superuser. Open the database as
    its admin first (``postgres_url``): that creates the schema and its policies."""
    psycopg = pytest.importorskip("psycopg")
    with psycopg.connect(postgres_url, autocommit=True, connect_timeout=5) as conn:
        conn.execute(
            f"DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{MEMBER}') THEN "
            f"CREATE ROLE {MEMBER} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS; END IF; END $$"
        )
    return postgres_url.replace(f"{SUPERUSER}@", f"{MEMBER}@", 1)


@pytest.fixture
def admin(postgres_url: str, tmp_path: Path) -> Iterator[Any]:
    """The admin's catalog on ``postgres_url`` (the database's superuser): creates the schema and
    its policies, issues the team's tokens."""
    from remindful.engine.postgres.catalog import PostgresCatalog
    from remindful.engine.redact import StoreRedactor, build_redactor

    opened = PostgresCatalog(postgres_url, redaction=StoreRedactor(build_redactor(), tmp_path))
    try:
        yield opened
    finally:
        opened.close()
