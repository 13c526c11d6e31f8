"""People on a team store, and what each may see and change, enforced in the SQL itself.

The store's admin (whoever holds the database's own credentials) issues each person a token
(:meth:`TeamRepository.add`: shown once, only its SHA-256 is kept) and may revoke it. Every query
a person makes through :class:`PersonalView` carries the token's hash and joins ``people`` in the
same statement, so a revoked (or unknown) token reads and writes nothing from the moment it is
revoked: no client-side check to bypass, no cached identity.

What a person may do:

- see the memories of every project scope and of no scope, and the user-scope memories they wrote
  (the user scope is private to its owner);
- write memories, which record them as author;
- delete or correct the memories they wrote, and any memory of a project scope (the project's
  memory is the team's); never another person's user-scope memory (they cannot see it either).

A correction carries the version it was made on: a correction of a stale copy (someone changed the
memory since) is refused with one line naming both versions, never applied over the newer text.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from remindful.engine.catalog import MemoryRow
from remindful.engine.postgres import windows
from remindful.engine.postgres.catalog import PostgresCatalog
from remindful.engine.postgres.lexical import tsquery
from remindful.engine.postgres.schema import MEMORY_COLUMNS
from remindful.errors import ValidationError
from remindful.model import content_hash

#: A name: letters, digits, '.', '_' and '-', up to 64 characters.
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")

#: The rows a person may see (``p`` is the person, joined on the token's hash).
_VISIBLE = "(m.scope IS DISTINCT FROM 'user' OR m.author = p.name)"
#: The rows a person may delete or correct.
_CHANGEABLE = "(m.author = p.name OR m.scope LIKE 'project:%%')"
#: The person of a token, in the same statement: nothing when it is unknown or revoked.
_PERSON = "people p ON p.token_hash = %s AND p.revoked_at IS NULL"


class AccessDeniedError(ValidationError):
    """The token is unknown or revoked, or its person may not do this."""

    def __init__(self, message: str) -> None:
        super().__init__("token", message)


class StaleVersionError(ValidationError):
    """A correction was made on an older version of the memory than the stored one."""

    def __init__(self, memory_id: str, stored: int, given: int) -> None:
        self.stored, self.given = stored, given
        super().__init__(
            "version",
            f"memory {memory_id} is at version {stored}, the correction was made on version {given}: "
            "read it again and correct that",
        )


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def check_name(name: str) -> str:
    if not name or len(name) > 64 or not set(name) <= _NAME_CHARS:
        raise ValidationError("name", "expected 1-64 letters, digits, '.', '_' or '-'")
    return name


@dataclass(frozen=True, slots=True)
class Person:
    name: str
    added_at: float
    revoked_at: float | None


class TeamRepository:
    """The admin's view: people, their tokens, revocation."""

    def __init__(self, catalog: PostgresCatalog) -> None:
        self._catalog = catalog

    def add(self, name: str) -> str:
        """Add ``name`` with a new token, returned once (a revoked name gets a new one); refused
        for a name that holds a valid token."""
        name = check_name(name)
        token = "rmf_" + secrets.token_urlsafe(32)

        def run(conn: Any) -> int:
            cur = conn.execute(
                "INSERT INTO people AS p (name, token_hash, added_at) VALUES (%s, %s, %s) "
                "ON CONFLICT (name) DO UPDATE SET token_hash = excluded.token_hash, added_at = excluded.added_at, "
                "revoked_at = NULL WHERE p.revoked_at IS NOT NULL",
                (name, token_hash(token), time.time()),
            )
            return int(cur.rowcount)

        if not self._catalog.write(run, what="adding a person"):
            raise ValidationError("name", f"{name} is on the team already (revoke the token first for a new one)")
        return token

    def revoke(self, name: str) -> bool:
        """Revoke ``name``'s token from now on; whether there was a valid one."""
        return bool(
            self._catalog.write(
                lambda conn: (
                    conn.execute(
                        "UPDATE people SET revoked_at = %s WHERE name = %s AND revoked_at IS NULL", (time.time(), name)
                    ).rowcount
                ),
                what="revoking a token",
            )
        )

    def people(self) -> list[Person]:
        rows = self._catalog.read("SELECT name, added_at, revoked_at FROM people ORDER BY name")
        return [Person(str(n), float(a), None if r is None else float(r)) for n, a, r in rows]


class PersonalView:
    """One person's reads and writes, by token: every statement checks the token itself."""

    def __init__(self, catalog: PostgresCatalog, token: str) -> None:
        self._catalog = catalog
        self._hash = token_hash(token)

    def _refused(self) -> AccessDeniedError:
        return AccessDeniedError("unknown or revoked token: ask the store's admin for one (`remindful team add`)")

    def whoami(self) -> str:
        rows = self._catalog.read("SELECT name FROM people WHERE token_hash = %s AND revoked_at IS NULL", (self._hash,))
        if not rows:
            raise self._refused()
        return str(rows[0][0])

    def store(self, rows: Sequence[MemoryRow]) -> None:
        """Write ``rows`` with this person as their author (all of them, or none when the token is
        not valid: checked in the writing transaction)."""
        catalog = self._catalog

        def run(conn: Any) -> None:
            found = conn.execute(
                "SELECT name FROM people WHERE token_hash = %s AND revoked_at IS NULL FOR SHARE", (self._hash,)
            ).fetchone()
            if found is None:
                raise self._refused()
            catalog.insert_memories(conn, rows, author=str(found[0]))

        catalog.write(run, what="storing memories")

    def get(self, ids: Sequence[str]) -> dict[str, tuple[MemoryRow, str | None, int]]:
        """The rows of ``ids`` this person may see: ``id → (row, author, version)``."""
        columns = ", ".join(f"m.{c.strip()}" for c in MEMORY_COLUMNS.split(","))
        rows = self._catalog.read(
            f"SELECT {columns}, m.author, m.version FROM memories m JOIN {_PERSON} WHERE m.id = ANY(%s) AND {_VISIBLE}",
            (self._hash, list(ids)),
        )
        return {r[0]: (MemoryRow.from_sql(r), r[-2], int(r[-1])) for r in rows}

    def search(self, terms: Sequence[str], limit: int = 10) -> list[str]:
        """Ids of the memories this person may see whose text matches any of ``terms``, best first."""
        if not terms:
            return []
        query = tsquery(len(terms))
        rows = self._catalog.read(
            f"SELECT m.id FROM memories m JOIN {_PERSON} "
            f"WHERE m.content_tsv @@ {query} AND {_VISIBLE} "
            f"ORDER BY ts_rank(m.content_tsv, {query}) DESC, m.rowid DESC LIMIT %s",
            (self._hash, *terms, *terms, limit),
        )
        return [str(r[0]) for r in rows]

    def delete(self, ids: Sequence[str]) -> list[str]:
        """Delete those of ``ids`` this person may delete (see the module docstring); the ids deleted."""
        catalog = self._catalog

        def run(conn: Any) -> list[str]:
            allowed = [
                str(r[0])
                for r in conn.execute(
                    f"SELECT m.id FROM memories m JOIN {_PERSON} WHERE m.id = ANY(%s) AND {_CHANGEABLE}",
                    (self._hash, list(ids)),
                )
            ]
            return [mid for mid, _ in catalog.delete_in(conn, allowed)]

        return catalog.write(run, what="deleting memories")

    def correct(self, memory_id: str, content: str, version: int) -> int:
        """Replace the text of ``memory_id`` made on ``version``; the new version. A stale
        ``version`` raises :class:`StaleVersionError`, a memory this person may not change (or
        cannot see) :class:`AccessDeniedError`; nothing is written then."""
        catalog = self._catalog
        text = catalog.redaction.text(content)

        def run(conn: Any) -> int:
            done = conn.execute(
                f"UPDATE memories m SET content = %s, content_hash = %s, updated_at = %s, version = m.version + 1, "
                "embedding = NULL, indexed = 0 FROM people p "
                "WHERE p.token_hash = %s AND p.revoked_at IS NULL "
                f"AND m.id = %s AND m.version = %s AND {_CHANGEABLE} RETURNING m.version",
                (text, content_hash(text), time.time(), self._hash, memory_id, version),
            ).fetchone()
            if done is not None:
                catalog.audit(conn, "correct", memory_id, {"version": int(done[0])})
                windows.after_update(conn, memory_id)
                return int(done[0])
            held = conn.execute(
                f"SELECT m.version FROM memories m JOIN {_PERSON} WHERE m.id = %s AND {_CHANGEABLE}",
                (self._hash, memory_id),
            ).fetchone()
            if held is None:
                raise AccessDeniedError(f"memory {memory_id} is not one this token may correct (or it is gone)")
            raise StaleVersionError(memory_id, int(held[0]), version)

        return catalog.write(run, what="correcting a memory")


__all__ = [
    "AccessDeniedError",
    "Person",
    "PersonalView",
    "StaleVersionError",
    "TeamRepository",
    "check_name",
    "token_hash",
]
