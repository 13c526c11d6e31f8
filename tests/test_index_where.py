"""The where language: validation, the pure-Python evaluator, and its Chroma translation checked against Chroma."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from remindful.index import ChromaEmbeddedIndex, matches, to_chroma_where, validate_where


def test_multi_key_dicts_and_expressions_become_and() -> None:
    assert to_chroma_where({"a": 1, "b": {"$gte": 2, "$lt": 5}}) == {
        "$and": [{"a": {"$eq": 1}}, {"b": {"$gte": 2}}, {"b": {"$lt": 5}}]
    }


def test_trivial_filters_become_none_and_single_branches_are_unwrapped() -> None:
    assert to_chroma_where(None) is None
    assert to_chroma_where({}) is None
    assert to_chroma_where({"$and": [{}, {}]}) is None
    assert to_chroma_where({"$or": [{}, {"a": 1}]}) is None  # one branch matches everything
    assert to_chroma_where({"$or": [{"a": 1}]}) == {"a": {"$eq": 1}}


def test_mixed_number_lists_become_floats_and_get_int_guards() -> None:
    assert to_chroma_where({"n": {"$in": [1, 2]}}) == {"n": {"$in": [1, 2]}}
    assert to_chroma_where({"n": {"$in": [1, 2.5]}}) == {"$and": [{"n": {"$in": [1.0, 2.5]}}, {"n": {"$nin": [2]}}]}
    assert to_chroma_where({"n": {"$in": [2, 2.5]}}) == {"n": {"$in": [2.0, 2.5]}}  # int 2 is a real member


def test_float_bounds_get_guards_only_where_chroma_truncates_wrongly() -> None:
    assert to_chroma_where({"n": {"$gt": 2.5}}) == {"n": {"$gt": 2.5}}
    assert to_chroma_where({"n": {"$lt": 2.5}}) == {"$or": [{"n": {"$lt": 2.5}}, {"n": {"$eq": 2}}]}
    assert to_chroma_where({"n": {"$gt": -2.5}}) == {"$or": [{"n": {"$gt": -2.5}}, {"n": {"$eq": -2}}]}
    assert to_chroma_where({"n": {"$lt": 2.0}}) == {"n": {"$lt": 2.0}}


@pytest.mark.parametrize(
    ("where", "message"),
    [
        ({"a": {"$regex": "x"}}, r"Unknown operator '\$regex' for field 'a'; valid ones: \$eq, \$ne"),
        ({"$not": {"a": 1}}, r"Unknown logical operator '\$not'.*\$and, \$or"),
        ({"$and": []}, r"\$and needs a non-empty list"),
        ({"a": {"$in": []}}, r"\$in on field 'a' needs a non-empty list"),
        ({"a": {"$in": ["x", 1]}}, "mixes number and str"),
        ({"a": {"$gt": "x"}}, r"\$gt on field 'a' needs an int or float"),
        ({"a": {"$gt": True}}, r"\$gt on field 'a' needs an int or float"),
        ({"a": None}, "None values are never stored"),
        ({"a": {}}, "Empty operator expression for field 'a'"),
        ({"a": [1, 2]}, "expected a str, int, float or bool"),
        ("a", "where must be a dict"),
    ],
)
def test_invalid_filters_name_the_problem(where: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        validate_where(where)
    with pytest.raises(ValueError, match=message):
        to_chroma_where(where)


def test_matches_semantics() -> None:
    meta = {"n": 1, "f": 1.5, "b": True, "s": "1"}
    assert matches({"n": 1.0}, meta)
    assert not matches({"b": 1}, meta)
    assert not matches({"s": 1}, meta)
    assert matches({"missing": {"$ne": 3}}, meta) and matches({"missing": {"$nin": [3]}}, meta)
    assert not matches({"s": {"$gt": 0}}, meta) and not matches({"b": {"$gt": 0}}, meta)
    assert matches({"$or": [{"n": 2}, {"f": {"$lt": 2}}]}, meta)
    assert matches({}, meta) and matches(None, meta)


# -- property: Chroma with the rewritten filter agrees with the evaluator -------------------------

VALUES: list[Any] = [0, 1, 2, -1, -3, 1.0, 1.5, -2.5, 2.5, 0.25, True, False, "1", "a", "b", None]
RECORDS = {
    f"r{i}": {
        k: v for k, v in {"k": VALUES[i % len(VALUES)], "n": i % 7 - 3, "s": "ab"[i % 2]}.items() if v is not None
    }
    for i in range(48)
}
numbers = st.one_of(st.integers(-4, 4), st.sampled_from([-3.5, -2.5, -0.5, 0.0, 0.5, 1.0, 1.5, 2.5, 3.25]))
scalars = st.one_of(numbers, st.booleans(), st.sampled_from(["1", "a", "b", "zz"]))
lists = st.one_of(
    st.lists(numbers, min_size=1, max_size=3),
    st.lists(st.booleans(), min_size=1, max_size=2),
    st.lists(st.sampled_from(["1", "a", "b"]), min_size=1, max_size=2),
)
keys = st.sampled_from(["k", "n", "s", "missing"])
leaves = st.one_of(
    st.builds(lambda k, v: {k: v}, keys, scalars),
    st.builds(lambda k, op, v: {k: {op: v}}, keys, st.sampled_from(["$eq", "$ne"]), scalars),
    st.builds(lambda k, op, v: {k: {op: v}}, keys, st.sampled_from(["$gt", "$gte", "$lt", "$lte"]), numbers),
    st.builds(lambda k, op, v: {k: {op: v}}, keys, st.sampled_from(["$in", "$nin"]), lists),
)
filters = st.recursive(
    leaves,
    lambda sub: st.builds(
        lambda op, subs: {op: subs}, st.sampled_from(["$and", "$or"]), st.lists(sub, min_size=1, max_size=3)
    ),
    max_leaves=4,
)


@pytest.fixture(scope="module")
def chroma(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChromaEmbeddedIndex]:
    index = ChromaEmbeddedIndex(tmp_path_factory.mktemp("where") / "chroma")
    vectors = np.random.default_rng(1).normal(size=(len(RECORDS), 4)).astype(np.float32)
    index.upsert("where_memories", list(RECORDS), vectors, list(RECORDS.values()))
    yield index
    index.close()


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(where=filters)
def test_chroma_agrees_with_the_evaluator(chroma: ChromaEmbeddedIndex, where: dict[str, Any]) -> None:
    expected = {i for i, m in RECORDS.items() if matches(where, m)}
    got = {i for i, _ in chroma.query("where_memories", np.ones(4, np.float32), len(RECORDS), where)}
    assert got == expected, to_chroma_where(where)
