"""Drain the spool into memories: the explicit step of whoever owns the store (the daemon's loop,
``MemoryManager.drain_spool`` for the CLI, ``remindful serve`` and the proxy).

Exactly once: rows are drained under ``<storage>/spool.lock`` (one drainer at a time; the others
return at once), stored through the store's write path and then deleted from the spool with
their keys recorded in ``spool_done``, in one transaction. A crash between the store and the
delete leaves the row in the spool; re-draining it finds the memory already stored (same content
hash, same session, same ``spool_key``) and does not store it again.

What each event becomes (distilled, no model needed):

- **one memory per tool call**: ``PreToolUse`` and its outcome (``PostToolUse`` or
  ``PostToolUseFailure``, same ``tool_use_id``) are merged. A start waits in the spool up to
  :data:`HOLD_S` for its outcome, which consumes it; one that never gets an outcome is stored as
  started ("no outcome recorded"), and an outcome arriving after that replaces it in place. The
  line says what the call did and how it ended (:mod:`remindful.services.ingest.distill`); once
  stored, a change to a file supersedes what earlier reads of it showed, and a success resolves the
  earlier failures of the same call (:mod:`remindful.services.ingest.relate`);
- ``UserPromptSubmit`` → the prompt, kept as the user's intent (``conversation``, ``kind`` intent:
  searchable, never injected back as an answer);
- ``Stop``/``SubagentStop``/``SessionEnd`` → the assistant's final answer (``conversation``, source
  ``response``, chunked when over 500 words, every chunk carrying the same ``response_id``; an
  answer already stored for the session is not stored again); conversation capture
  (:func:`remindful.services.learning.conversation.capture_conversation`) learns the facts,
  decisions, preferences and rules a prompt states as the user's when the prompt is drained, and
  what an answer states as the assistant's observations, in the event's project;
- ``SessionStart``/``SessionEnd`` open and close the session record; with an LLM configured for it
  (``session`` in ``learning.llm.use_for``), a session ending is summarised
  (:mod:`remindful.services.learning.summary`).

Every hook memory carries its project (``project_id``: the key of the project of the event's ``cwd``,
as the resolver the drain is given finds it, :mod:`remindful.engine.projects`; the key its scope
``project:<key>`` names). A capture whose text was forgotten (a tombstone: the user deleted it, or a
correction replaced it) is not stored again, and counted as ``skipped_forgotten``.

A row that fails is retried on later drains up to :data:`MAX_ATTEMPTS` times; a row that can never
be stored (invalid input, a payload over ``limits.hook_payload_bytes``, or out of attempts) is
moved aside to ``spool-rejected.jsonl`` in the storage directory with its error and a log line, so
no drain is ever stuck on it (and nothing is dropped).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from remindful.engine.captures import SessionEvent, forget_key
from remindful.engine.spool import FALLBACK_NAME, REJECTED_NAME, write_fallback
from remindful.errors import RemindfulError, StorageError, ValidationError
from remindful.model import ChunkMetadata, content_hash
from remindful.services.ingest.calls import capture_item
from remindful.services.ingest.chunker import chunk_text
from remindful.services.ingest.distill import TOOL_EVENTS
from remindful.services.ingest.events import idem_key
from remindful.services.ingest.filters import apply_filters, count_skips, filter_for
from remindful.services.ingest.relate import relate
from remindful.services.ingest.spooled import KIND as CAPTURE_KIND
from remindful.services.ingest.spooled import call_from_record, owner_alive

if TYPE_CHECKING:
    from collections.abc import Callable

    from remindful.engine.projects import Project
    from remindful.engine.repositories import LearningRepository
    from remindful.services.ingest.ports import CaptureStore

log = logging.getLogger("remindful.services.ingest")

BATCH = 200
LOCK_NAME = "spool.lock"
MAX_ATTEMPTS = 5
RESPONSE_CHUNK_WORDS = 500
#: Seconds a tool call's start waits in the spool for its outcome (which then replaces it) before it
#: is stored alone; an outcome after that updates the stored start in place.
HOLD_S = 120.0


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


def pending(store: CaptureStore, *, hold_s: float = HOLD_S) -> bool:
    """Whether anything waits in the spool that a drain would take now (one indexed query and a
    stat: cheap); a tool call's start still waiting for its outcome does not count."""
    if _fallback_files(store.path, include_live=True):
        return True
    return store.captures.spool_waiting(MAX_ATTEMPTS, hold_before=time.time() - hold_s)


def drain_spool(
    store: CaptureStore,
    *,
    resolve: Callable[[str], Project | None],
    limit: int | None = None,
    learning: LearningRepository | None = None,
    hold_s: float = HOLD_S,
) -> int:
    """Store pending spooled events through ``store`` (the Store's write path: validated, redacted,
    indexed); returns the events processed. ``resolve``: the project of a directory (the store's
    :class:`~remindful.engine.projects.Resolver`: a hook memory's ``project_id`` is the key of its
    ``cwd``'s project); ``learning``: where conversation capture counts what it learns from the
    turns (without it, turns are not learned from); ``hold_s``: how long a tool call's start waits
    for its outcome (:data:`HOLD_S`). Safe to call from many processes at once:
    one drains under the spool lock, the others return 0."""
    store.ready()
    if not pending(store, hold_s=hold_s):
        return 0
    with spool_lock(store.path) as mine:
        if not mine:
            return 0
        _import_fallback(store)
        done = 0
        after = 0  # each row once per drain: a failed one waits for the next drain
        while limit is None or done < limit:
            # An oversized payload is not read here (None): it is set aside, read once, by _process.
            rows = store.captures.claim(
                after=after,
                limit=BATCH if limit is None else min(BATCH, limit - done),
                max_attempts=MAX_ATTEMPTS,
                payload_limit=store.settings.limits.hook_payload_bytes,
                hold_before=time.time() - hold_s,
            )
            if not rows:
                break
            done += _Batch(store, learning, resolve).process(rows)
            after = rows[-1][0]
        return done


def _fallback_files(storage: Path, *, include_live: bool) -> list[Path]:
    """The fallback file (when ``include_live``) and the copies a drainer took to import and did
    not finish (it died, or its import failed): only the one drainer holding the spool lock may
    take them, and importing twice is harmless (rows are keyed)."""
    live = storage / FALLBACK_NAME
    taken = sorted(storage.glob(f"{FALLBACK_NAME}.*.draining"))
    return ([live] if include_live and live.exists() else []) + taken


def _import_fallback(store: CaptureStore) -> None:
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
        store.captures.import_spooled(records)
        taken.unlink()


@dataclass
class _Row:
    """One spooled row on its way: what it stores (``items``), what it replaces in place
    (``updates``: ``(memory_id, item)``), the rows of the same call it consumes (``consumed``:
    keys), the ids it ended up stored as, and what it had stored before a drain was killed."""

    seq: int
    key: str
    record: dict[str, Any]
    items: list[dict[str, Any]] = field(default_factory=list)
    updates: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    consumed: list[str] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)
    #: Items a drain killed before finishing this row stored already, with their memory's id: what
    #: follows a store (relations, learning) is done for them again (it changes nothing done twice).
    replayed: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


class _Batch:
    """One batch of spooled rows, drained together."""

    def __init__(
        self, store: CaptureStore, learning: LearningRepository | None, resolve: Callable[[str], Project | None]
    ) -> None:
        self.store = store
        self.resolve = resolve
        self.captures = store.captures
        self.learning = learning
        self.rows: list[_Row] = []
        self.failures: dict[int, str] = {}
        self.hopeless: set[int] = set()  # failures no retry can fix: set aside now
        self.seen: set[str] = set()  # responses already taken in this batch (Stop and SessionEnd together)
        self.forgotten = 0

    def process(self, rows: list[Any]) -> int:
        """Store a batch of spool rows; returns how many were processed (stored, skipped or failed)."""
        attempts = {row[0]: row[5] for row in rows}
        parsed: list[tuple[int, str, str, dict[str, Any]]] = []
        for seq, key, kind, payload, _created, _attempts in rows:
            if payload is None:
                limit = self.store.settings.limits.hook_payload_bytes
                self.fail(seq, f"payload over limits.hook_payload_bytes ({limit:,} bytes)", hopeless=True)
                continue
            try:
                parsed.append((seq, key, kind, json.loads(payload)))
            except ValueError as exc:  # a record that cannot be read never will be
                self.fail(seq, f"{type(exc).__name__}: {exc}", hopeless=True)
        # The calls whose outcome is in this batch: their starts, if here too, are consumed by it.
        finished = {
            (record.get("session_id"), _tool_use_id(record))
            for _seq, _key, kind, record in parsed
            if kind in ("PostToolUse", "PostToolUseFailure") and _tool_use_id(record)
        }
        for seq, key, kind, record in parsed:
            try:
                row = _Row(seq, key, record)
                if kind == CAPTURE_KIND:
                    if owner_alive(record.get("owner")):
                        continue  # its live process stores it (and then deletes the row)
                    self.call_items(row)
                elif kind == "PreToolUse" and (record.get("session_id"), _tool_use_id(record)) in finished:
                    pass  # its outcome, in this batch, is the call's memory
                else:
                    self.hook_items(row)
                self.rows.append(row)
            except StorageError:
                raise
            except Exception as exc:  # a record that cannot be read never will be
                self.fail(seq, f"{type(exc).__name__}: {exc}", hopeless=True)
        done = self.store_rows()
        self.hopeless |= {seq for seq in self.failures if attempts[seq] + 1 >= MAX_ATTEMPTS}
        for seq in self.hopeless:
            self.set_aside(seq, self.failures[seq])
        # What follows a row's store is done before the row is finished: a drain killed in between
        # replays the row, which finds its memories stored (``replayed``) and does it again for them
        # (relations are marks set again; learning skips what it learned: learn_from_turn's ``known``).
        now = time.time()
        for row in done:
            stored = [*zip(row.ids, row.items, strict=False), *row.replayed]
            for memory_id, item in stored:
                if item.get("source") in ("hook", "mcp_tool") and item.get("type") != "conversation":
                    relate(self.store, memory_id, item["metadata"], float(item.get("timestamp") or now))
            for memory_id, item in row.updates:
                relate(self.store, memory_id, item["metadata"], float(item.get("timestamp") or now))
            self.learn_from_turn(row)
        self.captures.finish_spooled(
            done=[(row.seq, row.key) for row in done],
            consumed=[key for row in done for key in row.consumed],
            failures=self.failures,
            hopeless=self.hopeless,
            sessions=[event for row in done if (event := _session_event(row.record)) is not None],
            at=now,
        )
        if self.forgotten:
            count_skips(self.captures, {"skipped_forgotten": self.forgotten})
        for seq, error in self.failures.items():
            if seq in self.hopeless:
                log.warning(
                    "spooled hook event %d cannot be stored, set aside in %s: %s", seq, REJECTED_NAME, error[:500]
                )
            else:
                log.warning("spooled hook event %d failed (kept for retry): %s", seq, error[:500])
        for row in done:
            self.summarize(row.record)
        return len({row.seq for row in self.rows} | self.failures.keys())  # a row that failed is counted once

    def fail(self, seq: int, error: str, *, hopeless: bool = False) -> None:
        self.failures[seq] = error
        if hopeless:
            self.hopeless.add(seq)

    # -- what a row stores --------------------------------------------------------------------------

    def hook_items(self, row: _Row) -> None:
        """The memories of a hook event's row: items to store, or updates of the memory its tool
        call already has (its start, stored alone)."""
        record, key = row.record, row.key
        session_id = record["session_id"]
        event = record.get("event")
        tool_use_id = _tool_use_id(record)
        if event in TOOL_EVENTS and tool_use_id:
            if event != "PreToolUse":  # the outcome consumes the start, wherever it is
                row.consumed.append(idem_key("PreToolUse", {"session_id": session_id, "tool_use_id": tool_use_id}))
            existing = self.captures.call_memory(session_id, tool_use_id)
            if existing is not None and event == "PreToolUse":
                return  # the call's outcome is stored already
        else:
            existing = None
        for memory in record.get("memories", []):
            item = self.hook_item(record, memory, key)
            if item is None:
                continue
            if memory["source"] == "response":
                marker = f"{session_id}\x00{content_hash(item['content'])}"
                if marker in self.seen or self.stored(item["content"], session_id):
                    continue  # the same answer from Stop and SessionEnd, or a replay
                self.seen.add(marker)
                row.items += _response_items(item)
            elif existing is not None:
                row.updates.append((existing, item))
            elif (done := self.stored_from(item["content"], session_id, self.as_stored(key))) is not None:
                row.replayed.append((done, item))
            else:
                row.items.append(item)

    def hook_item(self, record: dict[str, Any], memory: dict[str, Any], key: str) -> dict[str, Any] | None:
        """One memory of a hook record through the capture filters and the tombstones, with its
        project; None when it is not to be stored."""
        session_id = record["session_id"]
        meta = dict(memory.get("metadata") or {})
        cwd = meta.get("cwd")
        project_id = self.project_id(cwd) if "project_id" not in meta else None
        if project_id is not None:
            meta["project_id"] = project_id
        result = apply_filters(
            self.store,
            memory["content"],
            trigger="hooks",
            session_id=session_id,
            metadata=meta,
            signature=f"{record['event']}\x00{session_id}\x00{memory['content']}",
            at=float(record["at"]),
            occurrence=key,  # a row retried after a failed store is not its own repeat
        )
        if not result.allowed:
            return None
        if self.captures.buried([forget_key(result.content)]):
            self.forgotten += 1
            return None
        return {
            "type": memory["type"],
            "source": memory["source"],
            "origin": memory.get("origin"),  # None (an older spool's record): derived from source and metadata
            "session_id": session_id,
            "timestamp": float(record["at"]),
            "content": result.content,
            "metadata": {**result.metadata, "spool_key": key},
        }

    def project_id(self, cwd: object) -> str | None:
        """The key of the project of the directory ``cwd`` (None: no directory, or in no project)."""
        project = self.resolve(cwd) if isinstance(cwd, str) and cwd else None
        return project.key if project is not None else None

    def call_items(self, row: _Row) -> None:
        """The memory of a tool call spooled by the middleware or the proxy of a process that is
        gone (:mod:`remindful.services.ingest.spooled`): nothing new if that process, or a drain
        killed before finishing the row, stored it."""
        record, key = row.record, row.key
        item = capture_item(self.store, call_from_record(record), record["type"], record["session_id"], key)
        if item is None:
            return
        done = self.stored_from(item["content"], item["session_id"], self.as_stored(key))
        if done is None:
            row.items.append(item)
        else:  # its relations may not have been made: making them again changes nothing
            row.replayed.append((done, item))

    def stored(self, content: str, session_id: str) -> bool:
        """Whether this content is already stored for the session. A chunked response is found by
        the hash of its full text in the first chunk's metadata."""
        digest = content_hash(content)
        return bool(self.captures.stored_with(digest, session_id)) or self.captures.has_chunked_response(
            session_id, digest
        )

    def stored_from(self, content: str, session_id: str, key: str, *, learned: bool = False) -> str | None:
        """The id of the memory of the session holding this content stored from the spool row
        ``key`` (as stored), or None: one of the row's own memories, or with ``learned`` one learned
        from it (it carries the row's key too, and may have the same text)."""
        found = self.captures.stored_with(content_hash(content), session_id)
        return next(
            (mid for mid, meta in found if meta.get("spool_key") == key and ("learned_from" in meta) == learned), None
        )

    def as_stored(self, text: str) -> str:
        """A text (a spool key, a statement) as the write path's redaction leaves it (a hex digest
        normally passes untouched)."""
        redactor = filter_for(self.store).redactor
        return redactor.redact(text) if redactor is not None else text

    # -- storing --------------------------------------------------------------------------------------

    def store_rows(self) -> list[_Row]:
        """Store every row's items (one batch; row by row when the batch fails) and apply its
        updates; returns the rows done."""
        all_items = [item for row in self.rows for item in row.items]
        try:
            ids = self.store.store_batch(all_items, defer=False) if all_items else []
        except StorageError:
            raise  # the store is unusable: leave every row for the next drain
        except Exception:
            done = []
            for row in self.rows:  # one bad item must not hold back the others
                try:
                    row.ids = self.store.store_batch(row.items, defer=False) if row.items else []
                except StorageError:
                    raise
                except Exception as exc:
                    self.fail(row.seq, f"{type(exc).__name__}: {exc}", hopeless=isinstance(exc, ValidationError))
                    continue
                done.append(row)
        else:
            done, start = list(self.rows), 0
            for row in done:
                row.ids, start = ids[start : start + len(row.items)], start + len(row.items)
        finished = []
        for row in done:
            try:
                for memory_id, item in row.updates:
                    self.store.update(memory_id, content=item["content"], metadata=_replacing(item["metadata"]))
            except StorageError:
                raise
            except Exception as exc:
                self.fail(row.seq, f"{type(exc).__name__}: {exc}", hopeless=isinstance(exc, ValidationError))
                continue
            finished.append(row)
        return finished

    def set_aside(self, seq: int, error: str) -> None:
        """Append the spool row ``seq`` with ``error`` to ``spool-rejected.jsonl`` (0600); the caller
        then deletes it from the spool."""
        found = self.captures.spooled_row(seq)
        if found is not None:
            key, kind, payload, created = found
            record = {"idem_key": key, "kind": kind, "payload": payload, "created_at": created, "error": error[:2000]}
            write_fallback(self.store.path, record, name=REJECTED_NAME)

    # -- turns and sessions ----------------------------------------------------------------------------

    def summarize(self, record: dict[str, Any]) -> None:
        """At a session's end, with an LLM configured for it, the session summarised
        (:func:`remindful.services.learning.summary.summarize_session`)."""
        session = record.get("session")
        if self.learning is None or not isinstance(session, dict) or session.get("op") != "end":
            return
        from remindful.services.learning.summary import summarize_session

        cwd = session.get("cwd")
        try:
            summarize_session(self.store, self.learning, record["session_id"], self.project_id(cwd))
        except RemindfulError as exc:  # a bonus, like learning from turns
            log.warning("could not summarise session %s: %s", record["session_id"], exc)

    def learn_from_turn(self, row: _Row) -> None:
        """What a UserPromptSubmit prompt states is learned as soon as it is drained, as the user's
        (the same session's next prompt, or a session cut short before its answer, has it); the
        Stop answer after it is learned as the assistant's observations. Both go through
        ``capture_conversation`` (nothing is stored unless conversation capture is on, nor a
        statement that was forgotten), in the project of the event's directory. A text cut to
        ``limits.hook_payload_bytes`` teaches nothing. The prompt's memory lists what was learned
        from it (metadata ``learned``), which context injection gives in its place."""
        if self.learning is None:
            return
        record = row.record
        event = record.get("event")
        memories = {m.get("source"): m for m in record.get("memories", [])}
        session_id = record["session_id"]
        prompt = memories.get("hook")
        answer = memories.get("response")
        if event == "UserPromptSubmit" and prompt is not None and isinstance(prompt.get("content"), str):
            cwd = (prompt.get("metadata") or {}).get("cwd")
            prompt_id = next(iter([*row.ids, *(mid for mid, _ in row.replayed)]), None)
            turn = {"user_message": prompt["content"], "assistant_response": ""}
        elif event in ("Stop", "SubagentStop") and answer is not None and isinstance(answer.get("content"), str):
            cwd, prompt_id = (answer.get("metadata") or {}).get("cwd"), None
            turn = {"user_message": "", "assistant_response": answer["content"]}
        else:
            return
        said = prompt if event == "UserPromptSubmit" else answer
        if "truncated" in ((said or {}).get("metadata") or {}):
            return  # cut mid-way and carrying remindful's own note: half a rule is not what was said
        turn.update(conversation_id=session_id, timestamp=float(record["at"]), project_id=self.project_id(cwd))
        from remindful.services.learning.conversation import capture_conversation

        captures, key = self.captures, self.as_stored(row.key)

        def forgotten(text: str) -> bool:
            return bool(captures.buried([forget_key(text)]))

        def known(text: str) -> bool:  # learned from this event by a drain killed before finishing it
            return self.stored_from(self.as_stored(text), session_id, key, learned=True) is not None

        try:
            learned = capture_conversation(
                self.store,
                self.learning,
                turn,
                automatic=True,
                forgotten=forgotten,
                known=known,
                metadata={"spool_key": key},
            )
            if learned and isinstance(prompt_id, str):
                self.store.update(prompt_id, metadata={"learned": [m.id for m in learned]})
        except StorageError:
            raise  # the store is unusable: the row stays spooled, and its turn is learned from later
        except RemindfulError as exc:  # learning is a bonus: the hook's own memories are stored
            log.warning("could not learn from the turn of session %s: %s", session_id, exc)


def _tool_use_id(record: dict[str, Any]) -> str | None:
    for memory in record.get("memories", []):
        tool_use_id = (memory.get("metadata") or {}).get("tool_use_id")
        if isinstance(tool_use_id, str) and tool_use_id:
            return tool_use_id
    return None


def _replacing(metadata: dict[str, Any]) -> dict[str, Any]:
    """Metadata that replaces a started call's: the keys only a start had are removed (set to None)."""
    return {**dict.fromkeys(("success", "error", "change"), None), **metadata}


def _response_items(item: dict[str, Any]) -> list[dict[str, Any]]:
    content, meta = item["content"], item["metadata"]
    response_id = "response_" + content_hash(f"{item['session_id']}\x00{content}")[:16]
    meta = {**meta, "response_id": response_id}
    if len(content.split()) <= RESPONSE_CHUNK_WORDS:
        return [{**item, "metadata": meta}]
    chunks = chunk_text(content)
    hashes = {"full_content_hash": content_hash(content)}
    return [
        {
            **item,
            "content": chunk.text,
            "metadata": {**meta, **hashes, "chunk_index": chunk.index, "total_chunks": len(chunks)},
            "chunk": ChunkMetadata(response_id, chunk.index, len(chunks), chunk.start_word, chunk.end_word),
        }
        for chunk in chunks
    ]


def _session_event(record: dict[str, Any]) -> SessionEvent | None:
    """SessionStart opens the session record (reopens an ended one), SessionEnd ends it; both keep
    what the agent said (source, reason, cwd...) in its metadata."""
    session = record.get("session")
    if not isinstance(session, dict):
        return None
    session = dict(session)
    op = session.pop("op", None)
    if op not in ("start", "end"):
        return None
    extra = {k: v for k, v in session.items() if v is not None}
    changes: dict[str, Any] = {"agent": "claude-code"}
    if op == "start":
        changes.update({f"start_{k}" if k == "source" else k: v for k, v in extra.items()})
    else:
        changes.update({f"end_{k}" if k == "reason" else k: v for k, v in extra.items()})
    return SessionEvent(record["session_id"], float(record["at"]), changes, ended=op == "end")


__all__ = ["HOLD_S", "MAX_ATTEMPTS", "drain_spool", "pending", "spool_lock"]
