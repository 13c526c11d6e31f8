"""Every table, index, function and trigger of the PostgreSQL catalog: the one place its DDL is written.

The schema is versioned: :data:`MIGRATIONS` lists, for each version, the statements that bring a
database of the version before it up to it; ``schema_version`` holds the version a database is at.
:class:`~remindful.engine.postgres.catalog.PostgresCatalog` runs the missing migrations at open, in
one transaction under an advisory lock (two processes opening a new database at once migrate it
once), and refuses a database of a newer version.

The tables mean what their SQLite namesakes mean (:mod:`remindful.engine.schema`), with two
differences. The lexical spaces are PostgreSQL's own full-text search: ``memories.content_tsv``
and ``context_windows.tsv`` are ``tsvector`` columns generated with the ``english`` configuration
(Snowball stemming, English stop words), each under a GIN index; FTS5's virtual tables and their
triggers have no counterpart. And the counts of each type and scope are kept by PL/pgSQL triggers
in the writing transaction, as SQLite's triggers keep them.

Standard library only, nothing imported: the DDL is text.
"""

from __future__ import annotations

#: The full-text configuration of both lexical spaces (stemming and stop words).
TEXT_SEARCH_CONFIG = "english"

_V1 = [
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    """
CREATE TABLE IF NOT EXISTS memories (
    rowid BIGSERIAL PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    type TEXT NOT NULL,
    content TEXT NOT NULL,
    metadata TEXT NOT NULL DEFAULT '{}',
    source TEXT NOT NULL,
    memory_class TEXT NOT NULL,
    session_id TEXT,
    created_at DOUBLE PRECISION NOT NULL,
    updated_at DOUBLE PRECISION,
    importance DOUBLE PRECISION NOT NULL DEFAULT 0.5,
    access_count INTEGER NOT NULL DEFAULT 0,
    last_accessed DOUBLE PRECISION,
    bookmarked INTEGER NOT NULL DEFAULT 0,
    content_hash TEXT NOT NULL,
    chunk TEXT,
    expires_at DOUBLE PRECISION,
    embedding BYTEA,
    indexed INTEGER NOT NULL DEFAULT 0,
    size_bytes BIGINT NOT NULL DEFAULT 0,
    seq INTEGER,
    scope TEXT,
    -- who wrote it (a team member's name; NULL: the store's owner) and how often it changed
    author TEXT,
    version INTEGER NOT NULL DEFAULT 1,
    content_tsv tsvector GENERATED ALWAYS AS (to_tsvector('english', content)) STORED
)""",
    "CREATE INDEX IF NOT EXISTS idx_memories_type_time ON memories(type, created_at, rowid)",
    "CREATE INDEX IF NOT EXISTS idx_memories_session_time ON memories(session_id, created_at, rowid)",
    "CREATE INDEX IF NOT EXISTS idx_memories_time ON memories(created_at, rowid)",
    "CREATE INDEX IF NOT EXISTS idx_memories_scope_time ON memories(scope, created_at, rowid)",
    "CREATE INDEX IF NOT EXISTS idx_memories_hash ON memories(content_hash)",
    "CREATE INDEX IF NOT EXISTS idx_memories_unindexed ON memories(indexed) WHERE indexed = 0",
    "CREATE INDEX IF NOT EXISTS idx_memories_session_seq ON memories(session_id, seq)",
    "CREATE INDEX IF NOT EXISTS idx_memories_fts ON memories USING GIN (content_tsv)",
    # The counts of each type and scope, kept in the writing transaction ('' counts the unscoped).
    "CREATE TABLE IF NOT EXISTS type_counts (type TEXT PRIMARY KEY, n BIGINT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS scope_counts (scope TEXT PRIMARY KEY, n BIGINT NOT NULL)",
    """
CREATE OR REPLACE FUNCTION remindful_count_rows() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('DELETE', 'UPDATE') THEN
        UPDATE type_counts SET n = n - 1 WHERE type = OLD.type;
        UPDATE scope_counts SET n = n - 1 WHERE scope = coalesce(OLD.scope, '');
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        INSERT INTO type_counts AS t (type, n) VALUES (NEW.type, 1)
            ON CONFLICT (type) DO UPDATE SET n = t.n + 1;
        INSERT INTO scope_counts AS s (scope, n) VALUES (coalesce(NEW.scope, ''), 1)
            ON CONFLICT (scope) DO UPDATE SET n = s.n + 1;
    END IF;
    RETURN NULL;
END $$""",
    "DROP TRIGGER IF EXISTS memories_count_ai ON memories",
    "CREATE TRIGGER memories_count_ai AFTER INSERT OR DELETE ON memories "
    "FOR EACH ROW EXECUTE FUNCTION remindful_count_rows()",
    "DROP TRIGGER IF EXISTS memories_count_au ON memories",
    "CREATE TRIGGER memories_count_au AFTER UPDATE OF type, scope ON memories "
    "FOR EACH ROW WHEN (OLD.type IS DISTINCT FROM NEW.type OR OLD.scope IS DISTINCT FROM NEW.scope) "
    "EXECUTE FUNCTION remindful_count_rows()",
    """
CREATE TABLE IF NOT EXISTS projects (
    key TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    root TEXT NOT NULL DEFAULT '',
    first_seen DOUBLE PRECISION NOT NULL,
    last_seen DOUBLE PRECISION NOT NULL
)""",
    """
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    started_at DOUBLE PRECISION NOT NULL,
    ended_at DOUBLE PRECISION,
    metadata TEXT NOT NULL DEFAULT '{}'
)""",
    """
CREATE TABLE IF NOT EXISTS file_hashes (
    path TEXT PRIMARY KEY,
    sha256 TEXT NOT NULL,
    memory_ids TEXT NOT NULL DEFAULT '[]',
    updated_at DOUBLE PRECISION NOT NULL
)""",
    """
CREATE TABLE IF NOT EXISTS audit_log (
    seq BIGSERIAL PRIMARY KEY,
    at DOUBLE PRECISION NOT NULL,
    action TEXT NOT NULL,
    memory_id TEXT,
    detail TEXT
)""",
    """
CREATE TABLE IF NOT EXISTS embedding_cache (
    model TEXT NOT NULL,
    hash TEXT NOT NULL,
    vector BYTEA NOT NULL,
    PRIMARY KEY (model, hash)
)""",
    """
CREATE TABLE IF NOT EXISTS index_deletes (
    seq BIGSERIAL,
    memory_id TEXT PRIMARY KEY,
    type TEXT NOT NULL
)""",
    # The spool the drainers of every machine hand their events to, and the keys they drained:
    # a replayed event (a machine that lost its acknowledgement) is recognised here.
    """
CREATE TABLE IF NOT EXISTS spool (
    seq BIGSERIAL PRIMARY KEY,
    idem_key TEXT UNIQUE,
    kind TEXT NOT NULL,
    payload TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    last_error TEXT
)""",
    "CREATE TABLE IF NOT EXISTS spool_done (idem_key TEXT PRIMARY KEY, done_at DOUBLE PRECISION NOT NULL)",
    "CREATE TABLE IF NOT EXISTS capture_stats (name TEXT PRIMARY KEY, value BIGINT NOT NULL)",
    # Session windows (remindful.engine.windows): each memory's text with its neighbours' and its date.
    f"""
CREATE TABLE IF NOT EXISTS context_windows (
    rowid BIGINT PRIMARY KEY,
    text TEXT NOT NULL,
    tsv tsvector GENERATED ALWAYS AS (to_tsvector('{TEXT_SEARCH_CONFIG}', text)) STORED
)""",
    "CREATE INDEX IF NOT EXISTS idx_context_fts ON context_windows USING GIN (tsv)",
    "CREATE TABLE IF NOT EXISTS context_drop (rowid BIGINT PRIMARY KEY)",
    "CREATE TABLE IF NOT EXISTS context_mend (session_id TEXT NOT NULL, seq INTEGER NOT NULL, "
    "PRIMARY KEY (session_id, seq))",
    """
CREATE TABLE IF NOT EXISTS learning_counters (
    kind TEXT NOT NULL,
    key TEXT NOT NULL,
    value DOUBLE PRECISION NOT NULL DEFAULT 0,
    PRIMARY KEY (kind, key)
)""",
    """
CREATE TABLE IF NOT EXISTS reinforcements (
    seq BIGSERIAL PRIMARY KEY,
    memory_id TEXT NOT NULL,
    at DOUBLE PRECISION NOT NULL,
    reason TEXT NOT NULL,
    query TEXT,
    importance DOUBLE PRECISION NOT NULL
)""",
    "CREATE INDEX IF NOT EXISTS idx_reinforcements_memory ON reinforcements(memory_id)",
    """
CREATE TABLE IF NOT EXISTS tombstones (
    key TEXT PRIMARY KEY,
    buried_at DOUBLE PRECISION NOT NULL,
    reason TEXT NOT NULL,
    memory_id TEXT
)""",
    """
CREATE TABLE IF NOT EXISTS injections (
    seq BIGSERIAL PRIMARY KEY,
    at DOUBLE PRECISION NOT NULL,
    session_id TEXT,
    project TEXT,
    event TEXT NOT NULL,
    tokens INTEGER NOT NULL,
    memory_ids TEXT NOT NULL DEFAULT '[]'
)""",
    "CREATE INDEX IF NOT EXISTS idx_injections_project ON injections(project, at)",
    "CREATE INDEX IF NOT EXISTS idx_injections_session ON injections(session_id, at)",
]

#: Version 2: where each memory's words came from (``origin``: 'user', 'assistant', 'tool:NAME',
#: 'file:PATH', 'web:URL', ...), as the SQLite catalog records it; NULL for rows written before.
_V2 = ["ALTER TABLE memories ADD COLUMN IF NOT EXISTS origin TEXT"]

#: Version 3: the directories the user bound to a project (``remindful scopes bind``), as the
#: SQLite catalog's ``project_bindings``.
_V3 = [
    """
CREATE TABLE IF NOT EXISTS project_bindings (
    root TEXT PRIMARY KEY,
    key TEXT NOT NULL,
    name TEXT NOT NULL,
    bound_at DOUBLE PRECISION NOT NULL
)"""
]

#: Version 4: the people of a team store (:mod:`remindful.engine.postgres.team`): each one's name,
#: the SHA-256 of the token the admin issued (never the token), and when it was revoked.
_V4 = [
    """
CREATE TABLE IF NOT EXISTS people (
    name TEXT PRIMARY KEY,
    token_hash TEXT NOT NULL UNIQUE,
    added_at DOUBLE PRECISION NOT NULL,
    revoked_at DOUBLE PRECISION
)""",
    "CREATE INDEX IF NOT EXISTS idx_memories_author ON memories(author)",
]

#: Version 5: every memory has an origin, as on SQLite (``NOT NULL DEFAULT 'user'``): the catalog
#: first gives the rows written before theirs (:data:`ORIGINS_VERSION`), from their source and
#: metadata as SQLite's upgrade does (:func:`remindful.model.derive_origin`).
_V5 = ["ALTER TABLE memories ALTER COLUMN origin SET DEFAULT 'user', ALTER COLUMN origin SET NOT NULL"]

#: The tables that hold memories' text or what the team keeps beside them: row-level security
#: admits a statement on them only with a valid token (or, before the team has people, without).
#: ``people`` is not among them: nobody but the admin (the tables' owner) reads it.
TEAM_TABLES = (
    "meta",
    "type_counts",
    "scope_counts",
    "projects",
    "sessions",
    "file_hashes",
    "audit_log",
    "embedding_cache",
    "index_deletes",
    "spool",
    "spool_done",
    "capture_stats",
    "context_drop",
    "context_mend",
    "learning_counters",
    "reinforcements",
    "tombstones",
    "injections",
    "project_bindings",
)
#: The sequences of their BIGSERIAL columns (members insert rows that take numbers from them).
_SEQUENCES = (
    "memories_rowid_seq",
    "audit_log_seq_seq",
    "index_deletes_seq_seq",
    "spool_seq_seq",
    "reinforcements_seq_seq",
    "injections_seq_seq",
)
#: The person of this session's token, in a policy: an InitPlan, evaluated once per statement (and
#: first, so that a refused token is refused whatever the rows). NULL: the single user of a store
#: without a team, who may do everything: ``author IS NOT DISTINCT FROM coalesce(ME, author)``
#: holds then for every row, and for a person's own rows otherwise.
_ME = "(SELECT remindful_person())"
_OWN = f"author IS NOT DISTINCT FROM coalesce({_ME}, author)"


def _sees(author: str, scope: str) -> str:
    """:data:`_SEES` of a table whose memory's author and scope are the columns ``author`` and ``scope``."""
    return f"({author} IS NOT DISTINCT FROM coalesce({_ME}, {author}) OR {scope} IS DISTINCT FROM 'user')"


#: A memory this session's person may see: any but another person's user-scope (private) memory.
_SEES = _sees("author", "scope")
#: A memory this session's person may delete: their own, or one of a project (the team's).
_MAY_DELETE = f"({_OWN} OR scope LIKE 'project:%')"
#: A statement with a valid token (or before the team has people): always true, else an error.
_ADMITTED = f"(coalesce({_ME}, '') IS NOT NULL)"

#: Version 6: what each person may see and change, enforced by the database itself (row-level
#: security, forced on the tables' owner too; superusers and BYPASSRLS roles are not subject to it).
#: A connection names its person by ``set_config('remindful.token', TOKEN, false)`` (the catalog
#: does it once per connection, a bound parameter: never in a statement's text).
#: :func:`remindful_person` (SECURITY DEFINER: it alone reads ``people``) turns the token into the
#: person's name for each statement: NULL while the team has no people (the store's single user,
#: allowed everything); an error (SQLSTATE 42501) for no token once it has, and for an unknown or
#: revoked token, so a revoked token reads and writes nothing from the next statement on.
#: ``memories``: SELECT (and the rows an UPDATE reaches) ``_SEES``; INSERT only as oneself (the
#: author must be the token's person: one check per statement, not per row); DELETE ``_MAY_DELETE``; a
#: trigger refuses a change of a memory's text, type, scope or origin by anyone but its author on
#: a memory outside a project, and any change of its author. ``context_windows`` (memories' text
#: with their neighbours', a private neighbour's only in a private memory's): read with its memory. Every table of
#: :data:`TEAM_TABLES`: a statement with a valid token (or before the team has people).
_V6 = [
    """
CREATE OR REPLACE FUNCTION remindful_person() RETURNS text
LANGUAGE plpgsql STABLE SECURITY DEFINER AS $$
DECLARE
    token text := nullif(current_setting('remindful.token', true), '');
    who text;
BEGIN
    IF token IS NULL THEN
        IF EXISTS (SELECT 1 FROM people) THEN
            RAISE EXCEPTION 'this store has a team: set catalog.token (REMINDFUL_CATALOG__TOKEN) to your token'
                USING ERRCODE = '42501';
        END IF;
        RETURN NULL;
    END IF;
    SELECT p.name INTO who FROM people p
        WHERE p.token_hash = encode(sha256(convert_to(token, 'UTF8')), 'hex') AND p.revoked_at IS NULL;
    IF who IS NULL THEN
        RAISE EXCEPTION 'the token of catalog.token is unknown or revoked: ask the store''s admin for one'
            USING ERRCODE = '42501';
    END IF;
    RETURN who;
END $$""",
    # A SECURITY DEFINER function finds its tables in its own schema, never in one a caller put first.
    "DO $do$ BEGIN EXECUTE format('ALTER FUNCTION remindful_person() SET search_path = %I, pg_temp', "
    "current_schema()); END $do$",
    """
CREATE OR REPLACE FUNCTION remindful_memory_person() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    me text;
BEGIN
    -- A role that row-level security does not bind (a superuser: the admin's repairs) without a token.
    IF nullif(current_setting('remindful.token', true), '') IS NULL
       AND (SELECT rolsuper OR rolbypassrls FROM pg_roles WHERE rolname = current_user) THEN
        RETURN NEW;
    END IF;
    me := remindful_person();
    IF me IS NULL THEN
        RETURN NEW;
    END IF;
    IF NEW.author IS DISTINCT FROM OLD.author THEN
        RAISE EXCEPTION 'memory % keeps its author', OLD.id USING ERRCODE = '42501';
    END IF;
    IF (NEW.content, NEW.content_hash, NEW.type, NEW.scope, NEW.origin)
            IS DISTINCT FROM (OLD.content, OLD.content_hash, OLD.type, OLD.scope, OLD.origin)
       AND OLD.author IS DISTINCT FROM me AND coalesce(OLD.scope, '') NOT LIKE 'project:%' THEN
        RAISE EXCEPTION 'memory % is not one this token may correct (its author may, and anyone a project''s)',
            OLD.id USING ERRCODE = '42501';
    END IF;
    RETURN NEW;
END $$""",
    "DROP TRIGGER IF EXISTS memories_person_bu ON memories",
    "CREATE TRIGGER memories_person_bu BEFORE UPDATE OF content, content_hash, type, scope, origin, author "
    "ON memories FOR EACH ROW EXECUTE FUNCTION remindful_memory_person()",
    "ALTER TABLE memories ENABLE ROW LEVEL SECURITY",
    "ALTER TABLE memories FORCE ROW LEVEL SECURITY",
    "DROP POLICY IF EXISTS memories_read ON memories",
    f"CREATE POLICY memories_read ON memories FOR SELECT USING {_SEES}",
    "DROP POLICY IF EXISTS memories_insert ON memories",
    f"CREATE POLICY memories_insert ON memories FOR INSERT WITH CHECK ({_OWN})",
    "DROP POLICY IF EXISTS memories_update ON memories",
    f"CREATE POLICY memories_update ON memories FOR UPDATE USING {_SEES} WITH CHECK {_SEES}",
    "DROP POLICY IF EXISTS memories_delete ON memories",
    f"CREATE POLICY memories_delete ON memories FOR DELETE USING {_MAY_DELETE}",
    "ALTER TABLE context_windows ENABLE ROW LEVEL SECURITY",
    "ALTER TABLE context_windows FORCE ROW LEVEL SECURITY",
    "DROP POLICY IF EXISTS windows_read ON context_windows",
    # (A window holds private neighbours' text only if its memory is private: windows.py.)
    "CREATE POLICY windows_read ON context_windows FOR SELECT "
    "USING (EXISTS (SELECT 1 FROM memories m WHERE m.rowid = context_windows.rowid))",
    "DROP POLICY IF EXISTS windows_insert ON context_windows",
    f"CREATE POLICY windows_insert ON context_windows FOR INSERT WITH CHECK {_ADMITTED}",
    "DROP POLICY IF EXISTS windows_update ON context_windows",
    f"CREATE POLICY windows_update ON context_windows FOR UPDATE USING {_ADMITTED} WITH CHECK {_ADMITTED}",
    "DROP POLICY IF EXISTS windows_delete ON context_windows",
    f"CREATE POLICY windows_delete ON context_windows FOR DELETE USING {_ADMITTED}",
    *(
        statement
        for table in TEAM_TABLES
        for statement in (
            f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY",
            f"ALTER TABLE {table} FORCE ROW LEVEL SECURITY",
            f"DROP POLICY IF EXISTS team_member ON {table}",
            f"CREATE POLICY team_member ON {table} USING {_ADMITTED} WITH CHECK {_ADMITTED}",
        )
    ),
    # Under row-level security PostgreSQL uses an index only for a condition whose function is
    # LEAKPROOF; full-text matching (tsvector @@ tsquery) is not marked so, and a member's lexical
    # search would scan every memory instead of the GIN index. Matching raises no error that
    # depends on the row, so a superuser's migration marks it (in this database only); another
    # admin is told how (README: a team store's setup).
    """
DO $do$ BEGIN
    IF (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN
        ALTER FUNCTION ts_match_vq(tsvector, tsquery) LEAKPROOF;
    ELSE
        RAISE NOTICE 'remindful: a superuser should run ALTER FUNCTION ts_match_vq(tsvector, tsquery) LEAKPROOF '
            'in this database, or full-text search under row-level security cannot use its index';
    END IF;
END $do$""",
    # The members' rights (row-level security then says which rows): given to PUBLIC, so that the
    # admin only creates a login role per person (or one for the team) and lets it connect.
    "REVOKE ALL ON people FROM PUBLIC",
    "GRANT SELECT ON schema_version TO PUBLIC",
    f"GRANT SELECT, INSERT, UPDATE, DELETE ON memories, context_windows, {', '.join(TEAM_TABLES)} TO PUBLIC",
    f"GRANT USAGE, SELECT ON SEQUENCE {', '.join(_SEQUENCES)} TO PUBLIC",
]

#: Version 7: the full-text indexes keep short pending lists. A GIN index takes new entries into
#: an unsorted pending list (``fastupdate``) that every query of it reads whole, up to
#: ``gin_pending_list_limit`` (4 MB by default: a lexical statement on a freshly written store read
#: 400 pages of it, each count of a term again); at 256 kB the writer that fills it merges it into
#: the index (a few milliseconds, once per some fifty stores) and a query reads little of it.
#: The lists written before are merged now.
PENDING_LIST_KB = 256
_V7 = [
    f"ALTER INDEX idx_memories_fts SET (gin_pending_list_limit = {PENDING_LIST_KB})",
    f"ALTER INDEX idx_context_fts SET (gin_pending_list_limit = {PENDING_LIST_KB})",
    "SELECT gin_clean_pending_list('idx_memories_fts'), gin_clean_pending_list('idx_context_fts')",
]

#: Version 8: who may run retention and dedup on what, enforced by the database, and who deleted
#: what. Each audit entry records its person (``audit_log.person``: the token's, set by a trigger
#: whatever the statement says; NULL for the store's admin and its single user). A deletion a
#: policy makes is recorded as such (action ``retention:<reason>`` or ``dedup``, written before the
#: row is deleted in the same transaction: :meth:`PostgresCatalog.delete_in`); for a person the
#: trigger admits it only for a memory that person wrote outside any project (their reach:
#: :class:`~remindful.engine.postgres.repositories.PostgresRetentionRepository`), so that no
#: member's local ``retention.*`` settings delete the team's (a project's) memories or another
#: person's: the projects are cleaned by the admin's policy. Deleting a project's memory by hand
#: stays every member's right (version 6), now with their name in the log.
_V8 = [
    "ALTER TABLE audit_log ADD COLUMN IF NOT EXISTS person TEXT",
    """
CREATE OR REPLACE FUNCTION remindful_audit_person() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    me text;
    found_author text;
    found_scope text;
BEGIN
    IF nullif(current_setting('remindful.token', true), '') IS NULL
       AND (SELECT rolsuper OR rolbypassrls FROM pg_roles WHERE rolname = current_user) THEN
        NEW.person := NULL;
        RETURN NEW;
    END IF;
    me := remindful_person();
    NEW.person := me;
    IF me IS NULL OR NOT (NEW.action = 'dedup' OR NEW.action LIKE 'retention:%') THEN
        RETURN NEW;
    END IF;
    SELECT m.author, m.scope INTO found_author, found_scope FROM memories m WHERE m.id = NEW.memory_id;
    IF FOUND AND (found_author IS DISTINCT FROM me OR coalesce(found_scope, '') LIKE 'project:%') THEN
        RAISE EXCEPTION 'memory % is not one this token''s retention or dedup may delete (a person''s policy cleans '
            'what they wrote outside projects; the store''s admin cleans the projects)', NEW.memory_id
            USING ERRCODE = '42501';
    END IF;
    RETURN NEW;
END $$""",
    "DROP TRIGGER IF EXISTS audit_person_bi ON audit_log",
    "CREATE TRIGGER audit_person_bi BEFORE INSERT ON audit_log FOR EACH ROW EXECUTE FUNCTION remindful_audit_person()",
    "CREATE INDEX IF NOT EXISTS idx_audit_memory ON audit_log(memory_id)",
]

#: Version 9: the index's bookkeeping sees every row. A process reconciles the Chroma server's
#: vectors with the catalog's indexed rows (:meth:`IndexView.reconcile
#: <remindful.engine.index_view.IndexView.reconcile>`); under row-level security a person's reads
#: miss the others' private memories, whose vectors then looked stale and were deleted (and put
#: back by their owner's next open). These functions run as the schema's owner (the store's
#: admin: a superuser or a ``BYPASSRLS`` role, which row-level security does not bind) and return
#: only ids and counts. ``remindful_sees_every_row()`` says whether they do see every row (an owner
#: bound by row-level security sees what the caller sees: the catalog then keeps every vector).
_V9 = [
    """
CREATE OR REPLACE FUNCTION remindful_sees_every_row() RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER AS $$
    SELECT coalesce((SELECT rolsuper OR rolbypassrls FROM pg_roles WHERE rolname = current_user), false)
$$""",
    """
CREATE OR REPLACE FUNCTION remindful_indexed_ids(memory_type text) RETURNS SETOF text
LANGUAGE sql STABLE SECURITY DEFINER AS $$
    SELECT id FROM memories WHERE type = memory_type AND indexed = 1
$$""",
    """
CREATE OR REPLACE FUNCTION remindful_indexed_count(memory_type text) RETURNS bigint
LANGUAGE sql STABLE SECURITY DEFINER AS $$
    SELECT count(*) FROM memories WHERE type = memory_type AND indexed = 1
$$""",
    *(
        "DO $do$ BEGIN EXECUTE format('ALTER FUNCTION " + signature + " SET search_path = %I, pg_temp', "
        "current_schema()); END $do$"
        for signature in (
            "remindful_sees_every_row()",
            "remindful_indexed_ids(text)",
            "remindful_indexed_count(text)",
        )
    ),
]


def _term_counts_function(team_windows: str) -> str:
    """``remindful_term_counts``: ``team_windows`` counts a term's windows on a team store."""
    return f"""
CREATE OR REPLACE FUNCTION remindful_term_counts(lexical_space text, terms text[], cap integer)
RETURNS TABLE (term text, n integer, size bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER AS $$
#variable_conflict use_column
DECLARE
    t text;
    c integer;
    known term_counts%ROWTYPE;
    team boolean := remindful_has_team();
    now_size bigint := (SELECT coalesce(max(rowid), 0) FROM memories);
BEGIN
    -- A refused token counts nothing (a role that row-level security does not bind, without a
    -- token, is the admin's process: as its reads, its counts need no person).
    IF nullif(current_setting('remindful.token', true), '') IS NOT NULL
       OR NOT (SELECT rolsuper OR rolbypassrls FROM pg_roles WHERE rolname = session_user) THEN
        PERFORM remindful_person();
    END IF;
    FOREACH t IN ARRAY terms LOOP
        SELECT * INTO known FROM term_counts tc WHERE tc.space = lexical_space AND tc.term = t;
        IF FOUND AND now_size BETWEEN known.size * 0.9 - 100 AND known.size * 1.1 + 100
           AND (known.n < known.counted_to OR known.counted_to >= cap) THEN
            term := t; n := least(known.n, cap); size := now_size; RETURN NEXT;
            CONTINUE;
        END IF;
        IF lexical_space = 'memories_fts' THEN
            SELECT count(*) INTO c FROM (SELECT 1 FROM memories m
                WHERE m.content_tsv @@ plainto_tsquery('{TEXT_SEARCH_CONFIG}', t)
                AND (NOT team OR m.scope IS DISTINCT FROM 'user') LIMIT cap) x;
{team_windows}        ELSE
            SELECT count(*) INTO c FROM (SELECT 1 FROM context_windows w
                WHERE w.tsv @@ plainto_tsquery('{TEXT_SEARCH_CONFIG}', t) LIMIT cap) x;
        END IF;
        INSERT INTO term_counts AS tc (space, term, n, counted_to, size) VALUES (lexical_space, t, c, cap, now_size)
            ON CONFLICT (space, term)
            DO UPDATE SET n = excluded.n, counted_to = excluded.counted_to, size = excluded.size;
        term := t; n := c; size := now_size; RETURN NEXT;
    END LOOP;
END $$"""


#: Version 10: on a team store (once it has people) a private (user-scope) memory's vector stays in
#: the catalog, which row-level security guards, and never goes to the Chroma server, which has no
#: people of its own: whoever reaches it reads every vector it holds, and a vector gives its text
#: away to a model inverting it. (A store with no team yet is one person's: their vectors go to the
#: index as ever.) ``remindful_has_team()`` says which; ``remindful_indexed_ids``/``_count`` list
#: what the index should hold: on a team store no private row (so a reconcile removes the private
#: vectors an older version, or the store before its team, put there). A memory moved into the user
#: scope has its vector queued for removal (``index_deletes``), in the statement's transaction; one
#: moved out of it is marked un-indexed, for the indexer to add. A window carries its memory's
#: author and scope (kept by triggers) and is read by the memories' own rule: its policy looked its
#: memory up, and as ``EXISTS`` PostgreSQL hashed every memory the person sees for each statement
#: that read a window (100 ms a count of a term's windows at 100,000 memories, as a member). The
#: rows not yet indexed are indexed by rowid: the index view's first of them (``min(rowid)``) walked
#: the primary key from the oldest row, checking each (136 ms at 100,000 memories as a member, at
#: every indexing batch, in the background of each acknowledgement).
_V10 = [
    "DROP INDEX IF EXISTS idx_memories_unindexed",
    "CREATE INDEX IF NOT EXISTS idx_memories_unindexed_rowid ON memories(rowid) WHERE indexed = 0",
    # (Named apart from the memories' columns: a search's filter names those unqualified.)
    "ALTER TABLE context_windows ADD COLUMN IF NOT EXISTS memory_author TEXT",
    "ALTER TABLE context_windows ADD COLUMN IF NOT EXISTS memory_scope TEXT",
    # A window takes its memory's author and scope when written (as the owner: whatever the writer
    # sees); one whose memory is not there is readable by no person (only a store with no team).
    """
CREATE OR REPLACE FUNCTION remindful_window_of() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    SELECT m.author, m.scope INTO NEW.memory_author, NEW.memory_scope FROM memories m WHERE m.rowid = NEW.rowid;
    IF NOT FOUND THEN
        NEW.memory_author := NULL;
        NEW.memory_scope := 'user';
    END IF;
    RETURN NEW;
END $$""",
    "DROP TRIGGER IF EXISTS windows_of_biu ON context_windows",
    "CREATE TRIGGER windows_of_biu BEFORE INSERT OR UPDATE ON context_windows "
    "FOR EACH ROW EXECUTE FUNCTION remindful_window_of()",
    # ... and follows it when either changes.
    """
CREATE OR REPLACE FUNCTION remindful_window_follows() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    UPDATE context_windows SET memory_author = NEW.author, memory_scope = NEW.scope WHERE rowid = NEW.rowid;
    RETURN NULL;
END $$""",
    "DROP TRIGGER IF EXISTS memories_window_au ON memories",
    "CREATE TRIGGER memories_window_au AFTER UPDATE OF author, scope ON memories FOR EACH ROW "
    "WHEN (OLD.author IS DISTINCT FROM NEW.author OR OLD.scope IS DISTINCT FROM NEW.scope) "
    "EXECUTE FUNCTION remindful_window_follows()",
    "UPDATE context_windows w SET memory_author = m.author, memory_scope = m.scope FROM memories m "
    "WHERE m.rowid = w.rowid",
    "DROP POLICY IF EXISTS windows_read ON context_windows",
    "CREATE POLICY windows_read ON context_windows FOR SELECT USING " + _sees("memory_author", "memory_scope"),
    """
CREATE OR REPLACE FUNCTION remindful_has_team() RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER AS $$
    SELECT EXISTS (SELECT 1 FROM people)
$$""",
    """
CREATE OR REPLACE FUNCTION remindful_indexed_ids(memory_type text) RETURNS SETOF text
LANGUAGE sql STABLE SECURITY DEFINER AS $$
    SELECT id FROM memories WHERE type = memory_type AND indexed = 1
        AND (scope IS DISTINCT FROM 'user' OR NOT remindful_has_team())
$$""",
    """
CREATE OR REPLACE FUNCTION remindful_indexed_count(memory_type text) RETURNS bigint
LANGUAGE sql STABLE SECURITY DEFINER AS $$
    SELECT count(*) FROM memories WHERE type = memory_type AND indexed = 1
        AND (scope IS DISTINCT FROM 'user' OR NOT remindful_has_team())
$$""",
    """
CREATE OR REPLACE FUNCTION remindful_scope_moved() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.scope IS NOT DISTINCT FROM OLD.scope OR NOT remindful_has_team() THEN
        RETURN NEW;
    END IF;
    IF NEW.scope = 'user' THEN
        INSERT INTO index_deletes (memory_id, type) VALUES (OLD.id, OLD.type)
            ON CONFLICT (memory_id) DO UPDATE SET type = excluded.type;
    ELSIF OLD.scope = 'user' THEN
        NEW.indexed := 0;
    END IF;
    RETURN NEW;
END $$""",
    "DROP TRIGGER IF EXISTS memories_scope_bu ON memories",
    "CREATE TRIGGER memories_scope_bu BEFORE UPDATE OF scope ON memories "
    "FOR EACH ROW EXECUTE FUNCTION remindful_scope_moved()",
    # How many memories (and windows) hold a term, counted once for every process and machine of
    # the store: a search's first use of a term counts up to a few hundred matches, a heap read
    # each (most of a fresh process's search time, on a team member's connection the more). Only
    # memories every person sees are counted on a team store (a count of private texts would tell
    # whether someone's private memory holds a word); the table is the function's alone, so that
    # no member writes a count it did not make. A count stands while the store's size stays within
    # a tenth of its size when counted.
    """
CREATE TABLE IF NOT EXISTS term_counts (
    space TEXT NOT NULL,
    term TEXT NOT NULL,
    n INTEGER NOT NULL,
    counted_to INTEGER NOT NULL,
    size BIGINT NOT NULL,
    PRIMARY KEY (space, term)
)""",
    "REVOKE ALL ON term_counts FROM PUBLIC",
    _term_counts_function(
        f"""        ELSIF team THEN
            SELECT count(*) INTO c FROM (SELECT 1 FROM context_windows w JOIN memories m ON m.rowid = w.rowid
                WHERE w.tsv @@ plainto_tsquery('{TEXT_SEARCH_CONFIG}', t) AND m.scope IS DISTINCT FROM 'user'
                LIMIT cap) x;
"""
    ),
    """
CREATE OR REPLACE FUNCTION remindful_forget_term_counts() RETURNS void
LANGUAGE sql VOLATILE SECURITY DEFINER AS $$
    DELETE FROM term_counts
$$""",
    # The type and scope counts are kept by a trigger after a row passed its own table's policies:
    # as the schema's owner, its upserts of the counts' tables are not checked by their policies a
    # second time (a member's acknowledgement: 4.6 -> 3.9 ms).
    "ALTER FUNCTION remindful_count_rows() SECURITY DEFINER",
    # (CREATE OR REPLACE drops a function's settings: its search path is set again.)
    *(
        "DO $do$ BEGIN EXECUTE format('ALTER FUNCTION " + signature + " SET search_path = %I, pg_temp', "
        "current_schema()); END $do$"
        for signature in (
            "remindful_count_rows()",
            "remindful_window_of()",
            "remindful_window_follows()",
            "remindful_has_team()",
            "remindful_indexed_ids(text)",
            "remindful_indexed_count(text)",
            "remindful_term_counts(text, text[], integer)",
            "remindful_forget_term_counts()",
        )
    ),
]

#: Version 11: a term's windows on a team store are counted by the scope each window carries (version
#: 10), not by joining each window's memory: 2.3 against 10 ms for a term of a thousand windows at
#: 100,000 memories (a term is counted once a store, when a team's search first meets it). A
#: session's new rows are numbered after the commit that stored them
#: (:mod:`~remindful.engine.postgres.numbering`): those still to number are found by an index of
#: their own (none, once numbered).
_V11 = [
    "CREATE INDEX IF NOT EXISTS idx_memories_unnumbered ON memories(session_id, created_at) "
    "WHERE seq IS NULL AND session_id IS NOT NULL",
    _term_counts_function(
        f"""        ELSIF team THEN
            SELECT count(*) INTO c FROM (SELECT 1 FROM context_windows w
                WHERE w.tsv @@ plainto_tsquery('{TEXT_SEARCH_CONFIG}', t) AND w.memory_scope IS DISTINCT FROM 'user'
                LIMIT cap) x;
"""
    ),
    # (CREATE OR REPLACE drops a function's settings: its search path is set again.)
    "DO $do$ BEGIN EXECUTE format('ALTER FUNCTION remindful_term_counts(text, text[], integer) "
    "SET search_path = %I, pg_temp', current_schema()); END $do$",
]

#: Version 12: the counts every store updates (its type's, its scope's, the redaction hits') keep
#: each page nine tenths free, so that PostgreSQL prunes their rows' dead versions at nearly every
#: visit. Every update of such a row leaves a dead version on its page, and until the page filled
#: up, each read walked them all: the type counts read back with each acknowledgement took
#: 0.12-0.17 ms on a table of six rows, 0.02 ms so (a member's acknowledgement 1.4 against 1.6 ms).
_V12 = [f"ALTER TABLE {table} SET (fillfactor = 10)" for table in ("type_counts", "scope_counts", "capture_stats")]

#: The statements of each version, from the first: ``MIGRATIONS[v - 1]`` brings version ``v - 1`` to ``v``.
MIGRATIONS: tuple[list[str], ...] = (_V1, _V2, _V3, _V4, _V5, _V6, _V7, _V8, _V9, _V10, _V11, _V12)
#: The version before which the catalog derives the origins of rows that have none.
ORIGINS_VERSION = 5
SCHEMA_VERSION = len(MIGRATIONS)

#: The table holding the version (one row); created before any migration runs.
VERSION_DDL = "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)"

#: Columns of ``memories`` returned by reads, in this order (no embedding): as SQLite's
#: :data:`remindful.engine.schema.MEMORY_COLUMNS`, so :meth:`MemoryRow.from_sql` reads both.
MEMORY_COLUMNS = (
    "id, type, content, metadata, source, memory_class, session_id, created_at, updated_at, importance, "
    "access_count, last_accessed, bookmarked, content_hash, chunk, expires_at, indexed, scope, origin"
)
