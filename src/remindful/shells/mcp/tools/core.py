"""Core memory tools: store, search, get, update, delete, list, stats, scopes — and browsing resources.

Each tool is one :class:`~remindful.api.MemoryManager` call. It answers ``{"success": true, ...}``;
anything that goes wrong is a tool error (``isError: true``) naming the field and the expected
form: argument types are checked by the SDK from the signatures, values by the manager (see
:mod:`remindful.shells.mcp.tools.common`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ResourceError
from pydantic import BaseModel, ConfigDict, Field

from remindful.errors import NotFoundError, RemindfulError, ValidationError
from remindful.runtime import SESSION_ID_MAX_CHARS
from remindful.shells.mcp.tools.common import (
    DESTRUCTIVE,
    READ_ONLY,
    UPDATE,
    WRITE,
    GetManager,
    MemoryTypeName,
    OptionalText,
    client_scope,
    ok,
    one_line,
    resumed_sessions,
    tool,
)

if TYPE_CHECKING:
    from remindful.api import MemoryManager

MAX_BATCH = 1000

Metadata = Annotated[
    dict[str, Any] | None,
    Field(description='JSON object of metadata, e.g. {"action": "click", "success": true, "tags": ["login"]}.'),
]
_SESSION_HELP = 'A session id; "current" means this server\'s session. Default: the current session.'
SessionId = Annotated[str | None, Field(description=_SESSION_HELP)]
#: As a tool's own parameter (see :data:`OptionalText`).
SessionArg = Annotated[OptionalText, Field(description=_SESSION_HELP)]
ReadScope = Annotated[
    str | list[str] | None,
    Field(
        description='Whose memories: "here" (the default: the project this server works in, and the user\'s), '
        '"user", "project", "unscoped", "project:NAME", or a list of them.'
    ),
]
WriteScope = Annotated[
    str | None,
    Field(
        description='Where it belongs: "user" (seen from every project), "project" (this server\'s) or '
        "\"project:NAME\". Default: this server's project, or the user's for a preference or rule that holds "
        "everywhere."
    ),
]


class StoreItem(BaseModel):
    """One memory of a batch."""

    model_config = ConfigDict(extra="forbid")

    content: str = Field(description="The text to remember.")
    type: MemoryTypeName = Field("action", description="What the memory is about.")
    metadata: Metadata = None
    session_id: SessionId = None
    timestamp: str | None = Field(None, description="ISO 8601 creation time (default: now).")
    scope: WriteScope = None


def register(mcp: Any, get_manager: GetManager) -> None:
    """Add the core tools and the ``memory://`` resources to the MCPServer ``mcp``."""
    resumed = resumed_sessions(mcp)

    def session(manager: MemoryManager, value: str | None) -> str | None:
        if value is not None and len(value) > SESSION_ID_MAX_CHARS:
            raise ValidationError("session_id", f"expected at most {SESSION_ID_MAX_CHARS} characters, got {len(value)}")
        return manager.session_id if value == "current" else value

    @tool(mcp, WRITE)
    def memory_store(
        content: Annotated[str, Field(description="The text to remember (at most 1,000,000 characters).")],
        type: Annotated[MemoryTypeName, Field(description="What the memory is about.")] = "action",
        metadata: Metadata = None,
        session_id: SessionArg = None,
        timestamp: Annotated[str | None, Field(description="ISO 8601 creation time (default: now).")] = None,
        bookmark: Annotated[bool, Field(description="Protect it from retention and eviction.")] = False,
        importance: Annotated[
            float | None, Field(ge=0, le=1, description="0..1; more important memories rank higher and live longer.")
        ] = None,
        scope: WriteScope = None,
    ) -> dict[str, Any]:
        """Remember something for later: a fact, a decision, a step that worked or failed. What you
        store is kept as your words (origin "assistant"), an observation however it is phrased;
        memory_confirm_users_words asks the user to make it theirs.

        Returns {"success": true, "memory_id": ..., "session_id": ..., "scope": ..., "origin": ...}.
        Use memory_search to find it again and memory_get with the id to read it back.
        """
        meta = dict(metadata or {})
        if bookmark:
            meta["bookmarked"] = True
        if importance is not None:
            meta["importance"] = importance
        m = get_manager()
        sid = session(m, session_id) or m.session_id
        # The agent's words (however it phrases them): never taken for the user's own.
        origin = "assistant"
        memory_id = m.store(content, type, meta, sid, timestamp, "manual", scope=scope, origin=origin)
        stored_in = m.get(memory_id).scope
        return {
            "success": True,
            "memory_id": memory_id,
            "type": type,
            "session_id": sid,
            "scope": stored_in,
            "origin": origin,
        }

    @tool(mcp, WRITE)
    def memory_store_batch(
        items: Annotated[
            list[StoreItem],
            Field(
                description=f"1 to {MAX_BATCH} memories, each {{content, type?, metadata?, session_id?, timestamp?, "
                "scope?}}."
            ),
        ],
    ) -> dict[str, Any]:
        """Remember many things at once (one transaction, one embedding batch): faster than
        repeated memory_store. All or nothing: a bad item fails the batch, naming items[i].field.

        Returns {"success": true, "count": n, "memory_ids": [...]} in the order given.
        """
        if not 1 <= len(items) <= MAX_BATCH:
            raise ValidationError("items", f"expected 1 to {MAX_BATCH} items, got {len(items)}")
        m = get_manager()
        batch = [
            {
                **item.model_dump(exclude_none=True),
                "session_id": session(m, item.session_id),
                "source": "manual",
                "origin": "assistant",
            }
            for item in items
        ]
        ids = m.store_batch(batch)
        return {"success": True, "count": len(ids), "memory_ids": ids}

    @tool(mcp, READ_ONLY)
    def memory_search(
        query: Annotated[str, Field(description="What to look for, in natural language or keywords.")],
        memory_types: Annotated[
            list[MemoryTypeName] | None, Field(description="Only these types (default: all).")
        ] = None,
        limit: Annotated[int, Field(ge=1, le=100, description="Maximum results.")] = 10,
        filters: Annotated[
            dict[str, Any] | None,
            Field(
                description='Metadata filter (Chroma where language): {"success": true}, '
                '{"target.x": {"$gte": 100}}, {"$or": [...]}.'
            ),
        ] = None,
        session_id: SessionArg = None,
        since: Annotated[str | None, Field(description="Only memories created at/after (ISO 8601).")] = None,
        until: Annotated[str | None, Field(description="Only memories created at/before (ISO 8601).")] = None,
        scope: ReadScope = None,
        min_score: Annotated[
            float | None,
            Field(
                ge=0,
                le=1,
                description="Relevance floor (default search.min_score); 0 returns the top hits whatever they score.",
            ),
        ] = None,
        *,
        ctx: Context,
    ) -> dict[str, Any]:
        """Search memories by meaning and keywords (hybrid); best first. ``score`` is a calibrated
        relevance in [0, 1], the same scale for every query (about the chance the hit is a real
        match); hits under min_score are left out, so no results means nothing relevant is stored.

        Use it before starting a task to recall how similar tasks went. Returns
        {"success": true, "query": ..., "count": n, "memories": [{id, type, content, metadata,
        score, created_at, session_id, similar (near-duplicates folded into this hit),
        superseded_by (a newer memory on the same subject), scope, ...}]}. It searches the
        project this server works in and the user's memories unless ``scope`` says otherwise.
        """
        m = get_manager()
        hits = m.search(
            query,
            memory_types,
            limit,
            filters,
            session(m, session_id),
            since,
            until,
            min_score,
            resumed_session=resumed.of(ctx),
            scope=client_scope(scope),
        )
        return {"success": True, "query": query, "count": len(hits), "memories": [h.to_dict() for h in hits]}

    @tool(mcp, READ_ONLY)
    def memory_get(memory_id: Annotated[str, Field(description="The memory's id.")]) -> dict[str, Any]:
        """Read one memory by id, with its content, metadata and timestamps.

        An unknown id is an error saying "Memory not found"; use memory_search instead.
        """
        return {"success": True, "memory": get_manager().get(memory_id).to_dict()}

    @tool(mcp, READ_ONLY)
    def memory_get_batch(
        memory_ids: Annotated[list[str], Field(description=f"Up to {MAX_BATCH} memory ids.")],
    ) -> dict[str, Any]:
        """Read many memories by id in one query. ``memories`` keeps the request order, with
        null where an id does not exist (those are listed in ``missing``)."""
        if len(memory_ids) > MAX_BATCH:
            raise ValidationError("memory_ids", f"expected at most {MAX_BATCH} ids, got {len(memory_ids)}")
        found = get_manager().get_batch(memory_ids)
        return {
            "success": True,
            "memories": [x.to_dict() if x else None for x in found],
            "found": sum(x is not None for x in found),
            "missing": [i for i, x in zip(memory_ids, found, strict=True) if x is None],
        }

    @tool(mcp, UPDATE)
    def memory_update(
        memory_id: Annotated[str, Field(description="The memory's id.")],
        content: Annotated[OptionalText, Field(description="New text (re-embedded).")] = None,
        metadata: Annotated[
            dict[str, Any] | None,
            Field(description="Keys to merge into the metadata; a key set to null is removed."),
        ] = None,
        scope: Annotated[
            str | None,
            Field(
                description='Move it: "user" (seen from every project), "project" (this server\'s) or "project:NAME".'
            ),
        ] = None,
    ) -> dict[str, Any]:
        """Correct or annotate a memory: replace its content, merge metadata keys, and/or move it
        to another scope.

        Returns the updated memory. Give at least one of content, metadata and scope.
        """
        if content is None and metadata is None and scope is None:
            raise ValidationError("content", "give at least one of content, metadata and scope")
        return {"success": True, "memory": get_manager().update(memory_id, content, metadata, scope=scope).to_dict()}

    @tool(mcp, DESTRUCTIVE)
    def memory_delete(memory_id: Annotated[str, Field(description="The memory's id.")]) -> dict[str, Any]:
        """Delete one memory permanently (from the catalog and the vector index).

        An unknown id is an error saying "Memory not found".
        """
        if not get_manager().delete(memory_id):
            raise NotFoundError(memory_id)
        return {"success": True, "deleted": True, "memory_id": memory_id}

    @tool(mcp, READ_ONLY)
    def memory_list(
        type: Annotated[MemoryTypeName | None, Field(description="Only this type.")] = None,
        session_id: SessionArg = None,
        limit: Annotated[int, Field(ge=1, le=1000, description="Maximum memories.")] = 20,
        offset: Annotated[int, Field(ge=0, description="Memories to skip (paging).")] = 0,
        since: Annotated[str | None, Field(description="Only memories created at/after (ISO 8601).")] = None,
        until: Annotated[str | None, Field(description="Only memories created at/before (ISO 8601).")] = None,
        scope: ReadScope = None,
    ) -> dict[str, Any]:
        """List memories newest first, optionally of one type or one session ("current" for
        this server's session) and within a time range; of this server's project and the user's
        unless ``scope`` says otherwise. Page with offset."""
        m = get_manager()
        found = m.list(type, session(m, session_id), limit, offset, since=since, until=until, scope=client_scope(scope))
        return {"success": True, "count": len(found), "offset": offset, "memories": [x.to_dict() for x in found]}

    @tool(mcp, READ_ONLY)
    def memory_stats(
        scope: Annotated[
            str | list[str] | None,
            Field(description='Also count this scope\'s memories by type ("here", "user", "project:NAME", ...).'),
        ] = None,
    ) -> dict[str, Any]:
        """Memory usage: counts per collection and per scope, storage size and quota use
        (``storage_full`` on a full disk), sessions and their average length, the most frequent
        actions and screens, captures per day, search latency percentiles, embedding cache hit rate."""
        return ok(get_manager().stats(scope=client_scope(scope)))

    @tool(mcp, READ_ONLY)
    def memory_scopes() -> dict[str, Any]:
        """The scopes that hold memories: each project (its name and directory), the user's (seen
        from every project) and the unscoped ones, with counts; and ``here``, the project this
        server works in (null: none). Searches and lists see ``here`` and the user's by default."""
        m = get_manager()
        here = m.project
        return {
            "success": True,
            "here": here.to_dict() if here is not None else None,
            "scopes": [usage.to_dict() for usage in m.scopes()],
        }

    # -- resources ------------------------------------------------------------------------------
    # A resource that cannot be read is the SDK's ResourceError: a JSON-RPC error with the message.

    def as_json(read: Callable[[MemoryManager], dict[str, Any]]) -> str:
        try:
            answer = read(get_manager())
        except RemindfulError as exc:
            raise ResourceError(one_line(exc)) from exc
        return json.dumps(answer, indent=2, ensure_ascii=False, default=str)

    @mcp.resource("memory://stats", name="stats", mime_type="application/json")
    def stats_resource() -> str:
        """Memory usage statistics (the memory_stats answer)."""
        return as_json(lambda m: m.stats().to_dict())

    @mcp.resource("memory://recent", name="recent", mime_type="application/json")
    def recent_resource() -> str:
        """The 20 newest memories."""
        return as_json(lambda m: {"memories": [x.to_dict() for x in m.list(limit=20)]})

    @mcp.resource("memory://memories/{memory_id}", name="memory", mime_type="application/json")
    def memory_resource(memory_id: str) -> str:
        """One memory by id."""
        return as_json(lambda m: {"memory": m.get(memory_id).to_dict()})
