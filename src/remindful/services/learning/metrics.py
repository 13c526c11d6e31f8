"""The learning layer's figures for ``stats().learning``: capture events by source, memories
created by type and class, the extraction-confidence histogram (every extraction, kept or
dropped), drops by reason, reinforcements, and LLM use against the daily token cap."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from remindful.services.learning.common import BUCKETS, bucket

if TYPE_CHECKING:
    from remindful.config import Settings
    from remindful.engine.repositories import LearningRepository


def learning_stats(learning: LearningRepository, settings: Settings) -> dict[str, Any]:
    """The figures above, summed over every process that wrote to the store (the counters live in
    its catalog). Raises MemoryDisabledError."""
    found = learning.counters()
    histogram: dict[str, float] = {bucket(low): 0 for low in BUCKETS}
    histogram.update(found.get("confidence", {}))
    today = datetime.now(UTC).strftime("%Y-%m-%d")
    llm_settings = settings.learning.llm
    used = int(found.get("llm_tokens", {}).get(today, 0))
    cap = llm_settings.daily_token_cap
    return {
        "capture_events": found.get("events", {}),
        "memories_created": {"by_type": found.get("created_type", {}), "by_class": found.get("created_class", {})},
        "extraction_confidence": histogram,
        "dropped": {"low_confidence": 0, "over_cap": 0, **found.get("dropped", {})},
        "reinforcements": learning.reinforcement_count(),
        "llm": {
            "enabled": llm_settings.enabled,
            "model": llm_settings.model or None,
            "tokens_today": used,
            "daily_token_cap": cap,
            "cap_remaining": max(cap - used, 0),
            **{k: int(v) for k, v in found.get("llm", {}).items()},
        },
    }


__all__ = ["learning_stats"]
