"""An asyncio facade over MemoryManager for async hosts (MCP servers, web apps).

Each call runs the synchronous method in a worker thread (``asyncio.to_thread``), so the event
loop never blocks on SQLite, Chroma or the embedder.
"""

from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import Callable, Coroutine
from typing import Any

from remindful.api import MemoryManager, open_manager

_ASYNC_METHODS = (
    "store",
    "store_batch",
    "get",
    "get_batch",
    "update",
    "delete",
    "delete_many",
    "list",
    "search",
    "stats",
    "resume_session",
    "reindex",
    "index_status",
)


class AsyncMemoryManager:
    """``await memory.search("login")``: every MemoryManager method, awaitable."""

    def __init__(self, manager: MemoryManager) -> None:
        self.sync = manager

    def __getattr__(self, name: str) -> Callable[..., Coroutine[Any, Any, Any]]:
        if name not in _ASYNC_METHODS:
            raise AttributeError(name)
        method = getattr(self.sync, name)

        @functools.wraps(method)
        async def call(*args: Any, **kwargs: Any) -> Any:
            return await asyncio.to_thread(method, *args, **kwargs)

        return call

    async def close(self) -> None:
        await asyncio.to_thread(self.sync.close)

    async def __aenter__(self) -> AsyncMemoryManager:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def open_async(path: str | os.PathLike[str] | None = None, **overrides: Any) -> AsyncMemoryManager:
    """Like :func:`remindful.open`, returning the async facade."""
    return AsyncMemoryManager(open_manager(path, **overrides))
