"""What a store holds besides its memories, read whole for a copy to another catalog backend
(``remindful migrate --to postgresql://...``): the sessions, the tombstones, the ledger of injected
context and the projects, each as plain tuples in a stable order, and the counts a copy is
verified by. The memories themselves are read in pages (:meth:`MemoryRepository.page
<remindful.engine.repositories.memories.MemoryRepository.page>`)."""

from __future__ import annotations

from remindful.engine.captures import SALT_KEY
from remindful.engine.repositories.base import Repository

#: ``(id, started_at, ended_at, metadata)``
Session = tuple[str, float, float | None, str]
#: ``(key, buried_at, reason, memory_id)``
Tombstone = tuple[str, float, str, str | None]
#: ``(at, session_id, project, event, tokens, memory_ids)``
Injection = tuple[float, str | None, str | None, str, int, str]
#: ``(key, name, root, first_seen, last_seen)``
ProjectRecord = tuple[str, str, str, float, float]


class TransferRepository(Repository):
    """Everything but the memories, for a copy (see the module docstring)."""

    def sessions(self) -> list[Session]:
        return [
            tuple(r) for r in self._catalog.read("SELECT id, started_at, ended_at, metadata FROM sessions ORDER BY id")
        ]

    def tombstones(self) -> list[Tombstone]:
        return [
            tuple(r)
            for r in self._catalog.read("SELECT key, buried_at, reason, memory_id FROM tombstones ORDER BY key")
        ]

    def injections(self) -> list[Injection]:
        return [
            tuple(r)
            for r in self._catalog.read(
                "SELECT at, session_id, project, event, tokens, memory_ids FROM injections ORDER BY seq"
            )
        ]

    def projects(self) -> list[ProjectRecord]:
        return [
            tuple(r)
            for r in self._catalog.read("SELECT key, name, root, first_seen, last_seen FROM projects ORDER BY key")
        ]

    def tombstone_salt(self) -> str | None:
        """The salt the tombstones are keyed with (hex; :mod:`remindful.engine.captures`), or None."""
        rows = self._catalog.read("SELECT value FROM meta WHERE key = ?", (SALT_KEY,))
        return str(rows[0][0]) if rows else None

    def counts(self) -> dict[str, int]:
        """The rows of each part a copy carries: ``memories``, ``vectors`` (memories with one),
        ``sessions``, ``tombstones``, ``injections``, ``projects``."""
        ((memories, vectors, sessions, tombstones, injections, projects),) = self._catalog.read(
            "SELECT (SELECT count(*) FROM memories), (SELECT count(*) FROM memories WHERE embedding IS NOT NULL), "
            "(SELECT count(*) FROM sessions), (SELECT count(*) FROM tombstones), (SELECT count(*) FROM injections), "
            "(SELECT count(*) FROM projects)"
        )
        return {
            "memories": int(memories),
            "vectors": int(vectors),
            "sessions": int(sessions),
            "tombstones": int(tombstones),
            "injections": int(injections),
            "projects": int(projects),
        }


__all__ = ["Injection", "ProjectRecord", "Session", "Tombstone", "TransferRepository"]
