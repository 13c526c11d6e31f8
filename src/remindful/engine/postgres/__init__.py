"""The PostgreSQL catalog backend: one store shared by a team or by a person's machines.

Every statement of this backend is in this package: :mod:`.schema` (the DDL, versioned and
migrated), :mod:`.catalog` (connections, transactions, retries, advisory locks and the named
methods the store and the repositories call), :mod:`.windows` (the session windows),
:mod:`.lexical` (full-text search: ``tsvector`` + GIN, English stemming, for both lexical spaces)
and :mod:`.repositories` (the named queries of each repository). Vectors stay in ChromaDB: a
Chroma server (``chroma run``) through :class:`~remindful.index.chroma.ChromaServerIndex`.

Nothing here is imported by the SQLite default, the hooks or ``--help``; psycopg 3 (the
``postgres`` extra) is imported when a catalog is opened.

The Store runs on it when ``catalog.url`` is set (:mod:`remindful.engine.backend` chooses), with
the machine's own spool in its local catalog file (:class:`.repositories.MachineSpoolCaptureRepository`).
A person's token (``catalog.token``) is handed to the server by each connection, and row-level
security decides what its statements reach (:mod:`.schema` version 6, :mod:`.team`). Filters on
metadata paths are read into ``jsonb`` path queries (:mod:`.dialect`). Retention and dedup govern
what the catalog's connection may clean: everything for the admin (no token), a person's own
memories outside projects for a token (:class:`.repositories.PostgresRetentionRepository`).
"""
