"""People on a team store, and what each may see and change, enforced by the database itself.

The store's admin (whoever owns the database's tables) issues each person a token
(:meth:`TeamRepository.add`: shown once, only its SHA-256 is kept) and may revoke it. A person's
processes open the catalog with their token (``catalog.token``, :class:`PostgresCatalog`'s
``token``): each connection hands it to the server, and PostgreSQL's row-level security
(:mod:`remindful.engine.postgres.schema`, version 6) decides every statement's rows by the person
it names, looked up again in each statement: a revoked (or unknown) token reads and writes nothing
from the moment it is revoked, and no client-side check stands between a person and the rows.

What a person may do:

- see the memories of every project scope and of no scope, and the user-scope memories they wrote
  (the user scope is private to its owner);
- write memories, which record them as author (the database refuses another author);
- delete or correct the memories they wrote, and any memory of a project scope (the project's
  memory is the team's); never another person's user-scope memory (they cannot see it either),
  nor correct another person's memory outside a project.

Before the team has people the store is its single user's (no token needed); the first person
added takes over the memories written until then (the single user's), so that their private ones
stay private. Once it has people, a connection without a token is refused.

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
from remindful.errors import AccessDeniedError, ValidationError
from remindful.model import content_hash

#: A name: letters, digits, '.', '_' and '-', up to 64 characters.
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


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
            # The first person takes over what the store's single user wrote (before anyone is on
            # the team row-level security lets the admin's connection change every row).
            conn.execute("LOCK TABLE people IN SHARE ROW EXCLUSIVE MODE")
            if conn.execute("SELECT NOT EXISTS (SELECT 1 FROM people)").fetchone()[0]:
                conn.execute("UPDATE memories SET author = %s WHERE author IS NULL", (name,))
                # The single user's term counts counted private memories too; the team's count
                # only what every person sees (schema 10's remindful_term_counts).
                conn.execute("SELECT remindful_forget_term_counts()")
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
    """One person's reads and writes through a catalog opened with their token: row-level security
    decides every statement's rows (this class adds no check of its own)."""

    def __init__(self, catalog: PostgresCatalog) -> None:
        self._catalog = catalog

    def whoami(self) -> str:
        """The token's person (AccessDeniedError when it is unknown or revoked, or the catalog was
        opened without one)."""
        who = self._catalog.read("SELECT remindful_person()")[0][0]
        if who is None:
            raise AccessDeniedError("this catalog was opened without a token (the store has no team yet)")
        return str(who)

    def store(self, rows: Sequence[MemoryRow]) -> None:
        """Write ``rows``, with this person as their author (set by the database)."""
        catalog = self._catalog
        catalog.write(lambda conn: catalog.insert_memories(conn, rows), what="storing memories")

    def get(self, ids: Sequence[str]) -> dict[str, tuple[MemoryRow, str | None, int]]:
        """The rows of ``ids`` this person may see: ``id → (row, author, version)``."""
        rows = self._catalog.read(
            f"SELECT {MEMORY_COLUMNS}, author, version FROM memories WHERE id = ANY(%s)", (list(ids),)
        )
        return {r[0]: (MemoryRow.from_sql(r), r[-2], int(r[-1])) for r in rows}

    def search(self, terms: Sequence[str], limit: int = 10) -> list[str]:
        """Ids of the memories this person may see whose text matches any of ``terms``, best first."""
        if not terms:
            return []
        query = tsquery(len(terms))
        rows = self._catalog.read(
            f"SELECT id FROM memories WHERE content_tsv @@ {query} "
            f"ORDER BY ts_rank(content_tsv, {query}) DESC, rowid DESC LIMIT %s",
            (*terms, *terms, limit),
        )
        return [str(r[0]) for r in rows]

    def delete(self, ids: Sequence[str]) -> list[str]:
        """Delete ``ids`` (those this person can see); the ids deleted. One this person may not
        delete (another's memory outside a project) is AccessDeniedError, and nothing is deleted."""
        catalog = self._catalog
        return catalog.write(lambda conn: [mid for mid, _ in catalog.delete_in(conn, ids)], what="deleting memories")

    def correct(self, memory_id: str, content: str, version: int) -> int:
        """Replace the text of ``memory_id`` made on ``version``; the new version. A stale
        ``version`` raises :class:`StaleVersionError`, a memory this person may not change
        AccessDeniedError, one they cannot see NotFound-like AccessDeniedError; nothing is written
        then."""
        catalog = self._catalog
        text = catalog.redaction.text(content)

        def run(conn: Any) -> int:
            done = conn.execute(
                "UPDATE memories SET content = %s, content_hash = %s, updated_at = %s, version = version + 1, "
                "embedding = NULL, indexed = 0 WHERE id = %s AND version = %s RETURNING version",
                (text, content_hash(text), time.time(), memory_id, version),
            ).fetchone()
            if done is not None:
                catalog.audit(conn, "correct", memory_id, {"version": int(done[0])})
                windows.after_update(conn, memory_id)
                return int(done[0])
            held = conn.execute("SELECT version FROM memories WHERE id = %s", (memory_id,)).fetchone()
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
