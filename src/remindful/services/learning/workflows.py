"""Procedural memories from actions: observed workflows and workflows built from a session.

``capture_workflow(actions)``: at least ``learning.min_actions_for_pattern`` (3) actions, all
within ``learning.pattern_time_window_minutes`` (30), that belong together → a ``workflow`` memory
"To <goal>: 1) …, 2) …". Otherwise nothing (None). Rules for "belong together" (the LLM, when
configured for ``workflow``, decides instead): noise (mouse moves, hovers, scrolls) is ignored and
repeats collapse; consecutive actions are linked when they share a content word, a context
(app, project, repo, url, file, window) or a domain (code: test/build/commit/push…; web forms:
navigate/fill/click/submit…; documents: open/edit/save/export…); at least half the consecutive
pairs must be linked. The goal is ``goal=`` if given, else named after the last action
(push → "ship changes", deploy → "deploy", submit → "submit the form"…).

``create_workflow_from_session(session_id, name)``: the session's successful action memories, in
order, become a named reusable workflow memory with its success rate.
"""

from __future__ import annotations

import itertools
import logging
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from remindful.errors import ValidationError
from remindful.model import Memory
from remindful.services.learning import llm
from remindful.services.learning.actions import outcome, stem, step_text
from remindful.services.learning.common import MemoryWriter, finish, preview, store_memories
from remindful.services.learning.types import CaptureSource, UserAction

if TYPE_CHECKING:
    from remindful.engine.repositories import LearningRepository

log = logging.getLogger("remindful.services.learning")

_NOISE = re.compile(r"(?i)mouse[_ -]?move|hover|scroll|focus|blur|idle")
_STOP = {"the", "a", "an", "to", "of", "and", "on", "in", "at", "for", "with", "into", "from", "then", "my", "it"}
DOMAINS = {
    "code": {
        "test",
        "build",
        "compil",
        "lint",
        "format",
        "commit",
        "push",
        "pull",
        "merg",
        "rebas",
        "deploy",
        "releas",
        "install",
        "checkout",
        "branch",
        "tag",
        "publish",
        "review",
        "ci",
        "pr",
        "git",
        "npm",
        "pytest",
        "cargo",
        "make",
        "docker",
    },
    "web": {
        "navigat",
        "open",
        "visit",
        "type",
        "fill",
        "enter",
        "click",
        "submit",
        "select",
        "login",
        "log",
        "sign",
        "search",
        "press",
        "upload",
        "download",
        "url",
        "page",
        "form",
        "button",
        "brows",
    },
    "document": {
        "open",
        "edit",
        "sav",
        "export",
        "print",
        "format",
        "writ",
        "insert",
        "copy",
        "past",
        "clos",
        "renam",
        "document",
        "draft",
    },
}
_CONTEXT_KEYS = ("app", "application", "project", "repo", "url", "domain", "file", "file_path", "window", "cwd")
GOALS = (
    (re.compile(r"\bdeploy"), "deploy"),
    (re.compile(r"\brelease"), "release"),
    (re.compile(r"\bpublish"), "publish"),
    (re.compile(r"\bpush"), "ship changes"),
    (re.compile(r"\bmerge"), "merge changes"),
    (re.compile(r"\bsubmit"), "submit the form"),
    (re.compile(r"\b(?:log ?in|sign ?in)"), "log in"),
    (re.compile(r"\bsearch"), "search"),
    (re.compile(r"\b(?:export|print)"), "export the document"),
    (re.compile(r"\bsend"), "send it"),
)
SYSTEM = "You recognise workflows in user action logs. Answer with JSON only."
PROMPT = """The user performed these actions in sequence:
{actions}

If this represents a meaningful workflow pattern, describe it as a procedure.
If the actions are unrelated or random, answer null.

Example good pattern: "To deploy the application: 1) Run tests, 2) Build the project, 3) Push to main"

Respond with JSON: {{"workflow": "To ...: 1) ..., 2) ..."}} or {{"workflow": null}}"""


def _words(action: UserAction, *, with_type: bool = False) -> set[str]:
    text = f"{action.action_type} {action.description}" if with_type else action.description
    return {stem(w) for w in re.findall(r"[a-z][a-z0-9]+", text.lower()) if w not in _STOP}


def _context(action: UserAction) -> set[str]:
    return {f"{k}={action.metadata[k]}" for k in _CONTEXT_KEYS if isinstance(action.metadata.get(k), str)}


def _linked(a: UserAction, b: UserAction) -> bool:
    wa, wb = _words(a), _words(b)
    if wa & wb - {"run", "do", "us", "go", "get"}:
        return True
    if _context(a) & _context(b):
        return True
    # A shared action type ("command", "click") says nothing; a shared domain does.
    ta, tb = _words(a, with_type=True), _words(b, with_type=True)
    return any((ta & domain) and (tb & domain) for domain in DOMAINS.values())


def related(actions: Sequence[UserAction]) -> bool:
    """Whether the actions form one workflow by the rules in the module docstring."""
    pairs = list(itertools.pairwise(actions))
    return bool(pairs) and sum(_linked(a, b) for a, b in pairs) * 2 >= len(pairs)


def goal_of(actions: Sequence[UserAction]) -> str:
    for action in reversed(actions):
        text = f"{action.action_type} {action.description}".lower()
        for pattern, goal in GOALS:
            if pattern.search(text):
                return goal
    return "complete " + actions[-1].description.strip().rstrip(".").lower()


def describe(actions: Sequence[UserAction], goal: str) -> str:
    steps = ", ".join(f"{i}) {_cap(a.description.strip().rstrip('.'))}" for i, a in enumerate(actions, 1))
    return f"To {goal}: {steps}."


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def _validate(value: Any) -> str | None:
    workflow = llm.require_keys(value, ["workflow"])["workflow"]
    if workflow is None:
        return ""
    if not isinstance(workflow, str) or not workflow.strip() or len(workflow) > 2000:
        raise ValueError("workflow must be null or a non-empty string of at most 2000 characters")
    return workflow.strip()


def prepare(actions: Sequence[UserAction | Mapping[str, Any]]) -> list[UserAction]:
    """Validate, order by time, drop noise, collapse immediate repeats."""
    if isinstance(actions, str) or not isinstance(actions, Sequence):
        raise ValidationError("actions", "expected a list of {action_type, description, timestamp}")
    parsed = [a if isinstance(a, UserAction) else UserAction.from_dict(dict(a), i) for i, a in enumerate(actions)]
    parsed.sort(key=lambda a: a.timestamp)
    out: list[UserAction] = []
    for action in parsed:
        if _NOISE.search(action.action_type) or _NOISE.search(action.description):
            continue
        if out and (out[-1].action_type, out[-1].description) == (action.action_type, action.description):
            continue
        out.append(action)
    return out


def capture_workflow(
    store: MemoryWriter,
    learning: LearningRepository,
    actions: Sequence[UserAction | Mapping[str, Any]],
    *,
    goal: str | None = None,
    name: str | None = None,
) -> Memory | None:
    """Store the procedural memory for ``actions`` if they form a workflow; else None."""
    config = store.settings.learning
    steps = prepare(actions)
    if len(steps) < config.min_actions_for_pattern:
        return None
    span = (steps[-1].timestamp - steps[0].timestamp).total_seconds()
    if span > config.pattern_time_window_minutes * 60:
        return None
    listing = "\n".join(f"{i}. {a.action_type}: {a.description}" for i, a in enumerate(steps, 1))
    content = llm.ask(store, learning, "workflow", SYSTEM, PROMPT.format(actions=listing), _validate)
    synthesized_by = "llm" if content is not None else "rules"
    if content == "":
        return None  # the LLM judged the actions unrelated
    if content is None:
        if not related(steps):
            log.debug("[MEM:CAPTURE] %d actions are unrelated; no workflow", len(steps))
            return None
        content = describe(steps, goal or goal_of(steps))
    known = [outcome({"content": a.description, "metadata": a.metadata}) for a in steps]
    judged = [k for k in known if k is not None]
    metadata: dict[str, Any] = {
        "name": name or (goal or goal_of(steps)).replace(" ", "_"),
        "steps": [a.description for a in steps],
        "action_types": [a.action_type for a in steps],
        "step_count": len(steps),
        "span_seconds": round(span, 3),
        "synthesized_by": synthesized_by,
        "category": "workflow",
    }
    if judged:
        metadata["success_rate"] = round(sum(judged) / len(judged), 3)
    (memory,) = store_memories(
        store,
        [
            {
                "content": content,
                "type": "workflow",
                "memory_class": "procedural",
                "source": "workflow_pattern",
                "metadata": metadata,
                "timestamp": steps[-1].timestamp,
            }
        ],
    )
    log.info("[MEM:CAPTURE] Captured workflow: %s", preview(content, 50))
    finish(learning, CaptureSource.WORKFLOW_PATTERN, metadata["name"], [memory])
    return memory


def create_workflow_from_session(
    store: MemoryWriter, learning: LearningRepository, session_id: str, name: str, *, only_successful: bool = True
) -> Memory:
    """A reusable workflow from the session's action memories, oldest first (failed ones left
    out unless ``only_successful=False``). Raises ValidationError if fewer than 2 steps remain."""
    if not isinstance(session_id, str) or not session_id.strip():
        raise ValidationError("session_id", "expected a session id (see `remindful sessions`)")
    if not isinstance(name, str) or not name.strip():
        raise ValidationError("name", "expected a workflow name, e.g. 'google_search_workflow'")
    actions = list(reversed(store.list_memories("action", session_id, limit=10_000)))
    if not actions:
        raise ValidationError("session_id", f"session {session_id!r} has no action memories")
    outcomes = [outcome(m) for m in actions]
    used = [m for m, ok in zip(actions, outcomes, strict=True) if ok is not False or not only_successful]
    if len(used) < 2:
        raise ValidationError(
            "session_id", f"session {session_id!r} has {len(used)} usable action(s); a workflow needs at least 2"
        )
    steps = [step_text(m.content) for m in used]
    judged = [ok for ok in outcomes if ok is not None]
    listed = ", ".join(f"{i}) {s}" for i, s in enumerate(steps, 1))
    content = f"Workflow {name}: {listed}."
    span = (used[-1].created_at - used[0].created_at).total_seconds()
    metadata = {
        "name": name,
        "steps": steps,
        "step_ids": [m.id for m in used],
        "step_count": len(steps),
        "success_rate": round(sum(judged) / len(judged), 3) if judged else None,
        "avg_duration": round(span, 3),
        "from_session": session_id,
        "category": "workflow",
    }
    (memory,) = store_memories(
        store,
        [
            {
                "content": content,
                "type": "workflow",
                "memory_class": "procedural",
                "source": "workflow_pattern",
                "metadata": {k: v for k, v in metadata.items() if v is not None},
                "session_id": session_id,
            }
        ],
    )
    log.info("[MEM:CAPTURE] Captured workflow: %s", preview(content, 50))
    finish(learning, CaptureSource.WORKFLOW_PATTERN, name, [memory])
    return memory


__all__ = ["capture_workflow", "create_workflow_from_session", "describe", "goal_of", "prepare", "related"]
