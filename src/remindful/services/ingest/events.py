"""Turn a coding agent's hook JSON into a spool record (standard library only).

Input: the JSON Claude Code writes to a hook's stdin — ``session_id``, ``transcript_path``,
``cwd``, ``hook_event_name`` and per event ``source`` (SessionStart), ``prompt``
(UserPromptSubmit), ``tool_name``/``tool_input``/``tool_use_id`` (PreToolUse),
``tool_response`` (PostToolUse), ``error`` (PostToolUseFailure), ``last_assistant_message`` /
``stop_hook_active`` (Stop), ``reason`` (SessionEnd).

A record is ``{"event", "session_id", "at", "memories": [{content, type, source, metadata}],
"session": {...}}`` (and ``"transcript_turn"`` for an answer read from the transcript: see
:func:`idem_key`): the memory text is prepared here, so that the raw payload (which may hold a
whole file written by the agent) is never stored. A tool call's memory is distilled by
:mod:`remindful.services.ingest.distill`; a prompt is kept as the user's intent (``kind``
``intent``: what was asked, never injected back as if it answered anything), an answer as
``answer``.
"""

from __future__ import annotations

import errno
import json
import os
import stat

from remindful.runtime import SESSION_ID_MAX_CHARS, fit_session_id
from remindful.services.ingest.distill import TOOL_EVENTS, tool_memory

try:  # the built-in module: hashlib would load OpenSSL, which costs hook processes milliseconds
    from _sha256 import sha256
except ImportError:  # pragma: no cover - other Python builds
    from hashlib import sha256

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs hook processes milliseconds
if TYPE_CHECKING:
    from typing import Any, BinaryIO

    from remindful.engine.redact import Redactor

EVENTS = (
    "SessionStart",
    "UserPromptSubmit",
    "PreToolUse",
    "PostToolUse",
    "PostToolUseFailure",
    "Stop",
    "SubagentStop",
    "SessionEnd",
)
_BY_KEY = {e.lower(): e for e in EVENTS} | {
    "".join("-" + c.lower() if c.isupper() else c for c in e).lstrip("-"): e for e in EVENTS
}
#: Events whose output is context for the agent.
CONTEXT_EVENTS = ("SessionStart", "UserPromptSubmit")

TRANSCRIPT_TAIL_BYTES = 4 * 1024 * 1024


class HookInputError(ValueError):
    """The hook input is unusable; the message names the field (spec ERR-P1-03 and friends)."""


def normalize_event(name: str) -> str:
    """``PreToolUse``, ``pretooluse`` or ``pre-tool-use`` → ``PreToolUse``."""
    event = _BY_KEY.get(name.strip().lower()) or _BY_KEY.get(name.strip())
    if event is None:
        raise HookInputError(f"hook event: unknown event {name!r}; expected one of {', '.join(EVENTS)}")
    return event


def idem_key(event: str, payload: dict[str, Any], record: dict[str, Any] | None = None) -> str:
    """Same event, same key: the tool_use_id where there is one, else the payload's hash, with
    the turn of the transcript that ``record`` (:func:`build_record`'s) read its answer from.
    Claude Code sends the same Stop payload at every turn when it carries no
    ``last_assistant_message``: the transcript's last entry (its ``uuid``, else its size) and the
    answer read from it tell the turns apart, while a replay of one turn reads the same."""
    basis = payload.get("tool_use_id")
    if not basis:
        basis = json.dumps(payload, sort_keys=True, ensure_ascii=False, default=str)
        if record is not None and record.get("transcript_turn"):
            answers = "\x00".join(str(m.get("content", "")) for m in record.get("memories", []))
            basis += f"\x00{record['transcript_turn']}\x00{answers}"
    raw = f"{event}\x00{payload.get('session_id')}\x00{basis}"
    return sha256(raw.encode("utf-8", "replace")).hexdigest()


def open_regular(path: str) -> BinaryIO:
    """``path`` opened for reading, if it is a regular file; else OSError. A FIFO (or a device)
    named as a transcript must not block the hook: opening a FIFO waits for a writer, forever."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file", path)
    return os.fdopen(fd, "rb")


def last_assistant_text(transcript_path: str | os.PathLike[str]) -> str:
    """The assistant's final answer in a Claude Code transcript (JSONL): the text of the assistant
    entries after the last user entry (a prompt or a tool result); if those hold no text, the
    last text since the prompt. "" if the file is missing or has none."""
    return last_answer(transcript_path)[0]


def last_answer(transcript_path: str | os.PathLike[str]) -> tuple[str, str]:
    """:func:`last_assistant_text` and the turn it was read at: the ``uuid`` of the transcript's
    last entry, else ``size:<bytes>`` ("" for a missing file)."""
    path = os.path.expanduser(os.fspath(transcript_path))
    try:
        with open_regular(path) as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - TRANSCRIPT_TAIL_BYTES))
            data = f.read()
    except OSError:
        return "", ""
    texts: list[str] = []
    turn = ""
    for line in reversed(data.decode("utf-8", "replace").splitlines()):
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if not isinstance(entry, dict):
            continue
        if not turn:
            turn = str(entry.get("uuid") or f"size:{size}")
        raw_message = entry.get("message")
        message: dict[str, Any] = raw_message if isinstance(raw_message, dict) else {}
        role = entry.get("type") or message.get("role")
        content = message.get("content")
        if role == "user":
            is_tool_result = isinstance(content, list) and any(
                isinstance(b, dict) and b.get("type") == "tool_result" for b in content
            )
            if not is_tool_result or any(t.strip() for t in texts):
                break
            continue
        if role != "assistant":
            continue
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            blocks = [b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text"]
            texts.append("\n".join(t for t in blocks if isinstance(t, str) and t.strip()))
    return "\n\n".join(t for t in reversed(texts) if t.strip()).strip(), turn or f"size:{size}"


def build_record(
    event: str,
    payload: dict[str, Any],
    at: float,
    redactor: Redactor | None = None,
    counts: dict[str, int] | None = None,
) -> tuple[dict[str, Any], list[str]]:
    """The spool record for one event and the warnings to log. Raises HookInputError (ERR-P1-03)
    when ``session_id`` is missing. Every text that is shortened is redacted whole by
    ``redactor`` first (hits added to ``counts``): a secret is never cut in two. The memories'
    full texts and metadata still pass the capture filters' redaction before they are spooled."""
    session_id = payload.get("session_id")
    if not isinstance(session_id, str) or not session_id.strip():
        raise HookInputError("session_id is required for memory capture")
    warnings: list[str] = []
    if len(session_id) > SESSION_ID_MAX_CHARS:  # kept, not lost: the event is the user's work
        warnings.append(
            f"session_id: {len(session_id)} characters, more than {SESSION_ID_MAX_CHARS}; "
            "stored shortened with a hash of the whole"
        )
        session_id = fit_session_id(session_id)
    common = {k: payload[k] for k in ("cwd", "transcript_path") if isinstance(payload.get(k), str)}
    record: dict[str, Any] = {"event": event, "session_id": session_id, "at": at, "memories": []}
    memories: list[dict[str, Any]] = record["memories"]
    if event in TOOL_EVENTS:
        memory = tool_memory(event, payload, redactor, counts)
        if memory is None:
            warnings.append(f"Skipping empty hook description for {event}")
        else:
            memory["metadata"].update(common)
            memories.append(memory)
    elif event == "UserPromptSubmit":
        prompt = payload.get("prompt")
        if isinstance(prompt, str) and prompt.strip():
            memories.append(
                {
                    "content": prompt.strip(),
                    "type": "conversation",
                    "source": "hook",
                    "origin": "user",
                    "metadata": {"hook_event": event, "role": "user", "kind": "intent", **common},
                }
            )
        else:
            warnings.append(f"Skipping empty hook description for {event}")
    elif event in ("Stop", "SubagentStop", "SessionEnd"):
        text = payload.get("last_assistant_message")
        if (not isinstance(text, str) or not text.strip()) and common.get("transcript_path"):
            text, record["transcript_turn"] = last_answer(payload["transcript_path"])
        elif not isinstance(text, str):
            text = ""
        if text.strip():
            memories.append(
                {
                    "content": text.strip(),
                    "type": "conversation",
                    "source": "response",
                    "origin": "assistant",
                    "metadata": {
                        "hook_event": event,
                        "role": "assistant",
                        "response_type": event,
                        "kind": "answer",
                        **common,
                    },
                }
            )
        elif event != "SessionEnd":
            warnings.append(f"Skipping empty hook description for {event}")
    if event == "SessionStart":
        record["session"] = {"op": "start", "source": payload.get("source"), "model": payload.get("model"), **common}
    elif event == "SessionEnd":
        record["session"] = {"op": "end", "reason": payload.get("reason"), **common}
    return record, warnings


__all__ = [
    "CONTEXT_EVENTS",
    "EVENTS",
    "HookInputError",
    "build_record",
    "idem_key",
    "last_answer",
    "last_assistant_text",
    "normalize_event",
]
