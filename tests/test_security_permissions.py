"""Issue 14, permissions: the storage directory is 0700, every file remindful or Chroma writes under it
is 0600 and every directory 0700, and backup archive members are 0600 (directories 0700)."""

from __future__ import annotations

import os
import stat
import tarfile
from pathlib import Path

import pytest

import remindful
from remindful.embed import FakeEmbedder


def _modes(root: Path) -> dict[str, int]:
    found = {".": stat.S_IMODE(root.stat().st_mode)}
    for folder, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            path = Path(folder) / name
            found[str(path.relative_to(root))] = stat.S_IMODE(path.lstat().st_mode)
    return found


def _wrong(root: Path) -> dict[str, str]:
    wrong = {}
    for rel, mode in _modes(root).items():
        path = root / rel
        expected = 0o700 if path.is_dir() else 0o600
        if mode != expected:
            wrong[rel] = oct(mode)
    return wrong


@pytest.fixture
def open_umask() -> object:
    """The usual umask of a user's shell: what we write must not depend on it being strict."""
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_storage_chroma_and_backups_are_private(tmp_path: Path, open_umask: object) -> None:
    path = tmp_path / "memory"
    path.mkdir(mode=0o755)  # existed before, too open
    os.chmod(path, 0o755)
    with remindful.open(path, embedder=FakeEmbedder(), **{"performance.async_indexing": False}) as memory:
        for i in range(5):
            memory.store(f"memory number {i} about the login page")
        memory.store_batch([{"content": f"batch item {i}"} for i in range(3)])
        assert memory.search("login page")
        assert memory.flush(timeout=60)
        backup = Path(memory.backup().path)
        assert (path / "chroma" / "chroma.sqlite3").exists()
        assert _wrong(path) == {}  # while open: Chroma's live files too
    assert _wrong(path) == {}

    with tarfile.open(backup, "r:gz") as tar:
        members = tar.getmembers()
    assert any(m.name.startswith("chroma/") for m in members)
    assert {"manifest.json", "config/settings.json"} <= {m.name for m in members}
    wrong = {m.name: oct(m.mode) for m in members if m.mode != (0o700 if m.isdir() else 0o600)}
    assert wrong == {}


def test_restored_store_is_private(tmp_path: Path, open_umask: object) -> None:
    path = tmp_path / "memory"
    with remindful.open(path, embedder=FakeEmbedder(), **{"performance.async_indexing": False}) as memory:
        memory.store("kept across the restore")
        backup = memory.backup().path
        memory.store("after the backup")
        memory.restore(backup, confirm=True)
        assert memory.flush(timeout=60)
    assert _wrong(path) == {}
