"""tests/requirements.py: a test that lacks something of the machine skips on a developer's machine
and fails in CI, through the function and through the mark alike."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import requirements


def test_missing_skips_outside_ci_and_fails_in_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(requirements, "IN_CI", False)
    with pytest.raises(pytest.skip.Exception, match="needs root"):
        requirements.missing("root")
    monkeypatch.setattr(requirements, "IN_CI", True)
    with pytest.raises(pytest.fail.Exception, match="CI lacks root"):
        requirements.missing("root")


@pytest.mark.parametrize(("ci", "outcome"), [("", "1 passed, 1 skipped"), ("true", "1 passed, 1 error")])
def test_an_unmet_mark_skips_or_fails_in_ci(tmp_path: Path, ci: str, outcome: str) -> None:
    tests = Path(__file__).resolve().parent
    (tmp_path / "test_needs.py").write_text(
        textwrap.dedent(
            """
            from requirements import requires

            @requires(False, "a thing this machine lacks")
            def test_it():
                pass

            @requires(True, "a thing this machine has")
            def test_met():
                pass
            """
        )
    )
    env = {"PATH": "/usr/bin:/bin", "CI": ci, "HOME": str(tmp_path)}
    pyproject = str(tests.parent / "pyproject.toml")
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "conftest", "-c", pyproject]
    argv += ["--rootdir", str(tests.parent), "--confcutdir", str(tests), str(tmp_path / "test_needs.py")]
    env["PYTHONPATH"] = str(tests)  # conftest.py, loaded as a plugin, and requirements.py
    done = subprocess.run(argv, capture_output=True, text=True, cwd=tests, env=env, check=False)
    assert outcome in done.stdout, done.stdout + done.stderr
