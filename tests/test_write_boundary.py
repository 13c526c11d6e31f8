"""Issue 28 item 5: redaction is a property of the store's write boundary, not of each caller.

Session ids are stored as their redactor maps them (secret replaced, a keyed digest appended) by
every writer, the Store's row builder, the catalog's own inserts, the spool of hook processes and
of the proxy, and every reader that looks a session up maps the raw id the same way. The catalog
redacts what any other path writes (imported rows, audit details, session metadata, reinforcement
queries); the spool refuses text that did not pass the redactor.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from remindful.engine import spool
from remindful.engine.catalog import MemoryRow
from remindful.engine.redact import SESSION_KEY_NAME, StoreRedactor, build_redactor, session_key
from remindful.model import content_hash
from remindful.services.ingest.drainer import drain_spool
from remindful.services.ingest.events import build_record
from remindful.services.ingest.filters import CaptureFilter, FilterConfig
from remindful.services.ingest.hooks import spool_record
from remindful.services.ingest.watcher import MarkdownWatcher
from remindful.testing import InMemoryIndex, catalog_rows, open_fake

AWS = "AKIAQWERTYUIOPASDFGH"
RAW_SESSION = f"deploy-{AWS}"
PASSWORD = "Sup3rS3cret!x9"


def files_bytes(root: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file())


# -- session ids -------------------------------------------------------------------------------------


def test_a_session_id_with_a_secret_is_stored_mapped_and_found_by_the_raw_id(tmp_path: Path) -> None:
    store = tmp_path / "s"
    with open_fake(store) as memory:
        mid = memory.store("rolled out the deploy", session_id=RAW_SESSION)
        memory.store_batch([{"content": "second step of the deploy", "session_id": RAW_SESSION}])
        mapped = memory.get(mid).session_id
        assert mapped is not None and AWS not in mapped and mapped.startswith("deploy-[AWS_KEY_REDACTED]~")
        assert memory.engine.stored_session_id(mapped) == mapped  # a stored id maps to itself
        # every reader maps the raw id the same way
        assert memory.session_size(RAW_SESSION) == 2
        assert {m.id for m in memory.list(session_id=RAW_SESSION)} >= {mid}
        assert mid in {h.id for h in memory.search("deploy", session_id=RAW_SESSION)}
        assert mid in {h.id for h in memory.search("deploy", filters={"session_id": RAW_SESSION})}
        assert mid in {h.id for h in memory.search("deploy", filters={"session_id": {"$in": [RAW_SESSION]}})}
        assert memory.resume_session(RAW_SESSION) == 2
        (listed,) = memory.list_sessions(session_id=RAW_SESSION)
        assert listed.id == mapped and listed.resumed and listed.memory_count == 2
        memory.flush()
        assert memory.delete_session(RAW_SESSION, confirm=True).deleted == 2
        assert memory.list_sessions(session_id=RAW_SESSION) == []
    assert AWS.encode() not in files_bytes(store)


def test_a_reader_of_a_stored_session_needs_no_secret_detector(tmp_path: Path) -> None:
    """A stored id is its own stored id: looking it up in the catalog, a reader's first session
    filter does not load detect-secrets (0.15-0.25 s a process: every ``search --session`` on the
    command line paid it). An id carrying a secret is still found by its raw form."""
    store = str(tmp_path / "s")
    write = (
        "import sys; from remindful.testing import open_fake\n"
        f"with open_fake({store!r}) as m:\n"
        "    m.store('rolled out the deploy', session_id='sess-1')\n"
        f"    m.store('second step of the deploy', session_id={RAW_SESSION!r})\n"
        "print('detect_secrets' in sys.modules)\n"
    )
    read = (
        "import sys; from remindful.testing import open_fake\n"
        f"with open_fake({store!r}) as m:\n"
        "    found = [len(m.search('deploy', session_id='sess-1')), len(m.list(session_id='sess-1')),\n"
        "             m.session_size('sess-1'), len(m.list_sessions(session_id='sess-1'))]\n"
        "    loaded = 'detect_secrets' in sys.modules\n"
        f"    found.append(len(m.search('deploy', session_id={RAW_SESSION!r})))\n"
        "print(found, loaded)\n"
    )
    run = {"capture_output": True, "text": True, "check": True, "timeout": 120}
    assert subprocess.run([sys.executable, "-c", write], **run).stdout.split() == ["True"]  # writes load it
    assert subprocess.run([sys.executable, "-c", read], **run).stdout.split() == [
        "[1,",
        "1,",
        "1,",
        "1,",
        "1]",
        "False",
    ]


def test_the_process_session_set_with_a_secret_is_marked_current_under_its_stored_id(tmp_path: Path) -> None:
    with open_fake(tmp_path / "s") as memory:
        memory.session_id = RAW_SESSION
        mid = memory.store("a note of this process")
        (listed,) = memory.list_sessions()
        assert listed.current and listed.id == memory.get(mid).session_id != RAW_SESSION


def test_the_session_key_is_private_made_once_and_shared_by_every_process(tmp_path: Path) -> None:
    store = tmp_path / "s"
    with open_fake(store) as memory:
        mapped = memory.engine.stored_session_id(RAW_SESSION)
    key_file = store / SESSION_KEY_NAME
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600 and len(key_file.read_bytes()) == 32
    # a hook process builds its own redactor for the storage directory: same key, same id
    assert StoreRedactor(build_redactor(), store).session_id(RAW_SESSION) == mapped
    # another store has another key: a digest confirms nothing about another store's ids
    assert StoreRedactor(build_redactor(), tmp_path / "other").session_id(RAW_SESSION) != mapped
    # an id without a secret needs no key, and makes none
    assert StoreRedactor(build_redactor(), tmp_path / "third").session_id("deploy-42") == "deploy-42"
    assert not (tmp_path / "third").exists()


def test_processes_making_the_key_at_once_agree_on_one(tmp_path: Path) -> None:
    code = (
        "import sys; from remindful.engine.redact import session_key; sys.stdout.write(session_key(sys.argv[1]).hex())"
    )
    children = [
        subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "s")], stdout=subprocess.PIPE, text=True)
        for _ in range(6)
    ]
    keys = {child.communicate(timeout=60)[0] for child in children}
    assert len(keys) == 1 and bytes.fromhex(keys.pop()) == session_key(tmp_path / "s")
    assert [p.name for p in (tmp_path / "s").iterdir()] == [SESSION_KEY_NAME]  # nothing left aside


def test_a_hook_event_spools_the_mapped_id_and_the_drain_stores_it_once(tmp_path: Path) -> None:
    store = tmp_path / "s"
    flt = CaptureFilter(FilterConfig.from_mapping({}))
    payload = {"session_id": RAW_SESSION, "cwd": str(tmp_path), "prompt": "deploy the app to staging"}
    for _ in range(2):  # a replayed event (by another hook process)
        flt = CaptureFilter(FilterConfig.from_mapping({}))
        record, _ = build_record("UserPromptSubmit", payload, 1_700_000_000.0, flt.redactor, {})
        assert spool_record(str(store), flt, {}, "UserPromptSubmit", payload, record, warn=print)
    start = {**payload, "source": "startup"}
    record, _ = build_record("SessionStart", start, 1_699_999_999.0, flt.redactor, {})
    assert spool_record(str(store), flt, {}, "SessionStart", start, record, warn=print) is not None
    assert AWS.encode() not in files_bytes(store)
    with open_fake(store) as memory:
        mapped = memory.engine.stored_session_id(RAW_SESSION)
        payloads = [json.loads(p) for (p,) in catalog_rows(store, "SELECT payload FROM spool")]
        assert {p["session_id"] for p in payloads} == {mapped}
        assert drain_spool(memory.engine, resolve=memory.project_of) >= 1
        (prompt,) = memory.list(session_id=RAW_SESSION)
        assert prompt.session_id == mapped
        (listed,) = memory.list_sessions(session_id=RAW_SESSION)
        assert listed.id == mapped and listed.memory_count == 1
        memory.flush()
    assert AWS.encode() not in files_bytes(store)


def test_an_excluded_session_is_matched_on_the_raw_id_and_audited_without_its_secret(tmp_path: Path) -> None:
    store = tmp_path / "s"
    flt = CaptureFilter(FilterConfig.from_mapping({"privacy": {"exclude_sessions": [f"*{AWS}*"]}}))
    payload = {"session_id": RAW_SESSION, "prompt": "deploy the app"}
    record, _ = build_record("UserPromptSubmit", payload, 1_700_000_000.0, flt.redactor, {})
    assert spool_record(str(store), flt, {}, "UserPromptSubmit", payload, record, warn=print) is None
    assert catalog_rows(store, "SELECT count(*) FROM spool") == [(0,)]
    (detail,) = catalog_rows(store, "SELECT detail FROM audit_log WHERE action = 'capture_excluded'")
    assert "session" in detail[0] and AWS not in detail[0]


# -- the spool -----------------------------------------------------------------------------------------


def test_the_spool_takes_records_and_payloads_never_plain_text(tmp_path: Path) -> None:
    redaction = StoreRedactor(build_redactor(), tmp_path)
    conn = spool.connect(tmp_path)
    spool.ensure_tables(conn)
    with pytest.raises(TypeError):
        spool.append(conn, "k1", "x", json.dumps({"session_id": RAW_SESSION}), 1.0, redaction=redaction)
    with pytest.raises(TypeError):
        spool.write_fallback(tmp_path, {"idem_key": "k", "kind": "x", "payload": "{}", "created_at": 1.0})
    record = {"session_id": RAW_SESSION, "memories": [{"content": f"password={PASSWORD}", "metadata": {"token": "x1"}}]}
    spool.append(conn, "k2", "x", record, 1.0, redaction=redaction)
    # a fallback file written by an older version: re-encoded on import
    spool.append_many(
        conn, [("k3", "x", json.dumps(record), 2.0), ("k4", "x", f"not json {AWS}", 3.0)], redaction=redaction
    )
    conn.commit()
    rows = [p for (p,) in conn.execute("SELECT payload FROM spool ORDER BY seq")]
    conn.close()
    assert len(rows) == 3 and not any(AWS in p or PASSWORD in p for p in rows)
    assert json.loads(rows[0])["session_id"] == redaction.session_id(RAW_SESSION) == json.loads(rows[1])["session_id"]
    assert json.loads(rows[0])["memories"][0]["metadata"]["token"] == "[REDACTED]"


# -- the catalog's own writes ---------------------------------------------------------------------------


def test_the_catalog_redacts_a_row_that_did_not_come_through_the_row_builder(tmp_path: Path) -> None:
    with open_fake(tmp_path / "s") as memory:
        catalog = memory.engine.catalog
        content = f"the key is {AWS}"
        row = MemoryRow(
            id="action_20240101000000000000_0000abcd",
            type="action",
            content=content,
            metadata=json.dumps({"db": {"password": PASSWORD}, "note": content}),
            source="manual",
            memory_class="episodic",
            session_id=RAW_SESSION,
            created_at=1_704_067_200.0,
            content_hash=content_hash(content),
            chunk=json.dumps({"parent_id": f"doc-{AWS}", "index": 0, "total": 1}),
        )
        row.embedding = memory.engine.embedder.embed([content])[0]
        catalog.write(lambda conn: catalog.insert_memories(conn, [row]))
        stored = memory.get(row.id)
        assert AWS not in stored.content and stored.content_hash == content_hash(stored.content)
        assert stored.metadata["db"]["password"] == "[REDACTED]" and AWS not in json.dumps(stored.metadata)
        assert stored.session_id == memory.engine.stored_session_id(RAW_SESSION)
        assert stored.chunk is not None and AWS not in stored.chunk.parent_id
        assert row.embedding is None  # made from the secret: embedded again from the redacted text
        assert catalog_rows(memory, "SELECT value FROM capture_stats WHERE name = 'redacted_aws_access_key'")[0][0] >= 2


def test_import_maps_session_ids_and_redacts_every_field(tmp_path: Path) -> None:
    source = tmp_path / "in.json"
    item = {
        "id": "knowledge_20240101000000000001_00000001",
        "type": "knowledge",
        "content": f"imported note with {AWS}",
        "metadata": {"creds": {"api_key": "abcdefghijkl"}, "note": AWS},
        "source": "manual",
        "session_id": RAW_SESSION,
        "created_at": 1_704_067_200.0,
    }
    source.write_text(json.dumps({"format": "remindful-export", "version": 1, "memories": [item]}))
    with open_fake(tmp_path / "s") as memory:
        assert memory.import_memories(str(source)).imported == 1
        stored = memory.get(item["id"])
        assert stored.session_id == memory.engine.stored_session_id(RAW_SESSION)
        assert memory.session_size(RAW_SESSION) == 1
        memory.flush()
    blob = files_bytes(tmp_path / "s")
    assert AWS.encode() not in blob and b"abcdefghijkl" not in blob


def test_confirm_keeps_the_query_redacted(tmp_path: Path) -> None:
    with open_fake(tmp_path / "s") as memory:
        mid = memory.store("the staging deploy runs from the release branch", type="knowledge")
        memory.confirm(f"deploy with password={PASSWORD} and {AWS}", mid)
        (query,) = [q for (q,) in catalog_rows(memory, "SELECT query FROM reinforcements")]
        assert PASSWORD not in query and AWS not in query and "deploy" in query


def test_session_metadata_and_audit_details_are_redacted(tmp_path: Path) -> None:
    with open_fake(tmp_path / "s") as memory:
        catalog = memory.engine.catalog

        def write(conn: Any) -> None:
            catalog.upsert_session(conn, RAW_SESSION, 1.0, metadata={"pending_prompt": {"prompt": f"use {AWS}"}})
            catalog.audit(conn, "test", None, {"file": Path(f"/tmp/{AWS}.json"), "password": PASSWORD})

        catalog.write(write)
        assert catalog.session_metadata(RAW_SESSION)["pending_prompt"]["prompt"] == "use [AWS_KEY_REDACTED]"
        rows = catalog_rows(memory, "SELECT id, metadata FROM sessions") + catalog_rows(
            memory, "SELECT action, detail FROM audit_log"
        )
        assert rows and not any(AWS in str(r) or PASSWORD in str(r) for r in rows)


def test_a_config_change_of_a_secret_named_setting_keeps_neither_value(tmp_path: Path) -> None:
    with open_fake(tmp_path / "s") as memory:
        found = memory.capture_config_change("api_token", f"old-{PASSWORD}", PASSWORD)
        assert found is not None
        assert PASSWORD not in found.content and "api token" in found.content
        assert found.metadata["new_value"] == found.metadata["old_value"] == "[REDACTED]"
        plain = memory.capture_config_change("editor.theme", "light", "dark")
        assert plain is not None and "dark" in plain.content
        memory.flush()
    assert PASSWORD.encode() not in files_bytes(tmp_path / "s")


# -- the Markdown watcher -----------------------------------------------------------------------------


def test_the_watcher_redacts_the_whole_file_before_it_chunks_it(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    card = "4539 5787 6362 1486"  # a grouped card whose last two groups start chunk 2 (word 200)
    filler = " ".join(f"filler{i}" for i in range(198))
    tail = " ".join(f"tail{i}" for i in range(150))
    (docs / "card.md").write_text(f"{filler} card {card} paid {tail}\n")
    key_lines = [f"{'QUJD' * 15}{i:04d}" for i in range(12)]
    pem = "-----BEGIN RSA PRIVATE KEY-----\n" + "\n".join(key_lines) + "\n-----END RSA PRIVATE KEY-----"
    (docs / "pem.md").write_text(f"{' '.join(f'w{i}' for i in range(190))} {pem} {tail}\n")
    with open_fake(tmp_path / "s") as memory:
        MarkdownWatcher(memory.engine, [docs]).scan()
        chunks = memory.list(type="document", limit=100)
        assert len(chunks) >= 4
        text = " ".join(c.content for c in chunks)
        assert "[CARD_REDACTED]" in text and "[PRIVATE_KEY_REDACTED]" in text
        memory.flush()
    blob = files_bytes(tmp_path / "s")
    digits = card.replace(" ", "")
    for half in (digits[:8], digits[8:]):  # either half of the card, in any spacing
        assert half.encode() not in blob.replace(b" ", b""), half
    assert not any(line.encode() in blob for line in key_lines)


# -- the vector index ----------------------------------------------------------------------------------


class RecordingIndex(InMemoryIndex):
    """The in-memory index, keeping every metadata it was given."""

    def __init__(self) -> None:
        super().__init__()
        self.given: list[dict[str, Any]] = []

    def upsert(self, collection: str, ids: Any, embeddings: Any, metadatas: Any) -> None:
        self.given += [dict(m) for m in metadatas]
        super().upsert(collection, ids, embeddings, metadatas)


def test_the_vector_index_gets_ids_and_vectors_but_no_text_anyone_wrote(tmp_path: Path) -> None:
    index = RecordingIndex()
    with open_fake(tmp_path / "s", index=index) as memory:
        memory.store("indexed note", session_id="canary-session", metadata={"note": "canary-metadata"})
        assert memory.flush()
        assert memory.search("indexed note", filters={"note": "canary-metadata"}, session_id="canary-session")
    assert index.given and "canary" not in json.dumps(index.given)
    # Nor any column: filters are evaluated on the catalog, and Chroma kept three metadata rows and
    # two indexes per vector for them (~250 B a memory, the issue-34 disk budget).
    assert index.given == [{}]


# -- defects found by the secret matrix --------------------------------------------------------------


def test_an_id_indexed_twice_in_one_batch_is_upserted_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with open_fake(tmp_path / "s", **{"performance.async_indexing": False}) as memory:
        mid = memory.store("stored, then updated before the indexer ran")
        catalog = memory.engine.catalog
        catalog.mark_indexed([mid], False)
        memory.engine.mirror.index_ids([mid, mid])  # raised "ids must be unique within one upsert call"
        assert catalog_rows(memory, "SELECT indexed FROM memories WHERE id = ?", (mid,)) == [(1,)]


@pytest.mark.anyio
async def test_memory_update_takes_a_content_that_looks_like_json(tmp_path: Path) -> None:
    from mcp import Client

    from mcp_client import call
    from remindful.shells.mcp.server import build_server

    async with Client(build_server(path=tmp_path / "s")) as client:
        stored = await call(client, "memory_store", content="placeholder", session_id="null")
        text = json.dumps({"service": "billing", "api_key": "abcdefghijklmnop"})
        updated = await call(client, "memory_update", memory_id=stored["memory_id"], content=text)
        assert updated["memory"]["content"] == json.dumps({"service": "billing", "api_key": "[REDACTED]"})
        assert (await call(client, "memory_update", memory_id=stored["memory_id"], content="null"))["memory"][
            "content"
        ] == "null"
        got = await call(client, "memory_get", memory_id=stored["memory_id"])
        assert got["memory"]["session_id"] == "null"  # a session id is text too


def test_the_redactor_returns_a_text_it_redacted_before_at_once_and_unchanged() -> None:
    redactor = build_redactor()
    assert redactor is not None
    text = f"{'word ' * 200} password={PASSWORD} {AWS}"
    counts: dict[str, int] = {}
    once = redactor.redact(text, counts)
    again: dict[str, int] = {}
    assert redactor.redact(once, again) == once and again == {} and counts
    assert redactor.redact(text) == once  # the input itself is not taken for clean


def test_the_key_file_is_not_in_a_backup(tmp_path: Path) -> None:
    import tarfile

    with open_fake(tmp_path / "s") as memory:
        memory.store("note", session_id=RAW_SESSION)
        backup = memory.backup("with-key")
    with tarfile.open(backup.path) as archive:
        assert not any(SESSION_KEY_NAME in name for name in archive.getnames())
    assert os.path.exists(tmp_path / "s" / SESSION_KEY_NAME)


def test_the_hook_log_is_redacted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from remindful.shells.hook import hook_log

    hook_log(str(tmp_path), "ERROR", f"could not spool the event of session deploy-{AWS}: password={PASSWORD}")
    written = (tmp_path / "logs" / "hooks.log").read_text() + capsys.readouterr().err
    assert "could not spool" in written and AWS not in written and PASSWORD not in written
