"""A restore of an archive this store wrote puts the archive's vector-index files in place as they
are (a million memories' index is rebuilt in about ten minutes); any other archive's index is
rebuilt from its catalog, its files never loaded. Real Chroma, in this process and in another."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import remindful
from archives import repacked
from remindful.engine import catalog_files
from remindful.engine.mirror import IndexMirror
from remindful.index.chroma import ChromaEmbeddedIndex
from remindful.services import backup
from remindful.services.archive import ROWS_CHECKED, SEAL_KEY
from remindful.testing import FakeEmbedder

TEXTS = [f"note {i} about the {topic} in week {i // 7}" for i, topic in enumerate(["deploy", "lunch", "tax"] * 20)]


def open_store(path: Path, **settings: Any) -> Any:
    return remindful.open(path, embedder=FakeEmbedder(), **{"search.min_score": 0.0, **settings})


@pytest.fixture
def rebuilds(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """One entry a rebuild of the index from the catalog (its ``reset``)."""
    seen: list[bool] = []
    reindex = IndexMirror.reindex

    def counting(self: IndexMirror, *, reset: bool, **kwargs: Any) -> dict[str, int]:
        seen.append(reset)
        return reindex(self, reset=reset, **kwargs)

    monkeypatch.setattr(IndexMirror, "reindex", counting)
    return seen


@pytest.fixture
def adoptions(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The directories put in place of the index's files."""
    seen: list[Path] = []
    replace = ChromaEmbeddedIndex.replace_files

    def recording(self: ChromaEmbeddedIndex, files: Path) -> None:
        seen.append(files)
        replace(self, files)

    monkeypatch.setattr(ChromaEmbeddedIndex, "replace_files", recording)
    return seen


@pytest.fixture
def archived(tmp_path: Path) -> Iterator[tuple[Path, Path, list[str]]]:
    """A store of 60 memories and its archive, then changed: one stored, one deleted, one updated."""
    path = tmp_path / "s"
    with open_store(path) as memory:
        ids = memory.store_batch([{"content": t} for t in TEXTS])
        memory.flush()
        archive = Path(memory.backup("before").path)
        memory.store("the zeppelin hangar opens on friday")
        memory.delete(ids[1])
        memory.update(ids[2], content="the walrus sleeps on the pier")
        memory.flush()
    yield path, archive, ids


def answers(memory: Any) -> list[list[str]]:
    return [[h.id for h in memory.search(q, limit=5)] for q in ("deploy week 2", "lunch", "tax note 17", "zeppelin")]


def test_a_restore_of_its_own_archive_puts_the_archives_index_in_place(
    archived: tuple[Path, Path, list[str]], rebuilds: list[bool], adoptions: list[Path]
) -> None:
    path, archive, ids = archived
    with open_store(path) as memory:
        result = memory.restore(archive, confirm=True)
        assert adoptions and rebuilds == []  # loaded as it is: not rebuilt
        assert result.total == 60 and result.counts == result.expected
        assert memory.search("zeppelin hangar friday", limit=1)[0].content != "the zeppelin hangar opens on friday"
        assert memory.search(TEXTS[1], limit=1)[0].id == ids[1]  # deleted after: back
        assert memory.search(TEXTS[2], limit=1)[0].id == ids[2]  # its archived content and vector
        assert memory.engine.mirror.settle(timeout=60)
        here = answers(memory)
        added = memory.store("written after the restore: the lighthouse keeper")
        memory.flush()
        assert memory.search("lighthouse keeper", limit=1)[0].id == added
        index = memory.engine.mirror.index
        assert index is not None and index.count("action_memories") == 61
    with open_store(path) as memory:  # a fresh process
        assert answers(memory) == here
        assert memory.search("lighthouse keeper", limit=1)[0].id == added


@pytest.fixture
def rechecks(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The catalog files rebuilt from their rows, each re-checked (:func:`rebuild_from_rows`)."""
    seen: list[Path] = []
    rebuild = catalog_files.rebuild_from_rows

    def recording(path: Path, redaction: Any) -> dict[str, int]:
        seen.append(path)
        return rebuild(path, redaction)

    monkeypatch.setattr(catalog_files, "rebuild_from_rows", recording)
    return seen


def keyword_hits(memory: Any, words: str) -> list[str]:
    sql = "SELECT m.id FROM memories_fts f JOIN memories m ON m.rowid = f.rowid WHERE memories_fts MATCH ?"
    return sorted(row[0] for row in memory.engine.catalog.read(sql, [words]))


def test_its_own_archive_under_the_same_redaction_keeps_its_catalog_as_it_is(
    archived: tuple[Path, Path, list[str]], rechecks: list[Path], adoptions: list[Path]
) -> None:
    """The rows of an archive the store sealed passed the redaction the store has now: the catalog
    is used as it is (not rebuilt row by row), and is whole: its keyword and window indexes, its
    counts, its schema; the store goes on writing into it."""
    path, archive, ids = archived
    with open_store(path) as memory:
        result = memory.restore(archive, confirm=True)
        assert rechecks == [] and adoptions
        assert result.total == 60 and result.counts == result.expected
        assert memory.get(ids[2]).content == TEXTS[2] and memory.get(ids[1]) is not None
        assert memory.search("zeppelin hangar", limit=1)[0].content != "the zeppelin hangar opens on friday"
        assert keyword_hits(memory, "lunch") == sorted(i for i, t in zip(ids, TEXTS, strict=True) if "lunch" in t)
        assert memory.engine.catalog.read("PRAGMA integrity_check") == [("ok",)]
        added = memory.store("written after the restore: the lighthouse keeper")
        memory.flush()
        assert keyword_hits(memory, "lighthouse") == [added]
        assert memory.stats().total_memories == 61


def test_an_archive_of_an_older_redaction_or_without_its_record_is_rechecked(
    archived: tuple[Path, Path, list[str]],
    rechecks: list[Path],
    adoptions: list[Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A rule added since the backup (its text is then redacted: see the next test), and an
    archive sealed before the record was kept (its seal covers its files alone): the index files
    are still the store's own and put in place, the rows re-checked."""
    path, archive, _ = archived
    rule = [{"name": "walrus", "regex": r"walrus", "replacement": "[W]"}]
    with open_store(path, **{"privacy.redact_patterns": rule}) as memory:
        memory.restore(archive, confirm=True)
    assert len(rechecks) == 1 and len(adoptions) == 1
    with monkeypatch.context() as patched:
        patched.setattr(backup, "_rows_checked", lambda *args: None)
        with open_store(path) as memory:
            older = Path(memory.backup("older").path)
    with tarfile.open(older) as tar:
        manifest = tar.extractfile("manifest.json")
        assert manifest is not None and ROWS_CHECKED not in json.loads(manifest.read())
    with open_store(path) as memory:
        memory.restore(older, confirm=True)
    assert len(rechecks) == 2 and len(adoptions) == 2


def test_a_record_changed_in_the_manifest_breaks_the_seal(
    archived: tuple[Path, Path, list[str]], rechecks: list[Path], adoptions: list[Path], tmp_path: Path
) -> None:
    """The record is sealed with the files: an archive whose record was edited (to claim the
    store's current redaction, say) is another's: rebuilt, its index files not loaded."""
    path, archive, _ = archived

    def claim(folder: Path) -> None:
        manifest = json.loads((folder / "manifest.json").read_text())
        manifest[ROWS_CHECKED]["redaction"] = manifest[ROWS_CHECKED]["redaction"][::-1]
        (folder / "manifest.json").write_text(json.dumps(manifest))

    changed = repacked(archive, tmp_path, claim)
    with open_store(path) as memory:
        memory.restore(changed, confirm=True)
    assert len(rechecks) == 1 and adoptions == []


def test_only_an_archive_of_another_store_has_its_catalog_checked_again(
    archived: tuple[Path, Path, list[str]], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The catalog of an archive the store sealed passed SQLite's integrity check as it was written,
    and its bytes are the ones checked then: not checked again. Another store's is."""
    path, archive, _ = archived
    checked: list[Path] = []
    integrity = catalog_files.integrity

    def recording(catalog: Path) -> str:
        checked.append(catalog)
        return integrity(catalog)

    monkeypatch.setattr(catalog_files, "integrity", recording)
    with open_store(path) as memory:
        memory.restore(archive, confirm=True)
    assert checked == []
    with open_store(tmp_path / "other") as other:
        other.restore(archive, confirm=True)
        assert other.stats().total_memories == 60
    assert len(checked) == 1


def test_the_redactions_fingerprint_follows_what_decides_it(tmp_path: Path) -> None:
    from remindful.engine.redact import StoreRedactor, build_redactor

    def fingerprint(**kwargs: Any) -> str | None:
        return StoreRedactor(build_redactor(**kwargs), tmp_path).fingerprint

    same = fingerprint(library=True)
    assert same is not None and same == fingerprint(library=True)
    assert fingerprint(library=False) != same
    assert fingerprint(library=True, patterns=(("x", "walrus", "[W]"),)) != same
    assert fingerprint(library=True, defaults=False) != same
    assert fingerprint(redact=False) == "off"


def test_a_restore_of_another_stores_archive_rebuilds_the_index(
    archived: tuple[Path, Path, list[str]], rebuilds: list[bool], adoptions: list[Path], tmp_path: Path
) -> None:
    _, archive, ids = archived
    with open_store(tmp_path / "other") as memory:
        memory.store("a memory the restore replaces")
        memory.restore(archive, confirm=True)
        assert rebuilds == [False] and adoptions == []
        assert memory.search(TEXTS[2], limit=1)[0].id == ids[2]
        assert memory.stats().total_memories == 60


def test_an_archive_whose_index_files_were_changed_has_its_index_rebuilt(
    archived: tuple[Path, Path, list[str]], rebuilds: list[bool], adoptions: list[Path], tmp_path: Path
) -> None:
    """The seal covers every file's digest: index files changed by anyone without the store's key
    (here the HNSW graph, garbled) are never loaded, even with the manifest's digests made to match."""
    path, archive, ids = archived

    def garble(folder: Path) -> None:
        [graph] = [p for p in folder.rglob("data_level0.bin") if p.stat().st_size]
        data = bytearray(graph.read_bytes())
        data[100:400] = b"\xff" * 300
        graph.write_bytes(bytes(data))

    changed = repacked(archive, tmp_path, garble)
    with open_store(path) as memory:
        memory.restore(changed, confirm=True)
        assert rebuilds == [False] and adoptions == []
        assert memory.search(TEXTS[2], limit=1)[0].id == ids[2]
    assert (path / SEAL_KEY).stat().st_mode & 0o777 == 0o600
    with tarfile.open(archive) as tar:
        assert not any(SEAL_KEY in name for name in tar.getnames())  # the key never leaves the store


def test_a_memory_the_restore_redacts_gets_its_new_vector_in_the_index(tmp_path: Path, adoptions: list[Path]) -> None:
    """A row whose text the restore's re-check changes (a rule added since the backup) loses its
    vector: it is embedded anew and its vector in the placed index replaced."""
    path = tmp_path / "s"
    with open_store(path) as memory:
        planted = memory.store("the vault code is ZEBRA-88231 for the night shift")
        memory.store_batch([{"content": t} for t in TEXTS])
        memory.flush()
        archive = Path(memory.backup().path)
    rule = [{"name": "vault", "regex": r"ZEBRA-\d+", "replacement": "[VAULT]"}]
    with open_store(path, **{"privacy.redact_patterns": rule}) as memory:
        memory.restore(archive, confirm=True)
        assert adoptions
        row = memory.get(planted)
        assert "ZEBRA" not in row.content
        vector = memory.engine.embedder.embed([row.content])[0]
        [(found, score)] = memory.engine.mirror.index.query("action_memories", vector, 1)
        assert found == planted and score == pytest.approx(1.0, abs=1e-3)


CHILD = """
import sys
import remindful
from remindful.testing import FakeEmbedder
with remindful.open(sys.argv[1], embedder=FakeEmbedder(), **{"search.min_score": 0.0}) as memory:
    print(memory.search("deploy week 2", limit=1)[0].id, flush=True)
    for line in sys.stdin:
        if line.strip() == "search":
            print(" ".join(h.id for h in memory.search(sys.stdin.readline().strip(), limit=3)), flush=True)
        elif line.strip() == "store":
            new = memory.store(sys.stdin.readline().strip())
            assert memory.flush(timeout=60)
            print(new, flush=True)
"""


def test_another_process_with_the_store_open_reads_and_writes_the_placed_index(
    archived: tuple[Path, Path, list[str]], adoptions: list[Path]
) -> None:
    """A server that has the store open while it is restored: its next searches and writes are
    the restored store's, through the placed index files (its view is loaded afresh)."""
    path, archive, ids = archived
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert child.stdin is not None and child.stdout is not None
    try:
        child.stdout.readline()  # its index is open
        with open_store(path) as memory:
            memory.restore(archive, confirm=True)
            assert adoptions

            def ask(*lines: str) -> str:
                child.stdin.write("\n".join(lines) + "\n")  # type: ignore[union-attr]
                child.stdin.flush()  # type: ignore[union-attr]
                return child.stdout.readline().strip()  # type: ignore[union-attr]

            assert ask("search", TEXTS[2]).split()[0] == ids[2]
            assert "zeppelin" not in " ".join(h.content for h in memory.search("zeppelin hangar", limit=3))
            added = ask("store", "the child stored a note about the harbour crane")
            assert memory.search("harbour crane note", limit=1)[0].id == added
        with open_store(path) as memory:
            assert memory.search("harbour crane note", limit=1)[0].id == added
            assert memory.engine.mirror.index is not None
    finally:
        child.stdin.close()
        child.wait(timeout=60)
        child.stdout.close()
    assert child.returncode == 0


def test_a_write_during_a_backup_does_not_leave_its_index_out_of_step_with_its_catalog(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, adoptions: list[Path]
) -> None:
    """The catalog's snapshot and the index files' copy are taken under one hold of the index
    lock: an update indexed between them would leave the archive's index holding the new vector
    of a row its catalog holds as it was (and marked indexed), which the restore then trusts."""
    from remindful.services import backup as backup_module

    path = tmp_path / "s"
    with open_store(path) as memory:
        ids = memory.store_batch([{"content": t} for t in TEXTS])
        memory.flush()
        snapshot = backup_module.snapshot
        writer: list[threading.Thread] = []

        def then_update(*args: Any) -> None:
            snapshot(*args)
            thread = threading.Thread(
                target=lambda: (
                    memory.update(ids[5], content="the walrus sleeps on the pier"),
                    memory.flush(timeout=30),
                )
            )
            thread.start()
            writer.append(thread)
            thread.join(1.0)  # indexed by now, unless the index lock is held

        monkeypatch.setattr(backup_module, "snapshot", then_update)
        archive = Path(memory.backup().path)
        monkeypatch.setattr(backup_module, "snapshot", snapshot)
        writer[0].join(30)
        memory.restore(archive, confirm=True)
        assert adoptions
        [hit] = memory.search(TEXTS[5], limit=1)
        assert hit.id == ids[5] and hit.content == TEXTS[5]
        vector = memory.engine.embedder.embed([TEXTS[5]])[0]
        [(found, score)] = memory.engine.mirror.index.query("action_memories", vector, 1)
        assert found == ids[5] and score == pytest.approx(1.0, abs=1e-3)
