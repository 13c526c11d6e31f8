"""Property tests: what goes in through store() comes back out of get() unchanged."""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from remindful.engine.redact import build_redactor, is_secret_name
from remindful.testing import open_fake

_REDACTOR = build_redactor()


def unredacted(text: str) -> bool:
    """Text no built-in rule changes (hypothesis draws string constants from the code it runs, the
    redaction rules' ``<private>`` among them): a secret does not round-trip, by design
    (tests/test_security_redact_rules.py)."""
    return _REDACTOR.redact(text) == text


json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**53), 2**53),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20).filter(unredacted),
)


def plain_keys(size: int) -> st.SearchStrategy[str]:
    """Keys not named like a secret: a ``TOKEN`` or ``password`` key has its value redacted on the
    way in (tests/test_security_redact_rules.py), so it does not round-trip by design."""
    return st.text(max_size=size).filter(lambda key: not is_secret_name(key) and unredacted(key))


json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(plain_keys(8), inner, max_size=4)),
    max_leaves=12,
)
metadata = st.dictionaries(plain_keys(10), json_values, max_size=6)
contents = st.text(min_size=1, max_size=300).filter(lambda s: s.strip() and unredacted(s))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(content=contents, meta=metadata)
def test_content_and_metadata_round_trip(tmp_path_factory, content: str, meta: dict) -> None:  # type: ignore[no-untyped-def]
    path: Path = tmp_path_factory.mktemp("prop")
    with open_fake(path) as memory:
        got = memory.get(memory.store(content, metadata=meta))
        assert got.content == content
        assert got.metadata == meta
        (batch,) = memory.get_batch([got.id])
        assert batch is not None and batch.metadata == meta


@settings(max_examples=10, deadline=None)
@given(st.lists(contents, min_size=1, max_size=40))
def test_batch_ids_unique_and_time_sorted(tmp_path_factory, texts: list[str]) -> None:  # type: ignore[no-untyped-def]
    with open_fake(tmp_path_factory.mktemp("ids")) as memory:
        ids = memory.store_batch([{"content": t} for t in texts])
        assert len(set(ids)) == len(ids)
        stamps = [i.split("_")[1] for i in ids]
        assert stamps == sorted(stamps)
