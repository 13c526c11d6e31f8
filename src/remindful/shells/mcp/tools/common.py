"""What every MCP tool module shares: registration, the order calls take effect in, errors, annotations.

Contract of every memory tool: on success it answers a dict with ``"success": true`` and its data.
Anything else is a tool error — the SDK's :class:`ToolError`, which the client receives as a
result with ``isError: true`` and one line of text an agent can act on:

- a remindful error (a bad value, a memory not found, memory disabled) is translated here, at
  the edge, keeping its message: it names the field and the expected form ("Invalid 'content':
  expected a non-empty string"), or says what to do next;
- an ill-typed or missing argument is refused by the SDK from the tool's signature, naming the
  parameter, and an unknown argument by :func:`reject_unknown_arguments`;
- anything else is a bug: the SDK logs its traceback and tells the client only "Error executing
  tool <name>", and the server keeps serving.
"""

from __future__ import annotations

import functools
import inspect
import logging
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, Literal, Protocol

import anyio
import anyio.to_thread
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import ValidatorFunctionWrapHandler, WithJsonSchema, WrapValidator

from remindful.engine.deferred import WRITER
from remindful.errors import RemindfulError

if TYPE_CHECKING:
    from mcp.server.context import CallNext, HandlerResult, ServerRequestContext

    from remindful.api import MemoryManager

log = logging.getLogger("remindful.mcp")

#: Returns the server's MemoryManager, raising MemoryDisabledError (or the ConfigError that kept it
#: from opening) when memory cannot be used: see :func:`remindful.shells.mcp.server.build_server`.
GetManager = Callable[[], "MemoryManager"]


def _none_or_text(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    return None if value is None else handler(value)


#: An optional free text (default None) for a tool's parameter. The SDK parses a string argument as
#: JSON unless its parameter is plain ``str``: under ``str | None`` the text ``{"a": 1}`` arrived as
#: a dict (and was refused), ``null`` as None. So the annotation the SDK sees is ``str``, and a null
#: is let through by a validator; type checkers see ``str | None``. Its JSON schema says what it
#: takes, ``anyOf [string, null]``: ``"type": "string"`` with the default null is a schema that
#: refuses its own default (a strict validator rejects it).
if TYPE_CHECKING:
    OptionalText = str | None
else:
    OptionalText = Annotated[
        str,
        WrapValidator(_none_or_text),
        WithJsonSchema({"anyOf": [{"type": "string"}, {"type": "null"}]}),
    ]

#: The memory types, as the tools' JSON schema lists them (a test keeps this in step with MemoryType).
MemoryTypeName = Literal["screen", "action", "workflow", "conversation", "document", "knowledge"]

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

    Every call runs as one writer, the server's (:data:`remindful.engine.deferred.WRITER`): a
    search waits for the vectors of a large ``memory_store_batch`` made before it, though each
    call runs in a worker thread of its own.
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
            return await anyio.to_thread.run_sync(functools.partial(self._call, fn, kwargs))
        finally:
            self._running.remove(mine)
            mine[1].set()

    def _call(self, fn: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
        """``fn(**kwargs)`` as the server's writer (in the worker thread)."""
        token = WRITER.set(self)
        try:
            return fn(**kwargs)
        finally:
            WRITER.reset(token)


_ORDERS: weakref.WeakKeyDictionary[Any, ArrivalOrder] = weakref.WeakKeyDictionary()


class ResumedSessions:
    """The session each client of one server resumed (``memory_resume_session``): its searches,
    context and suggestions rank that session's memories higher, and no other client's do (one
    HTTP server serves many agents through one MemoryManager).

    A client is its MCP session: the ``Mcp-Session-Id`` the streamable HTTP transport checks on
    every request. Requests without one count as one client: over stdio that is the process's only
    client; over HTTP, clients of the sessionless (2026) protocol, which nothing tells apart. The
    records of the ``MAX_CLIENTS`` clients that resumed last are kept. Thread-safe (tools run in
    worker threads).
    """

    MAX_CLIENTS = 1000

    def __init__(self) -> None:
        self._by_client: OrderedDict[str | None, str] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def client(ctx: Context) -> str | None:
        """The client ``ctx``'s request comes from (None: the only one)."""
        headers = ctx.headers
        return headers.get(MCP_SESSION_ID_HEADER) if headers is not None else None

    def of(self, ctx: Context) -> str | None:
        """The session the client of ``ctx`` resumed, or None."""
        with self._lock:
            return self._by_client.get(self.client(ctx))

    def resume(self, ctx: Context, session_id: str) -> None:
        """The client of ``ctx`` resumed ``session_id`` (instead of any it resumed before)."""
        client = self.client(ctx)
        with self._lock:
            self._by_client[client] = session_id
            self._by_client.move_to_end(client)
            while len(self._by_client) > self.MAX_CLIENTS:
                self._by_client.popitem(last=False)

    def forget(self, session_id: str | None = None) -> None:
        """No client has ``session_id`` (deleted) resumed any more; with None, none has any
        (the store was cleared or restored)."""
        with self._lock:
            for client, resumed in list(self._by_client.items()):
                if session_id is None or resumed == session_id:
                    del self._by_client[client]


_RESUMED: weakref.WeakKeyDictionary[Any, ResumedSessions] = weakref.WeakKeyDictionary()


def resumed_sessions(mcp: Any) -> ResumedSessions:
    """The :class:`ResumedSessions` of the MCPServer ``mcp`` (one per server)."""
    return _RESUMED.setdefault(mcp, ResumedSessions())


def tool(mcp: Any, annotations: ToolAnnotations) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register ``fn`` as a tool of the MCPServer ``mcp`` (``mcp.add_tool``), its docstring
    dedented as the description, ``annotations`` as its hints.

    The SDK sees ``fn``'s signature (the input schema) but calls it through ``mcp``'s
    :class:`ArrivalOrder` (a tool not annotated read-only counts as a write), in a worker thread,
    and any :class:`~remindful.errors.RemindfulError` it raises becomes a :class:`ToolError`."""
    order = _ORDERS.setdefault(mcp, ArrivalOrder())
    writes = not annotations.read_only_hint

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        async def in_order(**kwargs: Any) -> Any:
            try:
                return await order.run(writes, fn, kwargs)
            except RemindfulError as exc:
                raise tool_error(exc) from exc

        mcp.add_tool(in_order, description=inspect.cleandoc(fn.__doc__ or ""), annotations=annotations)
        return fn

    return register


class Result(Protocol):
    """A MemoryManager result (:mod:`remindful.model`): its ``to_dict()`` is its JSON form."""

    def to_dict(self) -> dict[str, Any]: ...


def client_scope(scope: str | list[str] | None) -> str | list[str] | None:
    """A read scope as an MCP client may ask for it: any but ``all``, which reads every project's
    memories and is the user's to ask for (the command line, the library). Raises ValidationError
    naming ``scope`` for ``all``."""
    from remindful.errors import ValidationError

    parts = [scope] if isinstance(scope, str) else scope or []
    if any(isinstance(p, str) and word.strip().lower() == "all" for p in parts for word in p.split(",")):
        raise ValidationError(
            "scope",
            "'all' (every project's memories) is only for the user (the command line or the library); "
            "an MCP client reads 'here', 'user', 'project', 'unscoped' or 'project:NAME'",
        )
    return scope


def ok(result: Result) -> dict[str, Any]:
    """A tool's answer for a manager's result: ``{"success": true, ...its JSON form}``."""
    return {"success": True, **result.to_dict()}


def one_line(exc: RemindfulError) -> str:
    """A remindful error's message (and suggestion) on one line."""
    return " ".join(str(exc).split("\n"))


def tool_error(exc: RemindfulError) -> ToolError:
    """The tool error for a remindful error."""
    return ToolError(one_line(exc))


def reject_unknown_arguments(mcp: Any) -> Callable[..., Any]:
    """Server middleware: a ``tools/call`` naming an argument the tool does not take is a tool
    error listing the ones it does. (The SDK drops unknown arguments without a word, so a
    misspelt optional argument — ``memory_typ`` — would silently fall back to its default.)"""
    known: dict[str, list[str]] = {}

    async def middleware(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        params = ctx.params
        if ctx.method == "tools/call" and isinstance(params, dict) and isinstance(params.get("arguments"), dict):
            if not known:
                for listed in await mcp.list_tools():
                    known[listed.name] = list(listed.input_schema.get("properties", {}))
            name = params.get("name")
            expected = known.get(name) if isinstance(name, str) else None
            unknown = [key for key in params["arguments"] if expected is not None and key not in expected]
            if expected is not None and unknown:
                what = "argument" if len(unknown) == 1 else "arguments"
                names = ", ".join(repr(key) for key in unknown)
                takes = f"it takes: {', '.join(expected)}" if expected else "it takes no arguments"
                text = f"Error executing tool {name}: unknown {what} {names}; {takes}"
                return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)
        return await call_next(ctx)

    return middleware


__all__ = [
    "DESTRUCTIVE",
    "READ_ONLY",
    "UPDATE",
    "WRITE",
    "ArrivalOrder",
    "GetManager",
    "MemoryTypeName",
    "OptionalText",
    "Result",
    "ResumedSessions",
    "client_scope",
    "ok",
    "one_line",
    "reject_unknown_arguments",
    "resumed_sessions",
    "tool",
    "tool_error",
]
