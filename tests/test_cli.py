"""The CLI through typer's runner (real Chroma, fake embedder for speed) and as a real process."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from remindful.shells.cli.app import app

runner = CliRunner()
README = Path(__file__).resolve().parents[1] / "README.md"


@pytest.fixture
def store_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("REMINDFUL_EMBEDDINGS__BACKEND", "fake")
    path = tmp_path / "cli-store"
    monkeypatch.setenv("MEMORY_STORAGE_PATH", str(path))
    return path


def invoke(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.output


def test_store_search_get_list_delete_round_trip(store_path: Path) -> None:
    code, out = invoke("store", "Clicked the login button", "--type", "action", "--metadata", '{"success": true}')
    assert code == 0, out
    memory_id = out.strip()
    assert memory_id.startswith("action_")
    code, out = invoke("search", "login button", "--json")
    assert code == 0, out
    found = json.loads(out)
    assert found["success"] and found["memories"][0]["id"] == memory_id
    code, out = invoke("search", "login", "--filter", '{"success": false}', "--json")
    assert json.loads(out)["count"] == 0
    code, out = invoke("get", memory_id, "--json")
    assert json.loads(out)["metadata"] == {"success": True}
    code, out = invoke("list", "--json")
    assert [m["id"] for m in json.loads(out)] == [memory_id]
    code, out = invoke("list", "--since", "2000-01-01", "--until", "2999-12-31T23:59:59Z", "--json")
    assert [m["id"] for m in json.loads(out)] == [memory_id]
    code, out = invoke("list", "--until", "2000-01-01", "--json")
    assert (code, json.loads(out)) == (0, [])
    code, out = invoke("list", "--since", "last week")
    assert code == 2 and "Invalid 'since'" in out
    code, out = invoke("stats", "--json")
    assert json.loads(out)["collections"]["action_memories"]["count"] == 1
    code, out = invoke("delete", memory_id)
    assert code == 0
    code, out = invoke("get", memory_id)
    assert code == 1 and "Memory not found" in out


def test_bad_input_exits_2_with_the_field(store_path: Path) -> None:
    code, out = invoke("store", "x", "--type", "bogus")
    assert code == 2 and "type" in out and "screen" in out
    code, out = invoke("search", "x", "--filter", "{not json")
    assert code == 2 and "filter" in out
    code, out = invoke("search", "x", "--since", "yesterday")
    assert code == 2 and "Invalid 'since'" in out and "ISO 8601" in out


@pytest.mark.parametrize("command", [["search", "x"], ["stats"], ["list"]])
def test_invalid_settings_are_a_one_line_error_not_a_traceback(
    store_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    """Settings are read when a command opens the store, outside its own error handling: an
    invalid one went out as a traceback."""
    from remindful.shells import cli

    monkeypatch.setenv("REMINDFUL_SEARCH__CANDIDATES", "-3")
    monkeypatch.setattr(sys, "argv", ["remindful", *command])
    with pytest.raises(SystemExit) as info:
        cli.main()
    err = capsys.readouterr().err
    assert info.value.code == 2, err
    assert "search.candidates" in err and ">= 1" in err and "Traceback" not in err


def test_reindex_rebuilds_from_the_catalog(store_path: Path) -> None:
    for i in range(3):
        invoke("store", f"memory {i}", "--type", "screen")
    code, out = invoke("reindex", "--reset")
    assert code == 0, out
    assert "reindexed 3" in out and "screen_memories 3" in out


def test_config_shows_effective_values(store_path: Path) -> None:
    code, out = invoke("config", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["storage"]["path"] == str(store_path)
    assert data["embeddings"]["backend"] == "fake"
    code, out = invoke("config", "--defaults", "--json")
    assert json.loads(out)["embeddings"]["backend"] == "onnx"


def test_help_does_not_import_heavy_packages() -> None:
    code = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from remindful.shells.cli.app import app\n"
        "result = CliRunner().invoke(app, ['--help'])\n"
        "assert result.exit_code == 0, result.output\n"
        "heavy = [m for m in ('chromadb', 'onnxruntime', 'torch', 'tokenizers', 'psycopg') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_search_of_a_small_store_opens_no_vector_index(store_path: Path) -> None:
    """A command runs once: scoring a small store exactly from the catalog, its search did not need
    the index, yet asked for it in the background, and exit waited for chromadb's import and
    load (2 s of a 4 s `remindful search`)."""
    assert invoke("store", "the staging database listens on port 6543", "--session", "s1")[0] == 0
    code = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from remindful.shells.cli.app import app\n"
        "for args in (['search', 'staging port'], ['search', 'which port', '--session', 's1'], ['context', 'port?']):\n"
        "    result = CliRunner().invoke(app, args)\n"
        "    assert result.exit_code == 0 and '6543' in result.output, result.output\n"
        "print('chromadb' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False"]


def test_every_command_has_help_and_is_in_the_readme() -> None:
    readme = README.read_text()
    for command in app.registered_commands:
        name = command.name or command.callback.__name__  # type: ignore[union-attr]
        assert command.callback.__doc__, name  # type: ignore[union-attr]
        assert re.search(rf"remindful (--\S+ \S+ )?{name}\b", readme), f"`remindful {name}` missing from README"


def test_token_prints_the_stores_http_token(store_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code, out = invoke("token")
    token = out.strip()
    assert code == 0 and len(token) >= 32
    token_file = store_path / "http_token"
    assert token_file.read_text().strip() == token and stat.S_IMODE(token_file.stat().st_mode) == 0o600
    assert invoke("token")[1].strip() == token  # kept, not generated again
    monkeypatch.setenv("REMINDFUL_HTTP_TOKEN", "from-the-environment")
    assert invoke("token")[1].strip() == "from-the-environment"


def test_mcp_config_without_a_console_script_runs_no_code_of_the_clients_directory(
    store_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a `remindful` beside the interpreter the config runs `python -m`, in the directory the
    client starts it in (a project): nothing of that directory may be imported (a json.py there was)."""
    real_exists = Path.exists
    monkeypatch.setattr(Path, "exists", lambda self: self.name != "remindful" and real_exists(self))
    code, out = invoke("mcp-config")
    assert code == 0, out
    server = json.loads(out)["mcpServers"]["remindful"]
    assert server["command"] == sys.executable
    monkeypatch.undo()
    project, marker = tmp_path / "project", tmp_path / "imported"
    project.mkdir()
    (project / "json.py").write_text(f"open({str(marker)!r}, 'w').close()\nraise ImportError('project code')\n")
    done = subprocess.run(
        [server["command"], *server["args"][:-1], "--help"], cwd=project, capture_output=True, text=True
    )
    assert done.returncode == 0 and "serve" in done.stdout, done.stderr
    assert not marker.exists()


def test_mcp_config_names_this_installation_by_its_absolute_path(store_path: Path) -> None:
    """Issue 24: a bare `remindful` in a desktop client's config does not resolve outside the venv."""
    code, out = invoke("mcp-config")
    assert code == 0, out
    server = json.loads(out)["mcpServers"]["remindful"]
    command = Path(server["command"])
    assert command.is_absolute() and command.exists()
    assert server["args"][-1] == "serve" and server["env"] == {"MEMORY_STORAGE_PATH": str(store_path)}
    done = subprocess.run([str(command), *server["args"][:-1], "--help"], capture_output=True, text=True)
    assert done.returncode == 0 and "serve" in done.stdout
    code, out = invoke("mcp-config", "--client", "claude-code")
    assert code == 0 and out.startswith("claude mcp add remindful ") and f" -- {command} " in out
    code, out = invoke("mcp-config", "--client", "vscode")
    assert code == 2 and "Invalid '--client': expected json or claude-code, got 'vscode'" in out


def _shown_ids(table: str, full: list[str]) -> list[str]:
    """The ids a table shows: the words that start one of ``full``."""
    return [w for w in table.split() if "_" in w and any(f.startswith(w) for f in full)]


def test_tables_show_short_unique_ids_that_commands_take_back(store_path: Path) -> None:
    """Issue 35: at 80 columns the tables cut ids (``knowledge_20261128…``), and get / delete /
    delete-session needed the whole id."""
    ids = [invoke("store", f"note number {i} about the deploy", "--type", "knowledge", "-s", "sess-a")[1].strip()
           for i in range(3)]  # fmt: skip
    invoke("store", "another session's note", "--type", "knowledge", "-s", "sess-b")
    code, table = invoke("list", "--type", "knowledge")
    assert code == 0, table
    assert "…" not in table.replace("deploy…", "")  # no id cut with an ellipsis
    shown = _shown_ids(table, ids)
    assert len(shown) == 3 and all(len(s) < len(ids[0]) for s in shown), table
    assert sorted(next(f for f in ids if f.startswith(s)) for s in shown) == sorted(ids)
    code, out = invoke("get", shown[0], "--json")
    assert code == 0 and json.loads(out)["id"].startswith(shown[0])
    # A prefix that several ids start with: one line naming them, nothing done.
    code, out = invoke("delete", "knowledge_")
    assert code == 2 and len(out.strip().splitlines()) == 1, out
    assert "start of several memory ids" in out and ids[0] in out
    code, out = invoke("delete", shown[1])
    assert code == 0 and out.strip() == f"deleted {next(f for f in ids if f.startswith(shown[1]))}"
    # Sessions: the same.
    code, table = invoke("sessions")
    assert "sess-a" in table and "sess-b" in table
    code, out = invoke("delete-session", "sess", "--yes")
    assert code == 2 and "sess-a" in out and "sess-b" in out and len(out.strip().splitlines()) == 1
    code, out = invoke("delete-session", "sess-b", "--yes")
    assert code == 0 and "of sess-b" in out


def test_not_found_names_the_command_lines_verbs(store_path: Path) -> None:
    code, out = invoke("get", "knowledge_2099")
    assert code == 1 and len(out.strip().splitlines()) == 1
    assert "Memory not found: 'knowledge_2099'" in out and "`remindful search TEXT`" in out
    assert "memory_search" not in out and "()" not in out
    code, out = invoke("delete-session", "no-such-session", "--yes")
    assert code == 1 and "`remindful sessions`" in out and "memory_list_sessions" not in out


def _commands() -> list[list[str]]:
    """Every command path of the CLI (``["session", "start"]`` for a sub-command)."""
    import typer.main

    group = typer.main.get_command(app)
    out: list[list[str]] = [[]]

    def walk(command: object, path: list[str]) -> None:
        for name, sub in getattr(command, "commands", {}).items():
            if getattr(sub, "hidden", False):
                continue
            out.append([*path, name])
            walk(sub, [*path, name])

    walk(group, [])
    return out


@pytest.mark.parametrize("words", _commands(), ids=lambda w: " ".join(w) or "remindful")
def test_help_reads_in_the_users_words(words: list[str]) -> None:
    """Issue 35: ``<bool>`` on flags, ``<str>``, ``<list[str]>``, ``<float range> [x>=0]``, ``{query}``
    in usage lines, and "The specification's …" in help texts."""
    result = runner.invoke(app, [*words, "--help"], env={"COLUMNS": "120"})
    assert result.exit_code == 0, result.output
    help_text = result.output
    assert not re.search(r"<(bool|str|int|float|list\[|path|float range|int range)", help_text), help_text
    (usage,) = [line for line in help_text.splitlines() if line.strip().startswith("Usage:")]
    assert not re.search(r"\[x[<>]=?", help_text) and "{" not in usage, help_text
    assert "specification" not in help_text.lower()


def test_a_missing_argument_is_one_line_naming_it(store_path: Path) -> None:
    result = runner.invoke(app, ["proxy"])
    assert result.exit_code == 2
    (line,) = result.output.strip().splitlines()
    assert line.startswith("error: ") and "remindful proxy" in line and "'command'" in line, line
    assert "╭" not in result.output and "Usage:" not in result.output
    result = runner.invoke(app, ["get"])
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1 and "'memory_id'" in result.output
    result = runner.invoke(app, ["search", "x", "--limit", "many"])
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1 and "--limit" in result.output
    result = runner.invoke(app, [])  # no command at all: the help, as before
    assert "Usage:" in result.output and "Commands" in result.output


def test_a_relative_path_names_the_same_store_and_its_index_is_never_called_damaged(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """``--path s`` (relative) made the index's health check fail on "relative path can't be expressed
    as a file URI": the sound index was copied aside as damaged and search left it for the catalog."""

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "remindful.shells.entry", "--path", "s", *args],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    stored = cli("store", "the staging database listens on port 6543")
    assert stored.returncode == 0, stored.stderr
    chroma = tmp_path / "s" / "chroma"
    for file in chroma.rglob("*"):  # as a copy leaves them: the next open checks the files
        if file.is_file():
            os.utime(file, (1, 1))
    found = cli("search", "staging database port", "--json")
    assert found.returncode == 0 and "damaged" not in found.stderr, found.stderr
    assert not list(tmp_path.glob("s/chroma.corrupt-*"))
    assert json.loads(found.stdout)["memories"][0]["content"].startswith("the staging database")
