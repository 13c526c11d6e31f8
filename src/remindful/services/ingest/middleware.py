"""Capture the tool calls of any in-process MCP server (``mcp`` SDK ``MCPServer``) as memories.

    from remindful.services.ingest.middleware import capture_tools
    worker = capture_tools(server, lambda: store)            # every tools/call is now remembered

``store`` is the :class:`~remindful.engine.store.Store` the calls are stored in
(``remindful.open(path).engine``).

Each completed ``tools/call`` becomes one memory: tool name, arguments, outcome (success or
error, with the error text), duration and session, as type ``action`` — or ``screen`` for
analysis tools and ``workflow`` for workflow tools
(:class:`~remindful.services.ingest.calls.TypeMapping`, configurable).

Storage is off the request path: the middleware measures, commits the redacted call to the
store's spool (one small SQLite transaction, :mod:`remindful.services.ingest.spooled`) and enqueues
it; a daemon thread (:class:`~remindful.services.ingest.worker.CaptureWorker`) stores it and drops
the spool row. A slow or failing store never delays or changes a tool's answer; failures are
logged and counted, never raised. A process killed right after a tool answered loses no capture:
the next process that owns the store (the daemon, a remindful command) stores what its spool rows
hold, exactly once. The same worker serves ``remindful proxy``
(:mod:`remindful.services.ingest.proxy`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from remindful.services.ingest.calls import ToolCall, TypeMapping, result_outcome
from remindful.services.ingest.worker import CaptureWorker

if TYPE_CHECKING:
    from remindful.services.ingest.ports import CaptureStore
    from remindful.services.ingest.spooled import CaptureSpool

log = logging.getLogger("remindful.services.ingest")


class ToolCaptureMiddleware:
    """An ``MCPServer.middleware`` entry that captures every completed ``tools/call``."""

    def __init__(self, worker: CaptureWorker, *, server_name: str | None = None) -> None:
        self.worker = worker
        self.server_name = server_name

    async def __call__(self, ctx: Any, call_next: Callable[[Any], Any]) -> Any:
        if ctx.method != "tools/call" or ctx.request_id is None:
            return await call_next(ctx)
        params = ctx.params or {}
        started = time.perf_counter()
        try:
            result = await call_next(ctx)
        except BaseException as exc:
            self._submit(params, started, False, f"{type(exc).__name__}: {exc}", None, ctx)
            raise
        if isinstance(result, Mapping) and result.get("resultType") == "input_required":
            return result  # not complete yet: the client retries with the answers
        success, error, text = result_outcome(result)
        if self.worker.spool_made:  # a commit of under a millisecond: on the event loop
            self._submit(params, started, success, error, text, ctx)
        else:  # waits for the worker to make the spool: other requests must not wait with it
            import anyio.to_thread  # loaded with the SDK already; the proxy's path stays light

            await anyio.to_thread.run_sync(self._submit, params, started, success, error, text, ctx)
        return result

    def _submit(
        self, params: Mapping[str, Any], started: float, success: bool, error: str | None, text: str | None, ctx: Any
    ) -> None:
        try:
            headers = getattr(ctx.request, "headers", None) or {}
            self.worker.submit(
                ToolCall(
                    tool=str(params.get("name", "?")),
                    arguments=dict(params.get("arguments") or {}),
                    success=success,
                    duration_ms=(time.perf_counter() - started) * 1000,
                    error=error,
                    result=text,
                    server=self.server_name,
                    mcp_session=headers.get("mcp-session-id"),
                )
            )
        except Exception as exc:  # never let capture break the response
            log.warning("capture failed: %s", exc)


def capture_tools(
    server: Any,
    get_store: Callable[[], CaptureStore],
    *,
    mapping: Callable[[str], str] | Mapping[str, str] | None = None,
    session_id: str | None = None,
    server_name: str | None = None,
    spool: CaptureSpool | None = None,
) -> CaptureWorker:
    """Install tool capture on an ``MCPServer`` (or low-level ``Server``); returns the worker.

    ``mapping`` is a :class:`TypeMapping`, a callable tool name → memory type, or a dict of
    fnmatch patterns → types tried before the defaults. ``get_store`` returns the Store the calls
    are stored in (called in the worker thread). ``spool`` makes captures durable from the
    very first call (default: from the store, once the worker thread has it). Call
    ``worker.close()`` at shutdown to store what is still queued.
    """
    if isinstance(mapping, Mapping):
        mapping = TypeMapping.from_dict(mapping)
    worker = CaptureWorker(get_store, mapping=mapping, session_id=session_id, spool=spool)
    server.middleware.append(ToolCaptureMiddleware(worker, server_name=server_name or getattr(server, "name", None)))
    return worker


__all__ = ["ToolCaptureMiddleware", "capture_tools"]
