"""Sessions: listing with a summary of what happened, deletion, and delete-on-exit.

A session id is generated on a process's first store (``Store.session_id``) unless the caller
gives one; hook events carry the agent's own id. Resuming a session belongs to a client (it only
changes the ranking of that client's searches: ``MemoryManager.resume_session``). The summary of a
session names its most common actions, screens and tools, read from the metadata keys below (the
content's first words when none is set).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from remindful.engine.sqlfilter import build_filter
from remindful.errors import NotFoundError, ValidationError
from remindful.services.backup import create_backup

if TYPE_CHECKING:
    from remindful.engine.store import Store

log = logging.getLogger("remindful")

TOP = 3
#: Metadata keys naming an action / a screen / a tool, first match wins.
ACTION_KEYS = ("action", "action_type", "command")
SCREEN_KEYS = ("screen_name", "screen", "app", "window_title", "title", "url")
TOOL_KEYS = ("tool_name", "tool")


def _label(keys: tuple[str, ...], fallback: str | None) -> str:
    parts = [f"json_extract(metadata, '$.{k}')" for k in keys]
    if fallback:
        parts.append(fallback)
    return f"coalesce({', '.join(parts)})"


_CONTENT = "substr(content, 1, 40)"


def _summary_sql(where: str) -> str:
    """The most common actions, screens and tools per session, for the sessions ``where`` picks."""
    return f"""
SELECT session_id, 'actions', {_label(ACTION_KEYS, _CONTENT)}, count(*) FROM memories
    WHERE type = 'action' AND {where} GROUP BY 1, 3
UNION ALL
SELECT session_id, 'screens', {_label(SCREEN_KEYS, _CONTENT)}, count(*) FROM memories
    WHERE type = 'screen' AND {where} GROUP BY 1, 3
UNION ALL
SELECT session_id, 'tools', {_label(TOOL_KEYS, None)}, count(*) FROM memories
    WHERE {where} AND {_label(TOOL_KEYS, None)} IS NOT NULL GROUP BY 1, 3
"""


def _iso(epoch: float | None) -> str | None:
    return datetime.fromtimestamp(epoch, UTC).isoformat() if epoch is not None else None


def _spans(store: Store, session_id: str | None) -> list[dict[str, Any]]:
    """Each session's id, memory count, start and end, newest start first (one pass over the
    session index; no row is read)."""
    catalog = store.catalog
    where, args = ("session_id = ?", (session_id,)) if session_id is not None else ("session_id IS NOT NULL", ())
    found: dict[str, dict[str, Any]] = {}
    for sid, count, first, last in catalog.read(
        f"SELECT session_id, count(*), min(created_at), max(created_at) FROM memories WHERE {where} "
        "GROUP BY session_id",
        args,
    ):
        found[sid] = {"id": sid, "memory_count": count, "start": first, "end": last, "by_type": {}}
    sql = "SELECT id, started_at, ended_at FROM sessions" + (" WHERE id = ?" if session_id is not None else "")
    for sid, started, ended in catalog.read(sql, args):
        entry = found.setdefault(sid, {"id": sid, "memory_count": 0, "start": started, "end": ended, "by_type": {}})
        entry["start"] = min(entry["start"], started) if entry["start"] is not None else started
        if ended is not None:
            entry["end"] = ended
    return sorted(found.values(), key=lambda e: (-(e["start"] or 0.0), e["id"]))


def session_count(store: Store) -> int:
    """How many sessions :func:`list_sessions` lists."""
    ((count,),) = store.catalog.read(
        "SELECT count(*) FROM "
        "(SELECT session_id FROM memories WHERE session_id IS NOT NULL UNION SELECT id FROM sessions)"
    )
    return int(count)


def list_sessions(
    store: Store,
    *,
    limit: int | None = None,
    offset: int = 0,
    session_id: str | None = None,
    resumed: str | None = None,
) -> list[dict[str, Any]]:
    """The sessions that have memories or a row in ``sessions``, newest first, ``limit`` of them
    from ``offset`` (all by default; ``session_id`` picks one): ``{id, started_at, ended_at,
    memory_count, by_type, summary: {actions, screens, tools}, text, current, resumed}``.
    ``ended_at`` is the session's recorded end, else its last memory's time; ``current`` marks
    this process's session, ``resumed`` the session given as ``resumed`` (the one the caller
    resumed). Only the listed sessions' memories are read for their summaries."""
    if limit is not None and (type(limit) is not int or limit < 0):
        raise ValidationError("limit", f"expected a non-negative integer, got {limit!r}")
    if type(offset) is not int or offset < 0:
        raise ValidationError("offset", f"expected a non-negative integer, got {offset!r}")
    spans = _spans(store, session_id)
    page = spans[offset : None if limit is None else offset + limit]
    if not page:
        return []
    catalog = store.catalog
    entries = {e["id"]: e for e in page}
    if session_id is None and len(page) == len(spans):
        where, args = "session_id IS NOT NULL", ()
    else:
        where, args = f"session_id IN ({', '.join('?' * len(page))})", tuple(entries)
    for sid, mtype, count in catalog.read(
        f"SELECT session_id, type, count(*) FROM memories WHERE {where} GROUP BY 1, 2", args
    ):
        if sid in entries:
            entries[sid]["by_type"][mtype] = count
    tops: dict[str, dict[str, list[tuple[str, int]]]] = {}
    for sid, kind, label, count in catalog.read(_summary_sql(where), args * 3):
        if label is not None:
            tops.setdefault(sid, {}).setdefault(kind, []).append((" ".join(str(label).split()), count))
    current = store.current_session
    out = []
    for entry in page:
        sid = entry["id"]
        summary = {
            kind: [{"name": name, "count": n} for name, n in sorted(pairs, key=lambda p: (-p[1], p[0]))[:TOP]]
            for kind, pairs in tops.get(sid, {}).items()
        }
        out.append(
            {
                "id": sid,
                "started_at": _iso(entry["start"]),
                "ended_at": _iso(entry["end"]),
                "memory_count": entry["memory_count"],
                "by_type": entry["by_type"],
                "summary": {k: summary.get(k, []) for k in ("actions", "screens", "tools")},
                "text": _text(entry, summary),
                "current": sid == current,
                "resumed": sid == resumed,
            }
        )
    return out


def _text(entry: dict[str, Any], summary: dict[str, list[dict[str, Any]]]) -> str:
    parts = [f"{entry['memory_count']} memories"]
    for kind in ("actions", "screens", "tools"):
        if summary.get(kind):
            parts.append(f"{kind}: " + ", ".join(f"{t['name']} x{t['count']}" for t in summary[kind]))
    return "; ".join(parts)


def delete_session(store: Store, session_id: str, *, confirm: bool = False) -> dict[str, Any]:
    """Back up, then delete every memory of ``session_id`` in every collection and the session
    itself. Returns ``{session_id, deleted,
    backup_path}``. Refused without ``confirm``."""
    if not isinstance(session_id, str) or not session_id.strip():
        raise ValidationError("session_id", "expected a non-empty session id (see list_sessions)")
    store.ready()
    flt = build_filter(session_id=session_id)
    count = store.catalog.count(flt)
    known = store.catalog.read("SELECT 1 FROM sessions WHERE id = ?", (session_id,))
    if count == 0 and not known:
        raise NotFoundError(session_id, kind="session")
    if not confirm:
        raise ValidationError(
            "confirm",
            f"deleting session {session_id!r} removes its {count} memories from every collection; "
            "pass confirm=True (a backup is taken first)",
        )
    backup = create_backup(store, automatic=True, reason="before-delete-session")
    deleted = _delete_all(store, session_id, reason="delete_session")
    return {"success": True, "session_id": session_id, "deleted": deleted, "backup_path": backup["path"]}


def _delete_all(state: Store, session_id: str, *, reason: str) -> int:
    deleted = 0
    while True:
        ids = [
            r[0] for r in state.catalog.read("SELECT id FROM memories WHERE session_id = ? LIMIT 5000", (session_id,))
        ]
        if not ids:
            break
        deleted += state.delete_many(ids, reason=reason)
    state.catalog.write(
        lambda c: c.execute("DELETE FROM sessions WHERE id = ?", (session_id,)), what="deleting a session"
    )
    return deleted


def delete_on_exit(store: Store, session_ids: Iterable[str] | None = None) -> int:
    """For the daemon's shutdown: with ``privacy.delete_on_exit`` on, delete every memory of the
    given sessions (default: this process's own session), without a backup (keeping a copy would
    defeat the setting). Returns the count; 0 when the setting is off or memory is disabled."""
    if not store.settings.privacy.delete_on_exit or store.disabled_reason:
        return 0
    ids = [store.current_session] if session_ids is None else list(session_ids)
    store.ready()
    deleted = 0
    for session_id in dict.fromkeys(i for i in ids if i):
        deleted += _delete_all(store, session_id, reason="delete_on_exit")
    log.info("privacy.delete_on_exit: deleted %d memories of %d session(s)", deleted, len(ids))
    return deleted


__all__ = ["delete_on_exit", "delete_session", "list_sessions"]
