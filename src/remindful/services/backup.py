"""Backups: consistent snapshots of a live store as ``.tar.gz``, validated restore, clear-all.
The archives are gzipped by ISA-L (:data:`remindful.services.archive.GZIP_LEVEL`): any gzip reads them.

An archive ``<storage>/backups/backup_YYYYmmdd_HHMMSS[_name].tar.gz`` (local time) holds::

    manifest.json      format, version, time, storage path, counts per collection, the sha256
                       and size of every other file, what the catalog's rows passed (the
                       store's redaction as a fingerprint, the schema), and the store's seal
                       over those
    catalog.sqlite3    the catalog, copied with SQLite's online backup API: one consistent
                       snapshot even while other threads and processes write
    chroma/...         the embedded Chroma files (absent in server mode), copied with the catalog
                       under one hold of the index lock: they hold what the catalog marks indexed
    attachments/...    copied attachment files
    config/            settings.json (the effective settings) and config.yaml (the YAML file, if any)

Automatic backups (before ``clear_all``, ``delete_session`` and ``restore``) are named
``..._auto-<reason>`` and only the newest ``backup.keep_automatic`` (5) are kept; named and
unnamed manual backups are never rotated.

``restore`` validates the whole archive before it touches current data: it is a readable gzip
tar (a truncated one is refused), every member is a regular file or directory (no symlinks, hard
links or devices) whose path stays inside the target, the manifest lists exactly the archive's
files with matching sha256, and the catalog passes SQLite's integrity check (an archive this store
sealed, below, passed it as it was written) with the manifest's counts. Only then is the current
data backed up and replaced, the whole time holding every other process's writes off
(:mod:`remindful.engine.storelock`): the restored catalog is copied into the live one with
SQLite's backup API (one transaction: the processes that have the store open, the
daemon, MCP servers, read the restored content next and write into it), the attachment copies
are put in place, and the vector index is rebuilt from the restored catalog. An archive this
store wrote (its seal, an HMAC of the file digests and of that record under a key kept in the
storage directory and in no archive: :func:`remindful.services.archive.seal`) has its Chroma
files put in place instead, under the same holds, and opened as any index is (checked if they
look changed, loaded, reconciled with the catalog); the rows whose vector the re-check dropped
are indexed anew. Its catalog is re-checked only if the store's redaction (or the catalog's
schema) changed since: if not, every row already passed it, and the catalog is copied in as it
is. Any other archive's catalog is rebuilt from its rows, each re-checked, and its index files are
never loaded: HNSW files are parsed by C++ code, and a crafted one is a way in. So nothing
acknowledged after a restore is lost, and nothing acknowledged before it is missing from the
automatic backup. Restores, clear-alls and reindexes
of one store run one at a time: a second one is refused, naming the first.
The layout's names and the archive checks live in :mod:`remindful.services.archive`.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import re
import shutil
import tarfile
import time
import uuid
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from remindful.engine.atomic import replaced_atomically
from remindful.engine.attachments import scanned_copy
from remindful.engine.catalog import SCHEMA_VERSION, catalog_damaged, integrity_problem
from remindful.engine.catalog_files import copy_into, prepare_for_restore, schema_version, snapshot
from remindful.errors import CorruptionError, StorageError, ValidationError, unwritable
from remindful.model import BackupResult, ClearResult, RestoreResult
from remindful.owned import private_dir
from remindful.services.archive import (
    ATTACHMENTS,
    CATALOG,
    CHROMA,
    FORMAT,
    MANIFEST,
    ROWS_CHECKED,
    VERSION,
    catalog_counts,
    gzip_writer,
    seal,
    validate_archive,
)

if TYPE_CHECKING:
    from remindful.config import Settings
    from remindful.engine.redact import StoreRedactor
    from remindful.engine.repositories import MemoryRepository
    from remindful.engine.storelock import StoreLock


class Archivable(Protocol):
    """What a backup reads of the store (:class:`~remindful.engine.store.Store` is one)."""

    @property
    def path(self) -> Path: ...

    @property
    def settings(self) -> Settings: ...

    def ready(self) -> object:
        """Open the catalog (MemoryDisabledError when memory is off)."""

    def index_lock(self) -> AbstractContextManager[int]:
        """Hold off every index write while the index files are copied."""

    @property
    def redaction(self) -> StoreRedactor:
        """The store's redaction: what an archive records its rows passed, and what a restored
        catalog's every row passes again unless that is the same."""


class Restorable(Archivable, Protocol):
    """What a restore and a clear-all do to the store besides backing it up."""

    @property
    def store_lock(self) -> StoreLock:
        """The locks that keep every process's writes out of a replacement of the content."""

    def type_counts(self) -> dict[str, int]: ...

    def get_batch(self, ids: Sequence[str]) -> list[Any]: ...

    def reindex(self, *, reset: bool, progress: Any = None) -> dict[str, int]: ...

    def index_keeps_files(self) -> bool:
        """Whether the vector index is files in the storage directory (an embedded Chroma)."""

    def index_replacement(self) -> AbstractContextManager[Callable[[Path], bool]]:
        """Hold the index (and its lock) while the content is replaced; yields ``replace(files)``."""

    def index_replaced(self, *, progress: Any = None) -> dict[str, int]:
        """Open the index files put in place, as a reindex would leave the index."""

    def delete_all(self, *, reason: str) -> int: ...


log = logging.getLogger("remindful")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def backups_dir(storage: Path) -> Path:
    return storage / "backups"


def create_backup(
    store: Archivable, *, name: str | None = None, automatic: bool = False, reason: str = "manual"
) -> BackupResult:
    """Write a backup archive of what is committed now. Vectors this process has yet to compute are
    not waited for (the caller may ``store.vectors_ready()`` first); a restore re-embeds rows
    without one."""
    if name is not None and (not isinstance(name, str) or not _NAME.match(name)):
        raise ValidationError("name", "expected 1-64 letters, digits, '_', '-' or '.', starting with a letter or digit")
    store.ready()
    return _write_backup(store, name=name, automatic=automatic, reason=reason, index_locked=False)


def _write_backup(
    store: Archivable, *, name: str | None, automatic: bool, reason: str, index_locked: bool
) -> BackupResult:
    """:func:`create_backup`; ``index_locked``: the caller holds the index lock already."""
    folder = backups_dir(store.path)
    private_dir(folder, "backup directory")  # each missing level 0700, whatever the umask
    suffix = f"_auto-{reason}" if automatic else (f"_{name}" if name else "")
    stem = f"backup_{datetime.now():%Y%m%d_%H%M%S}{suffix}"
    target = folder / f"{stem}.tar.gz"
    n = 2
    while target.exists():  # two backups in one second
        target = folder / f"{stem}-{n}.tar.gz"
        n += 1
    staging = folder / f".staging-{uuid.uuid4().hex[:8]}"
    try:
        staging.mkdir(mode=0o700)
        chroma = store.path / CHROMA
        # No index writes from the catalog's snapshot to the end of the index files' copy: every row
        # the copy marks indexed has its vector in the copied files, so that a restore of this
        # archive into this store can load them as they are (see restore_backup).
        with contextlib.nullcontext() if index_locked or not chroma.is_dir() else store.index_lock():
            snapshot(store.path / CATALOG, staging / CATALOG)
            if chroma.is_dir():
                shutil.copytree(chroma, staging / CHROMA, ignore=shutil.ignore_patterns("*.lock"))
        problem = integrity_problem(staging / CATALOG, full=True)  # what restore will check: refuse now
        if problem is not None:
            raise catalog_damaged(f"{problem}; no backup was written")
        attachments = store.path / ATTACHMENTS
        if attachments.is_dir():
            shutil.copytree(attachments, staging / ATTACHMENTS)
        _write_config(store.settings, staging / "config")
        counts = catalog_counts(staging / CATALOG)
        manifest = {
            "format": FORMAT,
            "version": VERSION,
            "created_at": datetime.now().astimezone().isoformat(),
            "name": name,
            "automatic": automatic,
            "reason": reason,
            "storage_path": str(store.path),
            "counts": counts,
            "total": sum(counts.values()),
        }
        files = _files(staging)
        digests = {rel: _digest(staging / rel) for rel in files}
        manifest["files"] = digests
        checked = _rows_checked(store.redaction, schema_version(staging / CATALOG))
        if checked is not None:
            manifest[ROWS_CHECKED] = checked
        manifest["seal"] = seal(store.path, digests, checked)
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=2), encoding="utf-8")
        with replaced_atomically(target) as raw, gzip_writer(raw) as gz, tarfile.open(fileobj=gz, mode="w") as tar:
            for rel in [MANIFEST, *files]:
                tar.add(staging / rel, arcname=rel, recursive=False, filter=_private_member)
    except (OSError, StorageError) as exc:
        # A full disk (or a read-only one) is said as such: nothing was written (was "unexpected
        # OperationalError: database or disk is full").
        stuck = None if isinstance(exc, CorruptionError) else unwritable(folder if folder.is_dir() else store.path, exc)
        if stuck is None:
            raise
        raise stuck from exc
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    if automatic:
        rotate(store.path, store.settings.backup.keep_automatic)
    return BackupResult(str(target), name, automatic, counts, sum(counts.values()), target.stat().st_size)


def _private_member(member: tarfile.TarInfo) -> tarfile.TarInfo:
    # The staged copies carry whatever mode they were written with (the umask's 0644 for the
    # manifest and the config): an archive is as private as the store it holds.
    member.mode = 0o700 if member.isdir() else 0o600
    return member


def _write_config(settings: Settings, folder: Path) -> None:
    from remindful.config import config_file

    folder.mkdir(mode=0o700)
    (folder / "settings.json").write_text(settings.model_dump_json(indent=2), encoding="utf-8")
    with contextlib.suppress(Exception):  # an unreadable config file is not worth failing a backup
        source = config_file()
        if source is not None:
            shutil.copyfile(source, folder / "config.yaml")


def _files(root: Path) -> list[str]:
    out = []
    for folder, _dirs, names in os.walk(root):
        for file in names:
            out.append((Path(folder) / file).relative_to(root).as_posix())
    return sorted(out)


def _digest(path: Path) -> dict[str, Any]:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return {"sha256": h.hexdigest(), "size": path.stat().st_size}


def list_backups(storage: Path) -> list[dict[str, Any]]:
    """Backups in ``<storage>/backups``, oldest first."""
    folder = backups_dir(storage)
    if not folder.is_dir():
        return []
    return [
        {"path": str(p), "automatic": "_auto-" in p.name, "bytes": p.stat().st_size}
        for p in sorted(folder.glob("backup_*.tar.gz"))
    ]


def rotate(storage: Path, keep: int) -> list[str]:
    """Delete all but the newest ``keep`` automatic backups; returns the deleted paths."""
    # By the name's timestamp, then by write time (two backups in one second: "...-2" sorts first by name).
    autos = sorted(backups_dir(storage).glob("backup_*_auto-*.tar.gz"), key=lambda p: (p.name[:22], _mtime(p)))
    doomed = autos[: max(len(autos) - keep, 0)]
    for path in doomed:
        path.unlink(missing_ok=True)
    return [str(p) for p in doomed]


def _mtime(path: Path) -> int:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return 0


# -- restore ---------------------------------------------------------------------------------------


def restore_backup(
    store: Restorable,
    memories: MemoryRepository,
    path: str | os.PathLike[str],
    *,
    confirm: bool = False,
    progress: Any = None,
) -> RestoreResult:
    """Replace the store's data with the backup at ``path``; see the module docstring. Without
    ``confirm`` the archive is still validated, then the restore is refused (ValidationError naming
    ``confirm``); while another restore, clear-all or reindex of the store runs it is refused
    (StorageLockedError naming it). ``progress(n)`` is called as the vector index is rebuilt."""
    archive = Path(path).expanduser()
    if not archive.is_file():
        raise ValidationError("path", f"{archive} is not a file; expected a backup_*.tar.gz from `remindful backup`")
    store.ready()
    with store.store_lock.maintenance("restore"):
        staging = store.path / f".restore-{uuid.uuid4().hex[:8]}"
        staging.mkdir(mode=0o700)
        try:
            manifest, own = validate_archive(archive, staging, store.path)
            if not confirm:
                current = sum(store.type_counts().values())
                raise ValidationError(
                    "confirm",
                    f"restoring replaces all {current} current memories with the backup's "
                    f"{manifest.get('total', '?')}; pass confirm=True (the current data is backed up first)",
                )
            # An archive this store sealed holds index files that match its catalog: they are put in
            # place as they are (a million memories' index is rebuilt in about ten minutes).
            # Any other archive's are never loaded: the index is rebuilt from the catalog.
            adopt = own and (staging / CHROMA).is_dir() and store.index_keeps_files()
            # Its catalog, whose rows passed this very redaction, is used as it is (a million
            # memories' rows are re-checked in about four minutes); any other is rebuilt from its rows.
            checked = _rows_checked(store.redaction, SCHEMA_VERSION)
            as_is = own and checked is not None and manifest.get(ROWS_CHECKED) == checked
            prepare_for_restore(
                staging / CATALOG, store.path / CATALOG, store.redaction, keep_index=adopt, rows_checked=as_is
            )
            # The index lock first (the order every writer takes them in), then every process's
            # writes held off from the snapshot of the current data to the end of the replacement.
            with store.index_replacement() as replace_index, store.store_lock.exclusive("restore"):
                kept: Path | None = None
                try:
                    before: BackupResult | None = _write_backup(
                        store, name=None, automatic=True, reason="before-restore", index_locked=True
                    )
                except CorruptionError as exc:  # restoring is the way out of a damaged catalog: keep its files
                    if exc.part != "catalog":
                        raise
                    before, kept = None, _keep_damaged(store.path)
                copies = _attachment_copies(store)
                _recheck_attachments(staging / ATTACHMENTS, store.redaction)
                copy_into(staging / CATALOG, store.path / CATALOG)
                _place_attachments(staging / ATTACHMENTS, store.path / ATTACHMENTS, copies)
                adopted = adopt and replace_index(staging / CHROMA)  # (if not: the rebuild resets the marks)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        old_root = manifest.get("storage_path")
        if isinstance(old_root, str) and old_root != str(store.path):
            _rewrite_attachment_paths(memories, Path(old_root), store.path)
        renew = store.index_replaced if adopted else functools.partial(store.reindex, reset=False)
        counts = renew(progress=progress)
    return RestoreResult(
        path=str(archive),
        counts=counts,
        total=sum(counts.values()),
        expected=manifest.get("counts"),
        backup_path=before.path if before is not None else str(kept),
    )


def _rows_checked(redaction: StoreRedactor, schema: int) -> dict[str, Any] | None:
    """What a catalog's rows passed, as an archive's manifest records it (:data:`ROWS_CHECKED`):
    the store's redaction (:attr:`~remindful.engine.redact.StoreRedactor.fingerprint`) and the
    catalog's schema; None when the redaction cannot be told."""
    fingerprint = redaction.fingerprint
    return None if fingerprint is None else {"redaction": fingerprint, "schema": schema}


def _keep_damaged(storage: Path) -> Path:
    """Copy the damaged catalog's files into ``damaged-<time>`` (it cannot be archived) and return it."""
    kept = storage / f"damaged-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:4]}"
    kept.mkdir(mode=0o700)
    for name in (CATALOG, f"{CATALOG}-wal"):
        if (storage / name).is_file():
            shutil.copyfile(storage / name, kept / name)
            os.chmod(kept / name, 0o600)
    return kept


def _attachment_copies(store: Restorable) -> set[str]:
    """The ids of the stored memories that have attachment copies (those of a damaged catalog
    that cannot be read stay where they are)."""
    root = store.path / ATTACHMENTS
    if not root.is_dir():
        return set()
    names = [entry.name for entry in root.iterdir() if entry.is_dir()]
    try:
        return {name for name, found in zip(names, store.get_batch(names), strict=True) if found is not None}
    except StorageError:
        return set()


def _recheck_attachments(staged: Path, redaction: StoreRedactor) -> None:
    """Scan the archive's attachment copies as a copy is scanned when it is made
    (:func:`~remindful.engine.attachments.scanned_copy`): a text file is redacted in place, a binary
    file holding a secret (or too large to scan) is left out of the restore (logged)."""
    if not staged.is_dir():
        return
    for path in sorted(p for p in staged.rglob("*") if p.is_file() and not p.is_symlink()):
        data, why = scanned_copy(path, redaction)
        if data is None:
            log.warning("restore: the attachment copy %s is left out: %s", path.relative_to(staged), why)
            path.unlink()
        elif why:
            path.write_bytes(data)
            log.warning("restore: attachment copy %s: %s", path.relative_to(staged), why)


def _place_attachments(staged: Path, live: Path, replaced: set[str]) -> None:
    """Move the restored attachment copies in (replacing those of the same memory) and remove the
    copies of the memories the restore replaced (``replaced``). Copies of memories not committed
    yet (a store waiting for the restore) are left alone."""
    restored: set[str] = set()
    if staged.is_dir():
        live.mkdir(mode=0o700, exist_ok=True)
        for entry in staged.iterdir():
            _remove(live / entry.name)
            os.replace(entry, live / entry.name)
            restored.add(entry.name)
    for name in replaced - restored:
        _remove(live / name)


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _rewrite_attachment_paths(memories: MemoryRepository, old_root: Path, new_root: Path) -> None:
    # Copies live under <storage>/attachments: point them at this store's copy.
    old = json.dumps(str(old_root / ATTACHMENTS))[1:-1]
    new = json.dumps(str(new_root / ATTACHMENTS))[1:-1]
    memories.relocate_attachments(old, new)


# -- clear all -------------------------------------------------------------------------------------


def clear_all(store: Restorable, memories: MemoryRepository, *, confirm: bool = False) -> ClearResult:
    """Back up, then delete every memory of every collection, the sessions, the pending spool,
    file hashes, the embedding cache and attachment copies. Refused without ``confirm``, and
    while a restore, another clear-all or a reindex of the store runs. Every process's writes wait
    from the backup to the end of the deletion: what they store after it is kept."""
    total = memories.count()
    if not confirm:
        raise ValidationError(
            "confirm",
            f"clear_all deletes all {total} memories in every collection; pass confirm=True (a backup is taken first)",
        )
    store.ready()
    with store.store_lock.maintenance("clear all memories"):
        with store.index_lock(), store.store_lock.exclusive("clear all memories"):
            backup = _write_backup(store, name=None, automatic=True, reason="before-clear-all", index_locked=True)
            deleted = store.delete_all(reason="clear_all")
            memories.clear_side_tables({"deleted": deleted, "backup": backup.path})
        store.reindex(reset=False)  # drops every vector; indexes what was stored since
    return ClearResult(deleted, backup.path, backup.counts)


__all__ = ["backups_dir", "clear_all", "create_backup", "list_backups", "restore_backup", "rotate", "validate_archive"]
