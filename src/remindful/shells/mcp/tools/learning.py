"""Learning tools: capture from conversation turns, corrections, setting changes and workflows;
confirm helpful results; suggestions, failure warnings, pattern analysis; task context.

Each tool is one MemoryManager call (``remindful.services.learning`` does the work) answering
``{"success": true, ...}``; a failure is a tool error naming the bad field
(:mod:`remindful.shells.mcp.tools.common`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context, Elicit
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel, ConfigDict, Field

from remindful.errors import RemindfulError
from remindful.shells.mcp.tools.common import (
    READ_ONLY,
    UPDATE,
    WRITE,
    GetManager,
    client_scope,
    ok,
    resumed_sessions,
    tool,
)
from remindful.shells.mcp.tools.confirm import Approval, Confirmation, approved, client_can_elicit
from remindful.shells.mcp.tools.lifecycle import approval_resolved_by


class Action(BaseModel):
    """One observed user action."""

    model_config = ConfigDict(extra="forbid")

    action_type: str = Field("action", description='Kind of action, e.g. "command", "click", "navigate".')
    description: str = Field(description='What was done, e.g. "run tests" or "click submit".')
    timestamp: str = Field(description="ISO 8601 time of the action.")
    metadata: dict[str, Any] | None = Field(None, description='Extra facts, e.g. {"success": true, "app": "vscode"}.')


def register(mcp: Any, get_manager: GetManager) -> None:
    """Add the learning tools to the MCPServer ``mcp``."""
    resumed = resumed_sessions(mcp)

    @tool(mcp, WRITE)
    def memory_capture_turn(
        user_message: Annotated[str, Field(description="What the user said in this turn.")],
        assistant_response: Annotated[str, Field(description="What the assistant answered.")] = "",
        conversation_id: Annotated[str, Field(description="The conversation (becomes the session id).")] = "default",
        user_id: Annotated[str, Field(description="Who the user is.")] = "user",
        user_name: Annotated[
            str | None, Field(description='Name used instead of "I" in the memories (default "User").')
        ] = None,
        project_id: Annotated[
            str | None,
            Field(
                description="Project the conversation is about: its directory, or a name (what is learned goes to "
                "that project, or to the user's for a preference or rule that holds everywhere; default: this "
                "server's project)."
            ),
        ] = None,
        timestamp: Annotated[str | None, Field(description="ISO 8601 time of the turn (default: now).")] = None,
    ) -> dict[str, Any]:
        """Learn from one conversation turn: up to 3 statements worth remembering (facts,
        decisions, preferences, rules, procedures), each with a confidence of at least 0.7. What
        the user stated is kept as the user's (origin "user"); what the assistant answered only as
        its observations (origin "assistant"), however it is phrased. Questions, requests, code and
        small talk are not kept. "Remember that …", "from now on …" make a statement rank higher
        later. Returns {"success": true, "count": n, "memories": [...]} (n may be 0).
        """
        turn = {
            "user_message": user_message,
            "assistant_response": assistant_response,
            "conversation_id": conversation_id,
            "user_id": user_id,
            "user_name": user_name,
            "project_id": project_id,
            "timestamp": timestamp,
        }
        found = get_manager().capture_conversation(turn)
        return {"success": True, "count": len(found), "memories": [x.to_dict() for x in found]}

    @tool(mcp, WRITE)
    def memory_capture_correction(
        original: Annotated[str, Field(description="What the agent originally produced.")],
        corrected: Annotated[str, Field(description="What the user corrected it to.")],
        context: Annotated[str, Field(description='What it was about, e.g. "API authentication".')] = "",
    ) -> dict[str, Any]:
        """Learn from a user's correction so the mistake is not repeated: stores the rule
        ("API uses API keys, not OAuth.") as a reinforced knowledge memory. Returns
        {"success": true, "memory": {...}}.
        """
        return {"success": True, "memory": get_manager().capture_correction(original, corrected, context).to_dict()}

    @tool(mcp, WRITE)
    def memory_capture_config_change(
        key: Annotated[str, Field(description='The setting that changed, e.g. "theme" or "editor.fontSize".')],
        new_value: Annotated[Any, Field(description='Its new value, e.g. "dark", 14, true.')],
        old_value: Annotated[Any, Field(description="Its previous value, if known.")] = None,
    ) -> dict[str, Any]:
        """Remember the preference a settings change expresses ("User prefers dark mode"); an
        earlier preference for the same setting is marked superseded. Returns {"success": true,
        "memory": {...}}.
        """
        found = get_manager().capture_config_change(key, old_value, new_value)
        return {"success": True, "memory": found.to_dict() if found else None}

    @tool(mcp, WRITE)
    def memory_capture_workflow(
        actions: Annotated[list[Action], Field(description="The actions, in any order (sorted by time).")],
        goal: Annotated[str | None, Field(description='What they achieve, e.g. "deploy the app".')] = None,
        name: Annotated[str | None, Field(description="A short name for the workflow.")] = None,
    ) -> dict[str, Any]:
        """Learn a procedure from observed actions: 3 or more related actions within 30 minutes
        become a workflow memory "To <goal>: 1) …, 2) …". Unrelated or spread-out actions store
        nothing. Returns {"success": true, "captured": bool, "memory": {...} | null}.
        """
        found = get_manager().capture_workflow([a.model_dump() for a in actions], goal=goal, name=name)
        return {"success": True, "captured": found is not None, "memory": found.to_dict() if found else None}

    @tool(mcp, WRITE)
    def memory_create_workflow_from_session(
        session_id: Annotated[str, Field(description="The session whose actions make up the workflow.")],
        name: Annotated[str, Field(description='Workflow name, e.g. "google_search_workflow".')],
    ) -> dict[str, Any]:
        """Turn a session's successful actions, in order, into a reusable workflow memory that
        memory_suggest can offer later. Returns {"success": true, "memory": {...}}.
        """
        return {"success": True, "memory": get_manager().create_workflow_from_session(session_id, name).to_dict()}

    @tool(mcp, WRITE)
    def memory_confirm(
        query: Annotated[str, Field(description="The search query the result answered.")],
        memory_id: Annotated[str, Field(description="The id of the result that helped.")],
    ) -> dict[str, Any]:
        """Tell memory a search result helped: the memory is reinforced (importance and access
        count go up) so it ranks higher next time. Returns {"success": true, "memory": {...}}.
        """
        return {"success": True, "memory": get_manager().confirm(query, memory_id).to_dict()}

    def ask_whose_words(memory_id: str, ctx: Context) -> Elicit[Confirmation] | bool:
        """The user is asked whether the memory holds their words, where the client can ask;
        nothing is approved otherwise (the agent's say-so is not the user's)."""
        if not client_can_elicit(ctx):
            return False
        try:
            content = get_manager().get(memory_id).content
        except RemindfulError:
            return False  # the tool says it is not found
        shown = content if len(content) <= 500 else content[:499] + "…"
        return Elicit(f"Are these your words (something you said, decided or prefer)?\n\n{shown}", Confirmation)

    @tool(mcp, UPDATE)
    @approval_resolved_by(ask_whose_words)
    def memory_confirm_users_words(
        memory_id: Annotated[str, Field(description="A memory holding what the user said, decided or prefers.")],
        approval: Approval = None,  # type: ignore[assignment]
    ) -> dict[str, Any]:
        """Ask the user whether a memory holds their own words (a decision, preference or rule
        they stated, which you stored): confirmed, it is kept as theirs (origin "user_confirmed")
        and may then count as their decision, preference or rule; what you store is otherwise
        only ever your observation. Only a client that can ask its user (MCP elicitation) can
        confirm. Returns {"success": true, "memory": {...}}; a tool error when the user did not
        confirm (nothing changed).
        """
        manager = get_manager()
        manager.get(memory_id)  # not found: said before anything else
        if not approved(approval):
            raise ToolError("Not confirmed as the user's words: the memory stays yours (nothing was changed)")
        return {"success": True, "memory": manager.update(memory_id, origin="user_confirmed").to_dict()}

    @tool(mcp, READ_ONLY)
    def memory_suggest(
        context: Annotated[
            str, Field(description='The current situation or intended action, e.g. "login form on example.com".')
        ],
        action: Annotated[
            dict[str, Any] | None,
            Field(
                description='The action about to be taken, e.g. {"action": "click", "target": {"x": 500, "y": 300}}.'
            ),
        ] = None,
        limit: Annotated[int, Field(ge=1, le=50, description="Most suggestions to return.")] = 3,
        *,
        ctx: Context,
    ) -> dict[str, Any]:
        """Before acting: similar past workflows/actions you could replay (with memory ids and
        dates), and warnings when this action failed before ("This action failed 5 times
        previously, success rate: 0%") with alternatives that worked.
        """
        return ok(get_manager().suggest(context, action=action, limit=limit, resumed_session=resumed.of(ctx)))

    @tool(mcp, READ_ONLY)
    def memory_analyze_patterns(
        type: Annotated[
            Literal["action", "screen", "workflow"], Field(description="Memory type to analyse.")
        ] = "action",
        metric: Annotated[
            Literal["success_rate", "frequency", "sequences"] | None,
            Field(description="What to report; default: everything."),
        ] = None,
        min_support: Annotated[int, Field(ge=1, description="Sessions a sequence must recur in.")] = 2,
        days: Annotated[float | None, Field(gt=0, description="Only the last N days.")] = None,
        store: Annotated[bool, Field(description="Save recurring sequences as workflow memories.")] = False,
    ) -> dict[str, Any]:
        """Find recurring action sequences across sessions (with confidence) and success rates per
        kind of action, with insights such as "fill succeeds 95% (19/20)" and failure-prone actions.
        """
        m = get_manager()
        return ok(m.analyze_patterns(type=type, metric=metric, min_support=min_support, days=days, store=store))

    @tool(mcp, READ_ONLY)
    def memory_context(
        task: Annotated[str, Field(description="The task at hand, in a sentence.")],
        budget_tokens: Annotated[int, Field(ge=50, le=20_000, description="Most tokens the context may take.")] = 1500,
        min_score: Annotated[
            float | None,
            Field(ge=0, le=1, description="Relevance floor of the memories (default context.min_score)."),
        ] = None,
        scope: Annotated[
            str | list[str] | None,
            Field(
                description="Whose memories: \"here\" (the default: this server's project and the user's), "
                '"user", "project", "project:NAME", or a list.'
            ),
        ] = None,
        *,
        ctx: Context,
    ) -> dict[str, Any]:
        """Context for the current task: the most relevant memories (preferences, facts,
        workflows, past outcomes) as short lines with ids, within a token budget, plus warnings
        about actions that failed before. Call it when starting a task. An empty context means
        no stored memory is relevant enough (min_score).
        """
        from remindful.services.context import estimate_tokens

        m = get_manager()
        mine = resumed.of(ctx)
        warnings = [f"Warning: {w.message}" for w in m.suggest(task, resumed_session=mine).warnings]
        # Warnings first in the budget: they prevent repeating a known failure.
        room = budget_tokens - sum(estimate_tokens(w) + 1 for w in warnings)
        text = ""
        if room > 0:
            scoped = client_scope(scope)
            text = m.context(task, budget_tokens=room, min_score=min_score, resumed_session=mine, scope=scoped).text
        text = "\n".join(x for x in [text, *warnings] if x)
        return {"success": True, "context": text, "tokens": estimate_tokens(text), "warnings": warnings}
