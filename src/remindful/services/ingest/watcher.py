"""The Markdown watcher: index ``.md`` files of watched directories and keep them current.

Per file, the SHA-256 of its bytes is kept in the catalog table ``file_hashes``:

- unchanged hash → nothing happens;
- new or changed → the text is chunked (:mod:`remindful.services.ingest.chunker`) and every chunk stored
  as a ``document`` memory, source ``md_file``, with ``file_path``, ``file_hash``,
  ``chunk_index``, ``total_chunks`` and ``word_offset`` in its metadata; then the file's previous
  chunks are removed. New chunks are committed before old ones go, so a search never finds the
  file missing; after a crash in between, the next scan sees the stale hash and repairs it (old
  chunks are found by ``file_path``, not only by the ids recorded for the file);
- deleted → its chunks and hash are removed.

Edge cases (spec EC-P1-03/04/06/07, ERR-P1-02): a non-UTF-8 or binary file is skipped with
"Skipping non-UTF8 file: PATH"; a file over 1 MB is processed with "Large file PATH will create N
chunks"; a file that vanishes mid-read keeps its old chunks until the next successful read; a
missing watch directory is an error at start ("Watch directory does not exist: PATH"); when the
OS watch limit is reached the error names the sysctl to raise and watching continues by polling.
The whole text is redacted before it is chunked (a secret cut in two by a chunk boundary would
escape every rule: word offsets are then those of the redacted text), and every chunk goes through
the capture filters (trigger ``files``: the switch and redaction).
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from remindful.engine.captures import FileRecord
from remindful.errors import RemindfulError, ValidationError
from remindful.model import ChunkMetadata, FileIndexed, OriginKind, make_origin
from remindful.services.ingest.chunker import chunk_text
from remindful.services.ingest.filters import apply_filters, filter_for

if TYPE_CHECKING:
    from remindful.services.ingest.ports import CaptureStore

log = logging.getLogger("remindful.services.ingest")

LARGE_FILE_BYTES = 1_048_576
SKIP_DIRS = {".git", ".hg", ".svn", "node_modules", "__pycache__", ".venv", "venv", ".tox"}
SYSCTL_HINT = (
    "File watcher limit reached. Cannot watch additional files. Raise the limit with "
    "`sudo sysctl fs.inotify.max_user_watches=524288` (persist it in /etc/sysctl.conf); "
    "continuing by polling."
)


def is_markdown(path: str | os.PathLike[str]) -> bool:
    return str(path).lower().endswith((".md", ".markdown"))


class MarkdownWatcher:
    """Index and watch the ``.md`` files under ``dirs`` into ``store``. Raises ValidationError
    (``dirs``) naming a watch directory that does not exist or is not a directory."""

    def __init__(self, store: CaptureStore, dirs: Sequence[str | os.PathLike[str]]) -> None:
        self.store = store
        self.dirs: list[Path] = []
        for raw in dirs:
            path = Path(raw).expanduser()
            if not path.is_dir():
                problem = "Watch path is not a directory" if path.exists() else "Watch directory does not exist"
                raise ValidationError(
                    "dirs", f"{problem}: {path}; expected a directory of .md files (create it, or name another)"
                )
            self.dirs.append(path.resolve())
        self._lock = threading.Lock()
        self.polling = False

    # -- one file -------------------------------------------------------------------------------

    def process_file(self, path: str | os.PathLike[str]) -> str:
        """Bring one file's chunks up to date. Returns ``indexed``, ``unchanged``, ``skipped``,
        ``vanished`` or ``removed``. Storage errors propagate (nothing is silently lost)."""
        path = Path(path).resolve()
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            if self._known(str(path)) is None:
                return "vanished"
            log.error("File disappeared while reading: %s; keeping its chunks until the next successful read", path)
            return "vanished"
        except (IsADirectoryError, PermissionError) as exc:
            log.error("Skipping unreadable file %s: %s", path, exc)
            return "skipped"
        try:
            text = data.decode("utf-8")
            if "\x00" in text:
                raise UnicodeDecodeError("utf-8", data, 0, 1, "binary data (NUL bytes)")
        except UnicodeDecodeError:
            log.error("Skipping non-UTF8 file: %s", path)
            return "skipped"
        digest = hashlib.sha256(data).hexdigest()
        with self._lock:
            if self._known(str(path)) == digest:
                return "unchanged"
            chunks = chunk_text(self._redacted(text))
            if len(data) > LARGE_FILE_BYTES:
                log.warning("Large file %s will create %d chunks", path, len(chunks))
            items = self._items(path, digest, chunks)
            if items is None:
                return "skipped"
            new_ids = self.store.store_batch(items, defer=False) if items else []
            old_ids = [i for i in self.chunk_ids(str(path)) if i not in set(new_ids)]
            self.store.captures.record_file(FileRecord(str(path), digest, tuple(new_ids)), time.time())
            if old_ids:
                self.store.delete_many(old_ids)
            log.info("indexed %s: %d chunks (%d old removed)", path, len(new_ids), len(old_ids))
            return "indexed"

    def _redacted(self, text: str) -> str:
        """The whole text redacted (the rules of the capture filters), its hits counted."""
        redactor = filter_for(self.store).redactor
        if redactor is None:
            return text
        counts: dict[str, int] = {}
        text = redactor.redact(text, counts)
        if counts:
            self.store.captures.count({f"redacted_{name}": n for name, n in counts.items()})
        return text

    def _items(self, path: Path, digest: str, chunks: list[Any]) -> list[dict[str, Any]] | None:
        items = []
        for chunk in chunks:
            result = apply_filters(
                self.store,
                chunk.text,
                trigger="files",
                session_id=self.store.session_id,
                metadata={
                    "file_path": str(path),
                    "file_hash": digest,
                    "chunk_index": chunk.index,
                    "total_chunks": len(chunks),
                    "word_offset": chunk.start_word,
                },
                signature=f"{path}\x00{digest}\x00{chunk.index}",
            )
            if not result.allowed:
                if result.code in ("disabled", "trigger", "excluded"):
                    return None
                continue
            items.append(
                {
                    "content": result.content,
                    "type": "document",
                    "source": "md_file",
                    "origin": make_origin(OriginKind.FILE, str(path)),
                    "metadata": result.metadata,
                    "chunk": ChunkMetadata(str(path), chunk.index, len(chunks), chunk.start_word, chunk.end_word),
                }
            )
        return items

    def remove_file(self, path: str | os.PathLike[str]) -> str:
        """Forget a deleted file: its chunks and its hash. Returns ``removed`` or ``unknown``."""
        key = str(Path(path).resolve())
        with self._lock:
            ids = self.chunk_ids(key)
            known = self._known(key) is not None
            if ids:
                self.store.delete_many(ids)
            self.store.captures.forget_file(key)
        if ids or known:
            log.info("removed %s: %d chunks", key, len(ids))
            return "removed"
        return "unknown"

    # -- directories ----------------------------------------------------------------------------

    def files(self) -> Iterable[Path]:
        """The Markdown files under the watch directories. A symlink whose target lies outside them
        (and outside ``Settings.allowed_roots()``) is skipped and logged: whoever can write in a
        watched directory must not make the watcher read any file of ours."""
        for root in self.dirs:
            for dirpath, dirnames, filenames in os.walk(root):
                dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS and not d.startswith(".")]
                for name in filenames:
                    if is_markdown(name) and not self._links_out(Path(dirpath, name)):
                        yield Path(dirpath, name)

    def _links_out(self, path: Path) -> bool:
        """Whether ``path`` is a link to a file outside the watched directories and the allowed roots
        (then it is skipped, and logged)."""
        if not path.is_symlink():
            return False
        real = path.resolve()
        if any(real.is_relative_to(root) for root in [*self.dirs, *self.store.settings.allowed_roots()]):
            return False
        log.warning("Skipping %s: it links to %s, outside the watched directories", path, real)
        return True

    def scan(self) -> dict[str, int]:
        """Index every file now (initial scan) and forget files deleted while nobody watched."""
        counts: dict[str, int] = {}
        present = set()
        for path in self.files():
            present.add(str(path.resolve()))
            outcome = self.process_file(path)
            counts[outcome] = counts.get(outcome, 0) + 1
        for known in self.store.captures.file_paths():
            inside = any(known.startswith(str(d) + os.sep) for d in self.dirs)
            if inside and known not in present and not os.path.exists(known):
                counts["removed"] = counts.get("removed", 0) + (self.remove_file(known) == "removed")
        return counts

    def handle(self, change: str, path: str) -> str:
        """One file event (``added``, ``modified``, ``deleted``)."""
        if not is_markdown(path):
            return "ignored"
        if change == "deleted" and not os.path.exists(path):
            return self.remove_file(path)
        if self._links_out(Path(path)):
            return "skipped"
        return self.process_file(path)

    def run(self, stop: threading.Event, *, initial_scan: bool = True) -> None:
        """Watch until ``stop`` is set. Errors in one file are logged; watching goes on."""
        import watchfiles

        if initial_scan:
            self._safe(self.scan)
        while not stop.is_set():
            try:
                for changes in watchfiles.watch(
                    *self.dirs,
                    watch_filter=lambda _c, p: is_markdown(p),
                    stop_event=stop,
                    force_polling=self.polling or None,
                    rust_timeout=500,
                    yield_on_timeout=False,
                    raise_interrupt=False,
                ):
                    for change, path in sorted(changes, key=lambda c: c[1]):
                        self._safe(lambda c=change, p=path: self.handle(c.name, p))
            except OSError as exc:
                if self.polling or not _is_watch_limit(exc):
                    raise
                log.error("%s (%s)", SYSCTL_HINT, exc)
                self.polling = True

    def _safe(self, fn: Any) -> Any:
        try:
            return fn()
        except RemindfulError as exc:
            log.error("Markdown watcher: %s", exc)
            return None

    # -- what the catalog recorded --------------------------------------------------------------

    def _known(self, path: str) -> str | None:
        record = self.store.captures.file_record(path)
        return record.sha256 if record is not None else None

    def chunk_ids(self, path: str) -> list[str]:
        """The ids of the chunks stored for the file at ``path`` (resolved, as stored)."""
        return self.store.captures.chunk_ids_of(path)


def _is_watch_limit(exc: OSError) -> bool:
    return "watch limit" in str(exc).lower() or exc.errno == 28  # ENOSPC from inotify_add_watch


def index_file(store: CaptureStore, path: str | os.PathLike[str]) -> FileIndexed:
    """Bring one Markdown file's chunks up to date now: its outcome (``indexed``, ``unchanged``,
    ``skipped`` or ``vanished``) and the file's chunks stored after the call."""
    file = Path(path).expanduser().resolve()
    watcher = MarkdownWatcher(store, [file.parent])
    outcome = watcher.process_file(file)
    return FileIndexed(outcome, len(watcher.chunk_ids(str(file))))


def files_indexed(store: CaptureStore) -> int:
    """How many Markdown files the store has indexed (their hashes are recorded)."""
    return store.captures.files_indexed()


def files_enabled(store: CaptureStore) -> bool:
    """Whether the settings let Markdown files be captured (memory, auto-capture and ``files`` on)."""
    cfg = filter_for(store).config
    return cfg.memory_enabled and cfg.enabled and cfg.triggers.get("files", True)


__all__ = ["SYSCTL_HINT", "MarkdownWatcher", "files_enabled", "is_markdown"]
