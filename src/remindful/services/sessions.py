"""Sessions: listing with a summary of what happened, deletion, and delete-on-exit.

A session id is generated on a process's first store (``Store.session_id``) unless the caller
gives one; hook events carry the agent's own id. Resuming a session belongs to a client (it only
changes the ranking of that client's searches: ``MemoryManager.resume_session``). The summary of a
session names its most common actions, screens and tools, read from the metadata keys below (the
content's first words when none is set).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

from remindful.errors import NotFoundError, ValidationError
from remindful.model import Session, SessionDeleted
from remindful.services.backup import Archivable, create_backup

if TYPE_CHECKING:
    from remindful.engine.repositories import SessionRepository
    from remindful.engine.repositories.sessions import SessionSpan

log = logging.getLogger("remindful")

TOP = 3


class SessionMarks(Protocol):
    """Which session a listing marks as this process's."""

    @property
    def current_session(self) -> str | None: ...


class SessionOwner(SessionMarks, Archivable, Protocol):
    """What deleting a session does to the store: back it up, delete its memories."""

    @property
    def disabled_reason(self) -> str | None: ...

    def delete_many(self, ids: Sequence[str], *, reason: str | Mapping[str, str] = "delete") -> int: ...


def _time(epoch: float | None) -> datetime | None:
    return datetime.fromtimestamp(epoch, UTC) if epoch is not None else None


def session_count(sessions: SessionRepository) -> int:
    """How many sessions :func:`list_sessions` lists."""
    return sessions.count()


def list_sessions(
    sessions: SessionRepository,
    marks: SessionMarks,
    *,
    limit: int | None = None,
    offset: int = 0,
    session_id: str | None = None,
    resumed: str | None = None,
) -> list[Session]:
    """The sessions that have memories or a row in ``sessions``, newest first, ``limit`` of them
    from ``offset`` (all by default; ``session_id`` picks one); see :class:`~remindful.model.Session`.
    ``current`` marks this process's session, ``resumed`` the session given as ``resumed`` (the one
    the caller resumed). Only the listed sessions' memories are read for their summaries."""
    if limit is not None and (type(limit) is not int or limit < 0):
        raise ValidationError("limit", f"expected a non-negative integer, got {limit!r}")
    if type(offset) is not int or offset < 0:
        raise ValidationError("offset", f"expected a non-negative integer, got {offset!r}")
    spans = sessions.spans(session_id)
    page = spans[offset : None if limit is None else offset + limit]
    if not page:
        return []
    entries = {span.id: span for span in page}
    # Every session listed: the whole index is read once rather than named session by session.
    picked = None if session_id is None and len(page) == len(spans) else list(entries)
    for sid, by_type in sessions.type_counts(picked).items():
        if sid in entries:
            entries[sid].by_type.update(by_type)
    tops: dict[str, dict[str, list[tuple[str, int]]]] = {}
    for sid, kind, label, count in sessions.activity(picked):
        if label is not None:
            tops.setdefault(sid, {}).setdefault(kind, []).append((" ".join(str(label).split()), count))
    current = marks.current_session
    resumed = None if resumed is None else sessions.stored_id(resumed)  # as the listed ids are
    out = []
    for entry in page:
        sid = entry.id
        summary = {
            kind: [{"name": name, "count": n} for name, n in sorted(pairs, key=lambda p: (-p[1], p[0]))[:TOP]]
            for kind, pairs in tops.get(sid, {}).items()
        }
        out.append(
            Session(
                id=sid,
                started_at=_time(entry.start),
                ended_at=_time(entry.end),
                memory_count=entry.memory_count,
                by_type=entry.by_type,
                summary={k: summary.get(k, []) for k in ("actions", "screens", "tools")},
                text=_text(entry, summary),
                current=sid == current,
                resumed=sid == resumed,
            )
        )
    return out


def _text(entry: SessionSpan, summary: dict[str, list[dict[str, Any]]]) -> str:
    parts = [f"{entry.memory_count} memor{'y' if entry.memory_count == 1 else 'ies'}"]
    for kind in ("actions", "screens", "tools"):
        if summary.get(kind):
            parts.append(f"{kind}: " + ", ".join(f"{t['name']} x{t['count']}" for t in summary[kind]))
    return "; ".join(parts)


def delete_session(
    store: SessionOwner, sessions: SessionRepository, session_id: str, *, confirm: bool = False
) -> SessionDeleted:
    """Back up, then delete every memory of ``session_id`` in every collection and the session
    itself. Refused without ``confirm``."""
    if not isinstance(session_id, str) or not session_id.strip():
        raise ValidationError("session_id", "expected a non-empty session id (see list_sessions)")
    count = sessions.memory_count(session_id)
    if count == 0 and not sessions.exists(session_id):
        raise NotFoundError(session_id, kind="session")
    if not confirm:
        raise ValidationError(
            "confirm",
            f"deleting session {session_id!r} removes its {count} memories from every collection; "
            "pass confirm=True (a backup is taken first)",
        )
    backup = create_backup(store, automatic=True, reason="before-delete-session")
    deleted = _delete_all(store, sessions, session_id, reason="delete_session")
    return SessionDeleted(session_id, deleted, backup.path)


def _delete_all(store: SessionOwner, sessions: SessionRepository, session_id: str, *, reason: str) -> int:
    deleted = 0
    while True:
        ids = sessions.memory_ids(session_id, 5000)
        if not ids:
            break
        deleted += store.delete_many(ids, reason=reason)
    sessions.delete(session_id)
    return deleted


def delete_on_exit(store: SessionOwner, sessions: SessionRepository, session_ids: Iterable[str] | None = None) -> int:
    """For the daemon's shutdown: with ``privacy.delete_on_exit`` on, delete every memory of the
    given sessions (default: this process's own session), without a backup (keeping a copy would
    defeat the setting). Returns the count; 0 when the setting is off or memory is disabled."""
    if not store.settings.privacy.delete_on_exit or store.disabled_reason:
        return 0
    ids = [store.current_session] if session_ids is None else list(session_ids)
    store.ready()
    deleted = 0
    for session_id in dict.fromkeys(i for i in ids if i):
        deleted += _delete_all(store, sessions, session_id, reason="delete_on_exit")
    log.info("privacy.delete_on_exit: deleted %d memories of %d session(s)", deleted, len(ids))
    return deleted


__all__ = ["delete_on_exit", "delete_session", "list_sessions"]
