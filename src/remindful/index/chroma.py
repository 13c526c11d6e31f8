"""Chroma backends of ``VectorIndex``: embedded (``PersistentClient``) and server (``HttpClient``).

Both are lazy: chromadb is imported and the client created on the first call, under one lock.
Collections are created with ``configuration={"hnsw": {"space": "cosine", ...}}`` (the chromadb 1.x
form; the ``hnsw:*`` metadata keys are legacy) and ``embedding_function=None``: vectors are always
passed in, so Chroma never loads or downloads its default ONNX model. Retries and error mapping
live in :mod:`remindful.index.chroma_base`.

Note: embedded chromadb 1.x waits on a locked ``chroma.sqlite3`` itself (its SQLite busy timeout is
very long, chroma-core/chroma#7040), so a second process writing the same directory blocks rather
than failing; the retries mostly serve the server and other chromadb releases. One process should
own an embedded store.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from remindful.errors import CorruptionError, StorageError, StorageFullError, StorageLockedError
from remindful.index.chroma_base import RECOVERY, ChromaIndexBase, is_locked_message

__all__ = ["ChromaEmbeddedIndex", "ChromaServerIndex"]

log = logging.getLogger(__name__)
_NEARLY_FULL = 32 * 1024 * 1024  # below this much free space, a vague write error means a full disk


class ChromaEmbeddedIndex(ChromaIndexBase):
    """Chroma in this process, persisted under ``path`` (created 0700).

    ``hnsw`` sets HNSW parameters of collections created from now on: ``construction_ef``/
    ``ef_construction``, ``search_ef``/``ef_search``, ``M``/``max_neighbors``, ``num_threads``,
    ``batch_size``, ``sync_threshold``, ``resize_factor``. Existing collections keep theirs.
    Call :meth:`check` at startup, before first use, to detect damaged files.
    """

    def __init__(self, path: Path, *, hnsw: dict[str, Any] | None = None) -> None:
        super().__init__(hnsw)
        self.path = Path(path)

    def _describe(self) -> str:
        return f"the Chroma store at {self.path}"

    def _make_client(self) -> Any:
        try:
            self.path.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(
                f"Cannot create the vector index directory {self.path}: {exc.strerror}",
                suggestion="Make the parent directory writable, or configure another storage path",
            ) from exc
        if not os.access(self.path, os.W_OK | os.X_OK):
            raise StorageError(
                f"The vector index directory {self.path} is not writable",
                suggestion="Fix its permissions (chmod 700) or configure another storage path",
            )
        import chromadb
        from chromadb.config import Settings

        return chromadb.PersistentClient(
            str(self.path), settings=Settings(anonymized_telemetry=False, allow_reset=True)
        )

    def _after_write(self) -> None:
        """Make what Chroma created private: files 0600, directories 0700.

        Chroma creates its files with the process umask (0644 and 0755 under the usual 022). We chmod
        after each client creation and write batch rather than set a 077 umask around Chroma's calls:
        the umask is process-wide, so while it is set every other thread of the host (and chromadb's
        own) would create files with it, and two threads saving and restoring it around overlapping
        calls can leave the process with the wrong umask for good. Between Chroma's creation of a file
        and this chmod nobody else can reach it: the storage directory and this one are 0700. A walk
        over Chroma's few dozen entries costs well under a millisecond, small beside a write batch.
        """
        try:
            _make_private(self.path)
        except OSError as exc:  # vanished during a reset, or not ours: the 0700 parent still guards it
            log.debug("cannot tighten the permissions under %s: %s", self.path, exc)

    def _other_error(self, exc: BaseException, what: str, write: bool) -> StorageError:
        # chromadb 1.x often reports a full disk as "Error in compaction: ..." with no errno
        if write:
            try:
                if shutil.disk_usage(self.path).free < _NEARLY_FULL:
                    return StorageFullError(f"{what} on {self._describe()}: {exc}")
            except OSError:
                pass
        return super()._other_error(exc, what, write)

    def preload(self) -> None:
        """Import chromadb now (1-2 s): before taking a lock that other processes wait for."""
        import chromadb  # noqa: F401

    def reload(self) -> None:
        """Drop this process's copy of the index and load the files afresh, now.

        chromadb's embedded client loads each collection's HNSW graph into memory once and never
        looks at the files again, so it does not see what other processes wrote since; a write
        through it would store its stale graph over theirs. The caller holds the store's index
        lock, so no writer is half-way through the files; the graphs are loaded here (one small
        query per collection), not at some later query outside the lock.
        """
        with self._lock:
            self.close()
            client = self._get_client()

            def warm() -> None:
                for col in client.list_collections():
                    dimension = getattr(getattr(col, "_model", None), "dimension", None)
                    if dimension and col.count():
                        col.query(query_embeddings=[[0.0] * int(dimension)], n_results=1, include=[])

            self._call("load", warm)

    def quick_check(self) -> str | None:
        """What looks wrong with the store's files, or None: the SQLite header and the HNSW file
        sizes, read in this process without a database connection (milliseconds). Only safe before
        this process opens the store; a problem found here calls for :meth:`check`."""
        from remindful.index import chroma_probe

        if not self.path.exists():
            return None
        db = self.path / "chroma.sqlite3"
        if db.exists():
            with db.open("rb") as fh:
                head = fh.read(100)
            if not head.startswith(chroma_probe.SQLITE_MAGIC):
                return "chroma.sqlite3 does not start with the SQLite header"
            # Header bytes 16-17: page size (1 means 65536); 28-31: database size in pages, valid
            # when the change counter (24-27) equals the version-valid-for number (92-95).
            page = int.from_bytes(head[16:18], "big") or 1
            page = 65536 if page == 1 else page
            pages = int.from_bytes(head[28:32], "big")
            if head[24:28] == head[92:96] and db.stat().st_size < pages * page:
                return f"chroma.sqlite3 is {db.stat().st_size} bytes, its header says {pages * page} (truncated)"
        elif chroma_probe.segment_dirs(self.path):
            return "chroma.sqlite3 is missing"
        for seg in chroma_probe.segment_dirs(self.path):
            found = chroma_probe.check_hnsw_dir(seg)
            if found:
                return f"{seg.name}/{found[0]}: {found[1]}"
        return None

    def check(self, *, timeout: float = 120.0) -> None:
        """Raise ``CorruptionError`` if the store's files are damaged; return quietly otherwise.

        Closes this index's client, then runs ``chroma_probe`` in a child process (damaged HNSW
        files can segfault chromadb): file consistency checks, then every collection is opened,
        counted, read and queried. On damage the directory is first copied to
        ``<path>.corrupt-<timestamp>`` (the error's ``backup_path``). A missing store passes.
        A probe that does not finish within ``timeout`` seconds raises ``StorageLockedError``:
        another process probably holds the database. Costs about 2 s on a small store and 4 s at
        100k vectors (chromadb import ~1.5 s, loading the HNSW index ~1 s, SQLite quick_check).
        """
        if not (self.path / "chroma.sqlite3").exists():
            return
        self.close()
        source = Path(__file__).with_name("chroma_probe.py").read_text(encoding="utf-8")
        try:
            proc = subprocess.run(
                [sys.executable, "-c", source, str(self.path)], capture_output=True, text=True, timeout=timeout
            )
        except subprocess.TimeoutExpired as exc:
            raise StorageLockedError(
                f"The health check of {self._describe()} did not finish within {timeout:.0f} s",
                suggestion="Another process may hold the store; stop it and retry",
            ) from exc
        lines = [_json_line(x) for x in proc.stdout.splitlines()]
        stage = next((x["stage"] for x in reversed(lines) if "stage" in x), "starting")
        report = next((x for x in reversed(lines) if "ok" in x), None)
        if report is not None and report["ok"]:
            return
        if proc.returncode < 0:
            detail = f"chromadb crashed with signal {-proc.returncode} while {stage}"
        elif report is not None:
            where = f"{report['file']}: " if report.get("file") else ""
            detail = f"{where}{report['error']} (while {report.get('stage', stage)})"
            if is_locked_message(report["error"]):
                raise StorageLockedError(f"{self._describe()} is locked: {report['error']}")
        else:
            raise StorageError(f"The health check of {self._describe()} failed to run: {proc.stderr.strip()[-500:]}")
        backup = self._backup(copy=True)
        message = f"The vector index at {self.path} is damaged: {detail}. A copy of the damaged files is in {backup}"
        log.error("%s. %s", message, RECOVERY)
        raise CorruptionError(message, backup_path=str(backup), suggestion=RECOVERY)

    def reset_files(self) -> Path | None:
        """Close the client, move the whole directory to ``<path>.corrupt-<timestamp>`` and start empty.

        Destroys the index (the catalog can rebuild it): call only on the user's confirmation.
        Returns the backup path, or None if there was no directory. Another index object open on
        the same path in this process keeps chromadb's shared system alive: close it first.
        """
        with self._lock:
            self.close()
            if not self.path.exists():
                return None
            backup = self._backup(copy=False)
            self.path.mkdir(mode=0o700)
            log.warning("Moved the vector index %s to %s; it starts empty", self.path, backup)
            return backup

    def _backup(self, *, copy: bool) -> Path:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        target = self.path.with_name(f"{self.path.name}.corrupt-{stamp}")
        n = 1
        while target.exists():
            target = self.path.with_name(f"{self.path.name}.corrupt-{stamp}-{n}")
            n += 1
        if copy:
            shutil.copytree(self.path, target)
            target.chmod(0o700)
        else:
            os.replace(self.path, target)
        return target


class ChromaServerIndex(ChromaIndexBase):
    """A Chroma server reached over HTTP (``chroma run``); nothing is contacted before first use.

    An unreachable server is retried 3 times, then ``StorageError`` names ``host:port``. Requests
    time out after ``timeout`` seconds (chromadb's own HTTP client never times out).
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        ssl: bool = False,
        headers: Mapping[str, str] | None = None,
        hnsw: dict[str, Any] | None = None,
        timeout: float = 30.0,
    ) -> None:
        super().__init__(hnsw)
        self.host, self.port, self.ssl = host, int(port), ssl
        self._headers = dict(headers or {})
        self._timeout = timeout

    def _describe(self) -> str:
        return f"the Chroma server at {self.host}:{self.port}"

    def _make_client(self) -> Any:
        import chromadb
        import httpx
        from chromadb.config import Settings

        client = chromadb.HttpClient(
            host=self.host,
            port=self.port,
            ssl=self.ssl,
            headers=self._headers or None,
            settings=Settings(anonymized_telemetry=False),
        )
        for session in _http_sessions(client):
            session.timeout = httpx.Timeout(self._timeout, connect=min(5.0, self._timeout))
        return client

    def close(self) -> None:
        """Release the client and its HTTP connections (chromadb's close() leaves the sockets open)."""
        with self._lock:
            sessions = _http_sessions(self._client)
            super().close()
        for session in sessions:
            session.close()


def _make_private(root: Path) -> None:
    """chmod ``root`` and every directory under it 0700, every file 0600 (only those that differ)."""
    pending = [root]
    while pending:
        folder = pending.pop()
        if stat.S_IMODE(folder.stat().st_mode) != 0o700:
            os.chmod(folder, 0o700)
        with os.scandir(folder) as entries:
            for entry in entries:
                if entry.is_symlink():
                    continue
                if entry.is_dir():
                    pending.append(Path(entry.path))
                elif stat.S_IMODE(entry.stat().st_mode) != 0o600:
                    with contextlib.suppress(FileNotFoundError):
                        os.chmod(entry.path, 0o600)


def _json_line(line: str) -> dict[str, Any]:
    """One report line of the probe; anything else chromadb printed becomes an empty dict."""
    try:
        value = json.loads(line)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _http_sessions(client: Any) -> list[Any]:
    """The ``httpx.Client`` objects of a chromadb ``HttpClient`` and of its internal admin client.

    Private attributes, hence the guards: with another chromadb layout this finds nothing, and the
    only loss is the request timeout and a ResourceWarning at exit.
    """
    owners = [client, getattr(client, "_admin_client", None)]
    found = [getattr(getattr(o, "_server", None), "_session", None) for o in owners if o is not None]
    return [s for s in found if s is not None]
