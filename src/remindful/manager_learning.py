"""MemoryManager's learning methods: conversation capture, corrections, workflows, suggestions.

A mixin of thin delegations to :mod:`remindful.learning`, which it imports on first call so that
opening a manager stays light. :class:`~remindful.manager.MemoryManager` inherits it; each
method hands the manager itself to the learning function.
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from remindful.model import Memory

if TYPE_CHECKING:
    from remindful.manager import MemoryManager


class LearningMixin:
    """Conversation capture, corrections, workflows, suggestions and patterns of a :class:`MemoryManager`."""

    def capture_conversation(self, turn: Any, *, automatic: bool = False) -> builtins.list[Memory]:
        """Extract and store up to ``learning.max_memories_per_turn`` memorable statements of a
        turn (a ConversationTurn or a dict with user_message, assistant_response, ...)."""
        from remindful.learning.conversation import capture_conversation

        return capture_conversation(cast("MemoryManager", self), turn, automatic=automatic)

    def capture_correction(self, original: str, corrected: str, context: str = "") -> Memory:
        """Store the rule a user correction teaches, as a reinforced knowledge memory."""
        from remindful.learning.corrections import capture_correction

        return capture_correction(cast("MemoryManager", self), original, corrected, context)

    def capture_config_change(self, key: str, old: Any, new: Any, *, automatic: bool = False) -> Memory | None:
        """Store the preference a setting change expresses ("User prefers dark mode")."""
        from remindful.learning.config_changes import capture_config_change

        return capture_config_change(cast("MemoryManager", self), key, old, new, automatic=automatic)

    def capture_workflow(
        self, actions: Sequence[Any], *, goal: str | None = None, name: str | None = None
    ) -> Memory | None:
        """Store a procedural memory if the actions form a workflow within the time window; else None."""
        from remindful.learning.workflows import capture_workflow

        return capture_workflow(cast("MemoryManager", self), actions, goal=goal, name=name)

    def create_workflow_from_session(self, session_id: str, name: str) -> Memory:
        """Build a reusable workflow memory from a session's successful actions."""
        from remindful.learning.workflows import create_workflow_from_session

        return create_workflow_from_session(cast("MemoryManager", self), session_id, name)

    def confirm(self, query: str, memory_id: str) -> Memory:
        """A search result helped: reinforce it so it ranks higher for later searches."""
        from remindful.learning.reinforce import confirm

        return confirm(cast("MemoryManager", self), query, memory_id)

    def suggest(self, context: str, *, action: Mapping[str, Any] | None = None, limit: int = 3) -> dict[str, Any]:
        """Similar past workflows/actions for a context, and warnings about actions that failed."""
        from remindful.learning.suggest import suggest

        return suggest(cast("MemoryManager", self), context, action=action, limit=limit)

    def analyze_patterns(self, type: str = "action", metric: str | None = None, **options: Any) -> dict[str, Any]:
        """Recurring action sequences across sessions, and success rates per kind of action."""
        from remindful.learning.patterns import analyze_patterns

        return analyze_patterns(cast("MemoryManager", self), type=type, metric=metric, **options)
