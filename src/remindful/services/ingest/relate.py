"""What a newly stored tool call changes about the calls before it, so that what comes back is
current:

- a change to a file (an edit, a write) **supersedes** what earlier reads of that file showed, and
  the earlier edits it overwrites (a write: every earlier one; an edit: those whose new text it
  replaces); a newer read of a file supersedes the older reads of it;
- an edit that **replaces a value** ("DB_PORT=5432" → "DB_PORT=6543") supersedes what the project's
  earlier facts, answers and tool outputs said with the old value and not the new one ("the staging
  database listens on port 5432"), when the old value is distinctive (a word with a digit, or a
  long one, found in at most :data:`MAX_MENTIONS` memories);
- a call that **succeeds resolves** the earlier failures of the same call (same tool, same key
  arguments): the failure stays, for the warnings, but is no longer an open one.

Only the calls of the last :data:`LOOKBACK_S` are looked at. Marks are metadata of the older
memories (``superseded_by``, ``resolved_by``: the newer memory's id), written through the Store.
Best effort: a failure is logged, never raised, since the call's own memory is stored already.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from remindful.services.context import kind_of

if TYPE_CHECKING:
    from remindful.services.ingest.ports import CaptureStore

log = logging.getLogger("remindful.services.ingest")

#: How far back a new call looks for the reads it supersedes and the failures it resolves (the
#: catalog reads the actions of that span from its time index).
LOOKBACK_S = 30 * 86400
#: A replaced value found in more memories than this is too common to tell which ones it makes stale.
MAX_MENTIONS = 20
#: The kinds of memory a replaced value makes stale (what someone *said* or *chose* is not retired:
#: a correction does that).
RESTATED = ("fact", "answer", "observation", "activity", "note")
_TOKEN = re.compile(r"[A-Za-z0-9]+")
_COMMON = frozenset(
    {"this", "that", "with", "from", "have", "were", "will", "been", "true", "false", "none", "null", "self"}
    | {"return", "import", "const", "export", "function", "class", "else", "elif", "then", "when", "where"}
    | {"what", "which", "while", "value", "values", "default"}
)


def same_call(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether two tool-call memories' metadata name the same call: tool and key arguments."""
    tool_a = a.get("tool_name") or a.get("tool")
    tool_b = b.get("tool_name") or b.get("tool")
    if not tool_a or tool_a != tool_b:
        return False
    return _canonical(a.get("arguments")) == _canonical(b.get("arguments"))


def _canonical(value: Any) -> str:
    return json.dumps(value or {}, sort_keys=True, ensure_ascii=False, default=str)


def _stale(newer: Mapping[str, Any], older: Mapping[str, Any]) -> bool:
    """Whether the older memory about the same file is out of date once ``newer`` is stored."""
    if older.get("kind") == "activity":  # a read (or a listing) of the file: what it showed is old
        return newer.get("kind") == "change" or newer.get("tool_name") == older.get("tool_name")
    if newer.get("kind") != "change" or older.get("kind") != "change":
        return False
    if newer.get("tool_name") == "Write":
        return True
    old_change, new_change = older.get("change"), newer.get("change")
    if not isinstance(old_change, dict) or not isinstance(new_change, dict):
        return False
    written, replaced = str(old_change.get("new") or ""), str(new_change.get("old") or "")
    return bool(written.strip()) and written in replaced


def relate(store: CaptureStore, memory_id: str, metadata: Mapping[str, Any], at: float) -> None:
    """Mark what the tool call ``memory_id`` (its ``metadata``, stored at ``at``) makes out of date
    or resolves; see the module docstring."""
    try:
        _relate(store, memory_id, metadata, at)
    except Exception as exc:
        log.warning("could not relate tool call %s to the calls before it: %s", memory_id, exc)


def _relate(store: CaptureStore, memory_id: str, metadata: Mapping[str, Any], at: float) -> None:
    captures = store.captures
    file = metadata.get("file")
    if (
        isinstance(file, str)
        and metadata.get("success") is not False
        and metadata.get("kind") in ("change", "activity")
    ):
        for older_id, older in captures.file_activity(
            file, since=at - LOOKBACK_S, before=at, kinds=("activity", "change")
        ):
            if older_id != memory_id and _stale(metadata, older):
                store.update(older_id, metadata={"superseded_by": memory_id})
    change = metadata.get("change")
    project = metadata.get("project_id")
    if isinstance(change, dict) and isinstance(project, str) and metadata.get("success") is not False:
        _retire_old_values(store, memory_id, str(change.get("old") or ""), str(change.get("new") or ""), project, at)
    tool = metadata.get("tool_name") or metadata.get("tool")
    if metadata.get("success") is True and isinstance(tool, str) and tool:
        for failed_id, failed in captures.unresolved_failures(tool, since=at - LOOKBACK_S, before=at):
            if failed_id != memory_id and same_call(failed, metadata):
                store.update(failed_id, metadata={"resolved_by": memory_id})


def _distinctive(text: str) -> set[str]:
    """The words of ``text`` that name something (a number, an identifier), lower-cased."""
    words = {w.lower() for w in _TOKEN.findall(text)}
    return {w for w in words if (any(c.isdigit() for c in w) and len(w) >= 3) or (len(w) >= 4 and w not in _COMMON)}


def _retire_old_values(store: CaptureStore, memory_id: str, old: str, new: str, project: str, at: float) -> None:
    before, after = _distinctive(old), _distinctive(new)
    removed, added = sorted(before - after), after - before
    if not removed or not added:  # nothing replaced: a line added or deleted says nothing of the others
        return
    for word in removed[:5]:
        found = store.captures.mentioning(word, project=project, since=at - LOOKBACK_S, before=at, limit=MAX_MENTIONS)
        if len(found) > MAX_MENTIONS:
            continue
        for other_id, memory_type, source, content, meta in found:
            if other_id == memory_id or kind_of(memory_type, source, meta) not in RESTATED:
                continue
            if added & {w.lower() for w in _TOKEN.findall(content)}:
                continue  # it has the new value too: it speaks of the change itself
            store.update(other_id, metadata={"superseded_by": memory_id})


__all__ = ["relate", "same_call"]
