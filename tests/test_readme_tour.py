"""The README's short tour, run as written: its Python snippet and its shell commands, read from
README.md, in a fresh git project with a fresh HOME; what it stores must be in the agent's view
(`remindful context`, its last command) of that directory, and in a search from there."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from agent_session import agent_env

README = Path(__file__).resolve().parents[1] / "README.md"
GIVE_UP_S = 600


def tour() -> tuple[str, list[str]]:
    """The tour's Python snippet and its shell commands (comments dropped), as the README has them."""
    text = README.read_text()
    start = text.index("## A short tour")
    section = text[start : text.index("\n## ", start + 1)]
    python = re.findall(r"```python\n(.*?)```", section, re.S)
    shell = re.findall(r"```bash\n(.*?)```", section, re.S)
    assert len(python) == 1 and len(shell) == 1, "the tour has one Python snippet and one shell block"
    commands = [line.split("  #")[0].strip() for line in shell[0].splitlines() if line.strip()]
    return python[0], commands


def run_tour(tmp_path: Path, backend: str | None) -> dict[str, str]:
    project = tmp_path / "project"
    project.mkdir()
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    extra = {"REMINDFUL_EMBEDDINGS__BACKEND": backend} if backend else {}
    # a wide terminal: at 80 columns (a pipe's default) the search table's content column, beside
    # score, id, type, scope and from, wraps "dark / mode" onto two lines
    env = agent_env(tmp_path / "home", COLUMNS="200", **extra)
    snippet, commands = tour()
    outputs: dict[str, str] = {}
    done = subprocess.run(
        [sys.executable, "-c", snippet], cwd=project, env=env, capture_output=True, text=True, timeout=GIVE_UP_S
    )
    assert done.returncode == 0, done.stderr
    outputs["python"] = done.stdout
    for command in commands:
        assert command.startswith("remindful "), command
        done = subprocess.run(
            shlex.split(command), cwd=project, env=env, capture_output=True, text=True, timeout=GIVE_UP_S
        )
        assert done.returncode == 0, f"{command}: {done.stderr}"
        outputs[command] = done.stdout
    return outputs


def check(outputs: dict[str, str], commands: list[str]) -> None:
    assert "AWS_PROFILE=prod" in outputs["python"]  # the snippet's own search
    assert commands[-1].startswith("remindful context "), "the tour ends with the agent's view"
    view = outputs[commands[-1]]
    assert "AWS_PROFILE=prod" in view, view
    search = next(c for c in commands if c.startswith("remindful search "))
    assert "dark mode" in outputs[search], outputs[search]


def test_the_readme_tour_runs_and_the_agent_here_sees_what_it_stored(tmp_path: Path) -> None:
    check(run_tour(tmp_path, "fake"), tour()[1])


@pytest.mark.slow
def test_the_readme_tour_on_the_real_model(tmp_path: Path) -> None:
    check(run_tour(tmp_path, None), tour()[1])
