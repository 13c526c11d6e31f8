"""How a memory's action, screen or tool is named, in SQL: the first of its metadata keys below that
is set, else (for actions and screens) the first 40 characters of its content. The session
summaries and the most frequent actions and screens of ``stats()`` use the same names."""

from __future__ import annotations

from collections.abc import Callable

#: Metadata keys naming an action / a screen / a tool, first match wins.
ACTION_KEYS = ("action", "action_type", "command")
SCREEN_KEYS = ("screen_name", "screen", "app", "window_title", "title", "url")
TOOL_KEYS = ("tool_name", "tool")

_CONTENT = "substr(content, 1, 40)"


def sqlite_field(key: str) -> str:
    """SQLite's expression for the metadata value ``key`` (a key of this module's, never input)."""
    return f"json_extract(metadata, '$.{key}')"


def label_sql(keys: tuple[str, ...], *, content: bool = True, value_of: Callable[[str], str] = sqlite_field) -> str:
    """The SQL expression naming a ``memories`` row by ``keys``, falling back to its content's
    first words when ``content`` (NULL otherwise); ``value_of`` writes a metadata value in the
    backend's dialect (SQLite's by default; the PostgreSQL repositories pass theirs)."""
    parts = [value_of(k) for k in keys]
    if content:
        parts.append(_CONTENT)
    return f"coalesce({', '.join(parts)})"


__all__ = ["ACTION_KEYS", "SCREEN_KEYS", "TOOL_KEYS", "label_sql", "sqlite_field"]
