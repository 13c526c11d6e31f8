"""Capture tools: capture status, and indexing a Markdown file on demand.

(Token-budgeted context for a task is ``memory_context`` in the learning module; the hooks use
:func:`remindful.hooks.context.context_for`.)"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import Field

from remindful.shells.mcp_tools.common import READ_ONLY, WRITE, GetManager, failure, run, tool

if TYPE_CHECKING:
    from remindful.manager import MemoryManager


def register(mcp: Any, get_manager: GetManager) -> None:
    """Add memory_capture_status and memory_index_file to ``mcp``."""

    @tool(mcp, READ_ONLY)
    def memory_capture_status() -> dict[str, Any]:
        """Show what automatic capture is doing: hook events waiting in the spool, redactions and
        skipped captures by reason (privacy exclusions, repeats, disabled triggers), and the number
        of Markdown files indexed. Returns {"success": true, "spool_pending", "capture", "files_indexed"}.
        """

        def action(manager: MemoryManager) -> dict[str, Any]:
            stats = manager.stats()
            files = manager._state.catalog.read("SELECT count(*) FROM file_hashes")[0][0]
            return {"spool_pending": stats["spool_pending"], "capture": stats["capture"], "files_indexed": files}

        return run(get_manager, action)

    @tool(mcp, WRITE)
    def memory_index_file(
        path: Annotated[str, Field(description="Absolute path of a Markdown (.md) file to index now.")],
    ) -> dict[str, Any]:
        """Index one Markdown file now: chunk it (200 words, 50 overlap) and store the chunks as
        document memories, replacing the file's older chunks. An unchanged file is left as is.
        Returns {"success": true, "outcome": "indexed" | "unchanged" | "skipped" | "vanished", "chunks": n}.
        """
        from remindful.capture.watcher import MarkdownWatcher, is_markdown

        file = Path(path).expanduser()
        if not is_markdown(file):
            return failure(f"Invalid 'path': expected a .md file, got {path!r}", field="path")
        if not file.is_file():
            return failure(f"Invalid 'path': no such file {path!r}", field="path")

        def action(manager: MemoryManager) -> dict[str, Any]:
            watcher = MarkdownWatcher(manager, [file.parent])
            outcome = watcher.process_file(file)
            return {"outcome": outcome, "chunks": len(watcher._chunk_ids(str(file.resolve())))}

        return run(get_manager, action)
