"""What the scopes hold and which projects they name (:mod:`remindful.engine.scopes`): the counts
kept by triggers, the projects recorded as memories were written, and the memories of one scope."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

from remindful.engine.projects import PROJECT_PREFIX, slug
from remindful.engine.repositories.base import Repository
from remindful.engine.sqlfilter import build_filter

#: Whether a text is a recorded project's name or root, or a bound directory or name (all four
#: parameters: the text), in the dialect both catalogs take.
RECORDED_PLACE = (
    "SELECT 1 FROM projects WHERE name = ? OR root = ? "
    "UNION ALL SELECT 1 FROM project_bindings WHERE root = ? OR name = ? LIMIT 1"
)


class ScopeRepository(Repository):
    """Named queries over scopes and projects."""

    def counts(self) -> dict[str | None, int]:
        """How many memories each scope holds (None: unscoped); scopes without any are left out."""
        return self._catalog.scope_counts()

    def projects(self) -> dict[str, tuple[str, str]]:
        """Every recorded project: its scope → (name, root directory, "" if none is known)."""
        rows = self._catalog.read("SELECT key, name, root FROM projects")
        return {PROJECT_PREFIX + key: (str(name), str(root)) for key, name, root in rows}

    def project_root(self, key: str) -> str | None:
        """The directory recorded for the project ``key`` ("" when known by name only), or None
        when none is (:class:`~remindful.engine.projects.Resolver` 's registry)."""
        rows = self._catalog.read("SELECT root FROM projects WHERE key = ?", (key,))
        return str(rows[0][0]) if rows else None

    def recorded(self, text: str) -> bool:
        """Whether ``text`` is a recorded project's name or root, or a bound directory or its
        project's name: each was written redacted, so the store's redaction gives it back as it is."""
        return bool(self._catalog.read(RECORDED_PLACE, (text,) * 4))

    def bindings(self) -> Mapping[str, tuple[str, str]]:
        """The directories the user bound to a project: directory → (project key, project name)."""
        rows = self._catalog.read("SELECT root, key, name FROM project_bindings")
        return {str(root): (str(key), str(name)) for root, key, name in rows}

    def bind(self, directory: str, key: str, name: str) -> None:
        """Bind ``directory`` (a real path) to the project ``key`` (``name``: what to show), over
        any binding it had; the project is recorded with this directory as its place if it has
        none yet. The directory and the name are written redacted, as a project's root is."""
        catalog = self._catalog
        row = (catalog.redaction.text(directory), key, catalog.redaction.text(name), time.time())
        catalog.write(
            lambda c: c.execute(
                "INSERT INTO project_bindings (root, key, name, bound_at) VALUES (?, ?, ?, ?) ON CONFLICT(root) "
                "DO UPDATE SET key = excluded.key, name = excluded.name, bound_at = excluded.bound_at",
                row,
            ),
            what="binding a directory to a project",
        )

    def unbind(self, directory: str) -> bool:
        """Remove ``directory`` 's binding; whether there was one."""
        catalog = self._catalog
        root = catalog.redaction.text(directory)
        return bool(
            catalog.write(
                lambda c: c.execute("DELETE FROM project_bindings WHERE root = ?", (root,)).rowcount,
                what="unbinding a directory",
            )
        )

    def find(self, name: str) -> str | None:
        """The scope of the project ``name`` names: its key, else its name (any case), else the one
        key it starts (a key's hash may be left out: ``projA`` for ``proja-3f2a9c1e``); only
        projects holding memories count. None when none matches, or several."""
        wanted = name.strip()
        held = {s for s in self.counts() if s is not None and s.startswith(PROJECT_PREFIX)}
        if PROJECT_PREFIX + wanted in held:
            return PROJECT_PREFIX + wanted
        named = {s for s, (n, _root) in self.projects().items() if s in held and n.lower() == wanted.lower()}
        if named:
            return named.pop() if len(named) == 1 else None
        key = slug(wanted)
        if not key:
            return None
        if PROJECT_PREFIX + key in held:
            return PROJECT_PREFIX + key
        starting = [s for s in held if s[len(PROJECT_PREFIX) :].startswith(key + "-")]
        return starting[0] if len(starting) == 1 else None

    def by_type(self, scopes: Sequence[str | None] | None) -> dict[str, int]:
        """How many memories of each type the ``scopes`` hold (None: every memory)."""
        flt = build_filter(scopes=scopes)
        rows = self._catalog.read(f"SELECT type, count(*) FROM memories WHERE {flt.sql} GROUP BY type", flt.params)
        return {str(t): int(n) for t, n in rows}


__all__ = ["ScopeRepository"]
