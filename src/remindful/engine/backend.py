"""Which catalog a store runs on, and the one interface the store's parts see of it.

:class:`CatalogBackend` is what the Store, the index mirror, retrieval, the quotas and the
background workers call: the named methods both catalogs have with the same meaning, the SQLite
:class:`~remindful.engine.catalog.Catalog` (the embedded default: one file in the storage directory)
and the :class:`~remindful.engine.postgres.catalog.PostgresCatalog` (``catalog.url``: a store shared
by a team or by a person's machines). Their raw ``read`` takes the dialect both share (``?``
parameters, plain SQL); a transaction's connection (``write``'s ``conn``) is the backend's own, and
only the backend's named methods write through it.

:func:`open_catalog` chooses from the settings; :func:`repositories_over` builds the repositories
of the same backend. Nothing here imports psycopg: a local store never loads it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import numpy as np

from remindful.engine.catalog import Catalog, MemoryRow, ScopeOf
from remindful.engine.chunks import ChunkStore
from remindful.engine.projects import Project
from remindful.engine.redact import StoreRedactor
from remindful.engine.sqlfilter import SqlFilter
from remindful.errors import ConfigError, CorruptionError, StorageError

if TYPE_CHECKING:
    from remindful.config import Settings
    from remindful.engine.repositories import Repositories

T = TypeVar("T")


class CatalogBackend(ChunkStore, Protocol):
    """The catalog as the store's parts use it (see the module docstring)."""

    redaction: StoreRedactor
    #: The damage a read or write met (SQLite's file); never set on a server.
    damage: CorruptionError | None
    #: Why nothing can be written (a read-only directory, a full disk), if so.
    unwritable: StorageError | None

    @property
    def path(self) -> Path | None:
        """The catalog's file, if it is one (None: a server)."""

    @property
    def indexes_private(self) -> bool:
        """Whether private (user-scope) memories' vectors go to the vector index. A team store's
        index is a Chroma server with no people of its own, where anyone who reaches it reads every
        vector: there they stay in the catalog, which row-level security guards, and a search
        scores them exactly (:class:`~remindful.engine.exact.ScopedScorer`)."""

    def close(self) -> None: ...
    def read(self, sql: str, params: Sequence[Any] = (), *, private: bool = False) -> list[Any]: ...
    def read_in(self, sql: str, keys: Sequence[Any], params: Sequence[Any] = ()) -> list[Any]: ...
    def write(self, fn: Callable[[Any], T], *, what: str = "write", pipelined: bool = False) -> T: ...
    def try_write(self, fn: Callable[[Any], Any]) -> bool: ...
    def follow_file(self) -> bool: ...

    # memories
    def expect_vectors(self, dimension: Callable[[], int]) -> None: ...
    def insert_memories(self, conn: Any, rows: Sequence[MemoryRow]) -> None: ...
    def update_row(self, conn: Any, row: MemoryRow, *, version: int | None = None) -> None: ...
    def version_of(self, memory_id: str) -> int | None: ...
    def move_scope(self, conn: Any, flt: SqlFilter, scope: str) -> int: ...
    def get_rows(self, ids: Sequence[str]) -> dict[str, MemoryRow]: ...
    def rows_passing(
        self, ids: Sequence[str], flt: SqlFilter, *, vectors: dict[str, np.ndarray] | None = None
    ) -> dict[str, MemoryRow]: ...
    def ids_passing(self, ids: Sequence[str], flt: SqlFilter) -> set[str]: ...
    def ids_by_rowid(self, rowids: Sequence[int], flt: SqlFilter, *, private: bool = False) -> dict[int, str]: ...
    def select_rows(self, flt: SqlFilter, *, limit: int = 100, offset: int = 0) -> list[MemoryRow]: ...
    def some_ids(self, limit: int) -> list[str]: ...
    def existing_ids(self, ids: Sequence[str]) -> set[str]: ...
    def count(self, flt: SqlFilter | None = None, *, at_most: int | None = None) -> int: ...
    def indexed_ids(self, memory_type: str) -> set[str] | None: ...
    def indexed_count(self, memory_type: str) -> int: ...
    def type_counts(self) -> dict[str, int]: ...
    def scope_counts(self) -> dict[str | None, int]: ...
    def touch(self, ids: Sequence[str], at: float, counts: Mapping[str, int] | None = None) -> None: ...
    def count_in(self, conn: Any, counts: Mapping[str, int]) -> None: ...
    def stored_with(self, content_hash: str, session_id: str) -> list[tuple[str, dict[str, Any]]]: ...
    def has_chunked_response(self, session_id: str, full_content_hash: str) -> bool: ...

    # vectors
    def embeddings(self, ids: Sequence[str]) -> dict[str, np.ndarray]: ...
    def filtered_embeddings(self, flt: SqlFilter) -> tuple[list[str], np.ndarray | None]: ...
    def filtered_embeddings_if(
        self, flt: SqlFilter, few: int, at_most: int, take: Callable[[int], bool]
    ) -> tuple[list[str], np.ndarray | None] | None: ...
    def pending_embeddings(self, flt: SqlFilter, after: int | None) -> tuple[list[str], np.ndarray | None]: ...
    def neighbourhoods(self, ids: Sequence[str], radius: int) -> list[tuple[str, str, int, bytes]]: ...
    def unindexed(self, limit: int = 1000) -> list[tuple[MemoryRow, np.ndarray | None]]: ...
    def mark_indexed(self, ids: Sequence[str], value: bool = True) -> None: ...
    def set_embeddings(self, items: dict[str, np.ndarray], *, wait: bool = True) -> bool: ...
    def without_embeddings(self, ids: Sequence[str]) -> list[tuple[str, str]]: ...
    def vectors_by_hash(self, hashes: Sequence[str]) -> dict[str, np.ndarray]: ...
    def get_cached_embeddings(self, model: str, hashes: Sequence[str]) -> dict[str, np.ndarray]: ...
    def put_cached_embeddings(self, model: str, items: dict[str, np.ndarray]) -> None: ...
    def claim_embedding_model(self, name: str) -> str: ...

    # lexical spaces
    def lexical(
        self, terms: Sequence[str], flt: SqlFilter, limit: int, *, table: str = "memories_fts", restricted: bool = True
    ) -> list[tuple[str, float]]: ...
    def doc_freqs(self, terms: Sequence[str], upto: int | None = None) -> tuple[dict[str, int], int]: ...
    def windows(self, ids: Sequence[str]) -> dict[str, str]: ...

    # sessions, projects, audit
    def stored_session_id(self, session_id: str) -> str: ...
    def audit(self, conn: Any, action: str, memory_id: str | None, detail: dict[str, Any]) -> None: ...
    def change_marks(self) -> tuple[int, int]: ...
    def ensure_session(self, conn: Any, session_id: str, at: float) -> None: ...
    def upsert_session(
        self,
        conn: Any,
        session_id: str,
        at: float,
        *,
        metadata: Mapping[str, Any] | None = None,
        ended: bool | None = None,
    ) -> None: ...
    def session_metadata(self, session_id: str, conn: Any = None) -> dict[str, Any]: ...
    def record_projects(
        self, conn: Any, projects: Iterable[Project], at: float, counts: dict[str, int] | None = None
    ) -> None: ...

    # deletes and their queues
    def delete_ids(
        self, ids: Sequence[str], *, reason: str | Mapping[str, str] = "delete", mend_later: bool = False
    ) -> list[tuple[str, str]]: ...
    def delete_in(
        self, conn: Any, ids: Sequence[str], *, reason: str | Mapping[str, str] = "delete", mend_later: bool = False
    ) -> list[tuple[str, str]]: ...
    def mend_windows(self, limit: int) -> int: ...
    def windows_to_mend(self) -> bool: ...
    def await_windows(self, timeout: float | None = None) -> bool: ...
    def pending_index_deletes(self, limit: int) -> list[tuple[str, str]]: ...
    def finish_index_deletes(self, ids: Sequence[str]) -> None: ...


def is_shared(settings: Settings) -> bool:
    """Whether the settings name a shared (PostgreSQL) catalog rather than the local file."""
    return bool(settings.catalog.url)


def catalog_token(settings: Settings) -> str | None:
    """The person's token on a team store: ``catalog.token``, else the first line of the file
    ``catalog.token_file`` (refused with one line unless it is the user's own and nobody else may
    read it: mode 0600), else None (the store's single user). Never logged, never shown."""
    secret = settings.catalog.token
    if secret is not None:
        return secret.get_secret_value()
    path = settings.catalog.token_file
    if path is None:
        return None
    path = Path(path).expanduser()
    try:
        st = os.stat(path)
        if st.st_uid != os.geteuid() or st.st_mode & 0o077:
            raise ConfigError(
                "catalog.token_file",
                f"{path} must be yours and readable by you only",
                suggestion=f"chmod 600 {path}",
            )
        with open(path, encoding="utf-8") as handle:
            token = handle.readline().strip()
    except OSError as exc:
        raise ConfigError("catalog.token_file", f"cannot read {path} ({exc.strerror or exc})") from None
    if not token:
        raise ConfigError("catalog.token_file", f"{path} holds no token (expected the one `remindful team add` gave)")
    return token


def open_catalog(
    settings: Settings, path: Path, *, redaction: StoreRedactor, scope_of: ScopeOf | None
) -> CatalogBackend:
    """The catalog the settings name: the PostgreSQL catalog of ``catalog.url`` if set, else the
    SQLite file ``<path>/catalog.sqlite3``. A server that does not answer is a StorageError
    naming its redacted URL."""
    url = settings.catalog.url
    if url:
        from remindful.engine.postgres.catalog import PostgresCatalog

        return PostgresCatalog(url, redaction=redaction, token=catalog_token(settings))
    return Catalog(path / "catalog.sqlite3", redaction=redaction, scope_of=scope_of)


def exclusive(catalog: CatalogBackend, name: str) -> AbstractContextManager[bool] | None:
    """The server's advisory lock ``name`` (held while the block runs; yields whether it is held,
    never waiting), or None for the local catalog, whose single-writer jobs take file locks."""
    take = getattr(catalog, "exclusive", None)
    return None if take is None else take(name, wait=False)


def repositories_over(
    settings: Settings, source: Callable[[], CatalogBackend], local: Callable[[], Catalog]
) -> Repositories:
    """Every repository over the catalog ``source`` gives, in its backend's dialect; on a shared
    catalog the spool is the machine's own, in the local catalog ``local`` gives."""
    from remindful.engine.repositories import Repositories

    if is_shared(settings):
        from remindful.engine.captures import CaptureRepository
        from remindful.engine.postgres.repositories import shared_repositories

        repositories: Repositories = shared_repositories(source, CaptureRepository(local))  # type: ignore[arg-type]
        return repositories
    return Repositories.over(source)  # type: ignore[arg-type]


__all__ = ["CatalogBackend", "catalog_token", "exclusive", "is_shared", "open_catalog", "repositories_over"]
