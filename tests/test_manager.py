"""MemoryManager's public API on the fake embedder and the in-memory index."""

from __future__ import annotations

import hashlib
import os
import random
import re
import threading
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import remindful
from remindful import MemoryClass, MemorySource, MemoryType, NotFoundError, ValidationError
from remindful.api import MemoryManager
from remindful.embed import FakeEmbedder
from remindful.engine.quotas import SIZE_WARNING_INTERVAL_S
from remindful.model import CollectionUsage
from remindful.testing import open_fake

ID_PATTERN = re.compile(r"^(screen|action|workflow|conversation|document|knowledge)_\d{20}_[0-9a-f]{8}$")


def test_store_then_get_returns_everything(memory: MemoryManager) -> None:
    metadata = {"action": "click", "target": {"x": 500, "y": 300, "element": "login_button"}, "success": True}
    memory_id = memory.store("Clicked login button at (500, 300) - success", type="action", metadata=metadata)
    assert ID_PATTERN.match(memory_id)
    got = memory.get(memory_id)
    assert got.content == "Clicked login button at (500, 300) - success"
    assert got.metadata == metadata
    assert got.type is MemoryType.ACTION
    assert got.source is MemorySource.MANUAL
    assert got.memory_class is MemoryClass.EPISODIC
    assert got.session_id == memory.session_id
    assert got.session_id.startswith("session_")
    assert got.content_hash and len(got.content_hash) == 64
    assert got.created_at.tzinfo is not None


def test_caller_supplied_timestamp_and_session(memory: MemoryManager) -> None:
    memory_id = memory.store("old", timestamp="2023-05-08T13:56:00Z", session_id="s1", type="conversation")
    got = memory.get(memory_id)
    assert got.created_at == datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    assert got.session_id == "s1"
    assert memory_id.startswith("conversation_20230508135600")


def test_get_missing_says_not_found_and_suggests_search(memory: MemoryManager) -> None:
    with pytest.raises(NotFoundError) as info:
        memory.get("nonexistent_id")
    assert "Memory not found" in str(info.value)
    assert "memory_search" in str(info.value)


def test_get_batch_keeps_order_and_marks_missing(memory: MemoryManager) -> None:
    ids = [memory.store(f"memory number {i}") for i in range(20)]
    request = [ids[5], "missing_1", ids[0], ids[19], "missing_2"]
    got = memory.get_batch(request)
    assert [m.id if m else None for m in got] == [ids[5], None, ids[0], ids[19], None]


def test_update_content_reembeds_and_merges_metadata(memory: MemoryManager) -> None:
    memory_id = memory.store("the sky is blue", metadata={"a": 1, "b": 2})
    stored = memory.get(memory_id)
    before = datetime.now(UTC)
    updated = memory.update(memory_id, content="bananas are yellow", metadata={"b": None, "c": 3})
    assert updated.content == "bananas are yellow"
    assert updated.metadata == {"a": 1, "c": 3}
    assert updated.updated_at is not None and updated.updated_at >= stored.created_at
    assert updated.updated_at >= before.replace(microsecond=0) - timedelta(seconds=1)  # the update's time, UTC
    assert memory.search("yellow bananas", limit=1)[0].id == memory_id


def test_delete_removes_everywhere(memory: MemoryManager) -> None:
    memory_id = memory.store("Clicked login button", type="action")
    keep = memory.store("Opened settings page", type="action")
    assert memory.delete(memory_id) is True
    with pytest.raises(NotFoundError):
        memory.get(memory_id)
    assert memory.delete(memory_id) is False
    assert memory_id not in [h.id for h in memory.search("login button")]
    assert memory.get(keep)


def test_list_filters_and_pages(memory: MemoryManager) -> None:
    for i in range(5):
        memory.store(f"screen {i}", type="screen", session_id="a")
    for i in range(3):
        memory.store(f"action {i}", type="action", session_id="b")
    assert len(memory.list(type="screen")) == 5
    assert {m.session_id for m in memory.list(session_id="b")} == {"b"}
    first, second = memory.list(limit=4), memory.list(limit=4, offset=4)
    assert len(first) == 4 and len(second) == 4
    assert not {m.id for m in first} & {m.id for m in second}
    assert first[0].created_at >= first[-1].created_at


def test_list_takes_a_time_range_including_both_ends(memory: MemoryManager) -> None:
    day = 86_400.0
    start = datetime(2025, 3, 1, tzinfo=UTC).timestamp()
    ids = memory.store_batch([{"content": f"day {i}", "timestamp": start + i * day} for i in range(10)])
    since, until = datetime.fromtimestamp(start + 2 * day, UTC), (start + 5 * day)
    assert [m.id for m in memory.list(since=since, until=until)] == ids[5:1:-1]  # 5, 4, 3, 2: newest first
    assert [m.id for m in memory.list(since=since, until=until, limit=2, offset=1)] == ids[4:2:-1]
    assert [m.id for m in memory.list(since="2025-03-09T00:00:00Z")] == ids[:7:-1]
    assert [m.id for m in memory.list(until="2025-03-01T00:00:00+00:00")] == ids[:1]
    assert memory.list(type="screen", since=since) == []
    with pytest.raises(ValidationError, match="'until'"):
        memory.list(until="next week")


def test_store_batch_is_all_or_nothing(memory: MemoryManager) -> None:
    with pytest.raises(ValidationError) as info:
        memory.store_batch([{"content": "fine"}, {"content": ""}])
    assert "items[1].content" in str(info.value)
    assert memory.stats().total_memories == 0
    ids = memory.store_batch([{"content": f"step {i}", "type": "workflow"} for i in range(50)])
    assert len(ids) == len(set(ids)) == 50
    assert memory.stats().collections["workflow_memories"].count == 50


@pytest.mark.parametrize(
    ("kwargs", "field", "expected"),
    [
        ({"content": ""}, "content", "non-empty string"),
        ({"content": "x", "type": "bogus"}, "type", "screen, action, workflow"),
        ({"content": "x", "metadata": {"v": float("nan")}}, "metadata.v", "expected a finite number"),
        ({"content": "x", "metadata": ["not", "a", "dict"]}, "metadata", "expected a dict"),
        ({"content": "x", "timestamp": "yesterday-ish"}, "timestamp", "ISO 8601"),
        ({"content": "x", "source": "telepathy"}, "source", "manual"),
    ],
)
def test_bad_input_names_the_field(memory: MemoryManager, kwargs: dict, field: str, expected: str) -> None:
    with pytest.raises(ValidationError) as info:
        memory.store(**kwargs)
    assert info.value.field == field
    assert expected in str(info.value)


def test_ids_are_unique_and_sort_by_time(memory: MemoryManager) -> None:
    base = datetime(2024, 1, 1, tzinfo=UTC)
    items = [{"content": f"m{i}", "timestamp": base + timedelta(microseconds=i)} for i in range(300)]
    ids = memory.store_batch(items)
    assert len(set(ids)) == 300
    assert ids == sorted(ids)


def test_search_filters_apply_to_every_space(memory: MemoryManager) -> None:
    ok = memory.store("Clicked login button", metadata={"success": True, "attempt": 3})
    memory.store("Clicked login button", metadata={"success": False, "attempt": 1})
    memory.store("Clicked login button", type="screen", metadata={"success": True, "attempt": 5})
    hits = memory.search("login button", types=["action"], filters={"success": True})
    assert [h.id for h in hits] == [ok]
    # The three are copies of one text: collapse=False lists each instead of one "+N similar" hit.
    assert {h.id for h in memory.search("login", filters={"attempt": {"$gte": 3}}, collapse=False)} == {
        ok,
        *[h.id for h in memory.search("login", types=["screen"])],
    }
    assert len(memory.search("login", filters={"attempt": {"$in": [1, 5]}}, collapse=False)) == 2
    assert [h.similar for h in memory.search("login")] == [2]


def test_search_filters_on_metadata_keys_with_braces(memory: MemoryManager) -> None:
    # The key is quoted into the filter's SQL; rows are read with ``{marks}`` placeholders.
    kept = memory.store("Clicked login button", metadata={"a{marks}b": 1, "x}{y": "z"})
    memory.store("Clicked login button", metadata={"a{marks}b": 2})
    assert [h.id for h in memory.search("login", filters={"a{marks}b": 1, "x}{y": "z"})] == [kept]


def test_search_session_and_time_range(memory: MemoryManager) -> None:
    old = memory.store("deploy the service", session_id="s1", timestamp="2023-01-01T00:00:00Z")
    new = memory.store("deploy the service", session_id="s2", timestamp="2024-01-01T00:00:00Z")
    assert [h.id for h in memory.search("deploy", session_id="s1")] == [old]
    assert [h.id for h in memory.search("deploy", since="2023-06-01T00:00:00Z")] == [new]
    assert [h.id for h in memory.search("deploy", until="2023-06-01T00:00:00Z")] == [old]


def test_search_hit_shape_and_score_range(memory: MemoryManager) -> None:
    memory.store("The API uses API keys for authentication")
    hit = memory.search("API keys")[0]
    assert 0 < hit.score <= 1
    assert set(hit.to_dict()) >= {"id", "type", "content", "metadata", "score", "created_at"}
    assert "lexical" in hit.sources and "dense" in hit.sources


def test_search_rejects_bad_arguments(memory: MemoryManager) -> None:
    with pytest.raises(ValidationError, match="query"):
        memory.search("  ")
    with pytest.raises(ValidationError, match="limit"):
        memory.search("x", limit=0)
    with pytest.raises(ValidationError, match=r"\$regex"):
        memory.search("x", filters={"a": {"$regex": "x"}})


def test_expired_memories_are_not_returned(tmp_path: Path) -> None:
    with open_fake(tmp_path / "s", **{"privacy.auto_delete_days": 1}) as memory:
        memory.store("stale fact about kittens", timestamp=datetime.now(UTC) - timedelta(days=3))
        fresh = memory.store("fresh fact about kittens")
        assert [h.id for h in memory.search("kittens")] == [fresh]


def test_quota_evicts_least_important_unprotected(tmp_path: Path) -> None:
    with open_fake(tmp_path / "s", **{"retention.max_items_per_collection": 3}) as memory:
        keep = memory.store("bookmarked", type="screen", metadata={"bookmarked": True, "importance": 0.0})
        low = memory.store("unimportant", type="screen", metadata={"importance": 0.1})
        mid = memory.store("middling", type="screen", metadata={"importance": 0.6})
        new = memory.store("newest", type="screen")
        assert [m.id if m else None for m in memory.get_batch([keep, low, mid, new])] == [keep, None, mid, new]
        assert memory.stats().collections["screen_memories"].count == 3


def test_near_size_quota_warns_and_still_stores(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    def warnings() -> list[str]:
        return [r.message for r in caplog.records if "of its quota" in r.message]

    with open_fake(tmp_path / "s", **{"storage.max_size_mb": 0.001}) as memory:
        memory_id = memory.store("still stored")
        assert memory.get(memory_id)
        memory.engine.quotas.wait_for_size(timeout=30)  # the size is measured off the store path
        assert len(warnings()) == 1 and "increase storage.max_size_mb" in warnings()[0]
        memory.store_batch([{"content": f"more {i}"} for i in range(3)])
        memory.store("and more")
        assert len(warnings()) == 1, "the same warning again on every store floods the log"
        memory.engine.quotas.last_warning = (time.monotonic() - SIZE_WARNING_INTERVAL_S - 1, 10**9)
        memory.store("ten minutes later")
        assert len(warnings()) == 2


def test_a_store_does_not_walk_the_storage_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The size-quota check measures the storage directory (a stat per file: ~0.4 s with
    10,000 attachment copies) at most every few seconds, and never on the storing thread."""
    walkers: list[str] = []
    walk = os.walk

    def traced_walk(*args: Any, **kwargs: Any) -> Any:
        walkers.append(threading.current_thread().name)
        return walk(*args, **kwargs)

    monkeypatch.setattr("remindful.engine.quotas.os.walk", traced_walk)
    with open_fake(tmp_path / "s") as memory:
        memory.store("first")
        memory.engine.quotas.forget_size()  # as after an idle pause
        memory.store("after a pause")
        memory.engine.quotas.wait_for_size(timeout=30)
    assert walkers and threading.current_thread().name not in walkers, walkers


def test_disabled_in_config_refuses_with_reason(tmp_path: Path) -> None:
    with open_fake(tmp_path / "s", enabled=False) as memory:
        with pytest.raises(remindful.MemoryDisabledError, match="Memory features are disabled"):
            memory.store("x")
        assert memory.disabled_reason


def test_stats_report_collections_storage_and_latency(memory: MemoryManager) -> None:
    memory.store("a", type="screen")
    memory.search("a")
    stats = memory.stats()
    assert stats.total_memories == 1
    assert stats.collections["screen_memories"] == CollectionUsage(count=1, quota=10_000, usage_percent=0.01)
    assert stats.storage.quota_limit_mb == 500
    assert stats.storage.total_size_mb > 0
    assert stats.performance["searches"] == 1
    assert stats.sessions == 1


def test_access_counts_recorded_after_search(memory: MemoryManager) -> None:
    memory_id = memory.store("remember the milk")
    memory.search("milk")
    memory.close()
    with open_fake(memory.path) as again:
        assert again.get(memory_id).access_count == 1


def test_resume_session_boosts_that_session(memory: MemoryManager) -> None:
    a = memory.store("configure the database connection pool", session_id="old")
    b = memory.store("configure the database connection pool", session_id="other")
    memory.resume_session("old")
    ranked = [h.id for h in memory.search("database connection", collapse=False)]
    assert ranked.index(a) < ranked.index(b)
    with pytest.raises(NotFoundError):
        memory.resume_session("no-such-session")


def test_open_is_lazy(tmp_path: Path) -> None:
    memory = open_fake(tmp_path / "lazy")
    assert not (tmp_path / "lazy").exists()
    memory.store("now it exists")
    assert (tmp_path / "lazy" / "catalog.sqlite3").exists()
    memory.close()


def test_storage_is_private(memory: MemoryManager) -> None:
    memory.store("secret")
    assert (memory.path.stat().st_mode & 0o777) == 0o700
    assert ((memory.path / "catalog.sqlite3").stat().st_mode & 0o777) == 0o600


async def _async_roundtrip(path: Path) -> None:
    from remindful.aio import AsyncMemoryManager

    async with AsyncMemoryManager(open_fake(path)) as memory:
        memory_id = await memory.store("async hello", session_id="s1")
        assert (await memory.get(memory_id)).content == "async hello"
        assert (await memory.search("hello"))[0].id == memory_id
        assert [m.id for m in await memory.list(since="2000-01-01T00:00:00Z")] == [memory_id]
        assert await memory.flush(timeout=30)
        assert (await memory.stats()).total_memories == 1
        assert [s.id for s in await memory.list_sessions()] == ["s1"]
        assert (await memory.delete_session("s1", confirm=True)).deleted == 1


def test_async_facade(tmp_path: Path) -> None:
    import asyncio

    asyncio.run(_async_roundtrip(tmp_path / "a"))


def test_the_async_facade_has_every_public_method_awaitable() -> None:
    import inspect

    from remindful.aio import AsyncMemoryManager

    methods = {name for name, value in vars(MemoryManager).items() if inspect.isfunction(value)}
    public = {name for name in methods if not name.startswith("_")}
    assert {"store", "search", "stats", "analyze_patterns"} <= public
    awaitable = {
        name
        for name, value in vars(AsyncMemoryManager).items()
        if not name.startswith("_") and inspect.iscoroutinefunction(value)
    }
    assert awaitable == public
    for name in public:  # the same parameters, the same result type
        method, wrapped = getattr(MemoryManager, name), getattr(AsyncMemoryManager, name)
        assert inspect.signature(wrapped) == inspect.signature(method), name


def test_list_by_source_and_delete_by_file_path(memory: MemoryManager, tmp_path: Path) -> None:
    note = tmp_path / "notes.md"
    for i in range(3):
        memory.store(f"chunk {i} of the notes", type="document", source="md_file", metadata={"file_path": str(note)})
    keep = memory.store("hand-written", source="manual")
    assert {m.source for m in memory.list(source="md_file")} == {MemorySource.MD_FILE}
    assert len(memory.list(source="md_file")) == 3
    with pytest.raises(ValidationError, match="source"):
        memory.list(source="telepathy")
    assert memory.delete_by_file_path(note) == 3
    assert [m.id for m in memory.list()] == [keep]


class CountingEmbedder(remindful.embed.FakeEmbedder):
    """The fake, counting the texts it embeds, under a configurable model name."""

    def __init__(self, model: str = "fake-384") -> None:
        super().__init__()
        self.model = model
        self.embedded: list[str] = []

    @property
    def name(self) -> str:
        return self.model

    def embed(self, texts):  # type: ignore[no-untyped-def]
        self.embedded += list(texts)
        return super().embed(texts)


def test_a_stored_text_is_not_embedded_again_and_its_vector_is_kept_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    first = CountingEmbedder()
    with remindful.open(tmp_path / "m", embedder=first) as memory:
        memory.store("the build needs node 20")
    assert first.embedded == ["the build needs node 20"]
    again = CountingEmbedder()
    with remindful.open(tmp_path / "m", embedder=again) as memory:  # a new process, in effect
        memory.store("the build needs node 20", type="knowledge")
        memory.store("something new")
        cached = memory.engine.catalog.read("SELECT count(*) FROM embedding_cache")[0][0]
    assert again.embedded == ["something new"]
    assert cached == 0  # the vectors live in the memories table only
    # Another model must not reuse vectors it did not make.
    other = CountingEmbedder("another-model")
    with caplog.at_level("WARNING"), remindful.open(tmp_path / "m", embedder=other) as memory:
        memory.store("the build needs node 20")
    assert other.embedded == ["the build needs node 20"]
    assert "made by fake-384" in caplog.text


class TieFreeEmbedder(FakeEmbedder):
    """Bag-of-words vectors plus a little noise fixed by the text: no two texts tie for a query."""

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        vectors = super().embed(texts)
        for row, text in enumerate(texts):
            seed = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")
            vectors[row] += np.random.default_rng(seed).normal(0, 0.05, self.dimension).astype(np.float32)
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


@pytest.mark.parametrize(
    "restriction",
    [{"session_id": "busy"}, {"filters": {"n": {"$gte": 300}}}, {"types": ["workflow"], "session_id": "busy"}],
)
def test_a_broad_restriction_finds_the_same_through_the_index_as_scored_exactly(
    tmp_path: Path, restriction: dict
) -> None:
    rng = random.Random(7)
    words = [f"w{n}" for n in range(150)] + ["search", "service", "deploy"]
    items = [
        {
            "content": " ".join(rng.sample(words, 6)),
            "type": "workflow" if i % 4 else "action",
            "session_id": "busy" if i % 5 else "quiet",
            "metadata": {"n": i},
        }
        for i in range(1_200)
    ]
    found = {}
    # Every set is small enough to score exactly; with exact_filter_max 0 every one goes through the index.
    for name, most in (("exact", 100_000), ("index", 0)):
        with open_fake(tmp_path / name, embedder=TieFreeEmbedder(), **{"search.exact_filter_max": most}) as memory:
            memory.store_batch(items)
            memory.flush()
            hits = memory.search("search service deploy w7 w8", limit=10, **restriction)
            found[name] = [(hit.content, hit.score) for hit in hits]
    assert len(found["exact"]) == 10
    assert [content for content, _ in found["index"]] == [content for content, _ in found["exact"]]
    assert [score for _, score in found["index"]] == pytest.approx([score for _, score in found["exact"]], abs=1e-5)


def test_the_lexical_queries_start_before_the_query_is_embedded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from remindful.engine.retrieval import search as search_module

    started = threading.Event()
    real = search_module._lexical

    def lexical(*args: Any) -> Any:
        started.set()
        return real(*args)

    monkeypatch.setattr(search_module, "_lexical", lexical)
    waited: list[bool] = []

    class Waiting(FakeEmbedder):
        def embed_query(self, text: str) -> np.ndarray:
            waited.append(started.wait(5))  # the lexical queries run beside the query embedding
            return self.embed([text])[0]

    with open_fake(tmp_path / "s", embedder=Waiting()) as memory:
        memory.store("deploy notes for the billing service")
        memory.flush()
        assert memory.search("billing deploy")[0].content == "deploy notes for the billing service"
    assert waited == [True]


def test_ids_within_one_batch_never_collide(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch's rows share a timestamp, so two could draw the same 8 random hex digits and fail the
    whole batch on the catalog's unique id (seen in CI with 7,000 rows)."""
    import uuid

    real, same = uuid.uuid4, [uuid.UUID(int=1), uuid.UUID(int=1)]
    monkeypatch.setattr(uuid, "uuid4", lambda: same.pop() if same else real())
    with open_fake(tmp_path / "s") as memory:
        ids = memory.store_batch([{"content": "a"}, {"content": "b"}, {"content": "c"}])
        assert len(set(ids)) == 3 and [m.content for m in memory.get_batch(ids) if m] == ["a", "b", "c"]
