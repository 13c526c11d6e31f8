"""Commands of a store shared by a team or several machines: ``migrate`` (a local store into
PostgreSQL and a Chroma server) and ``team add/revoke/list`` (people and their tokens).
remindful is imported inside the commands."""

from __future__ import annotations

from typing import Annotated

import typer

from remindful.shells.cli.app import JsonOpt, _open, _print_json, _run, app, console, err_console
from remindful.shells.cli.usage import Group


@app.command()
def migrate(
    to: Annotated[
        str | None,
        typer.Option(
            "--to",
            help="The empty PostgreSQL database: postgresql://USER@HOST:PORT/DB (default: catalog.url). "
            "Give the password in PGPASSWORD or ~/.pgpass, never here: a command line shows in ps.",
        ),
    ] = None,
    chroma: Annotated[
        str | None,
        typer.Option(
            "--chroma", help="The Chroma server for the vectors: http://HOST:PORT (default: the configured one)."
        ),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Copy this local store (memories, vectors, sessions, tombstones, ledger, projects) to PostgreSQL
    and a Chroma server, and verify the counts."""
    from urllib.parse import urlsplit

    from rich.progress import Progress

    if to is not None:
        try:
            has_password = urlsplit(to).password is not None
        except ValueError:
            has_password = False
        if has_password:
            err_console.print(
                "--to: the URL holds a password, which anyone on this machine can read in ps; "
                "give it in PGPASSWORD or ~/.pgpass (or catalog.url in the config file) and leave it out of --to",
                highlight=False,
            )
            raise typer.Exit(2)
    with _open() as memory, Progress(console=err_console, transient=True) as bar:
        task = bar.add_task("copying", total=None)

        def progress(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        report = _run(lambda: memory.migrate(to, chroma, progress=progress))
    if json_out:
        _print_json({"success": True, **report.to_dict()})
        return
    console.print(f"copied to {report.target}, counts verified:", highlight=False)
    for part, (source, _target) in report.counts.items():
        console.print(f"  {part}: {source}", highlight=False)
    for name, n in report.collections.items():
        console.print(f"  {name}: {n} vectors on the Chroma server", highlight=False)


team = typer.Typer(cls=Group, help="People of the team store (catalog.url): tokens issued once, revoked at once.")
app.add_typer(team, name="team")


@team.command("add")
def team_add(name: Annotated[str, typer.Argument(help="The person's name (letters, digits, . _ -).")]) -> None:
    """Add NAME and print their token, once: only its hash is kept."""
    with _open() as memory:
        token = _run(lambda: memory.team_add(name))
    console.print(f"{name} added; their token (shown once, give it to them privately):", highlight=False)
    console.print(token, highlight=False, soft_wrap=True)


@team.command("revoke")
def team_revoke(name: Annotated[str, typer.Argument(help="The person whose token to revoke.")]) -> None:
    """Revoke NAME's token: from now on it reads and writes nothing."""
    with _open() as memory:
        revoked = _run(lambda: memory.team_revoke(name))
    if not revoked:
        err_console.print(f"{name} has no valid token", highlight=False)
        raise typer.Exit(1)
    console.print(f"{name}'s token is revoked", highlight=False)


@team.command("list")
def team_list(json_out: JsonOpt = False) -> None:
    """Everyone the team store knows, and whose token is revoked."""
    with _open() as memory:
        people = _run(memory.team_people)
    if json_out:
        _print_json([{"name": n, "added_at": a, "revoked_at": r} for n, a, r in people])
        return
    for name, _added, revoked in people:
        console.print(f"{name}{' (revoked)' if revoked is not None else ''}", highlight=False)
