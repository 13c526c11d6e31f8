"""Every memory records its origin (whose words it holds), shows it, and keeps it through export
and import; a catalog from before origins gets them at its upgrade."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from remindful import OriginKind
from remindful.errors import ValidationError
from remindful.model import derive_origin, make_origin, origin_label, parse_origin
from remindful.testing import open_fake


def test_make_and_parse_origin() -> None:
    assert make_origin("tool", "Bash") == "tool:Bash"
    assert make_origin(OriginKind.USER) == "user"
    assert make_origin("file", "a\nb  c") == "file:a b c"
    assert parse_origin("web:https://example.com/x") == (OriginKind.WEB, "https://example.com/x")
    with pytest.raises(ValueError):
        parse_origin("boss")
    assert OriginKind.USER_CONFIRMED.stated_by_user and not OriginKind.ASSISTANT.stated_by_user


@pytest.mark.parametrize(
    ("origin", "label"),
    [
        ("user", "you said"),
        ("user_confirmed", "you confirmed"),
        ("assistant", "the assistant said"),
        ("tool:Bash", "tool Bash's output"),
        ("file:docs/deploy.md", "file docs/deploy.md"),
        ("web:https://example.com", "page https://example.com"),
        ("system", "remindful"),
        ("nonsense", "unknown source"),
    ],
)
def test_origin_labels(origin: str, label: str) -> None:
    assert origin_label(origin) == label


@pytest.mark.parametrize(
    ("source", "metadata", "origin"),
    [
        ("hook", {"hook_event": "UserPromptSubmit", "role": "user"}, "user"),
        ("hook", {"hook_event": "PostToolUse", "tool_name": "Bash"}, "tool:Bash"),
        ("response", {"role": "assistant"}, "assistant"),
        ("mcp_tool", {"tool_name": "browser_click"}, "tool:browser_click"),
        ("md_file", {"file_path": "/p/README.md"}, "file:/p/README.md"),
        ("workflow_pattern", {}, "system"),
        ("manual", {}, "user"),
        ("correction", {}, "user"),
        ("conversation", {"role": "assistant"}, "assistant"),
    ],
)
def test_derived_origins(source: str, metadata: dict[str, str], origin: str) -> None:
    assert derive_origin(source, metadata) == origin


def test_store_records_shows_and_exports_origin(tmp_path: Path) -> None:
    with open_fake(tmp_path / "a") as memory:
        mine = memory.store("The staging database listens on port 6543", type="knowledge")
        tool = memory.store("Ran make build: failed", source="hook", metadata={"tool_name": "Bash"})
        page = memory.store("Install with curl", type="document", origin="web:https://example.com/install")
        assert memory.get(mine).origin == "user"
        assert memory.get(tool).origin == "tool:Bash"
        assert memory.get(page).to_dict()["origin"] == "web:https://example.com/install"
        hits = {hit.id: hit for hit in memory.search("staging database port", min_score=0)}
        assert hits[mine].origin == "user" and hits[mine].to_dict()["origin"] == "user"
        with pytest.raises(ValidationError, match="origin"):
            memory.store("x", origin="the boss")
        out = tmp_path / "export.json"
        memory.export(output_path=str(out))
    exported = {m["id"]: m["origin"] for m in json.loads(out.read_text())["memories"]}
    assert exported[tool] == "tool:Bash"
    with open_fake(tmp_path / "b") as other:
        other.import_memories(str(out))
        assert other.get(page).origin == "web:https://example.com/install"
        assert other.get(tool).origin == "tool:Bash"


def test_catalog_before_origins_gets_them_at_upgrade(tmp_path: Path) -> None:
    with open_fake(tmp_path) as memory:
        prompt = memory.store("what port?", type="conversation", source="hook", metadata={"role": "user"})
        call = memory.store("Ran ls", source="hook", metadata={"tool_name": "Bash", "hook_event": "PostToolUse"})
        path = memory.settings.storage_path / "catalog.sqlite3"
    conn = sqlite3.connect(path)
    conn.execute("ALTER TABLE memories DROP COLUMN origin")
    conn.execute("PRAGMA user_version = 9")
    conn.commit()
    conn.close()
    with open_fake(tmp_path) as memory:
        assert memory.get(prompt).origin == "user"
        assert memory.get(call).origin == "tool:Bash"
