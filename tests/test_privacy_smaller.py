"""Smaller privacy breaks (issue 32, item 6): ONNX Runtime's telemetry off in every process, a
deleted memory's text overwritten in the catalog file (``secure_delete``), and session ids over
:data:`~remindful.runtime.SESSION_ID_MAX_CHARS` refused on every surface but a hook's, which keeps
the event under a shortened id."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agent_in_process import AgentSession
from remindful.api import MemoryManager
from remindful.engine.captures import forget_key
from remindful.errors import ValidationError
from remindful.runtime import SESSION_ID_MAX_CHARS, fit_session_id
from remindful.testing import open_fake
from test_hooks_events import fire, payload


def test_an_embedding_process_leaves_no_onnxruntime_telemetry(tmp_path: Path) -> None:
    home = tmp_path / "fresh-home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REMINDFUL_", "ORT_", "XDG_"))}
    env["HOME"] = str(home)
    code = (
        "import remindful\n"
        f"with remindful.open({str(tmp_path / 's')!r}) as m:\n"
        "    m.store('the staging database listens on port 6543')\n"
        "    assert m.search('staging database port')\n"
    )
    subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True, timeout=300)
    assert not (home / ".cache" / "Microsoft").exists()


def test_a_deleted_memorys_text_is_not_left_in_the_catalog_file(tmp_path: Path) -> None:
    secret = "zanzibarquokka launchcode thirteen"
    with open_fake(tmp_path / "s") as memory:
        for i in range(50):
            memory.store(f"filler memory number {i} about ordinary things")
        gone = memory.store(f"the {secret} is kept here")
        memory.delete(gone)
    conn = sqlite3.connect(tmp_path / "s" / "catalog.sqlite3")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    left = [p.name for p in (tmp_path / "s").iterdir() if p.is_file() and secret.encode() in p.read_bytes()]
    assert left == []


def test_a_long_session_id_is_refused_by_the_library(tmp_path: Path) -> None:
    with open_fake(tmp_path / "s") as memory:
        memory.store("fits", session_id="s" * SESSION_ID_MAX_CHARS)
        with pytest.raises(ValidationError, match=r"'session_id': expected at most 256 characters, got 1048576"):
            memory.store("too long", session_id="s" * 1_048_576)
        for read in (
            lambda: memory.list(session_id="s" * 300),
            lambda: memory.search("x", session_id="s" * 300),
            lambda: memory.delete_session("s" * 300),
        ):
            with pytest.raises(ValidationError, match=r"'session_id': expected at most 256 characters, got 300"):
                read()


def test_a_hook_keeps_the_event_of_a_long_session_id(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "s"
    long_id = "x" * 1_048_576
    code, _ = fire(store, "UserPromptSubmit", payload("UserPromptSubmit", session_id=long_id, prompt="keep my prompt"))
    assert code == 0
    err = capsys.readouterr().err
    assert "session_id: 1048576 characters, more than 256; stored shortened" in err
    assert len(err.strip().splitlines()) == 1
    with open_fake(store) as memory:
        memory.drain_spool()
        kept = memory.list(session_id=fit_session_id(long_id))
        assert [m.content for m in kept if m.type.value == "conversation"] == ["keep my prompt"]
        # what the prompt states is learned under the same shortened id (2eb6052)
        (learned,) = (m for m in kept if m.type.value != "conversation")
        assert learned.metadata["conversation_id"] == fit_session_id(long_id)
    assert len(fit_session_id(long_id)) <= SESSION_ID_MAX_CHARS
    assert fit_session_id(long_id) != fit_session_id(long_id[:-1] + "y")


def test_a_long_session_id_keeps_no_piece_of_itself() -> None:
    """A long id may hold a secret (a pasted key): shortened, nothing of it is kept, not even a
    first part a cut would have left unredactable (the secret matrix's hook.session cell)."""
    secret = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj"
    long_id = ("deploy-" + secret + "\n") * 20
    fitted = fit_session_id(long_id)
    assert fitted.startswith("long-session~") and len(fitted) <= SESSION_ID_MAX_CHARS
    assert not any(secret[i : i + 8] in fitted for i in range(len(secret) - 7))


def test_the_mcp_tools_refuse_a_long_session_id(tmp_path: Path) -> None:
    import anyio
    from mcp import Client

    from remindful.shells.mcp.server import LazyManager, build_server

    lazy = LazyManager(factory=lambda: open_fake(tmp_path / "store"))

    async def call() -> list[tuple[bool, str]]:
        answers = []
        async with Client(build_server(lazy)) as client:
            for tool, arguments in (
                ("memory_store", {"content": "x", "session_id": "s" * 5_000_000}),
                ("memory_list", {"session_id": "s" * 5_000_000}),
            ):
                result = await client.call_tool(tool, arguments)
                answers.append((bool(result.is_error), result.content[0].text))  # type: ignore[union-attr]
        return answers

    try:
        answers = anyio.run(call)
    finally:
        lazy.close()
    for is_error, text in answers:
        assert is_error and "'session_id': expected at most 256 characters, got 5000000" in text
        assert "\n" not in text


# -- tombstones salted per store -------------------------------------------------------------------------


def tombstone_keys(memory: MemoryManager) -> list[str]:
    return [str(r[0]) for r in memory.engine.catalog.read("SELECT key FROM tombstones ORDER BY buried_at")]


def salt_of(memory: MemoryManager) -> list[Any]:
    return memory.engine.catalog.read("SELECT value FROM meta WHERE key = 'tombstone_salt'")


def test_tombstones_are_salted_per_store(tmp_path: Path) -> None:
    """An unsalted hash of the words lets whoever holds the file confirm a guessed sentence, and
    tells which stores forgot the same one: each store salts its tombstones with its own secret."""
    text = "The vault passphrase hint is the dog's name"
    keys = []
    for name in ("a", "b"):
        with open_fake(tmp_path / name) as memory:
            memory.delete(memory.store(text, type="knowledge"))
            keys += tombstone_keys(memory)
            (salt,) = salt_of(memory)
        with open_fake(tmp_path / name) as memory:  # created once
            memory.delete(memory.store("another statement to forget", type="knowledge"))
            assert salt_of(memory) == [salt]
    assert len(keys) == 2 and keys[0] != keys[1]
    assert forget_key(text) not in keys


def test_an_unsalted_tombstone_is_still_honoured_and_migrated(tmp_path: Path) -> None:
    """Tombstones written before the salt (the unsalted hash of the words) keep working: the salted
    key is made from the unsalted one, so they are re-keyed when the salt is created."""
    store = tmp_path / "s"
    AgentSession(store, tmp_path).bash("rm -rf build", "gone")
    with open_fake(store) as memory:
        memory.drain_spool()
        (call,) = (m for m in memory.list(source="hook", limit=10) if m.type.value == "action")
        old_key = forget_key(call.content)
        # deleted the catalog's way (its session windows' index is contentless: a raw DELETE would
        # leave it unable to remove their entries), with no tombstone of its own
        assert memory.engine.catalog.delete_ids([call.id]) == [(call.id, "action")]
        memory.engine.catalog.write(
            lambda c: (
                c.execute(
                    "INSERT INTO tombstones (key, buried_at, reason, memory_id) VALUES (?, 1.0, 'deleted', ?)",
                    (old_key, call.id),
                ).rowcount
            )
        )
        assert salt_of(memory) == []
        AgentSession(store, tmp_path).bash("rm -rf build", "gone")
        memory.drain_spool()
        assert [m for m in memory.list(source="hook", limit=10) if m.type.value == "action"] == []
        memory.delete(memory.store("a statement whose forgetting creates the salt", type="knowledge"))
        assert salt_of(memory) != [] and old_key not in tombstone_keys(memory)
        AgentSession(store, tmp_path).bash("rm -rf build", "gone")
        memory.drain_spool()
        assert [m for m in memory.list(source="hook", limit=10) if m.type.value == "action"] == []
        assert memory.stats().capture["skipped_forgotten"] == 2
