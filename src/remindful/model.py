"""The records remindful stores and returns.

MemoryManager's methods answer these records (or lists of them), or plain values (an id, a count,
``reindex``'s counts per collection). Each record has ``to_dict()``, its JSON form: what the CLI's
``--json``, the MCP tools and the HTTP surfaces show (the shells add ``"success": true``).

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


class OriginKind(StrEnum):
    """Whose words a memory holds: its provenance. Only the user's own words (``user``) or what
    the user confirmed (``user_confirmed``) may become a decision, preference or rule; every other
    origin stays an observation of its source, however it is phrased."""

    USER = "user"
    USER_CONFIRMED = "user_confirmed"
    ASSISTANT = "assistant"
    TOOL = "tool"
    FILE = "file"
    WEB = "web"
    SYSTEM = "system"

    @property
    def stated_by_user(self) -> bool:
        return self in (OriginKind.USER, OriginKind.USER_CONFIRMED)


#: The longest detail an origin keeps (a tool's name, a file's path, a page's address).
ORIGIN_DETAIL_CHARS = 200


def make_origin(kind: OriginKind | str, detail: str | None = None) -> str:
    """An origin as stored: ``kind`` or ``kind:detail`` (``tool:Bash``, ``file:docs/deploy.md``,
    ``web:https://example.com/x``). The detail is kept on one line and to
    :data:`ORIGIN_DETAIL_CHARS`. Raises ValueError for an unknown kind."""
    kind = OriginKind(kind)
    detail = " ".join((detail or "").split())[:ORIGIN_DETAIL_CHARS]
    return f"{kind.value}:{detail}" if detail else kind.value


def parse_origin(origin: str) -> tuple[OriginKind, str | None]:
    """``(kind, detail)`` of a stored origin; raises ValueError unless it starts with a known kind."""
    kind, _, detail = origin.partition(":")
    return OriginKind(kind), detail or None


def origin_label(origin: str) -> str:
    """The origin in words, as an agent or a person reads it beside a memory: ``you said``,
    ``the assistant said``, ``tool Bash's output``, ``file docs/deploy.md``, ``page https://…``."""
    try:
        kind, detail = parse_origin(origin)
    except ValueError:
        return "unknown source"
    if kind is OriginKind.USER:
        return "you said"
    if kind is OriginKind.USER_CONFIRMED:
        return "you confirmed"
    if kind is OriginKind.ASSISTANT:
        return "the assistant said"
    if kind is OriginKind.TOOL:
        return f"tool {detail}'s output" if detail else "a tool's output"
    if kind is OriginKind.FILE:
        return f"file {detail}" if detail else "a file"
    if kind is OriginKind.WEB:
        return f"page {detail}" if detail else "a web page"
    return "remindful"


def derive_origin(source: str, metadata: dict[str, Any]) -> str:
    """The origin of a memory whose writer named none, from its source and metadata (also how
    the rows of a catalog older than origins get theirs): a prompt is the user's; an answer the
    assistant's; a tool call's report its tool's; a Markdown chunk its file's; a pattern
    remindful's own; what a person stored, corrected or configured the user's."""
    role = metadata.get("role")
    tool = metadata.get("tool_name") or metadata.get("tool")
    if source == "hook":
        if role == "user" or metadata.get("hook_event") == "UserPromptSubmit":
            return OriginKind.USER.value
        if role == "assistant":
            return OriginKind.ASSISTANT.value
        return make_origin(OriginKind.TOOL, tool if isinstance(tool, str) else None)
    if source == "mcp_tool":
        return make_origin(OriginKind.TOOL, tool if isinstance(tool, str) else None)
    if source == "response" or role == "assistant":
        return OriginKind.ASSISTANT.value
    if source == "md_file":
        path = metadata.get("file_path") or metadata.get("path")
        return make_origin(OriginKind.FILE, path if isinstance(path, str) else None)
    if source == "workflow_pattern":
        return OriginKind.SYSTEM.value
    return OriginKind.USER.value


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


class OldDictForm:
    """What a record answers where a script reads it as the dict its method returned in 0.1.0
    (``stats()["collections"]``, ``.get``, ``.keys``, ``.values``, ``.items``, ``in``, iteration):
    that dict was the record's JSON form, :meth:`to_dict`. Deprecated: every such read warns
    (DeprecationWarning, at the caller's line); it goes in the release after this one. The records
    of the methods that answered dicts in 0.1.0 have it."""

    __slots__ = ()

    def to_dict(self) -> dict[str, Any]:  # pragma: no cover - every record defines its own
        raise NotImplementedError

    def _as_dict(self, how: str) -> dict[str, Any]:
        import warnings

        name = type(self).__name__
        warnings.warn(
            f"{name}{how} reads a {name} as the dict its method used to return; read its attributes "
            f"or .to_dict() instead: the dict access goes in the next release",
            DeprecationWarning,
            stacklevel=3,
        )
        return self.to_dict()

    def __getitem__(self, key: str) -> Any:
        return self._as_dict(f"[{key!r}]")[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self._as_dict(".get()").get(key, default)

    def keys(self) -> Any:
        return self._as_dict(".keys()").keys()

    def values(self) -> Any:
        return self._as_dict(".values()").values()

    def items(self) -> Any:
        return self._as_dict(".items()").items()

    def __contains__(self, key: object) -> bool:
        return key in self._as_dict(" in")

    def __iter__(self) -> Any:
        return iter(self._as_dict(" iterated"))


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
    scope: str | None = None
    #: Whose words these are (:class:`OriginKind`, as :func:`make_origin` writes it).
    origin: str = OriginKind.USER.value

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
            "scope": self.scope,
            "origin": self.origin,
        }


@dataclass(frozen=True, slots=True)
class SearchHit:
    """One search result. ``score`` is a calibrated relevance in [0, 1], the same scale for every
    query (see :mod:`remindful.engine.retrieval.calibration`); ``sources`` names the retrieval spaces
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
    scope: str | None = None
    similar_ids: tuple[str, ...] = ()
    origin: str = OriginKind.USER.value

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
            "scope": self.scope,
            "origin": self.origin,
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


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


# -- sessions ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Session(OldDictForm):
    """A run of an agent or server, as :meth:`MemoryManager.list_sessions` lists it: its span
    (``ended_at``: the recorded end, else its last memory's time), memory counts in all and
    ``by_type``, the most frequent ``actions``/``screens``/``tools`` in ``summary``
    (``[{"name", "count"}]`` each), that summary as one line of ``text``, whether it is this
    process's session (``current``) and whether searches rank it higher (``resumed``)."""

    id: str
    started_at: datetime | None
    ended_at: datetime | None = None
    memory_count: int = 0
    by_type: dict[str, int] = field(default_factory=dict)
    summary: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    text: str = ""
    current: bool = False
    resumed: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "started_at": _iso(self.started_at),
            "ended_at": _iso(self.ended_at),
            "memory_count": self.memory_count,
            "by_type": dict(self.by_type),
            "summary": {k: list(v) for k, v in self.summary.items()},
            "text": self.text,
            "current": self.current,
            "resumed": self.resumed,
        }


@dataclass(frozen=True, slots=True)
class SessionDeleted(OldDictForm):
    """What :meth:`MemoryManager.delete_session` did: ``deleted`` memories, after a backup at ``backup_path``."""

    session_id: str
    deleted: int
    backup_path: str

    def to_dict(self) -> dict[str, Any]:
        return {"session_id": self.session_id, "deleted": self.deleted, "backup_path": self.backup_path}


# -- statistics and health --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CollectionUsage:
    """One collection's memories against its quota; ``count`` (and so ``usage_percent``) is None
    when the catalog cannot be read."""

    count: int | None
    quota: int
    usage_percent: float | None = None

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"count": self.count, "quota": self.quota}
        if self.count is not None:
            data["usage_percent"] = self.usage_percent
        return data


@dataclass(frozen=True, slots=True)
class StorageUsage:
    """The storage directory's size against ``storage.max_size_mb``, and the disk's free space
    (None if unknown); ``storage_full``: too little is left to save a memory."""

    path: str
    total_size_mb: float
    quota_limit_mb: float
    usage_percent: float
    disk_free_mb: float | None
    storage_full: bool

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class Stats(OldDictForm):
    """:meth:`MemoryManager.stats`: counts per collection, storage and quota use, sessions, and the
    figures of :mod:`remindful.services.stats` (``session_length``, ``activity``,
    ``captures_per_day``, ``spool_pending``, ``last_cleanup``, ``capture``, ``learning``, ``index``,
    ``performance``, ``injection``: the context injected into agents, in all, per project and per
    session, and how many memories stay forgotten). ``partial``: the catalog could not be read (a
    full disk): the counts are None, those figures too, and only the storage, the last backup and
    the ``warnings`` are known."""

    total_memories: int | None
    collections: dict[str, CollectionUsage]
    storage: StorageUsage
    sessions: int | None
    last_backup: dict[str, Any] | None = None
    warnings: tuple[str, ...] = ()
    partial: bool = False
    session_length: dict[str, Any] | None = None
    activity: dict[str, Any] | None = None
    captures_per_day: list[dict[str, Any]] | None = None
    spool_pending: int | None = None
    last_cleanup: dict[str, Any] | None = None
    capture: dict[str, int] | None = None
    learning: dict[str, Any] | None = None
    index: dict[str, Any] | None = None
    performance: dict[str, Any] | None = None
    injection: dict[str, Any] | None = None
    scopes: tuple[ScopeUsage, ...] | None = None
    scope: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "total_memories": self.total_memories,
            "collections": {name: c.to_dict() for name, c in self.collections.items()},
            "storage": self.storage.to_dict(),
            "sessions": self.sessions,
        }
        if not self.partial:
            data["session_length"] = self.session_length
            data["activity"] = self.activity
            data["captures_per_day"] = self.captures_per_day
            data["spool_pending"] = self.spool_pending
            data["last_cleanup"] = self.last_cleanup
        data["last_backup"] = self.last_backup
        if not self.partial:
            data["capture"] = self.capture
            data["learning"] = self.learning
            data["index"] = self.index
            data["performance"] = self.performance
            data["injection"] = self.injection
            data["scopes"] = [s.to_dict() for s in self.scopes or ()]
            if self.scope is not None:
                data["scope"] = self.scope
        data["warnings"] = list(self.warnings)
        return data


@dataclass(frozen=True, slots=True)
class ScopeUsage:
    """One scope of the store (:meth:`MemoryManager.scopes`): ``scope`` as a read selects it
    (``project:<key>``, ``user``, ``unscoped``), ``kind`` (project, user, unscoped), the project's
    ``name`` and ``root`` directory (None for the others), and how many memories it holds."""

    scope: str
    kind: str
    count: int
    name: str | None = None
    root: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"scope": self.scope, "kind": self.kind, "name": self.name, "root": self.root, "count": self.count}


@dataclass(frozen=True, slots=True)
class HealthCheck:
    """One part :meth:`MemoryManager.doctor` checked: ``detail`` says what it found, ``fix`` the
    way out (None when ``ok``)."""

    part: str
    ok: bool
    detail: str
    fix: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"part": self.part, "ok": self.ok, "detail": self.detail, "fix": self.fix}


@dataclass(frozen=True, slots=True)
class Diagnosis(OldDictForm):
    """:meth:`MemoryManager.doctor`: every part's check; ``healthy`` when all are ok."""

    healthy: bool
    storage_path: str
    checks: tuple[HealthCheck, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "healthy": self.healthy,
            "storage_path": self.storage_path,
            "checks": [c.to_dict() for c in self.checks],
        }


@dataclass(frozen=True, slots=True)
class IndexStatus(OldDictForm):
    """Whether the vector index is usable (``error`` says why not), which ``backend`` it is, how
    many memories wait to be indexed and how many deleted ones' vectors wait to leave it."""

    available: bool
    backend: str | None
    error: str | None
    unindexed: int
    pending_deletes: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class CaptureStatus(OldDictForm):
    """What automatic capture is doing: hook events waiting in the spool, redactions and skipped
    captures by reason (``capture``), Markdown files indexed."""

    spool_pending: int
    capture: dict[str, int]
    files_indexed: int

    def to_dict(self) -> dict[str, Any]:
        return {"spool_pending": self.spool_pending, "capture": dict(self.capture), "files_indexed": self.files_indexed}


@dataclass(frozen=True, slots=True)
class FileIndexed(OldDictForm):
    """:meth:`MemoryManager.index_file`: what happened to the file (``outcome``: ``indexed``,
    ``unchanged``, ``skipped`` or ``vanished``), and how many chunks of it are stored now."""

    outcome: str  # "indexed", "unchanged", "skipped" or "vanished"
    chunks: int

    def to_dict(self) -> dict[str, Any]:
        return {"outcome": self.outcome, "chunks": self.chunks}


# -- retention --------------------------------------------------------------------------------------


@dataclass(slots=True)
class CleanupReport(OldDictForm):
    """What a cleanup deleted (or, with ``dry_run``, would delete). Filled in by the cleanup as it
    runs; ``ids`` are the memories it deleted (or would)."""

    dry_run: bool
    deleted: int = 0
    by_reason: dict[str, int] = field(default_factory=dict)
    by_type: dict[str, int] = field(default_factory=dict)
    freed_bytes: int = 0
    clusters: int = 0
    protected_kept: int = 0
    seconds: float = 0.0
    #: Seconds per step: ``plan``, then (unless dry run) ``consolidate`` (dedup records),
    #: ``delete`` (catalog, FTS, audit log; small deletes include the vectors and neighbours'
    #: windows, which a large delete leaves to the background) and ``record``.
    phases: dict[str, float] = field(default_factory=dict)
    ids: list[str] = field(default_factory=list)

    @property
    def freed_mb(self) -> float:
        return round(self.freed_bytes / 1_048_576, 3)

    def to_dict(self, *, with_ids: bool | None = None) -> dict[str, Any]:
        """The JSON form; ``ids`` only ``with_ids`` (default: for a dry run, which shows what it would delete)."""
        # Built by hand: dataclasses.asdict deep-copies every id (~0.1 s for 10k).
        data: dict[str, Any] = {
            "dry_run": self.dry_run,
            "deleted": self.deleted,
            "by_reason": dict(self.by_reason),
            "by_type": dict(self.by_type),
            "freed_bytes": self.freed_bytes,
            "clusters": self.clusters,
            "protected_kept": self.protected_kept,
            "seconds": self.seconds,
            "phases": dict(self.phases),
            "freed_mb": self.freed_mb,
        }
        if self.dry_run if with_ids is None else with_ids:
            data["ids"] = list(self.ids)
        return data


@dataclass(frozen=True, slots=True)
class DedupReport(OldDictForm):
    """:meth:`MemoryManager.dedup`: ``clusters`` of near-duplicates at ``threshold``, the
    ``deleted`` (or, with ``dry_run``, deletable) duplicates, and each cluster's kept memory
    mapped to its duplicates (``representatives``)."""

    dry_run: bool
    threshold: float
    clusters: int
    deleted: int
    seconds: float
    representatives: dict[str, list[str]]

    def to_dict(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "threshold": self.threshold,
            "clusters": self.clusters,
            "deleted": self.deleted,
            "seconds": self.seconds,
            "representatives": {k: list(v) for k, v in self.representatives.items()},
        }


# -- export, backup ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ExportResult(OldDictForm):
    """:meth:`MemoryManager.export`: the file written, its memories and its size."""

    path: str
    count: int
    bytes: int

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "count": self.count, "bytes": self.bytes}


@dataclass(frozen=True, slots=True)
class ImportResult(OldDictForm):
    """:meth:`MemoryManager.import_memories`: of the file's ``count`` memories, those ``imported``
    (per type in ``counts``) and those ``skipped`` (already present)."""

    imported: int
    skipped: int
    count: int
    counts: dict[str, int]
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "imported": self.imported,
            "skipped": self.skipped,
            "count": self.count,
            "counts": dict(self.counts),
            "seconds": self.seconds,
        }


@dataclass(frozen=True, slots=True)
class BackupResult(OldDictForm):
    """:meth:`MemoryManager.backup`: the archive written, its memories per type (``counts``) and in
    all, its size."""

    path: str
    name: str | None
    automatic: bool
    counts: dict[str, int]
    total: int
    bytes: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "name": self.name,
            "automatic": self.automatic,
            "counts": dict(self.counts),
            "total": self.total,
            "bytes": self.bytes,
        }


@dataclass(frozen=True, slots=True)
class RestoreResult(OldDictForm):
    """:meth:`MemoryManager.restore`: the memories now in the store per collection (``counts``) and
    in all, those the archive's manifest promised (``expected``), and where the replaced data went."""

    path: str
    counts: dict[str, int]
    total: int
    expected: dict[str, int] | None
    backup_path: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "counts": dict(self.counts),
            "total": self.total,
            "expected": self.expected,
            "backup_path": self.backup_path,
        }


@dataclass(frozen=True, slots=True)
class ClearResult(OldDictForm):
    """:meth:`MemoryManager.clear_all`: the memories deleted, after a backup at ``backup_path``
    (which held ``counts_before``)."""

    deleted: int
    backup_path: str
    counts_before: dict[str, int]

    def to_dict(self) -> dict[str, Any]:
        return {"deleted": self.deleted, "backup_path": self.backup_path, "counts_before": dict(self.counts_before)}


# -- learning ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Suggestion:
    """A past workflow or action like the current context, to replay."""

    memory_id: str
    type: str
    content: str
    date: str
    created_at: datetime
    similarity: float
    message: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "memory_id": self.memory_id,
            "type": self.type,
            "content": self.content,
            "date": self.date,
            "created_at": self.created_at.isoformat(),
            "similarity": self.similarity,
            "message": self.message,
        }


@dataclass(frozen=True, slots=True)
class Alternative:
    """Something that worked where the warned-of action failed."""

    memory_id: str
    content: str
    date: str
    similarity: float

    def to_dict(self) -> dict[str, Any]:
        return {"memory_id": self.memory_id, "content": self.content, "date": self.date, "similarity": self.similarity}


@dataclass(frozen=True, slots=True)
class FailureWarning:
    """The intended ``action`` failed before: how often, which memories say so, what worked instead."""

    message: str
    action: str
    failures: int
    successes: int
    success_rate: float
    memory_ids: tuple[str, ...]
    last_failure: datetime
    alternatives: tuple[Alternative, ...] = ()
    #: What to try, for what the action is (a shell command, an edit, an action on a screen).
    advice: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "message": self.message,
            "advice": self.advice,
            "action": self.action,
            "failures": self.failures,
            "successes": self.successes,
            "success_rate": self.success_rate,
            "memory_ids": list(self.memory_ids),
            "last_failure": self.last_failure.isoformat(),
            "alternatives": [a.to_dict() for a in self.alternatives],
        }


@dataclass(frozen=True, slots=True)
class Suggestions(OldDictForm):
    """:meth:`MemoryManager.suggest`: what to replay for ``context``, and warnings about actions that failed."""

    context: str
    suggestions: tuple[Suggestion, ...] = ()
    warnings: tuple[FailureWarning, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "context": self.context,
            "suggestions": [s.to_dict() for s in self.suggestions],
            "warnings": [w.to_dict() for w in self.warnings],
        }


#: The optional parts of a :class:`PatternReport`, in the order ``to_dict()`` gives them.
_PATTERN_PARTS = ("patterns", "by_kind", "by_action", "high_success", "failure_prone", "insights", "stored")


@dataclass(frozen=True, slots=True)
class PatternReport(OldDictForm):
    """:meth:`MemoryManager.analyze_patterns` over ``analyzed`` memories of ``type`` in
    ``sessions`` sessions. Each part is None (and left out of ``to_dict()``) when the ``metric``
    asked for does not include it: ``patterns`` (recurring sequences), ``by_kind`` / ``by_action``
    (success rates, rows ``{action, count, successes, failures, success_rate}``), ``high_success``,
    ``failure_prone``, ``insights`` (one line each), ``stored`` (ids of the workflow memories saved)."""

    type: str
    analyzed: int
    sessions: int
    patterns: list[dict[str, Any]] | None = None
    by_kind: list[dict[str, Any]] | None = None
    by_action: list[dict[str, Any]] | None = None
    high_success: list[dict[str, Any]] | None = None
    failure_prone: list[dict[str, Any]] | None = None
    insights: list[str] | None = None
    stored: list[str] | None = None

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"type": self.type, "analyzed": self.analyzed, "sessions": self.sessions}
        for name in _PATTERN_PARTS:
            value = getattr(self, name)
            if value is not None:
                data[name] = value
        return data
