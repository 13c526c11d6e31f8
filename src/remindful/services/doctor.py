"""``remindful doctor``: what is damaged in a storage directory, and the way out for each part.

Read-only except for one thing the index's own health check does: damaged index files are copied
aside (``chroma.corrupt-<time>``) and the damage remembered, as at any open. Every part is checked
on its own, so one damaged part does not hide another:

- catalog: SQLite's ``PRAGMA integrity_check`` over the whole file (about a second per few hundred MB);
- vector index (embedded): the files' fingerprints, then the full probe in a child process (~2 s),
  since a garbled HNSW file only shows when it is loaded, and loading it can segfault;
- spool: hook events waiting to be stored, and those that keep failing;
- permissions: the storage directory 0700, the catalog and the HTTP token file 0600.

Nothing here opens the store the usual way: an open indexes what is pending (and a command then
drains the spool), which are writes, and would fail on the damage this is meant to describe.
"""

from __future__ import annotations

import contextlib
import stat
import time
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from remindful.engine.backend import is_shared
from remindful.engine.catalog import CATALOG_WAY_OUT, integrity_problem
from remindful.engine.catalog_files import spool_health
from remindful.errors import CorruptionError, StorageError, StorageLockedError, unwritable
from remindful.model import Diagnosis, HealthCheck
from remindful.services.access import token_file

if TYPE_CHECKING:
    from remindful.config import Settings

__all__ = ["diagnose"]

#: A difference between this machine's clock and the PostgreSQL server's larger than this (seconds)
#: is reported: memories' times come from each machine, their order across machines from both.
MAX_CLOCK_SKEW_S = 2.0

CATALOG = "catalog.sqlite3"
#: A spooled event this many attempts old is reported as stuck.
STUCK_ATTEMPTS = 3


class IndexFiles(Protocol):
    """An embedded vector index's files, checked for damage (``ChromaEmbeddedIndex`` is one)."""

    @property
    def path(self) -> Path: ...

    def check(self) -> None:
        """Raise CorruptionError for damaged files (StorageError when they cannot be checked)."""


def _check(part: str, problem: str | None, fix: str | None, fine: str) -> HealthCheck:
    return HealthCheck(part, problem is None, problem or fine, fix if problem else None)


def diagnose(path: Path, settings: Settings, index: IndexFiles | None, shared_url: str | None = None) -> Diagnosis:
    """Check every part of the store at ``path``: each check's ``fix`` is the way out (None when
    ``ok``). ``index`` is the embedded index's files (None in server mode: the server's heartbeat is
    checked). ``shared_url``: the PostgreSQL catalog of ``catalog.url``, checked too."""
    checks = [
        _storage_dir(path),
        _catalog(path),
        _index(settings, index),
        _spool(path),
        _file_mode("token file", token_file(path), "the HTTP bearer token"),
    ]
    if shared_url:  # catalog.url: the PostgreSQL catalog of a shared store
        checks += _shared_catalog(shared_url, path)
    return Diagnosis(all(c.ok for c in checks), str(path), tuple(checks))


def _storage_dir(path: Path) -> HealthCheck:
    if not path.exists():
        return _check("storage directory", None, None, f"{path} does not exist yet (created on first use)")
    if not path.is_dir():
        return _check("storage directory", f"{path} is not a directory", "Point storage.path at a directory", "")
    mode = stat.S_IMODE(path.stat().st_mode)
    problem = None
    if mode & 0o077:
        problem = f"{path} is readable by other users (mode {mode:o}, expected 700)"
    elif (mode & 0o700) != 0o700:
        problem = f"{path} is not usable by its owner (mode {mode:o}, expected 700)"
    else:
        stuck = unwritable(path)
        if stuck is not None:  # what can be read is checked below all the same
            return _check("storage directory", f"{path} is not writable: {stuck.message}", stuck.suggestion, "")
    return _check("storage directory", problem, f"chmod 700 {path}", f"{path} (mode 700)")


def _file_mode(part: str, file: Path, what: str) -> HealthCheck:
    if not file.exists():
        return _check(part, None, None, f"{file.name} does not exist yet")
    mode = stat.S_IMODE(file.stat().st_mode)
    if mode & 0o077:
        return _check(
            part,
            f"{file} holds {what} and is readable by other users (mode {mode:o}, expected 600)",
            f"chmod 600 {file}"
            + ("; delete it to get a new token, the old one may have leaked" if "token" in part else ""),
            "",
        )
    if file.stat().st_size == 0:
        return _check(part, f"{file} is empty", f"Delete {file}: a new one is made on next use", "")
    return _check(part, None, None, f"{file} (mode {mode:o})")


def _catalog(path: Path) -> HealthCheck:
    db = path / CATALOG
    if not db.exists():
        return _check("catalog", None, None, "no catalog yet (created on first use)")
    permissions = _file_mode("catalog", db, "every memory")
    problem = integrity_problem(db, full=True)
    if problem is not None:
        return _check("catalog", f"{db} is damaged: {problem}", CATALOG_WAY_OUT[0].upper() + CATALOG_WAY_OUT[1:], "")
    if not permissions.ok:
        return permissions
    return _check("catalog", None, None, f"{db}: integrity check ok")


def _index(settings: Settings, index: IndexFiles | None) -> HealthCheck:
    chroma = settings.storage.chromadb
    if chroma.mode == "server" or is_shared(settings):  # a shared catalog's vectors are on a server
        return _chroma_server(chroma.host, chroma.port)
    if index is None:
        return _check("vector index", None, None, "not checked here")
    if not (index.path / "chroma.sqlite3").exists():
        return _check("vector index", None, None, "no index files yet (built from the catalog on first use)")
    try:
        index.check()
    except CorruptionError as exc:
        return _check("vector index", exc.message, exc.suggestion, "")
    except StorageLockedError as exc:
        return _check("vector index", f"could not be checked: {exc.message}", exc.suggestion or "Retry later", "")
    except StorageError as exc:
        return _check("vector index", f"could not be checked: {exc.message}", "Run `remindful reindex --reset`", "")
    return _check("vector index", None, None, f"{index.path}: every collection opens and answers a query")


def _spool(path: Path) -> HealthCheck:
    db = path / CATALOG
    if not db.exists():
        return _check("spool", None, None, "empty")
    try:
        waiting, oldest, stuck, error = spool_health(db, STUCK_ATTEMPTS)
    except StorageError as exc:
        return _check("spool", f"cannot be read: {exc}", "See the catalog's way out", "")
    if not waiting or oldest is None:
        return _check("spool", None, None, "empty")
    age = time.time() - oldest
    if stuck:
        return _check(
            "spool",
            f"{stuck} of {waiting} hook events keep failing to be stored (last error: {error})",
            "Fix the cause named in the error; `remindful daemon` (or any command that opens the store) retries them",
            "",
        )
    return _check("spool", None, None, f"{waiting} hook events waiting, the oldest {age:.0f} s old")


def _shared_catalog(url: str, path: Path) -> list[HealthCheck]:
    """The PostgreSQL catalog of ``catalog.url``: it answers, its schema is this version's, and the
    clocks agree. The URL is shown with its password hidden. While it does not answer, what waits
    in this machine's spool (``path``'s) for it is said too."""
    from remindful.engine.postgres.catalog import inspect, shown_url
    from remindful.engine.postgres.schema import SCHEMA_VERSION

    shown = shown_url(url)
    try:
        version, server, local = inspect(url)
    except StorageError as exc:
        waiting = 0
        if (path / CATALOG).exists():
            with contextlib.suppress(StorageError):
                waiting = spool_health(path / CATALOG, STUCK_ATTEMPTS)[0]
        held = f"; {waiting} events captured on this machine wait in its spool until it answers" if waiting else ""
        return [_check("shared catalog", exc.message + held, exc.suggestion, "")]
    if version is None:
        schema = _check("shared catalog", None, None, f"{shown} answers; no schema yet (created on first use)")
    elif version > SCHEMA_VERSION:
        schema = _check(
            "shared catalog",
            f"{shown} has schema {version}, newer than this remindful's {SCHEMA_VERSION}",
            "upgrade remindful on this machine",
            "",
        )
    else:
        note = "" if version == SCHEMA_VERSION else f" (migrated to {SCHEMA_VERSION} on first use)"
        schema = _check("shared catalog", None, None, f"{shown} answers, schema {version}{note}")
    skew = local - server
    clock = _check(
        "clock skew",
        None if abs(skew) <= MAX_CLOCK_SKEW_S else f"this machine's clock is {skew:+.1f} s off the catalog server's",
        "synchronise the clocks (NTP: timedatectl set-ntp true)",
        f"{skew:+.3f} s against the catalog server",
    )
    return [schema, clock]


def _chroma_server(host: str, port: int) -> HealthCheck:
    """The Chroma server answers its heartbeat (no chromadb import: one HTTP request)."""
    import urllib.request

    address = f"http://{host}:{port}/api/v2/heartbeat"
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback stays loopback
    try:
        with opener.open(address, timeout=5) as resp:
            ok = resp.status == 200
    except OSError as exc:
        return _check(
            "vector index",
            f"the Chroma server at {host}:{port} does not answer ({exc})",
            "start it (`chroma run --path DIR --host HOST --port PORT`) or fix storage.chromadb.host/port",
            "",
        )
    return _check(
        "vector index",
        None if ok else f"the Chroma server at {host}:{port} answered its heartbeat with an error",
        "look at the Chroma server's log",
        f"the Chroma server at {host}:{port} answers",
    )
