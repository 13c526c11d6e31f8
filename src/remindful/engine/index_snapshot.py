"""A compact copy of the vectors the index holds, in one file, for a fresh process's first searches.

A large store's index takes seconds to open (chromadb loads each HNSW graph whole: 5 s for
1,000,000 vectors, 1.7 GB), and scoring its vectors exactly from the catalog takes as long (one
SQLite row each, 2.5 s at 1,000,000, and a float32 copy of 1.5 GB). So the index's vectors are
also kept in ``vectors.snapshot`` beside the catalog, as the catalog stores them (int8 with a
scale), one fixed-size record after another: a search scans the file in chunks (no copy of it is
kept: the index is on its way) while the index opens in the background, about 0.5 s at 1,000,000.

The file mirrors the index files, not the catalog: its header names the
:class:`~remindful.engine.index_locks.IndexLock` generation it matches, and it is used only while
the lock file still says that generation (the same lock file: its inode is in the header too).
Every write through the index holds that lock (:class:`~remindful.engine.index_view.IndexView`)
and bumps the generation as it leaves: a write that goes through :meth:`VectorSnapshot.stage`
(the vectors upserted) and :meth:`VectorSnapshot.advance` carries the file along to the next
generation (its records appended, the header rewritten last). A reindex or a restore writes it
whole as it ends (:meth:`VectorSnapshot.rebuild`); any other write (another build of remindful, a
copy of the store elsewhere: a new lock file) leaves it stale until it is written whole again,
in the background, after the index opens.

Writing it whole reads every indexed row (5-6 s at 1,000,000 memories), and the index is written
meanwhile: the rows are read without the index lock, and the writes made meanwhile leave their
vectors in a side file, ``vectors.snapshot.pending``, which the rebuild holds (a ``flock``: a
pending file nobody holds is one a rebuild left as it died, and is not written to) and appends
under the lock as it ends. Every write says which generation it was: if one generation since the
rebuild began left nothing there (a write of another build, a reindex, a backup), the rows are
read again under the lock.

What the index holds, the file holds: vectors of rows deleted since (a search checks every dense
candidate against the catalog), and a row's new vector after an update is appended after its old
one (the last record of a rowid wins). Records carry the row's rowid and a hash of its id, so a
rowid SQLite gave to a later row is not taken for the old one. Rows above the header's ``floor``
may be missing: the search scores them from the catalog (as it does rows above the index view's
:attr:`~remindful.engine.index_view.IndexView.rowid`), and so does it rows not marked indexed.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import struct
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any, NamedTuple

import numpy as np

from remindful.engine import vectors as stored_vectors
from remindful.engine.atomic import replaced_atomically
from remindful.engine.backend import CatalogBackend
from remindful.engine.index_locks import IndexLock
from remindful.model import MemoryType

log = logging.getLogger("remindful")

FILE_NAME = "vectors.snapshot"
PENDING_SUFFIX = ".pending"
_MAGIC = b"RMVSNAP1"
_PENDING_MAGIC = b"RMVPEND1"
#: A write's part of the pending file: its generation, the records' dimension, their count.
_CHUNK = struct.Struct("<qIq")
_MAX_DIMENSION = 1 << 16
#: magic, dimension, lock inode, generation, floor, highest rowid, whether a rowid repeats
_HEADER = struct.Struct("<8sIQqqqB")
_HEADER_SIZE = 64
#: Records read at a time (6.6 MB at 384 dimensions; 65,536 took twice as long), scored a part at a
#: time (:func:`remindful.engine.vectors.cosines`) with ``einsum``, one thread, not BLAS: OpenBLAS's
#: threads spin on a busy machine (a scan of 1,000,000 took 1.8-2.7 s with them at load 7, 0.18 s
#: with einsum).
SCAN_ROWS = 16_384
#: Rows read from the catalog at a time while the file is written whole.
BUILD_ROWS = 50_000
#: The share of records beyond the catalog's rows (deleted rows, older vectors) at which the file
#: is written whole again.
SPARE_SHARE = 0.25
#: Candidates a scan keeps beyond ``k``: some may be deleted rows, or rowids given to later rows.
MARGIN = 32
_TYPES = [t.value for t in MemoryType]


def record_dtype(dimension: int) -> np.dtype:
    """One row's record: rowid, id hash, type (index in :class:`MemoryType`), scale, int8 codes."""
    return np.dtype(
        [("rowid", "<i8"), ("hash", "<u8"), ("type", "u1"), ("scale", "<f4"), ("codes", "i1", (dimension,))]
    )


def _id_digest(memory_id: str) -> bytes:
    return hashlib.blake2b(memory_id.encode(), digest_size=8).digest()


def id_hash(memory_id: str) -> int:
    return int.from_bytes(_id_digest(memory_id), "little")


def id_hashes(memory_ids: Sequence[str]) -> np.ndarray:
    """:func:`id_hash` of each id, as one array (the digests joined and read at once)."""
    return np.frombuffer(b"".join(_id_digest(i) for i in memory_ids), dtype="<u8")


class Header(NamedTuple):
    dimension: int
    inode: int
    generation: int
    floor: int
    top: int
    repeats: bool


def records(rowids: Sequence[int], ids: Sequence[str], types: Sequence[str], blobs: Sequence[bytes]) -> np.ndarray:
    """Records of catalog rows (their stored vector blobs, int8 or float32)."""
    dimension = stored_vectors.dimension(blobs[0]) if blobs else 0
    out = np.zeros(len(blobs), dtype=record_dtype(dimension))
    out["rowid"] = rowids
    out["hash"] = id_hashes(ids)
    out["type"] = [_TYPES.index(t) for t in types]
    unpacked = stored_vectors.int8_codes(blobs)
    if unpacked is not None:  # as the catalog stores them, every one: read at once (a rebuild reads a million)
        out["codes"], out["scale"] = unpacked
        return out
    for n, blob in enumerate(blobs):
        if not stored_vectors.is_quantised(blob):
            blob = stored_vectors.encode(stored_vectors.decode(blob)) or blob
            if not stored_vectors.is_quantised(blob):
                raise ValueError("a vector that is not stored as int8")
        out["scale"][n] = np.frombuffer(blob, dtype="<f4", count=1, offset=1)[0]
        out["codes"][n] = np.frombuffer(blob, dtype=np.int8, offset=5)
    return out


class VectorSnapshot:
    """``vectors.snapshot`` of one storage directory (see the module docstring). ``lock_path``: the
    index lock file whose generation the snapshot follows. Writers hold the index lock."""

    def __init__(self, path: Path, lock_path: Path, catalog: CatalogBackend) -> None:
        self.path = path
        self._lock_path = lock_path
        self._catalog = catalog
        self._pending = path.with_name(path.name + PENDING_SUFFIX)
        self._staged: list[np.ndarray] = []
        self._building = threading.Lock()

    # -- reading --------------------------------------------------------------------------------

    def header(self) -> Header | None:
        try:
            with open(self.path, "rb") as f:
                data = f.read(_HEADER_SIZE)
        except OSError:
            return None
        if len(data) < _HEADER_SIZE or data[:8] != _MAGIC:
            return None
        _magic, dimension, inode, generation, floor, top, repeats = _HEADER.unpack_from(data)
        return Header(dimension, inode, generation, floor, top, bool(repeats))

    def _lock_inode(self) -> int:
        try:
            return os.stat(self._lock_path).st_ino
        except OSError:
            return -1

    def records_held(self, header: Header) -> int:
        """How many records the file holds (rows deleted since, and older vectors of rows written
        again, included)."""
        try:
            size = self.path.stat().st_size
        except OSError:
            return 0
        return max(0, size - _HEADER_SIZE) // record_dtype(header.dimension).itemsize

    def usable(self, generation: int) -> Header | None:
        """The header if the file matches the index files at ``generation`` (the lock file's now)."""
        header = self.header()
        if header is None or header.generation != generation or header.inode != self._lock_inode():
            return None
        return header

    def query(self, header: Header, types: Sequence[MemoryType], vector: np.ndarray, k: int) -> list[tuple[str, float]]:
        """The ``k`` rows of ``types`` nearest to ``vector`` among the file's records, best first,
        as (id, cosine): the file scanned in chunks, the best checked against the catalog (rows
        deleted since, and rowids given to other rows, are dropped)."""
        dtype = record_dtype(header.dimension)
        wanted = np.asarray(sorted(_TYPES.index(t.value) for t in types), dtype=np.uint8)
        query = np.asarray(vector, dtype=np.float32).reshape(-1)
        keep = k + MARGIN
        best_scores: list[np.ndarray] = []
        best_rowids: list[np.ndarray] = []
        best_hashes: list[np.ndarray] = []
        best_positions: list[np.ndarray] = []
        rowids: list[np.ndarray] = []
        position = 0
        with open(self.path, "rb") as f:
            f.seek(_HEADER_SIZE)
            while True:
                chunk = np.fromfile(f, dtype=dtype, count=SCAN_ROWS)
                if not len(chunk):
                    break
                if header.repeats:
                    rowids.append(chunk["rowid"].copy())
                scores = stored_vectors.cosines(chunk["codes"], query) * chunk["scale"]
                scores[~np.isin(chunk["type"], wanted)] = -np.inf
                top = np.argpartition(-scores, keep)[:keep] if len(scores) > keep else np.arange(len(scores))
                top = top[np.isfinite(scores[top])]
                best_rowids.append(chunk["rowid"][top])
                best_hashes.append(chunk["hash"][top])
                best_positions.append(top + position)
                best_scores.append(scores[top])
                position += len(chunk)
        if not best_scores:
            return []
        scores = np.concatenate(best_scores)
        found_rowids, found_hashes = np.concatenate(best_rowids), np.concatenate(best_hashes)
        if header.repeats:  # a rowid written again (an update): its last record wins
            every = np.concatenate(rowids)
            unique, first_reversed = np.unique(every[::-1], return_index=True)
            last = len(every) - 1 - first_reversed  # each rowid's last position
            current = last[np.searchsorted(unique, found_rowids)] == np.concatenate(best_positions)
            scores, found_rowids, found_hashes = scores[current], found_rowids[current], found_hashes[current]
        order = np.argsort(-scores, kind="stable")[: keep * 2]
        chosen = [(int(found_rowids[i]), int(found_hashes[i]), float(scores[i])) for i in order]
        ids = dict(
            self._catalog.read_in("SELECT rowid, id FROM memories WHERE rowid IN ({marks})", [r for r, _, _ in chosen])
        )
        out = []
        for rowid, hashed, score in chosen:
            memory_id = ids.get(rowid)
            if memory_id is not None and id_hash(memory_id) == hashed:
                out.append((memory_id, score))
        return out[:k]

    # -- writing (under the index lock) ---------------------------------------------------------

    def begin(self) -> None:
        """A write through the index starts: nothing staged yet."""
        self._staged = []

    def stage(self, ids: Sequence[str], types: Sequence[str], embeddings: Sequence[np.ndarray]) -> None:
        """Vectors this write upserts into the index: appended at :meth:`advance`."""
        if not ids or not (self.path.exists() or self._pending.exists()):
            return
        rowids = dict(self._catalog.read_in("SELECT id, rowid FROM memories WHERE id IN ({marks})", list(ids)))
        keep = [n for n, i in enumerate(ids) if i in rowids]
        if not keep:
            return
        blobs = [stored_vectors.encode(np.asarray(embeddings[n], dtype=np.float32)) or b"" for n in keep]
        self._staged.append(
            records([rowids[ids[n]] for n in keep], [ids[n] for n in keep], [types[n] for n in keep], blobs)
        )

    def advance(self, generation: int, floor: int) -> None:
        """The write at ``generation`` is done (the lock bumps it by one as it leaves) and every
        row marked indexed up to ``floor`` is in the index: if the file matched ``generation``,
        append what was staged and make it match the next one. Else it stays stale."""
        staged, self._staged = self._staged, []
        self._leave_pending(staged, generation)
        header = self.header()
        if header is None or header.generation != generation or header.inode != self._lock_inode():
            return
        try:
            self._append(header, staged, generation + 1, floor)
        except (OSError, ValueError) as exc:  # stale then: written whole after the next open
            log.debug("could not extend %s: %s", self.path, exc)
            with contextlib.suppress(OSError):
                self.path.unlink()

    def _append(self, header: Header, staged: list[np.ndarray], generation: int, floor: int) -> None:
        dtype = record_dtype(header.dimension)
        top, repeats = header.top, header.repeats
        with open(self.path, "r+b") as f:
            size = f.seek(0, os.SEEK_END)
            whole = _HEADER_SIZE + (size - _HEADER_SIZE) // dtype.itemsize * dtype.itemsize
            if whole != size:
                f.truncate(whole)  # a torn append of an earlier write: not covered by any header
            f.seek(whole)
            if any(part.dtype != dtype for part in staged):
                raise ValueError("a vector of another dimension")
            _, top, repeats = _write_parts(f, staged, header.dimension, top, repeats)
            f.flush()
            os.fsync(f.fileno())
            f.seek(0)
            f.write(self._header_bytes(header.dimension, generation, floor, top, repeats))

    def _header_bytes(self, dimension: int, generation: int, floor: int, top: int, repeats: bool) -> bytes:
        data = _HEADER.pack(_MAGIC, dimension, self._lock_inode(), generation, floor, top, int(repeats))
        return data.ljust(_HEADER_SIZE, b"\0")

    def _leave_pending(self, staged: list[np.ndarray], generation: int) -> None:
        """Under the index lock at ``generation``: if a rebuild is reading the rows (it holds the
        pending file), leave this write's records there, with its generation (none: it wrote none)."""
        try:
            fd = os.open(self._pending, os.O_RDWR)
        except OSError:
            return
        try:
            if not _held(fd):
                return  # left by a rebuild that died: nobody reads it
            end = _pending_end(fd)
            parts = [part for part in staged if len(part)] or [np.zeros(0, dtype=record_dtype(0))]
            data = b"".join(
                _CHUNK.pack(generation, part.dtype["codes"].shape[0], len(part)) + part.tobytes() for part in parts
            )
            os.ftruncate(fd, end)  # a torn write's bytes: none left behind this one
            os.pwrite(fd, data, end)
        except OSError as exc:  # the rebuild finds this generation missing and reads the rows again
            log.debug("could not add to %s: %s", self._pending, exc)
        finally:
            os.close(fd)

    def rebuild(self, lock: IndexLock, floor: Callable[[], int], stopping: threading.Event | None = None) -> bool:
        """Write the file whole from the catalog's rows marked indexed, to match the index files as
        they are when it ends: the rows read without ``lock`` (the store's index lock: writers go
        on), then under it (held for reading) the writes made meanwhile added from the pending
        file, the header (``floor()``: read there) written and the file put in place. If a write
        left nothing there, the rows are read again under the lock. False if ``stopping`` was set
        (the file is left as it was); WaitCancelled if it was set during the wait for the lock."""
        cancel = stopping.is_set if stopping is not None else (lambda: False)
        try:
            with self._building, self._collecting() as pending, contextlib.ExitStack() as held:
                started, inode = lock.generation(), self._lock_inode()
                with replaced_atomically(self.path) as out:
                    out.write(b"\0" * _HEADER_SIZE)
                    dimension, top = self._write_rows(out, cancel)
                    generation = held.enter_context(lock(write=False, cancel=stopping))
                    caught_up = None
                    if inode == self._lock_inode():
                        caught_up = _catch_up(out, _read_pending(pending), started, generation, dimension, top)
                    if caught_up is None:  # a write of another kind: the rows read again, under the lock
                        out.seek(_HEADER_SIZE)
                        out.truncate()
                        (dimension, top), repeats = self._write_rows(out, cancel), False
                    else:
                        dimension, top, repeats = caught_up
                    out.seek(0)
                    out.write(self._header_bytes(dimension, generation, floor(), top, repeats))
                return True  # put in place above, the lock still held
        except _Cancelled:
            return False

    def _write_rows(self, out: IO[Any], cancel: Callable[[], bool]) -> tuple[int, int]:
        """The records of the catalog's rows marked indexed, in rowid order, after what ``out``
        holds; their dimension (0: none) and the last rowid written."""
        dimension = 0
        top = 0
        after = 0
        while True:
            if cancel():
                raise _Cancelled
            rows = self._catalog.read(
                "SELECT rowid, id, type, embedding FROM memories "
                "WHERE rowid > ? AND indexed = 1 AND embedding IS NOT NULL ORDER BY rowid LIMIT ?",
                (after, BUILD_ROWS),
            )
            if not rows:
                return dimension, top
            after = int(rows[-1][0])
            rowids, ids, types, blobs = zip(*rows, strict=True)
            part = records(rowids, ids, types, blobs)
            if dimension and part.dtype != record_dtype(dimension):
                raise ValueError("vectors of more than one dimension")
            dimension = part.dtype["codes"].shape[0]
            top = after
            out.write(part.tobytes())

    @contextlib.contextmanager
    def _collecting(self) -> Iterator[int]:
        """A pending file of this rebuild's own, held (``flock``) while it reads the rows, put in
        place of any other (a rebuild that died left it, or another process's rebuild, which then
        reads its rows again under the lock); its descriptor. Removed at the end if still ours."""
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self._pending.name}.", suffix=".tmp")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.write(fd, _PENDING_MAGIC)
            os.replace(tmp, self._pending)
            yield fd
        finally:
            with contextlib.suppress(OSError):
                if os.stat(self._pending).st_ino == os.fstat(fd).st_ino:
                    os.unlink(self._pending)
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            os.close(fd)

    def remove(self) -> None:
        with contextlib.suppress(OSError):
            self.path.unlink()


class _Cancelled(Exception):
    pass


def _held(fd: int) -> bool:
    """Whether a rebuild holds the pending file open at ``fd`` (it holds it exclusively)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    fcntl.flock(fd, fcntl.LOCK_UN)
    return False


def _chunks(data: bytes) -> Iterator[tuple[int, int, np.ndarray]]:
    """The writes a pending file's bytes hold, whole ones only: (offset after it, generation, records)."""
    at = len(_PENDING_MAGIC) if data[: len(_PENDING_MAGIC)] == _PENDING_MAGIC else len(data)
    while at + _CHUNK.size <= len(data):
        generation, dimension, count = _CHUNK.unpack_from(data, at)
        if dimension > _MAX_DIMENSION or count < 0:
            return  # not a write's header: the file is not one this code wrote
        dtype = record_dtype(dimension)
        end = at + _CHUNK.size + count * dtype.itemsize
        if end > len(data):
            return  # torn: a writer died as it added it (its generation is written again, or missing)
        yield end, generation, np.frombuffer(data, dtype=dtype, count=count, offset=at + _CHUNK.size)
        at = end


def _pending_end(fd: int) -> int:
    """Where the next write's records go: after the last whole one (a torn one is written over)."""
    ends = [end for end, _generation, _part in _chunks(_read_fd(fd))]
    return ends[-1] if ends else len(_PENDING_MAGIC)


def _read_pending(fd: int) -> list[tuple[int, np.ndarray]]:
    return [(generation, part) for _end, generation, part in _chunks(_read_fd(fd))]


def _read_fd(fd: int) -> bytes:
    size = os.fstat(fd).st_size
    return os.pread(fd, size, 0) if size else b""


def _catch_up(
    out: IO[Any], pending: list[tuple[int, np.ndarray]], started: int, generation: int, dimension: int, top: int
) -> tuple[int, int, bool] | None:
    """Append to ``out`` the records of the writes since generation ``started`` (the rows were
    read from then on; now it is ``generation``); their dimension, the last rowid and whether a
    rowid repeats. None if a write in between left nothing (or vectors of another dimension)."""
    if not set(range(started, generation)) <= {g for g, _ in pending}:
        return None
    try:
        return _write_parts(out, [part for _generation, part in pending], dimension, top, False)
    except ValueError:
        return None


def _write_parts(
    out: IO[Any], parts: Sequence[np.ndarray], dimension: int, top: int, repeats: bool
) -> tuple[int, int, bool]:
    """Write the records ``parts`` after records of ``dimension`` (0: none yet) up to rowid
    ``top`` (``repeats``: a rowid among them repeats); the dimension, the last rowid and whether a
    rowid repeats after them. ValueError for records of another dimension."""
    for part in parts:
        if not len(part):
            continue
        part_dimension = part.dtype["codes"].shape[0]
        if dimension and part_dimension != dimension:
            raise ValueError("a vector of another dimension")
        dimension = part_dimension
        repeats = repeats or int(part["rowid"].min()) <= top or len(np.unique(part["rowid"])) < len(part)
        top = max(top, int(part["rowid"].max()))
        out.write(part.tobytes())
    return dimension, top, repeats


__all__ = [
    "FILE_NAME",
    "PENDING_SUFFIX",
    "SPARE_SHARE",
    "Header",
    "VectorSnapshot",
    "id_hash",
    "record_dtype",
    "records",
]
