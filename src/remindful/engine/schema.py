"""Every table, index, trigger and virtual table of the catalog: the one place DDL is written.

Each table is defined once, as a named constant; :data:`SCHEMA` is all of them, in order, and the
catalog runs it when it opens a store whose schema version is older than its own
(:mod:`remindful.engine.catalog`). Every statement is idempotent (``IF NOT EXISTS``), so it also
brings an old catalog up to date. :data:`HOOK_SCHEMA` is the part a hook process creates itself
when it finds no catalog yet (:mod:`remindful.engine.spool`): the spool, and what a hook
counts and audits.

Standard library only, and nothing imported at all: hook processes read this module and must stay
fast. The ``memories`` row as Python sees it (``MemoryRow``) lives in the catalog module.
"""

from __future__ import annotations

META_DDL = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""

MEMORIES_DDL = """
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
    seq INTEGER,
    scope TEXT,
    origin TEXT NOT NULL DEFAULT 'user',
    vector_room BLOB
);
DROP INDEX IF EXISTS idx_memories_type_created;
DROP INDEX IF EXISTS idx_memories_session;
DROP INDEX IF EXISTS idx_memories_created;
-- Newest first (created_at, rowid) straight from the index; expires_at last, so that a search's
-- bounded count of a broad filter reads the index alone.
CREATE INDEX IF NOT EXISTS idx_memories_type_time ON memories(type, created_at, rowid, expires_at);
CREATE INDEX IF NOT EXISTS idx_memories_session_time ON memories(session_id, created_at, rowid, expires_at);
CREATE INDEX IF NOT EXISTS idx_memories_time ON memories(created_at, rowid, expires_at);
-- A content hash is looked up by its first 16 hex digits (64 bits: two texts share them once in
-- billions of pairs, and the full hash is compared on the rows found): a quarter of the index.
DROP INDEX IF EXISTS idx_memories_hash;
CREATE INDEX IF NOT EXISTS idx_memories_hash16 ON memories(substr(content_hash, 1, 16));
CREATE INDEX IF NOT EXISTS idx_memories_unindexed ON memories(indexed) WHERE indexed = 0;
"""

#: Schema 8 gave every memory a scope (:mod:`remindful.engine.scopes`): ``project:<key>``, ``user``,
#: or NULL (unscoped). A catalog created before has the column added by this statement (the
#: catalog runs it when the column is missing, before :data:`SCHEMA`), and its rows a scope by
#: :meth:`remindful.engine.catalog.Catalog` 's upgrade.
ADD_SCOPE_COLUMN = "ALTER TABLE memories ADD COLUMN scope TEXT"

#: Schema 10 records every memory's origin, whose words it holds (:func:`remindful.model.make_origin`).
#: A catalog created before has the column added by this statement and its rows given an origin
#: derived from their source and metadata (:func:`remindful.model.derive_origin`) by the upgrade.
ADD_ORIGIN_COLUMN = "ALTER TABLE memories ADD COLUMN origin TEXT NOT NULL DEFAULT 'user'"

#: Schema 14 keeps a row committed without its vector (``performance.defer_embedding``) at the size
#: it will have: ``vector_room`` holds as many zero bytes as the vector will take, and the update that
#: saves the vector empties it. A row that grew in place split its page: the table's pages were 78 %
#: full, and 8 % of the catalog was room no row used. A catalog created before gets the column here.
ADD_VECTOR_ROOM_COLUMN = "ALTER TABLE memories ADD COLUMN vector_room BLOB"

#: The scopes: newest first within a scope from the index, as the time indexes do; how many
#: memories each scope holds, kept by triggers (NULL counted as ''), so that a search knows how
#: much a scope restricts before it reads any row; the projects that scopes name (the first root
#: seen is a project's place); and the directories the user bound to a project
#: (``remindful scopes bind``: :mod:`remindful.engine.projects`, *Claims*).
SCOPES_DDL = """
CREATE INDEX IF NOT EXISTS idx_memories_scope_time ON memories(scope, created_at, rowid, expires_at);
CREATE TABLE IF NOT EXISTS scope_counts (scope TEXT PRIMARY KEY, n INTEGER NOT NULL) WITHOUT ROWID;
CREATE TRIGGER IF NOT EXISTS memories_scope_ai AFTER INSERT ON memories BEGIN
    INSERT INTO scope_counts(scope, n) VALUES (coalesce(new.scope, ''), 1)
    ON CONFLICT(scope) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER IF NOT EXISTS memories_scope_ad AFTER DELETE ON memories BEGIN
    UPDATE scope_counts SET n = n - 1 WHERE scope = coalesce(old.scope, '');
END;
CREATE TRIGGER IF NOT EXISTS memories_scope_au AFTER UPDATE OF scope ON memories BEGIN
    UPDATE scope_counts SET n = n - 1 WHERE scope = coalesce(old.scope, '');
    INSERT INTO scope_counts(scope, n) VALUES (coalesce(new.scope, ''), 1)
    ON CONFLICT(scope) DO UPDATE SET n = n + 1;
END;
CREATE TABLE IF NOT EXISTS projects (
    key TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    root TEXT NOT NULL DEFAULT '',
    first_seen REAL NOT NULL,
    last_seen REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS project_bindings (
    root TEXT PRIMARY KEY,
    key TEXT NOT NULL,
    name TEXT NOT NULL,
    bound_at REAL NOT NULL
);
"""

#: How both full-text indexes split and stem text (what a term matches).
FTS_TOKENIZE = "porter unicode61 remove_diacritics 2"

#: The lexical index over the memories' content, kept by triggers.
MEMORIES_FTS_DDL = f"""
CREATE VIRTUAL TABLE IF NOT EXISTS memories_fts USING fts5(
    content, content='memories', content_rowid='rowid', tokenize='{FTS_TOKENIZE}'
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
"""

#: How many memories each type holds, kept by triggers in the writing transaction: searches and
#: stores need it, and a GROUP BY reads a whole index.
TYPE_COUNTS_DDL = """
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
"""

SESSIONS_DDL = """
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    started_at REAL NOT NULL,
    ended_at REAL,
    metadata TEXT NOT NULL DEFAULT '{}'
);
"""

#: The Markdown watcher's record of each file it indexed (:mod:`remindful.services.ingest.watcher`).
FILE_HASHES_DDL = """
CREATE TABLE IF NOT EXISTS file_hashes (
    path TEXT PRIMARY KEY,
    sha256 TEXT NOT NULL,
    memory_ids TEXT NOT NULL DEFAULT '[]',
    updated_at REAL NOT NULL
);
"""

AUDIT_LOG_DDL = """
CREATE TABLE IF NOT EXISTS audit_log (
    seq INTEGER PRIMARY KEY,
    at REAL NOT NULL,
    action TEXT NOT NULL,
    memory_id TEXT,
    detail TEXT
);
"""

EMBEDDING_CACHE_DDL = """
CREATE TABLE IF NOT EXISTS embedding_cache (
    model TEXT NOT NULL,
    hash TEXT NOT NULL,
    vector BLOB NOT NULL,
    PRIMARY KEY (model, hash)
) WITHOUT ROWID;
"""

#: Vectors still to remove from the index, written in the transaction that deletes the rows (so a
#: crash cannot leave a deleted memory's vector behind unnoticed); drained after the delete, oldest
#: (lowest rowid) first.
INDEX_DELETES_DDL = """
CREATE TABLE IF NOT EXISTS index_deletes (
    memory_id TEXT PRIMARY KEY,
    type TEXT NOT NULL
);
"""

#: The hook spool: events committed by hook processes and capture points, drained into memories
#: by the store owner; ``idem_key`` (unique) stops a replayed event from being spooled twice.
SPOOL_DDL = """
CREATE TABLE IF NOT EXISTS spool (
    seq INTEGER PRIMARY KEY,
    idem_key TEXT UNIQUE,
    kind TEXT NOT NULL,
    payload TEXT NOT NULL,
    created_at REAL NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    last_error TEXT
);
"""

#: Keys of drained spool rows, remembered for a while so that a replay after the drain is ignored.
SPOOL_DONE_DDL = """
CREATE TABLE IF NOT EXISTS spool_done (idem_key TEXT PRIMARY KEY, done_at REAL NOT NULL) WITHOUT ROWID;
"""

#: Counts of redactions and skipped captures (``stats().capture``).
CAPTURE_STATS_DDL = """
CREATE TABLE IF NOT EXISTS capture_stats (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
"""

#: Session context windows (:mod:`remindful.engine.windows`): each memory's text with its
#: neighbours', and the queues a large delete leaves for the background.
CONTEXT_DDL = f"""
-- Contentless (schema 12): the windows' text is rebuilt from context_members (see windows.py).
CREATE VIRTUAL TABLE IF NOT EXISTS context_fts USING fts5(
    text, content='', tokenize='{FTS_TOKENIZE}'
);
CREATE TABLE IF NOT EXISTS context_members (rowid INTEGER PRIMARY KEY, members TEXT NOT NULL, date TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS context_gone (rowid INTEGER PRIMARY KEY, content TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS idx_memories_session_seq ON memories(session_id, seq);
-- A deleted row's own window is removed by before_delete (a trigger did that until schema 4).
DROP TRIGGER IF EXISTS memories_context_ad;
-- Windows of deleted rows, and where deleted rows sat whose neighbours' windows still include
-- them: a large delete leaves both to the background (see before_delete, after_delete).
CREATE TABLE IF NOT EXISTS context_drop (rowid INTEGER PRIMARY KEY);
CREATE TABLE IF NOT EXISTS context_mend (
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;
"""

#: The learning layer's counters (``stats().learning``) and the history of reinforcements
#: (:mod:`remindful.services.learning`).
LEARNING_DDL = """
CREATE TABLE IF NOT EXISTS learning_counters (
    kind TEXT NOT NULL,
    key TEXT NOT NULL,
    value REAL NOT NULL DEFAULT 0,
    PRIMARY KEY (kind, key)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS reinforcements (
    seq INTEGER PRIMARY KEY,
    memory_id TEXT NOT NULL,
    at REAL NOT NULL,
    reason TEXT NOT NULL,
    query TEXT,
    importance REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS idx_reinforcements_memory ON reinforcements(memory_id);
"""

#: What the user deleted, or a correction replaced (:mod:`remindful.engine.repositories.capture`):
#: the hash of each one's normalised text, never the text itself, so that a later capture of the same
#: statement is not stored again while nothing of the forgotten memory stays on disk.
TOMBSTONES_DDL = """
CREATE TABLE IF NOT EXISTS tombstones (
    key TEXT PRIMARY KEY,
    buried_at REAL NOT NULL,
    reason TEXT NOT NULL,
    memory_id TEXT
) WITHOUT ROWID;
"""

#: The context injected into agents (:mod:`remindful.engine.repositories.ledger`): one row per
#: injection, with the tokens it cost, for the statistics per session and per project.
INJECTIONS_DDL = """
CREATE TABLE IF NOT EXISTS injections (
    seq INTEGER PRIMARY KEY,
    at REAL NOT NULL,
    session_id TEXT,
    project TEXT,
    event TEXT NOT NULL,
    tokens INTEGER NOT NULL,
    memory_ids TEXT NOT NULL DEFAULT '[]'
);
CREATE INDEX IF NOT EXISTS idx_injections_project ON injections(project, at);
CREATE INDEX IF NOT EXISTS idx_injections_session ON injections(session_id, at);
"""

#: The vectors of a long memory's parts (:mod:`remindful.engine.chunks`), for the text whose hash
#: they carry (``content_hash``: one written from an earlier text is never read), int8 as the
#: memories' own (:mod:`remindful.engine.vectors`), one blob per part. Dropped with their memory.
CHUNK_VECTORS_DDL = """
CREATE TABLE IF NOT EXISTS chunk_vectors (
    memory INTEGER NOT NULL,
    part INTEGER NOT NULL,
    content_hash TEXT NOT NULL,
    vector BLOB NOT NULL,
    PRIMARY KEY (memory, part)
) WITHOUT ROWID;
CREATE TRIGGER IF NOT EXISTS memories_chunks_ad AFTER DELETE ON memories BEGIN
    DELETE FROM chunk_vectors WHERE memory = old.rowid;
END;
CREATE TRIGGER IF NOT EXISTS memories_chunks_au AFTER UPDATE OF content ON memories BEGIN
    DELETE FROM chunk_vectors WHERE memory = old.rowid;
END;
"""

#: What a hook process creates when it finds no catalog (or an old one) yet: the spool and the
#: tables a hook writes besides it. The catalog creates them too, with everything else.
HOOK_SCHEMA = SPOOL_DDL + SPOOL_DONE_DDL + AUDIT_LOG_DDL + CAPTURE_STATS_DDL

#: Every table of the catalog, created at open (in this order: later statements use earlier tables).
SCHEMA = (
    META_DDL
    + MEMORIES_DDL
    + MEMORIES_FTS_DDL
    + TYPE_COUNTS_DDL
    + SESSIONS_DDL
    + FILE_HASHES_DDL
    + AUDIT_LOG_DDL
    + EMBEDDING_CACHE_DDL
    + INDEX_DELETES_DDL
    + SPOOL_DDL
    + SPOOL_DONE_DDL
    + CAPTURE_STATS_DDL
    + CONTEXT_DDL
    + LEARNING_DDL
    + TOMBSTONES_DDL
    + INJECTIONS_DDL
    + SCOPES_DDL
    + CHUNK_VECTORS_DDL
)

#: The ids a delete removes, with each one's audit reason: a temporary table of the deleting
#: connection, emptied after each delete (:meth:`remindful.engine.catalog.Catalog.delete_ids`).
DOOMED_DDL = "CREATE TEMP TABLE IF NOT EXISTS doomed (id TEXT PRIMARY KEY, reason TEXT NOT NULL)"

#: Run with every schema upgrade, after ``SCHEMA``: the counts start from the rows present.
RECOUNT_TYPES = """
DELETE FROM type_counts;
INSERT INTO type_counts(type, n) SELECT type, count(*) FROM memories GROUP BY type;
"""

#: Run after an upgrade gave the rows their scopes: the scope counts start from the rows present.
RECOUNT_SCOPES = """
DELETE FROM scope_counts;
INSERT INTO scope_counts(scope, n) SELECT coalesce(scope, ''), count(*) FROM memories GROUP BY 1;
"""

#: Columns of ``memories`` returned by reads, in this order (no embedding).
MEMORY_COLUMNS = (
    "id, type, content, metadata, source, memory_class, session_id, created_at, updated_at, importance, "
    "access_count, last_accessed, bookmarked, content_hash, chunk, expires_at, indexed, scope, origin"
)
