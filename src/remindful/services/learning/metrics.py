"""The learning layer's figures for ``stats()["learning"]``: capture events by source, memories
created by type and class, the extraction-confidence histogram (every extraction, kept or
dropped), drops by reason, reinforcements, and LLM use against the daily token cap."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from remindful.engine.store import Store
from remindful.services.learning.common import BUCKETS, bucket, counters


def learning_stats(store: Store) -> dict[str, Any]:
    """The figures above, summed over every process that wrote to the store (the counters live in
    its catalog). Raises MemoryDisabledError."""
    catalog = store.catalog
    found = counters(catalog)
    histogram: dict[str, float] = {bucket(low): 0 for low in BUCKETS}
    histogram.update(found.get("confidence", {}))
    today = datetime.now(UTC).strftime("%Y-%m-%d")
    llm_settings = store.settings.learning.llm
    used = int(found.get("llm_tokens", {}).get(today, 0))
    cap = llm_settings.daily_token_cap
    return {
        "capture_events": found.get("events", {}),
        "memories_created": {"by_type": found.get("created_type", {}), "by_class": found.get("created_class", {})},
        "extraction_confidence": histogram,
        "dropped": {"low_confidence": 0, "over_cap": 0, **found.get("dropped", {})},
        "reinforcements": int(catalog.read("SELECT count(*) FROM reinforcements")[0][0]),
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
