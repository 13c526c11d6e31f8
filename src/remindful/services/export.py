"""Export and import: every memory with its content, metadata and embedding, as one JSON file.

File format (``format: remindful-export``, ``version: 1``)::

    {"format": "remindful-export", "version": 1, "exported_at": "...", "count": n,
     "embedding": {"dtype": "float32", "byteorder": "little", "encoding": "base64"},
     "memories": [{"id", "type", "content", "metadata", "source", "memory_class", "session_id",
                   "created_at", "updated_at", "importance", "access_count", "last_accessed",
                   "bookmarked", "content_hash", "chunk", "expires_at", "embedding", "scope", "origin"}, ...]}

Times are UTC epoch seconds (floats, exact); ``embedding`` is the base64 of the float32 vector
(exact, and a fifth of the size of a list of decimals). Import restores every field exactly, so
an export → import round trip is lossless and needs no re-embedding. A memory whose id already
exists is skipped (counted as ``skipped``). Invalid files are refused before anything is written:
every bad record is named on a line of its own with its position and field (an id of letters,
digits and ``_.:-``; times within the years 1 to 9999; finite embeddings, all of one dimension; the
store's ``limits`` on content and metadata). Vectors of another dimension than the store's model
(another model's export) are dropped and the texts re-embedded. A record without ``scope`` (an
export made before scopes) gets the scope its metadata gives it, as a store upgraded to scopes
gives its memories theirs (:mod:`remindful.engine.scopes`).
"""

from __future__ import annotations

import base64
import contextlib
import errno
import json
import os
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from remindful.engine.atomic import replaced_atomically
from remindful.engine.catalog import MemoryRow, ScopeOf
from remindful.engine.scopes import check_scope
from remindful.engine.validation import Limits, check_epoch, check_unicode, validate_item
from remindful.errors import StorageFullError, ValidationError
from remindful.model import ExportResult, ImportResult, MemoryClass, content_hash, derive_origin

if TYPE_CHECKING:
    from remindful.config import Settings
    from remindful.engine.repositories import MemoryRepository

FORMAT = "remindful-export"
VERSION = 1
BATCH = 1000


class Exporter(Protocol):
    """What an export reads of the store besides its rows (:class:`~remindful.engine.store.Store` is one)."""

    @property
    def path(self) -> Path: ...

    def vectors_ready(self) -> object:
        """Wait (up to a minute) for the vectors this process has yet to compute."""


class Pages(Protocol):
    """Where an export reads the rows: a memory repository of either catalog backend."""

    def page(self, after_rowid: int, limit: int) -> list[tuple[int, MemoryRow]]: ...


class Importer(Protocol):
    """What an import does to the store besides writing rows (which the catalog redacts as every
    write): index them (:class:`~remindful.engine.store.Store` is one)."""

    @property
    def settings(self) -> Settings: ...

    def index_rows(self, rows: Sequence[MemoryRow]) -> None: ...

    @property
    def scopes(self) -> ScopeOf:
        """Gives a record without a scope the one its content and metadata give it."""


def _default_path(storage: Path) -> Path:
    return storage / "exports" / f"memories_{datetime.now(UTC):%Y%m%d_%H%M%S}.json"


def export_memories(
    store: Exporter,
    memories: Pages,
    *,
    format: str = "json",
    output_path: str | os.PathLike[str] | None = None,
    overwrite: bool = False,
    progress: Callable[[int], None] | None = None,
) -> ExportResult:
    """Write every memory to ``output_path`` (default ``<storage>/exports/memories_<time>.json``),
    created 0600. Only ``format="json"`` exists. First waits
    (up to a minute) for the vectors of what this process stored, so that they are exported too.

    An existing file is replaced only with ``overwrite=True``, and a missing directory is never
    created (ValidationError naming ``output_path`` for both), except ``<storage>/exports``."""
    if format != "json":
        raise ValidationError("format", f"expected 'json', got {format!r}")
    store.vectors_ready()
    if output_path is None:
        path = _default_path(store.path)
        path.parent.mkdir(exist_ok=True, mode=0o700)
    else:
        path = Path(output_path).expanduser()
    check_output_path(path, overwrite=overwrite)
    count = 0
    # Streamed in rowid batches, so a large store never sits in memory twice.
    with _writing(path), replaced_atomically(path, "w", overwrite=overwrite, encoding="utf-8") as out:
        header = {
            "format": FORMAT,
            "version": VERSION,
            "exported_at": datetime.now(UTC).isoformat(),
            "embedding": {"dtype": "float32", "byteorder": "little", "encoding": "base64"},
        }
        out.write(json.dumps(header)[:-1] + ', "memories": [\n')
        last = 0
        while True:
            page = memories.page(last, BATCH)
            if not page:
                break
            for _rowid, row in page:
                out.write((",\n" if count else "") + json.dumps(_record(row), ensure_ascii=False))
                count += 1
            last = page[-1][0]
            if progress:
                progress(len(page))
        out.write(f'\n], "count": {count}}}\n')
    return ExportResult(str(path), count, path.stat().st_size)


def check_output_path(path: Path, *, overwrite: bool, field: str = "output_path") -> None:
    """Refuse (ValidationError naming ``field``) to write ``path`` over a directory, over an existing
    file unless ``overwrite``, or into a directory that does not exist (it is not created)."""
    if path.is_dir():
        raise ValidationError(field, f"{path} is a directory; expected a file path such as {path}/memories.json")
    if os.path.lexists(path) and not overwrite:
        raise ValidationError(field, f"{path} already exists; choose another name or ask to overwrite it")
    if not path.parent.is_dir():
        raise ValidationError(field, f"the directory {path.parent} does not exist; create it first")


@contextlib.contextmanager
def _writing(path: Path) -> Iterator[None]:
    """Turns an OSError writing ``path`` (a file created there meanwhile, a read-only disk, a
    directory such as /proc that takes no files) into a ValidationError naming ``output_path``; a
    full disk into StorageFullError (the partial file is removed either way)."""
    try:
        yield
    except FileExistsError:
        raise ValidationError("output_path", f"{path} already exists; choose another name") from None
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):  # not the path's fault: nothing was kept
            raise StorageFullError(f"the disk is full: cannot write the export {path}") from None
        raise ValidationError("output_path", f"cannot write {path}: {exc.strerror or exc}") from None


def _record(row: MemoryRow) -> dict[str, Any]:
    vector = row.embedding
    return {
        "id": row.id,
        "type": row.type,
        "content": row.content,
        "metadata": json.loads(row.metadata),
        "source": row.source,
        "memory_class": row.memory_class,
        "session_id": row.session_id,
        "created_at": row.created_at,
        "updated_at": row.updated_at,
        "importance": row.importance,
        "access_count": row.access_count,
        "last_accessed": row.last_accessed,
        "bookmarked": row.bookmarked,
        "content_hash": row.content_hash,
        "chunk": json.loads(row.chunk) if row.chunk else None,
        "expires_at": row.expires_at,
        "origin": row.origin,
        "embedding": base64.b64encode(vector.tobytes()).decode("ascii") if vector is not None else None,
        "scope": row.scope,
    }


def read_export(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The memories of an export file; raises ValidationError naming the first problem."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise ValidationError("path", f"{file} is not a file; expected a JSON export from `remindful export`")
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValidationError("path", f"{file} is not valid JSON ({exc}); expected a remindful export") from None
    except RecursionError:
        raise ValidationError("path", f"{file} is nested too deeply to read; expected a remindful export") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValidationError("path", f"{file} is not a remindful export (format must be {FORMAT!r})")
    if data.get("version") != VERSION:
        raise ValidationError("version", f"unsupported export version {data.get('version')!r}; expected {VERSION}")
    memories = data.get("memories")
    if not isinstance(memories, list):
        raise ValidationError("memories", "expected a list of memories")
    if data.get("count") is not None and data["count"] != len(memories):
        raise ValidationError("count", f"the file says {data['count']} memories but holds {len(memories)}: truncated?")
    return memories


#: Bad records named in the error of an import, at most.
MAX_REPORTED = 20


def _rows(items: list[Any], limits: Limits) -> list[MemoryRow]:
    """Every record as a row, or ValidationError naming each bad record (one line each, at most
    :data:`MAX_REPORTED`): nothing is imported from a file with a bad record."""
    rows: list[MemoryRow] = []
    problems: list[str] = []
    dimension: tuple[int, int] | None = None  # (dimension, position) of the first embedding
    for i, item in enumerate(items):
        try:
            row = _row(item, i, limits)
            if row.embedding is not None:
                if dimension is None:
                    dimension = (row.embedding.shape[0], i)
                elif row.embedding.shape[0] != dimension[0]:
                    raise ValidationError(
                        f"memories[{i}].embedding",
                        f"{row.embedding.shape[0]} values; expected {dimension[0]}, as memories[{dimension[1]}] has",
                    )
            rows.append(row)
        except ValidationError as exc:
            problems.append(str(exc))
    if problems:
        shown = problems[:MAX_REPORTED]
        more = f"\n  ... and {len(problems) - len(shown)} more" if len(problems) > len(shown) else ""
        raise ValidationError(
            "memories",
            f"{len(problems)} of {len(items)} records are invalid, nothing was imported:\n  "
            + "\n  ".join(shown)
            + more,
        )
    return rows


_HEX = frozenset("0123456789abcdef")
_ID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.:-")


def _check_id(value: Any, field: str) -> str:
    if not isinstance(value, str) or not value or len(value) > 200 or not set(value) <= _ID_CHARS:
        raise ValidationError(
            field,
            f"expected an id such as action_20240501120000000000_1a2b3c4d (letters, digits and _.:-, "
            f"at most 200 characters), got {_shown(value)}",
        )
    return value


def _time(value: Any, field: str, *, optional: bool = False) -> float | None:
    """Epoch seconds of a date from the year 1 to 9999 (a later one overflows every date
    computation), or None when ``optional``."""
    number = _number(value, field, optional=optional)
    return None if number is None else check_epoch(number, field)


def _row(item: Any, i: int, limits: Limits) -> MemoryRow:
    where = f"memories[{i}]."
    if not isinstance(item, dict):
        raise ValidationError(f"memories[{i}]", "expected an object")
    mid = _check_id(item.get("id"), where + "id")
    fields = validate_item({k: item.get(k) for k in ("content", "type", "metadata", "source", "origin")}, where, limits)
    created = _time(item.get("created_at"), where + "created_at")
    assert created is not None
    try:
        memory_class = MemoryClass(item.get("memory_class") or "episodic").value
    except ValueError:
        raise ValidationError(where + "memory_class", f"unknown value {item.get('memory_class')!r}") from None
    embedding = None
    if item.get("embedding") is not None:
        try:
            embedding = np.frombuffer(base64.b64decode(item["embedding"], validate=True), dtype="<f4").copy()
        except (ValueError, TypeError):
            raise ValidationError(where + "embedding", "expected base64 of little-endian float32 values") from None
        if embedding.size == 0:
            raise ValidationError(where + "embedding", "no values; expected base64 of float32 values, or null")
        if not np.isfinite(embedding).all():  # one NaN would break every later search
            raise ValidationError(where + "embedding", "holds NaN or infinite values; expected finite numbers")
    chunk = item.get("chunk")
    if chunk is not None:
        validate_item({"content": "x", "chunk": chunk}, where)
    session_id = item.get("session_id")
    if session_id is not None and (not isinstance(session_id, str) or not session_id):
        raise ValidationError(where + "session_id", "expected a non-empty string or null")
    if session_id is not None:
        check_unicode(session_id, where + "session_id")
    importance = _number(item.get("importance", 0.5), where + "importance")
    if importance is None or not 0 <= importance <= 1:
        raise ValidationError(where + "importance", f"expected a number from 0 to 1, got {_shown(importance)}")
    access_count = item.get("access_count", 0)
    if isinstance(access_count, bool) or not isinstance(access_count, int) or not 0 <= access_count < 2**63:
        raise ValidationError(where + "access_count", f"expected a count (integer >= 0), got {_shown(access_count)}")
    digest = item.get("content_hash")
    if digest is not None and (not isinstance(digest, str) or len(digest) != 64 or set(digest) - _HEX):
        raise ValidationError(where + "content_hash", "expected 64 hex digits (SHA-256), or null")
    return MemoryRow(
        id=mid,
        type=fields["type"].value,
        content=fields["content"],
        metadata=json.dumps(fields["metadata"], ensure_ascii=False, allow_nan=False),
        source=fields["source"].value,
        memory_class=memory_class,
        session_id=session_id,
        created_at=created,
        updated_at=_time(item.get("updated_at"), where + "updated_at", optional=True),
        importance=importance,
        access_count=access_count,
        last_accessed=_time(item.get("last_accessed"), where + "last_accessed", optional=True),
        bookmarked=bool(item.get("bookmarked")),
        content_hash=item.get("content_hash") or content_hash(fields["content"]),
        chunk=json.dumps(chunk) if chunk else None,
        expires_at=_time(item.get("expires_at"), where + "expires_at", optional=True),
        embedding=embedding,
        scope=_scope(item.get("scope"), where + "scope"),
        origin=fields["origin"] or derive_origin(fields["source"].value, fields["metadata"]),
    )


def _scope(value: Any, field: str) -> str | None:
    """A record's scope (``user``, ``project:<key>``, or null: unscoped); ValidationError otherwise."""
    if value is None:
        return None
    try:
        return check_scope(value, field)
    except ValueError as exc:
        raise ValidationError(field, str(exc).split(": ", 1)[-1]) from None


def _shown(value: Any) -> str:
    """``repr(value)`` cut to 60 characters (an integer of thousands of digits has no repr)."""
    try:
        text = repr(value)
    except ValueError:
        return "an integer of thousands of digits"
    return text if len(text) <= 60 else text[:57] + "..."


def _number(value: Any, field: str, *, optional: bool = False) -> float | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValidationError(field, f"expected a number (epoch seconds for times), got {_shown(value)}")
    return float(value) if isinstance(value, float) else value


def import_memories(
    store: Importer,
    memories: MemoryRepository,
    path: str | os.PathLike[str],
    *,
    progress: Callable[[int], None] | None = None,
) -> ImportResult:
    """Import an export file exactly (ids, times, embeddings). Existing ids are skipped. Contents,
    metadata and session ids are redacted as every write is (the catalog's insert:
    :func:`~remindful.engine.catalog.redact_row`); a memory whose content redaction changed loses
    its imported embedding and is re-embedded from the redacted text. All rows are validated
    before any is written."""
    started = time.perf_counter()
    items = read_export(path)
    rows = _rows(items, Limits.of(store.settings.limits))
    without_scope = {item["id"] for item in items if isinstance(item, dict) and "scope" not in item}
    dimension = memories.embedding_dimension()
    seen: set[str] = set()
    fresh: list[MemoryRow] = []
    existing = memories.existing_ids([r.id for r in rows])
    for row in rows:
        if row.id in existing or row.id in seen:
            continue
        seen.add(row.id)
        if row.id in without_scope:  # an export made before scopes
            metadata = json.loads(row.metadata)
            row.scope, _project = store.scopes(row.content, type=row.type, source=row.source, metadata=metadata)
        if row.embedding is not None and dimension is not None and row.embedding.shape[0] != dimension:
            row.embedding = None  # another model's vector: re-embedded when indexed
        fresh.append(row)
    for start in range(0, len(fresh), BATCH):
        batch = fresh[start : start + BATCH]
        memories.insert_imported(batch, {"count": len(batch), "file": str(path)})
        store.index_rows([r for r in batch if r.embedding is not None])
        if progress:
            progress(len(batch))
    counts: dict[str, int] = {}
    for row in fresh:
        counts[row.type] = counts.get(row.type, 0) + 1
    return ImportResult(
        imported=len(fresh),
        skipped=len(rows) - len(fresh),
        count=len(rows),
        counts=counts,
        seconds=round(time.perf_counter() - started, 3),
    )


__all__ = ["export_memories", "import_memories", "read_export"]
