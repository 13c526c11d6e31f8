"""Capture commands: ``hook``, ``install-hooks``, ``daemon``, ``watch``, ``context``.

``remindful hook EVENT`` is normally dispatched before this module loads (see
:mod:`remindful.shells.entry`); the command here serves ``--help`` and in-process callers.
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


@app.command(context_settings={"ignore_unknown_options": True})
def hook(
    event: Annotated[
        str, typer.Argument(help="SessionStart, UserPromptSubmit, PreToolUse, PostToolUse, Stop or SessionEnd.")
    ],
    no_context: Annotated[
        bool, typer.Option("--no-context", help="Do not print memories for SessionStart/UserPromptSubmit.")
    ] = False,
) -> None:
    """Capture one coding-agent hook event (Claude Code's hook JSON on stdin).

    Spools the event in one short transaction and exits 0 (the daemon, or the next remindful
    command that opens the store, turns it into memories). SessionStart and UserPromptSubmit print relevant
    memories as hookSpecificOutput.additionalContext. Install with `remindful install-hooks`.
    """
    from remindful.shells.hook import run

    argv = [*(["--path", _State.path] if _State.path else []), "hook", event]
    raise typer.Exit(run([*argv, "--no-context"] if no_context else argv))


@app.command("install-hooks")
def install_hooks(
    project: Annotated[
        str | None, typer.Option("--project", help="Project directory (writes DIR/.claude/settings.json).")
    ] = None,
    user: Annotated[bool, typer.Option("--user", help="Install in ~/.claude/settings.json for every project.")] = False,
    uninstall: Annotated[bool, typer.Option("--uninstall", help="Remove remindful's hooks (only ours).")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Add remindful's hooks to Claude Code's settings, keeping every other hook."""
    from remindful.services.ingest.install import install, settings_file

    result = _run(lambda: install(settings_file(project, user), storage=_State.path, uninstall=uninstall))
    if json_out:
        _print_json({"success": True, **result})
    else:
        console.print(f"{result['action']} remindful hooks in {result['path']}", highlight=False)


@app.command()
def daemon(
    watch: Annotated[
        list[str] | None, typer.Option("--watch", "-w", help="Also watch this directory's .md files (repeatable).")
    ] = None,
) -> None:
    """Run the capture daemon: drain hook events, watch Markdown dirs, run retention, serve context."""
    from remindful.daemon import run_daemon

    with _open(drain=False) as memory:  # its drain loop stores the spool
        err_console.print(f"remindful daemon for {memory.path} (Ctrl-C to stop)", highlight=False)
        _run(lambda: run_daemon(memory, watch_dirs=watch or []))


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
