"""The catalog's tables, and the ``memories`` row as Python sees it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from remindful.hooks.spool import SPOOL_DDL

if TYPE_CHECKING:
    import numpy as np

SCHEMA = (
    """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS memories (
    rowid INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    type TEXT NOT NULL,
    content TEXT NOT NULL,
    metadata TEXT NOT NULL DEFAULT '{}',
    source TEXT NOT NULL,
    memory_class TEXT NOT NULL,
    session_id TEXT,
    created_at REAL NOT NULL,
    updated_at REAL,
    importance REAL NOT NULL DEFAULT 0.5,
    access_count INTEGER NOT NULL DEFAULT 0,
    last_accessed REAL,
    bookmarked INTEGER NOT NULL DEFAULT 0,
    content_hash TEXT NOT NULL,
    chunk TEXT,
    expires_at REAL,
    embedding BLOB,
    indexed INTEGER NOT NULL DEFAULT 0,
    size_bytes INTEGER NOT NULL DEFAULT 0,
    seq INTEGER
);
DROP INDEX IF EXISTS idx_memories_type_created;
DROP INDEX IF EXISTS idx_memories_session;
DROP INDEX IF EXISTS idx_memories_created;
-- Newest first (created_at, rowid) straight from the index; expires_at last, so that a search's
-- bounded count of a broad filter reads the index alone.
CREATE INDEX IF NOT EXISTS idx_memories_type_time ON memories(type, created_at, rowid, expires_at);
CREATE INDEX IF NOT EXISTS idx_memories_session_time ON memories(session_id, created_at, rowid, expires_at);
CREATE INDEX IF NOT EXISTS idx_memories_time ON memories(created_at, rowid, expires_at);
CREATE INDEX IF NOT EXISTS idx_memories_hash ON memories(content_hash);
CREATE INDEX IF NOT EXISTS idx_memories_unindexed ON memories(indexed) WHERE indexed = 0;
CREATE VIRTUAL TABLE IF NOT EXISTS memories_fts USING fts5(
    content, content='memories', content_rowid='rowid', tokenize='porter unicode61 remove_diacritics 2'
);
CREATE TRIGGER IF NOT EXISTS memories_ai AFTER INSERT ON memories BEGIN
    INSERT INTO memories_fts(rowid, content) VALUES (new.rowid, new.content);
END;
CREATE TRIGGER IF NOT EXISTS memories_ad AFTER DELETE ON memories BEGIN
    INSERT INTO memories_fts(memories_fts, rowid, content) VALUES ('delete', old.rowid, old.content);
END;
CREATE TRIGGER IF NOT EXISTS memories_au AFTER UPDATE OF content ON memories BEGIN
    INSERT INTO memories_fts(memories_fts, rowid, content) VALUES ('delete', old.rowid, old.content);
    INSERT INTO memories_fts(rowid, content) VALUES (new.rowid, new.content);
END;
-- How many memories each type holds, kept by triggers in the writing transaction: searches and
-- stores need it and a GROUP BY reads a whole index (10-15 ms at 100k memories).
CREATE TABLE IF NOT EXISTS type_counts (type TEXT PRIMARY KEY, n INTEGER NOT NULL) WITHOUT ROWID;
CREATE TRIGGER IF NOT EXISTS memories_count_ai AFTER INSERT ON memories BEGIN
    INSERT INTO type_counts(type, n) VALUES (new.type, 1) ON CONFLICT(type) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER IF NOT EXISTS memories_count_ad AFTER DELETE ON memories BEGIN
    UPDATE type_counts SET n = n - 1 WHERE type = old.type;
END;
CREATE TRIGGER IF NOT EXISTS memories_count_au AFTER UPDATE OF type ON memories BEGIN
    UPDATE type_counts SET n = n - 1 WHERE type = old.type;
    INSERT INTO type_counts(type, n) VALUES (new.type, 1) ON CONFLICT(type) DO UPDATE SET n = n + 1;
END;
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    started_at REAL NOT NULL,
    ended_at REAL,
    metadata TEXT NOT NULL DEFAULT '{}'
);
CREATE TABLE IF NOT EXISTS file_hashes (
    path TEXT PRIMARY KEY,
    sha256 TEXT NOT NULL,
    memory_ids TEXT NOT NULL DEFAULT '[]',
    updated_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS audit_log (
    seq INTEGER PRIMARY KEY,
    at REAL NOT NULL,
    action TEXT NOT NULL,
    memory_id TEXT,
    detail TEXT
);
CREATE TABLE IF NOT EXISTS embedding_cache (
    model TEXT NOT NULL,
    hash TEXT NOT NULL,
    vector BLOB NOT NULL,
    PRIMARY KEY (model, hash)
) WITHOUT ROWID;
-- Vectors still to remove from the index, written in the transaction that deletes the rows (so a
-- crash cannot leave a deleted memory's vector behind unnoticed); drained after the delete, oldest
-- (lowest rowid) first.
CREATE TABLE IF NOT EXISTS index_deletes (
    memory_id TEXT PRIMARY KEY,
    type TEXT NOT NULL
);
"""
    + SPOOL_DDL
)

#: Run with every schema upgrade, after ``SCHEMA``: the counts start from the rows present.
RECOUNT_TYPES = """
DELETE FROM type_counts;
INSERT INTO type_counts(type, n) SELECT type, count(*) FROM memories GROUP BY type;
"""

#: Columns of ``memories`` returned by reads, in this order (no embedding).
MEMORY_COLUMNS = (
    "id, type, content, metadata, source, memory_class, session_id, created_at, updated_at, importance, "
    "access_count, last_accessed, bookmarked, content_hash, chunk, expires_at, indexed"
)


@dataclass(slots=True)
class MemoryRow:
    """A ``memories`` row as stored: times are UTC epoch seconds, metadata and chunk are JSON text."""

    id: str
    type: str
    content: str
    metadata: str
    source: str
    memory_class: str
    session_id: str | None
    created_at: float
    updated_at: float | None = None
    importance: float = 0.5
    access_count: int = 0
    last_accessed: float | None = None
    bookmarked: bool = False
    content_hash: str = ""
    chunk: str | None = None
    expires_at: float | None = None
    indexed: bool = False
    embedding: np.ndarray | None = None

    @classmethod
    def from_sql(cls, row: Sequence[Any]) -> MemoryRow:
        (
            mid,
            mtype,
            content,
            metadata,
            source,
            mclass,
            session_id,
            created_at,
            updated_at,
            importance,
            access_count,
            last_accessed,
            bookmarked,
            chash,
            chunk,
            expires_at,
            indexed,
        ) = row[:17]
        return cls(
            id=mid,
            type=mtype,
            content=content,
            metadata=metadata,
            source=source,
            memory_class=mclass,
            session_id=session_id,
            created_at=created_at,
            updated_at=updated_at,
            importance=importance,
            access_count=access_count,
            last_accessed=last_accessed,
            bookmarked=bool(bookmarked),
            content_hash=chash,
            chunk=chunk,
            expires_at=expires_at,
            indexed=bool(indexed),
        )
