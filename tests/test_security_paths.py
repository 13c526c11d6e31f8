"""What files a tool may touch: only inside the storage directory, the watch directories and
``security.allowed_paths``, judged after symlinks are resolved; exports never overwrite or create
directories unasked; restore refuses absurd member paths with a clear error.

Tools are driven through the MCP SDK's own client; the CLI through its runner."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest
from mcp import Client
from typer.testing import CliRunner

from mcp_client import call, tool_error
from remindful.errors import ValidationError
from remindful.shells.cli.app import app
from remindful.shells.mcp.server import LazyManager, build_server
from remindful.testing import open_fake

SECRET_LINE = "root:$6$not-a-real-hash:20228:0:99999:7:::"


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory that is not an allowed root, holding a 'private' file."""
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "shadow").write_text(SECRET_LINE + "\n")
    (folder / "notes.md").write_text("# private\n\n" + SECRET_LINE + "\n")
    return folder


@pytest.mark.anyio
async def test_tools_touch_no_file_outside_the_allowed_roots(tmp_path: Path, outside: Path) -> None:
    store = tmp_path / "store"
    lazy = LazyManager(factory=lambda: open_fake(store))
    try:
        async with Client(build_server(lazy)) as client:
            await call(client, "memory_store", content="a memory to export")
            # A symlink planted inside the store, pointing out of it, is judged by its target.
            (store / "leak.md").symlink_to(outside / "notes.md")
            message = await tool_error(client, "memory_index_file", path=str(store / "leak.md"))
            assert "outside the directories tools may use" in message and str(outside / "notes.md") in message
            assert await tool_error(client, "memory_index_file", path=str(outside / "notes.md"))
            found = (await client.call_tool("memory_search", {"query": "root 20228 private"})).structured_content
            assert SECRET_LINE[:12] not in json.dumps(found)
            # Export: not outside, not over an existing file unasked, never into a missing directory.
            victim = outside / "victim.txt"
            victim.write_text("keep me")
            assert "outside" in await tool_error(client, "memory_export", output_path=str(victim))
            assert victim.read_text() == "keep me"
            (store / "link-out.json").symlink_to(victim)
            assert "outside" in await tool_error(client, "memory_export", output_path=str(store / "link-out.json"))
            assert victim.read_text() == "keep me"
            missing = store / "new_dir" / "x.json"
            assert "does not exist" in await tool_error(client, "memory_export", output_path=str(missing))
            assert not missing.parent.exists()
            relative = await tool_error(client, "memory_export", output_path="x.json")
            assert "Invalid 'output_path'" in relative and "absolute" in relative
            first = await call(client, "memory_export", output_path=str(store / "m.json"))
            assert first["count"] == 1
            assert "already exists" in await tool_error(client, "memory_export", output_path=str(store / "m.json"))
            again = await call(client, "memory_export", output_path=str(store / "m.json"), overwrite=True)
            assert again["count"] == 1
            # Reading tools: import and restore.
            (outside / "m.json").write_bytes((store / "m.json").read_bytes())
            assert "outside" in await tool_error(client, "memory_import", path=str(outside / "m.json"))
            assert "outside" in await tool_error(client, "memory_restore", backup_path=str(outside / "shadow"))
            assert "outside" in await tool_error(
                client, "memory_restore", backup_path=str(outside / "shadow"), confirm=True
            )
            backup = await call(client, "memory_backup")
            assert Path(backup["path"]).is_relative_to(store)
    finally:
        lazy.close()
    stored = [p for p in store.rglob("*") if p.is_file() and not p.is_symlink()]
    assert stored and not any(SECRET_LINE[:12].encode() in p.read_bytes() for p in stored)


@pytest.mark.anyio
async def test_allowed_paths_opens_a_directory_to_tools(tmp_path: Path, outside: Path) -> None:
    store = tmp_path / "store"
    lazy = LazyManager(factory=lambda: open_fake(store, **{"security.allowed_paths": [outside]}))
    try:
        async with Client(build_server(lazy)) as client:
            indexed = await call(client, "memory_index_file", path=str(outside / "notes.md"))
            assert indexed["outcome"] == "indexed"
            await call(client, "memory_export", output_path=str(outside / "out.json"))
            assert json.loads((outside / "out.json").read_text())["count"] >= 1
    finally:
        lazy.close()


def test_attachments_are_copied_only_from_the_allowed_roots(tmp_path: Path, outside: Path) -> None:
    store = tmp_path / "store"
    overrides = {"attachments.copy_attachments": True}
    with open_fake(store, **overrides) as memory:
        store.mkdir(exist_ok=True)
        (store / "shot.png").write_bytes(b"\x89PNG inside")
        (store / "sneaky.png").symlink_to(outside / "shadow")
        inside_id = memory.store("a screen", type="screen", metadata={"screenshot_path": str(store / "shot.png")})
        outside_id = memory.store("b screen", type="screen", metadata={"screenshot_path": str(outside / "shadow")})
        linked_id = memory.store("c screen", type="screen", metadata={"screenshot_path": str(store / "sneaky.png")})
        assert Path(memory.get(inside_id).metadata["screenshot_path"]).is_relative_to(store / "attachments")
        assert memory.get(outside_id).metadata["screenshot_path"] == str(outside / "shadow")
        assert memory.get(linked_id).metadata["screenshot_path"] == str(store / "sneaky.png")
    copies = [p for p in (store / "attachments").rglob("*") if p.is_file()]
    assert [p.read_bytes() for p in copies] == [b"\x89PNG inside"]


def test_cli_export_names_any_path_but_never_overwrites_or_creates_directories(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REMINDFUL_EMBEDDINGS__BACKEND", "fake")
    monkeypatch.setenv("MEMORY_STORAGE_PATH", str(tmp_path / "store"))
    runner = CliRunner()
    assert runner.invoke(app, ["store", "hello"]).exit_code == 0
    missing = tmp_path / "nonexistent_dir" / "x.json"
    result = runner.invoke(app, ["export", str(missing)])
    assert result.exit_code == 2 and "does not exist; create it first" in result.output
    assert not missing.parent.exists()
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    result = runner.invoke(app, ["export", str(victim)])
    assert result.exit_code == 2 and "already exists" in result.output and victim.read_text() == "keep me"
    result = runner.invoke(app, ["export", str(victim), "--force"])
    assert result.exit_code == 0 and json.loads(victim.read_text())["count"] == 1
    result = runner.invoke(app, ["export", "/proc/nope.json"])
    assert result.exit_code == 2 and "cannot write /proc/nope.json" in result.output
    assert len(result.output.strip().splitlines()) == 1


def _repack_with(archive: Path, target: Path, name: str, data: bytes) -> None:
    """``archive`` plus one more member ``name``, listed in the manifest with its true checksum."""
    with tarfile.open(archive, "r:gz") as src:
        members = [(m, src.extractfile(m).read() if m.isfile() else None) for m in src.getmembers()]  # type: ignore[union-attr]
    with tarfile.open(target, "w:gz") as out:
        for member, content in members:
            if member.name == "manifest.json":
                assert content is not None
                manifest = json.loads(content)
                manifest["files"][name] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
                content = json.dumps(manifest).encode()
                member.size = len(content)
            out.addfile(member, io.BytesIO(content) if content is not None else None)
        info = tarfile.TarInfo(name)
        info.size = len(data)
        out.addfile(info, io.BytesIO(data))


def test_restore_refuses_a_2000_level_deep_member_clearly(tmp_path: Path) -> None:
    with open_fake(tmp_path / "store") as memory:
        memory.store("something to keep")
        archive = Path(memory.backup().path)
        deep = tmp_path / "deep.tar.gz"
        _repack_with(archive, deep, "/".join(["a"] * 2000) + "/x", b"x")
        with pytest.raises(ValidationError) as refused:
            memory.restore(deep, confirm=True)
        assert "is 2001 levels and" in str(refused.value)
        assert [m.content for m in memory.list()] == ["something to keep"]


def test_the_watcher_does_not_follow_a_link_out_of_the_watched_directory(tmp_path: Path, outside: Path) -> None:
    from remindful.services.ingest.watcher import MarkdownWatcher

    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "real.md").write_text("# deploy\n\nThe staging deploy needs the VPN.\n")
    (notes / "leak.md").symlink_to(outside / "notes.md")
    (notes / "inner.md").symlink_to(notes / "real.md")  # a link that stays inside is fine
    with open_fake(tmp_path / "store") as memory:
        watcher = MarkdownWatcher(memory.engine, [notes])
        counts = watcher.scan()
        assert watcher.handle("modified", str(notes / "leak.md")) == "skipped"
        contents = " ".join(m.content for m in memory.list(limit=100))
    assert "staging deploy" in contents and counts.get("indexed", 0) >= 1
    assert SECRET_LINE[:12] not in contents
