"""Lifecycle commands: sessions, delete-session, cleanup, dedup, export, import, backup, restore,
clear-all. Each is one MemoryManager call; remindful is imported inside the commands.

Destructive commands ask for confirmation on a terminal (``--yes`` skips the question) and take a
backup first. Long runs show a rich progress bar or spinner on stderr.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Annotated

import typer

from remindful.shells.cli.app import (
    JsonOpt,
    _ok,
    _open,
    _print_json,
    _run,
    _short_ids,
    _table,
    app,
    console,
    err_console,
)

YesOpt = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")]


@contextmanager
def _progress(label: str, total: int | None) -> Iterator[Callable[[int], None]]:
    from rich.progress import Progress

    with Progress(console=err_console, transient=True) as bar:
        task = bar.add_task(label, total=total)
        yield lambda n: bar.advance(task, n)


def _confirm(question: str, yes: bool) -> None:
    if not yes and not typer.confirm(question, default=False, err=True):
        err_console.print("aborted: nothing was changed")
        raise typer.Exit(1)


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in counts.items() if v) or "nothing"


@app.command()
def sessions(json_out: JsonOpt = False) -> None:
    """List sessions with start/end, memory count and their most common actions/screens/tools."""
    with _open() as memory:
        found = _run(memory.list_sessions)
        short = _short_ids(memory, [s.id for s in found], "session") if not json_out else {}
    if json_out:
        _print_json({"success": True, "count": len(found), "sessions": [s.to_dict() for s in found]})
        return
    table = _table("session", "started", "ended", "memories", "summary")
    for s in found:
        started, ended = (t.isoformat()[:16] if t else "" for t in (s.started_at, s.ended_at))
        table.add_row(short[s.id], started, ended, str(s.memory_count), s.text)
    console.print(table if found else "[dim]no sessions[/dim]")


@app.command("delete-session")
def delete_session(
    session_id: Annotated[
        str, typer.Argument(help="The session whose memories to delete, or the start of its id (`remindful sessions`).")
    ],
    yes: YesOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Delete every memory of one session (a backup is taken first)."""
    with _open() as memory:
        session_id = _run(lambda: memory.resolve_id(session_id, kind="session"))
        _confirm(f"Delete every memory of session {session_id}?", yes)
        result = _run(lambda: memory.delete_session(session_id, confirm=True))
    if json_out:
        _print_json(_ok(result))
        return
    console.print(f"deleted {result.deleted} memories of {session_id}; backup: {result.backup_path}")


@app.command()
def cleanup(
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only report what would be deleted.")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Apply the retention policy now (bookmarked memories are never deleted)."""
    with _open() as memory, err_console.status("applying retention…"):
        report = _run(lambda: memory.cleanup(dry_run=dry_run))
    if json_out:
        _print_json(_ok(report))
        return
    verb = "would delete" if dry_run else "deleted"
    reasons = ", ".join(f"{k} {v}" for k, v in sorted(report.by_reason.items())) or "nothing to delete"
    console.print(f"{verb} {report.deleted} memories ({reasons}), freeing {report.freed_mb:.2f} MB")


@app.command()
def dedup(
    threshold: Annotated[float, typer.Option("--threshold", help="Cosine similarity counted as duplicate.")] = 0.95,
    type: Annotated[list[str] | None, typer.Option("--type", "-t", help="Only this type (repeatable).")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only report the clusters.")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Collapse near-duplicate memories into their most important member."""
    with _open() as memory, err_console.status("finding duplicates…"):
        report = _run(lambda: memory.dedup(threshold=threshold, types=type or None, dry_run=dry_run))
    if json_out:
        _print_json(_ok(report))
        return
    verb = "would delete" if dry_run else "deleted"
    console.print(f"{report.clusters} clusters; {verb} {report.deleted} near-duplicates")


@app.command()
def export(
    output: Annotated[
        str | None, typer.Argument(help="JSON file to write (default: <storage>/exports/memories_<time>.json).")
    ] = None,
    format: Annotated[str, typer.Option("--format", help="Only json.")] = "json",
    force: Annotated[bool, typer.Option("--force", help="Replace OUTPUT if it exists.")] = False,
    shared: Annotated[
        bool, typer.Option("--shared", help="From the PostgreSQL catalog of catalog.url, not the local one.")
    ] = False,
    json_out: JsonOpt = False,
) -> None:
    """Export every memory with content, metadata and embedding to JSON (never over an existing
    file without --force, never into a directory that does not exist)."""
    with _open() as memory:
        total = None if shared else _run(lambda: memory.stats().total_memories)
        with _progress("exporting", total) as advance:
            result = _run(
                lambda: memory.export(
                    format=format, output_path=output, overwrite=force, progress=advance, shared=shared
                )
            )
    if json_out:
        _print_json(_ok(result))
        return
    console.print(f"exported {result.count} memories to {result.path}")


@app.command("import")
def import_(
    path: Annotated[str, typer.Argument(help="A JSON file written by `remindful export`.")],
    json_out: JsonOpt = False,
) -> None:
    """Import an export exactly (ids, times, embeddings); existing memories are skipped."""
    with _open() as memory, _progress("importing", None) as advance:
        result = _run(lambda: memory.import_memories(path, progress=advance))
    if json_out:
        _print_json(_ok(result))
        return
    console.print(f"imported {result.imported} memories, skipped {result.skipped} already present")


@app.command()
def backup(
    name: Annotated[str | None, typer.Argument(help="Optional label, e.g. before_experiment.")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Back up catalog, vector index, attachments and config to <storage>/backups/."""
    with _open() as memory, err_console.status("backing up…"):
        result = _run(lambda: memory.backup(name))
    if json_out:
        _print_json(_ok(result))
        return
    console.print(f"backup of {result.total} memories ({_counts(result.counts)}): {result.path}")


@app.command()
def restore(
    path: Annotated[str, typer.Argument(help="A backup_*.tar.gz from `remindful backup`.")],
    yes: YesOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Replace all current memories with a validated backup (the current data is backed up first)."""
    _confirm(f"Replace ALL current memories with {path}?", yes)
    with _open() as memory, _progress("restoring", None) as advance:
        result = _run(lambda: memory.restore(path, confirm=True, progress=advance))
    if json_out:
        _print_json(_ok(result))
        return
    console.print(f"restored {result.total} memories ({_counts(result.counts)})")
    console.print(f"the previous data was backed up to {result.backup_path}")


@app.command("clear-all")
def clear_all(yes: YesOpt = False, json_out: JsonOpt = False) -> None:
    """Delete every memory in every collection (a backup is taken first)."""
    _confirm("Delete EVERY memory in every collection?", yes)
    with _open() as memory, err_console.status("backing up and clearing…"):
        result = _run(lambda: memory.clear_all(confirm=True))
    if json_out:
        _print_json(_ok(result))
        return
    console.print(f"deleted {result.deleted} memories; backup: {result.backup_path}")


@app.command()
def doctor(json_out: JsonOpt = False) -> None:
    """Check the catalog, the index files, the spool and permissions; say the way out for each problem."""
    with _open(drain=False) as memory, err_console.status("checking the catalog and the index files…"):
        report = _run(memory.doctor)
    if json_out:
        _print_json(report.to_dict())
    elif report.healthy:
        parts = ", ".join(c.part for c in report.checks)
        console.print(f"healthy: {parts} ({report.storage_path})", soft_wrap=True, highlight=False)
    else:
        for check in report.checks:
            if not check.ok:
                err_console.print(f"[red]{check.part}:[/red] {check.detail}. {check.fix}", highlight=False)
    if not report.healthy:
        raise typer.Exit(1)
