"""Argument checks and the catalog-row → :class:`~remindful.model.Memory` conversion behind
:class:`~remindful.manager.MemoryManager`. Each check raises ValidationError naming the field."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from remindful.catalog import MemoryRow
from remindful.errors import ValidationError
from remindful.model import ChunkMetadata, Memory, MemoryClass, MemorySource, MemoryType
from remindful.validation import parse_enum


def _to_memory(row: MemoryRow) -> Memory:
    chunk = json.loads(row.chunk) if row.chunk else None
    return Memory(
        id=row.id,
        type=MemoryType(row.type),
        content=row.content,
        metadata=json.loads(row.metadata),
        source=MemorySource(row.source),
        memory_class=MemoryClass(row.memory_class),
        session_id=row.session_id,
        created_at=datetime.fromtimestamp(row.created_at, UTC),
        importance=row.importance,
        access_count=row.access_count,
        last_accessed=datetime.fromtimestamp(row.last_accessed, UTC) if row.last_accessed else None,
        bookmarked=row.bookmarked,
        content_hash=row.content_hash,
        chunk=ChunkMetadata(**chunk) if chunk else None,
        expires_at=datetime.fromtimestamp(row.expires_at, UTC) if row.expires_at else None,
        updated_at=datetime.fromtimestamp(row.updated_at, UTC) if row.updated_at else None,
    )


def _text(value: Any, field: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValidationError(field, "expected a non-empty string")
    return value


def _type(value: Any) -> MemoryType:
    result: MemoryType = parse_enum(MemoryType, value, "type")
    return result


def _source(value: Any) -> MemorySource:
    result: MemorySource = parse_enum(MemorySource, value, "source")
    return result


def _bounded(value: Any, field: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValidationError(field, f"expected an integer from {low} to {high}, got {value!r}")
    return value
