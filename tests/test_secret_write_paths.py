"""Issue 32, secrets at the write paths the rules alone do not cover: an attachment copied into the
store is scanned (a text file redacted, a binary one holding a secret refused), a restored archive
and an imported file are re-checked row by row, and a restored catalog is rebuilt from its rows (an
attacker's trigger in the archive's catalog does not survive)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from archives import repacked
from remindful.testing import open_fake

OPENAI = "sk-proj-" + "Ab3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5bC7dE9fG1hJ3kL5mN7pQ9rS1tU3vW5x_Y7zA9bC1-dE3fG5hJ7kL9"
PASSWORD = "Zq8!xR2#vN6^tM4*"


def _found(root: Path, secret: str, *, skip: tuple[str, ...] = ()) -> list[str]:
    """The files under ``root`` (outside ``skip``) holding any 12 characters of ``secret``."""
    pieces = {secret[i : i + 12].encode() for i in range(len(secret) - 11)}
    out = []
    for path in root.rglob("*"):
        if path.is_file() and not any(part in skip for part in path.relative_to(root).parts):
            data = path.read_bytes()
            if any(p in data for p in pieces):
                out.append(str(path.relative_to(root)))
    return out


# -- attachments ---------------------------------------------------------------------------------------


def test_a_copied_text_attachment_is_redacted(tmp_path: Path) -> None:
    notes = tmp_path / "deploy-notes.txt"
    notes.write_text(f"export OPENAI_API_KEY={OPENAI}\nmysql -u root -p{PASSWORD} prod\nthen restart\n")
    overrides = {
        "attachments.copy_attachments": True,
        "attachments.path_keys": ["file_path"],
        "security.allowed_paths": [tmp_path],
    }
    with open_fake(tmp_path / "s", **overrides) as memory:
        memory_id = memory.store("deploy notes", metadata={"file_path": str(notes)})
        copy = Path(memory.get(memory_id).metadata["file_path"])
        assert copy.parent.parent == memory.path / "attachments"
        text = copy.read_text()
        assert OPENAI[10:30] not in text and PASSWORD not in text and "then restart" in text
        memory.backup()
        assert _found(memory.path, OPENAI) == [] and _found(memory.path, PASSWORD) == []


def test_a_binary_attachment_holding_a_secret_is_not_copied(tmp_path: Path) -> None:
    shot = tmp_path / "terminal.png"
    shot.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x01" + f"password={PASSWORD}".encode() + b"\x00\xff" * 20)
    clean = tmp_path / "logo.png"
    clean.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x01\x02\x03")
    overrides = {"attachments.copy_attachments": True, "security.allowed_paths": [tmp_path]}
    with open_fake(tmp_path / "s", **overrides) as memory:
        refused = memory.store("terminal screenshot", metadata={"screenshot_path": str(shot)})
        kept = memory.store("logo", metadata={"screenshot_path": str(clean)})
        assert memory.get(refused).metadata["screenshot_path"] == str(shot)  # the reference only
        assert Path(memory.get(kept).metadata["screenshot_path"]).read_bytes() == clean.read_bytes()
        assert _found(memory.path, PASSWORD) == []


# -- restore and import --------------------------------------------------------------------------------


def _tampered_archive(archive: Path, out: Path, change: str, texts: dict[str, str] | None = None) -> Path:
    """``archive`` with ``change`` (SQL) run on its catalog, the files named in ``texts`` (whose
    relative path ends with the key) given that text, and the manifest's digests made to match."""

    def tamper(work: Path) -> None:
        for path in work.rglob("*"):
            for tail, text in (texts or {}).items():
                if path.is_file() and path.as_posix().endswith(tail):
                    path.write_text(text)
        conn = sqlite3.connect(work / "catalog.sqlite3")
        conn.executescript(change)
        conn.commit()
        conn.close()

    return repacked(archive, out, tamper)


def test_restore_rechecks_every_row_and_rebuilds_the_catalog(tmp_path: Path) -> None:
    with open_fake(tmp_path / "a") as memory:
        planted = memory.store("the staging deploy needs a key")
        memory.store("an ordinary memory", session_id="s-1")
        archive = Path(memory.backup().path)
    secret_row = f"OpenAI key {OPENAI} and redis-cli -a {PASSWORD} ping"
    change = (
        f"UPDATE memories SET content = '{secret_row}', metadata = '{{\"note\": \"mysql -p{PASSWORD}\"}}' "
        f"WHERE id = '{planted}';"
        "CREATE TRIGGER planted_trigger AFTER INSERT ON memories BEGIN "
        "UPDATE memories SET content = 'owned by the trigger'; END;"
        "CREATE VIEW planted_view AS SELECT * FROM memories;"
    )
    tampered = _tampered_archive(archive, tmp_path, change)
    with open_fake(tmp_path / "b") as other:
        other.restore(tampered, confirm=True)
        restored = other.get(planted)
        assert restored is not None
        assert OPENAI[10:30] not in restored.content and PASSWORD not in restored.content
        assert PASSWORD not in json.dumps(restored.metadata)
        later = other.store("a memory written after the restore")
        assert other.get(later).content == "a memory written after the restore"
        assert other.get(planted).content != "owned by the trigger"
        conn = sqlite3.connect(other.path / "catalog.sqlite3")
        names = {name for (name,) in conn.execute("SELECT name FROM sqlite_master")}
        conn.close()
        assert "planted_trigger" not in names and "planted_view" not in names
        other.flush()
        assert _found(other.path, OPENAI, skip=("backups",)) == []
        assert _found(other.path, PASSWORD, skip=("backups",)) == []


def test_restore_rechecks_attachment_copies(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("nothing secret here\n")
    shot = tmp_path / "shot.png"
    shot.write_bytes(b"\x89PNG\r\n\x1a\n\x00clean")
    overrides = {
        "attachments.copy_attachments": True,
        "attachments.path_keys": ["file_path", "screenshot_path"],
        "security.allowed_paths": [tmp_path],
    }
    with open_fake(tmp_path / "a", **overrides) as memory:
        memory.store("notes", metadata={"file_path": str(notes), "screenshot_path": str(shot)})
        archive = Path(memory.backup().path)
    texts = {"notes.txt": f"docker login -u ci -p {PASSWORD} ghcr.io\nkeep this line\n"}
    tampered = _tampered_archive(archive, tmp_path, "", texts)
    with open_fake(tmp_path / "b", **overrides) as other:
        other.restore(tampered, confirm=True)
        copies = list((other.path / "attachments").rglob("notes.txt"))
        assert len(copies) == 1 and "keep this line" in copies[0].read_text()
        assert _found(other.path, PASSWORD, skip=("backups",)) == []


def test_import_rechecks_every_row(tmp_path: Path) -> None:
    source = tmp_path / "import.json"
    memories = [
        {
            "id": "knowledge_20240101000000000001_0000abcd",
            "type": "knowledge",
            "content": f"ANTHROPIC_API_KEY={OPENAI.replace('sk-proj-', 'sk-ant-api03-')}",
            "metadata": {"cmd": f"sshpass -p '{PASSWORD}' ssh deploy@10.0.0.5"},
            "source": "manual",
            "created_at": 1_704_067_200.0,
        }
    ]
    source.write_text(json.dumps({"format": "remindful-export", "version": 1, "memories": memories}))
    with open_fake(tmp_path / "s") as memory:
        memory.import_memories(source)
        memory.flush()
        assert _found(memory.path, OPENAI[10:]) == [] and _found(memory.path, PASSWORD) == []


def test_a_correction_is_redacted_before_its_words_are_joined(tmp_path: Path) -> None:
    """The rule statement of a correction joins its words on one line, where a .netrc or key lines
    no longer look like them: the texts are redacted first."""
    netrc = f"machine api.heroku.com\n  login jane\n  password {PASSWORD}\n"
    with open_fake(tmp_path / "s") as memory:
        memory.capture_correction(f"Deploy with {netrc}", "Deploy with the vault credentials", context=netrc)
        memory.flush()
        assert _found(memory.path, PASSWORD) == []
