"""An asyncio facade over MemoryManager for async hosts (MCP servers, web apps).

Every public method of :class:`~remindful.api.MemoryManager`, with its signature and result type,
as a coroutine: each call runs the synchronous method in a worker thread (``asyncio.to_thread``),
so the event loop never blocks on SQLite, Chroma or the embedder. A test keeps the two in step.
"""

from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, ParamSpec, TypeVar

from remindful.api import MemoryManager, open_manager

P = ParamSpec("P")
R = TypeVar("R")


def _awaitable(
    method: Callable[Concatenate[MemoryManager, P], R],
) -> Callable[Concatenate[AsyncMemoryManager, P], Coroutine[Any, Any, R]]:
    """``method`` of MemoryManager as a coroutine method of AsyncMemoryManager, run in a worker thread."""

    @functools.wraps(method)
    async def call(self: AsyncMemoryManager, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return await asyncio.to_thread(method, self.sync, *args, **kwargs)

    return call


class AsyncMemoryManager:
    """``await memory.search("login")``: every MemoryManager method, awaitable. ``sync`` is the
    MemoryManager it wraps (for its properties: ``settings``, ``path``, ``session_id``...)."""

    def __init__(self, manager: MemoryManager) -> None:
        self.sync = manager

    async def __aenter__(self) -> AsyncMemoryManager:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- lifecycle
    flush = _awaitable(MemoryManager.flush)
    close = _awaitable(MemoryManager.close)
    load_model = _awaitable(MemoryManager.load_model)
    warm_up = _awaitable(MemoryManager.warm_up)
    session_size = _awaitable(MemoryManager.session_size)
    drain_spool = _awaitable(MemoryManager.drain_spool)
    spool_events = _awaitable(MemoryManager.spool_events)
    delete_on_exit = _awaitable(MemoryManager.delete_on_exit)
    markdown_watcher = _awaitable(MemoryManager.markdown_watcher)
    cleanup_scheduler = _awaitable(MemoryManager.cleanup_scheduler)
    check_enabled = _awaitable(MemoryManager.check_enabled)
    # -- writes
    store = _awaitable(MemoryManager.store)
    store_batch = _awaitable(MemoryManager.store_batch)
    update = _awaitable(MemoryManager.update)
    version_of = _awaitable(MemoryManager.version_of)
    delete = _awaitable(MemoryManager.delete)
    delete_by_file_path = _awaitable(MemoryManager.delete_by_file_path)
    delete_many = _awaitable(MemoryManager.delete_many)
    # -- reads
    get = _awaitable(MemoryManager.get)
    get_batch = _awaitable(MemoryManager.get_batch)
    resolve_id = _awaitable(MemoryManager.resolve_id)
    short_ids = _awaitable(MemoryManager.short_ids)
    list = _awaitable(MemoryManager.list)
    search = _awaitable(MemoryManager.search)
    context = _awaitable(MemoryManager.context)
    hook_context = _awaitable(MemoryManager.hook_context)
    failure_warning = _awaitable(MemoryManager.failure_warning)
    resume_session = _awaitable(MemoryManager.resume_session)
    session_size = _awaitable(MemoryManager.session_size)
    stats = _awaitable(MemoryManager.stats)
    # -- scopes
    work_in = _awaitable(MemoryManager.work_in)
    project_of = _awaitable(MemoryManager.project_of)
    seen_from = _awaitable(MemoryManager.seen_from)
    scopes = _awaitable(MemoryManager.scopes)
    user_level = _awaitable(MemoryManager.user_level)
    move_scope = _awaitable(MemoryManager.move_scope)
    bind_project = _awaitable(MemoryManager.bind_project)
    unbind_project = _awaitable(MemoryManager.unbind_project)
    refused_markers = _awaitable(MemoryManager.refused_markers)
    # -- a shared store (PostgreSQL)
    migrate = _awaitable(MemoryManager.migrate)
    team_add = _awaitable(MemoryManager.team_add)
    team_revoke = _awaitable(MemoryManager.team_revoke)
    team_people = _awaitable(MemoryManager.team_people)
    # -- maintenance
    reindex = _awaitable(MemoryManager.reindex)
    doctor = _awaitable(MemoryManager.doctor)
    index_status = _awaitable(MemoryManager.index_status)
    capture_status = _awaitable(MemoryManager.capture_status)
    index_file = _awaitable(MemoryManager.index_file)
    # -- sessions, retention, export, backup
    list_sessions = _awaitable(MemoryManager.list_sessions)
    session_count = _awaitable(MemoryManager.session_count)
    delete_session = _awaitable(MemoryManager.delete_session)
    cleanup = _awaitable(MemoryManager.cleanup)
    dedup = _awaitable(MemoryManager.dedup)
    export = _awaitable(MemoryManager.export)
    import_memories = _awaitable(MemoryManager.import_memories)
    backup = _awaitable(MemoryManager.backup)
    restore = _awaitable(MemoryManager.restore)
    clear_all = _awaitable(MemoryManager.clear_all)
    # -- learning
    capture_conversation = _awaitable(MemoryManager.capture_conversation)
    capture_correction = _awaitable(MemoryManager.capture_correction)
    capture_config_change = _awaitable(MemoryManager.capture_config_change)
    capture_workflow = _awaitable(MemoryManager.capture_workflow)
    create_workflow_from_session = _awaitable(MemoryManager.create_workflow_from_session)
    confirm = _awaitable(MemoryManager.confirm)
    suggest = _awaitable(MemoryManager.suggest)
    analyze_patterns = _awaitable(MemoryManager.analyze_patterns)


def open_async(path: str | os.PathLike[str] | None = None, **overrides: Any) -> AsyncMemoryManager:
    """Like :func:`remindful.open`, returning the async facade."""
    return AsyncMemoryManager(open_manager(path, **overrides))


__all__ = ["AsyncMemoryManager", "open_async"]
