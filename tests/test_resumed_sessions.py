"""A resumed session is the state of one client: it ranks that client's searches, nobody else's.

A MemoryManager is one client (``resume_session``); a server whose clients share one manager keeps
each client's resumed session itself and passes it with every search (``resumed_session``): the
MCP server per MCP session, the dashboard for its user. The engine holds none: every setting of a
search is its caller's.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
from mcp import Client

from mcp_client import call
from remindful.api import MemoryManager
from remindful.engine.retrieval.search import rank
from remindful.engine.store import Store
from remindful.errors import NotFoundError
from remindful.shells.mcp.server import LazyManager, build_server
from remindful.testing import open_fake
from test_mcp_http import sdk_client, spawned


def two_copies(memory: MemoryManager) -> None:
    """The same text in sessions "old" and "other" ("other" newer): search shows one copy, the
    newer unless a resumed session ranks the other higher."""
    memory.store("configure the build pipeline", session_id="old")
    memory.store("configure the build pipeline", session_id="other")


def test_the_engine_takes_every_search_setting_from_its_caller() -> None:
    """The defaults are the API's (api.py); below it a search states all of them."""
    for function in (Store.search, rank):
        parameters = inspect.signature(function).parameters
        for name in ("limit", "min_score", "resumed_session"):
            assert parameters[name].default is inspect.Parameter.empty, (function.__qualname__, name)
    assert inspect.signature(Store.search).parameters["collapse"].default is inspect.Parameter.empty
    assert inspect.signature(rank).parameters["diverse"].default is inspect.Parameter.empty


def test_a_resumed_session_can_be_passed_with_one_search(memory: MemoryManager) -> None:
    two_copies(memory)
    assert memory.search("build pipeline")[0].session_id == "other"
    assert memory.search("build pipeline", resumed_session="old")[0].session_id == "old"
    assert memory.search("build pipeline")[0].session_id == "other"  # nothing was kept
    assert memory.context("build pipeline", min_score=0, resumed_session="old").hits[0].session_id == "old"
    assert [s.id for s in memory.list_sessions(resumed_session="old") if s.resumed] == ["old"]
    assert not any(s.resumed for s in memory.list_sessions())


def test_a_manager_keeps_the_session_it_resumed(memory: MemoryManager) -> None:
    two_copies(memory)
    assert memory.resume_session("old") == 1 and memory.resumed_session == "old"
    assert memory.search("build pipeline")[0].session_id == "old"
    assert memory.search("build pipeline", resumed_session="other")[0].session_id == "other"  # the request's first
    assert memory.session_size("other") == 1 and memory.resumed_session == "old"  # asking resumes nothing
    with pytest.raises(NotFoundError, match="Session not found"):
        memory.session_size("never-existed")
    memory.delete_session("old", confirm=True)
    assert memory.resumed_session is None


@pytest.mark.anyio
async def test_a_client_resumes_until_the_session_or_everything_is_deleted(tmp_path: Path) -> None:
    """Over MCP (one client in-process): the resumed session ranks the client's searches, context
    and list until it is deleted, or the store cleared; the manager itself resumed nothing."""
    lazy = LazyManager(factory=lambda: open_fake(tmp_path / "store"))
    try:
        async with Client(build_server(lazy)) as client:
            for session_id in ("old", "other", "old2", "other2"):
                await call(client, "memory_store", content="configure the build pipeline", session_id=session_id)

            async def resumed() -> list[str]:
                return [s["id"] for s in (await call(client, "memory_list_sessions"))["sessions"] if s["resumed"]]

            await call(client, "memory_resume_session", session_id="old")
            found = await call(client, "memory_search", query="build pipeline")
            assert found["memories"][0]["session_id"] == "old" and await resumed() == ["old"]
            context = await call(client, "memory_context", task="configure the build pipeline", min_score=0)
            assert "configure the build pipeline" in context["context"]
            assert lazy().resumed_session is None
            await call(client, "memory_delete_session", session_id="old", confirm=True)
            await call(client, "memory_store", content="a new memory of that id", session_id="old")
            assert await resumed() == []
            await call(client, "memory_resume_session", session_id="old2")
            assert await resumed() == ["old2"]
            await call(client, "memory_clear_all", confirm=True)
            await call(client, "memory_store", content="a new memory of that id", session_id="old2")
            assert await resumed() == []
    finally:
        lazy.close()


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.anyio
async def test_over_http_one_clients_resume_reorders_only_its_own_searches(tmp_path: Path) -> None:
    """Two MCP clients of one server (two MCP sessions): what one resumes ranks its searches,
    context and session list, never the other's."""
    with spawned(tmp_path) as served:
        async with sdk_client(served.url, mode="legacy") as a, sdk_client(served.url, mode="legacy") as b:
            await call(a, "memory_store", content="configure the build pipeline", session_id="old")
            await call(a, "memory_store", content="configure the build pipeline", session_id="other")

            async def shown(client: object) -> str:
                found = await call(client, "memory_search", query="build pipeline")  # type: ignore[arg-type]
                return str(found["memories"][0]["session_id"])

            async def resumed(client: object) -> list[str]:
                listed = await call(client, "memory_list_sessions")  # type: ignore[arg-type]
                return [s["id"] for s in listed["sessions"] if s["resumed"]]

            assert (await call(a, "memory_resume_session", session_id="old"))["memory_count"] == 1
            assert await shown(a) == "old" and await resumed(a) == ["old"]
            assert await shown(b) == "other" and await resumed(b) == []
            await call(b, "memory_resume_session", session_id="other")
            assert await shown(a) == "old" and await shown(b) == "other"
            await call(b, "memory_resume_session", session_id="old")
            assert await shown(b) == "old" and await resumed(b) == ["old"]
