"""Reinforcement: raise a memory's importance so that it ranks higher in later searches.

Search multiplies a memory's fused score by ``1 + search.importance_boost * (2 * importance - 1)``
(:func:`remindful.engine.retrieval.search.boost`), so importance moves rank among near-ties and never lifts an
irrelevant memory over a relevant one. Each reinforcement adds a fixed step, capped at 1.0:

- explicit trigger phrase in a conversation ("remember that …"): ``learning.trigger_boost`` (0.25)
- a user correction: ``learning.correction_boost`` (0.3)
- a confirmed search result (:func:`confirm`): ``learning.confirm_boost`` (0.15)

It also counts as an access (``access_count`` + 1, ``last_accessed`` = now), and each one is
logged in the ``reinforcements`` table with its reason and query.
"""

from __future__ import annotations

import logging
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from remindful.errors import NotFoundError, ValidationError
from remindful.model import Memory
from remindful.services.learning.common import MemoryWriter, finish, now
from remindful.services.learning.types import CaptureSource

if TYPE_CHECKING:
    from remindful.engine.repositories import LearningRepository

log = logging.getLogger("remindful.services.learning")


class ReinforcementReason(StrEnum):
    EXPLICIT_USER_CONFIRMATION = "explicit_user_confirmation"
    USER_CORRECTION = "user_correction"
    SUCCESSFUL_APPLICATION = "successful_application"


def reinforce(
    learning: LearningRepository, memory_id: str, reason: ReinforcementReason, step: float, query: str | None = None
) -> float:
    """Add ``step`` to the memory's importance (capped at 1.0) and count an access; returns the
    new importance. Raises NotFoundError if there is no such memory."""
    if not 0 <= step <= 1:
        raise ValidationError("step", f"expected a number from 0 to 1, got {step!r}")
    result = learning.reinforce(memory_id, step, reason=reason.value, query=query, at=now())
    if result is None:
        raise NotFoundError(memory_id)
    return result


def confirm(store: MemoryWriter, learning: LearningRepository, query: str, memory_id: str) -> Memory:
    """A search for ``query`` found ``memory_id`` helpful: reinforce it (importance +
    ``learning.confirm_boost``, access count + 1) so it ranks higher next time. Returns the
    updated memory; raises NotFoundError / ValidationError."""
    if not isinstance(query, str) or not query.strip():
        raise ValidationError("query", "expected the non-empty search query the result answered")
    if not isinstance(memory_id, str) or not memory_id.strip():
        raise ValidationError("memory_id", "expected the id of the helpful search result")
    reinforce(
        learning, memory_id, ReinforcementReason.SUCCESSFUL_APPLICATION, store.settings.learning.confirm_boost, query
    )
    memory = store.get(memory_id)
    log.info("[MEM:CAPTURE] Reinforced memory %s from successful search", memory_id)
    finish(learning, CaptureSource.SEARCH_CONFIRMATION, memory_id, [memory])
    return memory


def history(learning: LearningRepository, memory_id: str) -> list[dict[str, Any]]:
    """The memory's reinforcements, oldest first: ``{at, reason, query, importance}``."""
    return [r._asdict() for r in learning.reinforcements(memory_id)]


__all__ = ["ReinforcementReason", "confirm", "history", "reinforce"]
