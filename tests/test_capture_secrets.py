"""A secret corpus captured through every path must never reach the catalog file, the Chroma
files, the logs or an export: redaction happens before anything is written."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

import remindful
from remindful.services.ingest.filters import apply_filters
from remindful.services.ingest.watcher import MarkdownWatcher
from remindful.shells.hook import run

SECRETS = [
    "4539578763621486",  # Visa test number (Luhn-valid)
    "5500 0055 5555 5559",
    "jane.doe.secret@corp-mail.example",
    "AKIAQWERTYUIOPASDFGH",
    "ghp_R4nd0mT0k3nV4lu3F0rT3st1ngPurp0s3sXY",
    "sk-proj-Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0FeDcBa",
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJ1c2VyLTQyIn0.c2lnbmF0dXJlLXZhbHVlLWhlcmU",
    "hunter2-Extremely-Secret",
    "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7",
    "my-diary-entry-nobody-reads",
]
TEXT = (
    f"Paid with card {SECRETS[0]} and {SECRETS[1]}; mail {SECRETS[2]}. AWS {SECRETS[3]}, GitHub {SECRETS[4]}, "
    f"OpenAI {SECRETS[5]}, token {SECRETS[6]}. Login password={SECRETS[7]}.\n"
    f"-----BEGIN PRIVATE KEY-----\n{SECRETS[8]}\n-----END PRIVATE KEY-----\n<private>{SECRETS[9]}</private>"
)


def hook(store: Path, event: str, data: dict[str, Any]) -> None:
    assert run(["--path", str(store), "hook", event, "--no-context"], stdin=io.StringIO(json.dumps(data))) == 0


@pytest.mark.slow
def test_secret_corpus_never_reaches_any_file(tmp_path: Path, onnx_embedder: Any) -> None:
    store = tmp_path / "store"
    transcript = tmp_path / "t.jsonl"
    transcript.write_text(json.dumps({"type": "assistant", "message": {"content": [{"type": "text", "text": TEXT}]}}))
    base = {"session_id": "sec", "cwd": str(tmp_path), "transcript_path": str(transcript)}
    hook(store, "UserPromptSubmit", {**base, "prompt": TEXT})
    hook(store, "PostToolUseFailure", {**base, "tool_name": "Bash", "tool_input": {"command": TEXT}, "error": TEXT})
    hook(
        store,
        "PostToolUse",
        {
            **base,
            "tool_name": "Bash",
            "tool_input": {"command": "env"},
            "tool_response": {"stdout": TEXT},
            "tool_use_id": "t2",
        },
    )
    hook(store, "Stop", base)
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "notes.md").write_text(f"# Notes\n\n{TEXT}\n")
    with remindful.open(store, embedder=onnx_embedder) as memory:  # real MiniLM and embedded Chroma
        assert memory.drain_spool() == 4 and memory.stats().spool_pending == 0
        memory.store(TEXT, type="knowledge", metadata={"note": TEXT, "nested": [{"k": TEXT}]})
        mid = memory.store("placeholder", type="action")
        memory.update(mid, content=TEXT, metadata={"more": TEXT})
        result = apply_filters(memory.engine, TEXT, trigger="successful_actions", session_id="sec")
        memory.store(result.content, metadata=result.metadata)
        MarkdownWatcher(memory.engine, [docs]).scan()
        assert memory.search("card payment login", limit=5, min_score=0)  # the index really holds them
        exported = memory.export(output_path=str(tmp_path / "export.json"))
        counts = memory.stats().capture
        assert len(memory.list(limit=100)) >= 8
    assert counts["redacted_email"] >= 8 and counts["redacted_pem_private_key"] >= 8
    files = [p for p in store.rglob("*") if p.is_file()] + [Path(exported.path)]
    assert any("chroma" in str(p) for p in files)
    blob = b"".join(p.read_bytes() for p in files)
    leaks = [s for s in SECRETS if s.encode() in blob or s.replace(" ", "").encode() in blob]
    assert leaks == []
    assert b"[EMAIL_REDACTED]" in blob


# A password holding a separator, said in a prompt: the hook's rules cut it at the "&" and kept the
# rest ("the db password is [REDACTED]&3x9q"), which reached the spool, the catalog and the index.
SAID = [
    ("the db password is Tr0ub4dor&3x9q, save it for later", "&3x9q"),
    ("the password for the staging db is P@ss;w0rd$1", ";w0rd$1"),
    ("export PGPASSWORD=Sup3r(S3cret)!x && psql -h db", "(S3cret)!x"),
    ("my passphrase was correct,horse-7", ",horse-7"),
    ("the session token is 8f7e6d5c4b3a2918", "8f7e6d5c4b3a2918"),
]


def test_no_piece_of_a_password_said_in_a_prompt_reaches_a_file(tmp_path: Path) -> None:
    from remindful.testing import open_fake

    store = tmp_path / "store"
    base = {"session_id": "sec", "cwd": str(tmp_path), "transcript_path": str(tmp_path / "t.jsonl")}
    for text, _ in SAID:
        hook(store, "UserPromptSubmit", {**base, "prompt": text})
    with open_fake(store) as memory:
        assert memory.drain_spool() == len(SAID)
        memory.store(" ".join(text for text, _ in SAID), type="knowledge")
        stored = [m.content for m in memory.list(limit=100)]
        assert any("[REDACTED]" in content for content in stored), stored
    blob = b"".join(p.read_bytes() for p in store.rglob("*") if p.is_file())
    assert [piece for _, piece in SAID if piece.encode() in blob] == []
