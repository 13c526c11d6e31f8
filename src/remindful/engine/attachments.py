"""Attachments: files a memory refers to through a metadata path (``screenshot_path`` or any key
named in ``attachments.path_keys``).

The path is always recorded as given. With ``attachments.copy_attachments`` on, the file is copied
to ``<storage>/attachments/<memory id>/<file name>`` (0600, in a 0700 directory) when the memory
is stored, the metadata key then points at the copy and ``<key>_original`` keeps the original
path. Deleting the memory deletes its copy (hooked into the one delete path of the store). A path
that does not name a readable file, or whose real path lies outside the directories tools may use
(``Settings.allowed_roots()``: storage, watch directories, ``security.allowed_paths``), is kept as a
reference only and logged; the memory is still stored.

A copy never holds a secret the store's redaction finds (:class:`~remindful.engine.redact.StoreRedactor`:
the rules and detect-secrets' plugins): a text file (UTF-8) is copied redacted, and a binary file
whose printable runs hold one is not copied (the reference only, logged). Files larger than
:data:`MAX_SCANNED_BYTES` are not copied either: they cannot be scanned in the write path.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from remindful.config import Settings
    from remindful.engine.catalog import MemoryRow
    from remindful.engine.redact import StoreRedactor

log = logging.getLogger("remindful")

DIRNAME = "attachments"
#: The largest file copied (it is read whole and scanned for secrets first).
MAX_SCANNED_BYTES = 32 * 1024 * 1024
_PRINTABLE_RUN = re.compile(rb"[\t\n\r\x20-\x7e]{8,}")


def scanned_copy(source: Path, redaction: StoreRedactor | None) -> tuple[bytes | None, str]:
    """The bytes to copy of ``source``: its text redacted (a UTF-8 file), itself (a binary file
    holding no secret in its printable runs), or None with the reason it is not copied (a binary
    file that holds one, a file too large to scan)."""
    if source.stat().st_size > MAX_SCANNED_BYTES:
        return None, f"larger than {MAX_SCANNED_BYTES} bytes, too large to scan for secrets"
    data = source.read_bytes()
    if redaction is None or redaction.rules is None:
        return data, ""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is not None:
        redacted = redaction.text(text)
        return redacted.encode("utf-8"), ("secrets redacted in the copy" if redacted != text else "")
    for run in _PRINTABLE_RUN.finditer(data):
        piece = run.group(0).decode("ascii")
        if redaction.text(piece) != piece:
            return None, "it holds what looks like a secret (a binary file cannot be redacted)"
    return data, ""


def attachments_dir(storage: Path) -> Path:
    return storage / DIRNAME


def attach_files(settings: Settings, rows: Sequence[MemoryRow], redaction: StoreRedactor | None = None) -> None:
    """Copy the attached files of ``rows`` into the store (if configured), scanned by ``redaction``
    (:func:`scanned_copy`); rewrites their metadata."""
    config = settings.attachments
    if not config.copy_attachments or not config.path_keys:
        return
    root = attachments_dir(settings.storage_path)
    roots = settings.allowed_roots()
    for row in rows:
        if not any(f'"{key}"' in row.metadata for key in config.path_keys):
            continue
        meta = json.loads(row.metadata)
        changed = False
        for key in config.path_keys:
            value = meta.get(key)
            if not isinstance(value, str) or not value:
                continue
            source = Path(value).expanduser()
            if not source.is_file():
                log.warning(
                    "attachment %s=%r of %s is not a readable file; keeping the reference only", key, value, row.id
                )
                continue
            source = source.resolve()
            if not any(source.is_relative_to(allowed) for allowed in roots):
                log.warning(
                    "attachment %s=%r of %s is outside the storage directory, the watch directories and "
                    "security.allowed_paths; keeping the reference only",
                    key,
                    value,
                    row.id,
                )
                continue
            target_dir = root / row.id
            target_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            os.chmod(root, 0o700)
            target = target_dir / source.name
            try:
                data, why = scanned_copy(source, redaction)
                if data is None:
                    log.warning("attachment %s of %s is not copied: %s; keeping the reference only", key, row.id, why)
                    continue
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o600)
                with os.fdopen(fd, "wb") as out:
                    out.write(data)
                os.chmod(target, 0o600)
                if why:
                    log.warning("attachment %s of %s: %s", key, row.id, why)
            except OSError as exc:
                log.warning("could not copy attachment %s for %s: %s; keeping the reference only", value, row.id, exc)
                continue
            meta[f"{key}_original"] = value
            meta[key] = str(target)
            changed = True
        if changed:
            row.metadata = json.dumps(meta, ensure_ascii=False, allow_nan=False)


def remove_copies(storage: Path, ids: Iterable[str]) -> int:
    """Delete the attachment copies of these memories; returns how many directories went."""
    root = attachments_dir(storage)
    try:
        present = set(os.listdir(root))
    except OSError:  # no attachments directory: nothing was ever copied
        return 0
    removed = 0
    for mid in present.intersection(ids):
        shutil.rmtree(root / mid, ignore_errors=True)
        removed += 1
    return removed


__all__ = ["MAX_SCANNED_BYTES", "attach_files", "attachments_dir", "remove_copies", "scanned_copy"]
