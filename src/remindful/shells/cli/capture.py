"""Capture commands: ``hook`` (and the specification's verbs, its aliases: ``session start|end``,
``capture-memory``, ``inject-context``), ``install-hooks``, ``daemon``, ``watch``, ``context``.

``remindful hook EVENT`` and its aliases are normally dispatched before this module loads (see
:mod:`remindful.shells.entry`); the commands here serve ``--help`` and in-process callers.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from remindful.shells.cli.app import (
    JsonOpt,
    _fail,
    _here,
    _open,
    _print_json,
    _run,
    _State,
    app,
    console,
    err_console,
)
from remindful.shells.cli.usage import Group


def _hook(words: list[str], no_context: bool) -> None:
    from remindful.shells.hook import run

    argv = [*(["--path", _State.path] if _State.path else []), *words]
    raise typer.Exit(run([*argv, "--no-context"] if no_context else argv))


NoContextOpt = Annotated[
    bool, typer.Option("--no-context", help="Do not print memories for SessionStart/UserPromptSubmit.")
]


@app.command(context_settings={"ignore_unknown_options": True})
def hook(
    event: Annotated[
        str,
        typer.Argument(
            help="SessionStart, UserPromptSubmit, PreToolUse, PostToolUse, PostToolUseFailure, Stop or SessionEnd."
        ),
    ],
    no_context: NoContextOpt = False,
) -> None:
    """Capture one coding-agent hook event (Claude Code's hook JSON on stdin).

    Spools the event in one short transaction and exits 0; the store's daemon turns it into
    memories (the console script starts one, detached, when none runs). SessionStart and
    UserPromptSubmit print relevant memories as hookSpecificOutput.additionalContext. Install with
    `remindful install-hooks`.
    """
    _hook(["hook", event], no_context)


session_app = typer.Typer(cls=Group, help="The session hooks: `session start` and `session end`.")
app.add_typer(session_app, name="session")


@session_app.command("start")
def session_start(no_context: NoContextOpt = False) -> None:
    """`remindful hook SessionStart`: open the session, print the context for its start."""
    _hook(["session", "start"], no_context)


@session_app.command("end")
def session_end() -> None:
    """`remindful hook SessionEnd`: store the last answer, close the session."""
    _hook(["session", "end"], False)


@app.command("capture-memory")
def capture_memory(
    source: Annotated[
        str,
        typer.Option(
            "--source",
            help="hook: a tool call (the payload's PreToolUse, PostToolUse or PostToolUseFailure); "
            "response: the assistant's answer (Stop, SubagentStop or SessionEnd; Stop if unnamed).",
        ),
    ] = "hook",
) -> None:
    """Capture the hook event on stdin: the same as `remindful hook EVENT` with the payload's hook_event_name."""
    _hook(["capture-memory", "--source", source], False)


@app.command("inject-context")
def inject_context(no_context: NoContextOpt = False) -> None:
    """Print the context for the prompt on stdin: the same as `remindful hook UserPromptSubmit` (or SessionStart)."""
    _hook(["inject-context"], no_context)


@app.command("install-hooks")
def install_hooks(
    project: Annotated[
        str | None,
        typer.Option("--project", help="Project directory (default: the current one)."),
    ] = None,
    shared: Annotated[
        bool,
        typer.Option(
            "--shared",
            help="Write the committed .claude/settings.json, with `remindful` from PATH, instead of your "
            "own .claude/settings.local.json with this installation's absolute path.",
        ),
    ] = False,
    user: Annotated[bool, typer.Option("--user", help="Install in ~/.claude/settings.json for every project.")] = False,
    uninstall: Annotated[bool, typer.Option("--uninstall", help="Remove remindful's hooks (only ours).")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Add remindful's hooks to Claude Code's settings, keeping every other hook."""
    from remindful.services.ingest.install import install, settings_file

    target = _run(lambda: settings_file(project, user=user, shared=shared))
    result = _run(lambda: install(target, storage=_State.path, uninstall=uninstall, portable=shared))
    if json_out:
        _print_json({"success": True, **result})
        return
    console.print(f"{result['action']} remindful hooks in {result['path']}", highlight=False)
    for warning in result.get("warnings", []):
        err_console.print(f"[yellow]warning:[/yellow] {warning}", highlight=False)


@app.command()
def daemon(
    watch: Annotated[
        list[str] | None, typer.Option("--watch", "-w", help="Also watch this directory's .md files (repeatable).")
    ] = None,
    idle_exit: Annotated[
        float,
        typer.Option("--idle-exit", min=0, help="Stop after this many seconds without activity (0: never)."),
    ] = 0,
    on_demand: Annotated[bool, typer.Option("--on-demand", hidden=True)] = False,
    lock_fd: Annotated[int | None, typer.Option("--lock-fd", hidden=True)] = None,
) -> None:
    """Run the capture daemon: drain hook events, answer the hooks, watch Markdown dirs, run retention.

    The hooks start one by themselves when none runs (it stops after daemon.idle_exit_s without
    activity); run it by hand to keep one running.
    """
    from remindful.daemon import run_daemon

    if on_demand:  # started by a hook (remindful.shells.hook.start_daemon_for): quiet, and idle-bound
        _on_demand_daemon(lock_fd)
        return
    with _open(drain=False) as memory:  # its drain loop stores the spool
        err_console.print(f"remindful daemon for {memory.path} (Ctrl-C to stop)", highlight=False)
        _run(lambda: run_daemon(memory, watch_dirs=watch or [], idle_exit_s=idle_exit, lock_fd=lock_fd))


def _on_demand_daemon(lock_fd: int | None) -> None:
    """The daemon a hook started: it holds the lock the hook passed, stands by for nobody, answers
    searches of a small store exactly until its index is open, and stops after
    ``daemon.idle_exit_s`` without activity."""
    import os
    import time

    from remindful.api import MemoryManager
    from remindful.config import load_settings
    from remindful.daemon import run_daemon

    settings = _run(lambda: load_settings(_State.path))
    os.chdir(settings.storage_path)  # not the project the hook ran in: it may be unmounted or removed
    err_console.print(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} remindful daemon (pid {os.getpid()}) started by a hook")
    with MemoryManager(settings, exact_before_index=settings.search.exact_filter_max) as memory:
        _run(lambda: run_daemon(memory, idle_exit_s=settings.daemon.idle_exit_s, lock_fd=lock_fd, standby=False))
    err_console.print(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} remindful daemon (pid {os.getpid()}) stopped")


@app.command()
def watch(
    dirs: Annotated[list[str], typer.Argument(help="Directories whose .md files to index and watch.")],
    once: Annotated[bool, typer.Option("--once", help="Index what is there now and exit (no watching).")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Index the Markdown files of DIRS, then keep them current as they change (Ctrl-C to stop)."""
    import threading

    with _open() as memory:
        watcher = _run(lambda: memory.markdown_watcher(dirs))
        counts = _run(watcher.scan)
        if json_out:
            _print_json({"success": True, "scan": counts})
        else:
            console.print("initial scan: " + (", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "no files"))
        if once:
            return
        err_console.print("watching " + ", ".join(str(d) for d in watcher.dirs) + " (Ctrl-C to stop)")
        stop = threading.Event()
        try:
            watcher.run(stop, initial_scan=False)
        except KeyboardInterrupt:
            stop.set()
        except OSError as exc:
            raise _fail(exc) from None


@app.command()
def context(
    query: Annotated[str, typer.Argument(help="The prompt or topic to find context for.")],
    budget: Annotated[
        int | None, typer.Option("--budget", help="Token budget (default hooks.context_budget_tokens).")
    ] = None,
    min_score: Annotated[
        float | None,
        typer.Option("--min-score", help="Relevance floor 0-1 (default context.min_score)."),
    ] = None,
    scope: Annotated[
        str,
        typer.Option(
            "--scope",
            help="Whose memories: here (default: this directory's project and the user's, as a hook here "
            "injects), all, user, project, unscoped, project:NAME; several separated by commas.",
        ),
    ] = "here",
    json_out: JsonOpt = False,
) -> None:
    """Print the memories most relevant to QUERY within a token budget (what hooks inject here)."""
    if budget is not None and budget < 1:
        err_console.print(f"[red]error:[/red] Invalid '--budget': expected a positive integer, got {budget}")
        raise typer.Exit(2)
    with _open() as memory:
        _here(memory)
        found = _run(lambda: memory.context(query, budget_tokens=budget, min_score=min_score, scope=scope))
    if json_out:
        _print_json({"success": True, **found.to_dict()})
    else:
        sys.stdout.write((found.text or "no relevant memories") + "\n")
