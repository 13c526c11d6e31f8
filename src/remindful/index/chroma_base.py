"""Shared machinery of the Chroma backends: lazy client, handle cache, chunking, retries, error mapping.

Every Chroma call goes through :meth:`ChromaIndexBase._call`, which

* retries transient failures (a locked/busy database, an unreachable server) 3 times, after
  0.05, 0.1 and 0.2 s, then raises ``StorageLockedError`` (or ``StorageError`` naming host:port);
* maps a full disk to ``StorageFullError``, damaged files to ``CorruptionError``, Chroma's argument
  errors (wrong dimension...) to ``ValueError`` and anything else to ``StorageError``;
* re-fetches a collection handle once if Chroma says the collection no longer exists (another
  process reset the store).

chromadb 1.x raises pyo3 ``PanicException`` (a ``BaseException``) from its Rust core on some
damaged files, so the wrapper catches ``BaseException`` and lets only interpreter exits through.
"""

from __future__ import annotations

import errno
import logging
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np

from remindful.errors import CorruptionError, StorageError, StorageFullError, StorageLockedError
from remindful.index.base import Scalar
from remindful.index.checks import check_collection_name, check_query, check_upsert
from remindful.index.keys import pack, unpack

__all__ = ["BACKOFF", "RECOVERY", "RETRIES", "ChromaIndexBase", "classify", "is_locked_message"]

log = logging.getLogger(__name__)
T = TypeVar("T")

RETRIES = 3
BACKOFF = (0.05, 0.1, 0.2)
RECOVERY = "Run `remindful reindex --reset` to back up the damaged files and rebuild the index from the catalog"
_HNSW_KEYS = {  # accepted spellings → chromadb 1.x configuration keys
    "construction_ef": "ef_construction",
    "search_ef": "ef_search",
    "M": "max_neighbors",
    **{k: k for k in ("ef_construction", "ef_search", "max_neighbors", "num_threads", "batch_size")},
    **{k: k for k in ("sync_threshold", "resize_factor")},
}
_FULL = ("database or disk is full", "no space left on device", "os error 28")
_LOCKED = re.compile(r"\b(locked|busy)\b", re.IGNORECASE)
_UNREACHABLE = ("could not connect to a chroma server", "connection refused")
_CORRUPT = (
    "malformed",
    "file is not a database",
    "error loading hnsw index",
    "hnsw segment reader",
    "error deserializing pickle",
    "error getting embedding",
)
#: The collection metadata that says its vectors are keyed by packed ids (:mod:`remindful.index.keys`):
#: every collection this version creates; one created before keeps the whole ids it holds.
KEYS_META = {"remindful_keys": "packed32"}
#: The most memory ids of query results remembered per collection (:meth:`ChromaIndexBase._memory_ids`).
KNOWN_KEYS = 65536
_INVALID = ("InvalidArgumentError", "DuplicateIDError", "InvalidDimensionException", "ValueError", "TypeError")


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and cur not in seen:
        seen.append(cur)
        cur = cur.__cause__ or cur.__context__
    return seen


def classify(exc: BaseException) -> str:
    """Kind of a Chroma failure: full, denied, unreachable, locked, corrupt, missing, invalid or other."""
    chain = _chain(exc)
    text = " | ".join(str(e) for e in chain).lower()
    if any(isinstance(e, OSError) and e.errno == errno.ENOSPC for e in chain) or any(p in text for p in _FULL):
        return "full"
    if any(isinstance(e, OSError) and e.errno in (errno.EACCES, errno.EPERM, errno.EROFS) for e in chain):
        return "denied"
    names = {(c.__module__.split(".")[0], c.__name__) for e in chain for c in type(e).__mro__}
    if ("httpx", "TransportError") in names or any(isinstance(e, ConnectionError) for e in chain):
        return "unreachable"
    if any(p in text for p in _UNREACHABLE):
        return "unreachable"
    if _LOCKED.search(text):
        return "locked"
    if any(p in text for p in _CORRUPT):
        return "corrupt"
    if ("chromadb", "NotFoundError") in names:
        return "missing"
    if type(exc).__name__ in _INVALID:
        return "invalid"
    return "other"


class ChromaIndexBase:
    """Shared machinery of the Chroma backends; subclasses say how to build the client."""

    remote = False

    def __init__(self, hnsw: Mapping[str, Any] | None = None) -> None:
        self._lock = threading.RLock()  # client creation, handle cache, close
        self._write_lock = threading.Lock()  # upsert reads old metadata then writes: keep that pair atomic here
        self._client: Any = None
        self._collections: dict[str, Any] = {}
        self._packed: dict[str, bool] = {}  # collection name -> its vectors are keyed by packed ids
        self._known: dict[str, dict[str, str]] = {}  # collection name -> key -> memory id, of keys queries returned
        #: Collections this client has just made (:meth:`_collection`): the upsert that made one has
        #: no old records to look up there (:meth:`_upsert_chunk`).
        self._empty: set[str] = set()
        self._max_batch: int | None = None
        self._wrote = False  # this client wrote since it was created: its close may write files too
        unknown = set(hnsw or {}) - set(_HNSW_KEYS)
        if unknown:
            raise ValueError(f"Unknown HNSW parameter(s) {sorted(unknown)}; valid ones: {', '.join(_HNSW_KEYS)}")
        self._hnsw: dict[str, Any] = {"space": "cosine", **{_HNSW_KEYS[k]: v for k, v in (hnsw or {}).items()}}

    # -- subclass hooks --------------------------------------------------------------------

    def _make_client(self) -> Any:
        raise NotImplementedError

    def _describe(self) -> str:
        raise NotImplementedError

    def _other_error(self, exc: BaseException, what: str, write: bool) -> StorageError:
        return StorageError(f"Vector index {what} failed on {self._describe()}: {exc}")

    def _after_write(self) -> None:
        """Called after every client creation and write batch (the embedded index makes new files private)."""

    def _hnsw_for(self, name: str) -> dict[str, Any]:
        """The HNSW configuration a new collection ``name`` is created with."""
        return dict(self._hnsw)

    def _adjust(self, name: str, col: Any) -> None:
        """Called once a process with each collection's handle, before the collection is used."""

    def _files_written(self) -> None:
        """Called after each write batch, and at close if this client wrote: the files are as this
        process left them (the embedded index records their fingerprints)."""

    # -- client and collection handles ------------------------------------------------------

    def _get_client(self) -> Any:
        with self._lock:
            if self._client is None:
                self._client = self._make_client()
                self._after_write()
            return self._client

    def _collection(self, name: str, *, create: bool = True) -> Any:
        """The collection's handle (cached); without ``create``, None if it does not exist."""
        col = self._collections.get(name)
        if col is not None:
            return col
        with self._lock:
            col = self._collections.get(name)
            if col is None:
                client = self._get_client()
                if create:
                    existed = self._existing(client, name)
                    col = existed or client.get_or_create_collection(
                        name,
                        configuration={"hnsw": self._hnsw_for(name)},
                        metadata=dict(KEYS_META),
                        embedding_function=None,
                    )
                    if existed is None:
                        self._empty.add(name)
                else:
                    try:
                        col = client.get_collection(name, embedding_function=None)
                    except Exception as exc:
                        if classify(exc) == "missing":
                            return None
                        raise
                config = getattr(col, "configuration_json", None) or {}
                space = (config.get("hnsw") or config.get("spann") or {}).get("space", "cosine")
                if space != "cosine":
                    raise StorageError(
                        f"Collection {name!r} in {self._describe()} uses the {space!r} distance, not cosine",
                        suggestion=RECOVERY,
                    )
                metadata = getattr(col, "metadata", None) or {}
                self._packed[name] = all(metadata.get(k) == v for k, v in KEYS_META.items())
                self._adjust(name, col)
                self._collections[name] = col
            self._after_write()
            return col

    @staticmethod
    def _existing(client: Any, name: str) -> Any:
        """The collection ``name`` if it exists, else None (an older server says so with a
        ValueError, not chromadb's NotFoundError)."""
        try:
            return client.get_collection(name, embedding_function=None)
        except Exception as exc:
            if classify(exc) == "missing" or "does not exist" in str(exc).lower():
                return None
            raise

    def _keyed(self, name: str) -> tuple[Any, Callable[[str], str], Callable[[str], str]]:
        """The collection's handle, and how a memory id becomes its key there and back."""
        col = self._collection(name)
        if self._packed.get(name):
            return col, lambda mid: pack(name, mid), lambda key: unpack(name, key)
        return col, _same, _same

    def _memory_ids(self, name: str, keys: list[str]) -> list[str]:
        """The memory ids of keys a query of collection ``name`` returned. The ones seen before are
        looked up (a search of a small collection returns every key of it, each time: one dict
        lookup a key where decoding costs a microsecond), at most ``KNOWN_KEYS`` a collection."""
        if not self._packed.get(name):
            return keys
        known = self._known.get(name)
        if known is None or len(known) > KNOWN_KEYS:
            known = self._known[name] = {}
        try:
            return list(map(known.__getitem__, keys))  # no Python frame per key
        except KeyError:
            pass
        out = []
        for key in keys:
            mid = known.get(key)
            if mid is None:
                mid = known[key] = unpack(name, key)
            out.append(mid)
        return out

    def _batch_size(self) -> int:
        if self._max_batch is None:
            size = self._call("get_max_batch_size", lambda: self._get_client().get_max_batch_size())
            self._max_batch = int(size) if size and size > 0 else 1000
        return self._max_batch

    # -- the retry wrapper ------------------------------------------------------------------

    def _call(self, what: str, fn: Callable[[], T], *, collection: str | None = None, write: bool = False) -> T:
        """Run ``fn`` (one Chroma operation, safe to repeat) with the retry and error policy above."""
        refetched = False
        attempt = 0
        while True:
            try:
                return fn()
            except BaseException as exc:  # pyo3 panics from chromadb's Rust core derive from BaseException
                if isinstance(exc, KeyboardInterrupt | SystemExit | GeneratorExit | StorageError):
                    raise
                kind = classify(exc)
                if kind == "missing" and collection is not None and not refetched:
                    refetched = True  # our cached handle is stale: the collection was dropped elsewhere
                    with self._lock:
                        self._collections.pop(collection, None)
                    continue
                if kind in ("locked", "unreachable") and attempt < RETRIES:
                    log.debug("%s on %s: %s; retry %d", what, self._describe(), exc, attempt + 1)
                    time.sleep(BACKOFF[attempt])
                    attempt += 1
                    continue
                raise self._translate(exc, kind, what, write) from exc

    def _translate(self, exc: BaseException, kind: str, what: str, write: bool) -> Exception:
        where = self._describe()
        if kind == "full":
            return StorageFullError(f"{what} on {where}: {exc}")
        if kind == "locked":
            return StorageLockedError(
                f"{where} stayed locked through {RETRIES} retries of {what}: {exc}",
                suggestion="Another process is using the store; retry later or stop that process",
            )
        if kind == "unreachable":
            return StorageError(
                f"Cannot reach {where} ({what} failed after {RETRIES} retries: {exc})",
                suggestion="Start it (`chroma run --host HOST --port PORT`) or fix the configured host and port",
            )
        if kind == "denied":
            return StorageError(
                f"Permission denied on {where} ({what}): {exc}",
                suggestion="Make the storage directory writable by this user, or configure another storage path",
            )
        if kind == "corrupt":
            return CorruptionError(f"{where} is damaged ({what} failed: {exc})", suggestion=RECOVERY)
        if kind == "invalid":
            return ValueError(f"{what}: {exc}")
        return self._other_error(exc, what, write)

    # -- VectorIndex --------------------------------------------------------------------------

    def upsert(
        self,
        collection: str,
        ids: Sequence[str],
        embeddings: np.ndarray,
        metadatas: Sequence[Mapping[str, Scalar]],
    ) -> None:
        """Insert or replace vectors, in chunks of at most ``get_max_batch_size()``.

        Replace means replace: metadata keys of the old record that the new one lacks are removed
        (Chroma's own upsert merges metadata). A record whose vector is unchanged gets a metadata-only
        update: re-inserting an existing vector into HNSW costs chromadb 1.5.9 ~10-35 ms per record,
        a metadata update well under 1 ms. A failure part-way leaves the earlier chunks written.
        """
        check_collection_name(collection)
        ids_, vectors, metas = check_upsert(ids, embeddings, metadatas)
        if not ids_:
            return
        size = self._batch_size()
        with self._write_lock:
            for start in range(0, len(ids_), size):
                chunk = slice(start, start + size)

                def run(chunk: slice = chunk) -> None:
                    # Empty only if made by this call: made earlier (by a search), another process may
                    # have written to it since.
                    self._empty.discard(collection)
                    col, key, _ = self._keyed(collection)
                    empty = collection in self._empty
                    self._empty.discard(collection)
                    self._upsert_chunk(col, [key(i) for i in ids_[chunk]], vectors[chunk], metas[chunk], empty=empty)

                try:
                    self._call("upsert", run, collection=collection, write=True)
                finally:
                    self._after_write()
                    self._wrote = True
                    self._files_written()

    @staticmethod
    def _upsert_chunk(
        col: Any, ids: list[str], vectors: np.ndarray, metas: list[dict[str, Scalar]], *, empty: bool = False
    ) -> None:
        """Write one chunk (see :meth:`upsert`); ``empty``: the collection holds nothing yet, so no
        old record is looked up (a fresh store's first write: 3-4 ms of its flush)."""
        if empty:
            col.upsert(ids=ids, embeddings=vectors, metadatas=[m or None for m in metas])
            return
        old = col.get(ids=ids, include=["metadatas", "embeddings"])
        previous = {
            i: (set(m or ()), e)
            for i, m, e in zip(
                old["ids"],
                old["metadatas"] or [],
                old["embeddings"] if old["embeddings"] is not None else [],
                strict=False,
            )
        }
        same: list[tuple[str, dict[str, Any]]] = []
        rows: list[int] = []
        payload: list[dict[str, Any] | None] = []
        for row, (id_, meta) in enumerate(zip(ids, metas, strict=True)):
            keys, vector = previous.get(id_, (set(), None))
            full = {**meta, **dict.fromkeys(keys - meta.keys())}  # a None value deletes the key in Chroma's merge
            if vector is not None and np.allclose(vector, vectors[row], rtol=0.0, atol=1e-6):
                if full:
                    same.append((id_, full))
            else:
                rows.append(row)
                payload.append(full or None)
        if same:
            col.update(ids=[i for i, _ in same], metadatas=[m for _, m in same])
        if rows:
            col.upsert(ids=[ids[r] for r in rows], embeddings=vectors[rows], metadatas=payload)

    def delete(self, collection: str, ids: Sequence[str]) -> None:
        """Delete by id; unknown ids are ignored."""
        check_collection_name(collection)
        ids_ = list(ids)
        if not ids_:
            return
        size = self._batch_size()
        with self._write_lock:
            for start in range(0, len(ids_), size):

                def run(chunk: list[str] = ids_[start : start + size]) -> None:
                    col, key, _ = self._keyed(collection)
                    col.delete(ids=[key(i) for i in chunk])

                try:
                    self._call("delete", run, collection=collection, write=True)
                finally:
                    self._after_write()
                    self._wrote = True
                    self._files_written()

    def query(self, collection: str, embedding: np.ndarray, k: int) -> list[tuple[str, float]]:
        """Up to ``k`` nearest ``(id, 1 - cosine distance)`` pairs, best first; ``[]`` if empty."""
        check_collection_name(collection)
        vector = check_query(embedding, k)

        def run() -> list[tuple[str, float]]:
            col = self._collection(collection)
            # chromadb 1.5 answers n_results > count (and an empty collection) without error or warning,
            # and count() costs as much as the query (4-15 ms at 100k), so count only if Chroma objects.
            try:
                res = col.query(query_embeddings=vector[None, :], n_results=k, include=["distances"])
            except Exception as exc:
                if "result" not in str(exc).lower():
                    raise
                n = col.count()
                if n == 0:
                    return []
                res = col.query(query_embeddings=vector[None, :], n_results=min(k, n), include=["distances"])
            ids, dists = self._memory_ids(collection, res["ids"][0]), res["distances"][0]
            # Plain floats: np.clip per scalar cost more than the rest of this method.
            return [(i, min(1.0, max(-1.0, 1.0 - float(d)))) for i, d in zip(ids, dists, strict=True)]

        return self._call("query", run, collection=collection)

    def count(self, collection: str) -> int:
        """How many vectors the collection holds (0 if it does not exist: it is not created)."""
        check_collection_name(collection)

        def run() -> int:
            # Not created: a fresh store's reconcile counts six types, which creating would cost
            # 5-15 ms each before its first vector is indexed.
            col = self._collection(collection, create=False)
            return 0 if col is None else int(col.count())

        return int(self._call("count", run, collection=collection))

    def ids(self, collection: str) -> list[str]:
        """Every id in the collection, in no particular order (read page by page)."""
        check_collection_name(collection)
        size = self._batch_size()
        out: list[str] = []
        while True:

            def run(offset: int = len(out)) -> list[str]:
                col, _, memory_id = self._keyed(collection)
                return [memory_id(k) for k in col.get(include=[], limit=size, offset=offset)["ids"]]

            page = self._call("ids", run, collection=collection)
            out.extend(page)
            if len(page) < size:
                return out

    def reset(self) -> None:
        """Delete every collection (not ``client.reset()``: a server refuses it unless configured to allow it)."""

        def run() -> None:
            with self._lock:
                client = self._get_client()
                for col in client.list_collections():
                    client.delete_collection(col.name)
                self._collections.clear()

        try:
            self._call("reset", run, write=True)
        finally:
            self._after_write()
            self._wrote = True
            self._files_written()

    def close(self) -> None:
        """Release the client (files, connections). The index reopens lazily if used again."""
        with self._lock:
            client, self._client = self._client, None
            self._collections.clear()
            self._max_batch = None
            wrote, self._wrote = self._wrote, False
        if client is None:
            return
        try:
            client.close()  # chromadb >= 1.1: refcounted; stops the shared System on the last close
        except AttributeError:  # older 1.x: stop the System and drop it from the per-path cache
            from chromadb.api.shared_system_client import SharedSystemClient

            client._system.stop()
            SharedSystemClient._identifier_to_system.pop(client._identifier, None)
        self._after_write()  # files flushed at close
        if wrote:
            self._files_written()


def _same(value: str) -> str:
    return value


def is_locked_message(text: str) -> bool:
    """True if an error message says a database was locked or busy."""
    return bool(_LOCKED.search(text))
