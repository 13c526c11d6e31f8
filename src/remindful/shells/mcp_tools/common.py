"""Helpers shared by every MCP tool module: answer shapes, error translation, annotations.

Contract of every memory tool's answer: a dict with ``success``. On success the rest of the dict
is the tool's data; on failure ``error`` holds a message an agent can act on (it names the bad
field and the expected form, or says what to do next), plus ``field`` for bad input and
``reason`` when memory is disabled. Errors are translated here, at the edge: no remindful error
reaches the SDK as an exception, so the server keeps serving.
"""

from __future__ import annotations

import functools
import inspect
import logging
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

import anyio
import anyio.to_thread
from mcp_types import ToolAnnotations

if TYPE_CHECKING:
    from remindful.manager import MemoryManager

log = logging.getLogger("remindful.mcp")

GetManager = Callable[[], "MemoryManager"]

#: The memory types, as the tools' JSON schema lists them (a test keeps this in step with MemoryType).
MemoryTypeName = Literal["screen", "action", "workflow", "conversation", "document", "knowledge"]

DISABLED = "Memory features are disabled"

READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False)
UPDATE = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False)
DESTRUCTIVE = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False)


class ArrivalOrder:
    """Tool calls take effect in the order they reach the server.

    The SDK runs every request at once, each in its own thread, so a client that sends
    ``memory_store`` and then ``memory_search`` without waiting (a script piping requests, an agent
    making parallel calls) could search before the store was written. Here a call waits for the
    earlier calls it could observe or disturb: a read for the earlier writes, a write for every
    earlier call. Reads in a row still run together. The order is taken on the event loop, where
    the SDK starts the requests' tasks in the order it read them.
    """

    def __init__(self) -> None:
        self._running: list[tuple[bool, anyio.Event]] = []

    async def run(self, writes: bool, fn: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
        earlier = [done for writer, done in self._running if writes or writer]
        mine = (writes, anyio.Event())
        self._running.append(mine)
        try:
            for done in earlier:
                await done.wait()
            # Not abandoned on cancellation: the call's effects are done before later calls start.
            return await anyio.to_thread.run_sync(functools.partial(fn, **kwargs))
        finally:
            self._running.remove(mine)
            mine[1].set()


_ORDERS: weakref.WeakKeyDictionary[Any, ArrivalOrder] = weakref.WeakKeyDictionary()


def tool(mcp: Any, annotations: ToolAnnotations) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register a function as a tool of ``mcp``, its docstring dedented as the description.

    The SDK sees ``fn``'s signature, but calls it through ``mcp``'s :class:`ArrivalOrder`: a tool
    not annotated read-only counts as a write."""
    order = _ORDERS.setdefault(mcp, ArrivalOrder())
    writes = not annotations.read_only_hint

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        async def in_order(**kwargs: Any) -> Any:
            return await order.run(writes, fn, kwargs)

        mcp.add_tool(in_order, description=inspect.cleandoc(fn.__doc__ or ""), annotations=annotations)
        return fn

    return register


def failure(error: str, **extra: Any) -> dict[str, Any]:
    """The failure answer: ``{"success": False, "error": error, **extra}``."""
    return {"success": False, "error": error, **extra}


def disabled(get_manager: GetManager) -> dict[str, Any] | None:
    """The "Memory features are disabled" answer if memory is off or unusable, else None: tools
    that ask the user to confirm call this first, so nobody confirms an action that cannot run."""
    from remindful.errors import MemoryDisabledError, RemindfulError

    try:
        get_manager().check_enabled()
    except MemoryDisabledError as exc:
        return failure(f"{DISABLED}: {exc.reason}", reason=exc.reason)
    except RemindfulError:
        return None  # any other problem is reported by run()
    return None


def run(get_manager: GetManager, action: Callable[[MemoryManager], dict[str, Any]]) -> dict[str, Any]:
    """Open the manager (lazily), run ``action`` with it and wrap its dict as a success answer.

    Memory disabled (by config or an unusable storage path) answers ``success: false`` with
    "Memory features are disabled" and the reason, before the action runs. Any
    :class:`~remindful.errors.RemindfulError` becomes a failure answer naming the field (for
    bad input). Anything else is logged and answered as an internal error, never raised.
    """
    from remindful.errors import MemoryDisabledError, RemindfulError

    try:
        manager = get_manager()
        if manager.disabled_reason:
            raise MemoryDisabledError(manager.disabled_reason)
        data = action(manager)
    except MemoryDisabledError as exc:
        return failure(f"{DISABLED}: {exc.reason}", reason=exc.reason)
    except RemindfulError as exc:
        field = getattr(exc, "field", None)
        return failure(str(exc), **({"field": field} if field else {}))
    except Exception as exc:  # a bug must not take the server down; the log has the traceback
        log.exception("memory tool failed")
        return failure(f"Internal error ({type(exc).__name__}): {exc}")
    return {"success": True, **data}


__all__ = [
    "DESTRUCTIVE",
    "DISABLED",
    "READ_ONLY",
    "UPDATE",
    "WRITE",
    "ArrivalOrder",
    "GetManager",
    "MemoryTypeName",
    "disabled",
    "failure",
    "run",
    "tool",
]
