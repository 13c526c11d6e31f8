"""Confirmation for destructive tools: ask through MCP elicitation, else require ``confirm=true``.

Usage (a tool of ``memory_delete_session``'s kind)::

    from typing import Annotated
    from remindful.shells.mcp.tools.confirm import Approval, approved, confirmation, not_confirmed

    CONFIRM_CLEAR = confirmation("Delete EVERY memory? A backup is taken first.")

    @tool(mcp, DESTRUCTIVE)
    def memory_clear_all(
        confirm: bool = False,                                   # the tool argument (required name)
        approval: Annotated[Approval, CONFIRM_CLEAR] = None,     # filled by the SDK, not by the client
    ) -> dict[str, Any]:
        if not approved(approval):
            raise not_confirmed("delete every memory", approval)
        ...

Contract:

- ``confirmation(message) -> Resolve``: a resolver marker for ``Annotated[Approval, ...]``. The tool
  MUST also take a ``confirm: bool = False`` argument (the resolver reads it by name); the
  ``approval`` parameter is resolved by the SDK and does not appear in the tool's input schema.
  With ``confirm=true`` the call goes ahead without asking. Otherwise, if the client declared
  the elicitation capability, the user is asked ``message`` (a yes/no form) — over a
  server-to-client request on handshake-era connections, or an ``InputRequiredResult`` round on
  2026-07-28 connections (the SDK drives both). Without the capability nothing is asked.
- ``approved(approval) -> bool``: True only for ``confirm=true`` or an accepted "yes".
- ``not_confirmed(what, approval) -> ToolError``: the tool error to raise, saying that nothing was
  changed and whether the user declined or ``confirm=true`` is needed.
"""

from __future__ import annotations

from typing import Any

from mcp.server.elicitation import AcceptedElicitation, ElicitationResult
from mcp.server.mcpserver import Context, Elicit, Resolve
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel, Field


class Confirmation(BaseModel):
    """The form shown to the user."""

    confirm: bool = Field(description="Yes, go ahead")


#: The type of the resolved parameter: the elicitation outcome (or an accepted ``True``).
Approval = ElicitationResult[Confirmation]


def client_can_elicit(ctx: Context[Any, Any]) -> bool:
    """Whether the client declared form elicitation (a bare ``elicitation: {}`` counts)."""
    capabilities = ctx.client_capabilities
    elicitation = capabilities.elicitation if capabilities is not None else None
    return elicitation is not None and (elicitation.form is not None or elicitation.url is None)


def confirmation(message: str) -> Resolve:
    """A resolver marker asking ``message``; see the module docstring for the contract."""

    def ask(confirm: bool, ctx: Context) -> Elicit[Confirmation] | bool:
        return ask_to_confirm(message, confirm, ctx)

    ask.__qualname__ = f"confirmation[{message[:40]}]"
    return Resolve(ask)


def ask_to_confirm(message: str, confirm: bool, ctx: Context) -> Elicit[Confirmation] | bool:
    """What a confirmation resolver returns: True for ``confirm=true``, else the question when the
    client can be asked, else False. For a resolver of its own that checks the tool's arguments
    first (a destructive tool says "not found" before anyone is asked to confirm)."""
    if confirm is True:
        return True
    if client_can_elicit(ctx):
        return Elicit(message, Confirmation)
    return False


def approved(approval: Any) -> bool:
    """True for ``confirm=true`` or a user's accepted "yes"; False otherwise (and for None)."""
    if not isinstance(approval, AcceptedElicitation):
        return False
    data = approval.data
    return data is True or (isinstance(data, Confirmation) and data.confirm)


def not_confirmed(what: str, approval: Any) -> ToolError:
    """The tool error for a destructive call that was not confirmed: nothing was changed."""
    action = getattr(approval, "action", None)
    if action in ("decline", "cancel") or isinstance(getattr(approval, "data", None), Confirmation):
        return ToolError(f"Not confirmed: the user did not agree to {what}; nothing was changed")
    return ToolError(f"Confirmation required to {what}: call again with confirm=true (nothing was changed)")


__all__ = [
    "Approval",
    "Confirmation",
    "approved",
    "ask_to_confirm",
    "client_can_elicit",
    "confirmation",
    "not_confirmed",
]
