"""What the capture paths read and record besides the memories they store through the Store: the
spool (:mod:`remindful.engine.spool`: claiming rows, finishing them with the sessions they open and
close), the capture filters' counts, the sessions' pending prompts, the lookups that merge and
relate captured tool calls, the Markdown watcher's file hashes, and the tombstones of what was
forgotten.

Tombstones hold the hash of a forgotten memory's normalised text (:func:`forget_key`), never the
text: a capture of the same statement is recognised, while nothing of what the user deleted stays
on disk. The hash is keyed with the store's own secret salt (HMAC-SHA-256 of :func:`forget_key`,
the salt in the catalog's ``meta``, made with the first tombstone): a bare hash of the words would
let whoever holds a copy of the file confirm a guessed sentence with a table made once for every
store, and tell which stores forgot the same thing. Tombstones written before the salt (the bare
hash) are re-keyed when it is made, in the same transaction: the keyed hash is made from the bare
one, so no words are needed; until then they are read as they are.

A repository like those of :mod:`remindful.engine.repositories`, kept beside the Store because the
Store hands it to the capture points that are given a Store alone (:attr:`Store.captures
<remindful.engine.store.Store.captures>`: the MCP middleware, the proxy, the drainer); the
composition root builds one for the services it composes.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from remindful.engine import call_history, spool
from remindful.engine.lexical import fts_or
from remindful.engine.redact import add_counts

if TYPE_CHECKING:  # the catalog (and numpy) load when a query first runs: capture points import this
    import sqlite3

    from remindful.engine.catalog import Catalog, CatalogSource

_NOT_WORDS = re.compile(r"[\W_]+")
#: The newest action memories a lookup of earlier calls reads at most (from the time index): a bound
#: on its cost however many calls a store holds.
RECENT_ACTIONS = 2000


#: The ``meta`` row holding the store's tombstone salt (hex).
SALT_KEY = "tombstone_salt"


def salted_key(salt: bytes, key: str) -> str:
    """The key a tombstone of :func:`forget_key`'s ``key`` is stored under, with the store's ``salt``."""
    return hmac.new(salt, key.encode("ascii"), hashlib.sha256).hexdigest()


def _salt(conn: sqlite3.Connection) -> bytes | None:
    row = conn.execute(f"SELECT value FROM meta WHERE key = '{SALT_KEY}'").fetchone()
    return bytes.fromhex(row[0]) if row else None


def _new_salt(conn: sqlite3.Connection) -> bytes:
    """Create the store's salt and re-key the tombstones written before it, in the caller's write
    transaction (so no process sees one without the other)."""
    salt = os.urandom(32)
    conn.execute("INSERT INTO meta (key, value) VALUES (?, ?)", (SALT_KEY, salt.hex()))
    bare = [str(r[0]) for r in conn.execute("SELECT key FROM tombstones")]
    conn.executemany("UPDATE OR IGNORE tombstones SET key = ? WHERE key = ?", [(salted_key(salt, k), k) for k in bare])
    return salt


def forget_key(text: str) -> str:
    """The tombstone key of a text: SHA-256 of its words, lower-cased, in order (case, spacing and
    punctuation do not make another statement)."""
    words = _NOT_WORDS.sub(" ", text.lower()).split()
    return hashlib.sha256(" ".join(words).encode("utf-8")).hexdigest()


@dataclass(frozen=True, slots=True)
class SessionEvent:
    """A session seen by a spooled event at ``at``: ``changes`` merged into its metadata (a key set
    to None is removed), ``ended`` True ends it, False reopens it, None leaves that as it is."""

    session_id: str
    at: float
    changes: Mapping[str, Any] = field(default_factory=dict)
    ended: bool | None = None


@dataclass(frozen=True, slots=True)
class FileRecord:
    """What the Markdown watcher recorded of one file: its hash and the memories of its chunks."""

    path: str
    sha256: str
    memory_ids: tuple[str, ...]


#: The newest :data:`RECENT_ACTIONS` actions created between two times (the parameters: since,
#: before, the bound), as a subquery.
_RECENT_ACTIONS = (
    "SELECT id, metadata, created_at FROM memories WHERE type = 'action' AND created_at BETWEEN ? AND ? "
    "ORDER BY created_at DESC LIMIT ?"
)


class CaptureRepository:
    """Named queries of the capture paths (see the module docstring), over the catalog ``catalog``
    gives (or is), reached when a query runs."""

    def __init__(self, catalog: Catalog | CatalogSource) -> None:
        self._source: CatalogSource = catalog if callable(catalog) else (lambda: catalog)

    @property
    def _catalog(self) -> Catalog:
        return self._source()

    # -- the spool -----------------------------------------------------------------------------------

    def spool_waiting(self, max_attempts: int, hold_before: float | None = None) -> bool:
        """Whether a spooled row waits to be drained (:func:`remindful.engine.spool.pending`)."""
        return spool.pending(self._catalog.read, max_attempts, hold_before)

    def claim(
        self, *, after: int, limit: int, max_attempts: int, payload_limit: int, hold_before: float | None = None
    ) -> list[tuple[int, str, str, str | None, float, int]]:
        """The next spooled rows (:func:`remindful.engine.spool.claim`)."""
        rows = spool.claim(
            self._catalog.read,
            after=after,
            limit=limit,
            max_attempts=max_attempts,
            payload_limit=payload_limit,
            hold_before=hold_before,
        )
        return [tuple(r) for r in rows]

    def spooled_row(self, seq: int) -> tuple[str, str, str, float] | None:
        """``(idem_key, kind, payload, created_at)`` of spooled row ``seq``, or None."""
        return spool.row(self._catalog.read, seq)

    def import_spooled(self, records: Sequence[tuple[str, str, str, float]]) -> None:
        """Spool ``(key, kind, payload, created_at)`` records (a fallback file's), replays ignored."""
        catalog = self._catalog
        catalog.write(
            lambda conn: spool.append_many(conn, records, redaction=catalog.redaction), what="importing spooled events"
        )

    def finish_spooled(
        self,
        *,
        done: Sequence[tuple[int, str]],
        consumed: Iterable[str] = (),
        failures: Mapping[int, str] = {},
        hopeless: Iterable[int] = (),
        sessions: Sequence[SessionEvent] = (),
        at: float,
    ) -> None:
        """In one transaction: the rows ``done`` (``(seq, key)``) are stored, and the rows with the
        keys ``consumed`` were merged into them (both deleted, their keys remembered); each failed
        row counts an attempt with its error, or, ``hopeless``, is deleted for good (its key
        remembered, so that a replay is ignored too); the sessions' events are recorded."""
        hopeless = set(hopeless)
        catalog = self._catalog

        def run(conn: sqlite3.Connection) -> None:
            for seq, key in done:
                spool.finish(conn, seq, key, at)
            for key in consumed:
                spool.finish_key(conn, key, at)
            for event in sessions:
                changes = dict(event.changes)
                meta = catalog.session_metadata(event.session_id, conn)
                meta.update({k: v for k, v in changes.items() if v is not None})
                for key in [k for k, v in changes.items() if v is None]:
                    meta.pop(key, None)
                catalog.upsert_session(conn, event.session_id, event.at, metadata=meta, ended=event.ended)
            for seq, error in failures.items():
                if seq in hopeless:
                    spool.give_up(conn, seq, at)
                else:
                    spool.retry_later(conn, seq, error)
            if any(seq % 500 == 0 for seq, _ in done):  # now and then, forget old keys
                spool.forget_keys(conn, at)

        catalog.write(run, what="finishing spooled events")

    # -- the capture filters' counts --------------------------------------------------------------------

    def count(self, counts: Mapping[str, int], *, excluded: tuple[str | None, str] | None = None) -> None:
        """Add ``counts`` (redactions and skips by name) and, for ``excluded`` ``(session_id,
        reason)``, audit a capture the privacy settings excluded; one transaction."""
        catalog = self._catalog

        def run(conn: sqlite3.Connection) -> None:
            add_counts(conn, dict(counts))
            if excluded is not None:
                catalog.audit(conn, "capture_excluded", None, {"session_id": excluded[0], "reason": excluded[1]})

        catalog.write(run, what="recording capture filter counts")

    # -- sessions -------------------------------------------------------------------------------------

    def session_metadata(self, session_id: str) -> dict[str, Any]:
        """The metadata of session ``session_id`` ({} for a session not recorded)."""
        return self._catalog.session_metadata(session_id)

    def update_session(self, event: SessionEvent) -> None:
        """Record one :class:`SessionEvent` (its own transaction)."""
        self.finish_spooled(done=(), sessions=(event,), at=event.at)

    # -- the memories a capture relates to ----------------------------------------------------------

    def stored_with(self, content_hash: str, session_id: str) -> list[tuple[str, dict[str, Any]]]:
        """(id, metadata) of each memory of the session whose content has ``content_hash``."""
        return self._catalog.stored_with(content_hash, session_id)

    def has_chunked_response(self, session_id: str, full_content_hash: str) -> bool:
        """Whether the session holds a response stored in chunks whose whole text has that hash."""
        return self._catalog.has_chunked_response(session_id, full_content_hash)

    def call_memory(self, session_id: str, tool_use_id: str) -> str | None:
        """The id of the memory of the tool call ``tool_use_id`` of the session, or None."""
        rows = self._catalog.read(
            "SELECT id FROM memories WHERE session_id = ? AND json_extract(metadata, '$.tool_use_id') = ? "
            "ORDER BY created_at LIMIT 1",
            (self._catalog.stored_session_id(session_id), tool_use_id),
        )
        return str(rows[0][0]) if rows else None

    def file_activity(
        self, file: str, *, since: float, before: float, kinds: Sequence[str]
    ) -> list[tuple[str, dict[str, Any]]]:
        """``(id, metadata)`` of the tool-call memories about ``file`` (metadata ``file``) of the
        ``kinds`` among the newest :data:`RECENT_ACTIONS` actions created from ``since`` to
        ``before`` that nothing supersedes yet, oldest first."""
        marks = ", ".join("?" * len(kinds))
        rows = self._catalog.read(
            f"SELECT id, metadata FROM ({_RECENT_ACTIONS}) WHERE json_extract(metadata, '$.file') = ? "
            f"AND json_extract(metadata, '$.kind') IN ({marks}) "
            "AND json_extract(metadata, '$.superseded_by') IS NULL ORDER BY created_at",
            (since, before, RECENT_ACTIONS, file, *kinds),
        )
        return [(str(mid), json.loads(meta)) for mid, meta in rows]

    # -- earlier outcomes of a call (the PreToolUse warning: services/ingest/forewarn.py) ----------

    def project_root(self, key: str) -> str | None:
        """The directory recorded for the project ``key`` (see :mod:`remindful.engine.call_history`)."""
        return call_history.project_root(self._catalog.read, key)

    def spooled_outcomes(self) -> list[tuple[str, float]]:
        """The newest outcomes of calls still in the spool, newest first."""
        return call_history.spooled_outcomes(self._catalog.read)

    def stored_calls(self, scope: str, tool: str, arguments: dict[str, Any]) -> list[tuple[str, str, float]]:
        """The project's stored calls of ``tool`` with these key ``arguments``, newest first."""
        return call_history.stored_calls(self._catalog.read, scope, tool, arguments)

    def unresolved_failures(self, tool: str, *, since: float, before: float) -> list[tuple[str, dict[str, Any]]]:
        """``(id, metadata)`` of the failed calls of ``tool`` (metadata ``tool_name`` or ``tool``)
        among the newest :data:`RECENT_ACTIONS` actions created from ``since`` to ``before`` that
        no later success resolved yet, oldest first."""
        rows = self._catalog.read(
            f"SELECT id, metadata FROM ({_RECENT_ACTIONS}) "
            "WHERE coalesce(json_extract(metadata, '$.tool_name'), json_extract(metadata, '$.tool')) = ? "
            "AND json_extract(metadata, '$.success') = 0 "
            "AND json_extract(metadata, '$.resolved_by') IS NULL ORDER BY created_at",
            (since, before, RECENT_ACTIONS, tool),
        )
        return [(str(mid), json.loads(meta)) for mid, meta in rows]

    def mentioning(
        self, word: str, *, project: str | None, since: float, before: float, limit: int
    ) -> list[tuple[str, str, str, str, dict[str, Any]]]:
        """``(id, type, source, content, metadata)`` of up to ``limit`` + 1 memories whose text has the
        word ``word`` (the lexical index's tokens), created from ``since`` to ``before``, in
        ``project`` (metadata ``project_id``; any when None), that nothing supersedes yet, newest
        first (one more than ``limit`` tells the caller the word is too common to mean anything)."""
        rows = self._catalog.read(
            "SELECT m.id, m.type, m.source, m.content, m.metadata "
            "FROM memories_fts f JOIN memories m ON m.rowid = f.rowid "
            "WHERE memories_fts MATCH ? AND m.created_at BETWEEN ? AND ? "
            "AND (? IS NULL OR json_extract(m.metadata, '$.project_id') = ?) "
            "AND json_extract(m.metadata, '$.superseded_by') IS NULL ORDER BY m.created_at DESC LIMIT ?",
            (fts_or([word]), since, before, project, project, limit + 1),
        )
        return [(str(i), str(t), str(src), str(text), json.loads(meta)) for i, t, src, text, meta in rows]

    # -- tombstones -------------------------------------------------------------------------------------

    def bury(self, graves: Mapping[str, tuple[str | None, str]], at: float) -> None:
        """Record a tombstone for each ``key → (memory_id, reason)`` (keys as :func:`forget_key`
        makes them, stored keyed with the store's salt, which the first tombstone creates; a key
        already buried keeps its first)."""
        if not graves:
            return

        def run(conn: sqlite3.Connection) -> None:
            salt = _salt(conn) or _new_salt(conn)
            rows = [(salted_key(salt, key), at, reason, memory_id) for key, (memory_id, reason) in graves.items()]
            conn.executemany(
                "INSERT OR IGNORE INTO tombstones (key, buried_at, reason, memory_id) VALUES (?, ?, ?, ?)", rows
            )

        self._catalog.write(run, what="recording what was forgotten")

    def buried(self, keys: Iterable[str]) -> set[str]:
        """Those of ``keys`` (:func:`forget_key`'s) that have a tombstone."""
        wanted = self._stored_keys(keys)
        if not wanted:
            return set()
        stored = list(wanted.values())
        found = {str(r[0]) for r in self._catalog.read_in("SELECT key FROM tombstones WHERE key IN ({marks})", stored)}
        return {key for key, kept_as in wanted.items() if kept_as in found}

    def unbury(self, keys: Iterable[str]) -> int:
        """Remove the tombstones of ``keys`` (the user stored that statement again); how many."""
        wanted = list(self._stored_keys(keys).values())
        if not wanted:
            return 0
        marks = ", ".join("?" * len(wanted))
        return int(
            self._catalog.write(
                lambda conn: conn.execute(f"DELETE FROM tombstones WHERE key IN ({marks})", wanted).rowcount,
                what="lifting tombstones",
            )
        )

    def _stored_keys(self, keys: Iterable[str]) -> dict[str, str]:
        """Each of ``keys`` → the key its tombstone is stored under (as it is while no salt exists)."""
        rows = self._catalog.read(f"SELECT value FROM meta WHERE key = '{SALT_KEY}'")
        salt = bytes.fromhex(rows[0][0]) if rows else None
        return {key: key if salt is None else salted_key(salt, key) for key in dict.fromkeys(keys)}

    def tombstones(self) -> int:
        """How many tombstones there are."""
        return int(self._catalog.read("SELECT count(*) FROM tombstones")[0][0])

    # -- the Markdown watcher's files -------------------------------------------------------------------

    def file_record(self, path: str) -> FileRecord | None:
        """What was recorded of the file at ``path``, or None."""
        rows = self._catalog.read("SELECT sha256, memory_ids FROM file_hashes WHERE path = ?", (path,))
        if not rows:
            return None
        return FileRecord(path, str(rows[0][0]), tuple(json.loads(rows[0][1] or "[]")))

    def record_file(self, record: FileRecord, at: float) -> None:
        """Record (or replace) what was indexed of one file."""
        self._catalog.write(
            lambda conn: conn.execute(
                "INSERT INTO file_hashes (path, sha256, memory_ids, updated_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT(path) DO UPDATE SET sha256 = excluded.sha256, memory_ids = excluded.memory_ids, "
                "updated_at = excluded.updated_at",
                (record.path, record.sha256, json.dumps(list(record.memory_ids)), at),
            ),
            what="recording an indexed file",
        )

    def forget_file(self, path: str) -> None:
        """Drop the record of the file at ``path``."""
        self._catalog.write(
            lambda conn: conn.execute("DELETE FROM file_hashes WHERE path = ?", (path,)), what="forgetting a file"
        )

    def file_paths(self) -> list[str]:
        """Every file recorded."""
        return [str(r[0]) for r in self._catalog.read("SELECT path FROM file_hashes")]

    def files_indexed(self) -> int:
        """How many files are recorded."""
        return int(self._catalog.read("SELECT count(*) FROM file_hashes")[0][0])

    def chunk_ids_of(self, path: str) -> list[str]:
        """Ids of the Markdown chunks taken from the file at ``path`` (metadata ``file_path``)."""
        rows = self._catalog.read(
            "SELECT id FROM memories WHERE type = 'document' AND source = 'md_file' "
            "AND json_extract(metadata, '$.file_path') = ?",
            (path,),
        )
        return [str(r[0]) for r in rows]


__all__ = ["SALT_KEY", "CaptureRepository", "FileRecord", "SessionEvent", "forget_key", "salted_key"]
