"""MCP tools, one module per capability area.

Each module defines ``register(mcp, get_manager)``, which adds its tools (and resources) to the
MCPServer ``mcp``; ``get_manager()`` returns the server's MemoryManager. The server
(:func:`remindful.shells.mcp.server.build_server`) imports every module and calls its
``register``: core (store/search/get/...), lifecycle (sessions, retention, backup, export),
learning (conversation capture, corrections, workflows, suggestions), capture (hooks, files).
"""
