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
import functools
import json
import logging
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from remindful.errors import CorruptionError, StorageError, StorageFullError, StorageLockedError, unwritable
from remindful.index import chroma_probe, chroma_sqlite, chroma_template
from remindful.index.chroma_base import RECOVERY, ChromaIndexBase, classify, is_locked_message

__all__ = ["ChromaEmbeddedIndex", "ChromaServerIndex"]

log = logging.getLogger(__name__)
_NEARLY_FULL = 32 * 1024 * 1024  # below this much free space, a vague write error means a full disk
#: In the Chroma directory (so that a reset moves them aside with it): the size and modification
#: time of every HNSW file as remindful last wrote it, and the verdict of a probe that found damage.
FINGERPRINTS = "remindful-files.json"
DAMAGE_MARKER = "remindful-damage.json"
_SEGMENT_FILES = (*chroma_probe.HNSW_FILES, "index_metadata.pickle")
#: Chroma saves a collection's HNSW files every ``sync_threshold`` vectors added (1,000 by default),
#: and a save costs with the collection's size, not with what was added: at 1,000,000 vectors 0.9 s
#: (the id maps whole, every changed element), 0.9 ms a vector added on top of the 0.45 ms its
#: insertion costs. What is added meanwhile stays in Chroma's log, and an open replays it (~1 ms a
#: vector). So a large collection is saved every SYNC_SHARE-th of its size, between SYNC_MIN and
#: SYNC_MAX vectors: at 1,000,000, every 4,000 (0.2 ms a vector; an open replays up to 4 s more).
SYNC_SHARE = 250
SYNC_MIN = 1000
SYNC_MAX = 4000


def sync_threshold(size: int) -> int:
    """How many vectors a collection of ``size`` vectors takes between two saves of its files."""
    return max(SYNC_MIN, min(SYNC_MAX, size // SYNC_SHARE))


class ChromaEmbeddedIndex(ChromaIndexBase):
    """Chroma in this process, persisted under ``path`` (created 0700).

    ``hnsw`` sets HNSW parameters of collections created from now on: ``construction_ef``/
    ``ef_construction``, ``search_ef``/``ef_search``, ``M``/``max_neighbors``, ``num_threads``,
    ``batch_size``, ``sync_threshold``, ``resize_factor``. Existing collections keep theirs.
    Call :meth:`quick_check` at startup, before first use, and :meth:`check` if it finds something.

    Damage that keeps the files' sizes (a garbled ``data_level0.bin``) cannot be seen without
    loading the graph, and loading it can segfault. So after each write batch (and at a close that
    follows writes) the size and modification time of every HNSW file go to ``remindful-files.json``;
    :meth:`quick_check` compares them with the files (a few ``stat`` calls), and a file changed by
    anything else calls for the probe in a child process. Damage the probe finds is remembered in
    ``remindful-damage.json``: later opens report it without probing (and copying) again, until
    ``reset_files`` moves the directory aside. Not covered: a change that restores the old
    modification time, or media errors under an unchanged one (the crash marker catches those
    after their first crash).
    """

    def __init__(self, path: Path, *, hnsw: dict[str, Any] | None = None) -> None:
        super().__init__(hnsw)
        self.path = Path(path)
        self._sizes: dict[str, int] = {}  # collection -> the vectors it is expected to hold

    def expect_sizes(self, sizes: Mapping[str, int]) -> None:
        """How many vectors each collection will hold (the catalog's counts), before this process
        uses it: its files are then saved every :func:`sync_threshold` additions (unless ``hnsw``
        sets ``sync_threshold``). A collection created from now on is made so; an
        existing one this process has not used yet is changed (it takes effect as it loads)."""
        self._sizes.update(sizes)

    def _tuned(self, name: str) -> int | None:
        """The sync threshold collection ``name``'s expected size calls for; None when its size is
        not known or ``hnsw`` sets one."""
        if "sync_threshold" in self._hnsw or name not in self._sizes:
            return None
        return sync_threshold(self._sizes[name])

    def _hnsw_for(self, name: str) -> dict[str, Any]:
        hnsw = super()._hnsw_for(name)
        tuned = self._tuned(name)
        if tuned is not None:
            hnsw["sync_threshold"] = tuned
        return hnsw

    def _adjust(self, name: str, col: Any) -> None:
        wanted = self._tuned(name)
        if wanted is None:
            return
        config = getattr(col, "configuration_json", None) or {}
        current = (config.get("hnsw") or {}).get("sync_threshold")
        if isinstance(current, int) and wanted * 3 <= current * 4 and current * 3 <= wanted * 4:
            return  # near enough: not rewritten as the store grows by a few memories
        try:
            col.modify(configuration={"hnsw": {"sync_threshold": wanted}})
        except Exception as exc:  # a read-only store, an older chromadb: saved as often as before
            log.debug("cannot set the sync threshold of %s to %d: %s", name, wanted, exc)

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
        # No chromadb client of this process can have a file open that does not exist yet.
        db = self.path / "chroma.sqlite3"
        fresh = not db.exists()
        seeded = fresh and chroma_template.seed(db)
        if not seeded:
            chroma_sqlite.create(db)
        settings = chroma_settings(allow_reset=True)
        try:
            try:
                client = _persistent_client(self.path, settings)
            except Exception as exc:
                if not seeded:
                    raise
                log.info("chromadb could not open a store made from its template (%s); making it anew", exc)
                chroma_template.discard()
                for leftover in (db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")):
                    leftover.unlink(missing_ok=True)
                chroma_sqlite.create(db)
                client = _persistent_client(self.path, chroma_settings(allow_reset=True))
                seeded = False
        except Exception as exc:  # a full disk fails here too ("database or disk is full")
            raise self._translate(exc, classify(exc), "open", True) from exc
        if fresh and not seeded:  # before any collection: later new stores copy it (5 ms, not 25)
            chroma_template.keep(db)
        return client

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

    def _files_written(self) -> None:
        """Record the HNSW files as this process left them (called under the store's index lock)."""
        try:
            _write_json(self.path / FINGERPRINTS, self._fingerprint())
        except OSError as exc:  # the next open probes the files instead: slower, not wrong
            log.debug("cannot record the index file fingerprints under %s: %s", self.path, exc)

    def _fingerprint(self) -> dict[str, list[int]]:
        """``{"<segment>/<file>": [size, mtime_ns]}`` for every HNSW file (no reads of their contents)."""
        found: dict[str, list[int]] = {}
        if not self.path.is_dir():
            return found
        for seg in chroma_probe.segment_dirs(self.path):
            for name in _SEGMENT_FILES:
                with contextlib.suppress(FileNotFoundError):
                    st = (seg / name).stat()
                    found[f"{seg.name}/{name}"] = [st.st_size, st.st_mtime_ns]
        return found

    def _changed_files(self) -> list[str]:
        """HNSW files that differ from what remindful last recorded (none if nothing was recorded)."""
        recorded = _read_json(self.path / FINGERPRINTS)
        if recorded is None:
            return []
        now = self._fingerprint()
        return sorted(k for k in recorded.keys() | now.keys() if recorded.get(k) != now.get(k))

    def damage(self) -> dict[str, Any] | None:
        """The damage a probe found and that no reset has cleared yet: ``{"message", "backup_path",
        "found_at"}``, or None."""
        marker = _read_json(self.path / DAMAGE_MARKER)
        return marker if marker and isinstance(marker.get("message"), str) else None

    def close(self) -> None:
        """Release the client; after writes, give the free pages of ``chroma.sqlite3`` back
        (:func:`remindful.index.chroma_sqlite.compact`) once no Chroma client of this process
        has the file open (another one on the same path keeps chromadb's shared system, and its
        connections, alive: closing a second descriptor of the file would drop their locks)."""
        with self._lock:
            wrote, identifier = self._wrote, getattr(self._client, "_identifier", None)
            super().close()
            if wrote and identifier is not None and not _chroma_holds(identifier):
                chroma_sqlite.compact(self.path / "chroma.sqlite3")
                self._after_write()

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
        if not self.path.exists():
            return None
        damage = self.damage()
        if damage is not None:
            return f"found damaged before: {damage['message']}"
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
        changed = self._changed_files()
        if changed:
            return f"{', '.join(changed[:3])} changed since remindful last wrote the index"
        return None

    def check(self, *, timeout: float = 120.0) -> None:
        """Raise ``CorruptionError`` if the store's files are damaged; return quietly otherwise.

        Closes this index's client, then runs ``chroma_probe`` in a child process (damaged HNSW
        files can segfault chromadb): file consistency checks, then every collection is opened,
        counted, read and queried. On damage the directory is first copied to
        ``<path>.corrupt-<timestamp>`` (the error's ``backup_path``). A missing store passes.
        A probe that does not finish within ``timeout`` seconds raises ``StorageLockedError``:
        another process probably holds the database. Where nothing can be written (a read-only
        filesystem, a full disk) chromadb cannot open the files at all, which says nothing about
        them: the probe runs on a copy in the temporary directory, and damage it finds is reported
        without a copy or a record next to the files (StorageError if the copy cannot be made).
        Costs about 2 s on a small store and 4 s at 100k vectors (chromadb import ~1.5 s, loading
        the HNSW index ~1 s, SQLite quick_check).
        """
        if not (self.path / "chroma.sqlite3").exists():
            return
        damage = self.damage()
        if damage is not None:  # already probed, copied and reported: no second copy of the same damage
            raise CorruptionError(
                f"{damage['message']} (found {damage.get('found_at', 'earlier')})",
                backup_path=damage.get("backup_path"),
                suggestion=RECOVERY,
            )
        self.close()
        stuck = _why_unwritable(self.path)
        with contextlib.ExitStack() as scratch:
            probed = self.path
            if stuck is not None:
                probed = Path(scratch.enter_context(tempfile.TemporaryDirectory(prefix="remindful-probe-"))) / "chroma"
                try:
                    shutil.copytree(self.path, probed)
                except OSError as exc:
                    raise StorageError(f"{self._describe()} cannot be checked ({stuck}; copying it: {exc})") from exc
            proc = self._probe(probed, timeout)
        if stuck is not None:
            message = self._verdict(proc)
            if message is None:
                return
            raise CorruptionError(f"The vector index at {self.path} is damaged: {message}", suggestion=RECOVERY)
        message = self._verdict(proc)
        if message is None:
            self._files_written()  # sound as they are: the next open need not probe them again
            return
        stuck = _why_unwritable(self.path)
        if stuck is not None:  # the disk filled up (or went read-only) during the probe: no verdict
            raise StorageError(f"{self._describe()} cannot be checked now: {stuck} ({message})")
        backup = self._backup(copy=True)
        message = f"The vector index at {self.path} is damaged: {message}. A copy of the damaged files is in {backup}"
        found_at = time.strftime("%Y-%m-%d %H:%M:%S")
        with contextlib.suppress(OSError):  # unrecorded, the next open probes (and copies) again
            _write_json(
                self.path / DAMAGE_MARKER, {"message": message, "backup_path": str(backup), "found_at": found_at}
            )
        raise CorruptionError(message, backup_path=str(backup), suggestion=RECOVERY)

    def _probe(self, path: Path, timeout: float) -> subprocess.CompletedProcess[str]:
        source = Path(__file__).with_name("chroma_probe.py").read_text(encoding="utf-8")
        try:
            # -P: nothing of the working directory imported (a hook's daemon works in the agent's project).
            return subprocess.run(
                [sys.executable, "-P", "-c", source, str(path)], capture_output=True, text=True, timeout=timeout
            )
        except subprocess.TimeoutExpired as exc:
            raise StorageLockedError(
                f"The health check of {self._describe()} did not finish within {timeout:.0f} s",
                suggestion="Another process may hold the store; stop it and retry",
            ) from exc

    def _verdict(self, proc: subprocess.CompletedProcess[str]) -> str | None:
        """What the probe found wrong (None: nothing); raises when it could not tell."""
        lines = [_json_line(x) for x in proc.stdout.splitlines()]
        stage = next((x["stage"] for x in reversed(lines) if "stage" in x), "starting")
        report = next((x for x in reversed(lines) if "ok" in x), None)
        if report is not None and report["ok"]:
            return None
        if proc.returncode < 0:
            detail = f"chromadb crashed with signal {-proc.returncode} while {stage}"
        elif report is not None:
            where = f"{report['file']}: " if report.get("file") else ""
            detail = f"{where}{report['error']} (while {report.get('stage', stage)})"
            if is_locked_message(report["error"]):
                raise StorageLockedError(f"{self._describe()} is locked: {report['error']}")
        else:
            raise StorageError(f"The health check of {self._describe()} failed to run: {proc.stderr.strip()[-500:]}")
        return detail

    def reset(self) -> None:
        """Delete every collection; the damage found before (if any) went with them."""
        super().reset()
        (self.path / DAMAGE_MARKER).unlink(missing_ok=True)

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

    def replace_files(self, files: Path) -> None:
        """Put the directory ``files`` (on the same filesystem) in place of this index's directory,
        which is removed: a restore's index files, loaded as they are. The client is closed first;
        the index reopens at its next use. Another index object open on the same path in this
        process keeps chromadb's shared system alive: close it first."""
        with self._lock:
            self.close()
            old = None
            if self.path.exists():
                old = self.path.with_name(f".{self.path.name}.replaced-{os.getpid()}-{time.monotonic_ns()}")
                os.replace(self.path, old)
            os.replace(files, self.path)
            self.path.chmod(0o700)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)

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

    remote = True

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

        client = chromadb.HttpClient(
            host=self.host,
            port=self.port,
            ssl=self.ssl,
            headers=self._headers or None,
            settings=chroma_settings(),
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


def chroma_settings(*, allow_reset: bool = False) -> Any:
    """chromadb's settings for a new client: a copy of ones made once a process. Making them reads
    every ``CHROMA_*`` setting from the environment and a ``.env`` file, in Python: 6 ms with the
    interpreter lock held, on a fresh store's way to its first searchable vector; a copy takes
    microseconds. A client changes its own copy (chromadb sets the path on it)."""
    return _settings_made(allow_reset).model_copy()


@functools.cache
def _settings_made(allow_reset: bool) -> Any:
    from chromadb.config import Settings

    return Settings(anonymized_telemetry=False, allow_reset=allow_reset)


def _persistent_client(path: Path, settings: Any) -> Any:
    """``chromadb.PersistentClient`` on ``path``. chromadb keeps a process-wide system per path,
    made before it is started: one whose start failed stayed, and every later client of the path
    in this process failed on it ("'RustBindingsAPI' object has no attribute 'bindings'"), long
    after the cause (a full disk, a damaged file) was gone. Such a system is dropped here."""
    import chromadb
    from chromadb.api.shared_system_client import SharedSystemClient

    identifier = str(path)
    existed = _chroma_holds(identifier)
    try:
        return chromadb.PersistentClient(identifier, settings=settings)
    except Exception:
        if not existed:
            failed = SharedSystemClient._identifier_to_system.pop(identifier, None)
            if failed is not None:
                with contextlib.suppress(Exception):
                    failed.stop()
        raise


def _chroma_holds(identifier: str) -> bool:
    """Whether chromadb's shared system for a client's path is still running in this process."""
    from chromadb.api.shared_system_client import SharedSystemClient

    return identifier in SharedSystemClient._identifier_to_system


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


def _why_unwritable(path: Path) -> str | None:
    """Why nothing can be written where the index lives (read-only, or a full disk), or None."""
    why = unwritable(path if path.exists() else path.parent)
    return None if why is None else why.message


def _read_json(path: Path) -> dict[str, Any] | None:
    """A JSON object file, or None if it is missing or unreadable (then nothing was recorded)."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _write_json(path: Path, value: object) -> None:
    """Replace ``path`` atomically (0600): a reader sees the old or the new content, never half."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(value, fh)
    os.replace(tmp, path)


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
