"""The ``where`` filter language, and the argument checks every index shares.

The language is Chroma's (see :data:`remindful.index.base.Where`) with two conveniences: several
keys in one dict, and several operators in one field expression (``{"t": {"$gte": 1, "$lt": 5}}``),
both meaning their conjunction. Semantics, identical in every backend:

* equality compares numbers numerically (``1 == 1.0``); a bool equals only a bool, a str only a str;
* ``$ne`` is ``not $eq`` and ``$nin`` is ``not $in``: both match records that lack the key;
* ``$gt/$gte/$lt/$lte`` take a number and match only numeric (non-bool) values;
* ``{}`` matches everything.

:func:`matches` evaluates a filter in pure Python (the in-memory index);
:func:`to_chroma_where` rewrites one for Chroma, which accepts one key per dict and one operator per
expression, and which compares a non-integral float bound against int-stored values after truncating
it (chromadb 1.5.9, chroma-core/chroma#7491: ``{"n": {"$eq": 2.5}}`` matches ``n=2``). The rewrite adds
the clauses that make Chroma's answer exact, and stays exact once Chroma fixes that bug.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from numbers import Integral, Real
from typing import Any

import numpy as np

from remindful.index.base import Scalar, Where

__all__ = [
    "COMPARISON_OPERATORS",
    "LOGICAL_OPERATORS",
    "check_collection_name",
    "check_query",
    "check_upsert",
    "clean_metadata",
    "evaluate_valid",
    "matches",
    "to_chroma_where",
    "validate_where",
]

COMPARISON_OPERATORS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nin")
LOGICAL_OPERATORS = ("$and", "$or")
_RANGE = ("$gt", "$gte", "$lt", "$lte")
# Chroma's own rule, applied to every backend so a name that works in tests works in production.
_NAME = re.compile(r"^[a-zA-Z0-9](?:[a-zA-Z0-9._-]{1,510})[a-zA-Z0-9]$")


# --------------------------------------------------------------------------- validation


def _is_number(value: object) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool | np.bool_)


def _scalar(value: object, where_: str) -> Scalar:
    """Normalise a filter operand or metadata value to a plain Python scalar, or raise."""
    if isinstance(value, bool | np.bool_):
        return bool(value)
    if isinstance(value, str):
        return value
    if isinstance(value, Integral):
        return int(value)
    if isinstance(value, Real):
        return float(value)
    raise ValueError(f"{where_}: expected a str, int, float or bool, got {value!r} ({type(value).__name__})")


def _kind(value: Scalar) -> str:
    return "bool" if isinstance(value, bool) else "str" if isinstance(value, str) else "number"


def validate_where(where: Where | None) -> None:
    """Raise ``ValueError`` naming the offending key or operator if ``where`` is not a valid filter."""
    if where is None:
        return
    if not isinstance(where, Mapping):
        raise ValueError(f"where must be a dict, got {type(where).__name__}")
    for key, value in where.items():
        if not isinstance(key, str) or not key:
            raise ValueError(f"where keys must be non-empty strings, got {key!r}")
        if key.startswith("$"):
            if key not in LOGICAL_OPERATORS:
                raise ValueError(
                    f"Unknown logical operator {key!r} in where; valid ones: {', '.join(LOGICAL_OPERATORS)} "
                    f"(field operators such as $eq go inside a field: {{'field': {{'$eq': value}}}})"
                )
            if not isinstance(value, Sequence) or isinstance(value, str) or not value:
                raise ValueError(f"{key} needs a non-empty list of where filters, got {value!r}")
            for sub in value:
                validate_where(sub)
        elif isinstance(value, Mapping):
            if not value:
                raise ValueError(f"Empty operator expression for field {key!r}")
            for op, operand in value.items():
                _validate_operator(key, op, operand)
        else:
            _validate_operator(key, "$eq", value)


def _validate_operator(key: str, op: object, operand: object) -> None:
    if op not in COMPARISON_OPERATORS:
        raise ValueError(f"Unknown operator {op!r} for field {key!r}; valid ones: {', '.join(COMPARISON_OPERATORS)}")
    if op in _RANGE:
        if not _is_number(operand):
            raise ValueError(f"{op} on field {key!r} needs an int or float, got {operand!r}")
    elif op in ("$in", "$nin"):
        if not isinstance(operand, Sequence) or isinstance(operand, str) or not operand:
            raise ValueError(f"{op} on field {key!r} needs a non-empty list, got {operand!r}")
        kinds = {_kind(_scalar(v, f"{op} on field {key!r}")) for v in operand}
        if len(kinds) > 1:
            raise ValueError(f"{op} on field {key!r} mixes {' and '.join(sorted(kinds))} values; use one type")
    else:
        if operand is None:
            raise ValueError(f"{op} on field {key!r} got None; None values are never stored, omit the condition")
        _scalar(operand, f"{op} on field {key!r}")


# --------------------------------------------------------------------------- evaluation


def _eq(value: object, operand: Scalar) -> bool:
    if value is None:
        return False
    if isinstance(operand, bool) or isinstance(value, bool):
        return isinstance(operand, bool) and isinstance(value, bool) and value == operand
    if isinstance(operand, str) or isinstance(value, str):
        return isinstance(operand, str) and isinstance(value, str) and value == operand
    return bool(value == operand)


def _compare(value: object, op: str, operand: Any) -> bool:
    if op == "$eq":
        return _eq(value, operand)
    if op == "$ne":
        return not _eq(value, operand)
    if op == "$in":
        return any(_eq(value, v) for v in operand)
    if op == "$nin":
        return not any(_eq(value, v) for v in operand)
    if not _is_number(value):
        return False
    if op == "$gt":
        return bool(value > operand)
    if op == "$gte":
        return bool(value >= operand)
    if op == "$lt":
        return bool(value < operand)
    return bool(value <= operand)


def _evaluate(where: Where, metadata: Mapping[str, Any]) -> bool:
    for key, value in where.items():
        if key == "$and":
            ok = all(_evaluate(sub, metadata) for sub in value)
        elif key == "$or":
            ok = any(_evaluate(sub, metadata) for sub in value)
        elif isinstance(value, Mapping):
            ok = all(_compare(metadata.get(key), op, operand) for op, operand in value.items())
        else:
            ok = _eq(metadata.get(key), value)
        if not ok:
            return False
    return True


def matches(where: Where | None, metadata: Mapping[str, Any]) -> bool:
    """True if ``metadata`` satisfies ``where`` (``None`` and ``{}`` match everything).

    Raises ``ValueError`` for an invalid filter. Callers evaluating one filter against many
    records should call :func:`validate_where` once and then this function's fast path
    :func:`evaluate_valid`.
    """
    validate_where(where)
    return evaluate_valid(where, metadata)


def evaluate_valid(where: Where | None, metadata: Mapping[str, Any]) -> bool:
    """Like :func:`matches` for a filter already checked by :func:`validate_where`."""
    return True if not where else _evaluate(where, metadata)


# --------------------------------------------------------------------------- Chroma translation


def to_chroma_where(where: Where | None) -> dict[str, Any] | None:
    """Rewrite a valid filter into the form Chroma accepts; ``None`` means "no filter".

    Every condition is kept: multi-key dicts and multi-operator expressions become ``$and``,
    one-element ``$and``/``$or`` lists are unwrapped, mixed int/float lists become float lists,
    and non-integral float bounds get the guard clauses described in the module docstring.
    Raises ``ValueError`` for an invalid filter.
    """
    validate_where(where)
    return None if where is None else _translate(where)


def _join(op: str, clauses: list[dict[str, Any]]) -> dict[str, Any] | None:
    if not clauses:
        return None
    return clauses[0] if len(clauses) == 1 else {op: clauses}


def _translate(where: Where) -> dict[str, Any] | None:
    clauses: list[dict[str, Any]] = []
    for key, value in where.items():
        if key in LOGICAL_OPERATORS:
            subs = [_translate(sub) for sub in value]
            if key == "$or" and any(s is None for s in subs):
                continue  # one branch matches everything, so the whole $or does
            joined = _join(key, [s for s in subs if s is not None])
            if joined is not None:
                clauses.append(joined)
        elif isinstance(value, Mapping):
            clauses.extend(_field_clause(key, op, operand) for op, operand in value.items())
        else:
            clauses.append(_field_clause(key, "$eq", value))
    return _join("$and", clauses)


def _field_clause(key: str, op: str, operand: Any) -> dict[str, Any]:
    if op in ("$in", "$nin"):
        return _set_clause(key, op, [_scalar(v, op) for v in operand])
    value = _scalar(operand, op)
    clause = {key: {op: value}}
    if not isinstance(value, float) or not math.isfinite(value) or value.is_integer():
        return clause
    # Chroma compares int-stored values against int(value) (truncation toward zero); see module doc.
    t, fl, ce = int(value), math.floor(value), math.ceil(value)
    fix: dict[str, tuple[str, str, int]] = {
        # op: (join, guard operator, guard bound) — or no entry when the truncated bound is already right
        "$eq": ("$and", "$ne", t),
        "$ne": ("$or", "$eq", t),
    }
    if value > 0:
        fix.update({"$gte": ("$and", "$ne", fl), "$lt": ("$or", "$eq", fl)})
    else:
        fix.update({"$gt": ("$or", "$eq", ce), "$lte": ("$and", "$ne", ce)})
    if op not in fix:
        return clause
    join, guard_op, bound = fix[op]
    return {join: [clause, {key: {guard_op: bound}}]}


def _set_clause(key: str, op: str, values: list[Scalar]) -> dict[str, Any]:
    if not all(_is_number(v) for v in values) or all(isinstance(v, int) for v in values):
        return {key: {op: values}}
    floats = [float(v) for v in values]  # Chroma wants one type per list
    integral = {int(v) for v in floats if v.is_integer()}
    truncated = sorted({int(v) for v in floats if math.isfinite(v) and not v.is_integer()} - integral)
    clause = {key: {op: floats}}
    if not truncated:
        return clause
    # int-stored values equal to a truncated bound must not count as members of the list
    if op == "$in":
        return {"$and": [clause, {key: {"$nin": truncated}}]}
    return {"$or": [clause, {key: {"$in": truncated}}]}


# --------------------------------------------------------------------------- shared argument checks


def check_collection_name(name: str) -> str:
    """Return ``name`` if Chroma accepts it (3-512 chars of ``[a-zA-Z0-9._-]``, alphanumeric ends)."""
    if not isinstance(name, str) or not _NAME.match(name) or ".." in name:
        raise ValueError(
            f"Invalid collection name {name!r}: use 3-512 characters from [a-zA-Z0-9._-], "
            "starting and ending with a letter or digit (e.g. 'screen_memories')"
        )
    return name


def clean_metadata(metadata: Mapping[str, Any]) -> dict[str, Scalar]:
    """Drop ``None`` values and normalise the rest to bool/int/float/str (numpy scalars included).

    Raises ``ValueError`` naming the key for nested or unsupported values.
    """
    out: dict[str, Scalar] = {}
    for key, value in metadata.items():
        if not isinstance(key, str) or not key or key.startswith(("$", "#")):
            raise ValueError(f"Invalid metadata key {key!r}: use a non-empty string not starting with '$' or '#'")
        if value is not None:
            out[key] = _scalar(value, f"metadata {key!r}")
    return out


def check_upsert(
    ids: Sequence[str], embeddings: np.ndarray, metadatas: Sequence[Mapping[str, Any]]
) -> tuple[list[str], np.ndarray, list[dict[str, Scalar]]]:
    """Validate upsert arguments; return ids, a float32 ``(n, d)`` array and cleaned metadata."""
    ids = list(ids)
    vectors = np.asarray(embeddings, dtype=np.float32)
    if vectors.ndim != 2:
        raise ValueError(f"embeddings must be a 2-D array (n, dim), got shape {vectors.shape}")
    if not (len(ids) == vectors.shape[0] == len(metadatas)):
        raise ValueError(
            f"ids, embeddings and metadatas must have the same length, got {len(ids)}, "
            f"{vectors.shape[0]} and {len(metadatas)}"
        )
    if any(not isinstance(i, str) or not i for i in ids):
        raise ValueError("ids must be non-empty strings")
    if len(set(ids)) != len(ids):
        raise ValueError("ids must be unique within one upsert call")
    if not np.isfinite(vectors).all():
        raise ValueError("embeddings contain NaN or infinite values")
    return ids, vectors, [clean_metadata(m) for m in metadatas]


def check_query(embedding: np.ndarray, k: int) -> np.ndarray:
    """Validate query arguments; return the query as a float32 1-D vector."""
    if isinstance(k, bool) or not isinstance(k, Integral) or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    vector = np.asarray(embedding, dtype=np.float32)
    if vector.ndim == 2 and vector.shape[0] == 1:
        vector = vector[0]
    if vector.ndim != 1:
        raise ValueError(f"query embedding must be a 1-D vector, got shape {vector.shape}")
    return vector
