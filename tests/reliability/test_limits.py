"""The ``limits`` settings: input over a limit is refused with an error naming the setting, before
anything is stored or embedded, at every entry point (library, CLI, MCP, hooks, spool, import)."""

from __future__ import annotations

import base64
import io
import json
import logging
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from mcp import Client
from typer.testing import CliRunner

import remindful
from remindful.errors import ConfigError, ValidationError
from remindful.shells.cli.app import app
from remindful.shells.hook import run as run_hook
from remindful.shells.mcp.server import LazyManager, build_server
from remindful.testing import open_fake

runner = CliRunner()
SMALL = {
    "limits.query_chars": 100,
    "limits.content_chars": 1000,
    "limits.metadata_bytes": 200,
    "limits.metadata_depth": 3,
    "limits.batch_items": 5,
}


def nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {"leaf": 1}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


def test_the_limits_have_documented_defaults() -> None:
    limits = remindful.load_settings().limits
    assert limits.query_chars == 10_000 and limits.content_chars == 1_000_000
    assert limits.metadata_bytes == 65_536 and limits.metadata_depth == 20
    assert limits.hook_payload_bytes == 4_000_000 and limits.batch_items == 10_000
    for name, field in type(limits).model_fields.items():
        assert field.description, name


@pytest.mark.parametrize(
    ("call", "says"),
    [
        (lambda m: m.search("q" * 101), "'query': 101 characters, expected at most 100 (setting limits.query_chars)"),
        (lambda m: m.store("c" * 1001), "Invalid 'content': 1,001 characters, expected at most 1,000"),
        (lambda m: m.store("x", metadata={"k": "v" * 300}), "expected at most 200 (setting limits.metadata_bytes)"),
        (lambda m: m.store("x", metadata=nested(4)), "Invalid 'metadata.a.a.a': nested deeper than 3 levels"),
        (lambda m: m.store_batch([{"content": "x"}] * 6), "6 items, expected at most 5 per batch"),
        (lambda m: m.search("q", filters=nested(4)), "Invalid 'filters.a.a.a': nested deeper than 3 levels"),
        (lambda m: m.update(m.store("x"), metadata=nested(4)), "nested deeper than 3 levels"),
    ],
)
def test_over_a_limit_is_refused_naming_the_setting(tmp_path: Path, call: Any, says: str) -> None:
    with open_fake(tmp_path / "s", **SMALL) as memory:
        with pytest.raises(ValidationError) as caught:
            call(memory)
        assert says in str(caught.value)
        assert memory.stats().total_memories <= 1  # nothing of the refused call was stored


def test_at_the_limits_everything_is_accepted(tmp_path: Path) -> None:
    with open_fake(tmp_path / "s", **SMALL) as memory:
        content, query = ("deploy " * 200)[:1000], ("deploy " * 20)[:100]  # each at its limit
        ids = memory.store_batch([{"content": content, "metadata": nested(3)} for _ in range(5)])
        hits = memory.search(query)
        assert hits and {hit.id for hit in hits} <= set(ids)
        assert memory.stats().total_memories == 5


def test_metadata_must_be_json_every_reader_reads_back(memory: remindful.MemoryManager) -> None:
    cases = {
        "metadata.n": {"n": 2**64},
        "metadata.f": {"f": float("nan")},
        "metadata.s": {"s": "\ud800"},
        "metadata.l[1]": {"l": [1, float("inf")]},
        "metadata": {1: "int key"},
        "metadata.o": {"o": object()},
    }
    for field, metadata in cases.items():
        with pytest.raises(ValidationError) as caught:
            memory.store("x", metadata=metadata)
        assert caught.value.field == field, (field, str(caught.value))
    with pytest.raises(ValidationError, match="nested deeper than 20 levels"):
        memory.store("x", metadata=nested(5000))  # deeper than Python's recursion limit: not a RecursionError
    assert memory.get(memory.store("x", metadata={"n": 2**63 - 1, "ok": [1.5, None, True]})).metadata["n"] == 2**63 - 1


def test_timestamps_out_of_range_are_refused(memory: remindful.MemoryManager) -> None:
    for bad in (1e30, float("nan"), float("inf"), -1e20, "10000-01-01T00:00:00"):
        with pytest.raises(ValidationError, match="'timestamp': expected"):
            memory.store("x", timestamp=bad)


def test_the_limits_come_from_the_environment_and_are_validated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REMINDFUL_LIMITS__QUERY_CHARS", "5")
    monkeypatch.setenv("REMINDFUL_EMBEDDINGS__BACKEND", "fake")
    result = runner.invoke(app, ["--path", str(tmp_path / "s"), "search", "too long"])
    assert result.exit_code == 2 and "limits.query_chars" in result.output, result.output
    monkeypatch.setenv("REMINDFUL_LIMITS__QUERY_CHARS", "0")
    with pytest.raises(ConfigError, match=r"Invalid setting 'limits\.query_chars'"):
        remindful.load_settings(tmp_path / "s")


# -- MCP ---------------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_mcp_tools_refuse_over_the_limits_and_keep_serving(tmp_path: Path) -> None:
    lazy = LazyManager(factory=lambda: open_fake(tmp_path / "store", **SMALL))
    try:
        async with Client(build_server(lazy)) as client:
            long_query = await client.call_tool("memory_search", {"query": "q" * 101})
            deep = await client.call_tool("memory_store", {"content": "x", "metadata": nested(4)})
            batch = await client.call_tool("memory_store_batch", {"items": [{"content": "x"}] * 6})
            fine = await client.call_tool("memory_store", {"content": "x"})
    finally:
        lazy.close()
    assert long_query.is_error and "limits.query_chars" in long_query.content[0].text
    assert deep.is_error and "limits.metadata_depth" in deep.content[0].text
    assert batch.is_error and "limits.batch_items" in batch.content[0].text
    assert not fine.is_error


# -- hooks and the spool --------------------------------------------------------------------------------


def hook(store: Path, text: str) -> tuple[int, str]:
    err = io.StringIO()
    stdin = io.StringIO(text)
    import contextlib

    with contextlib.redirect_stderr(err):
        code = run_hook(["--path", str(store), "hook", "UserPromptSubmit", "--no-context"], stdin=stdin)
    return code, err.getvalue()


def spooled(store: Path) -> int:
    with sqlite3.connect(store / "catalog.sqlite3") as conn:
        return int(conn.execute("SELECT count(*) FROM spool").fetchone()[0])


def test_a_hook_payload_over_the_limit_keeps_a_truncated_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over ``limits.hook_payload_bytes`` (a failing build's long log), the event is kept, its text
    cut and saying so (issue 32: it was dropped whole); only an input over 4 times the limit is
    refused up front, and that is logged."""
    store = tmp_path / "s"
    monkeypatch.setenv("REMINDFUL_LIMITS__HOOK_PAYLOAD_BYTES", "2000")
    payload = {"session_id": "s1", "hook_event_name": "UserPromptSubmit", "prompt": "p" * 3000}
    code, err = hook(store, json.dumps(payload))
    assert code == 0  # a hook never breaks the agent
    assert "over limits.hook_payload_bytes (2,000)" in err and "marked truncated" in err
    assert "over limits.hook_payload_bytes" in (store / "logs" / "hooks.log").read_text()
    assert spooled(store) == 1
    with open_fake(store, **{"limits.hook_payload_bytes": 2000}) as memory:
        assert memory.drain_spool() == 1  # under the limit the drain applies: not set aside
        (kept,) = memory.list()  # nothing learned from a text cut mid-way (nor from its note)
    assert "learned" not in kept.metadata
    assert kept.content.startswith("p" * 250) and "p" * 251 not in kept.content
    assert "[truncated: the hook input was" in kept.content and kept.metadata["truncated"]["bytes"] > 3000
    payload["prompt"] = "p" * 9_000
    code, err = hook(store, json.dumps(payload))
    assert code == 0 and "nothing captured" in err and "over 8,000 bytes" in err
    assert spooled(store) == 0


def test_a_lone_surrogate_in_a_hook_payload_is_replaced_and_captured(tmp_path: Path) -> None:
    store = tmp_path / "s"
    text = '{"session_id": "s1", "hook_event_name": "UserPromptSubmit", "prompt": "fix \\ud800 this"}'
    assert hook(store, text)[0] == 0
    with open_fake(store) as memory:
        memory.drain_spool()
        (stored,) = memory.list()
        assert stored.content == "fix \ufffd this"


def test_the_drainer_sets_aside_a_spooled_event_over_the_limit(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = tmp_path / "s"
    for prompt in ("p" * 5000, "a normal prompt"):
        payload = {"session_id": "s1", "hook_event_name": "UserPromptSubmit", "prompt": prompt}
        assert hook(store, json.dumps(payload))[0] == 0
    assert spooled(store) == 2  # spooled under the default limit (say, by an older version)
    with caplog.at_level(logging.WARNING), open_fake(store, **{"limits.hook_payload_bytes": 2000}) as memory:
        assert memory.drain_spool() == 2
        assert [m.content for m in memory.list()] == ["a normal prompt"]
        assert spooled(store) == 0
    (aside,) = (store / "spool-rejected.jsonl").read_text().splitlines()
    assert "p" * 5000 in json.loads(aside)["payload"] and "limits.hook_payload_bytes" in json.loads(aside)["error"]
    assert "set aside in spool-rejected.jsonl" in caplog.text
    with open_fake(store) as memory:  # and it is not tried again
        assert memory.drain_spool() == 0
        assert len(memory.list()) == 1


def test_an_event_that_keeps_failing_is_set_aside_after_its_attempts(tmp_path: Path) -> None:
    from remindful.services.ingest.drainer import MAX_ATTEMPTS

    store = tmp_path / "s"
    payload = {"session_id": "s1", "hook_event_name": "UserPromptSubmit", "prompt": "hello"}
    assert hook(store, json.dumps(payload))[0] == 0
    with sqlite3.connect(store / "catalog.sqlite3") as conn:
        conn.execute("UPDATE spool SET attempts = ?", (MAX_ATTEMPTS - 1,))
        conn.execute("UPDATE spool SET payload = '[1, 2]'")  # unreadable as a record: fails again
    with open_fake(store) as memory:
        assert memory.drain_spool() == 1
        assert memory.list() == [] and spooled(store) == 0
    assert (store / "spool-rejected.jsonl").exists()


# -- import -------------------------------------------------------------------------------------------------


def vector(values: list[float]) -> str:
    return base64.b64encode(np.asarray(values, dtype="<f4").tobytes()).decode("ascii")


def export_file(tmp_path: Path, memories: list[dict[str, Any]]) -> Path:
    path = tmp_path / "export.json"
    base = {"type": "action", "content": "x", "metadata": {}, "source": "manual", "created_at": 1.7e9}
    records = [{**base, "id": f"action_20240101000000000000_{i:08x}", **m} for i, m in enumerate(memories)]
    path.write_text(
        json.dumps({"format": "remindful-export", "version": 1, "count": len(records), "memories": records})
    )
    return path


def test_import_names_every_bad_record_on_its_own_line_and_imports_nothing(
    memory: remindful.MemoryManager, tmp_path: Path
) -> None:
    good = vector([1.0] + [0.0] * 383)
    path = export_file(
        tmp_path,
        [
            {"embedding": good},
            {"embedding": vector([float("nan")] + [0.0] * 383)},
            {"created_at": 1e30},
            {"id": "bad id with spaces"},
            {"embedding": vector([1.0, 0.0])},
            {"embedding": vector([float("inf")] * 384)},
            {"expires_at": float("-inf")},
            {"importance": 7},
        ],
    )
    with pytest.raises(ValidationError) as caught:
        memory.import_memories(path)
    lines = str(caught.value).splitlines()
    assert lines[0] == "Invalid 'memories': 7 of 8 records are invalid, nothing was imported:"
    fields = [line.split("'")[1] for line in lines[1:]]
    assert fields == [
        "memories[1].embedding",
        "memories[2].created_at",
        "memories[3].id",
        "memories[4].embedding",
        "memories[5].embedding",
        "memories[6].expires_at",
        "memories[7].importance",
    ]
    assert "NaN or infinite" in lines[1] and "from 0001-01-01 to 9999-12-31" in lines[2]
    assert "2 values; expected 384, as memories[0] has" in lines[4]
    assert memory.stats().total_memories == 0


def test_an_import_of_valid_records_still_searches(memory: remindful.MemoryManager, tmp_path: Path) -> None:
    path = export_file(tmp_path, [{"content": f"note {i}", "embedding": vector([1.0] + [0.0] * 383)} for i in range(3)])
    assert memory.import_memories(path).imported == 3
    assert memory.search("note 1")  # the imported vectors are searchable (a NaN one broke every search)
