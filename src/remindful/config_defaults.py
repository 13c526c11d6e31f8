"""The setting defaults that processes without pydantic read too: standard library only.

:mod:`remindful.config` builds its fields' defaults from these values, and the hook fast path
(:func:`remindful.services.hooks.fast.light_config`), the capture filters
(:class:`remindful.services.capture.filters.FilterConfig`) and the hook context read them from here,
so each default is written once. :data:`DEFAULTS` has the shape of the YAML file's ``memory:``
section; :func:`setting` reads a raw (unvalidated) section with these defaults.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs hook processes milliseconds
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

#: The storage directory when no source names one.
STORAGE_PATH = "~/.remindful/memory"
#: The YAML file read when ``$REMINDFUL_CONFIG`` is not set (if it exists).
CONFIG_FILE = "~/.remindful/config.yaml"
#: The ``auto_capture.triggers`` switches, one per kind of capture.
CAPTURE_TRIGGERS = (
    "ai_analysis",
    "successful_actions",
    "failed_actions",
    "workflow_completion",
    "manual_save",
    "hooks",
    "files",
)
#: The replacement of a ``privacy.redact_patterns`` rule that names none.
REDACT_REPLACEMENT = "[REDACTED]"

#: The defaults the light readers share with :class:`remindful.config.Settings`, by their place in
#: the ``memory:`` section. Read them through :func:`setting`; never mutate them.
DEFAULTS: dict[str, Any] = {
    "enabled": True,
    "storage": {"path": STORAGE_PATH},
    "auto_capture": {
        "enabled": True,
        "triggers": dict.fromkeys(CAPTURE_TRIGGERS, True),
        "filters": {"min_interval_seconds": 5.0, "ignore_mouse_moves": True, "ignore_sessions": []},
    },
    "privacy": {"redact": True, "redact_defaults": True, "redact_patterns": [], "exclude_sessions": []},
    "hooks": {"context_budget_tokens": 1500, "context_candidates": 30, "line_chars": 240},
    "search": {"min_score": 0.25, "recency_half_life_days": 90.0},
    "context": {"min_score": 0.5},
    "limits": {
        "content_chars": 1_000_000,
        "query_chars": 10_000,
        "metadata_bytes": 65_536,
        "metadata_depth": 20,
        "hook_payload_bytes": 4_000_000,
        "batch_items": 10_000,
    },
}


def default(dotted: str) -> Any:
    """The default of the setting at ``dotted`` (``"auto_capture.filters.min_interval_seconds"``).
    Raises KeyError for a setting without a default here."""
    value: Any = DEFAULTS
    for part in dotted.split("."):
        value = value[part]
    return value


def setting(memory: Mapping[str, Any], dotted: str) -> Any:
    """The value at ``dotted`` in a raw ``memory:`` mapping (as read from YAML and ``REMINDFUL_*``,
    not validated), or its default when the mapping lacks it or a level of it is not a mapping."""
    value: Any = memory
    for part in dotted.split("."):
        if not hasattr(value, "get") or (value := value.get(part)) is None:
            return default(dotted)
    return value


__all__ = ["CAPTURE_TRIGGERS", "CONFIG_FILE", "DEFAULTS", "REDACT_REPLACEMENT", "STORAGE_PATH", "default", "setting"]
