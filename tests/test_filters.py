"""The filter language: SQL for the catalog, pushed-down where clauses for the index."""

from __future__ import annotations

import json
import sqlite3

import pytest

from remindful.engine.sqlfilter import build_filter, to_epoch
from remindful.errors import ValidationError

ROWS = [
    {"success": True, "attempt": 1, "tool": "click", "target": {"x": 5}},
    {"success": False, "attempt": 2, "tool": "type"},
    {"success": True, "attempt": 3, "tool": "scroll", "target": {"x": 50}},
    {"attempt": 4},
]


def _select(where: dict) -> list[int]:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE memories (n INTEGER, metadata TEXT, session_id TEXT, type TEXT, created_at REAL)")
    conn.executemany(
        "INSERT INTO memories VALUES (?,?,?,?,?)", [(i, json.dumps(r), "s", "action", 0.0) for i, r in enumerate(ROWS)]
    )
    flt = build_filter(filters=where)
    return [r[0] for r in conn.execute(f"SELECT n FROM memories WHERE {flt.sql} ORDER BY n", flt.params)]


@pytest.mark.parametrize(
    ("where", "expected"),
    [
        ({"success": True}, [0, 2]),
        ({"success": {"$ne": True}}, [1, 3]),
        ({"attempt": {"$gt": 1, "$lte": 3}}, [1, 2]),
        ({"tool": {"$in": ["click", "type"]}}, [0, 1]),
        ({"tool": {"$nin": ["click"]}}, [1, 2, 3]),
        ({"target.x": {"$gte": 10}}, [2]),
        ({"$or": [{"tool": "click"}, {"attempt": 4}]}, [0, 3]),
        ({"success": True, "attempt": 3}, [2]),
        ({"$and": [{"success": True}, {"tool": {"$ne": "click"}}]}, [2]),
    ],
)
def test_sql_filter_semantics(where: dict, expected: list[int]) -> None:
    assert _select(where) == expected


@pytest.mark.parametrize(
    ("where", "message"),
    [
        ({"a": {"$regex": "x"}}, "unknown operator '$regex'"),
        ({"$nor": []}, "unknown operator '$nor'"),
        ({"a": {"$in": []}}, "non-empty list"),
        ({"a": {"$gt": [1]}}, "string, number or boolean"),
        ({"$or": "x"}, "non-empty list"),
        ({"": 1}, "bad field name"),
    ],
)
def test_bad_filters_are_rejected_with_the_reason(where: dict, message: str) -> None:
    with pytest.raises(ValidationError) as info:
        build_filter(filters=where)
    assert message in str(info.value)


def test_to_epoch_accepts_iso_datetime_and_numbers() -> None:
    assert to_epoch("1970-01-01T00:00:10Z") == 10.0
    assert to_epoch(12) == 12.0
    with pytest.raises(ValidationError, match="ISO 8601"):
        to_epoch("soon")
