"""The Store: one storage directory's parts, and the operations that span them.

The parts, each an idea of its own:
- the catalog (:mod:`remindful.engine.catalog`): SQLite, the truth; opens on the first operation
  (a few ms);
- the embedder (:mod:`remindful.engine.embedding`): loads on the first embedding;
- the index mirror (:mod:`remindful.engine.mirror`): the vector index kept in step with the
  catalog across processes; opens on the first write or search;
- retrieval (:mod:`remindful.engine.retrieval`): the ranking of a search, stateless;
- the quotas (:mod:`remindful.engine.quotas`): items per type, and the storage size.

The Store validates and redacts what is written (its :class:`~remindful.engine.redact.StoreRedactor`,
which the catalog holds too: a row, a session or an audit detail written by any other path is
redacted there), commits it to the catalog (the acknowledgement: a crash after it loses nothing)
and hands it to the mirror; it reads from the catalog, and runs a
search through retrieval with the mirror's dense queries; it counts stores and searches for the
statistics. It holds no ranking state of any client: every setting of a search is an argument.

If the storage path is unusable, memory is disabled with the reason (every call raises
:class:`MemoryDisabledError`) and the host keeps running. If the index is corrupted, the error is
logged with recovery instructions and search keeps working from the catalog alone (exact dense
scoring + lexical) until ``reindex(reset=True)`` rebuilds it.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from remindful.config import Settings
from remindful.embed.base import Embedder
from remindful.engine.attachments import attach_files, remove_copies
from remindful.engine.backend import CatalogBackend, is_shared, open_catalog, repositories_over
from remindful.engine.background import AccessRecorder, close_at_exit
from remindful.engine.captures import CaptureRepository
from remindful.engine.catalog import CATALOG_WAY_OUT, Catalog, MemoryRow, counted
from remindful.engine.deferred import writer
from remindful.engine.embedding import LazyEmbedder, embed_query
from remindful.engine.mirror import IndexMirror
from remindful.engine.perf import PendingFigures
from remindful.engine.projects import Project, Resolver
from remindful.engine.quotas import SIZE_MAX_AGE_S, Quotas
from remindful.engine.redact import StoreRedactor, redactor_for
from remindful.engine.repositories import Repositories
from remindful.engine.repositories.scopes import ScopeRepository
from remindful.engine.retrieval import anchors
from remindful.engine.retrieval.search import rank
from remindful.engine.scopes import Assigner, check_scope
from remindful.engine.sqlfilter import SqlFilter, build_filter, scope_filter, to_epoch, with_stored_sessions
from remindful.engine.storelock import StoreLock
from remindful.engine.validation import (
    Limits,
    check_batch,
    check_int,
    check_metadata,
    check_origin,
    check_text,
    parse_enum,
    validate_item,
)
from remindful.errors import (
    CorruptionError,
    MemoryDisabledError,
    NotFoundError,
    StorageError,
    StorageFullError,
    UntrustedPathError,
    ValidationError,
    unwritable,
)
from remindful.index.base import VectorIndex
from remindful.model import (
    DEFAULT_CLASS,
    ChunkMetadata,
    Memory,
    MemoryClass,
    MemorySource,
    MemoryType,
    SearchHit,
    content_hash,
    derive_origin,
    new_memory_id,
)
from remindful.owned import private_dir
from remindful.runtime import new_session_id

log = logging.getLogger("remindful")

#: A delete of at most this many memories finishes before it returns: vectors (~0.1 s in Chroma)
#: and neighbours' session windows; a larger one leaves them to the mirror's background finisher.
INLINE_DELETE = 256
#: How long export, backup, dedup and cleanup wait for this process's pending embeddings.
VECTORS_READY_TIMEOUT_S = 60.0
_STORE_KEYS = {
    "content",
    "type",
    "metadata",
    "session_id",
    "timestamp",
    "source",
    "memory_class",
    "chunk",
    "scope",
    "origin",
}


class Store:
    """Lazily opened parts of one storage directory and the operations that span them."""

    def __init__(
        self,
        settings: Settings,
        *,
        embedder: Embedder | None,
        index: VectorIndex | None,
        exact_before_index: int = 0,
    ) -> None:
        """``exact_before_index``: until this process opened the vector index, a search over at most
        this many memories scores them all exactly from the catalog instead of opening it (for a
        short-lived reader such as a hook: importing chromadb and loading the graph take a second)."""
        self.settings = settings
        self.exact_before_index = exact_before_index
        self.path = settings.storage_path
        self.disabled_reason = None if settings.enabled else "disabled in configuration (enabled: false)"
        self._given_index = index
        self._embedder = LazyEmbedder(settings, embedder, lambda: self.catalog)
        self._catalog: CatalogBackend | None = None
        self._local: Catalog | None = None  # on a shared catalog: the machine's own, for its spool
        self._mirror: IndexMirror | None = None
        self._access: AccessRecorder | None = None
        self._exiting = False  # set by close_for_exit: open nothing new
        self._init_lock = threading.RLock()
        self._opening = False  # the catalog is being opened (its upgrade resolves projects)
        self.quotas = Quotas(settings, self.path)
        if is_shared(settings):  # its memories are on the server: the size quota counts them there
            self.quotas.server_bytes = lambda: self.repositories.retention.total_bytes()
        # Every write's redaction (the rules compile on first need) and the session ids' mapping.
        self.redaction = StoreRedactor(redactor_for(settings.privacy), self.path)
        scopes = settings.scopes
        #: Finds the project of a directory, and the scope of a memory whose writer named none.
        #: A marker cannot claim a project bound to another directory: the catalog says which are.
        #: On a shared catalog a repository is known by its origin URL: its clones elsewhere are one project.
        self.resolver = Resolver(
            scopes.project,
            scopes.projects,
            clean=self._clean_place,
            registry=self._project_registry,
            by_remote=bool(settings.catalog.url),
        )
        self.scopes = Assigner(self.resolver, classify=scopes.user_level)
        #: The project this store's writer works in: a new memory whose metadata names no directory
        #: is captured there (None: in no project).
        self.project: Project | None = None
        self._session_id: str | None = None
        self._lock = threading.RLock()
        #: Coordinates this store's processes around a restore or a clear-all (:mod:`remindful.engine.storelock`).
        self.store_lock = StoreLock(self.path)
        self._generation = 0  # the store generation this process's view of the index was taken at
        # What the statistics report of this process (services/stats.py).
        self.store_ms: deque[float] = deque(maxlen=1000)
        self.search_ms: deque[float] = deque(maxlen=1000)
        self.stores = 0
        self.searches = 0

    # -- the parts ------------------------------------------------------------------------------

    def ready(self) -> None:
        """Open the catalog if needed; raise MemoryDisabledError if memory is off or unusable."""
        if self.disabled_reason:
            raise MemoryDisabledError(self.disabled_reason)
        if self._catalog is None:
            self._opened()

    def _clean_place(self, text: str) -> str:
        """A project's name or root directory as its key is made of it: the store's redaction, but
        for a text the catalog records as one (written redacted, so given back as it is): a read
        in a recorded project does not load the secret detector (0.2 s of a command's start)."""
        if self._catalog is not None and not self._opening and self.repositories.scopes.recorded(text):
            return text
        return self.redaction.text(text)

    def _project_registry(self) -> ScopeRepository | None:
        """The projects the catalog recorded and the directories the user bound, for the resolver
        (None while the catalog is being opened, and when memory is off: nothing is read or written
        then)."""
        if self._catalog is None:
            if self._opening:
                return None
            try:
                self._opened()
            except MemoryDisabledError:
                return None
        return self.repositories.scopes

    def _opened(self) -> tuple[CatalogBackend, IndexMirror]:
        """The catalog and the mirror, opened now if needed (MemoryDisabledError if memory is off
        or unusable). Read under the lock :meth:`close` clears them under: a close in another
        thread cannot leave the caller with half of them."""
        if self.disabled_reason:
            raise MemoryDisabledError(self.disabled_reason)
        with self._init_lock:
            if self._catalog is None:
                self._opening = True
                try:
                    self._open_catalog()
                finally:
                    self._opening = False
            catalog, mirror = self._catalog, self._mirror
        if catalog is None or mirror is None:  # pragma: no cover - _open_catalog sets both or raises
            raise MemoryDisabledError(self.disabled_reason or "the store could not be opened")
        return catalog, mirror

    def _open_catalog(self) -> None:
        try:
            # Created 0700 with its parents whatever the umask; refused if another user owns it or
            # can write it (or a directory above it, up to the home directory).
            private_dir(self.path, "storage directory")
            if self.path.stat().st_mode & 0o077:  # existed (or was made) readable by others: tighten it
                try:
                    os.chmod(self.path, 0o700)
                except OSError as exc:  # not ours, or a filesystem without modes: usable, but say so
                    log.warning("cannot make the storage directory %s private (0700): %s", self.path, exc)
            # a probe of our own: processes opening one path at once must not remove each other's
            try:
                with tempfile.NamedTemporaryFile(dir=self.path, prefix=".write-test-"):
                    pass
            except OSError as exc:  # a store on a read-only filesystem or a full disk is still read
                if unwritable(self.path, exc) is None or not (self.path / "catalog.sqlite3").is_file():
                    raise
            catalog = open_catalog(self.settings, self.path, redaction=self.redaction, scope_of=self.scopes)
        except (OSError, StorageError, UntrustedPathError) as exc:
            if is_shared(self.settings) and not isinstance(exc, OSError | UntrustedPathError):
                raise  # a server that does not answer now may answer at the next call
            if isinstance(exc, UntrustedPathError):  # said once, by whoever reports the error
                self.disabled_reason = str(exc)
                raise MemoryDisabledError(str(exc)) from exc
            if isinstance(exc, CorruptionError | StorageFullError):  # damage, or a full disk: not for good
                raise
            self.disabled_reason = (
                f"storage path {self.path} is not usable ({exc}); "
                "set MEMORY_STORAGE_PATH or storage.path to a writable directory"
            )
            log.error("Memory disabled: %s", self.disabled_reason)
            raise MemoryDisabledError(self.disabled_reason) from exc
        self._generation = self.store_lock.generation()
        self._access = AccessRecorder(catalog, figures=PendingFigures(self.embedding_cache_stats))
        self._mirror = IndexMirror(
            catalog,
            self._embedder,
            self._new_index,
            path=self.path,
            performance=self.settings.performance,
            exiting=self._exiting,
        )
        catalog.expect_vectors(lambda: self._embedder.get().dimension)
        self._catalog = catalog
        close_at_exit(self)
        if catalog.windows_to_mend():  # left by a process that stopped before it finished a delete
            self._mirror.kick_finisher()

    def follow_replacements(self) -> None:
        """If another process replaced the store's content since this one last looked (a restore,
        a clear-all, a rebuilt index: the store generation changed), take this process's view of
        it afresh: the catalog file if it is another one, and the vector index's view. One small
        read; a search calls it first."""
        generation = self.store_lock.generation()
        if generation == self._generation or self._catalog is None:
            return
        self._generation = generation
        self._catalog.follow_file()
        self._catalog.damage = None  # new content: its damage, if any, is found anew
        mirror = self._mirror
        if mirror is not None:
            mirror.reload_view()

    @property
    def catalog(self) -> CatalogBackend:
        """The catalog, opened on first use (MemoryDisabledError if memory is off or unusable):
        the local file, or the shared PostgreSQL catalog of ``catalog.url``
        (:mod:`remindful.engine.backend`)."""
        catalog = self._catalog
        return catalog if catalog is not None else self._opened()[0]

    @property
    def local_catalog(self) -> Catalog:
        """The machine's own catalog file, where its hooks and capture points spool: the catalog
        itself on a local store; on a shared one, a local file holding the spool (opened on first
        use)."""
        catalog = self.catalog
        if isinstance(catalog, Catalog):
            return catalog
        with self._init_lock:
            if self._local is None:
                self._local = Catalog(self.path / "catalog.sqlite3", redaction=self.redaction, scope_of=self.scopes)
            return self._local

    @functools.cached_property
    def repositories(self) -> Repositories:
        """Every repository over this store's catalog, in its backend's dialect (the spool the
        machine's own): for the capture points that are handed a Store alone."""
        return repositories_over(self.settings, lambda: self.catalog, lambda: self.local_catalog)

    @property
    def captures(self) -> CaptureRepository:
        """What the capture paths read and record besides memories (the spool, the filters' counts,
        tool-call lookups, tombstones), over this store's catalog: for the capture points that are
        handed a Store alone (the MCP middleware, the proxy, the drainer)."""
        return self.repositories.captures

    @property
    def mirror(self) -> IndexMirror:
        """The vector index kept in step with the catalog; opens the catalog, not the index."""
        mirror = self._mirror
        return mirror if mirror is not None and self._catalog is not None else self._opened()[1]

    @property
    def embedder(self) -> Embedder:
        """The embedder, built on first use (the model loads at its first embedding)."""
        return self._embedder.get()

    def _new_index(self) -> VectorIndex:
        if self._given_index is not None:
            return self._given_index
        chroma = self.settings.storage.chromadb
        if chroma.mode == "server" or is_shared(self.settings):
            from remindful.index import ChromaServerIndex

            return ChromaServerIndex(chroma.host, chroma.port)
        from remindful.index import ChromaEmbeddedIndex

        return ChromaEmbeddedIndex(self.path / "chroma", hnsw=chroma.hnsw.model_dump())

    # -- this process's session -----------------------------------------------------------------

    @property
    def session_id(self) -> str:
        """This process's session, generated on first use (``session_YYYYmmdd_HHMMSS_xxxx``)."""
        with self._lock:
            if self._session_id is None:
                self._session_id = new_session_id()
            return self._session_id

    @session_id.setter
    def session_id(self, value: str) -> None:
        self._session_id = check_text(value, "session_id")

    @property
    def current_session(self) -> str | None:
        """This process's session as stored (:meth:`stored_session_id`) if one was used yet, else
        None (asking :attr:`session_id` makes one)."""
        return None if self._session_id is None else self.stored_session_id(self._session_id)

    def stored_session_id(self, session_id: str) -> str:
        """The id under which session ``session_id`` is stored and found: itself unless it carries
        a secret (:meth:`StoreRedactor.session_id`); a stored id maps to itself
        (:meth:`CatalogBackend.stored_session_id`)."""
        return self.catalog.stored_session_id(session_id)

    def _session_filter(self, session_id: Any) -> str | None:
        """A reader's ``session_id`` argument as stored (None: any session)."""
        if session_id is None:
            return None
        if not isinstance(session_id, str):
            raise ValidationError("session_id", f"expected a session id (a string), got {type(session_id).__name__}")
        return self.stored_session_id(session_id)

    # -- writes ---------------------------------------------------------------------------------

    def store_batch(self, items: Sequence[Mapping[str, Any]], *, defer: bool | None = None) -> list[str]:
        """Store many memories in one catalog transaction with one batched embedding call.

        Each item takes the keyword arguments of :meth:`MemoryManager.store`. All or nothing: a bad
        item raises ValidationError (naming ``items[i].field``) before anything is written.
        ``defer=False`` embeds before the commit, so an embedding failure raises EmbedderError and
        stores nothing (the capture paths' ERR-P1-01); by default ``performance.defer_embedding``
        decides.
        """
        if not isinstance(items, Sequence) or isinstance(items, str | bytes):
            raise ValidationError("items", "expected a list of dicts with at least 'content'")
        check_batch(list(items), Limits.of(self.settings.limits))
        self.ready()
        now = time.time()
        rows: list[MemoryRow] = []
        projects: dict[str, Project] = {}
        counts: dict[str, int] = {}
        for i, item in enumerate(items):
            if not isinstance(item, Mapping):
                raise ValidationError(f"items[{i}]", "expected a dict with at least 'content'")
            unknown = set(item) - _STORE_KEYS
            if unknown:
                raise ValidationError(f"items[{i}]", f"unknown keys {sorted(unknown)}; expected {sorted(_STORE_KEYS)}")
            rows.append(self._new_row(item, i if len(items) > 1 else None, now, counts, projects))
        if not rows:
            return []
        # The rows of a batch share one timestamp, so their ids differ by 32 random bits only: with
        # thousands of rows two can collide (0.6 % of 7,000-row batches), which failed the batch.
        taken: set[str] = set()
        for row in rows:
            while row.id in taken:
                row.id = new_memory_id(MemoryType(row.type), datetime.fromtimestamp(row.created_at, UTC))
            taken.add(row.id)
        mirror = self.mirror
        if defer is False or not mirror.defers_embedding():
            vectors = self.embedder.embed([r.content for r in rows])
            for row, vector in zip(rows, vectors, strict=True):
                row.embedding = vector
        victims = self.quotas.make_room(self.repositories.retention, self.catalog.type_counts(), rows)
        attach_files(self.settings, rows, self.redaction)
        self._commit_new(rows, evict=victims, counts=counts, projects=projects.values())
        mirror.index_rows(rows)
        return [r.id for r in rows]

    def vectors_ready(self) -> Store:
        """The ready store, once the rows this process stored have vectors (for work that reads them)."""
        self.mirror.await_embeddings(VECTORS_READY_TIMEOUT_S)
        return self

    def _new_row(
        self,
        item: Mapping[str, Any],
        position: int | None,
        now: float,
        counts: dict[str, int],
        projects: dict[str, Project],
    ) -> MemoryRow:
        """The row to insert for ``item``: validated and redacted (content, metadata at any depth,
        chunk; the session id mapped), before anything is embedded or written. Hits go to ``counts``;
        the project its scope names, if any, is added to ``projects``."""
        prefix = "" if position is None else f"items[{position}]."
        fields = validate_item(item, prefix, Limits.of(self.settings.limits))
        redaction = self.redaction
        fields["content"] = redaction.text(fields["content"], counts)
        fields["metadata"] = redaction.value(fields["metadata"], counts)
        session_id = redaction.session_id(fields["session_id"] or self.session_id, counts)
        chunk = redaction.value(fields["chunk"], counts) if fields["chunk"] else None
        memory_type: MemoryType = fields["type"]
        metadata: dict[str, Any] = fields["metadata"]
        given = item.get("scope")
        if given is None:
            scope, project = self.scopes(
                fields["content"],
                type=memory_type.value,
                source=fields["source"].value,
                metadata=metadata,
                project=self.project,
            )
        else:
            try:
                scope = check_scope(given, prefix + "scope")
            except ValueError as exc:
                raise ValidationError(prefix + "scope", str(exc).split(": ", 1)[-1]) from None
            key = scope.removeprefix("project:")
            project = given if isinstance(given, Project) else None if scope == "user" else Project(key, key)
        if project is not None and scope == project.scope:
            projects.setdefault(project.key, project)
        created = fields["timestamp"] if fields["timestamp"] is not None else now
        created_dt = datetime.fromtimestamp(created, UTC)
        auto_delete = self.settings.privacy.auto_delete_days
        importance = metadata.get("importance")
        return MemoryRow(
            id=new_memory_id(memory_type, created_dt),
            type=memory_type.value,
            content=fields["content"],
            metadata=json.dumps(metadata, ensure_ascii=False, allow_nan=False),
            source=fields["source"].value,
            memory_class=(fields["memory_class"] or DEFAULT_CLASS[memory_type]).value,
            session_id=session_id,
            created_at=created,
            importance=0.5 if importance is None else float(importance),  # validated: 0 to 1
            bookmarked=bool(metadata.get("bookmarked") or metadata.get("manual_save")),
            content_hash=content_hash(fields["content"]),
            chunk=json.dumps(chunk) if chunk else None,
            expires_at=created + auto_delete * 86400 if auto_delete else None,
            scope=scope,
            origin=fields["origin"] or derive_origin(fields["source"].value, metadata),
            redacted=True,
        )

    def _commit_new(
        self,
        rows: Sequence[MemoryRow],
        *,
        evict: Sequence[str] = (),
        counts: Mapping[str, int] | None = None,
        projects: Iterable[Project] = (),
    ) -> None:
        """Insert ``rows`` and delete ``evict`` (quota evictions, audited as ``quota_evict``) in ONE
        transaction: a crash never leaves memories evicted for rows that were not stored. The
        redaction hits of building the rows (``counts``) are counted in it too, and the ``projects``
        their scopes name recorded."""
        projects = list(projects)
        started = time.perf_counter()
        catalog = self.catalog
        gone: list[tuple[str, str]] = []

        def run(conn: Any) -> None:
            if evict:
                gone[:] = catalog.delete_in(conn, evict, reason="quota_evict", mend_later=len(evict) > INLINE_DELETE)
            catalog.insert_memories(conn, rows)
            catalog.count_in(conn, counted(counts or {}))
            for session_id, at in {(r.session_id, r.created_at) for r in rows if r.session_id}:
                catalog.ensure_session(conn, session_id, at)
            if projects:
                catalog.record_projects(conn, projects, time.time())

        # Without evictions nothing is read back: a server catalog sends it all in one round trip.
        catalog.write(run, what="storing memories", pipelined=not evict)
        if gone:
            remove_copies(self.path, [mid for mid, _t in gone])
            # The evicted vectors go in the background: a store never waits for the index.
            self.mirror.after_delete(gone, later=True)
            log.info("quota: evicted %d least important memories to store %d", len(gone), len(rows))
        self.stores += len(rows)
        self.store_ms.append((time.perf_counter() - started) * 1000 / len(rows))

    def update(
        self,
        memory_id: str,
        content: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        *,
        scope: str | Project | None = None,
        origin: str | None = None,
        version: int | None = None,
    ) -> Memory:
        """Replace a memory's content and/or merge keys into its metadata (a key set to None is
        removed), redacted as every write is, and/or move it to ``scope`` (``user`` or
        ``project:<key>``), and/or set its ``origin`` (as :func:`~remindful.model.make_origin`
        writes it). The content is re-embedded. Returns the updated memory. ``version``: the
        version the change was made on (:meth:`version_of`); on a shared catalog a memory another
        writer changed since is refused (StaleVersionError), nothing written."""
        self.ready()
        if version is not None:
            version = check_int(version, "version", 1, 2**31 - 1)
        row = self._row(memory_id)
        if origin is not None:
            row.origin = check_origin(origin, "origin")
        counts: dict[str, int] = {}
        moved: list[Project] = []
        scope_before = row.scope
        if scope is not None:
            try:
                row.scope = check_scope(scope)
            except ValueError as exc:
                raise ValidationError("scope", str(exc).split(": ", 1)[-1]) from None
            if isinstance(scope, Project):
                moved.append(scope)
        if content is not None:
            limits = self.settings.limits
            checked = check_text(content, "content", max_chars=limits.content_chars, setting="content_chars")
            row.content = self.redaction.text(checked, counts)
            row.content_hash = content_hash(row.content)
            row.embedding = self.embedder.embed([row.content])[0]
        if metadata is not None:
            if not isinstance(metadata, Mapping):
                raise ValidationError("metadata", "expected a dict")
            merged = {**json.loads(row.metadata), **metadata}
            merged = self.redaction.value({k: v for k, v in merged.items() if v is not None}, counts)
            row.metadata = validate_item(
                {"content": row.content, "metadata": merged}, "", Limits.of(self.settings.limits)
            )["metadata"]
            row.metadata = json.dumps(row.metadata, ensure_ascii=False, allow_nan=False)
            row.bookmarked = bool(merged.get("bookmarked") or merged.get("manual_save"))
            if metadata.get("importance") is not None:  # validated above: a number from 0 to 1
                row.importance = float(metadata["importance"])
        self._commit_update(row, counts, moved, version)
        self.mirror.index_rows([row])
        if row.scope != scope_before:
            self.mirror.after_scope_move()
        return self.get(memory_id)

    def version_of(self, memory_id: str) -> int | None:
        """The memory's version on a shared catalog (1 when stored, one more at each update); None
        on a local one, which keeps none (NotFoundError if there is no such memory)."""
        self._row(memory_id)
        return self.catalog.version_of(memory_id)

    def move_scope(self, scopes: Sequence[str | None], target: str | Project) -> int:
        """Move every memory of ``scopes`` (None: the unscoped ones) to ``target`` (``user``,
        ``project:<key>`` or a Project) in one transaction, audited once; returns how many moved.
        Only the scope changes: contents, vectors and the index stay as they are."""
        self.ready()
        try:
            scope = check_scope(target)
        except ValueError as exc:
            raise ValidationError("scope", str(exc).split(": ", 1)[-1]) from None
        flt = scope_filter(scopes)
        catalog = self.catalog
        moved = [0]

        def run(conn: Any) -> None:
            moved[0] = catalog.move_scope(conn, flt, scope)
            if isinstance(target, Project) and moved[0]:
                catalog.record_projects(conn, [target], time.time())
            catalog.audit(conn, "move_scope", None, {"from": list(scopes), "to": scope, "count": moved[0]})

        catalog.write(run, what="moving memories to another scope")
        if moved[0]:
            self.mirror.after_scope_move()
        return moved[0]

    def _commit_update(
        self, row: MemoryRow, counts: Mapping[str, int], projects: Sequence[Project] = (), version: int | None = None
    ) -> None:
        catalog = self.catalog

        def run(conn: Any) -> None:
            catalog.update_row(conn, row, version=version)
            if projects:
                catalog.record_projects(conn, projects, time.time())
            catalog.audit(conn, "update", row.id, {})
            catalog.count_in(conn, counted(counts))

        catalog.write(run, what="updating a memory")
        if row.embedding is None:
            row.embedding = catalog.embeddings([row.id]).get(row.id)

    def delete(self, memory_id: str) -> bool:
        """Delete one memory everywhere; False if there was none with that id."""
        return self.delete_many([check_text(memory_id, "memory_id")]) == 1

    def delete_by_file_path(self, path: str | os.PathLike[str]) -> int:
        """Delete every memory (Markdown chunks) taken from the file at ``path``; returns how many."""
        given = str(path)
        flt = build_filter(filters={"file_path": {"$in": [given, str(Path(given).expanduser().resolve())]}})
        rows = self.catalog.read(f"SELECT id FROM memories WHERE {flt.sql}", flt.params)
        return self.delete_many([r[0] for r in rows])

    def delete_many(self, ids: Sequence[str], *, reason: str | Mapping[str, str] = "delete") -> int:
        """Delete memories everywhere; returns how many existed. ``reason`` (or ``reason[id]``) is
        the audit-log action. The catalog delete commits first and is the truth: when this returns
        no read or search finds the memories. Their vectors and, for more than
        :data:`INLINE_DELETE` memories, their neighbours' session windows follow
        (:meth:`IndexMirror.after_delete`); attachment copies go here."""
        if not ids:
            return 0
        ids = list(ids)
        later = len(ids) > INLINE_DELETE
        gone = self.catalog.delete_ids(ids, reason=reason, mend_later=later)
        if not gone:
            return 0
        remove_copies(self.path, [mid for mid, _t in gone])
        self.mirror.after_delete(gone, later=later)
        return len(gone)

    # -- reads ----------------------------------------------------------------------------------

    def get(self, memory_id: str) -> Memory:
        """The memory with this id; raises NotFoundError ("Memory not found", suggests search)."""
        return _to_memory(self._row(memory_id))

    def _row(self, memory_id: str) -> MemoryRow:
        memory_id = check_text(memory_id, "memory_id")
        row = self.catalog.get_rows([memory_id]).get(memory_id)
        if row is None:
            raise NotFoundError(memory_id)
        return row

    def get_batch(self, ids: Sequence[str]) -> list[Memory | None]:
        """Memories for ``ids`` in request order; None where an id does not exist. One query."""
        if isinstance(ids, str) or not isinstance(ids, Sequence):
            raise ValidationError("ids", "expected a list of memory ids")
        found = self.catalog.get_rows([check_text(i, f"ids[{n}]") for n, i in enumerate(ids)])
        return [_to_memory(found[i]) if i in found else None for i in ids]

    def list_memories(
        self,
        type: str | MemoryType | None = None,
        session_id: str | None = None,
        limit: int = 50,
        offset: int = 0,
        *,
        source: str | MemorySource | None = None,
        since: datetime | str | float | None = None,
        until: datetime | str | float | None = None,
        scopes: Sequence[str | None] | None = None,
    ) -> list[Memory]:
        """Memories newest first, optionally of one type, one session and/or one source
        (``source="hook"``: the spec's find_by_source), created from ``since`` to ``until``
        (both included), of ``scopes`` (None: of any)."""
        types = [parse_enum(MemoryType, type, "type").value] if type is not None else None
        sources = {"source": parse_enum(MemorySource, source, "source").value} if source is not None else None
        flt = build_filter(
            types=types,
            session_id=self._session_filter(session_id),
            since=None if since is None else to_epoch(since, "since"),
            until=None if until is None else to_epoch(until, "until"),
            filters=sources,
            scopes=scopes,
        )
        rows = self.catalog.select_rows(
            flt, limit=check_int(limit, "limit", 1, 10_000), offset=check_int(offset, "offset", 0, 10**9)
        )
        return [_to_memory(r) for r in rows]

    def session_size(self, session_id: str) -> int:
        """How many memories ``session_id`` holds; NotFoundError ("Session not found") if none."""
        session_id = check_text(session_id, "session_id")
        count = self.catalog.count(build_filter(session_id=self.stored_session_id(session_id)))
        if count == 0:
            raise NotFoundError(session_id, kind="session")
        return count

    def type_counts(self) -> dict[str, int]:
        """How many memories each type holds, as committed (by any process)."""
        return self.catalog.type_counts()

    def scope_counts(self) -> dict[str | None, int]:
        """How many memories each scope holds (None: unscoped), as committed (by any process)."""
        return self.catalog.scope_counts()

    def size_mb(self, *, max_age_s: float = SIZE_MAX_AGE_S) -> float:
        """The storage directory's size without its backups (:meth:`Quotas.size_mb`)."""
        return self.quotas.size_mb(max_age_s=max_age_s)

    # -- search ---------------------------------------------------------------------------------

    def search(
        self,
        query: str,
        *,
        types: Sequence[str | MemoryType] | None = None,
        filters: Mapping[str, Any] | None = None,
        session_id: str | None = None,
        since: datetime | str | float | None = None,
        until: datetime | str | float | None = None,
        limit: int,
        min_score: float,
        collapse: bool,
        resumed_session: str | None,
        scopes: Sequence[str | None] | None = None,
        floor_best: bool = False,
        now: datetime | str | float | None = None,
    ) -> list[SearchHit]:
        """Hybrid search (dense + lexical, fused); see :mod:`remindful.engine.retrieval.search`.
        Filters apply to every space. Best first; scores are calibrated relevances in [0, 1], and
        hits scoring under ``min_score`` are left out (``floor_best``: nothing when the best hit
        scores under it, else the first ``limit`` hits whatever they score). ``collapse`` folds near-duplicates into one
        hit and puts newer versions first; ``resumed_session`` ranks that session's memories higher
        (None: no session); ``scopes`` keeps the memories of those scopes (None among them: the
        unscoped ones; ``scopes=None``: every memory); ``now``: the time the search is asked at
        (default the current time; see :func:`remindful.engine.retrieval.search.rank`). Every
        setting is the caller's: the defaults are the API's (:meth:`remindful.api.MemoryManager.search`)."""
        asked_at = None if now is None else anchors.moment(now, "now")
        query = check_text(query, "query", max_chars=self.settings.limits.query_chars, setting="query_chars")
        if filters is not None:
            check_metadata(filters, "filters", Limits.of(self.settings.limits))
        limit = check_int(limit, "limit", 1, 1000)
        if isinstance(min_score, bool) or not isinstance(min_score, int | float) or not 0 <= min_score <= 1:
            raise ValidationError("min_score", f"expected a number from 0 to 1, got {min_score!r}")
        if resumed_session is not None:
            resumed_session = self.stored_session_id(check_text(resumed_session, "resumed_session"))
        type_values = [parse_enum(MemoryType, t, "type").value for t in types] if types else None
        flt = build_filter(
            types=type_values,
            session_id=self._session_filter(session_id),
            since=None if since is None else to_epoch(since, "since"),
            until=None if until is None else to_epoch(until, "until"),
            filters=None if filters is None else with_stored_sessions(filters, self.stored_session_id),
            scopes=scopes,
        ) & SqlFilter("(expires_at IS NULL OR expires_at > ?)", (time.time(),))
        mirror, catalog = self.mirror, self.catalog
        self.follow_replacements()
        started = time.perf_counter()
        # Read your writes: what this process stored before the search is dense-searchable
        # (lexically it is at once), an import only for its own writer's searches (see
        # remindful.engine.deferred); what it stores meanwhile is not waited for. The query needs
        # the model too, so the wait starts once it is loaded: a first use prepares the int8 model,
        # which can take longer than the budget (the query's vector is cached).
        by = writer()
        if mirror.embeddings_pending(by):
            embed_query(self.embedder, query)
            mirror.await_embeddings(self.settings.performance.search_timeout_ms / 1000, by)
        others = bool(filters or session_id or since is not None or until is not None)
        restricted = others or scopes is not None
        # A scope alone restricts by a count the catalog keeps: the search need not count its rows
        # (at most that many pass: the types may narrow it further).
        in_scopes = None
        held: dict[str | None, int] = {}
        if scopes is not None and not others:
            held = catalog.scope_counts()
            in_scopes = sum(held.get(s, 0) for s in set(scopes))
        searched_types = [MemoryType(t) for t in type_values] if type_values else list(MemoryType)
        counts = catalog.type_counts()
        searched = sum(counts.get(t.value, 0) for t in searched_types)
        # A short-lived reader (exact_before_index) scores a small store exactly from the catalog
        # rather than open the index: faster, and exact (what the index approximates).
        exact = self.exact_before_index > 0 and searched <= self.exact_before_index
        exact = exact and not mirror.state()["opened"]
        # Never waits for the index: while it opens (in the background) or this process reloads
        # its copy, the dense spaces are scored exactly.
        dense = None if exact else mirror.dense.query(searched_types, counts, scopes, held if in_scopes else None)
        results = rank(
            catalog,
            lambda: embed_query(self.embedder, query),
            query,
            flt,
            settings=self.settings.search,
            limit=limit,
            dense_from_index=None if dense is None else dense.query,
            restricted=restricted,
            typed=type_values is not None and len(set(type_values)) < len(MemoryType),
            searched=searched,
            pending_after=None if dense is None else dense.pending_after,
            resumed_session=resumed_session,
            min_score=min_score,
            floor_best=floor_best,
            diverse=collapse,
            passing=in_scopes,
            embed_missing=mirror.embed_for_search,
            now=asked_at,
            scoped=None if dense is None else dense.scoped,
        )
        self._record_search(time.perf_counter() - started, [hit.row.id for hit in results])
        return [
            SearchHit(
                id=hit.row.id,
                type=MemoryType(hit.row.type),
                content=hit.row.content,
                metadata=json.loads(hit.row.metadata),
                score=hit.score,
                created_at=datetime.fromtimestamp(hit.row.created_at, UTC),
                session_id=hit.row.session_id,
                source=MemorySource(hit.row.source),
                sources=hit.spaces,
                similar=hit.similar,
                similar_ids=hit.similar_ids,
                superseded_by=hit.superseded_by,
                scope=hit.row.scope,
                origin=hit.row.origin,
            )
            for hit in results
        ]

    def _record_search(self, seconds: float, ids: list[str]) -> None:
        self.searches += 1
        self.search_ms.append(seconds * 1000)
        if self._access is not None:
            self._access.record(ids, search_ms=seconds * 1000)

    # -- the vector index (the mirror's) --------------------------------------------------------

    @property
    def index(self) -> VectorIndex | None:
        """The vector index, opened now if needed, or None while it is unusable (:meth:`index_status`)."""
        return self.mirror.index

    def index_state(self) -> dict[str, Any]:
        """The vector index as this process sees it, without opening anything (see
        :meth:`IndexMirror.state`)."""
        mirror = self._mirror
        return mirror.state() if mirror is not None else {"opened": False, "available": None, "error": None}

    def index_status(self) -> dict[str, Any]:
        """Opens the index: whether it is usable and why not (see :meth:`IndexMirror.status`)."""
        status = self.mirror.status()
        if status["backend"] is None and self._given_index is not None:
            status["backend"] = type(self._given_index).__name__
        return status

    def index_lock(self) -> contextlib.AbstractContextManager[int]:
        """Hold the vector-index lock for a ``with`` block (:meth:`IndexMirror.lock`)."""
        return self.mirror.lock()

    def index_rows(self, rows: Sequence[MemoryRow]) -> None:
        """Add rows committed to the catalog to the vector index (:meth:`IndexMirror.index_rows`)."""
        self.mirror.index_rows(rows)

    def reindex(self, *, reset: bool, progress: Any = None) -> dict[str, int]:
        """Rebuild the vector index from the catalog (:meth:`IndexMirror.reindex`). Refused
        (StorageLockedError) while a restore, a clear-all or another reindex of the store runs;
        other processes take their view of the index afresh afterwards."""
        return self._renewing_index(lambda: self.mirror.reindex(reset=reset, progress=progress))

    def index_keeps_files(self) -> bool:
        """Whether the vector index is files in the storage directory (:meth:`IndexMirror.keeps_files`)."""
        return self.mirror.keeps_files()

    def index_replacement(self) -> contextlib.AbstractContextManager[Callable[[Path], bool]]:
        """Hold the vector index while the content is replaced (:meth:`IndexMirror.replacing`):
        yields ``replace(files)``, which puts a restored archive's index files in place."""
        return self.mirror.replacing()

    def index_replaced(self, *, progress: Any = None) -> dict[str, int]:
        """Open the index files a restore put in place (:meth:`IndexMirror.open_replaced`), as
        :meth:`reindex` would leave a rebuilt index."""
        return self._renewing_index(lambda: self.mirror.open_replaced(progress=progress))

    def _renewing_index(self, renew: Callable[[], dict[str, int]]) -> dict[str, int]:
        with self.store_lock.maintenance("rebuild the index"):
            counts = renew()
            self.store_lock.bump("rebuild the index")
            self._generation = self.store_lock.generation()
        if self.catalog.windows_to_mend():  # left by a clear-all (delete_all)
            self.mirror.kick_finisher()
        return counts

    def delete_all(self, *, reason: str) -> int:
        """Delete every memory from the catalog, in transactions of 5,000, and their attachment
        copies; returns how many. The vector index is left as it is: the caller holds the index
        lock and rebuilds the index afterwards (:meth:`reindex`), which drops their vectors and
        has the session windows around them mended (not here: the background finisher this
        would start takes the index lock)."""
        catalog = self.catalog
        deleted = 0
        while True:
            ids = catalog.some_ids(5000)
            if not ids:
                break
            gone = catalog.delete_ids(ids, reason=reason, mend_later=True)
            remove_copies(self.path, [mid for mid, _t in gone])
            deleted += len(gone)
        return deleted

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until the vector index reflects every store and delete so far (and a shared
        catalog's session windows every store of this process); False on timeout.
        Raises CorruptionError if the catalog was found damaged meanwhile (the index is made from
        it: it cannot reflect what the catalog lost)."""
        mirror = self._mirror
        done = True if mirror is None else mirror.flush(timeout)
        catalog = self._catalog
        if catalog is not None:  # (a shared catalog numbers a session's new rows after their commit)
            done = catalog.await_windows(timeout) and done
        damage = None if catalog is None else catalog.damage
        if damage is not None:  # found after this process's writes, which went into the damaged file
            raise CorruptionError(
                damage.message,
                suggestion=f"What was stored went into it and may be lost with it. Run `remindful doctor` for "
                f"details; {CATALOG_WAY_OUT}",
                part="catalog",
            )
        return done

    def embedding_cache_stats(self) -> dict[str, Any]:
        """The embedding cache's figures (hits, misses, entries), or {} while no embedder is loaded:
        asking never loads the model."""
        embedder = self._embedder.current
        return embedder.stats() if embedder is not None and hasattr(embedder, "stats") else {}

    # -- closing --------------------------------------------------------------------------------

    def close_for_exit(self) -> None:
        """:meth:`close` at interpreter exit (the program did not close the store): queued work is
        finished with what is loaded, but neither the index nor the embedder is opened now (the
        interpreter refuses new threads by then); what is left is indexed at the next open."""
        self._exiting = True
        self.close()

    def close(self) -> None:
        """Finish the index's queued work, flush pending access counts, release the catalog and the
        index. Every background thread has stopped when this returns (none is left inside the
        index, the model or the catalog); a later use opens the store again."""
        mirror = self._mirror
        if mirror is not None:
            if self._exiting:
                mirror.close_for_exit()
            else:
                mirror.close()
        if self._access is not None:
            self._access.close()
        self.quotas.wait_for_size()
        with self._init_lock:
            if self._catalog is not None:
                self._catalog.close()
            if self._local is not None:
                self._local.close()
            self._catalog = None
            self._local = None
            self._mirror = None
            self._access = None


__all__ = ["Store"]


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
        scope=row.scope,
        origin=row.origin,
    )
