"""One completed tool call, as a capture point saw it: what the middleware and the proxy hand to the
capture worker, and what a spool row of kind ``mcp_tool`` holds (standard library only)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: kept as light as the hook path
if TYPE_CHECKING:
    from typing import Any


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


__all__ = ["ToolCall"]
