"""Helpers for tests, yours and ours: a fast store with the shipped fakes, and a read-only look
at a store's catalog.

    from remindful.testing import open_fake
    with open_fake(tmp_path / "store") as memory:
        memory.store("Clicked login", type="action")
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import remindful
from remindful.api import MemoryManager
from remindful.embed.fake import FakeEmbedder
from remindful.engine.catalog_files import read_only_rows
from remindful.index.memory import InMemoryIndex


def open_fake(path: str | os.PathLike[str], **overrides: Any) -> MemoryManager:
    """A store with the fake embedder and the in-memory index: fast, no model, no Chroma.
    ``overrides`` are those of :func:`remindful.open`. The relevance floors (``search.min_score``,
    ``context.min_score``) default to 0 here: they are calibrated on MiniLM's cosines, and the fake
    embedder's bag-of-words cosines have another scale."""
    if isinstance(overrides.setdefault("embedder", FakeEmbedder()), FakeEmbedder):
        overrides.setdefault("search.min_score", 0.0)
        overrides.setdefault("context.min_score", 0.0)
    overrides.setdefault("index", InMemoryIndex())
    return remindful.open(path, **overrides)


def catalog_rows(store: str | os.PathLike[str] | MemoryManager, sql: str, params: Sequence[Any] = ()) -> list[Any]:
    """Rows of ``sql`` run read-only on a store's catalog (``store``: its directory or a manager)."""
    path = Path(store.path if isinstance(store, MemoryManager) else store) / "catalog.sqlite3"
    return read_only_rows(path, sql, params)


__all__ = ["FakeEmbedder", "InMemoryIndex", "catalog_rows", "open_fake"]
