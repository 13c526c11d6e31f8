"""What one tool call of a coding agent becomes: a single line a search can match, with its outcome.

Claude Code reports a call twice (``PreToolUse`` with ``tool_input``, then ``PostToolUse`` with
``tool_input`` and ``tool_response``, or ``PostToolUseFailure`` with ``error``), under one
``tool_use_id``. :func:`tool_memory` makes the memory of either report; the drainer keeps one per
call (the outcome's, else the start's). The line is distilled by tool, no model needed:

=================  ==========================================================================
Read               ``Read .env.staging (4 lines): DB_HOST=… DB_PORT=5432 …`` (a preview: raw
                   activity, ranked low)
Edit / MultiEdit   ``Edited .env.staging: "DB_PORT=5432" → "DB_PORT=6543"`` (the lines that
                   changed, each side cut to :data:`EDIT_SIDE_CHARS`)
Write              ``Wrote src/db.ts (42 lines): …`` (its first lines)
Bash               ``Ran `pnpm run build`: failed: Exit code 2 … error TS2322 …`` (a long log
                   keeps its head and its tail, where the error usually is)
Grep, Glob, Web…   what was looked for, and where
anything else      ``Tool: description [key inputs]``, with the outcome
=================  ==========================================================================

Each memory's metadata says what it is (``kind``: ``failure`` for a call that failed, ``change``
for an edit or a write, else ``activity``), which call (``tool_name``, ``tool_use_id``, the key
``arguments``: the same keys the MCP middleware stores, so that "the same action" is recognised
across capture paths) and, for file tools, ``file`` (not ``file_path``: that names a Markdown
file's chunks, which a re-index replaces) and, for an edit, its compact ``change`` (``old``,
``new``), so that a later edit can tell which earlier ones it replaces. Every text taken from the
payload is redacted whole before it is cut
(:func:`remindful.engine.redact.redact_then_truncate`).

Standard library only: the hook process runs this.
"""

from __future__ import annotations

import json
import os

from remindful.engine.redact import redact_then_truncate

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs hook processes milliseconds
if TYPE_CHECKING:
    from typing import Any

    from remindful.engine.redact import Redactor

#: The events that report a tool call.
TOOL_EVENTS = ("PreToolUse", "PostToolUse", "PostToolUseFailure")
#: Tools whose call changes a file.
CHANGE_TOOLS = ("Edit", "MultiEdit", "Write", "NotebookEdit")
#: Tools whose call only reads (their output is raw activity).
READ_TOOLS = ("Read", "Grep", "Glob", "LS", "WebFetch", "WebSearch", "NotebookRead")

PREVIEW_CHARS = 240
EDIT_SIDE_CHARS = 160
COMMAND_CHARS = 300
OUTPUT_CHARS = 240
ERROR_CHARS = 400
ARGUMENT_CHARS = 300
#: The key inputs kept as ``arguments`` (and shown for a tool without a distiller of its own).
ARGUMENT_KEYS = (
    "command",
    "file_path",
    "path",
    "pattern",
    "glob",
    "url",
    "query",
    "prompt",
    "notebook_path",
    "skill",
    "subagent_type",
)
#: Importance by kind: raw activity ranks under what was changed, failures above both.
IMPORTANCE = {"activity": 0.3, "change": 0.6, "failure": 0.7}


def _text(value: Any, limit: int, redactor: Redactor | None, counts: dict[str, int] | None) -> str:
    """``value`` as one flat line, redacted whole, then cut to ``limit``."""
    if value is None:
        return ""
    if not isinstance(value, str):
        value = json.dumps(value, ensure_ascii=False, default=str, sort_keys=True)
    return redact_then_truncate(value, limit, redactor, counts, flatten=True)


def excerpt(text: str, limit: int, redactor: Redactor | None, counts: dict[str, int] | None) -> str:
    """A long log in ``limit`` characters: its head and its tail (a build's error is usually at
    one end or the other), redacted whole first."""
    if redactor is not None:
        text = redactor.redact(text, counts)
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    head = limit // 3
    tail = limit - head - 3
    return f"{flat[:head].rstrip()} … {flat[-tail:].lstrip()}"


def short_path(path: str, cwd: str | None) -> str:
    """``path`` relative to ``cwd`` when it lies inside it (shorter, and the words a question
    uses), else as given."""
    if cwd and os.path.isabs(path):
        try:
            rel = os.path.relpath(path, cwd)
        except ValueError:
            return path
        if not rel.startswith(".." + os.sep) and rel != "..":
            return rel
    return path


def compact_change(old: str, new: str) -> tuple[str, str]:
    """The lines that differ between ``old`` and ``new``: lines both share at the start and the
    end are dropped, so an edit of one line in a block of twenty reads as that line."""
    a, b = old.splitlines(), new.splitlines()
    start = 0
    while start < min(len(a), len(b)) and a[start] == b[start]:
        start += 1
    end = 0
    while end < min(len(a), len(b)) - start and a[-1 - end] == b[-1 - end]:
        end += 1
    a, b = a[start : len(a) - end], b[start : len(b) - end]
    return "\n".join(a), "\n".join(b)


def change_of(old: str, new: str, redactor: Redactor | None, counts: dict[str, int] | None) -> dict[str, str]:
    """``{"old", "new"}``: the lines an edit changed, redacted (whole texts first: a secret must
    not be split by the compaction), flattened, each cut to :data:`EDIT_SIDE_CHARS`."""
    if redactor is not None:
        old, new = redactor.redact(old, counts), redactor.redact(new, counts)
    old, new = compact_change(old, new)
    return {"old": _text(old, EDIT_SIDE_CHARS, None, None), "new": _text(new, EDIT_SIDE_CHARS, None, None)}


def _change(old: str, new: str, redactor: Redactor | None, counts: dict[str, int] | None) -> str:
    change = change_of(old, new, redactor, counts)
    return f'"{change["old"]}" → "{change["new"]}"'


def arguments(tool_input: Any, redactor: Redactor | None, counts: dict[str, int] | None) -> dict[str, Any]:
    """The key inputs of a call (:data:`ARGUMENT_KEYS`), redacted and bounded."""
    if not isinstance(tool_input, dict):
        return {}
    return {
        key: value
        if isinstance(value, int) and not isinstance(value, bool)
        else _text(value, ARGUMENT_CHARS, redactor, counts)
        for key in ARGUMENT_KEYS
        if isinstance(value := tool_input.get(key), str | int) and not isinstance(value, bool) and str(value).strip()
    }


def outcome_of(event: str, payload: dict[str, Any]) -> bool | None:
    """True (succeeded), False (failed) or None (not known yet: the call has only started)."""
    if event == "PostToolUseFailure":
        return False
    if event != "PostToolUse":
        return None
    response = payload.get("tool_response")
    if not isinstance(response, dict):
        return True
    return not (response.get("success") is False or response.get("is_error") or response.get("interrupted"))


def _error(payload: dict[str, Any], redactor: Redactor | None, counts: dict[str, int] | None) -> str:
    error = payload.get("error")
    if error is None and isinstance(payload.get("tool_response"), dict):
        response = payload["tool_response"]
        error = (
            response.get("error") or response.get("stderr") or ("interrupted" if response.get("interrupted") else None)
        )
    if error is None:
        return ""
    if not isinstance(error, str):
        error = json.dumps(error, ensure_ascii=False, default=str)
    return excerpt(error, ERROR_CHARS, redactor, counts)


def _output(response: Any) -> str:
    """The text a tool printed: stdout and stderr of a command, the text of a generic result."""
    if isinstance(response, str):
        return response
    if isinstance(response, dict):
        parts = [response.get(k) for k in ("stdout", "stderr", "output", "result", "content", "text", "message")]
        return "\n".join(p for p in parts if isinstance(p, str) and p.strip())
    if isinstance(response, list):
        return " ".join(b.get("text", "") for b in response if isinstance(b, dict) and isinstance(b.get("text"), str))
    return ""


def _file_text(response: Any) -> tuple[str, int | None]:
    """The text a Read returned and its line count, from Claude Code's ``{"file": {...}}``."""
    if isinstance(response, dict):
        file = response.get("file")
        if isinstance(file, dict) and isinstance(file.get("content"), str):
            lines = file.get("numLines")
            content = file["content"]
            return content, lines if isinstance(lines, int) else content.count("\n") + 1
        if isinstance(response.get("content"), str):
            return response["content"], response["content"].count("\n") + 1
    if isinstance(response, str):
        return response, response.count("\n") + 1
    return "", None


def _line(
    tool: str,
    tool_input: dict[str, Any],
    payload: dict[str, Any],
    success: bool | None,
    redactor: Redactor | None,
    counts: dict[str, int] | None,
) -> str:
    """The distilled line of a call, without its outcome's error (added by the caller)."""
    cwd = payload.get("cwd") if isinstance(payload.get("cwd"), str) else None
    raw_path = tool_input.get("file_path") or tool_input.get("notebook_path") or tool_input.get("path")
    where = _text(short_path(raw_path, cwd), ARGUMENT_CHARS, redactor, counts) if isinstance(raw_path, str) else ""
    response = payload.get("tool_response")
    said = tool_input.get("description") or payload.get("description")
    why = f" ({_text(said, 120, redactor, counts)})" if isinstance(said, str) and said.strip() else ""
    if tool == "Read" and where:
        if success:
            text, lines = _file_text(response)
            preview = _text(text, PREVIEW_CHARS, redactor, counts)
            count = f" ({lines} lines)" if lines else ""
            return f"Read {where}{why}{count}: {preview}" if preview else f"Read {where}{why}{count}"
        return f"Read {where}{why}"
    if tool == "Edit" and where:
        old, new = tool_input.get("old_string"), tool_input.get("new_string")
        if isinstance(old, str) and isinstance(new, str):
            every = " (every occurrence)" if tool_input.get("replace_all") else ""
            return f"Edited {where}{every}: {_change(old, new, redactor, counts)}"
        return f"Edited {where}"
    if tool == "MultiEdit" and where:
        edits = [e for e in tool_input.get("edits") or [] if isinstance(e, dict)]
        changes = [
            _change(e["old_string"], e["new_string"], redactor, counts)
            for e in edits[:3]
            if isinstance(e.get("old_string"), str) and isinstance(e.get("new_string"), str)
        ]
        more = f"; and {len(edits) - 3} more" if len(edits) > 3 else ""
        return f"Edited {where} ({len(edits)} changes): " + "; ".join(changes) + more if changes else f"Edited {where}"
    if tool == "Write" and where:
        content = tool_input.get("content")
        if isinstance(content, str):
            lines = content.count("\n") + 1
            return f"Wrote {where} ({lines} lines): {_text(content, PREVIEW_CHARS, redactor, counts)}"
        return f"Wrote {where}"
    if tool == "NotebookEdit" and where:
        return f"Edited notebook {where}: {_text(tool_input.get('new_source'), PREVIEW_CHARS, redactor, counts)}"
    if tool == "Bash" and isinstance(tool_input.get("command"), str):
        command = _text(tool_input["command"], COMMAND_CHARS, redactor, counts)
        line = f"Ran `{command}`{why}"
        if success:
            output = excerpt(_output(response), OUTPUT_CHARS, redactor, counts)
            return f"{line}: ok" + (f": {output}" if output else "")
        return line
    if tool in ("Grep", "Glob") and isinstance(tool_input.get("pattern"), str):
        pattern = _text(tool_input["pattern"], ARGUMENT_CHARS, redactor, counts)
        found = ""
        if success and isinstance(response, dict):
            n = response.get("numFiles", response.get("numMatches"))
            found = f": {n} found" if isinstance(n, int) else ""
        return f"Searched for {pattern!r} in {where or '.'}{found}"
    if tool == "WebFetch" and isinstance(tool_input.get("url"), str):
        return f"Fetched {_text(tool_input['url'], ARGUMENT_CHARS, redactor, counts)}"
    if tool == "WebSearch" and isinstance(tool_input.get("query"), str):
        return f"Searched the web for {_text(tool_input['query'], ARGUMENT_CHARS, redactor, counts)!r}"
    return describe_call(tool, tool_input, payload.get("description"), redactor, counts)


def describe_call(
    tool: str, tool_input: Any, description: Any, redactor: Redactor | None, counts: dict[str, int] | None
) -> str:
    """``Tool: description [key inputs]`` (either part may be missing; "" when there is nothing to
    say): a call of a tool without a distiller of its own."""
    what = ""
    if isinstance(description, str) and description.strip():
        what = description
    elif isinstance(tool_input, dict) and isinstance(tool_input.get("description"), str):
        what = tool_input["description"]
    detail = ""
    if isinstance(tool_input, dict):
        parts = [f"{k}={tool_input[k]}" for k in ARGUMENT_KEYS if isinstance(tool_input.get(k), str | int)]
        rest = {
            k: v
            for k, v in tool_input.items()
            if k != "description" and v not in (None, "", [], {}) and not str(v).isspace()
        }
        if not parts and rest:
            parts = [json.dumps(rest, ensure_ascii=False, default=str, sort_keys=True)]
        detail = " ".join(parts)
    elif isinstance(tool_input, str):
        detail = tool_input
    what, detail = _text(what, ARGUMENT_CHARS, redactor, counts), _text(detail, ARGUMENT_CHARS, redactor, counts)
    text = f"{what} [{detail}]" if what and detail else what or detail
    if not text:
        return ""
    return f"{tool}: {text}" if tool else text


def tool_memory(
    event: str, payload: dict[str, Any], redactor: Redactor | None = None, counts: dict[str, int] | None = None
) -> dict[str, Any] | None:
    """The memory (``{content, type, source, metadata}``) of one report of a tool call, or None
    when there is nothing to say about it. ``redactor`` redacts every text before it is cut (hits
    added to ``counts``)."""
    raw_tool = payload.get("tool_name")
    tool = raw_tool if isinstance(raw_tool, str) else ""
    raw_input = payload.get("tool_input")
    tool_input: dict[str, Any] = raw_input if isinstance(raw_input, dict) else {}
    success = outcome_of(event, payload)
    line = _line(tool, tool_input, payload, success, redactor, counts)
    if not line and isinstance(raw_input, str):
        line = describe_call(tool, raw_input, payload.get("description"), redactor, counts)
    if not line.strip():
        return None
    metadata: dict[str, Any] = {"hook_event": event, "tool_name": tool}
    if payload.get("tool_use_id"):
        metadata["tool_use_id"] = payload["tool_use_id"]
    args = arguments(tool_input, redactor, None)  # counted once, in the line
    if args:
        metadata["arguments"] = args
    if (
        tool == "Edit"
        and isinstance(tool_input.get("old_string"), str)
        and isinstance(tool_input.get("new_string"), str)
    ):
        metadata["change"] = change_of(tool_input["old_string"], tool_input["new_string"], redactor, None)
    for key in ("file_path", "notebook_path"):
        if isinstance(tool_input.get(key), str):
            metadata["file"] = _text(tool_input[key], ARGUMENT_CHARS, redactor, None)
            break
    if success is False:
        error = _error(payload, redactor, counts)
        line += f": failed: {error}" if error else ": failed"
        metadata["error"] = error or "failed"
        kind = "failure"
    elif success is None:
        line += " (started; no outcome recorded)"
        kind = "change" if tool in CHANGE_TOOLS else "activity"
    else:
        kind = "change" if tool in CHANGE_TOOLS else "activity"
    if success is not None:
        metadata["success"] = success
    metadata["kind"] = kind
    metadata["importance"] = IMPORTANCE[kind]
    url = tool_input.get("url") if tool == "WebFetch" else None
    # The origin in its stored form, written out here: a hook process must not import
    # remindful.model (dataclasses, typing, uuid: ~35 ms per hook); the store checks and
    # normalises it (remindful.model.make_origin) as it writes the memory.
    if isinstance(url, str):  # the page's words, if any; its address redacted as the line's is
        origin = f"web:{_text(url, ARGUMENT_CHARS, redactor, None)}"
    else:
        origin = f"tool:{tool}" if tool else "tool"
    return {"content": line, "type": "action", "source": "hook", "origin": origin, "metadata": metadata}


__all__ = [
    "ARGUMENT_KEYS",
    "CHANGE_TOOLS",
    "READ_TOOLS",
    "TOOL_EVENTS",
    "arguments",
    "change_of",
    "compact_change",
    "describe_call",
    "excerpt",
    "outcome_of",
    "short_path",
    "tool_memory",
]
