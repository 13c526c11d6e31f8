"""Search filters: one language, two targets.

A filter is a dict in Chroma's ``where`` language: ``{"key": value}`` (equality),
``{"key": {"$eq"|"$ne"|"$gt"|"$gte"|"$lt"|"$lte": value}}``, ``{"key": {"$in"|"$nin": [..]}}``,
``{"$and": [f, ...]}``, ``{"$or": [f, ...]}``; several keys in one dict are a conjunction.
A key is a memory field (``session_id``, ``source``, ``memory_class``, ``bookmarked``, ``importance``,
``access_count``, ``created_at``, ``type``, ``scope``) or a path into the metadata (``success``,
``target.element``).

Filters are evaluated in SQL by the catalog, for every retrieval space (the vector index is asked
without them and its candidates are checked here; the index holds ids and vectors only).
:func:`with_stored_sessions` maps the session ids a filter names as the catalog stores them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from remindful.errors import ValidationError

COMPARISONS = {"$eq": "=", "$ne": "!=", "$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}
SET_OPS = {"$in": "IN", "$nin": "NOT IN"}
LOGICAL = ("$and", "$or")
#: Memory fields a filter may name directly (everything else is a metadata path).
COLUMNS = {
    "type",
    "session_id",
    "source",
    "memory_class",
    "bookmarked",
    "importance",
    "access_count",
    "created_at",
    "scope",
}


@dataclass(frozen=True, slots=True)
class SqlFilter:
    """A SQL boolean expression over ``memories`` (alias-free) and its parameters."""

    sql: str = "1"
    params: tuple[Any, ...] = ()

    def __and__(self, other: SqlFilter) -> SqlFilter:
        if self.sql == "1":
            return other
        if other.sql == "1":
            return self
        return SqlFilter(f"({self.sql}) AND ({other.sql})", self.params + other.params)


def build_filter(
    *,
    types: Sequence[str] | None = None,
    session_id: str | None = None,
    since: float | None = None,
    until: float | None = None,
    filters: Mapping[str, Any] | None = None,
    scopes: Sequence[str | None] | None = None,
    column_prefix: str = "",
) -> SqlFilter:
    """The SQL for a search's or a listing's restrictions (all optional, all conjoined). ``scopes``:
    the scopes to keep (None among them: the unscoped memories; see :mod:`remindful.engine.scopes`),
    or None for every memory."""
    p = column_prefix
    result = SqlFilter()
    if scopes is not None:
        result &= scope_filter(scopes, p)
    if types:
        result &= SqlFilter(f"{p}type IN ({','.join('?' * len(types))})", tuple(types))
    if session_id is not None:
        result &= SqlFilter(f"{p}session_id = ?", (session_id,))
    if since is not None:
        result &= SqlFilter(f"{p}created_at >= ?", (since,))
    if until is not None:
        result &= SqlFilter(f"{p}created_at <= ?", (until,))
    if filters:
        result &= _where_sql(filters, p, "filters")
    return result


def scope_filter(scopes: Sequence[str | None], p: str = "") -> SqlFilter:
    """Memories of one of ``scopes`` (None: unscoped); an empty sequence keeps none."""
    named = [s for s in dict.fromkeys(scopes) if s is not None]
    parts = [f"{p}scope IN ({','.join('?' * len(named))})"] if named else []
    if None in scopes:
        parts.append(f"{p}scope IS NULL")
    if not parts:
        return SqlFilter("0")
    return SqlFilter(" OR ".join(parts) if len(parts) == 1 else "(" + " OR ".join(parts) + ")", tuple(named))


def with_stored_sessions(where: Mapping[str, Any], stored: Callable[[str], str]) -> Mapping[str, Any]:
    """``where`` with every session id it compares ``session_id`` to (``$eq``, ``$ne``, ``$in``,
    ``$nin``, at any depth of ``$and``/``$or``) replaced by ``stored(id)``: the id as the catalog
    stores it. Anything else, and any shape :func:`build_filter` would refuse, is left as it is."""
    if not isinstance(where, Mapping):
        return where

    def ids(value: Any) -> Any:
        if isinstance(value, str):
            return stored(value)
        if isinstance(value, list | tuple):
            return [stored(v) if isinstance(v, str) else v for v in value]
        return value

    out: dict[str, Any] = {}
    for key, cond in where.items():
        if key in LOGICAL and isinstance(cond, list):
            out[key] = [with_stored_sessions(c, stored) for c in cond]
        elif key == "session_id" and isinstance(cond, Mapping):
            out[key] = {op: ids(v) if op in ("$eq", "$ne", "$in", "$nin") else v for op, v in cond.items()}
        elif key == "session_id":
            out[key] = ids(cond) if isinstance(cond, str) else cond
        else:
            out[key] = cond
    return out


def _where_sql(where: Mapping[str, Any], p: str, path: str) -> SqlFilter:
    if not isinstance(where, Mapping):
        raise ValidationError(path, f"expected a dict like {{'success': True}}, got {type(where).__name__}")
    parts: list[SqlFilter] = []
    for key, cond in where.items():
        if key in LOGICAL:
            if not isinstance(cond, list) or not cond:
                raise ValidationError(f"{path}.{key}", "expected a non-empty list of filters")
            subs = [_where_sql(c, p, f"{path}.{key}[{i}]") for i, c in enumerate(cond)]
            joiner = " AND " if key == "$and" else " OR "
            parts.append(
                SqlFilter("(" + joiner.join(s.sql for s in subs) + ")", tuple(x for s in subs for x in s.params))
            )
        elif key.startswith("$"):
            raise ValidationError(path, f"unknown operator {key!r}; expected one of $and, $or or a field name")
        else:
            parts.append(_condition_sql(key, cond, p, f"{path}.{key}"))
    result = SqlFilter()
    for part in parts:
        result &= part
    return result


def _condition_sql(key: str, cond: Any, p: str, path: str) -> SqlFilter:
    """One field's conditions. Metadata comparisons are type-strict, as in Chroma: ``true`` never
    equals ``1``, and text never compares with numbers. ``$ne``/``$nin`` also match a missing key."""
    field = _field(key, p)
    if not isinstance(cond, Mapping):
        cond = {"$eq": cond}
    result = SqlFilter()
    for op, value in cond.items():
        if op in COMPARISONS:
            _check_scalar(value, f"{path}.{op}")
            if value is None:
                if op not in ("$eq", "$ne"):
                    raise ValidationError(f"{path}.{op}", "None can only be compared with $eq or $ne")
                result &= SqlFilter(f"{field.expr} IS {'NOT ' if op == '$ne' else ''}NULL")
            elif op in ("$eq", "$ne"):
                eq = field.equals(value)
                result &= SqlFilter(f"NOT coalesce({eq.sql}, 0)", eq.params) if op == "$ne" else eq
            else:
                if isinstance(value, bool):
                    raise ValidationError(
                        f"{path}.{op}", "expected a number or a string to compare with, not a boolean"
                    )
                result &= field.compare(COMPARISONS[op], value)
        elif op in SET_OPS:
            if not isinstance(value, list | tuple) or not value:
                raise ValidationError(f"{path}.{op}", "expected a non-empty list of values")
            for i, item in enumerate(value):
                _check_scalar(item, f"{path}.{op}[{i}]")
            options = [field.equals(v) for v in value]
            any_of = SqlFilter(
                "(" + " OR ".join(o.sql for o in options) + ")", tuple(x for o in options for x in o.params)
            )
            result &= any_of if op == "$in" else SqlFilter(f"NOT coalesce({any_of.sql}, 0)", any_of.params)
        else:
            valid = ", ".join([*COMPARISONS, *SET_OPS])
            raise ValidationError(path, f"unknown operator {op!r}; expected one of {valid}")
    return result


@dataclass(frozen=True, slots=True)
class _Field:
    expr: str
    json_type: str | None  # SQL giving the JSON type of a metadata path; None for a column
    convert: Any

    def equals(self, value: Any) -> SqlFilter:
        if value is None:
            return SqlFilter(f"{self.expr} IS NULL")
        if self.json_type is None:
            return SqlFilter(f"{self.expr} = ?", (self.convert(value),))
        if isinstance(value, bool):
            return SqlFilter(f"{self.json_type} = '{'true' if value else 'false'}'")
        return self.compare("=", value)

    def compare(self, op: str, value: Any) -> SqlFilter:
        value = self.convert(value)  # (a date given as text compares as the number it is stored as)
        if self.json_type is None:
            kind = "'text'" if isinstance(value, str) else "'integer','real'"
            guard = f"typeof({self.expr}) IN ({kind})"
        else:
            guard = f"{self.json_type} " + ("= 'text'" if isinstance(value, str) else "IN ('integer','real')")
        return SqlFilter(f"({guard} AND {self.expr} {op} ?)", (value,))


def _field(key: str, p: str) -> _Field:
    if key in COLUMNS:
        if key == "created_at":
            return _Field(f"{p}created_at", None, to_epoch)
        if key == "bookmarked":
            return _Field(f"{p}bookmarked", None, lambda v: int(bool(v)))
        return _Field(f"{p}{key}", None, _identity)
    if not key or any(not part for part in key.split(".")) or "\x00" in key:  # SQLite's SQL text takes no NUL
        raise ValidationError("filters", f"bad field name {key!r}; expected a name like 'success' or 'target.x'")
    json_path = "$" + "".join('."' + part.replace('"', '""') + '"' for part in key.split("."))
    quoted = json_path.replace("'", "''")
    return _Field(f"json_extract({p}metadata, '{quoted}')", f"json_type({p}metadata, '{quoted}')", _identity)


def _identity(value: Any) -> Any:
    return value


def _check_scalar(value: Any, path: str) -> None:
    if value is not None and not isinstance(value, str | int | float | bool):
        raise ValidationError(path, f"expected a string, number or boolean, got {type(value).__name__}")


def to_epoch(value: Any, field: str = "timestamp") -> float:
    """A timestamp given as epoch seconds, ``datetime`` or ISO 8601 text → UTC epoch seconds;
    ``field`` names it in the error."""
    if isinstance(value, bool):
        raise ValidationError(field, "expected an ISO 8601 date/time or epoch seconds, got a boolean")
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, datetime):
        return value.timestamp() if value.tzinfo else value.astimezone().timestamp()
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            raise ValidationError(
                field, f"expected an ISO 8601 date/time like 2024-05-01T12:00:00Z, got {value!r}"
            ) from None
        return to_epoch(parsed, field)
    raise ValidationError(field, f"expected an ISO 8601 date/time or epoch seconds, got {type(value).__name__}")
