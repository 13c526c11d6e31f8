"""Validation of what callers pass to ``store``: every error names the field and the expected form."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from remindful.engine.sqlfilter import to_epoch
from remindful.errors import ValidationError
from remindful.model import ChunkMetadata, MemoryClass, MemorySource, MemoryType

MAX_CONTENT_CHARS = 1_000_000


def validate_item(item: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    """Validate one store item; raises ValidationError naming ``prefix + field``."""
    content = item.get("content")
    if not isinstance(content, str) or not content.strip():
        raise ValidationError(prefix + "content", "expected a non-empty string")
    if len(content) > MAX_CONTENT_CHARS:
        raise ValidationError(prefix + "content", f"expected at most {MAX_CONTENT_CHARS:,} characters")
    metadata = item.get("metadata") or {}
    if not isinstance(metadata, Mapping):
        raise ValidationError(prefix + "metadata", f"expected a dict, got {type(metadata).__name__}")
    try:
        metadata = json.loads(json.dumps(dict(metadata), allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise ValidationError(prefix + "metadata", f"expected JSON-safe values (no NaN, no objects): {exc}") from None
    if any(not isinstance(k, str) for k in metadata):
        raise ValidationError(prefix + "metadata", "expected string keys")
    session_id = item.get("session_id")
    if session_id is not None and (not isinstance(session_id, str) or not session_id.strip()):
        raise ValidationError(prefix + "session_id", "expected a non-empty string or None")
    timestamp = item.get("timestamp")
    try:
        epoch = None if timestamp is None else to_epoch(timestamp)
    except ValidationError as exc:
        raise ValidationError(prefix + "timestamp", exc.message.split(": ", 1)[-1]) from None
    chunk = item.get("chunk")
    if isinstance(chunk, ChunkMetadata):
        chunk = chunk.to_dict()
    elif chunk is not None:
        try:
            chunk = ChunkMetadata(**chunk).to_dict()
        except TypeError as exc:
            raise ValidationError(
                prefix + "chunk", f"expected parent_id, index, total[, start_word, end_word]: {exc}"
            ) from None
    return {
        "content": content,
        "type": parse_enum(MemoryType, item.get("type", "action"), prefix + "type"),
        "metadata": metadata,
        "session_id": session_id,
        "timestamp": epoch,
        "source": parse_enum(MemorySource, item.get("source", "manual"), prefix + "source"),
        "memory_class": None
        if item.get("memory_class") is None
        else parse_enum(MemoryClass, item["memory_class"], prefix + "memory_class"),
        "chunk": chunk,
    }


def parse_enum(kind: Any, value: Any, field: str) -> Any:
    """``kind(value)``, or ValidationError naming ``field`` and listing the valid values."""
    try:
        return kind(value)
    except ValueError:
        valid = ", ".join(m.value for m in kind)
        raise ValidationError(field, f"unknown value {value!r}; expected one of {valid}") from None
