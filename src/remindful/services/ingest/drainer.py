"""Drain the spool into memories: the explicit step of whoever owns the store (the daemon's loop,
``MemoryManager.drain_spool`` for the CLI, ``remindful serve`` and the proxy).

Exactly once: rows are drained under ``<storage>/spool.lock`` (one drainer at a time; the others
return at once), stored through ``Store.store_batch`` and then deleted from the spool with
their keys recorded in ``spool_done``, in one transaction. A crash between the store and the
delete leaves the row in the spool; re-draining it finds the memory already stored (same content
hash, same session, same ``spool_key``) and does not store it again.

Mapping: Pre/PostToolUse(Failure) → ``action`` memories, source ``hook``; UserPromptSubmit →
``conversation``, source ``hook``; Stop/SubagentStop/SessionEnd → the assistant's final answer as
``conversation``, source ``response`` (chunked when over 500 words, every chunk carrying the same
``response_id``; an answer already stored for the session is not stored again);
SessionStart/SessionEnd open and close the session record. A row that fails is retried on later
drains up to :data:`MAX_ATTEMPTS` times; a row that can never be stored (invalid input, a payload
over ``limits.hook_payload_bytes``, or out of attempts) is moved aside to ``spool-rejected.jsonl``
in the storage directory with its error and a log line, so no drain is ever stuck on it (and
nothing is dropped).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from remindful.engine import spool
from remindful.engine.spool import FALLBACK_NAME, REJECTED_NAME, write_fallback
from remindful.errors import RemindfulError, StorageError, ValidationError
from remindful.model import ChunkMetadata, content_hash
from remindful.services.ingest.calls import capture_item
from remindful.services.ingest.chunker import chunk_text
from remindful.services.ingest.filters import apply_filters, filter_for
from remindful.services.ingest.spooled import KIND as CAPTURE_KIND
from remindful.services.ingest.spooled import call_from_record, owner_alive

if TYPE_CHECKING:
    from remindful.engine.store import Store

log = logging.getLogger("remindful.services.ingest")

BATCH = 200
LOCK_NAME = "spool.lock"
MAX_ATTEMPTS = 5
RESPONSE_CHUNK_WORDS = 500


@contextlib.contextmanager
def spool_lock(storage: Path) -> Iterator[bool]:
    """Try to become the one drainer: yields True if the lock was taken, False if someone has it."""
    fd = os.open(storage / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def pending(store: Store) -> bool:
    """Whether anything waits in the spool (one indexed query and a stat: cheap)."""
    catalog = store.catalog
    if _fallback_files(store.path, include_live=True):
        return True
    return spool.pending(catalog.read, MAX_ATTEMPTS)


def drain_spool(store: Store, *, limit: int | None = None) -> int:
    """Store pending spooled events through ``store`` (the Store's write path: validated, redacted,
    indexed); returns the events processed. Safe to call from many processes at once: one drains
    under the spool lock, the others return 0."""
    if not pending(store):
        return 0
    with spool_lock(store.path) as mine:
        if not mine:
            return 0
        catalog = store.catalog
        _import_fallback(store)
        done = 0
        after = 0  # each row once per drain: a failed one waits for the next drain
        while limit is None or done < limit:
            # An oversized payload is not read here (None): it is set aside, read once, by _process.
            rows = spool.claim(
                catalog.read,
                after=after,
                limit=BATCH if limit is None else min(BATCH, limit - done),
                max_attempts=MAX_ATTEMPTS,
                payload_limit=store.settings.limits.hook_payload_bytes,
            )
            if not rows:
                break
            done += _process(store, rows)
            after = rows[-1][0]
        return done


def _fallback_files(storage: Path, *, include_live: bool) -> list[Path]:
    """The fallback file (when ``include_live``) and the copies a drainer took to import and did
    not finish (it died, or its import failed): only the one drainer holding the spool lock may
    take them, and importing twice is harmless (rows are keyed)."""
    live = storage / FALLBACK_NAME
    taken = sorted(storage.glob(f"{FALLBACK_NAME}.*.draining"))
    return ([live] if include_live and live.exists() else []) + taken


def _import_fallback(store: Store) -> None:
    """Move the fallback file aside and import it, with any copy an earlier drainer left behind
    (the caller holds the spool lock)."""
    path = store.path / FALLBACK_NAME
    if path.exists():
        os.replace(path, path.with_name(f"{FALLBACK_NAME}.{os.getpid()}.draining"))
    for taken in _fallback_files(store.path, include_live=False):
        records: list[tuple[str, str, str, float]] = []
        for line in taken.read_text(encoding="utf-8", errors="replace").splitlines():
            with contextlib.suppress(ValueError, KeyError, TypeError):
                r = json.loads(line)
                records.append((r["idem_key"], r["kind"], r["payload"], float(r["created_at"])))
        catalog = store.catalog
        append = partial(spool.append_many, records=records, redaction=catalog.redaction)
        catalog.write(append, what="importing spooled events")
        taken.unlink()


def _process(store: Store, rows: list[Any]) -> int:
    """Store a batch of spool rows; returns how many were processed (stored, skipped or failed)."""
    catalog = store.catalog
    per_row: list[tuple[int, str, dict[str, Any], list[dict[str, Any]]]] = []
    failures: dict[int, str] = {}
    hopeless: set[int] = set()  # failures no retry can fix: set aside now
    seen: set[str] = set()  # responses already taken in this batch (Stop and SessionEnd together)
    attempts = {row[0]: row[5] for row in rows}
    for seq, key, kind, payload, _created, _attempts in rows:
        if payload is None:
            limit = store.settings.limits.hook_payload_bytes
            failures[seq] = f"payload over limits.hook_payload_bytes ({limit:,} bytes)"
            hopeless.add(seq)
            continue
        try:
            record = json.loads(payload)
            if kind == CAPTURE_KIND:
                if owner_alive(record.get("owner")):
                    continue  # its live process stores it (and then deletes the row)
                per_row.append((seq, key, record, _capture_items(store, record, key)))
            else:
                per_row.append((seq, key, record, _items(store, record, key, seen)))
        except StorageError:
            raise
        except Exception as exc:  # a record that cannot be read never will be
            failures[seq] = f"{type(exc).__name__}: {exc}"
            hopeless.add(seq)
    all_items = [item for *_, items in per_row for item in items]
    done = per_row
    try:
        if all_items:
            store.store_batch(all_items, defer=False)
    except StorageError:
        raise  # the store is unusable: leave every row for the next drain
    except Exception:
        done = []
        for entry in per_row:  # one bad item must not hold back the others
            try:
                if entry[3]:
                    store.store_batch(entry[3], defer=False)
                done.append(entry)
            except StorageError:
                raise
            except Exception as exc:
                failures[entry[0]] = f"{type(exc).__name__}: {exc}"
                if isinstance(exc, ValidationError):
                    hopeless.add(entry[0])
    hopeless |= {seq for seq in failures if attempts[seq] + 1 >= MAX_ATTEMPTS}
    for seq in hopeless:
        _set_aside(store, seq, failures[seq])
    now = time.time()

    def finish(conn: Any) -> None:
        for seq, key, record, _ in done:
            spool.finish(conn, seq, key, now)
            if record.get("session"):
                _session_op(catalog, conn, record)
        for seq, error in failures.items():
            if seq in hopeless:
                spool.give_up(conn, seq, now)
            else:
                spool.retry_later(conn, seq, error)
        if any(seq % 500 == 0 for seq, *_ in done):  # now and then, forget old keys
            spool.forget_keys(conn, now)

    catalog.write(finish, what="finishing spooled events")
    for seq, error in failures.items():
        if seq in hopeless:
            log.warning("spooled hook event %d cannot be stored, set aside in %s: %s", seq, REJECTED_NAME, error[:500])
        else:
            log.warning("spooled hook event %d failed (kept for retry): %s", seq, error[:500])
    for _, _, record, _ in done:
        _learn_from_turn(store, record)
    return len({seq for seq, *_ in per_row} | failures.keys())  # a row that failed is counted once


def _set_aside(store: Store, seq: int, error: str) -> None:
    """Append the spool row ``seq`` with ``error`` to ``spool-rejected.jsonl`` (0600); the caller
    then deletes it from the spool."""
    found = spool.row(store.catalog.read, seq)
    if found is not None:
        key, kind, payload, created = found
        record = {"idem_key": key, "kind": kind, "payload": payload, "created_at": created, "error": error[:2000]}
        write_fallback(store.path, record, name=REJECTED_NAME)


def _learn_from_turn(store: Store, record: dict[str, Any]) -> None:
    """A UserPromptSubmit prompt and the Stop answer after it make one conversation turn, which goes
    through ``capture_conversation`` (it stores nothing unless conversation capture is on). The
    prompt waits in the session's metadata (``pending_prompt``) until its answer arrives."""
    event = record.get("event")
    texts = {m.get("source"): m.get("content") for m in record.get("memories", [])}
    catalog = store.catalog
    session_id = record["session_id"]
    if event == "UserPromptSubmit" and isinstance(texts.get("hook"), str):
        _set_pending_prompt(catalog, session_id, {"prompt": texts["hook"], "at": record["at"]})
    elif event in ("Stop", "SubagentStop") and isinstance(texts.get("response"), str):
        pending_prompt = catalog.session_metadata(session_id).get("pending_prompt")
        if not pending_prompt:
            return
        _set_pending_prompt(catalog, session_id, None)
        turn = {
            "user_message": pending_prompt["prompt"],
            "assistant_response": texts["response"],
            "conversation_id": session_id,
            "timestamp": float(pending_prompt["at"]),
        }
        # The agent's directory names the project what the turn teaches belongs to (its scope).
        cwd = next((m.get("metadata", {}).get("cwd") for m in record.get("memories", [])), None)
        if isinstance(cwd, str) and cwd.strip():
            turn["project_id"] = cwd
        from remindful.engine.repositories import LearningRepository
        from remindful.services.learning.conversation import capture_conversation

        try:
            capture_conversation(store, LearningRepository(catalog), turn, automatic=True)
        except RemindfulError as exc:  # learning is a bonus: the hook's own memories are stored
            log.warning("could not learn from the turn of session %s: %s", session_id, exc)


def _set_pending_prompt(catalog: Any, session_id: str, value: dict[str, Any] | None) -> None:
    def run(conn: Any) -> None:
        meta = catalog.session_metadata(session_id, conn)
        if value is None:
            meta.pop("pending_prompt", None)
        else:
            meta["pending_prompt"] = value
        catalog.upsert_session(conn, session_id, time.time(), metadata=meta)

    catalog.write(run, what="remembering the prompt of a turn")


def _items(store: Store, record: dict[str, Any], key: str, seen: set[str]) -> list[dict[str, Any]]:
    session_id = record["session_id"]
    at = float(record["at"])
    catalog = store.catalog
    items: list[dict[str, Any]] = []
    for memory in record.get("memories", []):
        result = apply_filters(
            store,
            memory["content"],
            trigger="hooks",
            session_id=session_id,
            metadata=memory.get("metadata") or {},
            signature=f"{record['event']}\x00{session_id}\x00{memory['content']}",
            at=at,
        )
        if not result.allowed:
            continue
        content, meta = result.content, {**result.metadata, "spool_key": key}
        base = {"type": memory["type"], "source": memory["source"], "session_id": session_id, "timestamp": at}
        if memory["source"] == "response":
            marker = f"{session_id}\x00{content_hash(content)}"
            if marker in seen or _stored(catalog, content, session_id, None):
                continue  # the same answer from Stop and SessionEnd, or a replay
            seen.add(marker)
            items += _response_items(content, meta, base)
        elif not _stored(catalog, content, session_id, _key_as_stored(store, key)):
            items.append({**base, "content": content, "metadata": meta})
    return items


def _capture_items(store: Store, record: dict[str, Any], key: str) -> list[dict[str, Any]]:
    """The memory of a tool call spooled by the middleware or the proxy of a process that is gone
    (:mod:`remindful.services.ingest.spooled`): nothing if that process stored it before it died."""
    item = capture_item(store, call_from_record(record), record["type"], record["session_id"], key)
    if item is None or _stored(store.catalog, item["content"], item["session_id"], _key_as_stored(store, key)):
        return []
    return [item]


def _response_items(content: str, meta: dict[str, Any], base: dict[str, Any]) -> list[dict[str, Any]]:
    response_id = "response_" + content_hash(f"{base['session_id']}\x00{content}")[:16]
    meta = {**meta, "response_id": response_id}
    if len(content.split()) <= RESPONSE_CHUNK_WORDS:
        return [{**base, "content": content, "metadata": meta}]
    chunks = chunk_text(content)
    hashes = {"full_content_hash": content_hash(content)}
    return [
        {
            **base,
            "content": chunk.text,
            "metadata": {**meta, **hashes, "chunk_index": chunk.index, "total_chunks": len(chunks)},
            "chunk": ChunkMetadata(response_id, chunk.index, len(chunks), chunk.start_word, chunk.end_word),
        }
        for chunk in chunks
    ]


def _stored(catalog: Any, content: str, session_id: str, key: str | None) -> bool:
    """Whether this content is already stored for the session (with this spool key, if given).
    A chunked response is found by the hash of its full text in the first chunk's metadata."""
    digest = content_hash(content)
    stored = catalog.stored_with(digest, session_id)
    if key is None:
        return bool(stored) or catalog.has_chunked_response(session_id, digest)
    return any(meta.get("spool_key") == key for meta in stored)


def _key_as_stored(store: Store, key: str) -> str:
    """The key as the write path's redaction leaves it (a hex digest normally passes untouched)."""
    redactor = filter_for(store).redactor
    return redactor.redact(key) if redactor is not None else key


def _session_op(catalog: Any, conn: Any, record: dict[str, Any]) -> None:
    """SessionStart opens the session record (reopens an ended one), SessionEnd ends it; both keep
    what the agent said (source, reason, cwd...) in its metadata."""
    session = dict(record["session"])
    op = session.pop("op", None)
    if op not in ("start", "end"):
        return
    at = float(record["at"])
    extra = {k: v for k, v in session.items() if v is not None}
    meta = {**catalog.session_metadata(record["session_id"], conn), "agent": "claude-code"}
    if op == "start":
        meta.update({f"start_{k}" if k == "source" else k: v for k, v in extra.items()})
    else:
        meta.update({f"end_{k}" if k == "reason" else k: v for k, v in extra.items()})
    catalog.upsert_session(conn, record["session_id"], at, metadata=meta, ended=op == "end")


__all__ = ["MAX_ATTEMPTS", "drain_spool", "pending", "spool_lock"]
