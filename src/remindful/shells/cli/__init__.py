"""remindful's command line: one typer app, the core commands in :mod:`.app`, one module per command
group (each adds its commands to ``app`` when imported, so every module is imported here)."""

from remindful.shells.cli import capture, dashboard, learning, lifecycle, mcp, shared
from remindful.shells.cli.app import app, main

__all__ = ["app", "capture", "dashboard", "learning", "lifecycle", "main", "mcp", "shared"]
