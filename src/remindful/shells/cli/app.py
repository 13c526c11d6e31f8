"""The ``remindful`` command line: a thin shell over MemoryManager.

Each command is about one manager call. remindful is imported inside the commands, so
``remindful --help`` loads neither chromadb nor onnxruntime. Errors are printed and exit non-zero:
1 for a remindful error, 2 for bad input.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from remindful.shells.cli.usage import Group

if TYPE_CHECKING:
    from remindful.api import MemoryManager

app = typer.Typer(
    name="remindful",
    cls=Group,
    help="Local-first long-term memory for AI agents.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console()
err_console = Console(stderr=True, soft_wrap=True)  # an error stays one line, however long

PathOpt = Annotated[
    str | None,
    typer.Option(
        "--path", "-p", metavar="DIR", help="Storage directory (default: MEMORY_STORAGE_PATH or the configured path)."
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
ScopeOpt = Annotated[
    str | None,
    typer.Option(
        "--scope",
        help="Whose memories: all (default), here (this directory's project and the user's), project (this "
        "directory's), user, unscoped, project:NAME; several separated by commas.",
    ),
]


ID_HELP = "The memory's id, or the start of it that `list` and `search` show."


class _State:
    path: str | None = None


@app.callback()
def _root(
    path: PathOpt = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log debug details to stderr.")] = False,
) -> None:
    _State.path = path
    import logging

    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    from remindful.shells.terminal import show_model_preparation

    show_model_preparation()  # on a terminal: the model's one-time preparation says it is under way


def _open(*, drain: bool = True) -> MemoryManager:
    """The store ``--path`` names. With ``drain`` (every command but ``doctor``, which must not
    write, and ``daemon``, which drains all along) what hooks and capture points spooled is stored
    first, so that a command sees it; a failure to is logged, and the command goes on to report
    what it finds. A command runs once: its search of a store it can score exactly from the
    catalog does not open the vector index (importing chromadb and loading the graph, which its
    exit then waited for: 2 s of a 4 s ``remindful search`` of a small store)."""
    from remindful.api import MemoryManager
    from remindful.config import load_settings

    settings = load_settings(_State.path)
    memory = MemoryManager(settings, exact_before_index=settings.search.exact_filter_max)
    if drain:
        import logging

        from remindful.errors import MemoryDisabledError

        try:
            memory.drain_spool()
        except MemoryDisabledError:
            pass  # the command says so
        except Exception as exc:  # e.g. a damaged catalog: the command reports it in its own words
            logging.getLogger("remindful").warning("spooled events not stored: %s", exc)
    return memory


def _here(memory: MemoryManager) -> None:
    """Make ``memory`` a client of the current directory's project (what it stores without a scope
    goes there; ``--scope project`` and ``here`` mean it), reading every memory unless told otherwise."""
    import os

    try:
        where = os.getcwd()
    except OSError:  # a directory removed under us: no project
        return
    _run(lambda: memory.work_in(where, reads="all"))


def _fail(exc: Exception) -> typer.Exit:
    return typer.Exit(_report(exc))


def _report(exc: Exception) -> int:
    """Print ``exc`` as a one-line error; its exit status: 2 for bad input (including settings), else 1.
    A missing memory or session names the command that finds one (not the API's names)."""
    from remindful.errors import ConfigError, NotFoundError, ValidationError

    if isinstance(exc, NotFoundError):
        how = "`remindful sessions` lists them" if exc.kind == "session" else "`remindful search TEXT` finds one"
        what = f"{exc.kind.capitalize()} not found: {exc.memory_id!r}"
        err_console.print(f"[red]error:[/red] {what}; {how}", highlight=False)
        return 1
    err_console.print(f"[red]error:[/red] {exc}", highlight=False)
    return 2 if isinstance(exc, ValidationError | ConfigError) else 1


def _run(fn: Any) -> Any:
    from remindful.errors import RemindfulError

    try:
        return fn()
    except RemindfulError as exc:
        raise _fail(exc) from None


def _json_arg(text: str | None, field: str) -> Any:
    if text is None:
        return None
    from remindful.engine.validation import parse_json
    from remindful.errors import ValidationError

    try:
        return parse_json(text, field)
    except ValidationError as exc:
        raise _fail(exc) from None


def _print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, indent=2, ensure_ascii=False, default=str) + "\n")


def _ok(result: Any) -> dict[str, Any]:
    """``--json`` of a manager's result (:mod:`remindful.model`): ``{"success": true, ...its JSON form}``."""
    return {"success": True, **result.to_dict()}


@app.command()
def store(
    content: Annotated[str, typer.Argument(help="The text to remember.")],
    type: Annotated[
        str, typer.Option("--type", "-t", help="screen, action, workflow, conversation, document, knowledge.")
    ] = "action",
    metadata: Annotated[str | None, typer.Option("--metadata", "-m", help="JSON object of metadata.")] = None,
    session: Annotated[str | None, typer.Option("--session", "-s", help="Session id (default: a new one).")] = None,
    timestamp: Annotated[str | None, typer.Option("--timestamp", help="ISO 8601 creation time.")] = None,
    source: Annotated[str, typer.Option("--source", help="Where it came from (manual, import, ...).")] = "manual",
    scope: Annotated[
        str | None,
        typer.Option(
            "--scope",
            help="user (every project sees it), project (this directory's) or project:NAME; default: this "
            "directory's project, or user for a preference or rule that holds everywhere.",
        ),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Store a memory and print its id."""
    meta = _json_arg(metadata, "metadata")
    with _open() as memory:
        _here(memory)
        memory_id = _run(lambda: memory.store(content, type, meta, session, timestamp, source, scope=scope))
        stored_in = _run(lambda: memory.get(memory_id)).scope
        # The close waits for the index anyway; a damaged catalog met meanwhile is reported here
        # (as by every other command), not left to a log line after the id.
        _run(memory.flush)
    if json_out:
        _print_json({"success": True, "memory_id": memory_id, "scope": stored_in})
    else:
        console.print(memory_id)  # alone: scripts read it (`remindful get ID` shows its scope)


@app.command()
def search(
    query: Annotated[str, typer.Argument(help="What to look for, in natural language or keywords.")],
    type: Annotated[list[str] | None, typer.Option("--type", "-t", help="Restrict to a type (repeatable).")] = None,
    limit: Annotated[int, typer.Option("--limit", "-n", help="Maximum results.")] = 10,
    filter: Annotated[
        str | None, typer.Option("--filter", "-f", help="Metadata filter, JSON: '{\"success\": true}'.")
    ] = None,
    session: Annotated[str | None, typer.Option("--session", "-s", help="Only this session.")] = None,
    since: Annotated[str | None, typer.Option("--since", help="Only memories created at/after (ISO 8601).")] = None,
    until: Annotated[str | None, typer.Option("--until", help="Only memories created at/before (ISO 8601).")] = None,
    min_score: Annotated[
        float | None,
        typer.Option("--min-score", help="Relevance floor 0-1 (default search.min_score; 0: every top hit)."),
    ] = None,
    scope: ScopeOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Hybrid semantic + keyword search; scores are calibrated relevances (0-1)."""
    filters = _json_arg(filter, "filter")
    with _open() as memory:
        _here(memory)
        hits = _run(
            lambda: memory.search(query, type or None, limit, filters, session, since, until, min_score, scope=scope)
        )
        named = [h.id for h in hits] + [h.superseded_by for h in hits if h.superseded_by]
        short = {} if json_out else _short_ids(memory, named)
    if json_out:
        _print_json({"success": True, "query": query, "count": len(hits), "memories": [h.to_dict() for h in hits]})
        return
    table = _table("score", "id", "type", "scope", "from", "content")
    for hit in hits:
        notes = (f" (+{hit.similar} similar)" if hit.similar else "") + (
            f" (superseded by {short[hit.superseded_by]})" if hit.superseded_by else ""
        )
        table.add_row(
            f"{hit.score:.3f}",
            short[hit.id],
            hit.type.value,
            _scope(hit.scope),
            _origin(hit.origin),
            _short(hit.content) + notes,
        )
    console.print(table if hits else "[dim]no relevant memories found[/dim]")


@app.command()
def get(
    memory_id: Annotated[str, typer.Argument(help=ID_HELP)],
    json_out: JsonOpt = False,
) -> None:
    """Show one memory."""
    with _open() as memory:
        found = _run(lambda: memory.get(memory.resolve_id(memory_id)))
    data = found.to_dict()
    if json_out:
        _print_json(data)
        return
    for key, value in data.items():
        shown = json.dumps(value, ensure_ascii=False) if isinstance(value, dict) else value
        if key == "origin":
            shown = f"{value} ({_origin(value)})"
        console.print(f"[bold]{key}[/bold]: {shown}", highlight=False)


@app.command()
def delete(memory_id: Annotated[str, typer.Argument(help=ID_HELP)]) -> None:
    """Delete one memory."""
    with _open() as memory:
        full = _run(lambda: memory.resolve_id(memory_id))
        deleted = _run(lambda: memory.delete(full))
    if not deleted:
        err_console.print(f"[red]error:[/red] Memory not found: {memory_id!r}. Use `remindful search` to find it.")
        raise typer.Exit(1)
    console.print(f"deleted {full}")


@app.command("list")
def list_(
    type: Annotated[str | None, typer.Option("--type", "-t", help="Only this type.")] = None,
    session: Annotated[str | None, typer.Option("--session", "-s", help="Only this session.")] = None,
    limit: Annotated[int, typer.Option("--limit", "-n", help="Maximum rows.")] = 20,
    offset: Annotated[int, typer.Option("--offset", help="Rows to skip.")] = 0,
    source: Annotated[str | None, typer.Option("--source", help="Only this source (hook, md_file, ...).")] = None,
    since: Annotated[str | None, typer.Option("--since", help="Only memories created at/after (ISO 8601).")] = None,
    until: Annotated[str | None, typer.Option("--until", help="Only memories created at/before (ISO 8601).")] = None,
    scope: ScopeOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """List memories, newest first."""
    with _open() as memory:
        _here(memory)
        found = _run(
            lambda: memory.list(type, session, limit, offset, source=source, since=since, until=until, scope=scope)
        )
        short = {} if json_out else _short_ids(memory, [m.id for m in found])
    if json_out:
        _print_json([m.to_dict() for m in found])
        return
    table = _table("created", "id", "type", "scope", "from", "content")
    for m in found:
        created = m.created_at.strftime("%Y-%m-%d %H:%M")
        table.add_row(created, short[m.id], m.type.value, _scope(m.scope), _origin(m.origin), _short(m.content))
    console.print(table if found else "[dim]no memories[/dim]")


@app.command()
def stats(
    scope: Annotated[
        str | None,
        typer.Option("--scope", help="Also count the memories of this scope by type (as search's --scope)."),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Counts per collection and per scope, storage use, latencies."""
    with _open() as memory:
        if scope is not None:
            _here(memory)
        data = _run(lambda: memory.stats(scope=scope)).to_dict()
    if json_out:
        _print_json(data)
        return
    for warning in data.get("warnings", []):
        err_console.print(f"[yellow]warning:[/yellow] {warning}", highlight=False)
    table = Table("collection", "count", "quota", "used %", box=None)
    for name, row in data["collections"].items():
        used = row.get("usage_percent")
        table.add_row(name, str(row["count"]), str(row["quota"]), "?" if used is None else f"{used:.1f}")
    console.print(table)
    storage = data["storage"]
    console.print(
        f"total {data['total_memories']} memories, {storage['total_size_mb']:.2f} MB of "
        f"{storage['quota_limit_mb']:g} MB ({storage['usage_percent']:.1f}%), {data['sessions']} sessions"
    )
    length = data.get("session_length") or {}
    if length.get("avg_memories") is not None:
        console.print(f"average session: {length['avg_memories']:g} memories, {length['avg_minutes']:g} minutes")
    for kind in ("actions", "screens"):
        top = (data.get("activity") or {}).get(kind) or []
        if top:
            console.print(f"most frequent {kind}: " + ", ".join(f"{t['name']} x{t['count']}" for t in top[:5]))
    injected = data.get("injection") or {}
    if injected.get("injections"):
        projects = ", ".join(f"{p['project']} {p['tokens']}" for p in injected["by_project"][:3])
        console.print(
            f"context injected: {injected['injections']} blocks, {injected['tokens']} tokens ({projects})",
            highlight=False,
        )
    if data.get("scopes"):
        console.print("by scope: " + ", ".join(f"{_scope(s['scope'], s['name'])} {s['count']}" for s in data["scopes"]))
    if data.get("scope"):
        chosen = data["scope"]
        by_type = ", ".join(f"{t} {n}" for t, n in sorted(chosen["by_type"].items())) or "none"
        console.print(f"scope {chosen['selection']}: {chosen['memories']} memories ({by_type})", highlight=False)


scopes_app = typer.Typer(
    cls=Group,
    help="The scopes that hold memories: each project (name, directory), the user's, the unscoped; "
    "`scopes bind DIR PROJECT` puts a directory into a project.",
)
app.add_typer(scopes_app, name="scopes")


@scopes_app.callback(invoke_without_command=True)
def scopes(
    ctx: typer.Context,
    explain: Annotated[
        str | None,
        typer.Option("--explain", help="Say whether this text would be stored at user level, and by which rule."),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """The scopes that hold memories: each project (name, directory), the user's, the unscoped."""
    if ctx.invoked_subcommand is not None:
        return
    with _open() as memory:
        _here(memory)
        if explain is not None:
            rule = _run(lambda: memory.user_level(explain))
            project = memory.project
            where = f"project:{project.key}" if project is not None else "unscoped"
            if json_out:
                _print_json({"success": True, "scope": "user" if rule else where, "rule": rule})
            else:
                console.print(f"user ({rule})" if rule else f"{where} (no user-level rule applies)", highlight=False)
            return
        found = _run(memory.scopes)
        here = memory.project
        refused = memory.refused_markers()
    if json_out:
        _print_json(
            {
                "success": True,
                "here": here.to_dict() if here else None,
                "scopes": [u.to_dict() for u in found],
                "refused_markers": [{"directory": d, "project": k, "bound_to": r} for d, (k, r) in refused.items()],
            }
        )
        return
    table = Table("scope", "memories", "project", "directory", box=None)
    for usage in found:
        mark = " (here)" if here is not None and usage.scope == here.scope else ""
        table.add_row(usage.scope + mark, str(usage.count), usage.name or "", usage.root or "")
    console.print(table if found else "[dim]no memories[/dim]")
    for directory, (key, root) in refused.items():
        err_console.print(_refusal(directory, key, root), highlight=False, markup=False)


def _refusal(directory: str, key: str, root: str) -> str:
    where = f"is bound to {root}" if root else "is a place's key recorded for no directory"
    return (
        f"the .remindful marker in {directory} names project {key}, which {where}: not honoured "
        f"(if the project is yours: remindful scopes bind {directory} {key})"
    )


@scopes_app.command("bind")
def scopes_bind(
    directory: Annotated[Path, typer.Argument(help="The directory (and what lies under it).")],
    project: Annotated[str, typer.Argument(help="A known project's key or name, or a new project's name.")],
    json_out: JsonOpt = False,
) -> None:
    """Put a directory into a project, even one bound to another directory (a .remindful marker cannot)."""
    with _open() as memory:
        found = _run(lambda: memory.bind_project(directory, project))
    if json_out:
        _print_json({"success": True, "project": found.to_dict()})
    else:
        console.print(f"bound {directory.resolve()} to {found.scope} ({found.name})", highlight=False)


@scopes_app.command("unbind")
def scopes_unbind(
    directory: Annotated[Path, typer.Argument(help="A directory bound with `scopes bind`.")],
    json_out: JsonOpt = False,
) -> None:
    """Remove a directory's binding (its project is found again from its marker, repository or place)."""
    with _open() as memory:
        removed = _run(lambda: memory.unbind_project(directory))
    if json_out:
        _print_json({"success": True, "removed": removed})
    else:
        console.print(f"unbound {directory.resolve()}" if removed else f"{directory.resolve()} was not bound")


@app.command()
def move(
    memory_id: Annotated[str, typer.Argument(help=ID_HELP)],
    scope: Annotated[str, typer.Argument(help="user, project (this directory's) or project:NAME.")],
    json_out: JsonOpt = False,
) -> None:
    """Move a memory to another scope (user: every project sees it)."""
    with _open() as memory:
        _here(memory)
        moved = _run(lambda: memory.update(memory.resolve_id(memory_id), scope=scope))
    if json_out:
        _print_json({"success": True, "memory": moved.to_dict()})
    else:
        console.print(f"moved {moved.id} to {moved.scope}", highlight=False)


@app.command("move-all")
def move_all(
    source: Annotated[str, typer.Argument(help="The scope to empty: unscoped, user, project:NAME (or several, a,b).")],
    scope: Annotated[str, typer.Argument(help="user, project (this directory's) or project:NAME.")],
    json_out: JsonOpt = False,
) -> None:
    """Move every memory of one scope to another (e.g. after the upgrade: unscoped -> project)."""
    with _open() as memory:
        _here(memory)
        moved = _run(lambda: memory.move_scope(source, scope))
    if json_out:
        _print_json({"success": True, "moved": moved})
    else:
        console.print(f"moved {moved} memor{'y' if moved == 1 else 'ies'}", highlight=False)


@app.command()
def reindex(
    reset: Annotated[
        bool, typer.Option("--reset", help="Back up and remove the index files first (recovery from corruption).")
    ] = False,
) -> None:
    """Rebuild the vector index from the catalog."""
    from rich.progress import Progress

    with _open() as memory, Progress(console=err_console, transient=True) as progress:
        total = _run(lambda: memory.stats().total_memories)
        task = progress.add_task("reindexing", total=total)
        counts = _run(lambda: memory.reindex(reset=reset, progress=lambda n: progress.advance(task, n)))
    console.print(
        f"reindexed {sum(counts.values())} memories: " + ", ".join(f"{k} {v}" for k, v in counts.items() if v)
    )


@app.command()
def config(
    defaults: Annotated[
        bool, typer.Option("--defaults", help="Show the built-in defaults, not the effective values.")
    ] = False,
    json_out: JsonOpt = False,
) -> None:
    """Show the effective configuration (file, environment and defaults merged)."""
    from remindful.config import Settings, load_settings
    from remindful.errors import RemindfulError

    try:
        settings = Settings.model_construct() if defaults else load_settings(_State.path)
    except RemindfulError as exc:
        raise _fail(exc) from None
    data = settings.model_dump(mode="json")
    if data.get("catalog", {}).get("url"):  # a password in it is never shown
        from remindful.engine.postgres.url import shown_url

        data["catalog"]["url"] = shown_url(data["catalog"]["url"])
    if json_out:
        _print_json(data)
        return
    import yaml

    console.print(yaml.safe_dump({"memory": data}, sort_keys=False), highlight=False)


def _origin(origin: str) -> str:
    """Whose words a memory holds, as the tables show it: ``you said``, ``tool Bash's output``..."""
    from remindful.model import origin_label

    return origin_label(origin)


def _scope(scope: str | None, name: str | None = None) -> str:
    """A scope as the tables show it: ``user``, ``unscoped``, or the project's name (or key)."""
    if scope is None or scope == "unscoped":
        return "unscoped"
    if name:
        return f"{name} ({scope})"
    return scope.removeprefix("project:")


def _short_ids(memory: MemoryManager, ids: list[str], kind: str = "memory") -> dict[str, str]:
    """``{id: its short unique prefix}`` for a table (``get``, ``delete``… take it back)."""
    return dict(_run(lambda: memory.short_ids(ids, kind=kind)))


def _table(*columns: str) -> Table:
    """A table whose ``id`` / ``session`` column is never cut or wrapped (a command needs the whole
    of what it shows), and whose ``content`` / ``summary`` column gives way instead."""
    table = Table(box=None)
    for name in columns:
        if name in ("id", "session"):
            table.add_column(name, no_wrap=True, overflow="fold", min_width=8)
        elif name in ("content", "summary"):
            table.add_column(name, ratio=1, overflow="fold")
        elif name in ("score", "type", "memories"):
            table.add_column(name, no_wrap=True)
        else:  # a date or a scope wraps on a narrow terminal
            table.add_column(name, overflow="fold")
    return table


def _short(text: str, width: int = 90) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def main() -> None:
    try:
        app()
    except Exception as exc:
        # Errors raised outside a command's own handling, such as invalid settings met when a
        # command opens the store: a one-line error, not a traceback.
        import logging

        from remindful.errors import RemindfulError

        if isinstance(exc, RemindfulError):
            sys.exit(_report(exc))
        # A bug of ours, not the user's input: still one line (the traceback with --verbose).
        logging.getLogger("remindful.cli").debug("unexpected error", exc_info=exc)
        err_console.print(
            f"[red]error:[/red] unexpected {type(exc).__name__}: {str(exc)[:300]} (run with --verbose for details)",
            highlight=False,
        )
        sys.exit(1)


if __name__ == "__main__":
    main()
