"""A program that stores and exits without close() (issue 15: it aborted with "terminate called
without an active exception", exit 134, when the background indexer was inside native code as the
interpreter shut down). Real processes, the real embedder and the real embedded Chroma."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import remindful
from remindful.testing import catalog_rows

pytestmark = pytest.mark.slow

STORE_AND_EXIT = """
import sys, remindful
m = remindful.open(sys.argv[1])
m.store_batch([{"content": f"note {i} about the build pipeline and its cache"} for i in range(50)])
if sys.argv[2] == "search":
    m.search("build pipeline")
"""


def run(path: Path, then: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", STORE_AND_EXIT, str(path), then], capture_output=True, text=True, timeout=120
    )


def test_storing_and_exiting_without_close_exits_0_and_keeps_everything(tmp_path: Path) -> None:
    for attempt in range(3):
        done = run(tmp_path / f"s{attempt}", "exit")
        assert (done.returncode, done.stderr) == (0, ""), f"run {attempt}"
        assert catalog_rows(tmp_path / f"s{attempt}", "SELECT count(*) FROM memories") == [(50,)]
    with remindful.open(tmp_path / "s0") as memory:  # what was left is indexed at the next open
        assert memory.search("build pipeline", limit=1)
        memory.engine.flush()
    assert catalog_rows(tmp_path / "s0", "SELECT count(*) FROM memories WHERE indexed = 0") == [(0,)]


def test_a_program_that_exits_without_close_is_not_taken_for_a_crash(tmp_path: Path) -> None:
    # A holder marker left behind makes the next open run the seconds-long health check of the files.
    done = run(tmp_path / "s", "search")
    assert (done.returncode, done.stderr) == (0, "")
    assert not list((tmp_path / "s" / "index.holders").glob("*"))
