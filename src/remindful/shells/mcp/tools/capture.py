"""Capture tools: capture status, and indexing a Markdown file on demand.

(Token-budgeted context for a task is ``memory_context`` in the learning module; the hooks use
:func:`remindful.services.context.gather_context`.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from remindful.errors import ValidationError
from remindful.services.access import tool_path
from remindful.shells.mcp.tools.common import READ_ONLY, WRITE, GetManager, ok, tool


def register(mcp: Any, get_manager: GetManager) -> None:
    """Add memory_capture_status and memory_index_file to ``mcp``."""

    @tool(mcp, READ_ONLY)
    def memory_capture_status() -> dict[str, Any]:
        """Show what automatic capture is doing: hook events waiting in the spool, redactions and
        skipped captures by reason (privacy exclusions, repeats, disabled triggers), and the number
        of Markdown files indexed. Returns {"success": true, "spool_pending", "capture", "files_indexed"}.
        """
        return ok(get_manager().capture_status())

    @tool(mcp, WRITE)
    def memory_index_file(
        path: Annotated[str, Field(description="Absolute path of a Markdown (.md) file to index now.")],
    ) -> dict[str, Any]:
        """Index one Markdown file now: chunk it (200 words, 50 overlap) and store the chunks as
        document memories, replacing the file's older chunks. An unchanged file is left as is.
        Returns {"success": true, "outcome": "indexed" | "unchanged" | "skipped" | "vanished", "chunks": n}.
        """
        from remindful.services.ingest.watcher import is_markdown

        m = get_manager()
        file = tool_path(path, m.settings, field="path")
        if not is_markdown(Path(path)) or not is_markdown(file):
            raise ValidationError("path", f"expected a Markdown file (.md), got {path!r}")
        if not file.is_file():
            raise ValidationError("path", f"no such file {path!r}")
        return ok(m.index_file(file))
