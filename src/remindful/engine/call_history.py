"""Earlier outcomes of a tool call, for the warning a ``PreToolUse`` hook gives before the call is
made again (:mod:`remindful.services.ingest.forewarn`). Standard library only: hook processes run it,
and it loads no model: a call is known by its tool and its key arguments, as the hooks store them
(metadata ``tool_name`` and ``arguments``, :mod:`remindful.services.ingest.distill`).

Both reads are bounded, whatever the store's size: the newest :data:`RECENT_MEMORIES` memories of
the project (the ``(scope, created_at)`` index, newest first), and the newest :data:`RECENT_SPOOLED`
outcomes still waiting in the spool (a call that failed moments ago, not yet drained).
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs hook processes milliseconds
if TYPE_CHECKING:
    from typing import Any

    from remindful.engine.spool import Read

#: The newest memories of a project among which earlier calls are looked for.
RECENT_MEMORIES = 5000
#: The newest spooled outcomes looked at.
RECENT_SPOOLED = 500
#: The spool kinds that report a call's outcome.
OUTCOME_KINDS = ("PostToolUse", "PostToolUseFailure")


def stored_calls(
    read: Read, scope: str, tool: str, arguments: dict[str, Any], limit: int = RECENT_MEMORIES
) -> list[tuple[str, str, float]]:
    """``(content, metadata JSON, created_at)`` of the action memories of calls of ``tool`` with
    these key ``arguments`` (each value equal, as stored) in ``scope``, among its newest ``limit``
    memories, newest first ([] when the catalog has no memories table yet)."""
    keys = sorted(arguments)
    same = "".join(" AND json_extract(metadata, ?) = ?" for _ in keys)
    params: list[Any] = [scope, limit, tool]
    for key in keys:
        params += ['$.arguments."' + key.replace('"', "") + '"', arguments[key]]
    try:
        rows = read(
            "SELECT content, metadata, created_at FROM ("
            "SELECT content, metadata, created_at, type FROM memories WHERE scope = ? "
            "ORDER BY created_at DESC LIMIT ?) "
            f"WHERE type = 'action' AND json_extract(metadata, '$.tool_name') = ?{same} ORDER BY created_at DESC",
            params,
        )
    except Exception as exc:  # sqlite3.OperationalError, not imported here
        if "no such table" in str(exc):
            return []
        raise
    return [(str(r[0]), str(r[1]), float(r[2])) for r in rows]


def project_root(read: Read, key: str) -> str | None:
    """The directory the catalog recorded for the project ``key`` ("" when known by name only), or
    None when none is recorded (or the catalog has no projects table yet)."""
    try:
        rows = read("SELECT root FROM projects WHERE key = ?", (key,))
    except Exception as exc:
        if "no such table" in str(exc):
            return None
        raise
    return str(rows[0][0]) if rows else None


def spooled_outcomes(read: Read, limit: int = RECENT_SPOOLED) -> list[tuple[str, float]]:
    """``(payload JSON, created_at)`` of the newest ``limit`` spooled reports of a call's outcome,
    newest first ([] when there is no spool yet)."""
    marks = ", ".join("?" * len(OUTCOME_KINDS))
    try:
        rows: list[Any] = read(
            f"SELECT payload, created_at FROM spool WHERE kind IN ({marks}) ORDER BY seq DESC LIMIT ?",
            (*OUTCOME_KINDS, limit),
        )
    except Exception as exc:
        if "no such table" in str(exc):
            return []
        raise
    return [(str(r[0]), float(r[1])) for r in rows]


class LocalHistory:
    """The call history of a store's own SQLite catalog (its spool and its memories), read by
    ``read``: what :func:`remindful.services.ingest.forewarn.failure_warning` asks of a history
    (a store on a shared catalog answers the same questions from the server:
    ``PostgresCaptureRepository``)."""

    def __init__(self, read: Read) -> None:
        self._read = read

    def project_root(self, key: str) -> str | None:
        return project_root(self._read, key)

    def spooled_outcomes(self) -> list[tuple[str, float]]:
        return spooled_outcomes(self._read)

    def stored_calls(self, scope: str, tool: str, arguments: dict[str, Any]) -> list[tuple[str, str, float]]:
        return stored_calls(self._read, scope, tool, arguments)


__all__ = [
    "OUTCOME_KINDS",
    "RECENT_MEMORIES",
    "RECENT_SPOOLED",
    "LocalHistory",
    "project_root",
    "spooled_outcomes",
    "stored_calls",
]
