"""Capture the tool calls of any in-process MCP server (``mcp`` SDK ``MCPServer``) as memories.

    from remindful.services.capture.middleware import capture_tools
    worker = capture_tools(server, lambda: store)            # every tools/call is now remembered

``store`` is the :class:`~remindful.engine.store.Store` the calls are stored in
(``remindful.open(path).engine``).

Each completed ``tools/call`` becomes one memory: tool name, arguments, outcome (success or
error, with the error text), duration and session, as type ``action`` — or ``screen`` for
analysis tools and ``workflow`` for workflow tools (:class:`TypeMapping`, configurable).

Storage is off the request path: the middleware measures, commits the redacted call to the
store's spool (one small SQLite transaction, :mod:`remindful.services.capture.spooled`) and enqueues it; a
daemon thread (:class:`CaptureWorker`) stores it and drops the spool row. A slow or failing store
never delays or changes a tool's answer; failures are logged and counted, never raised. A process
killed right after a tool answered loses no capture: the next process that opens the store (or the
daemon) stores what its spool rows hold, exactly once. The same worker serves ``remindful proxy``
(:mod:`remindful.services.capture.proxy`).
"""

from __future__ import annotations

import fnmatch
import json
import logging
import math
import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from remindful.engine.redact import redact_then_truncate
from remindful.services.capture.calls import ToolCall

if TYPE_CHECKING:
    from remindful.engine.redact import Redactor
    from remindful.engine.store import Store
    from remindful.services.capture.spooled import CaptureSpool

log = logging.getLogger("remindful.services.capture")

#: Default tool-name patterns (fnmatch, case-insensitive) → memory type; the first match wins,
#: anything else is an ``action``.
DEFAULT_TYPE_PATTERNS: tuple[tuple[str, str], ...] = (
    ("*workflow*", "workflow"),
    ("*analy[sz]*", "screen"),
    ("*screenshot*", "screen"),
    ("*screen*", "screen"),
    ("*ocr*", "screen"),
)
MAX_ARG_CHARS = 2000
MAX_RESULT_CHARS = 500


@dataclass(frozen=True)
class TypeMapping:
    """Which memory type a tool's calls are stored as: ordered (pattern, type) pairs."""

    patterns: Sequence[tuple[str, str]] = DEFAULT_TYPE_PATTERNS
    default: str = "action"

    def __call__(self, tool: str) -> str:
        name = tool.lower()
        for pattern, memory_type in self.patterns:
            if fnmatch.fnmatchcase(name, pattern.lower()):
                return memory_type
        return self.default

    @classmethod
    def from_dict(cls, mapping: Mapping[str, str], default: str = "action") -> TypeMapping:
        """``{"vision_*": "screen", "run_flow": "workflow"}`` — these patterns are tried before the defaults."""
        return cls(tuple(mapping.items()) + DEFAULT_TYPE_PATTERNS, default)


def describe(call: ToolCall, redactor: Redactor | None = None) -> str:
    """The memory's content: one line a search can match on tool, outcome and arguments. Long
    arguments, errors and results are redacted whole by ``redactor`` before they are cut, so that
    no secret is split by the cut (``call`` is usually redacted already, by the spool)."""
    args = json.dumps(call.arguments, ensure_ascii=False, sort_keys=True, default=str)
    args = redact_then_truncate(args, MAX_ARG_CHARS + 1, redactor)
    where = f"{call.server}." if call.server else ""
    error = redact_then_truncate(call.error or "error", MAX_RESULT_CHARS, redactor)
    outcome = "succeeded" if call.success else f"failed: {error}"
    text = f"Tool {where}{call.tool} {outcome} ({call.duration_ms:.0f} ms). Arguments: {args}"
    if call.success and call.result:
        text += f". Result: {redact_then_truncate(call.result, MAX_RESULT_CHARS, redactor)}"
    return text


class CaptureWorker:
    """Stores :class:`ToolCall` records as memories from a daemon thread.

    ``submit`` never raises and blocks only for the spool commit: each call is first committed,
    redacted, to the store's spool (``spool``, a :class:`~remindful.services.capture.spooled.CaptureSpool`;
    by default the worker thread makes one from the store as soon as it starts, and a call
    submitted before that waits for it, up to ``SPOOL_WAIT_S``). So a call survives the process
    being killed once it has been answered: the next opener of the store stores it. When the
    bounded queue is full the call is dropped from memory and counted (``stats["dropped"]``) — its
    spool row is still stored once this process has exited. ``get_store`` (returning the
    :class:`~remindful.engine.store.Store`) is called in the worker thread, so loading the store
    costs the host nothing; ``warm=True`` also opens the vector index at once. ``session_id``
    defaults to the spool's session (the store's, one per process).
    :meth:`close` at shutdown stores what is queued.
    """

    #: How long a call submitted before the spool exists waits for the worker to make it; past
    #: that (the store cannot be opened, say) the call is kept in memory only.
    SPOOL_WAIT_S = 10.0

    def __init__(
        self,
        get_store: Callable[[], Store],
        *,
        mapping: Callable[[str], str] | None = None,
        session_id: str | None = None,
        max_queue: int = 10_000,
        warm: bool = False,
        spool: CaptureSpool | None = None,
    ) -> None:
        self._get_store = get_store
        self._warm = warm
        self.mapping = mapping or TypeMapping()
        self.session_id = session_id or (spool.session_id if spool is not None else None)
        self.spool = spool
        self._spool_made = threading.Event()  # set once making the spool succeeded or failed
        if spool is not None:
            self._spool_made.set()
        self._queue: queue.Queue[tuple[ToolCall, str | None, str] | None] = queue.Queue(maxsize=max_queue)
        self.stats = {"captured": 0, "skipped": 0, "failed": 0, "dropped": 0}
        self.memory_ids: list[str] = []
        self._thread = threading.Thread(target=self._run, name="remindful-capture", daemon=True)
        self._thread.start()

    @property
    def spool_made(self) -> bool:
        """Whether :meth:`submit` can commit at once (else it waits for the worker to make the spool)."""
        return self._spool_made.is_set()

    def submit(self, call: ToolCall) -> None:
        memory_type, key = self.mapping(call.tool), None
        self._spool_made.wait(self.SPOOL_WAIT_S)  # at once when the spool is made
        spool = self.spool
        if spool is not None:
            try:
                key, call = spool.append(call, memory_type)
            except Exception as exc:  # not durable, still captured by this process
                log.warning("could not spool the call of %s: %s", call.tool, exc)
        try:
            self._queue.put_nowait((call, key, memory_type))
        except queue.Full:
            self.stats["dropped"] += 1
            log.warning("capture queue full: dropped the call of %s", call.tool)

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every submitted call is stored (or skipped); False on timeout."""
        deadline = time.monotonic() + timeout
        while self._queue.unfinished_tasks:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.005)
        return True

    def close(self, timeout: float = 10.0) -> None:
        """Store what is queued, then stop the thread."""
        self.flush(timeout)
        try:
            self._queue.put(None, timeout=timeout)
        except queue.Full:  # still busy after the timeout: leave the daemon thread behind
            return
        self._thread.join(timeout)
        if self.spool is not None:
            self.spool.close()

    def _run(self) -> None:
        self._start()
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                self._store(*item)
            except Exception as exc:  # capture is best effort; the host must never see it fail
                self.stats["failed"] += 1
                log.warning("could not capture the call of %s: %s", item[0].tool if item else "?", exc)
            finally:
                self._queue.task_done()

    def _start(self) -> None:
        """Make the spool from the store (unless given) and, with ``warm``, open the store and
        its vector index before the first call arrives, so that captures are stored within
        milliseconds even when the host is stopped soon after its last call."""
        try:
            if self.spool is None:
                from remindful.services.capture.spooled import CaptureSpool

                try:
                    spool = CaptureSpool.for_store(self._get_store(), self.session_id)
                    self.session_id = self.session_id or spool.session_id
                    self.spool = spool
                finally:
                    self._spool_made.set()
            if self._warm:
                store = self._get_store()
                if not store.disabled_reason:
                    store.index_status()
        except Exception as exc:  # the first capture reports it again, with its own error
            log.debug("capture start-up failed: %s", exc)

    def _store(self, call: ToolCall, key: str | None, memory_type: str) -> None:
        store = self._get_store()
        spool = self.spool
        if key is None and spool is not None:  # submitted before the spool was made
            key, call = spool.append(call, memory_type)
        item = capture_item(store, call, memory_type, self.session_id or store.session_id, key)
        if item is None:
            self.stats["skipped"] += 1
        else:
            args = ("content", "type", "metadata", "session_id", "timestamp", "source")
            self.memory_ids.append(store.store_batch([{a: item[a] for a in args}])[0])
            self.stats["captured"] += 1
        if key is not None and spool is not None:
            spool.done(key)


def capture_item(
    store: Store, call: ToolCall, memory_type: str, session_id: str, spool_key: str | None = None
) -> dict[str, Any] | None:
    """The memory to store for ``call`` (a ``store_batch`` item), after the capture filters; None
    when they skip it. ``spool_key`` (the call's spool row) is kept in the metadata, so that a
    drain after a crash can tell the call was already stored."""
    metadata: dict[str, Any] = {
        "tool": call.tool,
        "arguments": _json_safe(call.arguments),
        "success": call.success,
        "duration_ms": round(call.duration_ms, 3),
    }
    from remindful.services.capture.filters import filter_for

    redactor = filter_for(store).redactor
    for key in ("error", "server", "mcp_session"):
        if getattr(call, key):
            metadata[key] = getattr(call, key)
    if call.error:  # whole errors reach the spool; the memory keeps a redacted, bounded one
        metadata["error"] = redact_then_truncate(call.error, MAX_RESULT_CHARS, redactor)
    kept = apply_capture_filters(store, describe(call, redactor), memory_type, call, session_id, metadata)
    if kept is None:
        return None
    content, metadata = kept
    if spool_key is not None:
        metadata = {**metadata, "spool_key": spool_key}
    return {
        "content": content,
        "type": memory_type,
        "metadata": metadata,
        "session_id": session_id,
        "timestamp": call.finished_at,
        "source": "mcp_tool",
    }


def trigger_for(memory_type: str, success: bool) -> str:
    """The ``auto_capture.triggers`` switch that governs a capture of this type and outcome."""
    if memory_type == "screen":
        return "ai_analysis"
    if memory_type == "workflow":
        return "workflow_completion"
    return "successful_actions" if success else "failed_actions"


def apply_capture_filters(
    store: Store,
    content: str,
    memory_type: str,
    call: ToolCall,
    session_id: str,
    metadata: dict[str, Any],
) -> tuple[str, dict[str, Any]] | None:
    """THE point where a captured call passes the capture filters (issue 4's
    :func:`remindful.services.capture.filters.apply_filters`): master switch and per-trigger switches,
    session exclusions, mouse moves, the ``min_interval_seconds`` repeat window (same tool, same
    arguments, same outcome) and redaction. Returns the (redacted) content and metadata, or None
    to skip — the reason is logged there.
    """
    from remindful.services.capture.filters import apply_filters, canonical_json

    result = apply_filters(
        store,
        content,
        trigger=trigger_for(memory_type, call.success),
        session_id=session_id,
        metadata=metadata,
        signature=canonical_json(["mcp_tool", call.server, call.tool, metadata["arguments"], call.success]),
        action=call.tool,
        at=call.finished_at,
    )
    return (result.content, result.metadata) if result.allowed else None


def _json_safe(value: Any) -> Any:
    """Arguments as the catalog can hold them: odd objects become strings, NaN/inf become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return str(value)


# -- the SDK middleware ----------------------------------------------------------------------------


def result_outcome(result: Any) -> tuple[bool, str | None, str | None]:
    """(success, error text, result text) of a ``tools/call`` wire result dict."""
    if not isinstance(result, Mapping):
        dump = getattr(result, "model_dump", None)
        result = dump(by_alias=True, mode="json", exclude_none=True) if dump else {}
    texts = [
        c.get("text", "") for c in result.get("content") or [] if isinstance(c, Mapping) and c.get("type") == "text"
    ]
    text = "\n".join(t for t in texts if t) or None
    if result.get("isError"):
        return False, text or "tool error", None  # whole: cut only after redaction (describe)
    return True, None, text


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
    get_store: Callable[[], Store],
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


__all__ = [
    "DEFAULT_TYPE_PATTERNS",
    "CaptureWorker",
    "ToolCall",
    "ToolCaptureMiddleware",
    "TypeMapping",
    "apply_capture_filters",
    "capture_item",
    "capture_tools",
    "describe",
    "result_outcome",
    "trigger_for",
]
