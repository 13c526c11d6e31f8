"""SQLite's dialect of the engine's shared SQL pieces, as PostgreSQL reads them: the search filters
of :mod:`remindful.engine.sqlfilter`, written once for both backends."""

from __future__ import annotations

from typing import Any

from remindful.engine.sqlfilter import SqlFilter
from remindful.errors import StorageError


def pg_filter(flt: SqlFilter) -> tuple[str, tuple[Any, ...]]:
    """``flt`` (SQLite's dialect, :mod:`remindful.engine.sqlfilter`) as PostgreSQL SQL and
    parameters. Column conditions (types, sessions, times, scopes) translate; a filter on a
    metadata path is refused with one line (not supported on this backend yet)."""
    sql = flt.sql
    if "json_" in sql or "typeof(" in sql:
        raise StorageError(
            "metadata filters are not supported on the PostgreSQL catalog yet",
            suggestion="filter on type, session_id, source, created_at or scope",
        )
    if sql == "1":
        return "TRUE", flt.params
    if sql == "0":
        return "FALSE", flt.params
    return sql.replace("%", "%%").replace("?", "%s"), flt.params


def pg_sql(sql: str) -> str:
    """An engine statement written in the dialect both backends share (``?`` parameters, plain
    SQL: the reads of the index mirror, the backlog and the quotas) as psycopg takes it. A
    statement already in psycopg's form (``%s``) is left as it is."""
    if "?" not in sql:
        return sql
    if "json_" in sql:
        raise StorageError(
            "metadata filters are not supported on the PostgreSQL catalog yet",
            suggestion="filter on type, session_id, source, created_at or scope",
        )
    return sql.replace("%", "%%").replace("?", "%s")


__all__ = ["pg_filter", "pg_sql"]
