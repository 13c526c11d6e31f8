"""The records remindful stores and returns.

A memory id is ``{type}_{YYYYmmddHHMMSSffffff}_{uuid8}``: ids of one type sort by creation time,
and the 32 random bits make a collision within the same microsecond vanishingly unlikely.
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any


class MemoryType(StrEnum):
    """What a memory is about; each type has its own Chroma collection ``{type}_memories``."""

    SCREEN = "screen"
    ACTION = "action"
    WORKFLOW = "workflow"
    CONVERSATION = "conversation"
    DOCUMENT = "document"
    KNOWLEDGE = "knowledge"

    @property
    def collection(self) -> str:
        return f"{self.value}_memories"


class MemorySource(StrEnum):
    """Where a memory came from."""

    MANUAL = "manual"
    MCP_TOOL = "mcp_tool"
    HOOK = "hook"
    RESPONSE = "response"
    MD_FILE = "md_file"
    CONVERSATION = "conversation"
    CORRECTION = "correction"
    CONFIG = "config"
    WORKFLOW_PATTERN = "workflow_pattern"
    IMPORT = "import"


class MemoryClass(StrEnum):
    """The cognitive class of a memory."""

    SEMANTIC = "semantic"
    EPISODIC = "episodic"
    PROCEDURAL = "procedural"


#: The class a memory gets when the caller names none.
DEFAULT_CLASS: dict[MemoryType, MemoryClass] = {
    MemoryType.SCREEN: MemoryClass.EPISODIC,
    MemoryType.ACTION: MemoryClass.EPISODIC,
    MemoryType.WORKFLOW: MemoryClass.PROCEDURAL,
    MemoryType.CONVERSATION: MemoryClass.EPISODIC,
    MemoryType.DOCUMENT: MemoryClass.SEMANTIC,
    MemoryType.KNOWLEDGE: MemoryClass.SEMANTIC,
}


def utcnow() -> datetime:
    return datetime.now(UTC)


def new_memory_id(memory_type: MemoryType, at: datetime | None = None) -> str:
    """``{type}_{YYYYmmddHHMMSSffffff}_{uuid8}`` in UTC."""
    at = (at or utcnow()).astimezone(UTC)
    # The year is padded by hand: strftime's %Y writes year 1 as "1", not "0001".
    return f"{memory_type.value}_{at.year:04d}{at:%m%d%H%M%S%f}_{uuid.uuid4().hex[:8]}"


def content_hash(text: str) -> str:
    """SHA-256 of the text, hex: the key of the embedding cache and of dedup by identity."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True, slots=True)
class ChunkMetadata:
    """Where a chunk sits in its parent (a Markdown file or a long response)."""

    parent_id: str
    index: int
    total: int
    start_word: int = 0
    end_word: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(slots=True)
class Memory:
    """One stored memory. ``created_at`` is timezone-aware UTC."""

    id: str
    type: MemoryType
    content: str
    metadata: dict[str, Any]
    source: MemorySource
    memory_class: MemoryClass
    session_id: str | None
    created_at: datetime
    importance: float = 0.5
    access_count: int = 0
    last_accessed: datetime | None = None
    bookmarked: bool = False
    content_hash: str = ""
    chunk: ChunkMetadata | None = None
    expires_at: datetime | None = None
    updated_at: datetime | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe form (datetimes as ISO 8601)."""
        return {
            "id": self.id,
            "type": self.type.value,
            "content": self.content,
            "metadata": self.metadata,
            "source": self.source.value,
            "memory_class": self.memory_class.value,
            "session_id": self.session_id,
            "created_at": self.created_at.isoformat(),
            "importance": self.importance,
            "access_count": self.access_count,
            "last_accessed": self.last_accessed.isoformat() if self.last_accessed else None,
            "bookmarked": self.bookmarked,
            "content_hash": self.content_hash,
            "chunk": self.chunk.to_dict() if self.chunk else None,
            "expires_at": self.expires_at.isoformat() if self.expires_at else None,
            "updated_at": self.updated_at.isoformat() if self.updated_at else None,
        }


@dataclass(frozen=True, slots=True)
class SearchHit:
    """One search result. ``score`` is a calibrated relevance in [0, 1], the same scale for every
    query (see :mod:`remindful.engine.calibration`); ``sources`` names the retrieval spaces
    (``dense``, ``lexical``) that found it; ``similar`` counts the near-duplicates this hit stands
    for ("+29 similar") and ``similar_ids`` lists their ids; ``superseded_by`` is the id of a newer
    memory about the same subject."""

    id: str
    type: MemoryType
    content: str
    metadata: dict[str, Any]
    score: float
    created_at: datetime
    session_id: str | None = None
    source: MemorySource = MemorySource.MANUAL
    sources: tuple[str, ...] = field(default_factory=tuple)
    similar: int = 0
    superseded_by: str | None = None
    similar_ids: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": self.type.value,
            "content": self.content,
            "metadata": self.metadata,
            "score": round(self.score, 6),
            "created_at": self.created_at.isoformat(),
            "session_id": self.session_id,
            "source": self.source.value,
            "sources": list(self.sources),
            "similar": self.similar,
            "similar_ids": list(self.similar_ids),
            "superseded_by": self.superseded_by,
        }


@dataclass(frozen=True, slots=True)
class Context:
    """What context injection gives an agent: ``text``, the block a hook injects ("" when no
    memory is relevant enough: then nothing, not even a header, is injected), and ``hits``, the
    memories in it, in order."""

    text: str
    hits: tuple[SearchHit, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.text)

    def to_dict(self) -> dict[str, Any]:
        return {"context": self.text, "hits": [hit.to_dict() for hit in self.hits]}


@dataclass(slots=True)
class Session:
    """A run of an agent or server; memories carry its id."""

    id: str
    started_at: datetime
    ended_at: datetime | None = None
    memory_count: int = 0
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "started_at": self.started_at.isoformat(),
            "ended_at": self.ended_at.isoformat() if self.ended_at else None,
            "memory_count": self.memory_count,
            "metadata": self.metadata,
        }
