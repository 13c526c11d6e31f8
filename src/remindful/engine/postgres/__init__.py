"""The PostgreSQL catalog backend: one store shared by a team or by a person's machines.

Every statement of this backend is in this package: :mod:`.schema` (the DDL, versioned and
migrated), :mod:`.catalog` (connections, transactions, retries, advisory locks and the named
methods the store and the repositories call), :mod:`.windows` (the session windows),
:mod:`.lexical` (full-text search: ``tsvector`` + GIN, English stemming, for both lexical spaces)
and :mod:`.repositories` (the named queries of each repository). Vectors stay in ChromaDB: a
Chroma server (``chroma run``) through :class:`~remindful.index.chroma.ChromaServerIndex`.

Nothing here is imported by the SQLite default, the hooks or ``--help``; psycopg 3 (the
``postgres`` extra) is imported when a catalog is opened.

Not on this backend yet: filters on metadata paths (refused with one line), the learning and
retention repositories, the brief's queries, and the store's write and search path
(:class:`~remindful.engine.store.Store` runs on the SQLite catalog).
"""
