"""Shared fixtures: every test gets its own HOME and storage path; nothing touches ~/.remindful."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings as hypothesis_settings

import remindful

# A throwaway PostgreSQL cluster and a database per test, for the PostgreSQL catalog's tests.
from conftest_postgres import admin, member_url, postgres_cluster, postgres_url  # noqa: F401
from remindful.api import MemoryManager
from remindful.testing import open_fake


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test marked ``requires`` whose need is unmet is skipped, or fails in CI (tests/requirements.py)."""
    from requirements import check

    check(item)


# Property tests check what holds, never how fast: no per-example deadline (hypothesis's default
# 200 ms fails an example that a busy machine merely slowed down).
hypothesis_settings.register_profile("remindful", deadline=None)
hypothesis_settings.load_profile("remindful")


@pytest.fixture(autouse=True)
def isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point HOME at a temp dir and drop every remindful variable from the environment."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for key in list(os.environ):
        if key.startswith("REMINDFUL_") or key == "MEMORY_STORAGE_PATH":
            monkeypatch.delenv(key)
    return home


@pytest.fixture(autouse=True)
def no_daemon_outlives_its_test(tmp_path: Path) -> Iterator[None]:
    """Stop the daemons a test's hook processes started on demand for stores under its
    ``tmp_path`` and left running (they would stop when idle, long after, and load the machine
    meanwhile). Reads ``/proc``: elsewhere nothing is stopped."""
    yield
    import signal
    import time

    proc = Path("/proc")
    if not proc.is_dir():
        return
    mine = str(tmp_path)
    pids = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        words = [a.decode(errors="replace") for a in argv]
        if "--on-demand" in words and any(w.startswith(mine) for w in words):
            pids.append(int(entry.name))
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    for pid in pids:  # up to 10 s (counted in steps: a test may have patched time.monotonic)
        for _ in range(200):
            if not (proc / str(pid)).exists():
                break
            time.sleep(0.05)
        with contextlib.suppress(ProcessLookupError):
            if (proc / str(pid)).exists():
                os.kill(pid, signal.SIGKILL)


@pytest.fixture(autouse=True)
def patient_hooks(monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process hooks wait for their context however busy the machine: the hook's deadline (a
    margin under Claude Code's timeout) is a speed target, measured by bench/hook_latency.py, and a
    test of what the hook prints must not depend on the load. Tests of the deadline set it again."""
    from remindful.shells import hook

    for event in list(hook.CONTEXT_DEADLINE_S):
        monkeypatch.setitem(hook.CONTEXT_DEADLINE_S, event, 120.0)


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The environment of a test's own remindful processes: this test's (its HOME), with the fake
    model (``tests/store_processes.py`` runs the CLI in it)."""
    monkeypatch.setenv("REMINDFUL_EMBEDDINGS__BACKEND", "fake")
    return dict(os.environ)


@pytest.fixture
def anyio_backend() -> str:
    """The ``@pytest.mark.anyio`` tests (MCP clients) run on asyncio only."""
    return "asyncio"


@pytest.fixture
def memory(tmp_path: Path) -> Iterator[MemoryManager]:
    with open_fake(tmp_path / "store") as manager:
        yield manager


@pytest.fixture(scope="session")
def onnx_embedder() -> Any:
    """The real all-MiniLM-L6-v2 embedder, loaded once per test session."""
    from remindful.embed import OnnxMiniLMEmbedder

    return OnnxMiniLMEmbedder()


@pytest.fixture
def real_memory(tmp_path: Path, onnx_embedder: Any) -> Iterator[MemoryManager]:
    """The real thing: ONNX MiniLM and embedded Chroma in a temp dir."""
    with remindful.open(tmp_path / "real", embedder=onnx_embedder) as manager:
        yield manager
