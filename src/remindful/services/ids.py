"""Ids as a person types and reads them: a short unique prefix shown, a unique prefix accepted, as
git does with commit hashes.

:func:`short_forms` gives each id the shortest prefix no other stored id starts with (at least
:data:`MIN_SHOWN` characters, and for a memory id its type and date), computed from the id's two
neighbours in id order. :func:`resolve` takes an id or such a prefix back to the one id it names.
A prefix that was unique when it was shown can become ambiguous as memories are added: it is then
refused with the candidates listed, never taken for one of them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from remindful.errors import NotFoundError, ValidationError

#: The fewest characters of an id shown.
MIN_SHOWN = 8
#: For a memory id (``{type}_{YYYYmmddHHMMSSffffff}_{uuid8}``): its type and date at least.
DATE_DIGITS = 8
#: Candidates named in the error for an ambiguous prefix.
LISTED = 5


class IdIndex(Protocol):
    """The id lookups of :class:`~remindful.engine.repositories.MemoryRepository` and
    :class:`~remindful.engine.repositories.SessionRepository`."""

    def ids_with_prefix(self, prefix: str, limit: int) -> list[str]: ...

    def id_neighbours(self, some_id: str) -> tuple[str | None, str | None]: ...


def resolve(index: IdIndex, given: str, kind: str = "memory") -> str:
    """The stored id ``given`` names: itself when it is one, else the one id it is a prefix of.
    NotFoundError when none starts with it; ValidationError (one line, the candidates listed) when
    several do."""
    field = f"{kind}_id"
    if not isinstance(given, str) or not given.strip():
        raise ValidationError(field, f"expected a {kind} id or the start of one, got {given!r}")
    given = given.strip()
    found = index.ids_with_prefix(given, LISTED + 1)
    if given in found or len(found) == 1:
        return given if given in found else found[0]
    if not found:
        raise NotFoundError(given, kind=kind)
    shown = ", ".join(found[:LISTED]) + (", …" if len(found) > LISTED else "")
    raise ValidationError(field, f"{given!r} is the start of several {kind} ids ({shown}): give more of it")


def short_forms(index: IdIndex, ids: Iterable[str], kind: str = "memory") -> dict[str, str]:
    """``{id: its shortest unique prefix}`` for ``ids`` (see the module docstring)."""
    out = {}
    for some_id in dict.fromkeys(ids):
        before, after = index.id_neighbours(some_id)
        shared = max(_common(some_id, other) for other in (before or "", after or ""))
        floor = MIN_SHOWN
        if kind == "memory" and "_" in some_id:
            floor = max(floor, some_id.index("_") + 1 + DATE_DIGITS)
        out[some_id] = some_id[: max(shared + 1, floor)]
    return out


def _common(a: str, b: str) -> int:
    """How many leading characters ``a`` and ``b`` share."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


__all__ = ["DATE_DIGITS", "LISTED", "MIN_SHOWN", "IdIndex", "resolve", "short_forms"]
