"""MCP tools, one module per capability area.

Each module defines ``register(mcp, get_manager)``: it adds its tools (and resources) to the
FastMCP server ``mcp``; ``get_manager()`` returns the server's MemoryManager (opened lazily on the
first call, so listing tools loads no model). The server registers every module named in
``MODULES`` in that order.
"""

from __future__ import annotations

#: core: store/search/get/... · lifecycle: sessions, retention, backup, export · learning:
#: conversation capture, corrections, workflows, suggestions · capture: hooks, watcher, filters.
MODULES = ("core", "lifecycle", "learning", "capture")
