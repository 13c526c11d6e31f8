"""Learning commands: capture from turns, corrections, setting changes and workflows; confirm a
helpful result; suggestions and failure warnings; recurring patterns.

Each command is one MemoryManager call; remindful is imported inside the commands (through
``_open``), so ``remindful --help`` stays light.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from remindful.shells.cli.app import (
    JsonOpt,
    _here,
    _json_arg,
    _ok,
    _open,
    _print_json,
    _run,
    _short,
    app,
    console,
    err_console,
)


def _show(memories: list[Any], json_out: bool, empty: str) -> None:
    if json_out:
        _print_json({"success": True, "count": len(memories), "memories": [m.to_dict() for m in memories]})
        return
    if not memories:
        console.print(f"[dim]{empty}[/dim]")
    for m in memories:
        console.print(f"{m.id}  [{m.memory_class.value}] {_short(m.content, 100)}", highlight=False)


@app.command("capture-turn")
def capture_turn(
    user_message: Annotated[str, typer.Argument(help="What the user said.")],
    response: Annotated[str, typer.Option("--response", "-r", help="What the assistant answered.")] = "",
    conversation: Annotated[str, typer.Option("--conversation", "-c", help="Conversation id.")] = "default",
    user_name: Annotated[str | None, typer.Option("--user-name", help='Name used instead of "I".')] = None,
    project: Annotated[str | None, typer.Option("--project", help="Project id.")] = None,
    timestamp: Annotated[str | None, typer.Option("--timestamp", help="ISO 8601 time of the turn.")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Learn what a conversation turn states (up to 3 memories of confidence ≥ 0.7) into this directory's project:
    the user's words as theirs, the assistant's as its observations."""
    turn = {
        "user_message": user_message,
        "assistant_response": response,
        "conversation_id": conversation,
        "user_name": user_name,
        "project_id": project,
        "timestamp": timestamp,
    }
    with _open() as memory:
        _here(memory)  # what is learned goes to this directory's project, as `remindful store` does
        found = _run(lambda: memory.capture_conversation(turn))
    _show(found, json_out, "nothing worth remembering in this turn")


@app.command("capture-correction")
def capture_correction(
    original: Annotated[str, typer.Argument(help="What the agent produced.")],
    corrected: Annotated[str, typer.Argument(help="What the user corrected it to.")],
    context: Annotated[str, typer.Option("--context", help="What it was about.")] = "",
    json_out: JsonOpt = False,
) -> None:
    """Store the rule a correction teaches (a reinforced knowledge memory)."""
    with _open() as memory:
        _here(memory)
        found = _run(lambda: memory.capture_correction(original, corrected, context))
    _show([found], json_out, "")


@app.command("capture-config")
def capture_config(
    key: Annotated[str, typer.Argument(help='The setting, e.g. "theme".')],
    new: Annotated[str, typer.Argument(help="Its new value (JSON, or plain text).")],
    old: Annotated[str | None, typer.Option("--old", help="Its previous value (JSON, or plain text).")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Remember the preference a setting change expresses ("User prefers dark mode")."""

    def value(text: str | None) -> Any:
        if text is None:
            return None
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            return text  # plain words: "dark"
        except (ValueError, RecursionError):  # nested too deeply, an integer of thousands of digits
            return text

    with _open() as memory:
        found = _run(lambda: memory.capture_config_change(key, value(old), value(new)))
    _show([found] if found else [], json_out, "not captured")


@app.command("capture-workflow")
def capture_workflow(
    actions_file: Annotated[
        str, typer.Argument(help='JSON file (or "-" for stdin): a list of {action_type, description, timestamp}.')
    ],
    goal: Annotated[str | None, typer.Option("--goal", help="What the actions achieve.")] = None,
    name: Annotated[str | None, typer.Option("--name", help="Workflow name.")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Learn a procedure from ≥ 3 related actions within 30 minutes."""
    try:
        text = sys.stdin.read() if actions_file == "-" else Path(actions_file).read_text(encoding="utf-8")
    except OSError as exc:
        err_console.print(f"[red]error:[/red] Invalid 'actions_file': cannot read it ({exc})")
        raise typer.Exit(2) from None
    actions = _json_arg(text, "actions_file")
    with _open() as memory:
        found = _run(lambda: memory.capture_workflow(actions, goal=goal, name=name))
    _show([found] if found else [], json_out, "no workflow: too few, unrelated or spread-out actions")


@app.command("workflow-from-session")
def workflow_from_session(
    session_id: Annotated[str, typer.Argument(help="The session whose actions form the workflow.")],
    name: Annotated[str, typer.Argument(help='Workflow name, e.g. "google_search_workflow".')],
    json_out: JsonOpt = False,
) -> None:
    """Build a reusable workflow from a session's successful actions."""
    with _open() as memory:
        found = _run(lambda: memory.create_workflow_from_session(session_id, name))
    _show([found], json_out, "")


@app.command()
def confirm(
    query: Annotated[str, typer.Argument(help="The search query the result answered.")],
    memory_id: Annotated[str, typer.Argument(help="The id of the result that helped.")],
    json_out: JsonOpt = False,
) -> None:
    """Reinforce a helpful search result so it ranks higher next time."""
    with _open() as memory:
        found = _run(lambda: memory.confirm(query, memory_id))
    if json_out:
        _print_json({"success": True, "memory": found.to_dict()})
    else:
        console.print(f"reinforced {found.id}: importance {found.importance:.2f}, accessed {found.access_count} times")


@app.command()
def suggest(
    context: Annotated[str, typer.Argument(help="The current situation or intended action.")],
    action: Annotated[str | None, typer.Option("--action", help='JSON, e.g. \'{"action": "click"}\'.')] = None,
    limit: Annotated[int, typer.Option("--limit", "-n", help="Most suggestions.")] = 3,
    json_out: JsonOpt = False,
) -> None:
    """Similar past workflows to replay, and warnings about actions that failed before."""
    parsed = _json_arg(action, "action")
    with _open() as memory:
        result = _run(lambda: memory.suggest(context, action=parsed, limit=limit))
    if json_out:
        _print_json(_ok(result))
        return
    for warning in result.warnings:
        console.print(f"[yellow]warning:[/yellow] {warning.message}", highlight=False)
        for alt in warning.alternatives:
            console.print(f"  instead: {alt.content} ({alt.memory_id}, {alt.date})", highlight=False)
    for item in result.suggestions:
        console.print(f"{item.message}  [{item.memory_id}]", highlight=False)
    if not result.warnings and not result.suggestions:
        console.print("[dim]no suggestions[/dim]")


@app.command()
def patterns(
    type: Annotated[str, typer.Option("--type", "-t", help="action, screen or workflow.")] = "action",
    metric: Annotated[
        str | None, typer.Option("--metric", help="success_rate, frequency or sequences (default: all).")
    ] = None,
    min_support: Annotated[int, typer.Option("--min-support", help="Sessions a sequence must recur in.")] = 2,
    days: Annotated[float | None, typer.Option("--days", help="Only the last N days.")] = None,
    store: Annotated[bool, typer.Option("--store", help="Save recurring sequences as workflow memories.")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Recurring action sequences across sessions, and success rates per kind of action."""
    with _open() as memory:
        report = _run(
            lambda: memory.analyze_patterns(type=type, metric=metric, min_support=min_support, days=days, store=store)
        )
    if json_out:
        _print_json(_ok(report))
        return
    console.print(f"analyzed {report.analyzed} {type} memories in {report.sessions} sessions")
    for p in (report.patterns or [])[:10]:
        console.print(f"- {p['sessions']} sessions, confidence {p['confidence']:.2f}: " + " → ".join(p["steps"]))
    for line in report.insights or []:
        console.print(f"* {line}", highlight=False)
