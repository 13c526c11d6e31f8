"""A fuzz corpus over every entry point: the library, the CLI, the MCP server (its stdio front and its
tools through the SDK's client), the hooks, config files and import files.

Each takes malformed input drawn by hypothesis (lone surrogates, undecodable bytes, deep nesting,
huge integers, NaN, wrong types) and must answer it without a traceback and without dying: either
it accepts the input, or it refuses it with one line naming the field at fault.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp import Client
from typer.testing import CliRunner

import remindful
from remindful.errors import ConfigError, RemindfulError, ValidationError
from remindful.shells.cli.app import app
from remindful.shells.hook import run as run_hook
from remindful.shells.mcp.fast_start import unreadable
from remindful.shells.mcp.server import LazyManager, build_server
from remindful.testing import open_fake

FUZZ = settings(
    max_examples=int(os.environ.get("REMINDFUL_FUZZ_EXAMPLES", "40")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)
runner = CliRunner()

# -- the corpus --------------------------------------------------------------------------------------------

SURROGATES = st.sampled_from(["\ud800", "\udbff", "\udc80", "\udcff", "\udfff"])
CHARS = st.one_of(st.characters(), SURROGATES)
TEXT = st.one_of(st.text(CHARS, max_size=40), st.sampled_from(["", " ", "\x00", "\ud800", "ok"]))
# (An integer of over 4,300 digits has no repr, which hypothesis needs: those come as JSON text below.)
HUGE_INT = st.integers(min_value=10**20, max_value=10**400) | st.integers(max_value=-(2**63) - 1)
SCALAR = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    HUGE_INT,
    st.floats(allow_nan=True, allow_infinity=True),
    TEXT,
)
JSONISH = st.recursive(SCALAR, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4))


def deep(depth: int, inner: Any = 1) -> Any:
    value = inner
    for _ in range(depth):
        value = {"a": value}
    return value


METADATA = st.one_of(
    st.dictionaries(TEXT, JSONISH, max_size=5),
    st.builds(deep, st.integers(min_value=15, max_value=200)),  # (hypothesis cannot print much deeper ones)
    JSONISH,
)
TIMESTAMP = st.one_of(st.none(), SCALAR, st.sampled_from(["0001-01-01T00:00:00Z", "9999-12-31", "1e30", "nope"]))


def one_line_naming_a_field(exc: RemindfulError) -> None:
    text = str(exc)
    assert "\n" not in text, text
    if isinstance(exc, ValidationError):
        assert exc.field and text.startswith("Invalid '") and text.isprintable(), text


# -- the library ----------------------------------------------------------------------------------------------


@FUZZ
@given(content=st.one_of(TEXT, SCALAR), metadata=METADATA, timestamp=TIMESTAMP, kind=st.one_of(TEXT, SCALAR))
def test_store_accepts_or_refuses_in_one_line(
    memory: remindful.MemoryManager, content: Any, metadata: Any, timestamp: Any, kind: Any
) -> None:
    try:
        memory_id = memory.store(content, type=kind if kind else "action", metadata=metadata, timestamp=timestamp)
    except ValidationError as exc:
        one_line_naming_a_field(exc)
        return
    stored = memory.get(memory_id)  # what was accepted reads back, and is searchable
    assert stored.content == content
    hits = memory.search(stored.content, limit=100)  # its own words: the same vector, the same terms
    assert memory_id in {hit.id for hit in hits}


@FUZZ
@given(query=st.one_of(TEXT, SCALAR), filters=st.one_of(st.none(), METADATA), limit=st.one_of(st.integers(), SCALAR))
def test_search_accepts_or_refuses_in_one_line(
    memory: remindful.MemoryManager, query: Any, filters: Any, limit: Any
) -> None:
    try:
        memory.search(query, filters=filters, limit=limit)
    except ValidationError as exc:
        one_line_naming_a_field(exc)


# -- the CLI --------------------------------------------------------------------------------------------------

ARG = st.text(st.one_of(st.characters(exclude_characters="\x00"), SURROGATES), max_size=30).filter(
    lambda s: not s.startswith("-")
)
JSON_ARG = st.one_of(
    ARG,
    st.builds(lambda v: json.dumps(v, ensure_ascii=True, default=str) if _dumpable(v) else "{", METADATA),
    st.sampled_from(['{"a":' + "[" * 5000 + "]" * 5000 + "}", '{"a":' + "9" * 5000 + "}", '{"a": NaN}', "[1]"]),
)


def _dumpable(value: Any) -> bool:
    try:
        json.dumps(value, default=str)
    except (ValueError, RecursionError):
        return False
    return True


@pytest.fixture
def cli_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("REMINDFUL_EMBEDDINGS__BACKEND", "fake")
    return tmp_path / "cli"


@pytest.mark.slow
@FUZZ
@given(content=ARG, metadata=JSON_ARG, timestamp=st.one_of(ARG, st.sampled_from(["0001-01-01", "1e30"])))
def test_cli_store_never_shows_a_traceback(cli_store: Path, content: str, metadata: str, timestamp: str) -> None:
    args = ["--path", str(cli_store), "store", content or "x", "--metadata", metadata, "--timestamp", timestamp]
    result = runner.invoke(app, args)
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code in (0, 2), result.output
    if result.exit_code:
        assert len(result.output.strip().splitlines()) == 1 and "Invalid '" in result.output, result.output


@pytest.mark.slow
@FUZZ
@given(query=ARG, flt=JSON_ARG)
def test_cli_search_never_shows_a_traceback(cli_store: Path, query: str, flt: str) -> None:
    result = runner.invoke(app, ["--path", str(cli_store), "search", query or "x", "--filter", flt])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code in (0, 2), result.output
    if result.exit_code:
        assert len(result.output.strip().splitlines()) == 1 and "Invalid '" in result.output, result.output


# -- MCP: the stdio front and the tools -------------------------------------------------------------------------

LINES = st.one_of(
    st.binary(max_size=60),
    st.builds(lambda v: json.dumps(v, default=str) if _dumpable(v) else "{", JSONISH),
    st.builds(
        lambda args: (
            json.dumps(
                {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "tools/call",
                    "params": {"name": "memory_store", "arguments": args},
                },
                default=str,
            )
            if _dumpable(args)
            else "["
        ),
        st.dictionaries(TEXT, JSONISH, max_size=3),
    ),
    st.sampled_from(
        [
            '{"jsonrpc":"2.0","id":2,"method":"x","params":{"a":"\\ud800"}}',
            '{"jsonrpc":"2.0","id":3,"method":"x","params":{"a":' + "[" * 900 + "]" * 900 + "}}",
            '{"jsonrpc":"2.0","id":4,"method":"x","params":{"a":' + "9" * 5000 + "}}",
        ]
    ),
)


@FUZZ
@given(line=LINES)
def test_the_stdio_front_answers_every_line_it_does_not_pass_on(line: bytes | str) -> None:
    error, message = unreadable(line)
    assert (error is None) != (message is None)
    if error is not None:
        assert error["error"]["code"] in (-32700, -32600)
        text = error["error"]["message"]
        assert "\n" not in text and text.split(":")[0] in ("Parse error", "Invalid request"), text
        json.dumps(error)  # answerable


def test_the_stdio_front_names_what_the_sdk_would_silently_drop() -> None:
    surrogate, _ = unreadable('{"jsonrpc":"2.0","id":2,"method":"x","params":{"a":"\\ud800"}}')
    assert surrogate is not None and surrogate["id"] == 2
    assert surrogate["error"]["message"] == (
        "Invalid request: params.a holds a lone UTF-16 surrogate (\\ud800); expected valid Unicode text"
    )
    nesting, _ = unreadable('{"jsonrpc":"2.0","id":3,"method":"x","params":{"a":' + "[" * 900 + "]" * 900 + "}}")
    assert nesting is not None and nesting["id"] == 3
    assert "is nested deeper than 200 levels" in nesting["error"]["message"]
    pair, message = unreadable('{"jsonrpc":"2.0","id":4,"method":"x","params":{"a":"\\ud83d\\ude00"}}')
    assert pair is None and message["params"]["a"] == "\U0001f600"  # a surrogate pair is fine
    shallow, message = unreadable('{"jsonrpc":"2.0","id":5,"method":"x","params":{"a":' + "[" * 150 + "]" * 150 + "}}")
    assert shallow is None and message is not None


def test_http_bodies_the_sdk_misreads_get_the_error_naming_the_field() -> None:
    """Over HTTP the SDK would answer "Parse error: unexpected end of hex escape": the gate in front
    of it answers what stdio answers; every other body reaches the SDK's app untouched."""
    import httpx

    from remindful.shells.mcp.server import ReadableBodies

    seen: list[bytes] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        body, more = b"", True
        while more:
            message = await receive()
            body, more = body + message.get("body", b""), message.get("more_body", False)
        seen.append(body)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    async def post(body: str) -> httpx.Response:
        transport = httpx.ASGITransport(app=ReadableBodies(app))
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return await client.post("/mcp", content=body.encode())

    async def session() -> list[httpx.Response]:
        return [
            await post('{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"arguments":{"content":"\\udc80"}}}'),
            await post('{"jsonrpc":"2.0","id":8,"method":"x","params":{"a":' + "[" * 300 + "]" * 300 + "}}"),
            await post('{"jsonrpc":"2.0","id":9,"method":"x","params":{"a":"\\ud83d\\ude00 fine"}}'),
        ]

    surrogate, deep_one, fine = anyio.run(session)
    assert surrogate.status_code == 400 and surrogate.json()["id"] == 7
    assert surrogate.json()["error"]["message"] == (
        "Invalid request: params.arguments.content holds a lone UTF-16 surrogate (\\udc80); expected valid Unicode text"
    )
    assert deep_one.status_code == 400 and "nested deeper than 200 levels" in deep_one.json()["error"]["message"]
    assert fine.status_code == 200 and seen == [
        b'{"jsonrpc":"2.0","id":9,"method":"x","params":{"a":"\\ud83d\\ude00 fine"}}'
    ]


@pytest.mark.slow
def test_the_mcp_server_answers_malformed_lines_and_keeps_serving(tmp_path: Path) -> None:
    """The real ``remindful serve`` process: each bad line gets its answer, by id, and the next call works."""
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }
    lines = [
        json.dumps(init),
        '{"jsonrpc":"2.0","method":"notifications/initialized"}',
        '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"memory_store","arguments":{"content":"\\ud800"}}}',
        '{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"memory_store","arguments":{"content":"x",'
        '"metadata":{"a":' + "[" * 900 + "]" * 900 + "}}}}",
        '{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"memory_search","arguments":{"query":"x",'
        '"types":["action"]}}}',
        '{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"memory_store","arguments":{"content":"fine"}}}',
    ]
    env = {**os.environ, "MEMORY_STORAGE_PATH": str(tmp_path / "s"), "REMINDFUL_EMBEDDINGS__BACKEND": "fake"}
    env.pop("REMINDFUL_CONFIG", None)
    done = subprocess.run(
        [sys.executable, "-m", "remindful.shells.entry", "serve"],
        input="\n".join(lines) + "\n",
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    answers = {m["id"]: m for m in map(json.loads, done.stdout.splitlines())}
    assert set(answers) == {1, 2, 3, 4, 5}, done.stdout + done.stderr
    assert "lone UTF-16 surrogate" in answers[2]["error"]["message"]
    assert "nested deeper than 200 levels" in answers[3]["error"]["message"]
    assert answers[4]["result"]["isError"] and "unknown argument 'types'" in answers[4]["result"]["content"][0]["text"]
    assert not answers[5]["result"]["isError"]
    assert "Traceback" not in done.stderr, done.stderr


# The SDK's client cannot send (serialise) more than ~100 levels: the deeper lines are the stdio tests' job.
MCP_METADATA = st.one_of(st.dictionaries(TEXT, JSONISH, max_size=5), st.builds(deep, st.integers(15, 90)), JSONISH)
TOOL_CALLS = st.one_of(
    st.tuples(
        st.just("memory_store"), st.fixed_dictionaries({"content": st.one_of(TEXT, SCALAR), "metadata": MCP_METADATA})
    ),
    st.tuples(st.just("memory_store"), st.fixed_dictionaries({"content": st.just("x"), "timestamp": TIMESTAMP})),
    st.tuples(
        st.just("memory_search"), st.fixed_dictionaries({"query": st.one_of(TEXT, SCALAR), "filters": MCP_METADATA})
    ),
    st.tuples(st.just("memory_search"), st.fixed_dictionaries({"query": st.just("x"), "types": JSONISH})),
    st.tuples(st.just("memory_get"), st.fixed_dictionaries({"memory_id": st.one_of(TEXT, SCALAR)})),
    st.tuples(st.just("memory_resume_session"), st.fixed_dictionaries({"session_id": TEXT})),
    st.tuples(st.just("memory_store_batch"), st.fixed_dictionaries({"items": st.lists(JSONISH, max_size=3)})),
)


@pytest.mark.slow
@settings(FUZZ, max_examples=max(1, FUZZ.max_examples // 2))
@given(calls=st.lists(TOOL_CALLS, min_size=1, max_size=4))
def test_mcp_tools_answer_bad_arguments_with_a_tool_error(tmp_path: Path, calls: list[tuple[str, Any]]) -> None:
    lazy = LazyManager(factory=lambda: open_fake(tmp_path / "store"))

    async def session() -> None:
        async with Client(build_server(lazy)) as client:
            for tool, arguments in calls:
                try:
                    result = await client.call_tool(tool, arguments)
                except (ValueError, UnicodeEncodeError):  # the client cannot send it (the stdio tests do)
                    continue
                if result.is_error:
                    assert "Traceback" not in result.content[0].text, result.content[0].text
            assert not (await client.call_tool("memory_stats", {})).is_error  # still serving

    try:
        anyio.run(session)
    finally:
        lazy.close()


# -- hooks ---------------------------------------------------------------------------------------------------

HOOK_INPUT = st.one_of(
    st.text(CHARS, max_size=80),
    st.builds(lambda v: json.dumps(v, default=str) if _dumpable(v) else "{", JSONISH),
    st.builds(
        lambda prompt, extra: json.dumps(
            {"session_id": "s1", "hook_event_name": "UserPromptSubmit", "prompt": prompt, **extra}, default=str
        ),
        st.one_of(TEXT, SCALAR),
        st.dictionaries(TEXT, JSONISH, max_size=3).filter(_dumpable),
    ),
    st.sampled_from(["[" * 5000 + "]" * 5000, '{"session_id": ' + "9" * 5000 + "}", "\ud800"]),
)


@FUZZ
@given(text=HOOK_INPUT, event=st.sampled_from(["UserPromptSubmit", "PreToolUse", "Stop", "Bogus", "SessionStart"]))
def test_the_hook_exits_0_or_1_and_logs_one_line(tmp_path: Path, text: str, event: str) -> None:
    store = tmp_path / "hooks"
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        argv = ["--path", str(store), "hook", event, "--no-context"]
        code = run_hook(argv, stdin=io.StringIO(text), stdout=io.StringIO())
    assert code in (0, 1), err.getvalue()
    assert "Traceback" not in err.getvalue()
    with open_fake(store) as memory:  # whatever was spooled drains (or is set aside), never stuck
        memory.drain_spool()
        pending = memory.capture_status().spool_pending
        assert pending == 0, pending


# -- config files ------------------------------------------------------------------------------------------

YAML_TEXT = st.one_of(
    st.text(st.characters(exclude_categories=("Cs",)), max_size=80),
    st.sampled_from(["memory:\n  limits: {query_chars: [\n", "memory: [\n", "memory:\n  - a\n  b: c\n"]),
    st.builds(
        lambda section, key, value: f"memory:\n  {section}:\n    {key}: {value}\n",
        st.sampled_from(["limits", "retention", "storage", "hooks", "nope"]),
        st.sampled_from(["query_chars", "metadata_depth", "default_retention_days", "max_size_mb", "tiers", "x"]),
        st.sampled_from(["0", "-1", "1e400", "nan", "[]", "{}", "'x'", "9" * 5000, "{medium: {max_items: 2}}"]),
    ),
)


@FUZZ
@given(text=YAML_TEXT)
def test_a_config_file_loads_or_fails_with_one_config_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(text, encoding="utf-8")
    monkeypatch.setenv("REMINDFUL_CONFIG", str(config))
    try:
        remindful.load_settings(tmp_path / "s")
    except ConfigError as exc:
        assert exc.field and "\n" not in str(exc), str(exc)


# -- import files ----------------------------------------------------------------------------------------------

RECORD = st.fixed_dictionaries(
    {"id": st.one_of(st.just("action_20240101000000000000_0000abcd"), TEXT, SCALAR)},
    optional={
        "content": st.one_of(TEXT, SCALAR),
        "type": st.one_of(st.just("action"), TEXT),
        "metadata": METADATA,
        "created_at": st.one_of(st.floats(), HUGE_INT, TEXT),
        "expires_at": SCALAR,
        "importance": SCALAR,
        "access_count": SCALAR,
        "embedding": st.one_of(st.none(), TEXT, st.sampled_from(["AADAfw==", "AAAAAA=="])),
        "session_id": SCALAR,
    },
)


@FUZZ
@given(records=st.lists(RECORD, max_size=4))
def test_an_import_file_imports_or_names_its_bad_records(
    memory: remindful.MemoryManager, tmp_path: Path, records: list[dict[str, Any]]
) -> None:
    if not _dumpable(records):
        return
    base = {"content": "x", "created_at": 1.7e9}
    memories = [{**base, **r} for r in records]
    path = tmp_path / "import.json"
    with contextlib.suppress(ValueError):  # an integer of thousands of digits cannot be written
        path.write_text(json.dumps({"format": "remindful-export", "version": 1, "memories": memories}, default=str))
    try:
        memory.import_memories(path)
    except ValidationError as exc:
        lines = str(exc).splitlines()
        assert all("Invalid '" in line or line.startswith("  ") for line in lines), lines
        return
    for hit in memory.search("x", limit=5):  # whatever was imported searches (no NaN vector got in)
        assert math.isfinite(hit.score)
