"""Export/import, backup/restore, clear-all and attachments."""

from __future__ import annotations

import io
import json
import logging
import tarfile
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from remindful.api import MemoryManager
from remindful.errors import ValidationError
from remindful.testing import FakeEmbedder, catalog_rows, open_fake


def _seed(memory: MemoryManager) -> list[str]:
    return memory.store_batch(
        [
            {"content": "Clicked the login button", "type": "action", "metadata": {"success": True}},
            {"content": "Login screen of the bank", "type": "screen", "session_id": "s1"},
            {"content": "Deploy workflow: build, test, ship", "type": "workflow", "metadata": {"bookmarked": True}},
            {"content": "The API uses API keys, not OAuth", "type": "knowledge", "source": "correction"},
        ]
    )


def _embedding(memory: MemoryManager, memory_id: str) -> np.ndarray:
    return memory.engine.catalog.embeddings([memory_id])[memory_id]


# -- export / import -------------------------------------------------------------------------------


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
#: Metadata keys the store acts on, which take a form of their own (a value of another form is refused:
#: tests/test_small_breaks.py); Hypothesis draws string constants of the code it tests as keys.
PROTECTED_KEYS = ("bookmarked", "manual_save", "importance")
memory_items = st.fixed_dictionaries(
    {
        "content": st.text(min_size=1, max_size=80).filter(str.strip),
        "type": st.sampled_from(["screen", "action", "workflow", "conversation", "document", "knowledge"]),
        "metadata": st.dictionaries(
            st.text(min_size=1, max_size=10).filter(lambda k: k not in PROTECTED_KEYS), json_values, max_size=4
        ),
        "session_id": st.none() | st.text(min_size=1, max_size=12).filter(str.strip),
        "timestamp": st.floats(1e9, 2e9),
        "source": st.sampled_from(["manual", "hook", "mcp_tool", "import"]),
    }
)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(memory_items, min_size=1, max_size=8))
def test_export_import_round_trip_is_lossless(tmp_path_factory: pytest.TempPathFactory, items: list[Any]) -> None:
    root = tmp_path_factory.mktemp("rt")
    with open_fake(root / "a") as source, open_fake(root / "b") as target:
        ids = source.store_batch(items)
        source.engine.catalog.touch(ids[:1], 1.5e9)  # access counts travel too
        exported = source.export(output_path=root / "out.json")
        assert exported.count == len(ids)
        assert target.import_memories(exported.path).imported == len(ids)
        for a, b in zip(source.get_batch(ids), target.get_batch(ids), strict=True):
            assert a is not None and b is not None
            assert a.to_dict() == b.to_dict()
            assert np.array_equal(_embedding(source, a.id), _embedding(target, b.id))
        again = target.import_memories(exported.path)
        assert again.imported == 0 and again.skipped == len(ids)


def test_an_export_appears_whole_or_not_at_all(tmp_path: Path, memory: MemoryManager) -> None:
    _seed(memory)
    (tmp_path / "exports").mkdir()
    target = tmp_path / "exports" / "out.json"
    target.write_text("the previous export")

    def interrupted(rows: int) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        memory.export(output_path=target, overwrite=True, progress=interrupted)
    assert target.read_text() == "the previous export" and [p.name for p in target.parent.iterdir()] == ["out.json"]
    # Two exports to one path at once each write a file of their own: the survivor is whole.
    again = {"output_path": target, "overwrite": True}
    threads = [threading.Thread(target=memory.export, kwargs=again) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert json.loads(target.read_text())["count"] == memory.stats().total_memories
    assert [p.name for p in target.parent.iterdir()] == ["out.json"]


def test_import_needs_no_reembedding_and_search_works(tmp_path: Path) -> None:
    with open_fake(tmp_path / "a") as source:
        ids = _seed(source)
        path = source.export(output_path=tmp_path / "m.json").path
    embedder = FakeEmbedder()
    with open_fake(tmp_path / "b", embedder=embedder) as target:
        target.import_memories(path)
        assert embedder.texts_embedded == 0
        assert target.search("login button")[0].id == ids[0]
        assert any(s.id == "s1" for s in target.list_sessions())


def test_import_refuses_bad_files_before_writing(tmp_path: Path, memory: MemoryManager) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValidationError, match="not valid JSON"):
        memory.import_memories(bad)
    _seed(memory)
    good = memory.export(output_path=tmp_path / "good.json").path
    data = json.loads(Path(good).read_text())
    data["memories"][2]["type"] = "bogus"
    bad.write_text(json.dumps(data))
    with open_fake(tmp_path / "fresh") as fresh:
        with pytest.raises(ValidationError, match=r"memories\[2\]\.type"):
            fresh.import_memories(bad)
        assert fresh.stats().total_memories == 0
    with pytest.raises(ValidationError, match="format"):
        memory.export(format="csv")


# -- backup / restore ------------------------------------------------------------------------------


def test_backup_holds_catalog_config_manifest_with_checksums(memory: MemoryManager) -> None:
    _seed(memory)
    result = memory.backup(name="before_experiment")
    path = Path(result.path)
    assert path.parent == memory.path / "backups"
    assert path.name.startswith("backup_") and path.name.endswith("_before_experiment.tar.gz")
    assert result.counts["action_memories"] == 1 and result.total == 4
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    with tarfile.open(path) as tar:
        names = tar.getnames()
        manifest = json.loads(tar.extractfile("manifest.json").read())  # type: ignore[union-attr]
    assert {"manifest.json", "catalog.sqlite3", "config/settings.json"} <= set(names)
    assert set(manifest["files"]) == set(names) - {"manifest.json"}
    assert all(len(f["sha256"]) == 64 for f in manifest["files"].values())
    with pytest.raises(ValidationError, match="name"):
        memory.backup(name="../evil")


def test_automatic_backups_rotate_to_the_last_five(memory: MemoryManager) -> None:
    memory.store("x", session_id="gone")
    memory.backup(name="manual_one")
    for _ in range(7):
        with pytest.raises(ValidationError):
            memory.clear_all()  # refused: no backup either
        memory.clear_all(confirm=True)
    backups = sorted(p.name for p in (memory.path / "backups").glob("*.tar.gz"))
    assert len([b for b in backups if "_auto-" in b]) == 5
    assert any(b.endswith("_manual_one.tar.gz") for b in backups)


def test_restore_into_a_fresh_store_reproduces_counts_and_search(tmp_path: Path) -> None:
    with open_fake(tmp_path / "a") as source:
        _seed(source)
        expected = [h.id for h in source.search("login")]
        archive = source.backup().path
        counts = source.stats().collections
    with open_fake(tmp_path / "b") as target:
        target.store("something to be replaced")
        with pytest.raises(ValidationError, match="confirm"):
            target.restore(archive)
        assert target.stats().total_memories == 1
        result = target.restore(archive, confirm=True)
        assert result.total == 4 and result.counts == result.expected
        assert Path(result.backup_path).exists()  # the replaced data was backed up first
        assert {k: v.count for k, v in target.stats().collections.items()} == {k: v.count for k, v in counts.items()}
        assert [h.id for h in target.search("login")] == expected


def test_backup_while_another_thread_stores(memory: MemoryManager) -> None:
    _seed(memory)
    stop = threading.Event()
    stored: list[str] = []

    def writer() -> None:
        while not stop.is_set():
            stored.append(memory.store(f"concurrent memory {len(stored)}"))

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        results = [memory.backup(name=f"live{i}") for i in range(3)]
    finally:
        stop.set()
        thread.join()
    assert stored
    for result in results:
        assert 4 <= result.total <= 4 + len(stored)
    with open_fake(memory.path.parent / "check") as fresh:
        restored = fresh.restore(results[-1].path, confirm=True)
        assert restored.total == results[-1].total


def _archive(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def _file(name: str, data: bytes) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info, data


def _forge(tmp_path: Path, memory: MemoryManager, extra: tuple[tarfile.TarInfo, bytes | None]) -> Path:
    """A real backup plus one crafted member, listed in the manifest so only the member is wrong."""
    real = Path(memory.backup().path)
    members = []
    with tarfile.open(real) as tar:
        for info in tar.getmembers():
            data = tar.extractfile(info).read()  # type: ignore[union-attr]
            if info.name == "manifest.json":
                manifest = json.loads(data)
                manifest["files"][extra[0].name] = {"sha256": "0" * 64, "size": 1}
                data = json.dumps(manifest).encode()
                info.size = len(data)
            members.append((info, data))
    return _archive(tmp_path / "forged.tar.gz", [*members, extra])


@pytest.mark.parametrize(
    "kind",
    ["dotdot", "absolute", "symlink", "hardlink"],
)
def test_crafted_archives_are_refused_and_nothing_is_touched(tmp_path: Path, memory: MemoryManager, kind: str) -> None:
    ids = _seed(memory)
    if kind == "dotdot":
        member: tuple[tarfile.TarInfo, bytes | None] = _file("../../escaped.txt", b"pwned")
    elif kind == "absolute":
        member = _file(str(tmp_path / "abs.txt"), b"pwned")
    else:
        info = tarfile.TarInfo("chroma/link")
        info.type = tarfile.SYMTYPE if kind == "symlink" else tarfile.LNKTYPE
        info.linkname = "/etc/passwd" if kind == "symlink" else "catalog.sqlite3"
        member = (info, None)
    forged = _forge(tmp_path, memory, member)
    with pytest.raises(ValidationError, match="refusing to restore") as err:
        memory.restore(forged, confirm=True)
    assert "escapes" in str(err.value) or "link" in str(err.value)
    assert not (tmp_path / "escaped.txt").exists() and not (tmp_path / "abs.txt").exists()
    assert all(memory.get_batch(ids)) and memory.stats().total_memories == 4
    assert not list(memory.path.glob(".restore-*"))


def test_truncated_or_tampered_archive_is_refused_and_data_untouched(tmp_path: Path, memory: MemoryManager) -> None:
    ids = _seed(memory)
    full = Path(memory.backup().path).read_bytes()
    memory.store("added after the backup")
    truncated = tmp_path / "truncated.tar.gz"
    truncated.write_bytes(full[: len(full) * 2 // 3])
    with pytest.raises(ValidationError, match="truncated or damaged"):
        memory.restore(truncated, confirm=True)
    assert memory.stats().total_memories == 5 and all(memory.get_batch(ids))
    # Garbled bytes inside the compressed stream (an invalid deflate symbol near its start, a CRC
    # that fails, a member cut short): one line, whichever the gzip library's own error is. (Past
    # the archive's end blocks nothing is read: every file was checked against the manifest by then.)
    deflate = full.index(b"\0", 10) + 1 if full[3] & 0x08 else 10  # past the header's file name
    for at, pattern in [(deflate, 0xFF), (deflate + 8, 0xFF), (len(full) // 3, 0x5A), (len(full) // 2, 0x5A)]:
        garbled = tmp_path / f"garbled-{at}-{pattern}.tar.gz"
        garbled.write_bytes(full[:at] + bytes(b ^ pattern for b in full[at : at + 8]) + full[at + 8 :])
        with pytest.raises(ValidationError, match=r"truncated or damaged|checksum|manifest"):
            memory.restore(garbled, confirm=True)
    assert memory.stats().total_memories == 5
    # A member whose bytes differ from the manifest's checksum.
    with tarfile.open(fileobj=io.BytesIO(full)) as tar:
        members = [(i, tar.extractfile(i).read()) for i in tar.getmembers()]  # type: ignore[union-attr]
    tampered = [(i, d if i.name != "config/settings.json" else d.replace(b"{", b"[", 1)) for i, d in members]
    with pytest.raises(ValidationError, match="checksum"):
        memory.restore(_archive(tmp_path / "tampered.tar.gz", tampered), confirm=True)
    not_backup = tmp_path / "plain.tar.gz"
    _archive(not_backup, [_file("hello.txt", b"hi")])
    with pytest.raises(ValidationError, match="no manifest"):
        memory.restore(not_backup, confirm=True)
    assert memory.stats().total_memories == 5


def test_clear_all_backs_up_then_empties_everything(memory: MemoryManager) -> None:
    _seed(memory)
    with pytest.raises(ValidationError, match="confirm=True"):
        memory.clear_all()
    assert memory.stats().total_memories == 4
    result = memory.clear_all(confirm=True)
    assert result.deleted == 4 and Path(result.backup_path).exists()
    assert memory.stats().total_memories == 0 and memory.list_sessions() == []
    assert memory.search("login") == []
    memory.restore(result.backup_path, confirm=True)
    assert memory.stats().total_memories == 4


def _schema(store: Path) -> set[tuple[str, str, str]]:
    return set(map(tuple, catalog_rows(store, "SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL")))


def test_a_restored_catalog_has_every_index_and_trigger_and_its_full_text_index(tmp_path: Path) -> None:
    """The restore's copy makes the memories' indexes and full-text trigger again after the rows
    (built at once): the restored catalog's schema is a fresh one's, its keyword index holds the
    restored rows, and a memory stored after the restore is found by its words too."""
    with open_fake(tmp_path / "fresh") as fresh:
        fresh.store("nothing")
        expected = _schema(fresh.path)
    with open_fake(tmp_path / "a") as source:
        _seed(source)
        archive = source.backup().path
    with open_fake(tmp_path / "b") as target:
        target.restore(archive, confirm=True)
        assert _schema(target.path) == expected
        catalog = target.engine.catalog

        def matches(words: str) -> list[str]:
            sql = "SELECT m.id FROM memories_fts f JOIN memories m ON m.rowid = f.rowid WHERE memories_fts MATCH ?"
            return [row[0] for row in catalog.read(sql, [words])]

        [restored] = target.list(type="workflow")
        assert matches("deploy workflow") == [restored.id]
        assert len(matches("login")) == 2
        later = target.store("Rotated the staging certificates on Friday")
        assert matches("certificates") == [later]
        assert catalog.read("PRAGMA integrity_check") == [("ok",)]


def test_the_store_keeps_working_after_a_restore(memory: MemoryManager, caplog: pytest.LogCaptureFixture) -> None:
    _seed(memory)
    archive = memory.backup().path
    memory.store("written after the backup")
    memory.restore(archive, confirm=True)
    with caplog.at_level(logging.WARNING):
        # The embedder's persistent cache reads the restored catalog, not the closed one.
        [new] = memory.store_batch([{"content": "Written after the restore"}], defer=False)
        memory.flush()
    assert "lookup failed" not in caplog.text
    assert memory.stats().total_memories == 5
    assert memory.search("Written after the restore")[0].id == new


# -- attachments -----------------------------------------------------------------------------------


def test_attachment_path_is_recorded_without_copying_by_default(tmp_path: Path, memory: MemoryManager) -> None:
    shot = tmp_path / "screenshot_1234.png"
    shot.write_bytes(b"\x89PNG fake")
    memory_id = memory.store("screen with a chart", type="screen", metadata={"screenshot_path": str(shot)})
    assert memory.get(memory_id).metadata["screenshot_path"] == str(shot)
    assert not (memory.path / "attachments").exists()


def test_copied_attachment_follows_the_memory(tmp_path: Path) -> None:
    shot = tmp_path / "screenshot_1234.png"
    shot.write_bytes(b"\x89PNG fake")
    doc = tmp_path / "notes.pdf"
    doc.write_bytes(b"%PDF")
    overrides = {
        "attachments.copy_attachments": True,
        "attachments.path_keys": ["screenshot_path", "file_path"],
        "security.allowed_paths": [tmp_path],
    }
    with open_fake(tmp_path / "s", **overrides) as memory:
        memory_id = memory.store(
            "login screen", type="screen", metadata={"screenshot_path": str(shot), "file_path": str(doc)}
        )
        missing = memory.store("gone", metadata={"screenshot_path": str(tmp_path / "nope.png")})
        meta = memory.get(memory_id).metadata
        copy = Path(meta["screenshot_path"])
        assert copy.parent == memory.path / "attachments" / memory_id and copy.read_bytes() == shot.read_bytes()
        assert meta["screenshot_path_original"] == str(shot) and Path(meta["file_path"]).exists()
        assert oct(copy.stat().st_mode & 0o777) == "0o600"
        assert memory.get(missing).metadata["screenshot_path"] == str(tmp_path / "nope.png")
        archive = memory.backup().path
        assert memory.delete(memory_id)
        assert not copy.exists() and not copy.parent.exists()
        shot.unlink()
    with open_fake(tmp_path / "elsewhere") as other:
        other.restore(archive, confirm=True)
        restored = Path(other.get(memory_id).metadata["screenshot_path"])
        assert restored == other.path / "attachments" / memory_id / "screenshot_1234.png"
        assert restored.read_bytes() == b"\x89PNG fake"


def test_retention_deletes_attachment_copies(tmp_path: Path) -> None:
    shot = tmp_path / "s.png"
    shot.write_bytes(b"png")
    overrides = {"attachments.copy_attachments": True, "security.allowed_paths": [tmp_path]}
    with open_fake(tmp_path / "s", **overrides) as memory:
        old = datetime.now(UTC) - timedelta(days=60)
        memory_id = memory.store(
            "old screen", type="screen", source="hook", metadata={"screenshot_path": str(shot)}, timestamp=old
        )
        copy = Path(memory.get(memory_id).metadata["screenshot_path"])
        assert copy.exists()
        memory.cleanup()
        assert not copy.exists()


@pytest.mark.slow
def test_real_stack_backup_restore_and_dedup(real_memory: MemoryManager, tmp_path: Path, onnx_embedder: Any) -> None:
    """ONNX MiniLM and embedded Chroma: the archive carries the Chroma files, restore rebuilds the
    index, and near-identical screens (real cosine ≥ 0.95) collapse into one."""
    import remindful

    _seed(real_memory)
    real_memory.store_batch(
        [{"content": "Login screen with username and password fields", "type": "screen"} for _ in range(5)]
        # cosine 0.995 in float, 0.987-0.990 with the int8 model whatever the batch. ("The login screen
        # with ..." is 0.962 in float but 0.945-0.961 in int8, depending on its batch-mates: too close
        # to the 0.95 threshold for a test.)
        + [{"content": "Login screen with the username and password fields", "type": "screen"}]
    )
    expected = [h.id for h in real_memory.search("how do I sign in to the bank?")]
    real_memory.flush()  # the index is written in the background (a search does not wait for it)
    archive = real_memory.backup(name="real").path
    with tarfile.open(archive) as tar:
        assert any(n.startswith("chroma/") for n in tar.getnames())
    with remindful.open(tmp_path / "fresh", embedder=onnx_embedder) as fresh:
        result = fresh.restore(archive, confirm=True)
        assert result.total == 10 and result.counts == result.expected
        assert [h.id for h in fresh.search("how do I sign in to the bank?")] == expected
        report = fresh.dedup(types=["screen"])
        assert report.clusters == 1 and report.deleted == 5
        assert fresh.index_status().available and fresh.stats().collections["screen_memories"].count == 2
