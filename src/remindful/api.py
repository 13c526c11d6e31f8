"""MemoryManager: the one API every shell (CLI, MCP, HTTP, hooks) calls, and the composition root:
it builds the store (catalog, embedder, index), the repositories over its catalog and what each
service needs, once, and hands every service the narrow parts it uses (the daemon and the shells
get theirs from the manager's methods).

Every write follows one path: validate → catalog commit (acknowledged here: a crash after it
loses nothing) → embed (cached) → vector index, the last two in the background by default
(``performance.defer_embedding``; a search first waits for the pending embeddings of this
process's small writes and of its own thread's large ones: :mod:`remindful.engine.deferred`). A
row the index did not take is marked un-indexed, and embedded and indexed at the next open (or
``reindex``). The catalog, the embedder and the index
start on first use, so opening costs a few milliseconds and loads no model.

Every default of a search is resolved here, from the settings (the relevance floors, how many
candidates context reads, collapsing near-duplicates, the resumed session) and from the client
(the scopes it reads): the engine below takes each as an argument.

Scopes (:mod:`remindful.engine.scopes`): a manager opened with ``project=`` (a directory, or a
:class:`~remindful.engine.projects.Project`), or told :meth:`MemoryManager.work_in`, is a client
working in that project: its reads see that project's memories and the user's by default, and what
it stores without a scope is captured there. A manager opened without one (a library's) reads every
memory by default, as before scopes, and stores where the memory's metadata says (a ``cwd``) or
unscoped. Each read takes ``scope=`` to say otherwise (``all``, ``user``, ``project``,
``project:<name>``, ``here``, ``unscoped``, or a list), each write ``scope=`` (``user``,
``project``, ``project:<name>``).

Thread-safe: the catalog serialises its writes; the index and embedder are thread-safe.
"""

from __future__ import annotations

import builtins
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from remindful.config import Settings
from remindful.embed.base import Embedder
from remindful.engine import scopes as scoping
from remindful.engine.backend import CatalogBackend, is_shared, repositories_over
from remindful.engine.projects import PROJECT_PREFIX, Project
from remindful.engine.store import Store
from remindful.errors import MemoryDisabledError, StorageError, ValidationError
from remindful.index.base import VectorIndex
from remindful.model import (
    BackupResult,
    CaptureStatus,
    ChunkMetadata,
    CleanupReport,
    ClearResult,
    Context,
    DedupReport,
    Diagnosis,
    ExportResult,
    FileIndexed,
    ImportResult,
    IndexStatus,
    Memory,
    MemoryClass,
    MemorySource,
    MemoryType,
    PatternReport,
    RestoreResult,
    ScopeUsage,
    SearchHit,
    Session,
    SessionDeleted,
    Stats,
    Suggestions,
)

if TYPE_CHECKING:
    from remindful.services.ingest.watcher import MarkdownWatcher
    from remindful.services.migrate import MigrationReport
    from remindful.services.policy.retention import Policy
    from remindful.services.policy.scheduler import CleanupScheduler

log = logging.getLogger("remindful")


class MemoryManager:
    """Store, search and manage memories in one storage directory.

    ``embedder`` and ``index`` default to the configured ones (ONNX MiniLM; embedded Chroma at
    ``<storage>/chroma``, or a Chroma server); pass fakes in tests. ``exact_before_index``: until the
    vector index is open, searches over up to this many memories are scored exactly from the catalog
    rather than wait for it (a server's first answer; see :class:`~remindful.engine.store.Store`).
    ``project``: the directory (or :class:`~remindful.engine.projects.Project`) its client works in
    (:meth:`work_in`); None: a client of no particular project, reading every memory by default.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        embedder: Embedder | None = None,
        index: VectorIndex | None = None,
        exact_before_index: int = 0,
        project: str | os.PathLike[str] | Project | None = None,
    ) -> None:
        self.settings = settings
        self.path = settings.storage_path
        self._store = Store(settings, embedder=embedder, index=index, exact_before_index=exact_before_index)
        self._repos = repositories_over(settings, self._catalog, lambda: self._store.local_catalog)
        # This manager's client's resumed session (resume_session): a manager is one client.
        self._resumed_session: str | None = None
        # What this manager's reads see when they name no scope (None: every memory).
        self._reads: scoping.Selection | None = None
        if project is not None:
            self.work_in(project)

    def _catalog(self) -> CatalogBackend:
        """The open catalog, as the repositories reach it (opening the store on first use)."""
        self._store.ready()
        return self._store.catalog

    def _policy(self) -> Policy:
        from remindful.services.policy.retention import Policy

        return Policy(self._store, self._repos.memories, self._repos.retention)

    @property
    def engine(self) -> Store:
        """The storage engine behind this manager: what services are built on, and what white-box
        tests inspect. Shells use the manager's methods instead."""
        return self._store

    # -- lifecycle ------------------------------------------------------------------------------

    def __enter__(self) -> MemoryManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every memory stored so far is in the vector index (search finds them before
        that too, scored from the catalog) and every large delete so far has left it and the
        session windows (search skips them before that too). False if ``timeout`` seconds passed
        first. Raises CorruptionError if the catalog was found damaged meanwhile."""
        return self._store.flush(timeout)

    def close(self) -> None:
        """Flush pending access counts and release the catalog and the index."""
        self._store.close()

    def load_model(self) -> None:
        """Open the store and load the embedding model now rather than at the first store or search
        (a server does it while it waits for its first call). Raises what opening or loading raises."""
        self._store.ready()
        self._store.embedder.embed(["load the model"])

    def drain_spool(self) -> int:
        """Store what hooks and capture points spooled (:mod:`remindful.services.ingest.drainer`):
        the explicit step of a process that owns the store, since opening one stores nothing (the
        CLI's commands, ``remindful serve`` and the proxy take it when they open the store; the
        daemon drains all along). Returns the events processed; 0 at once when another live process
        runs the daemon, which drains within ``daemon.poll_interval_ms``, or when another process is
        draining. Raises what opening the store raises (MemoryDisabledError...)."""
        from remindful.engine.connection import CATALOG_NAME
        from remindful.runtime import daemon_elsewhere
        from remindful.services.ingest.drainer import drain_spool

        if not (self.path / CATALOG_NAME).exists() and self.settings.enabled:
            return 0  # no catalog, no spool: a new store stays untouched until its first write
        self._store.ready()
        if daemon_elsewhere(self.path):
            return 0
        count = drain_spool(self._store, resolve=self.project_of, learning=self._repos.learning)
        if count:
            log.info("stored %d spooled events", count)
        return count

    def spool_events(self, records: Sequence[tuple[str, str, str, float]]) -> None:
        """Spool hook events a hook could not write itself (``(idem_key, kind, payload, created_at)``,
        as the spool's fallback file holds them; the daemon kept them in memory while the disk was
        full): redacted again, replays ignored. Raises StorageFullError while the disk stays full."""
        self._store.ready()
        self._repos.captures.import_spooled(records)

    def warm_up(self) -> None:
        """Open the store, load the model and open the vector index now, so that the first request
        does not pay for them. Raises what opening or loading raises."""
        self._store.ready()
        self._store.embedder.embed(["warm up"])
        _ = self._store.index

    def check_enabled(self) -> None:
        """Raise MemoryDisabledError (with the reason) if memory is off or its storage unusable."""
        self._store.ready()

    @property
    def disabled_reason(self) -> str | None:
        """Why memory is disabled (config, or an unusable storage path), or None."""
        return self._store.disabled_reason

    @property
    def session_id(self) -> str:
        """This process's session, generated on first use (``session_YYYYmmdd_HHMMSS_xxxx``)."""
        return self._store.session_id

    @session_id.setter
    def session_id(self, value: str) -> None:
        self._store.session_id = value

    # -- scopes ---------------------------------------------------------------------------------

    def work_in(self, where: str | os.PathLike[str] | Project | None, *, reads: Any = "here") -> Project | None:
        """Make this manager a client working in ``where``: a directory (its project is resolved:
        :mod:`remindful.engine.projects`) or a Project. What it stores without a scope is captured
        there from now on, and its reads that name no scope read ``reads``: by default ``here``,
        that project's memories and the user's (a directory in no project, such as the home
        directory, leaves it in none: then the user's and the unscoped memories); ``all`` keeps
        them reading every memory (the command line does). Returns the project (None: none)."""
        project = where if isinstance(where, Project) or where is None else self.project_of(where)
        self._store.project = project
        try:
            self._reads = scoping.parse_selection(reads, current=project, lookup=self._repos.scopes.find)
        except ValueError as exc:
            raise ValidationError("reads", str(exc).split(": ", 1)[-1]) from None
        return project

    @property
    def project(self) -> Project | None:
        """The project this manager's client works in (:meth:`work_in`), or None."""
        return self._store.project

    def project_of(self, directory: str | os.PathLike[str]) -> Project | None:
        """The project of ``directory`` under this store's settings (``scopes.project``,
        ``scopes.projects``, ``.remindful`` markers, git), or None (the home directory, the root)."""
        return self._store.scopes.resolve(os.fspath(directory))

    def bind_project(self, directory: str | os.PathLike[str], project: str) -> Project:
        """Bind ``directory`` (and what lies under it) to ``project``: a known project's key or
        name (``remindful scopes`` lists them), else a new project of that name. The user's way to
        share a project between two places: a ``.remindful`` marker cannot claim a project bound to
        another directory (:mod:`remindful.engine.projects`, *Claims*). Returns the project the
        directory is now in; ValidationError for a directory that is none or a name without letters."""
        path = os.path.realpath(os.path.expanduser(os.fspath(directory)))
        if not os.path.isdir(path):
            raise ValidationError("directory", f"expected an existing directory, got {os.fspath(directory)!r}")
        repo = self._repos.scopes
        scope = repo.find(project) if project.strip() else None
        if scope is not None:
            key = scope.removeprefix(PROJECT_PREFIX)
            name = repo.projects().get(scope, (key, ""))[0]
        else:
            try:
                named = Project.named(project)
            except ValueError as exc:
                raise ValidationError("project", str(exc)) from None
            key, name = named.key, named.name
        repo.bind(path, key, name)
        self._store.resolver.forget()
        found = self.project_of(path)
        assert found is not None  # a bound directory is in its project
        return found

    def unbind_project(self, directory: str | os.PathLike[str]) -> bool:
        """Remove ``directory`` 's binding (:meth:`bind_project`); whether it had one."""
        path = os.path.realpath(os.path.expanduser(os.fspath(directory)))
        removed = self._repos.scopes.unbind(path)
        self._store.resolver.forget()
        return removed

    def refused_markers(self) -> dict[str, tuple[str, str]]:
        """The ``.remindful`` markers this manager refused so far: the marker's directory → (the
        project key it named, the directory that project is bound to; "" for a place's key)."""
        return dict(self._store.resolver.refused)

    def seen_from(self, directory: str | os.PathLike[str] | None) -> tuple[Project | str | None, ...]:
        """The scopes a client working in ``directory`` sees, as a read's ``scope`` takes them: its
        project (the Project, which may hold nothing yet) and the user's; in no project, or when
        ``directory`` is None, the user's and the unscoped memories. What a hook's context is
        searched in."""
        project = None if directory is None else self.project_of(directory)
        return (project, scoping.USER) if project is not None else (scoping.USER, None)

    def scopes(self) -> builtins.list[ScopeUsage]:
        """Every scope that holds memories, with its count: the projects (name, root directory),
        the user's, the unscoped memories; most memories first."""
        repo = self._repos.scopes
        projects = repo.projects()
        out = []
        for scope, count in repo.counts().items():
            if scope is None:
                out.append(ScopeUsage(scoping.UNSCOPED, "unscoped", count))
            elif scope == scoping.USER:
                out.append(ScopeUsage(scope, "user", count))
            else:
                name, root = projects.get(scope, (scope.removeprefix("project:"), ""))
                out.append(ScopeUsage(scope, "project", count, name, root or None))
        return sorted(out, key=lambda u: (-u.count, u.scope))

    def user_level(self, content: str, *, type: str = "knowledge", source: str = "manual") -> str | None:
        """Why a memory of this text, type and source would be stored at user level when its writer
        names no scope (the rule: :func:`remindful.engine.scopes.user_level`), or None when it would
        stay in the project it is captured in (or ``scopes.user_level`` is off)."""
        if not self.settings.scopes.user_level:
            return None
        project = self.project
        return scoping.user_level(
            content, type=type, source=source, metadata={"role": "user"}, project_name=project.name if project else None
        )

    def _selection(self, scope: Any) -> scoping.Selection | None:
        """The scopes a read keeps: ``scope`` as :func:`remindful.engine.scopes.parse_selection`
        reads it, or this manager's default when None."""
        if scope is None:
            return self._reads
        try:
            return scoping.parse_selection(scope, current=self.project, lookup=self._repos.scopes.find)
        except ValueError as exc:
            raise ValidationError("scope", str(exc).split(": ", 1)[-1]) from None

    def _scope_to_write(self, scope: Any) -> str | Project | None:
        """The scope a write names (``user``, ``project``, ``project:<name>``, a Project), as the
        store takes it; None (automatic) when ``scope`` is None."""
        if scope is None or isinstance(scope, Project):
            return scope
        word = scope.strip() if isinstance(scope, str) else scope
        if word == scoping.USER:
            return word
        if word == "project":
            if self.project is None:
                raise ValidationError("scope", "'project' means the project this runs in, and it runs in none")
            return self.project
        if isinstance(word, str) and word.startswith("project:") and word[len("project:") :].strip():
            name = word[len("project:") :].strip()
            found = self._repos.scopes.find(name)
            if found is not None:
                return found
            try:
                return Project.named(name)
            except ValueError:
                pass
        raise ValidationError("scope", f"expected user, project or project:<name>, got {scope!r}")

    # -- writes ---------------------------------------------------------------------------------

    def store(
        self,
        content: str,
        type: str | MemoryType = "action",
        metadata: Mapping[str, Any] | None = None,
        session_id: str | None = None,
        timestamp: datetime | str | float | None = None,
        source: str | MemorySource = "manual",
        *,
        memory_class: str | MemoryClass | None = None,
        chunk: ChunkMetadata | Mapping[str, Any] | None = None,
        scope: str | Project | None = None,
        origin: str | None = None,
    ) -> str:
        """Store one memory and return its id. Raises ValidationError naming a bad field.
        ``scope``: ``user`` (seen from every project), ``project`` (this manager's), or
        ``project:<name>``; None: where it was captured (its metadata's ``cwd``, else this
        manager's project), or the user's when it states a preference or rule that holds everywhere
        (:func:`remindful.engine.scopes.user_level`). ``origin``: whose words these are
        (:class:`~remindful.model.OriginKind`: ``user``, ``assistant``, ``tool:NAME``,
        ``file:PATH``, ``web:URL``...); None: derived from ``source`` and ``metadata``
        (:func:`~remindful.model.derive_origin`; the library's own caller is taken as the user)."""
        item: dict[str, Any] = {"content": content, "type": type, "metadata": metadata, "session_id": session_id}
        item |= {"timestamp": timestamp, "source": source, "memory_class": memory_class, "chunk": chunk}
        item["origin"] = origin
        item["scope"] = self._scope_to_write(scope)
        return self._store.store_batch([item])[0]

    def store_batch(self, items: Sequence[Mapping[str, Any]], *, defer: bool | None = None) -> builtins.list[str]:
        """Store many memories in one catalog transaction with one batched embedding call.

        Each item takes the keyword arguments of :meth:`store`. All or nothing: a bad item
        raises ValidationError (naming ``items[i].field``) before anything is written.
        ``defer=False`` embeds before the commit, so an embedding failure raises EmbedderError and
        stores nothing; by default ``performance.defer_embedding`` decides.
        """
        if isinstance(items, Sequence) and not isinstance(items, str | bytes):
            given = [
                {**item, "scope": self._scope_to_write(item["scope"])}
                if isinstance(item, Mapping) and item.get("scope") is not None
                else item
                for item in items
            ]
            return self._store.store_batch(given, defer=defer)
        return self._store.store_batch(items, defer=defer)

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
        removed), and/or move it to ``scope`` (``user``, ``project``, ``project:<name>``), and/or
        say whose words it holds (``origin``: ``user_confirmed`` once the user confirmed them). The
        content is re-embedded. Returns the updated memory. ``version``: the version the change was
        made on (:meth:`version_of`): on a shared PostgreSQL catalog, a memory another machine or
        person changed since is refused with StaleVersionError and nothing is written."""
        return self._store.update(
            memory_id, content, metadata, scope=self._scope_to_write(scope), origin=origin, version=version
        )

    def version_of(self, memory_id: str) -> int | None:
        """The memory's version on a shared PostgreSQL catalog (1 when stored, one more at each
        update), to pass to :meth:`update`; None on the local catalog, which keeps none."""
        return self._store.version_of(memory_id)

    def move_scope(self, source: Any, target: str | Project) -> int:
        """Move every memory of ``source`` (a read's scope: ``unscoped``, ``user``,
        ``project:<name>``, ``here`` or several; not ``all``) to ``target`` (``user``, ``project``,
        ``project:<name>``); returns how many moved. After the upgrade from before scopes,
        ``move_scope("unscoped", "project:NAME")`` gives the memories that named no directory a
        project (or ``"user"``: every project sees them, as before)."""
        if source is None:
            raise ValidationError("from", "expected the scope to move from, e.g. unscoped, user or project:<name>")
        try:
            scopes = scoping.parse_selection(source, current=self.project, lookup=self._repos.scopes.find, field="from")
        except ValueError as exc:
            raise ValidationError("from", str(exc).split(": ", 1)[-1]) from None
        if scopes is None:
            raise ValidationError("from", "expected the scopes to move from, not all: unscoped, user or project:<name>")
        to = self._scope_to_write(target)
        if to is None:
            raise ValidationError("scope", "expected user, project or project:<name>")
        return self._store.move_scope(scopes, to)

    def delete(self, memory_id: str) -> bool:
        """Delete one memory everywhere; False if there was none with that id. It stays forgotten:
        a tombstone of its text (a hash, never the text) keeps automatic captures from storing the
        same statement again (:mod:`remindful.services.forget`)."""
        from remindful.engine.validation import check_text
        from remindful.services.forget import forget

        return forget(self._store, self._repos.captures, [check_text(memory_id, "memory_id")]) == 1

    def delete_by_file_path(self, path: str | os.PathLike[str]) -> int:
        """Delete every memory (Markdown chunks) taken from the file at ``path``; returns how many."""
        return self._store.delete_by_file_path(path)

    def delete_many(self, ids: Sequence[str]) -> int:
        """Delete memories by id; returns how many existed. They stay forgotten, as with :meth:`delete`."""
        from remindful.services.forget import forget

        return forget(self._store, self._repos.captures, ids)

    # -- reads ----------------------------------------------------------------------------------

    def get(self, memory_id: str) -> Memory:
        """The memory with this id; raises NotFoundError ("Memory not found", suggests search)."""
        return self._store.get(memory_id)

    def resolve_id(self, given: str, *, kind: str = "memory") -> str:
        """The memory id (``kind="session"``: the session id) that ``given`` names: the id itself, or
        the one stored id that starts with it, as git takes a commit's hash. NotFoundError when none
        does; ValidationError listing the candidates when several do."""
        from remindful.services.ids import resolve

        if kind == "session" and self._repos.sessions.stored_id(given) != given:
            return given  # an id holding a secret is stored redacted: the lookups map it
        return resolve(self._repos.sessions if kind == "session" else self._repos.memories, given, kind)

    def short_ids(self, ids: Sequence[str], *, kind: str = "memory") -> dict[str, str]:
        """``{id: the shortest prefix of it no other stored memory (or session) id starts with}``;
        :meth:`resolve_id` takes such a prefix back."""
        from remindful.services.ids import short_forms

        return short_forms(self._repos.sessions if kind == "session" else self._repos.memories, ids, kind)

    def get_batch(self, ids: Sequence[str]) -> builtins.list[Memory | None]:
        """Memories for ``ids`` in request order; None where an id does not exist. One query."""
        return self._store.get_batch(ids)

    def list(
        self,
        type: str | MemoryType | None = None,
        session_id: str | None = None,
        limit: int = 50,
        offset: int = 0,
        *,
        source: str | MemorySource | None = None,
        since: datetime | str | float | None = None,
        until: datetime | str | float | None = None,
        scope: Any = None,
    ) -> builtins.list[Memory]:
        """Memories newest first, optionally of one type, one session and/or one source
        (``source="hook"``: the spec's find_by_source), created from ``since`` to ``until`` (both
        included; ISO 8601, a datetime or epoch seconds), of ``scope`` (see the module docstring;
        default: what this manager reads). One indexed query whatever the range."""
        return self._store.list_memories(
            type, session_id, limit, offset, source=source, since=since, until=until, scopes=self._selection(scope)
        )

    def search(
        self,
        query: str,
        types: Sequence[str | MemoryType] | None = None,
        limit: int = 10,
        filters: Mapping[str, Any] | None = None,
        session_id: str | None = None,
        since: datetime | str | float | None = None,
        until: datetime | str | float | None = None,
        min_score: float | None = None,
        collapse: bool = True,
        *,
        resumed_session: str | None = None,
        scope: Any = None,
        now: datetime | str | float | None = None,
    ) -> builtins.list[SearchHit]:
        """Hybrid search (dense + lexical, fused); see :mod:`remindful.engine.retrieval.search`.
        Filters apply to every space. Best first; ``score`` is a calibrated relevance in [0, 1],
        comparable across queries, and hits under ``min_score`` (0: the top hits whatever they
        score) are left out, so an unrelated query finds nothing; by default (``search.min_score``)
        only the best hit must reach it, and the next ones follow it whatever they score.
        Near-duplicates come back as one hit counting the others (``similar``) and an older version
        of a subject is marked ``superseded_by`` the newer, unless ``collapse`` is False (every
        copy, in order). ``resumed_session``: a session whose memories rank higher (default: the
        one :meth:`resume_session` resumed). ``scope``: whose memories (see the module docstring;
        default: what this manager reads, every memory for a manager of no project). ``now``: the
        time the search is asked at (a datetime, ISO 8601 text or epoch seconds; default the current
        time), from which ages and the query's time anchors are measured: "what did I buy 10 days
        ago?" favours the memories created about 10 days before it (a replay of history asks as of
        its own dates)."""
        return self._store.search(
            query,
            types=types,
            filters=filters,
            session_id=session_id,
            since=since,
            until=until,
            limit=limit,
            min_score=self.settings.search.min_score if min_score is None else min_score,
            floor_best=min_score is None,
            collapse=collapse,
            resumed_session=self._resumed(resumed_session),
            scopes=self._selection(scope),
            now=now,
        )

    def context(
        self,
        query: str,
        budget_tokens: int | None = None,
        session_id: str | None = None,
        types: Sequence[str] | None = None,
        *,
        exclude: str | None = None,
        min_score: float | None = None,
        resumed_session: str | None = None,
        scope: Any = None,
        now: datetime | str | float | None = None,
    ) -> Context:
        """The memories most relevant to ``query``: ``.text`` holds them as short lines with ids,
        within ``budget_tokens`` (default ``hooks.context_budget_tokens``; estimated, never over),
        as the hooks inject them and ``remindful context`` prints them; ``.hits`` are those memories.
        When none scores ``min_score`` (default ``context.min_score``) ``.text`` is "" and a hook
        injects nothing. ``exclude`` drops hits whose text equals it (the prompt being answered);
        ``resumed_session``, ``scope`` and ``now`` are as in :meth:`search` (a hook passes
        :meth:`seen_from` its directory). The candidates (``hooks.context_candidates``) and the
        line width (``hooks.line_chars``) are the settings'."""
        from remindful.services.context import build_context

        hooks = self.settings.hooks
        return build_context(
            self._store,
            query,
            budget_tokens=hooks.context_budget_tokens if budget_tokens is None else budget_tokens,
            candidates=hooks.context_candidates,
            line_chars=hooks.line_chars,
            min_score=self.settings.context.min_score if min_score is None else min_score,
            exclude=exclude,
            types=types,
            session_id=session_id,
            resumed_session=self._resumed(resumed_session),
            scopes=self._selection(scope),
            now=now,
        )

    def hook_context(self, request: Mapping[str, Any]) -> Context:
        """What a coding agent's hook injects for ``request`` (the JSON of
        :func:`remindful.services.context.hook_request`: ``event``, ``query``, ``session_id``,
        ``cwd``, ``budget_tokens``, ``exclude``): on ``SessionStart`` the brief of the session's
        project (its recent decisions, open failures and preferences), on ``UserPromptSubmit`` the
        prompt's context, searched in the scopes seen from ``cwd`` (or the request's ``scope``, as
        :meth:`search` takes it); every line says why it is there, the project's settings may turn
        it down or off (``hooks.inject``, ``hooks.projects``), and what is injected is counted in
        the ledger (``stats().injection``). Raises ValidationError naming a bad field of the request."""
        from remindful.services.context import HookRequest, hook_context

        parsed = HookRequest.parse(request)
        try:
            # The scopes seen from the agent's directory (its project's and the user's; no directory:
            # the user's and the unscoped), unless the request names its own.
            scope = parsed.scope if parsed.scope is not None else self.seen_from(parsed.cwd)
            return hook_context(
                self._store,
                self._repos.brief,
                self._repos.ledger,
                parsed,
                resolve=self.project_of,
                resumed_session=self._resumed(None),
                scopes=self._selection(scope),
            )
        except StorageError:
            if parsed.event != "SessionStart" or not is_shared(self.settings):
                raise
            # The shared catalog's server does not answer: the brief says so, and what waits here.
            from remindful.engine.repositories.stats import StatsRepository
            from remindful.services.context import unreachable_brief

            return unreachable_brief(StatsRepository(lambda: self._store.local_catalog).spool_pending())

    def failure_warning(self, record: Mapping[str, Any]) -> str | None:
        """The warning a coding agent's ``PreToolUse`` gets for the call ``record`` starts (a hook's
        record: ``{"memories": [...]}`` as the hooks build it) when the same call failed before in
        its project and has not succeeded since (:mod:`remindful.services.ingest.forewarn`): from
        this store's catalog and spool, so on a shared catalog from every machine of the team.
        None for none. The hook asks the daemon for it on a shared catalog; on a local store it
        reads the catalog itself."""
        from remindful.services.ingest.forewarn import failure_warning

        if not isinstance(record.get("memories"), list):
            raise ValidationError("record", 'expected {"memories": [...]} as a PreToolUse hook builds it')
        projects = {key: entry.model_dump() for key, entry in self.settings.hooks.projects.items()}
        return failure_warning(
            self._repos.captures,
            lambda cwd: None if cwd is None else self.project_of(cwd),
            dict(record),
            projects,
            roots_differ=is_shared(self.settings),
        )

    def resume_session(self, session_id: str) -> int:
        """Rank this session's memories higher in this manager's later searches, context and
        suggestions (until another is resumed, or it is deleted); returns its memory count. A
        manager is one client: a server whose clients share one manager keeps what each client
        resumed and passes it as their requests' ``resumed_session`` instead."""
        count = self._store.session_size(session_id)
        self._resumed_session = session_id
        return count

    @property
    def resumed_session(self) -> str | None:
        """The session :meth:`resume_session` resumed, or None."""
        return self._resumed_session

    def session_size(self, session_id: str) -> int:
        """How many memories the session holds; NotFoundError if none (what :meth:`resume_session`
        checks before it resumes one)."""
        return self._store.session_size(session_id)

    def _resumed(self, given: str | None) -> str | None:
        return self._resumed_session if given is None else given

    def stats(self, scope: Any = None) -> Stats:
        """Counts per collection, storage size and quota use, latencies, cache hit rate, the
        memories of each scope (``scopes``); with ``scope`` (as in :meth:`search`), ``scope`` says
        how many memories of each type it holds."""
        from dataclasses import replace

        from remindful.services.stats import build_stats

        stats = build_stats(self._store, self._repos)
        if stats.partial:
            return stats
        selected = None
        if scope is not None:
            selection = self._selection(scope)
            by_type = self._repos.scopes.by_type(selection)
            selected = {"selection": scoping.describe(selection), "memories": sum(by_type.values()), "by_type": by_type}
        return replace(stats, scopes=tuple(self.scopes()), scope=selected)

    # -- maintenance ----------------------------------------------------------------------------

    def reindex(self, *, reset: bool = False, progress: Any = None) -> dict[str, int]:
        """Rebuild the vector index from the catalog. ``reset=True`` first backs up and removes
        the index files (the recovery for a corrupted index). Returns counts per collection."""
        return self._store.reindex(reset=reset, progress=progress)

    def doctor(self) -> Diagnosis:
        """What is damaged (catalog, index files, spool, permissions, token file) and the way out for
        each. Never raises for damage; takes seconds (it reads every file)."""
        from remindful.services.doctor import diagnose

        chroma = self.settings.storage.chromadb
        files = None
        if chroma.mode != "server":
            from remindful.index import ChromaEmbeddedIndex

            files = ChromaEmbeddedIndex(path=self.path / "chroma")  # its files only: nothing is opened
        return diagnose(self.path, self.settings, files, self.settings.catalog.url)

    def migrate(
        self, to: str | None = None, chroma: str | None = None, *, progress: Callable[[int, int], None] | None = None
    ) -> MigrationReport:
        """Copy this local store into the empty PostgreSQL catalog ``to`` (default: ``catalog.url``)
        and its vectors into the Chroma server ``chroma`` (``http://HOST:PORT``; default: the
        configured server), then verify every part's count (:mod:`remindful.services.migrate`).
        The local store is left as it was; ``progress(done, total)`` after each page of memories."""
        from remindful.engine.postgres.catalog import PostgresCatalog
        from remindful.engine.postgres.transfer import PostgresTransfer
        from remindful.engine.repositories.transfer import TransferRepository
        from remindful.errors import StorageLockedError
        from remindful.index import ChromaServerIndex
        from remindful.services.migrate import migrate

        url = to or self.settings.catalog.url
        if not url or not url.startswith(("postgresql://", "postgres://")):
            raise ValidationError("to", "expected a URL like postgresql://USER@HOST:5432/DB (or set catalog.url)")
        host, port, ssl = _chroma_address(chroma, self.settings)
        self._store.ready()
        target = PostgresCatalog(url, redaction=self._store.redaction)
        index = ChromaServerIndex(host, port, ssl=ssl)
        try:
            with target.exclusive("migrate-in", wait=False) as held:
                if not held:
                    raise StorageLockedError(f"another migration into {target.shown_url} is running")
                return migrate(
                    self._repos.memories,
                    TransferRepository(lambda: self._store.local_catalog),
                    PostgresTransfer(target),
                    index,
                    shown_target=target.shown_url,
                    progress=progress,
                )
        finally:
            target.close()
            index.close()

    def team_add(self, name: str) -> str:
        """Add ``name`` to the team store of ``catalog.url`` with a new token, returned once (only its
        hash is kept); see :mod:`remindful.engine.postgres.team`."""
        from remindful.engine.postgres.team import TeamRepository

        catalog = self._shared_catalog()
        try:
            return TeamRepository(catalog).add(name)
        finally:
            catalog.close()

    def team_revoke(self, name: str) -> bool:
        """Revoke ``name``'s token: from now on it reads and writes nothing; whether it had one."""
        from remindful.engine.postgres.team import TeamRepository

        catalog = self._shared_catalog()
        try:
            return TeamRepository(catalog).revoke(name)
        finally:
            catalog.close()

    def team_people(self) -> builtins.list[tuple[str, float, float | None]]:
        """``(name, added at, revoked at or None)`` of everyone the team store knows."""
        from remindful.engine.postgres.team import TeamRepository

        catalog = self._shared_catalog()
        try:
            return [(p.name, p.added_at, p.revoked_at) for p in TeamRepository(catalog).people()]
        finally:
            catalog.close()

    def _shared_catalog(self) -> Any:
        """The PostgreSQL catalog of ``catalog.url`` (ValidationError when none is set)."""
        from remindful.engine.postgres.catalog import PostgresCatalog

        if not self.settings.catalog.url:
            raise ValidationError("catalog.url", "expected a postgresql://USER@HOST:PORT/DB URL for a team store")
        if self._store.disabled_reason:  # (not the Store itself: the admin holds no member's token)
            raise MemoryDisabledError(self._store.disabled_reason)
        return PostgresCatalog(self.settings.catalog.url, redaction=self._store.redaction)

    def index_status(self) -> IndexStatus:
        """Whether the vector index is usable, and why not."""
        return IndexStatus(**self._store.index_status())

    def capture_status(self) -> CaptureStatus:
        """Hook events waiting in the spool, redactions and skipped captures by reason, Markdown
        files indexed."""
        from remindful.services.stats import capture_status

        return capture_status(self._repos.stats)

    def index_file(self, path: str | os.PathLike[str]) -> FileIndexed:
        """Index one Markdown file now (its chunks replace the older ones; an unchanged file is
        left); says what happened and how many chunks it has now."""
        from remindful.services.ingest.watcher import index_file

        return index_file(self._store, path)

    def markdown_watcher(self, dirs: Sequence[str | os.PathLike[str]]) -> MarkdownWatcher:
        """A watcher that indexes the Markdown files of ``dirs`` into this store and keeps them
        current (:class:`~remindful.services.ingest.watcher.MarkdownWatcher`); raises for a missing
        directory."""
        from remindful.services.ingest.watcher import MarkdownWatcher

        return MarkdownWatcher(self._store, dirs)

    # -- sessions, retention, export, backup -------------------------------------------------------

    def list_sessions(
        self,
        limit: int | None = None,
        offset: int = 0,
        session_id: str | None = None,
        *,
        resumed_session: str | None = None,
    ) -> builtins.list[Session]:
        """Sessions, newest first (``limit`` from ``offset``, or the one ``session_id``): id,
        start/end, memory count, summary of its activity; ``resumed`` marks the resumed session
        (``resumed_session``, default the one :meth:`resume_session` resumed)."""
        from remindful.services.sessions import list_sessions

        return list_sessions(
            self._repos.sessions,
            self._store,
            limit=limit,
            offset=offset,
            session_id=session_id,
            resumed=self._resumed(resumed_session),
        )

    def session_count(self) -> int:
        """How many sessions :meth:`list_sessions` lists."""
        from remindful.services.sessions import session_count

        return session_count(self._repos.sessions)

    def delete_session(self, session_id: str, confirm: bool = False) -> SessionDeleted:
        """Back up, then delete every memory of the session. Refused (ValidationError) unless ``confirm``."""
        from remindful.services.sessions import delete_session

        result = delete_session(self._store, self._repos.sessions, session_id, confirm=confirm)
        if self._resumed_session == session_id:
            self._resumed_session = None
        return result

    def delete_on_exit(self, session_ids: Sequence[str] | None = None) -> int:
        """With ``privacy.delete_on_exit`` on, delete every memory of ``session_ids`` (default: this
        process's session) without a backup; returns how many (0 when the setting is off)."""
        from remindful.services.sessions import delete_on_exit

        return delete_on_exit(self._store, self._repos.sessions, session_ids)

    def cleanup(self, dry_run: bool = False) -> CleanupReport:
        """Apply the retention policy (:mod:`remindful.services.policy.retention`); ``dry_run`` only reports."""
        from remindful.services.policy.retention import cleanup

        self._store.vectors_ready()
        return cleanup(self._policy(), dry_run=dry_run)

    def cleanup_scheduler(
        self, *, job: Callable[[], Any] | None = None, clock: Callable[[], datetime] | None = None
    ) -> CleanupScheduler:
        """A scheduler (not started) running the retention cleanup at ``retention.cleanup.time``
        (:mod:`remindful.services.policy.scheduler`): ``job`` and ``clock`` replace the cleanup and
        the time in tests."""
        from remindful.services.policy.scheduler import CleanupScheduler

        if clock is None:
            return CleanupScheduler(self._policy(), job=job)
        return CleanupScheduler(self._policy(), job=job, clock=clock)

    def dedup(
        self, threshold: float | None = None, types: Sequence[str] | None = None, dry_run: bool = False
    ) -> DedupReport:
        """Collapse near-duplicates (cosine ≥ threshold) of each type into their most important member."""
        from remindful.services.policy.dedup import dedup

        self._store.vectors_ready()
        return dedup(
            self._store, self._repos.memories, self._repos.retention, threshold=threshold, types=types, dry_run=dry_run
        )

    def export(
        self,
        format: str = "json",
        output_path: str | os.PathLike[str] | None = None,
        *,
        overwrite: bool = False,
        progress: Any = None,
        shared: bool = False,
    ) -> ExportResult:
        """Write every memory (content, metadata, embedding) to a JSON file; returns path and count.
        An existing file is replaced only with ``overwrite``; a missing directory is an error.
        ``progress(n)`` is called as batches are written. ``shared``: from the PostgreSQL catalog
        of ``catalog.url`` instead of the local one (the same file format)."""
        from remindful.services.export import export_memories

        if not shared:
            return export_memories(
                self._store,
                self._repos.memories,
                format=format,
                output_path=output_path,
                overwrite=overwrite,
                progress=progress,
            )
        from remindful.engine.postgres.repositories import PostgresMemoryRepository

        catalog = self._shared_catalog()
        try:
            return export_memories(
                self._store,
                PostgresMemoryRepository(catalog),
                format=format,
                output_path=output_path,
                overwrite=overwrite,
                progress=progress,
            )
        finally:
            catalog.close()

    def import_memories(self, path: str | os.PathLike[str], *, progress: Any = None) -> ImportResult:
        """Restore memories exported by :meth:`export` exactly (no re-embedding); duplicates skipped."""
        from remindful.services.export import import_memories

        return import_memories(self._store, self._repos.memories, path, progress=progress)

    def backup(self, name: str | None = None, *, automatic: bool = False) -> BackupResult:
        """Snapshot the store into ``<storage>/backups/backup_YYYYmmdd_HHMMSS[_name].tar.gz``."""
        from remindful.services.backup import create_backup

        return create_backup(self._store.vectors_ready(), name=name, automatic=automatic)

    def restore(self, path: str | os.PathLike[str], confirm: bool = False, *, progress: Any = None) -> RestoreResult:
        """Replace the store with a validated backup (after backing up the current one)."""
        from remindful.services.backup import restore_backup

        result = restore_backup(self._store, self._repos.memories, path, confirm=confirm, progress=progress)
        self._resumed_session = None
        return result

    def clear_all(self, confirm: bool = False) -> ClearResult:
        """Back up, then delete every memory. Refused (ValidationError) unless ``confirm``."""
        from remindful.services.backup import clear_all

        result = clear_all(self._store, self._repos.memories, confirm=confirm)
        self._resumed_session = None
        return result

    # -- learning ---------------------------------------------------------------------------------

    def capture_conversation(self, turn: Any, *, automatic: bool = False) -> builtins.list[Memory]:
        """Extract and store up to ``learning.max_memories_per_turn`` memorable statements of a
        turn (a ConversationTurn or a dict with user_message, assistant_response, ...)."""
        from remindful.services.learning.conversation import capture_conversation

        return capture_conversation(self._store, self._repos.learning, turn, automatic=automatic)

    def capture_correction(self, original: str, corrected: str, context: str = "") -> Memory:
        """Store the rule a user correction teaches, as a reinforced knowledge memory; what it
        replaces (memories stating ``original``) is marked superseded and stays forgotten."""
        from remindful.services.learning.corrections import capture_correction

        return capture_correction(
            self._store, self._repos.learning, original, corrected, context, captures=self._repos.captures
        )

    def capture_config_change(self, key: str, old: Any, new: Any, *, automatic: bool = False) -> Memory | None:
        """Store the preference a setting change expresses ("User prefers dark mode")."""
        from remindful.services.learning.config_changes import capture_config_change

        return capture_config_change(
            self._store, self._repos.memories, self._repos.learning, key, old, new, automatic=automatic
        )

    def capture_workflow(
        self, actions: Sequence[Any], *, goal: str | None = None, name: str | None = None
    ) -> Memory | None:
        """Store a procedural memory if the actions form a workflow within the time window; else None."""
        from remindful.services.learning.workflows import capture_workflow

        return capture_workflow(self._store, self._repos.learning, actions, goal=goal, name=name)

    def create_workflow_from_session(self, session_id: str, name: str) -> Memory:
        """Build a reusable workflow memory from a session's successful actions."""
        from remindful.services.learning.workflows import create_workflow_from_session

        return create_workflow_from_session(self._store, self._repos.learning, session_id, name)

    def confirm(self, query: str, memory_id: str) -> Memory:
        """A search result helped: reinforce it so it ranks higher for later searches."""
        from remindful.services.learning.reinforce import confirm

        return confirm(self._store, self._repos.learning, query, memory_id)

    def suggest(
        self,
        context: str,
        *,
        action: Mapping[str, Any] | None = None,
        limit: int = 3,
        resumed_session: str | None = None,
    ) -> Suggestions:
        """Similar past workflows/actions for a context, and warnings about actions that failed
        (``resumed_session`` as in :meth:`search`)."""
        from remindful.services.learning.suggest import suggest

        return suggest(
            self._store,
            self._repos.memories,
            context,
            action=action,
            limit=limit,
            resumed_session=self._resumed(resumed_session),
        )

    def analyze_patterns(self, type: str = "action", metric: str | None = None, **options: Any) -> PatternReport:
        """Recurring action sequences across sessions, and success rates per kind of action."""
        from remindful.services.learning.patterns import analyze_patterns

        return analyze_patterns(self._store, self._repos.memories, type=type, metric=metric, **options)


def open_manager(path: str | os.PathLike[str] | None = None, **overrides: Any) -> MemoryManager:
    """:func:`remindful.open`: settings from ``path`` and ``overrides`` (``embedder=`` and ``index=``
    inject parts, ``project=`` is the directory its client works in), then a MemoryManager over them."""
    from remindful.config import load_settings

    embedder = overrides.pop("embedder", None)
    index = overrides.pop("index", None)
    project = overrides.pop("project", None)
    return MemoryManager(load_settings(path, **overrides), embedder=embedder, index=index, project=project)


def _chroma_address(chroma: str | None, settings: Settings) -> tuple[str, int, bool]:
    """``(host, port, ssl)`` of the Chroma server ``chroma`` names (``http://HOST:PORT``), or of the
    configured one."""
    if chroma is None:
        configured = settings.storage.chromadb
        return configured.host, configured.port, False
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(chroma)
        port = parts.port
    except ValueError:
        parts, port = None, None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValidationError("chroma", "expected the Chroma server's URL, like http://HOST:8000")
    return parts.hostname, port or (443 if parts.scheme == "https" else 8000), parts.scheme == "https"


__all__ = ["MemoryManager", "open_manager"]
