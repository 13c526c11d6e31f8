"""The defects of issue 15 found by trying remindful as a user would; each test failed before its fix."""

from __future__ import annotations

import logging
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from typer.testing import CliRunner

import remindful
from remindful.errors import NotFoundError
from remindful.shells.cli.app import app
from remindful.shells.mcp.server import LazyManager, build_server
from remindful.testing import open_fake

runner = CliRunner()


def ago(days: float) -> datetime:
    return datetime.now(UTC) - timedelta(days=days)


# -- overriding one field of a retention tier ----------------------------------------------------------


def test_one_field_of_a_tier_from_the_environment_merges_with_the_tier_defaults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REMINDFUL_RETENTION__TIERS__MEDIUM__MAX_ITEMS", "2")
    monkeypatch.setenv("REMINDFUL_EMBEDDINGS__BACKEND", "fake")
    result = runner.invoke(app, ["--path", str(tmp_path / "s"), "config"])
    assert result.exit_code == 0, result.output
    settings = remindful.load_settings(tmp_path / "s")
    medium = settings.retention.tiers.medium
    assert (medium.max_items, medium.max_age_days, medium.keep_successful) == (2, 30, True)


def test_one_field_of_a_tier_from_yaml_and_from_open(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("memory:\n  retention:\n    tiers:\n      long_term: {max_items: 7}\n")
    monkeypatch.setenv("REMINDFUL_CONFIG", str(config))
    long_term = remindful.load_settings(tmp_path / "s").retention.tiers.long_term
    assert (long_term.max_items, long_term.max_age_days) == (7, 365)
    assert long_term.keep_criteria is not None and long_term.keep_criteria.successful_workflows
    monkeypatch.delenv("REMINDFUL_CONFIG")
    with open_fake(tmp_path / "o", retention={"tiers": {"recent": {"max_items": 5}}}) as memory:
        recent = memory.settings.retention.tiers.recent
        assert (recent.max_items, recent.max_age_days) == (5, 7)
        assert memory.settings.retention.tiers.medium.max_items == 1000


# -- retention deletes only auto-captured memories for their age ---------------------------------------


def test_retention_keeps_memories_stored_by_hand_and_deletes_old_captures(tmp_path: Path) -> None:
    with open_fake(tmp_path / "s") as memory:
        by_hand = memory.store("the deploy key lives in the vault", timestamp=ago(100))
        ancient_by_hand = memory.store("a note from long ago", timestamp=ago(500))
        captured = memory.store("Clicked the button", source="hook", timestamp=ago(100))
        from_tool = memory.store("Ran the tests", source="mcp_tool", timestamp=ago(40))
        report = memory.cleanup()
        assert report.by_reason == {"retention": 2}
        assert memory.get_batch([by_hand, ancient_by_hand, captured, from_tool])[2:] == [None, None]
        assert memory.get(by_hand) and memory.get(ancient_by_hand)
        assert report.protected_kept == 2


def test_a_hand_stored_memory_still_expires_when_asked_to(tmp_path: Path) -> None:
    with open_fake(tmp_path / "s", **{"privacy.auto_delete_days": 1}) as memory:
        stale = memory.store("temporary", timestamp=ago(3))
        assert memory.cleanup().by_reason == {"expired": 1}
        assert memory.get_batch([stale]) == [None]


# -- not found is said as not found ----------------------------------------------------------------------


def test_resuming_an_unknown_session_says_the_session_is_not_found(memory: remindful.MemoryManager) -> None:
    with pytest.raises(NotFoundError) as caught:
        memory.resume_session("no-such-session")
    assert str(caught.value).startswith("Session not found: 'no-such-session'")
    assert "memory_search" not in str(caught.value) and "memory_list_sessions" in str(caught.value)


@pytest.mark.anyio
async def test_mcp_tools_say_not_found_before_asking_for_a_confirmation(tmp_path: Path) -> None:
    lazy = LazyManager(factory=lambda: open_fake(tmp_path / "store"))
    try:
        async with Client(build_server(lazy)) as client:
            await client.call_tool("memory_store", {"content": "kept", "session_id": "known"})
            answers: dict[str, Any] = {
                "resume": await client.call_tool("memory_resume_session", {"session_id": "nope"}),
                "delete": await client.call_tool("memory_delete_session", {"session_id": "nope"}),
                "restore": await client.call_tool(
                    "memory_restore", {"backup_path": str(tmp_path / "store" / "backups" / "missing.tar.gz")}
                ),
                "known": await client.call_tool("memory_delete_session", {"session_id": "known"}),
            }
    finally:
        lazy.close()
    texts = {name: result.content[0].text for name, result in answers.items()}
    assert all(result.is_error for result in answers.values()), texts
    assert "Session not found: 'nope'" in texts["resume"] and "memory_search" not in texts["resume"]
    assert "Session not found: 'nope'" in texts["delete"] and "confirm" not in texts["delete"]
    assert "backup_path" in texts["restore"] and "no file" in texts["restore"] and "confirm" not in texts["restore"]
    assert "Confirmation required" in texts["known"]  # a real session still asks first


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_a_client_that_can_be_asked_is_not_asked_about_what_is_not_there(tmp_path: Path, mode: str) -> None:
    from mcp_types import ElicitResult

    asked: list[str] = []

    async def answer_yes(ctx: Any, params: Any) -> ElicitResult:
        asked.append(params.message)
        return ElicitResult(action="accept", content={"confirm": True})

    lazy = LazyManager(factory=lambda: open_fake(tmp_path / "store"))
    try:
        async with Client(build_server(lazy), mode=mode, elicitation_callback=answer_yes) as client:
            await client.call_tool("memory_store", {"content": "kept", "session_id": "known"})
            unknown = await client.call_tool("memory_delete_session", {"session_id": "nope"})
            missing = await client.call_tool("memory_restore", {"backup_path": str(tmp_path / "store" / "none.tar.gz")})
            assert asked == []  # nobody was asked about a session or a file that does not exist
            known = await client.call_tool("memory_delete_session", {"session_id": "known"})
    finally:
        lazy.close()
    assert unknown.is_error and "Session not found: 'nope'" in unknown.content[0].text
    assert missing.is_error and "Invalid 'backup_path': no file" in missing.content[0].text
    assert not known.is_error and known.structured_content["deleted"] == 1
    assert asked == ["Delete every memory of this session? A backup is taken first."]


# -- the quota warning, patterns' words, the id of year 1 -------------------------------------------------------


def test_the_quota_warning_shows_a_small_quota_as_it_is(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING), open_fake(tmp_path / "s", **{"storage.max_size_mb": 0.5}) as memory:
        memory.engine.quotas.check_size(0.46)
    (message,) = [r.getMessage() for r in caplog.records if "of its quota" in r.getMessage()]
    assert "(0.46 MB of 0.5 MB)" in message


def test_patterns_name_actions_by_their_words_not_their_stems(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "s"
    with open_fake(path) as memory:
        memory.store_batch(
            [
                {"content": "Navigated to the dashboard - success", "metadata": {"success": True}, "session_id": "a"}
                for _ in range(4)
            ]
        )
    monkeypatch.setenv("REMINDFUL_EMBEDDINGS__BACKEND", "fake")
    for json_out in (["--json"], []):
        result = runner.invoke(app, ["--path", str(path), "patterns", "--metric", "success_rate", *json_out])
        assert result.exit_code == 0, result.output
        assert "navigated succeeds 100% (4/4)" in result.output
        assert "navigat " not in result.output


def test_a_memory_of_the_year_1_gets_a_well_formed_id(memory: remindful.MemoryManager) -> None:
    memory_id = memory.store("the first one", timestamp="0001-01-01T00:00:00Z")
    assert memory_id.startswith("action_00010101000000000000_")
    assert memory.get(memory_id).created_at.year == 1


# -- CLI input that used to end in a traceback -----------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["store", "\udcff\udcfe"], "Invalid 'content': expected valid UTF-8 text; character 0 is the undecodable"),
        (["store", "x", "--metadata", '{"a":"\\ud800"}'], "Invalid 'metadata.a': expected valid UTF-8 text"),
        (["store", "x", "--metadata", '{"a":' + "[" * 5000 + "]" * 5000 + "}"], "Invalid 'metadata': nested too"),
        (["store", "x", "--metadata", '{"a":' + "9" * 5000 + "}"], "Invalid 'metadata': holds an integer of more"),
        (["store", "x", "--timestamp", "99999-01-01"], "Invalid 'timestamp'"),
        (["search", "x", "--filter", '{"a":"\\udfff"}'], "Invalid 'filters.a'"),
        (["search", "x", "--filter", '{"\\u0000":1}'], "Invalid 'filters': bad field name '\\x00'"),
    ],
)
def test_bad_cli_input_is_one_line_naming_the_field(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], says: str
) -> None:
    monkeypatch.setenv("REMINDFUL_EMBEDDINGS__BACKEND", "fake")
    result = runner.invoke(app, ["--path", str(tmp_path / "s"), *args])
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], result.output


def test_undecodable_argv_bytes_in_a_real_process_are_one_line(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "REMINDFUL_EMBEDDINGS__BACKEND": "fake"}
    done = subprocess.run(
        [sys.executable, "-m", "remindful.shells.entry", "--path", str(tmp_path / "s"), "store", b"\xff\xfe"],
        capture_output=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert b"Traceback" not in done.stderr and done.stderr.count(b"\n") == 1, done.stderr
    assert b"Invalid 'content'" in done.stderr
