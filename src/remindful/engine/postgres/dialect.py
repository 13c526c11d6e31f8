"""SQLite's dialect of the engine's shared SQL pieces, as PostgreSQL reads them: the search filters
of :mod:`remindful.engine.sqlfilter`, written once for both backends.

A filter is built as SQLite SQL (:func:`~remindful.engine.sqlfilter.build_filter`); :func:`pg_filter`
reads it back, piece by piece, into PostgreSQL's with the same meaning:

- a metadata path (``json_extract(metadata, '$."a"."b"')``) is a ``jsonb`` path query in strict
  mode (object keys only, as SQLite's quoted labels: nothing when a step is not an object);
  JSON ``null`` and a missing key are both SQL NULL, as ``json_extract`` gives;
- its type (``json_type``) is compared as SQLite's names: ``true``/``false`` are the JSON booleans
  (never ``1``/``0``), text compares only with text (bytewise, ``COLLATE "C"``, as SQLite's
  BINARY), numbers only with numbers (as ``jsonb`` numerics);
- a memory field compared with a value of the other kind is false where SQLite's storage classes
  make it false, and a value SQLite's column affinity converts (a number for a text column, a
  numeric text for a number column, a boolean) is converted the same way;
- ``coalesce(x, 0)`` of a condition is ``coalesce(x, FALSE)``; ``0``/``1`` are FALSE/TRUE.

Quoted literals are copied as they are (a ``?`` or ``%`` inside one is text, not a parameter).
"""

from __future__ import annotations

import json
import re
from typing import Any

from remindful.engine.sqlfilter import SqlFilter
from remindful.errors import StorageError

_LIT = r"'(?:[^']|'')*'"
_LITERAL = re.compile(_LIT)
_OP = r"(=|!=|>=|<=|>|<)"
_PREFIX = r"(\w+\.)?"
#: A guarded comparison of a metadata path: ``(json_type(..) = 'text' AND json_extract(..) OP ?)``.
_META_COMPARE = re.compile(
    rf"\(json_type\({_PREFIX}metadata, ({_LIT})\) (= 'text'|IN \('integer','real'\)) "
    rf"AND json_extract\({_PREFIX}metadata, ({_LIT})\) {_OP} \?\)"
)
#: A JSON boolean: ``json_type(..) = 'true'``.
_META_BOOL = re.compile(rf"json_type\({_PREFIX}metadata, ({_LIT})\) = '(true|false)'")
#: A metadata path's value anywhere else (``IS NULL``, ``IS NOT NULL``).
_META_VALUE = re.compile(rf"json_extract\({_PREFIX}metadata, ({_LIT})\)")
#: A guarded comparison of a memory field: ``(typeof(col) IN ('text') AND col OP ?)``.
_COLUMN_COMPARE = re.compile(
    rf"\(typeof\({_PREFIX}(\w+)\) IN \(('text'|'integer','real')\) AND {_PREFIX}(\w+) {_OP} \?\)"
)
_TEXT_COLUMNS = frozenset({"type", "session_id", "source", "memory_class", "scope"})
_NUMBER_COLUMNS = frozenset({"bookmarked", "importance", "access_count", "created_at"})
#: A memory field compared with a parameter, outside a guard.
_COLUMN_PARAM = re.compile(rf"{_PREFIX}({'|'.join(sorted(_TEXT_COLUMNS | _NUMBER_COLUMNS))}) {_OP} \?")
_CONSTANT = re.compile(r"\((0|1)\)")
_NOT_COALESCE = "NOT coalesce("
#: What no piece read: SQLite's JSON functions and typeof().
_LEFT_OVER = re.compile(r"\bjson_\w+\(|\btypeof\(")


def _unquote(literal: str) -> str:
    return literal[1:-1].replace("''", "'")


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _json_path(literal: str) -> str:
    """SQLite's path literal ``'$."a"."b"'`` as PostgreSQL's strict jsonpath literal."""
    path = _unquote(literal)
    parts = re.findall(r'\."((?:[^"]|"")*)"', path)
    if "$" + "".join('."' + p + '"' for p in parts) != path:
        raise StorageError(f"a metadata path the PostgreSQL catalog cannot read: {path!r}")
    jsonpath = "strict $" + "".join("." + json.dumps(p.replace('""', '"')) for p in parts)
    return _quote(jsonpath).replace("%", "%%")  # (the statement goes with parameters)


def _value(prefix: str | None, literal: str) -> str:
    """The JSON value at the path (SQL NULL when missing), as ``jsonb``."""
    return f"jsonb_path_query_first({prefix or ''}metadata::jsonb, {_json_path(literal)}, '{{}}', true)"


def _sqlite_text(value: Any) -> Any:
    """A parameter compared with a text column, as SQLite's TEXT affinity converts it."""
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    return value


def _sqlite_number(value: Any) -> Any:
    """A parameter compared with a number column, as SQLite's NUMERIC affinity converts it (a
    text that is no number stays text: equal to no number, so NULL here)."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    return value


class _Reader:
    """One pass over a SQLite filter: the PostgreSQL text and its parameters."""

    def __init__(self, sql: str, params: tuple[Any, ...]) -> None:
        self.sql, self.params = sql, params
        self.out: list[str] = []
        self.args: list[Any] = []
        self.taken = 0

    def param(self) -> Any:
        value = self.params[self.taken]
        self.taken += 1
        return value

    def emit(self, text: str) -> None:
        self.out.append(text)

    def run(self) -> tuple[str, tuple[Any, ...]]:
        sql, i = self.sql, 0
        coalesces: list[bool] = []  # for each open '(' copied: whether it opens a NOT coalesce(
        while i < len(sql):
            at_word = i == 0 or not (sql[i - 1].isalnum() or sql[i - 1] in "_.")
            end = self._piece(i) if at_word else None
            if end is not None:
                i = end
                continue
            char = sql[i]
            if char == "'":
                literal = _LITERAL.match(sql, i)
                if literal is None:
                    raise StorageError("an unterminated literal in a filter")
                self.emit(literal.group().replace("%", "%%"))
                i = literal.end()
            elif char == "?":
                self.emit("%s")
                self.args.append(self.param())
                i += 1
            elif sql.startswith(_NOT_COALESCE, i):
                self.emit(_NOT_COALESCE)
                coalesces.append(True)
                i += len(_NOT_COALESCE)
            elif char == "(":
                self.emit("(")
                coalesces.append(False)
                i += 1
            elif char == ")":
                if coalesces and coalesces.pop() and self.out and self.out[-1] == ", 0":
                    self.out[-1] = ", FALSE"
                self.emit(")")
                i += 1
            elif sql.startswith(", 0)", i) and coalesces and coalesces[-1]:
                self.emit(", 0")
                i += 3
            else:
                self.emit("%%" if char == "%" else char)
                i += 1
        text = "".join(self.out)
        if _LEFT_OVER.search(text):
            raise StorageError(f"a filter the PostgreSQL catalog cannot read: {self.sql[:200]!r}")
        return text, tuple(self.args)

    def _piece(self, i: int) -> int | None:
        """Read the piece of the grammar at ``i`` if there is one there; where it ends."""
        sql = self.sql
        if m := _META_COMPARE.match(sql, i):
            value = _value(m.group(4), m.group(5))
            op = m.group(6)
            if m.group(3) == "= 'text'":
                self.emit(f"(jsonb_typeof({value}) = 'string' AND ({value} #>> '{{}}') COLLATE \"C\" {op} %s)")
            else:
                self.emit(f"(jsonb_typeof({value}) = 'number' AND {value} {op} to_jsonb(%s::numeric))")
            self.args.append(self.param())
            return m.end()
        if m := _META_BOOL.match(sql, i):
            self.emit(f"({_value(m.group(1), m.group(2))} = '{m.group(3)}'::jsonb)")
            return m.end()
        if m := _META_VALUE.match(sql, i):
            self.emit(f"nullif({_value(m.group(1), m.group(2))}, 'null'::jsonb)")
            return m.end()
        if m := _COLUMN_COMPARE.match(sql, i):
            column, kind, op = m.group(2), m.group(3), m.group(6)
            value = self.param()
            text = column in _TEXT_COLUMNS
            if (kind == "'text'") != text or column not in _TEXT_COLUMNS | _NUMBER_COLUMNS:
                self.emit("FALSE")  # SQLite's storage class of the column is never the value's
            else:
                collate = ' COLLATE "C"' if text else ""
                self.emit(f"({m.group(4) or ''}{column}{collate} {op} %s)")
                self.args.append(value)
            return m.end()
        if m := _COLUMN_PARAM.match(sql, i):
            column, op = m.group(2), m.group(3)
            value = self.param()
            if column in _TEXT_COLUMNS:
                self.emit(f"{m.group(1) or ''}{column} {op} %s")
                self.args.append(_sqlite_text(value))
            else:
                self.emit(f"{m.group(1) or ''}{column} {op} %s::double precision")
                self.args.append(_sqlite_number(value))
            return m.end()
        if m := _CONSTANT.match(sql, i):
            self.emit("(FALSE)" if m.group(1) == "0" else "(TRUE)")
            return m.end()
        return None


def pg_filter(flt: SqlFilter) -> tuple[str, tuple[Any, ...]]:
    """``flt`` (SQLite's dialect, :mod:`remindful.engine.sqlfilter`) as PostgreSQL SQL and
    parameters, with the same meaning (see the module docstring)."""
    sql = flt.sql
    if sql == "1":
        return "TRUE", flt.params
    if sql == "0":
        return "FALSE", flt.params
    return _Reader(sql, flt.params).run()


def pg_sql(sql: str) -> str:
    """An engine statement written in the dialect both backends share (``?`` parameters, plain
    SQL: the reads of the index mirror, the backlog and the quotas) as psycopg takes it. A
    statement already in psycopg's form (``%s``) is left as it is."""
    bare = _LITERAL.sub("''", sql)  # (a '?' or '%s' inside a literal is text)
    if "?" not in bare or "%s" in bare:
        return sql
    if "json_" in sql:
        raise StorageError(
            "metadata filters are not supported in this statement on the PostgreSQL catalog",
            suggestion="filter on type, session_id, source, created_at or scope",
        )
    return sql.replace("%", "%%").replace("?", "%s")


__all__ = ["pg_filter", "pg_sql"]
