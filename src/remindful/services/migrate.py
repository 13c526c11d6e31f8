"""Moving a local store to a shared one: ``remindful migrate --to postgresql://... --chroma http://...``.

Copies every part of the local store into an empty PostgreSQL catalog: the memories with their
vectors (in pages, ids and times kept), the sessions, the tombstones, the ledger of injected context
and the projects; puts the vectors into the Chroma server's collections (on a store that already has
a team, a private memory's stays in the catalog, under row-level security: the Chroma server has no
people); then verifies that each
part's count on the target is the source's (and each collection's vector count), and raises
:class:`~remindful.errors.StorageError` naming the parts that differ. The local store is left as it
was. A target that already holds memories, or a Chroma server whose collections hold vectors, is
refused (a second run would mix two stores).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from remindful.engine.postgres.transfer import PostgresTransfer
from remindful.engine.repositories.memories import MemoryRepository
from remindful.engine.repositories.transfer import TransferRepository
from remindful.engine.scopes import in_index
from remindful.errors import StorageError
from remindful.index.base import VectorIndex
from remindful.model import MemoryType

PAGE = 500


@dataclass(frozen=True, slots=True)
class MigrationReport:
    """What a migration copied: each part's count on the source and on the target (equal once
    verified), and the vectors in each Chroma collection."""

    target: str
    counts: dict[str, tuple[int, int]]
    collections: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "counts": {k: {"source": s, "target": t} for k, (s, t) in self.counts.items()},
            "collections": dict(self.collections),
        }


def migrate(
    memories: MemoryRepository,
    parts: TransferRepository,
    target: PostgresTransfer,
    index: VectorIndex,
    *,
    shown_target: str,
    progress: Callable[[int, int], None] | None = None,
) -> MigrationReport:
    """Copy the local store (``memories``, ``parts``) to ``target`` and ``index``, and verify it."""
    before = target.counts()
    if before["memories"]:
        raise StorageError(
            f"{shown_target} already holds {before['memories']} memories: nothing was copied",
            suggestion="migrate into an empty database",
        )
    held = {t.collection: index.count(t.collection) for t in MemoryType}
    if any(held.values()):
        shown = ", ".join(f"{name} {n}" for name, n in held.items() if n)
        raise StorageError(
            f"the Chroma server already holds vectors ({shown}): nothing was copied",
            suggestion="migrate into an empty Chroma server (or reset its collections)",
        )
    source = parts.counts()
    salt = parts.tombstone_salt()
    if salt is not None and not target.tombstone_salt(salt):
        raise StorageError(
            f"{shown_target} keys its tombstones with another salt: nothing was copied",
            suggestion="migrate into an empty database",
        )
    target.projects(parts.projects())
    target.sessions(parts.sessions())
    target.tombstones(parts.tombstones())
    target.injections(parts.injections())
    vectors: dict[str, int] = {}
    private = target.indexes_private
    after, done = 0, 0
    while page := memories.page(after, PAGE):
        after = page[-1][0]
        rows = [row for _, row in page]
        by_type: dict[str, list[Any]] = {}
        for row in rows:
            # On a team store a private memory's vector stays in the catalog: the Chroma server has no people.
            if row.embedding is not None and in_index(row.scope, private_indexed=private):
                by_type.setdefault(row.type, []).append(row)
        for type_value, group in by_type.items():
            collection = MemoryType(type_value).collection
            index.upsert(
                collection,
                [r.id for r in group],
                np.stack([np.asarray(r.embedding, dtype=np.float32) for r in group]),
                [{} for _ in group],  # ids and vectors only, as the index mirror writes them
            )
            vectors[collection] = vectors.get(collection, 0) + len(group)
        target.memories(rows)  # after their vectors: a row marked indexed has its vector there
        done += len(rows)
        if progress is not None:
            progress(done, source["memories"])
    copied = target.counts()
    counts = {part: (source[part], copied[part]) for part in source}
    collections = {name: index.count(name) for name in sorted(vectors)}
    wrong = [f"{part} {s} -> {t}" for part, (s, t) in counts.items() if s != t]
    wrong += [f"{name} vectors {vectors[name]} -> {n}" for name, n in collections.items() if n != vectors[name]]
    if wrong:
        raise StorageError(
            f"the copy to {shown_target} does not match the local store: " + ", ".join(wrong),
            suggestion="drop the target database and run the migration again",
        )
    return MigrationReport(shown_target, counts, collections)


__all__ = ["MigrationReport", "migrate"]
