"""One completed tool call, as a capture point saw it, and the memory it becomes.

:class:`ToolCall` is what the middleware and the proxy hand to the capture worker, and what a spool
row of kind ``mcp_tool`` holds; :func:`capture_item` turns one into the ``store_batch`` item the
worker (or, after a crash, the drainer) stores, through the capture filters: one line a search can
match (:func:`describe`), its type by the tool's name (:class:`TypeMapping`), the outcome and the
arguments in the metadata. Standard library only (the spooled captures import it).
"""

from __future__ import annotations

import fnmatch
import json
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from remindful.engine.captures import forget_key
from remindful.engine.redact import redact_then_truncate
from remindful.model import OriginKind, make_origin
from remindful.services.ingest.filters import apply_filters, canonical_json, count_skips, filter_for

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: kept as light as the hook path
if TYPE_CHECKING:
    from typing import Any

    from remindful.engine.redact import Redactor
    from remindful.services.ingest.ports import CaptureStore


@dataclass
class ToolCall:
    """One completed tool call, as the middleware or the proxy saw it."""

    tool: str
    arguments: dict[str, Any]
    success: bool
    duration_ms: float
    error: str | None = None
    result: str | None = None
    server: str | None = None
    mcp_session: str | None = None
    finished_at: float = field(default_factory=time.time)


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


def capture_item(
    store: CaptureStore, call: ToolCall, memory_type: str, session_id: str, spool_key: str | None = None
) -> dict[str, Any] | None:
    """The memory to store for ``call`` (a ``store_batch`` item), after the capture filters; None
    when they skip it, or when its text was forgotten (a tombstone: counted as
    ``skipped_forgotten``). ``spool_key`` (the call's spool row) is kept in the metadata, so that a
    drain after a crash can tell the call was already stored. Its ``kind`` is ``failure`` for a
    call that failed, else ``activity``."""
    metadata: dict[str, Any] = {
        "tool": call.tool,
        "arguments": _json_safe(call.arguments),
        "success": call.success,
        "duration_ms": round(call.duration_ms, 3),
        "kind": "activity" if call.success else "failure",
    }
    redactor = filter_for(store).redactor
    for key in ("error", "server", "mcp_session"):
        if getattr(call, key):
            metadata[key] = getattr(call, key)
    if call.error:  # whole errors reach the spool; the memory keeps a redacted, bounded one
        metadata["error"] = redact_then_truncate(call.error, MAX_RESULT_CHARS, redactor)
    kept = apply_capture_filters(
        store, describe(call, redactor), memory_type, call, session_id, metadata, occurrence=spool_key
    )
    if kept is None:
        return None
    content, metadata = kept
    if store.captures.buried([forget_key(content)]):
        count_skips(store.captures, {"skipped_forgotten": 1})
        return None
    if spool_key is not None:
        metadata = {**metadata, "spool_key": spool_key}
    return {
        "content": content,
        "type": memory_type,
        "metadata": metadata,
        "session_id": session_id,
        "timestamp": call.finished_at,
        "source": "mcp_tool",
        "origin": make_origin(OriginKind.TOOL, call.tool),
    }


def trigger_for(memory_type: str, success: bool) -> str:
    """The ``auto_capture.triggers`` switch that governs a capture of this type and outcome."""
    if memory_type == "screen":
        return "ai_analysis"
    if memory_type == "workflow":
        return "workflow_completion"
    return "successful_actions" if success else "failed_actions"


def apply_capture_filters(
    store: CaptureStore,
    content: str,
    memory_type: str,
    call: ToolCall,
    session_id: str,
    metadata: dict[str, Any],
    occurrence: str | None = None,
) -> tuple[str, dict[str, Any]] | None:
    """THE point where a captured call passes the capture filters (issue 4's
    :func:`remindful.services.ingest.filters.apply_filters`): master switch and per-trigger switches,
    session exclusions, mouse moves, the ``min_interval_seconds`` repeat window (same tool, same
    arguments, same outcome) and redaction. Returns the (redacted) content and metadata, or None
    to skip — the reason is logged there. ``occurrence``: the call's spool key, if it was spooled
    (a drain retrying it after a failed store is not a repeat of itself).
    """
    result = apply_filters(
        store,
        content,
        trigger=trigger_for(memory_type, call.success),
        session_id=session_id,
        metadata=metadata,
        signature=canonical_json(["mcp_tool", call.server, call.tool, metadata["arguments"], call.success]),
        action=call.tool,
        at=call.finished_at,
        occurrence=occurrence,
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


__all__ = [
    "DEFAULT_TYPE_PATTERNS",
    "ToolCall",
    "TypeMapping",
    "apply_capture_filters",
    "capture_item",
    "describe",
    "result_outcome",
    "trigger_for",
]
