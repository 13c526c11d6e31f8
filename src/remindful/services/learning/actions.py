"""What an action memory did, to what, and whether it worked — for patterns and warnings.

Action memories come from many capture paths (MCP middleware and proxy, hooks, manual stores),
so these helpers read the common metadata keys (``action``/``tool_name``/``tool``, ``target``,
``success``/``status``/``outcome``) and fall back to the text ("Clicked login button at
(500, 300) - failed").
"""

from __future__ import annotations

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


def _action(content: str, metadata: dict[str, Any] | None, normal: Callable[[str], str]) -> str:
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


def when(memory: Memory) -> str:
    """A short date as in "from Oct 20"."""
    at = memory.created_at
    return f"{at:%b} {at.day}, {at.year}"


__all__ = ["label", "outcome", "signature", "stem", "step_text", "when"]
