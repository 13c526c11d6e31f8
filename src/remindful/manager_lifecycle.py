"""MemoryManager's lifecycle methods: sessions, retention, dedup, export/import, backup/restore.

A mixin of thin delegations to :mod:`remindful.sessions`, :mod:`remindful.policy`,
:mod:`remindful.export` and :mod:`remindful.backup`, which it imports on first call so that
opening a manager stays light. :class:`~remindful.manager.MemoryManager` inherits it; the
attributes below are the manager's, declared for the type checker only.
"""

from __future__ import annotations

import builtins
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

from remindful.storage import StoreState

if TYPE_CHECKING:
    from remindful.manager import MemoryManager


class LifecycleMixin:
    """Sessions, retention, dedup, export/import and backup/restore of a :class:`MemoryManager`."""

    _state: StoreState
    _session_id: str | None
    _resumed_session: str | None
    _vectors_ready: Callable[[], StoreState]

    def list_sessions(self) -> builtins.list[dict[str, Any]]:
        """Every session, newest first: id, start/end, memory count, summary of its activity."""
        from remindful.sessions import list_sessions

        return list_sessions(self._state.ready(), current=self._session_id, resumed=self._resumed_session)

    def delete_session(self, session_id: str, confirm: bool = False) -> dict[str, Any]:
        """Back up, then delete every memory of the session. Refused (ValidationError) unless ``confirm``."""
        from remindful.sessions import delete_session

        return delete_session(cast("MemoryManager", self), session_id, confirm=confirm)

    def cleanup(self, dry_run: bool = False) -> dict[str, Any]:
        """Apply the retention policy (:mod:`remindful.policy.retention`); ``dry_run`` only reports."""
        from remindful.policy.retention import cleanup

        return cleanup(self._vectors_ready(), dry_run=dry_run).to_dict(with_ids=dry_run)

    def dedup(
        self, threshold: float | None = None, types: Sequence[str] | None = None, dry_run: bool = False
    ) -> dict[str, Any]:
        """Collapse near-duplicates (cosine ≥ threshold) of each type into their most important member."""
        from remindful.policy.dedup import dedup

        return dedup(self._vectors_ready(), threshold=threshold, types=types, dry_run=dry_run)

    def export(
        self, format: str = "json", output_path: str | os.PathLike[str] | None = None, *, progress: Any = None
    ) -> dict[str, Any]:
        """Write every memory (content, metadata, embedding) to a JSON file; returns path and count.
        ``progress(n)`` is called as batches are written."""
        from remindful.export import export_memories

        self._vectors_ready()
        return export_memories(cast("MemoryManager", self), format=format, output_path=output_path, progress=progress)

    def import_memories(self, path: str | os.PathLike[str], *, progress: Any = None) -> dict[str, Any]:
        """Restore memories exported by :meth:`export` exactly (no re-embedding); duplicates skipped."""
        from remindful.export import import_memories

        return import_memories(cast("MemoryManager", self), path, progress=progress)

    import_ = import_memories

    def backup(self, name: str | None = None, *, automatic: bool = False) -> dict[str, Any]:
        """Snapshot the store into ``<storage>/backups/backup_YYYYmmdd_HHMMSS[_name].tar.gz``."""
        from remindful.backup import create_backup

        self._vectors_ready()
        return create_backup(cast("MemoryManager", self), name=name, automatic=automatic)

    def restore(self, path: str | os.PathLike[str], confirm: bool = False, *, progress: Any = None) -> dict[str, Any]:
        """Replace the store with a validated backup (after backing up the current one)."""
        from remindful.backup import restore_backup

        return restore_backup(cast("MemoryManager", self), path, confirm=confirm, progress=progress)

    def clear_all(self, confirm: bool = False) -> dict[str, Any]:
        """Back up, then delete every memory. Refused (ValidationError) unless ``confirm``."""
        from remindful.backup import clear_all

        return clear_all(cast("MemoryManager", self), confirm=confirm)
