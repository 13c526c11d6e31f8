"""A store written before scopes (schema 7, the DDL of commit 07c3dd5) opens as a store with scopes:
each memory gets the scope its metadata's ``cwd`` or ``project_id`` names, or the user's by the
user-level rules, or none; all in the upgrade's one transaction."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from remindful.engine.catalog import SCHEMA_VERSION, Catalog
from remindful.errors import StorageError
from remindful.testing import catalog_rows, open_fake
from test_scopes import repository, worktree

SCHEMA_V7 = (Path(__file__).parent / "fixtures" / "catalog_schema_v7.sql").read_text()


def old_store(path: Path, rows: list[dict[str, Any]]) -> Path:
    """A storage directory whose catalog is at schema 7 and holds ``rows`` (memories without vectors)."""
    path.mkdir(parents=True)
    conn = sqlite3.connect(path / "catalog.sqlite3", isolation_level=None)
    conn.executescript(SCHEMA_V7)
    for i, row in enumerate(rows):
        content = row["content"]
        metadata = json.dumps(row.get("metadata", {}))
        conn.execute(
            "INSERT INTO memories (id, type, content, metadata, source, memory_class, session_id, created_at, "
            "content_hash, size_bytes) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                f"{row['type']}_2024050112000000000{i}_0000000{i}",
                row["type"],
                content,
                metadata,
                row.get("source", "manual"),
                "semantic" if row["type"] == "knowledge" else "episodic",
                row.get("session", "s-old"),
                1714564800.0 + i,
                hashlib.sha256(content.encode()).hexdigest(),
                len(content) + len(metadata),
            ),
        )
    conn.execute("PRAGMA user_version = 7")
    conn.close()
    return path


def legacy_rows(a: Path, tree: Path, b: Path) -> list[dict[str, Any]]:
    hook = {"role": "user", "hook_event": "UserPromptSubmit"}
    return [
        {"type": "conversation", "source": "hook", "content": "Why does the pnpm lockfile keep changing?",
         "metadata": {**hook, "cwd": str(a)}},
        {"type": "action", "source": "hook", "content": "Bash: pnpm install [command=pnpm install]",
         "metadata": {"hook_event": "PostToolUse", "cwd": str(tree / "web")}},
        {"type": "conversation", "source": "hook", "content": "Never put emojis in commit messages",
         "metadata": {**hook, "cwd": str(a)}},
        {"type": "action", "source": "hook", "content": "Bash: cargo build [command=cargo build]",
         "metadata": {"hook_event": "PostToolUse", "cwd": str(b)}},
        {"type": "knowledge", "content": "The deploy script needs AWS_PROFILE=prod"},
        {"type": "knowledge", "content": "I prefer dark mode in every editor"},
        {"type": "knowledge", "source": "conversation", "content": "The billing team ships on Tuesdays.",
         "metadata": {"project_id": "Billing"}},
    ]  # fmt: skip


@pytest.fixture
def projects(tmp_path: Path) -> tuple[Path, Path, Path]:
    a = repository(tmp_path / "projA")
    return a, worktree(a, tmp_path / "projA-wt"), repository(tmp_path / "projB")


def test_an_old_store_gets_its_scopes_from_its_metadata(tmp_path: Path, projects: tuple[Path, Path, Path]) -> None:
    a, tree, b = projects
    path = old_store(tmp_path / "store", legacy_rows(a, tree, b))
    with open_fake(path) as memory:
        scopes = {m.content: m.scope for m in memory.list(limit=50)}
        scope_a, scope_b = memory.project_of(a).scope, memory.project_of(b).scope
        assert scopes == {
            "Why does the pnpm lockfile keep changing?": scope_a,
            "Bash: pnpm install [command=pnpm install]": scope_a,  # the worktree is the repository's project
            "Never put emojis in commit messages": "user",
            "Bash: cargo build [command=cargo build]": scope_b,
            "The deploy script needs AWS_PROFILE=prod": None,  # no directory, no user-level rule: unscoped
            "I prefer dark mode in every editor": "user",
            "The billing team ships on Tuesdays.": "project:billing",
        }
        usage = {u.scope: (u.count, u.name, u.root) for u in memory.scopes()}
        assert usage == {
            scope_a: (2, "projA", str(a.resolve())),
            scope_b: (1, "projB", str(b.resolve())),
            "user": (2, None, None),
            "unscoped": (1, None, None),
            "project:billing": (1, "Billing", None),
        }
        # The migrated store searches by scope in every space, and goes on taking memories. The
        # fixture's rows have no vectors: they are embedded in the background once the index opens
        # (never on a searcher's thread), so the dense space has them after the flush.
        memory.search("warm up")
        memory.flush()
        seen = {h.content for h in memory.search("pnpm cargo emojis deploy", limit=20, scope=memory.seen_from(b))}
        assert seen == {
            "Bash: cargo build [command=cargo build]",
            "Never put emojis in commit messages",
            "I prefer dark mode in every editor",
        }
        memory.store("projA now pins pnpm 9", type="knowledge", metadata={"cwd": str(a)})
        assert memory.list(scope=scope_a, limit=1)[0].content == "projA now pins pnpm 9"
    assert catalog_rows(path, "PRAGMA user_version") == [(SCHEMA_VERSION,)]
    counted = dict(catalog_rows(path, "SELECT scope, n FROM scope_counts"))
    assert counted == {scope_a: 3, scope_b: 1, "user": 2, "": 1, "project:billing": 1}


def test_the_upgrade_is_all_or_nothing(tmp_path: Path, projects: tuple[Path, Path, Path]) -> None:
    a, tree, b = projects
    path = old_store(tmp_path / "store", legacy_rows(a, tree, b))

    def broken(content: str, **_: Any) -> Any:
        raise RuntimeError("no scope for you")

    with pytest.raises((RuntimeError, StorageError)):
        Catalog(path / "catalog.sqlite3", scope_of=broken)
    assert catalog_rows(path, "PRAGMA user_version") == [(7,)]
    assert "scope" not in {row[1] for row in catalog_rows(path, "PRAGMA table_info(memories)")}
    with open_fake(path) as memory:  # the next open upgrades it
        assert len(memory.list(limit=50)) == 7
        assert memory.list(scope="user", limit=50)


def test_a_new_store_starts_with_scopes(tmp_path: Path) -> None:
    with open_fake(tmp_path / "fresh") as memory:
        memory.store("hello")
        assert catalog_rows(memory, "SELECT scope, n FROM scope_counts") == [("", 1)]
        assert memory.stats().to_dict()["scopes"] == [
            {"scope": "unscoped", "kind": "unscoped", "name": None, "root": None, "count": 1}
        ]
