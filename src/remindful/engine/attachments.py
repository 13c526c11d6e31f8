"""Attachments: files a memory refers to through a metadata path (``screenshot_path`` or any key
named in ``attachments.path_keys``).

The path is always recorded as given. With ``attachments.copy_attachments`` on, the file is copied
to ``<storage>/attachments/<memory id>/<file name>`` (0600, in a 0700 directory) when the memory
is stored, the metadata key then points at the copy and ``<key>_original`` keeps the original
path. Deleting the memory deletes its copy (hooked into the one delete path of the store). A path
that does not name a readable file, or whose real path lies outside the directories tools may use
(``Settings.allowed_roots()``: storage, watch directories, ``security.allowed_paths``), is kept as a
reference only and logged; the memory is still stored.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from remindful.config import Settings
    from remindful.engine.catalog import MemoryRow

log = logging.getLogger("remindful")

DIRNAME = "attachments"


def attachments_dir(storage: Path) -> Path:
    return storage / DIRNAME


def attach_files(settings: Settings, rows: Sequence[MemoryRow]) -> None:
    """Copy the attached files of ``rows`` into the store (if configured); rewrites their metadata."""
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
                shutil.copyfile(source, target)
                os.chmod(target, 0o600)
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


__all__ = ["attach_files", "attachments_dir", "remove_copies"]
