"""A warning before the same mistake: a ``PreToolUse`` for a call that failed before in this project
(and has not succeeded since) is told so, with the failure's line (issue 31 item 7).

"The same call" is the tool and its key arguments as the hooks record them (metadata ``tool_name``
and ``arguments``: for Bash the command; see :mod:`remindful.services.ingest.distill`), in the
project of the event's ``cwd``, never another's: a ``.remindful`` marker naming a project the
catalog records at another directory gets no warning of it (issue 32: no project poses as another).
The earlier outcomes are the project's stored action memories and the outcomes still in the spool
(:mod:`remindful.engine.call_history`): a catalog query, no model, so that the hook answers within
its 0.5 s whether a daemon runs or not.

The warning goes to the agent as the ``additionalContext`` of the hook's output, with no
``permissionDecision``: the call is neither allowed past the user's permission rules nor stopped
(``ask``/``deny`` would halt the agent; a ``permissionDecisionReason`` of an allowed call reaches
only the user, not the model). Standard library only: the hook process runs this.
"""

from __future__ import annotations

import json
import time

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs hook processes milliseconds
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, Protocol

    from remindful.engine.projects import Project

    class History(Protocol):
        """Where earlier outcomes of calls are found (:class:`~remindful.engine.call_history.LocalHistory`,
        or a shared catalog's capture repository)."""

        def project_root(self, key: str) -> str | None: ...
        def spooled_outcomes(self) -> list[tuple[str, float]]: ...
        def stored_calls(self, scope: str, tool: str, arguments: dict[str, Any]) -> list[tuple[str, str, float]]: ...


#: The failure's line is cut to this many characters in the warning.
LINE_CHARS = 400
HEADER = "remindful (remembered data about earlier runs, not an instruction):"


def call_of(record: dict[str, Any]) -> tuple[str, dict[str, Any], str | None] | None:
    """``(tool, key arguments, cwd)`` of the call a PreToolUse record starts, or None when it names
    no tool or no key argument (nothing to recognise it by)."""
    for memory in record.get("memories") or ():
        meta = memory.get("metadata") or {}
        tool, args = meta.get("tool_name"), meta.get("arguments")
        if isinstance(tool, str) and tool and isinstance(args, dict) and args:
            cwd = meta.get("cwd")
            return tool, args, cwd if isinstance(cwd, str) else None
    return None


def _canonical(arguments: dict[str, Any]) -> str:
    return json.dumps(
        {k: " ".join(v.split()) if isinstance(v, str) else v for k, v in arguments.items()},
        sort_keys=True,
        ensure_ascii=False,
    )


def _outcome(meta: dict[str, Any], tool: str, arguments: str) -> bool | None:
    """True/False for a recorded outcome of the same call, None for another call or no outcome."""
    if meta.get("tool_name") != tool or not isinstance(meta.get("arguments"), dict):
        return None
    if _canonical(meta["arguments"]) != arguments or not isinstance(meta.get("success"), bool):
        return None
    return bool(meta["success"])


def injection_off(projects: Any, project: Project) -> bool:
    """Whether ``hooks.projects`` (the raw mapping: key → ``{"inject": …}``) turns injection off for
    ``project``: its first entry naming the project by its key, name or root directory, or by an
    fnmatch pattern of one of them, as :func:`remindful.services.context.injection_for` reads it."""
    if not isinstance(projects, dict) or not projects:
        return False
    import fnmatch
    import os

    names = [n for n in (project.key, project.name, project.root) if n]
    for key, entry in projects.items():
        pattern = os.path.expanduser(str(key))
        exact = pattern.rstrip(os.sep) or pattern
        if any(name == exact or fnmatch.fnmatchcase(name, pattern) for name in names):
            return isinstance(entry, dict) and entry.get("inject") is False
    return False


def failure_warning(
    history: History,
    resolve: Callable[[str | None], Project | None],
    record: dict[str, Any],
    projects: Any = None,
    *,
    roots_differ: bool = False,
) -> str | None:
    """The warning for the call ``record`` (a PreToolUse record) starts, or None: the newest
    outcomes of the same call in the project of its ``cwd`` (``resolve``: the project resolver),
    newest first, counted up to the latest success; a warning when the latest is a failure; none
    where ``projects`` (``hooks.projects``) turns injection off (:func:`injection_off`). (The
    capture filters store one of identical failures repeated within ``min_interval_seconds``: the
    count is of those recorded.) ``roots_differ``: ``resolve`` is the store's own resolver, the
    one that chose the scopes the calls were stored in, on a catalog several machines share,
    where a repository known by its remote URL has a root on each: the root the catalog recorded
    is then not compared with this one's."""
    call = call_of(record)
    if call is None:
        return None
    tool, args, cwd = call
    arguments = _canonical(args)
    project = resolve(cwd)
    if project is None:
        return None  # no project: calls in different places cannot be told apart
    if injection_off(projects, project):
        return None  # hooks.projects turns injection off here
    recorded = None if roots_differ else history.project_root(project.key)
    if recorded and project.root and recorded != project.root:
        return None  # a marker here names a project whose place is elsewhere: it is not this one's
    seen: list[tuple[float, bool, str]] = []
    for payload, at in history.spooled_outcomes():
        try:
            spooled = json.loads(payload)
        except ValueError:
            continue
        for memory in spooled.get("memories") or () if isinstance(spooled, dict) else ():
            meta = memory.get("metadata") or {}
            outcome = _outcome(meta, tool, arguments)
            if outcome is not None and _same_project(resolve, meta.get("cwd"), project):
                seen.append((float(spooled.get("at") or at), outcome, str(memory.get("content", ""))))
    for content, metadata, at in history.stored_calls(project.scope, tool, args):
        try:
            meta = json.loads(metadata)
        except ValueError:
            continue
        outcome = _outcome(meta, tool, arguments) if isinstance(meta, dict) else None
        if outcome is not None:
            seen.append((at, outcome, content))
    seen.sort(key=lambda entry: -entry[0])
    failures = []
    for entry in seen:
        if entry[1]:
            break
        failures.append(entry)
    if not failures:
        return None
    last_at, _, line = failures[0]
    line = " ".join(line.split())
    if len(line) > LINE_CHARS:
        line = line[: LINE_CHARS - 1] + "…"
    recorded = "1 failure" if len(failures) == 1 else f"{len(failures)} failures"
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(last_at))
    return (
        f"{HEADER}\n- This same {tool} call failed before in this project and has not succeeded since "
        f"({recorded} recorded, the last at {when}). Its last failure: {line}"
    )


def _same_project(resolve: Callable[[str | None], Project | None], cwd: Any, project: Project) -> bool:
    found = resolve(cwd if isinstance(cwd, str) else None)
    return found is not None and found.key == project.key


__all__ = ["HEADER", "call_of", "failure_warning", "injection_off"]
