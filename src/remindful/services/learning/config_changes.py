"""Capture from a configuration change: a preference memory.

``theme: light → dark`` becomes "User prefers dark mode. Changed theme from light to dark.":
the preference first (what a later search for "dark mode" should find), then the change. A
boolean reads as enabled/disabled; other values as "<setting> set to <value>". An earlier
preference memory for the same setting is marked ``superseded_by`` the new one. The values of a
setting named like a secret (``api_token``, ``DATABASE_PASSWORD``: :func:`is_secret_name`) are
never kept: the memory says the setting changed, with ``[REDACTED]`` for both values.
"""

from __future__ import annotations

import json
import logging
import re
from typing import TYPE_CHECKING, Any

from remindful.engine.redact import FIELD_REPLACEMENT, is_secret_name
from remindful.errors import ValidationError
from remindful.model import Memory
from remindful.services.learning.common import MemoryWriter, finish, store_memories
from remindful.services.learning.types import CaptureSource

if TYPE_CHECKING:
    from remindful.engine.repositories import LearningRepository, MemoryRepository

log = logging.getLogger("remindful.services.learning")

_MODE_KEYS = re.compile(r"(?:^|\s)(?:theme|mode|color scheme|colour scheme|appearance)$", re.IGNORECASE)


def setting_words(key: str) -> str:
    """``editor.fontSize`` → ``editor font size``."""
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", key)
    return re.sub(r"[._\-/:]+", " ", spaced).strip().lower()


def _value(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


def preference_statement(key: str, old: Any, new: Any) -> str:
    words = setting_words(key)
    if isinstance(new, bool):
        preference = f"{words} {'enabled' if new else 'disabled'}"
    elif isinstance(new, str) and _MODE_KEYS.search(words) and len(new.split()) <= 2:
        preference = f"{new} {'mode' if 'mode' not in new.lower() else ''}".strip()
    else:
        preference = f"{words} set to {_value(new)}"
    text = f"User prefers {preference}."
    if old is not None:
        text += f" Changed {words} from {_value(old)} to {_value(new)}."
    return text


def capture_config_change(
    store: MemoryWriter,
    memories: MemoryRepository,
    learning: LearningRepository,
    key: str,
    old: Any,
    new: Any,
    *,
    automatic: bool = False,
) -> Memory | None:
    """Store the preference a setting change expresses (``knowledge``, semantic, source
    ``config``) and publish ``MemoryCaptured``. ``automatic=True`` returns None when
    ``learning.capture_config_changes`` or ``auto_capture.enabled`` is off. Raises ValidationError."""
    if not isinstance(key, str) or not key.strip():
        raise ValidationError("key", "expected the setting's name, e.g. 'theme'")
    if new is None:
        raise ValidationError("new", "expected the new value (string, number, boolean, list or object)")
    settings = store.settings
    if automatic and not (settings.auto_capture.enabled and settings.learning.capture_config_changes):
        return None
    try:
        json.dumps([old, new], allow_nan=False)
    except (TypeError, ValueError):
        raise ValidationError("new", "expected JSON-safe values (string, number, boolean, list, object)") from None
    if old == new:
        raise ValidationError("new", f"is the same as old ({new!r}); nothing changed")
    if is_secret_name(key):  # the text would carry the secret where no redaction rule can tell
        old, new = (None if old is None else FIELD_REPLACEMENT), FIELD_REPLACEMENT
    earlier = memories.current_preferences(key)
    (memory,) = store_memories(
        store,
        [
            {
                "content": preference_statement(key, old, new),
                "type": "knowledge",
                "memory_class": "semantic",
                "source": "config",
                "origin": "user",  # the user set it
                "metadata": {"setting": key, "old_value": old, "new_value": new, "category": "preference"},
            }
        ],
    )
    for memory_id in earlier:
        store.update(memory_id, metadata={"superseded_by": memory.id})
    log.info("[MEM:CAPTURE] Captured config change: %s = %s", key, _value(new))
    finish(learning, CaptureSource.CONFIGURATION, key, [memory])
    return memory


__all__ = ["capture_config_change", "preference_statement", "setting_words"]
