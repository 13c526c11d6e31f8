"""What an action memory did, to what, and whether it worked — for patterns and warnings.

Action memories come from many capture paths (MCP middleware and proxy, hooks, manual stores),
so these helpers read the common metadata keys (``action``/``tool_name``/``tool``, ``target``,
``success``/``status``/``outcome``) and fall back to the text ("Clicked login button at
(500, 300) - failed").

A captured tool call is known by its tool and its arguments, as the capture paths store them
(``tool`` + ``arguments`` from the MCP middleware and the proxy, ``tool_name`` + ``arguments``
from the hooks): its signature is the tool's verb ("mouse_click" → click, "Bash" → bash) and its
key argument (coordinates, a selector, a URL, a path, a command...), so five failed
``mouse_click(13, 13)`` calls and an agent about to click at (13, 13) are the same action. A
context may name a call that way too: ``mouse_click(13, 13)``, ``mouse_click(x=13, y=13)``,
``Bash(pnpm run build)``, or ``action={"tool": ..., "arguments": {...}}``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from remindful.model import Memory

_COORDS = re.compile(r"\(?\s*(-?\d{1,5})\s*,\s*(-?\d{1,5})\s*\)?")
_WORD = re.compile(r"[a-z][a-z0-9_#.-]*")
_OUTCOME_WORDS = {
    "success",
    "succeeded",
    "successful",
    "successfully",
    "failed",
    "failure",
    "fail",
    "error",
    "errored",
    "ok",
    "done",
    "at",
    "on",
    "the",
    "a",
    "an",
    "to",
    "in",
    "of",
    "with",
    "and",
}
#: Stems of verbs that name an action, for finding the verb in free text.
ACTION_VERBS = {
    "click",
    "doubleclick",
    "tap",
    "type",
    "fill",
    "submit",
    "navigat",
    "open",
    "clos",
    "select",
    "press",
    "scroll",
    "drag",
    "drop",
    "upload",
    "download",
    "run",
    "execut",
    "call",
    "send",
    "search",
    "login",
    "logout",
    "sign",
    "sav",
    "delet",
    "edit",
    "writ",
    "read",
    "install",
    "deploy",
    "push",
    "commit",
    "build",
    "test",
    "screenshot",
}
_FAILED = re.compile(r"\b(?:failed|failure|error(?:ed)?|timed out|timeout|not found|exception)\b", re.IGNORECASE)
_SUCCEEDED = re.compile(r"\b(?:success(?:ful(?:ly)?)?|succeeded|completed|ok)\b", re.IGNORECASE)


def stem(word: str) -> str:
    """A crude, consistent stem: "clicked"/"clicks"/"clicking" → "click", "submitted" → "submit"."""
    w = word.lower()
    for suffix in ("ing", "ied", "ed", "es", "s", "e"):
        if w.endswith(suffix) and len(w) - len(suffix) >= 3:
            w = w[: -len(suffix)] + ("y" if suffix == "ied" else "")
            break
    if len(w) > 3 and w[-1] == w[-2] and w[-1] not in "aeiousl":
        w = w[:-1]
    return w


def outcome(memory: Memory | dict[str, Any]) -> bool | None:
    """True (succeeded), False (failed) or None (unknown) from metadata, else from the text."""
    md = memory.metadata if isinstance(memory, Memory) else memory.get("metadata", {})
    content = memory.content if isinstance(memory, Memory) else str(memory.get("content", ""))
    if isinstance(md.get("success"), bool):
        return bool(md["success"])
    status = md.get("status") or md.get("outcome") or md.get("result")
    if isinstance(status, str):
        if _FAILED.search(status) or status.lower() in {"fail", "ko", "false"}:
            return False
        if _SUCCEEDED.search(status) or status.lower() in {"true", "pass", "passed"}:
            return True
    if md.get("error"):
        return False
    if _FAILED.search(content):
        return False
    if _SUCCEEDED.search(content):
        return True
    return None


def _target(md: dict[str, Any]) -> str:
    target = md.get("target")
    if isinstance(target, dict):
        if "x" in target and "y" in target:
            return f"({target['x']}, {target['y']})"
        for key in ("element", "selector", "text", "url", "name"):
            if isinstance(target.get(key), str):
                return target[key]
    if isinstance(target, str):
        return target
    for key in ("selector", "element", "url", "file_path", "command"):
        if isinstance(md.get(key), str):
            return md[key]
    return ""


def signature(content: str, metadata: dict[str, Any] | None = None) -> str:
    """``"<verb> <target>"`` normalised (words stemmed): the identity of "the same action" across
    memories. Not for display: :func:`label` is the same words as written."""
    return _action(content, metadata, stem)


def label(content: str, metadata: dict[str, Any] | None = None) -> str:
    """``"<verb> <target>"`` as written ("navigate dashboard", where the signature says "navigat
    dashboard"): how an action is named to a user."""
    return _action(content, metadata, str)


#: The arguments that name what a call acts on, most telling first.
TARGET_KEYS = ("selector", "element", "url", "file_path", "path", "command", "query", "pattern", "text", "name")
_CALL = re.compile(r"^\s*([A-Za-z_][\w.\-]*)\s*\((.*)\)\s*$", re.DOTALL)
_KEYWORD_ARG = re.compile(r"^\s*([A-Za-z_]\w*)\s*=\s*(.+?)\s*$", re.DOTALL)


def tool_call(content: str, metadata: dict[str, Any] | None) -> tuple[str, Any] | None:
    """``(tool, arguments)`` of a captured tool call (its metadata), or of a context written as a
    call (``mouse_click(13, 13)``, ``mouse_click(x=13, y=13)``, ``Bash(pnpm run build)``); None
    for anything else."""
    md = metadata or {}
    tool = md.get("tool") if isinstance(md.get("tool"), str) else md.get("tool_name")
    for key in ("arguments", "tool_input"):
        if isinstance(tool, str) and tool and isinstance(md.get(key), dict):
            return tool, md[key]
    if md:
        return None
    call = _CALL.match(content)
    if call is None:
        return None
    name, inner = call.group(1), call.group(2).strip()
    if not inner:
        return name, {}
    parts = [p for p in (part.strip() for part in inner.split(",")) if p]
    keywords = [_KEYWORD_ARG.match(p) for p in parts]
    if parts and all(keywords):
        return name, {m.group(1): _literal(m.group(2)) for m in keywords if m}
    coords = _COORDS.fullmatch(inner)
    if coords:
        return name, {"x": int(coords.group(1)), "y": int(coords.group(2))}
    return name, _literal(inner)


def _literal(text: str) -> Any:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"`":
        return text[1:-1]
    try:
        return int(text)
    except ValueError:
        return text


def tool_verb(tool: str) -> str:
    """The verb of a tool's name: its first word that names an action ("mouse_click" → "click",
    "browser_navigate" → "navigate", "keyboardType" → "type"), else the whole name, lower-cased."""
    words = [w.lower() for w in re.findall(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])", tool)]
    return next((w for w in words if stem(w) in ACTION_VERBS), tool.lower())


def call_target(arguments: Any) -> str:
    """What a call acts on, from its arguments: ``(x, y)``, else the first of :data:`TARGET_KEYS`,
    else all of them (sorted JSON)."""
    if not isinstance(arguments, dict):
        return " ".join(str(arguments).split())
    if isinstance(arguments.get("x"), int | float) and isinstance(arguments.get("y"), int | float):
        return f"({arguments['x']:g},{arguments['y']:g})"
    target = arguments.get("target")
    if isinstance(target, dict) and "x" in target and "y" in target:
        return call_target(target)
    for key in TARGET_KEYS:
        if isinstance(arguments.get(key), str) and arguments[key].strip():
            return " ".join(arguments[key].split())
    return json.dumps(arguments, sort_keys=True, ensure_ascii=False, default=str) if arguments else ""


def _action(content: str, metadata: dict[str, Any] | None, normal: Callable[[str], str]) -> str:
    call = tool_call(content, metadata)
    if call is not None:
        verb, target = normal(tool_verb(call[0])), call_target(call[1])
        if target.startswith("("):
            return f"{verb} {target}"
        return " ".join([verb, *(normal(w) for w in target.lower().split())]).strip()
    md = metadata or {}
    verb = next((md[k] for k in ("action", "tool_name", "tool", "action_type") if isinstance(md.get(k), str)), "")
    target = _target(md)
    text = content.lower()
    if not target:
        coords = _COORDS.search(text)
        if coords:
            target = f"({coords.group(1)}, {coords.group(2)})"
    words = [w for w in _WORD.findall(text) if w not in _OUTCOME_WORDS]
    if not verb and words:
        # The first known action verb ("User is about to click …" → click), else the first word.
        at = next((i for i, w in enumerate(words) if stem(w) in ACTION_VERBS), 0)
        verb, words = words[at], words[at + 1 :]
    if not target:
        target = " ".join(words[:3])
    parts = [normal(w) for w in _WORD.findall(str(verb).lower())] + [
        normal(w) if not w.startswith("(") else w for w in _WORD.findall(target.lower())
    ]
    coords = _COORDS.search(target)
    if coords:
        parts = [normal(w) for w in _WORD.findall(str(verb).lower())] + [f"({coords.group(1)},{coords.group(2)})"]
    return " ".join(p for p in parts if p)


def step_text(content: str) -> str:
    """An action's text without its outcome suffix ("Clicked submit - success" → "Clicked submit")."""
    text = re.sub(
        r"\s*[-\u2013\u2014:|]\s*(?:success(?:ful)?|succeeded|ok|failed|failure|error)\.?\s*$",
        "",
        content.strip(),
        flags=re.IGNORECASE,
    )
    return " ".join(text.split())[:200]


#: Tools that run a shell command (their ``command`` argument names the action).
SHELL_TOOLS = frozenset({"bash", "shell", "run_command", "run_terminal_cmd", "terminal", "exec", "execute_command"})
#: Tools that change a file (their file names the action).
EDIT_TOOLS = frozenset({"edit", "multiedit", "write", "notebookedit", "str_replace_editor", "apply_patch"})
#: Verbs of actions on a screen (a GUI or a browser page).
GUI_VERBS = frozenset(
    {"click", "doubleclick", "tap", "type", "fill", "press", "scroll", "drag", "drop", "hover", "select", "navigat"}
)
#: What to try about an action that keeps failing, by :func:`action_kind`.
ADVICE = {
    "shell": "read its error output and fix the cause (a missing dependency, the wrong directory, a failing test) "
    "before running it again",
    "edit": "read the file again before editing it (the text to replace may have changed) and check the path",
    "gui": "look for a more reliable way (a selector instead of coordinates, a wait before it)",
    "other": "check the error it returns and the arguments it was given",
}
#: Longest name :func:`call_name` and :func:`short_words` give, in characters.
NAME_CHARS = 60


def short_words(text: str, limit: int = NAME_CHARS) -> str:
    """``text`` on one line, at most ``limit`` characters, cut between words (with "…"), never
    inside one unless a single word is longer than ``limit``."""
    flat = " ".join(str(text).split())
    if len(flat) <= limit:
        return flat
    cut = flat[: limit - 1]
    space = cut.rfind(" ")
    if space >= limit // 3:
        cut = cut[:space]
    return cut.rstrip(" ,;:-") + "\u2026"


def call_name(metadata: dict[str, Any] | None) -> str | None:
    """How a captured tool call is named to a person, or None for a memory that is not one: the
    command a shell tool ran (``pnpm test``), the tool and the file it changed or read
    (``Edit .env.staging``), else the tool and what it acted on; at most :data:`NAME_CHARS`."""
    md = metadata or {}
    tool = md.get("tool_name") if isinstance(md.get("tool_name"), str) else md.get("tool")
    if not isinstance(tool, str) or not tool.strip():
        return None
    given = md.get("arguments")
    arguments: dict[str, Any] = given if isinstance(given, dict) else {}
    command = arguments.get("command")
    if isinstance(command, str) and command.strip() and (tool.lower() in SHELL_TOOLS or len(arguments) == 1):
        return short_words(command)
    path = next(
        (v for k in ("file_path", "notebook_path", "path") if isinstance(v := arguments.get(k), str) and v.strip()),
        md.get("file") if isinstance(md.get("file"), str) else None,
    )
    if path:
        return short_words(f"{tool} {path.rstrip('/').rsplit('/', 1)[-1] if path.startswith('/') else path}")
    target = call_target(arguments) if arguments else ""
    return short_words(f"{tool} {target}".strip())


def action_kind(content: str, metadata: dict[str, Any] | None = None) -> str:
    """``shell`` (a command run), ``edit`` (a file changed), ``gui`` (an action on a screen:
    click, type, navigate…, or anything at coordinates) or ``other``: which :data:`ADVICE` fits."""
    md = metadata or {}
    call = tool_call(content, md)
    tool = call[0].lower() if call else str(md.get("tool_name") or md.get("tool") or "").lower()
    if tool in SHELL_TOOLS or (call and isinstance(call[1], dict) and isinstance(call[1].get("command"), str)):
        return "shell"
    if tool in EDIT_TOOLS:
        return "edit"
    verb = signature(content, md).split(" ", 1)[0]
    if stem(verb) in GUI_VERBS or verb in GUI_VERBS or _COORDS.search(content):
        return "gui"
    return "other"


def when(memory: Memory) -> str:
    """A short date as in "from Oct 20"."""
    at = memory.created_at
    return f"{at:%b} {at.day}, {at.year}"


__all__ = [
    "ADVICE",
    "action_kind",
    "call_name",
    "call_target",
    "label",
    "outcome",
    "short_words",
    "signature",
    "stem",
    "step_text",
    "tool_call",
    "tool_verb",
    "when",
]
