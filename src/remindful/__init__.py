"""remindful: local-first long-term memory for AI agents.

    import remindful
    with remindful.open("~/.remindful/memory") as memory:
        memory_id = memory.store("Clicked the login button", type="action", metadata={"success": True})
        hits = memory.search("login")

Names are imported on first access, so ``import remindful`` stays cheap for hook processes.
"""

from __future__ import annotations

import importlib
import os

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: hook processes must not pay for importing typing

__version__ = "0.1.0"

__all__ = [
    "AsyncMemoryManager",
    "ChunkMetadata",
    "ConfigError",
    "Context",
    "CorruptionError",
    "DependencyMissingError",
    "EmbedderError",
    "Memory",
    "MemoryClass",
    "MemoryDisabledError",
    "MemoryManager",
    "MemorySource",
    "MemoryType",
    "NotFoundError",
    "OriginKind",
    "RemindfulError",
    "SearchHit",
    "Session",
    "Settings",
    "StorageError",
    "StorageFullError",
    "StorageLockedError",
    "ValidationError",
    "__version__",
    "load_settings",
    "open",
    "open_async",
]

_WHERE = {
    "AsyncMemoryManager": "remindful.aio",
    "open_async": "remindful.aio",
    "MemoryManager": "remindful.api",
    "Settings": "remindful.config",
    "load_settings": "remindful.config",
    **{
        name: "remindful.model"
        for name in (
            "ChunkMetadata",
            "Context",
            "Memory",
            "MemoryClass",
            "MemorySource",
            "MemoryType",
            "OriginKind",
            "SearchHit",
            "Session",
        )
    },
    **{
        name: "remindful.errors"
        for name in (
            "ConfigError",
            "CorruptionError",
            "DependencyMissingError",
            "EmbedderError",
            "MemoryDisabledError",
            "NotFoundError",
            "RemindfulError",
            "StorageError",
            "StorageFullError",
            "StorageLockedError",
            "ValidationError",
        )
    },
}

if TYPE_CHECKING:
    from typing import Any

    from remindful.aio import AsyncMemoryManager, open_async
    from remindful.api import MemoryManager
    from remindful.config import Settings, load_settings
    from remindful.errors import (
        ConfigError,
        CorruptionError,
        DependencyMissingError,
        EmbedderError,
        MemoryDisabledError,
        NotFoundError,
        RemindfulError,
        StorageError,
        StorageFullError,
        StorageLockedError,
        ValidationError,
    )
    from remindful.model import (
        ChunkMetadata,
        Context,
        Memory,
        MemoryClass,
        MemorySource,
        MemoryType,
        OriginKind,
        SearchHit,
        Session,
    )


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'remindful' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def open(path: str | os.PathLike[str] | None = None, **overrides: Any) -> MemoryManager:
    """Open the memory store at ``path`` (default: the configured storage path).

    Cheap: nothing is loaded until the first operation. ``overrides`` are settings, dotted or
    nested (``open(path, **{"retention.default_retention_days": 7})``), plus ``embedder=`` and
    ``index=`` to inject parts (tests use ``FakeEmbedder`` and ``InMemoryIndex``) and ``project=``,
    the directory the caller works in (its reads then see that project's memories and the user's,
    and its writes go there: see :meth:`MemoryManager.work_in`).
    Raises ConfigError for invalid settings; an unusable path disables memory instead (every
    call then raises MemoryDisabledError with the reason).
    """
    from remindful.api import open_manager

    return open_manager(path, **overrides)
