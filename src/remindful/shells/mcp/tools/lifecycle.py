"""Lifecycle tools: sessions, retention and dedup, export/import, backup/restore, clear-all.

Each tool is one :class:`~remindful.api.MemoryManager` call answering ``{"success": true, ...}``;
a failure is a tool error (:mod:`remindful.shells.mcp.tools.common`). The destructive ones (delete
a session, restore, clear everything) ask the user through MCP elicitation when the client
supports it and otherwise need ``confirm=true`` (:mod:`remindful.shells.mcp.tools.confirm`); each
takes a backup first. Disabled memory is reported before anyone is asked to confirm.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

from mcp.server.mcpserver import Context, Elicit, Resolve
from pydantic import Field

from remindful.errors import NotFoundError, RemindfulError, ValidationError
from remindful.services.access import tool_path
from remindful.shells.mcp.tools.common import (
    DESTRUCTIVE,
    READ_ONLY,
    WRITE,
    GetManager,
    MemoryTypeName,
    ok,
    resumed_sessions,
    tool,
    tool_error,
)
from remindful.shells.mcp.tools.confirm import (
    Approval,
    Confirmation,
    approved,
    ask_to_confirm,
    confirmation,
    not_confirmed,
)

MAX_IDS = 100
ToolFn = TypeVar("ToolFn", bound=Callable[..., Any])


def approval_resolved_by(resolver: Callable[..., Any]) -> Callable[[ToolFn], ToolFn]:
    """Annotate a tool's ``approval`` parameter as ``Annotated[Approval, Resolve(resolver)]``, as
    an object: a resolver made inside ``register`` (it needs the manager) is not a name the SDK
    could evaluate from this module's postponed (string) annotations."""

    def annotate(fn: ToolFn) -> ToolFn:
        fn.__annotations__["approval"] = Annotated[Approval, Resolve(resolver)]
        return fn

    return annotate


def checked(check: Callable[[str], Any], value: str) -> None:
    """``check(value)``, a remindful error raised as the tool error (a resolver runs outside the
    tool's own translation of errors)."""
    try:
        check(value)
    except RemindfulError as exc:
        raise tool_error(exc) from None


ASK_DELETE_SESSION = "Delete every memory of this session? A backup is taken first."
ASK_RESTORE = "Replace ALL current memories with the backup? The current data is backed up first."
CONFIRM_CLEAR = confirmation("Delete EVERY memory in every collection? A backup is taken first.")

Confirm = Annotated[bool, Field(description="Set true to go ahead without being asked (the user agreed).")]
Path_ = Annotated[str, Field(description="A file path on the machine running the memory server.")]


def register(mcp: Any, get_manager: GetManager) -> None:
    """Add the lifecycle tools to the MCPServer ``mcp``."""
    resumed = resumed_sessions(mcp)

    @tool(mcp, READ_ONLY)
    def memory_list_sessions(
        limit: Annotated[int, Field(ge=1, le=1000, description="Maximum sessions, newest first.")] = 50,
        *,
        ctx: Context,
    ) -> dict[str, Any]:
        """List sessions newest first: id, start/end time, memory count and a summary of the most
        common actions, screens and tools. Pass an id to memory_resume_session to continue it."""
        m = get_manager()
        found = m.list_sessions(resumed_session=resumed.of(ctx))
        shown = [s.to_dict() for s in found[:limit]]
        return {"success": True, "count": len(found), "current_session": m.session_id, "sessions": shown}

    @tool(mcp, WRITE)
    def memory_resume_session(
        session_id: Annotated[str, Field(description="A session id from memory_list_sessions.")],
        *,
        ctx: Context,
    ) -> dict[str, Any]:
        """Continue where a previous session left off: from now on, your searches rank that
        session's memories higher (until you resume another session). Returns its memory count."""
        count = get_manager().session_size(session_id)
        resumed.resume(ctx, session_id)
        return {"success": True, "session_id": session_id, "memory_count": count}

    # The destructive tools below say "not found" before the user is asked to confirm: their
    # resolvers (which the SDK runs before the tool, asking the user there) check first.

    def known_session(session_id: str) -> None:
        m = get_manager()
        if not m.list(session_id=session_id, limit=1) and session_id not in {s.id for s in m.list_sessions()}:
            raise NotFoundError(session_id, kind="session")

    def existing_backup(backup_path: str) -> Path:
        m = get_manager()
        archive = tool_path(backup_path, m.settings, field="backup_path")
        if not archive.is_file():
            raise ValidationError("backup_path", f"no file {str(archive)!r}; expected a backup made by memory_backup")
        return archive

    def ask_delete_session(session_id: str, confirm: bool, ctx: Context) -> Elicit[Confirmation] | bool:
        checked(known_session, session_id)
        return ask_to_confirm(ASK_DELETE_SESSION, confirm, ctx)

    def ask_restore(backup_path: str, confirm: bool, ctx: Context) -> Elicit[Confirmation] | bool:
        checked(existing_backup, backup_path)
        return ask_to_confirm(ASK_RESTORE, confirm, ctx)

    @tool(mcp, DESTRUCTIVE)
    @approval_resolved_by(ask_delete_session)
    def memory_delete_session(
        session_id: Annotated[str, Field(description="The session whose memories to delete.")],
        confirm: Confirm = False,
        approval: Approval = None,  # type: ignore[assignment]
    ) -> dict[str, Any]:
        """Delete ALL memories of one session, in every collection (e.g. after sensitive work).
        A backup is taken first; returns the count deleted and the backup path."""
        m = get_manager()  # the session is known: ask_delete_session checked it
        if not approved(approval):
            raise not_confirmed(f"delete every memory of session {session_id!r}", approval)
        result = m.delete_session(session_id, confirm=True)
        resumed.forget(session_id)
        return ok(result)

    @tool(mcp, DESTRUCTIVE)
    def memory_cleanup(
        dry_run: Annotated[bool, Field(description="Only report what would be deleted.")] = False,
    ) -> dict[str, Any]:
        """Apply the retention policy now: expired and old unprotected memories, near-duplicates,
        tier caps and quotas. Bookmarked memories are never deleted. Reports counts per reason
        and the space freed; try dry_run=true first."""
        report = ok(get_manager().cleanup(dry_run=dry_run))
        ids = report.pop("ids", None)
        if ids is not None:  # a dry run names what would go; keep the answer small for the agent
            report["ids"] = ids[:MAX_IDS]
            report["ids_truncated"] = len(ids) > MAX_IDS
        return report

    @tool(mcp, DESTRUCTIVE)
    def memory_dedup(
        threshold: Annotated[float, Field(gt=0, le=1, description="Cosine similarity counted as duplicate.")] = 0.95,
        types: Annotated[list[MemoryTypeName] | None, Field(description="Only these types (default all).")] = None,
        dry_run: Annotated[bool, Field(description="Only report the clusters.")] = False,
    ) -> dict[str, Any]:
        """Collapse near-duplicate memories of the same type into one representative (the most
        important, then newest); the consolidation is recorded in its metadata."""
        return ok(get_manager().dedup(threshold=threshold, types=types, dry_run=dry_run))

    @tool(mcp, WRITE)
    def memory_export(
        output_path: Annotated[
            str | None, Field(description="JSON file to write (default: <storage>/exports/memories_<time>.json).")
        ] = None,
        format: Annotated[str, Field(description='Only "json".')] = "json",
        overwrite: Annotated[bool, Field(description="Replace output_path if it exists.")] = False,
    ) -> dict[str, Any]:
        """Export every memory with content, metadata and embedding to a JSON file that
        memory_import can load again. output_path must lie inside the storage directory, a watch
        directory or security.allowed_paths, in an existing directory. Returns the path and the count."""
        m = get_manager()
        target = None if output_path is None else tool_path(output_path, m.settings, field="output_path")
        return ok(m.export(format=format, output_path=target, overwrite=overwrite))

    @tool(mcp, WRITE)
    def memory_import(path: Path_) -> dict[str, Any]:
        """Import a JSON export exactly (ids, times, embeddings); memories already present are
        skipped. Returns the counts imported and skipped."""
        m = get_manager()
        return ok(m.import_memories(tool_path(path, m.settings, field="path")))

    @tool(mcp, WRITE)
    def memory_backup(
        name: Annotated[
            str | None, Field(description="Optional label, e.g. before_experiment (letters, digits, _ - .).")
        ] = None,
    ) -> dict[str, Any]:
        """Back up all memory data (catalog, vector index, attachments, config) to
        <storage>/backups/backup_YYYYmmdd_HHMMSS[_name].tar.gz. Returns the path and counts."""
        return ok(get_manager().backup(name))

    @tool(mcp, DESTRUCTIVE)
    @approval_resolved_by(ask_restore)
    def memory_restore(
        backup_path: Annotated[str, Field(description="A backup_*.tar.gz made by memory_backup.")],
        confirm: Confirm = False,
        approval: Approval = None,  # type: ignore[assignment]
    ) -> dict[str, Any]:
        """Replace all current memories with a backup. The archive is validated first (checksums,
        no links or escaping paths); the current data is backed up before it is replaced.
        Returns the restored counts per collection."""
        m = get_manager()
        archive = existing_backup(backup_path)
        if not approved(approval):
            raise not_confirmed("replace all current memories with the backup", approval)
        result = m.restore(archive, confirm=True)
        resumed.forget()
        return ok(result)

    @tool(mcp, DESTRUCTIVE)
    def memory_clear_all(
        confirm: Confirm = False,
        approval: Annotated[Approval, CONFIRM_CLEAR] = None,  # type: ignore[assignment]
    ) -> dict[str, Any]:
        """Delete every memory in every collection (fresh start). A backup is taken first; its
        path is returned so the data can be restored with memory_restore."""
        m = get_manager()
        if not approved(approval):
            raise not_confirmed("delete every memory", approval)
        result = m.clear_all(confirm=True)
        resumed.forget()
        return ok(result)


__all__ = ["register"]
