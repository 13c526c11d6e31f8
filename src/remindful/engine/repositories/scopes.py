"""What the scopes hold and which projects they name (:mod:`remindful.engine.scopes`): the counts
kept by triggers, the projects recorded as memories were written, and the memories of one scope."""

from __future__ import annotations

from collections.abc import Sequence

from remindful.engine.projects import PROJECT_PREFIX, slug
from remindful.engine.repositories.base import Repository
from remindful.engine.sqlfilter import build_filter


class ScopeRepository(Repository):
    """Named queries over scopes and projects."""

    def counts(self) -> dict[str | None, int]:
        """How many memories each scope holds (None: unscoped); scopes without any are left out."""
        return self._catalog.scope_counts()

    def projects(self) -> dict[str, tuple[str, str]]:
        """Every recorded project: its scope → (name, root directory, "" if none is known)."""
        rows = self._catalog.read("SELECT key, name, root FROM projects")
        return {PROJECT_PREFIX + key: (str(name), str(root)) for key, name, root in rows}

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
