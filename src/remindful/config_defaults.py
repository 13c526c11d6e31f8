"""The setting defaults that processes without pydantic read too: standard library only.

:mod:`remindful.config` builds its fields' defaults from these values, and the hook fast path
(:func:`remindful.shells.hook.light_config`), the capture filters
(:class:`remindful.services.ingest.filters.FilterConfig`) and the hook context read them from here,
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
    "hooks": {
        "context_budget_tokens": 1500,
        "context_candidates": 30,
        "line_chars": 240,
        "inject": True,
        "brief_budget_tokens": 400,
        "projects": {},
        "start_daemon": True,
    },
    "search": {"min_score": 0.25, "recency_half_life_days": 90.0},
    "context": {"min_score": 0.5, "maybe_min_score": 0.25, "maybe_lines": 5, "kin_min_score": 0.2},
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


#: The keys of the sections the light path reads: anything else there is an unknown setting, as the
#: settings model (``extra="forbid"``) says. "" is the ``memory:`` section itself.
SECTION_KEYS: dict[str, tuple[str, ...]] = {
    "": (
        "attachments",
        "auto_capture",
        "backup",
        "catalog",
        "context",
        "daemon",
        "embeddings",
        "enabled",
        "hooks",
        "learning",
        "limits",
        "performance",
        "privacy",
        "retention",
        "scopes",
        "search",
        "security",
        "storage",
    ),
    "auto_capture": ("enabled", "filters", "triggers", "watch_dirs"),
    "auto_capture.triggers": CAPTURE_TRIGGERS,
    "auto_capture.filters": ("ignore_mouse_moves", "ignore_sessions", "min_interval_seconds"),
    "privacy": (
        "auto_delete_days",
        "delete_on_exit",
        "exclude_sessions",
        "redact",
        "redact_defaults",
        "redact_patterns",
        "redact_screenshots",
    ),
    "limits": ("batch_items", "content_chars", "hook_payload_bytes", "metadata_bytes", "metadata_depth", "query_chars"),
    "hooks": (
        "brief_budget_tokens",
        "context_budget_tokens",
        "context_candidates",
        "inject",
        "line_chars",
        "projects",
        "start_daemon",
    ),
}

_MISSING = object()
_TRUE = ("1", "on", "t", "true", "y", "yes")
_FALSE = ("0", "off", "f", "false", "n", "no")


def _raw(memory: Mapping[str, Any], dotted: str) -> Any:
    """The value at ``dotted``, or _MISSING; ValueError when a level of it is not a mapping."""
    value: Any = memory
    parts = dotted.split(".")
    for depth, part in enumerate(parts):
        if not isinstance(value, dict):
            raise ValueError(f"{'.'.join(parts[:depth])}: expected a mapping, got {value!r}")
        if part not in value:
            return _MISSING
        value = value[part]
    return value


def check_keys(memory: Mapping[str, Any], section: str) -> None:
    """ValueError naming the first key of ``section`` (one of :data:`SECTION_KEYS`) that is no setting."""
    found = memory if not section else _raw(memory, section)
    if found is _MISSING:
        return
    if not isinstance(found, dict):
        raise ValueError(f"{section}: expected a mapping, got {found!r}")
    known = SECTION_KEYS[section]
    for key in found:
        if key not in known:
            where = f" under '{section}'" if section else ""
            raise ValueError(
                f"{section + '.' if section else ''}{key}: unknown setting; known settings{where}: "
                + ", ".join(sorted(known))
            )


def read_bool(memory: Mapping[str, Any], dotted: str) -> bool:
    """A boolean setting: true/false, 0/1, or one of the strings pydantic reads as one (any case)."""
    value = _raw(memory, dotted)
    if value is _MISSING:
        return bool(default(dotted))
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.lower() in _TRUE + _FALSE:
        return value.lower() in _TRUE
    raise ValueError(f"{dotted}: expected true or false, got {value!r}")


def read_float(memory: Mapping[str, Any], dotted: str, *, ge: float | None = None) -> float:
    """A number setting (a number, or one written as text), not NaN, at least ``ge``."""
    value = _raw(memory, dotted)
    if value is _MISSING:
        return float(default(dotted))
    number: float | None = None
    if isinstance(value, int | float):
        number = float(value)
    elif isinstance(value, str) and value.isascii():
        try:
            number = float(value)
        except ValueError:
            number = None
    if number is None or number != number or (ge is not None and number < ge):
        bound = f" >= {ge:g}" if ge is not None else ""
        raise ValueError(f"{dotted}: expected a number{bound}, got {value!r}")
    return number


def read_int(memory: Mapping[str, Any], dotted: str, *, ge: int | None = None, le: int | None = None) -> int:
    """An integer setting (an integer, an integral float, or one written as text), within bounds."""
    value = _raw(memory, dotted)
    if value is _MISSING:
        return int(default(dotted))
    number: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, float) and value.is_integer():
        number = int(value)
    elif isinstance(value, str) and value.isascii():
        whole, _, fraction = value.strip().partition(".")
        if (not fraction or fraction.strip("0") == "") and (fraction or "." not in value):
            try:
                number = int(whole)
            except ValueError:
                number = None
    if number is None or (ge is not None and number < ge) or (le is not None and number > le):
        bounds = " and ".join(b for b in (ge is not None and f">= {ge}", le is not None and f"<= {le}") if b)
        raise ValueError(f"{dotted}: expected an integer{' ' + bounds if bounds else ''}, got {value!r}")
    return number


def read_list(memory: Mapping[str, Any], dotted: str, expected: str = "a list") -> list[Any]:
    """A list setting's items, unchecked (a list, tuple or set; a lone string is not one)."""
    value = _raw(memory, dotted)
    if value is _MISSING:
        return list(default(dotted))
    if not isinstance(value, list | tuple | set | frozenset):
        raise ValueError(f"{dotted}: expected {expected}, got {value!r}")
    return list(value)


def read_strings(memory: Mapping[str, Any], dotted: str) -> list[str]:
    """A list-of-strings setting."""
    value = read_list(memory, dotted, "a list of strings")
    if not all(isinstance(v, str) for v in value):
        raise ValueError(f"{dotted}: expected a list of strings, got {value!r}")
    return value


__all__ = [
    "CAPTURE_TRIGGERS",
    "CONFIG_FILE",
    "DEFAULTS",
    "REDACT_REPLACEMENT",
    "SECTION_KEYS",
    "STORAGE_PATH",
    "check_keys",
    "default",
    "read_bool",
    "read_float",
    "read_int",
    "read_list",
    "read_strings",
    "setting",
]
