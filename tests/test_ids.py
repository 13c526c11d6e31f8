"""Short unique ids and their resolution (:mod:`remindful.services.ids`) over a real catalog."""

from __future__ import annotations

from pathlib import Path

import pytest

from remindful.errors import NotFoundError, ValidationError
from remindful.testing import open_fake


def test_short_ids_are_unique_prefixes_that_resolve_back(tmp_path: Path) -> None:
    with open_fake(tmp_path / "s") as memory:
        ids = memory.store_batch([{"content": f"note {i}", "type": "knowledge", "session_id": "s"} for i in range(40)])
        short = memory.short_ids(ids)
        assert len(set(short.values())) == 40
        for full, prefix in short.items():
            assert full.startswith(prefix) and len(prefix) < len(full)
            assert len(prefix) >= len("knowledge_") + 8  # the type and the date at least
            assert memory.resolve_id(prefix) == full
            assert memory.resolve_id(full) == full
        with pytest.raises(ValidationError, match="start of several memory ids") as caught:
            memory.resolve_id("knowledge_")
        assert "\n" not in str(caught.value) and "…" in str(caught.value)
        with pytest.raises(NotFoundError):
            memory.resolve_id("knowledge_1999")


def test_a_session_id_that_starts_another_resolves_to_itself(tmp_path: Path) -> None:
    with open_fake(tmp_path / "s") as memory:
        memory.store("a", type="knowledge", session_id="deploy")
        memory.store("b", type="knowledge", session_id="deploy-2")
        assert memory.resolve_id("deploy", kind="session") == "deploy"
        assert memory.resolve_id("deploy-", kind="session") == "deploy-2"
        assert memory.short_ids(["deploy", "deploy-2"], kind="session") == {"deploy": "deploy", "deploy-2": "deploy-2"}
        with pytest.raises(ValidationError, match="'session_id'"):
            memory.resolve_id("dep", kind="session")
