"""Health probe of an embedded Chroma store, run in a child process by ``ChromaEmbeddedIndex.check()``.

Why a child process: damaged HNSW files can crash chromadb's native code (a ``header.bin`` cut in
half segfaults on the next write in chromadb 1.5.9), which must not take the host down. Why the
file checks: several kinds of damage are invisible to reads (a truncated ``data_level0.bin`` or
``link_lists.bin`` still answers queries, from garbage), and an empty ``chroma.sqlite3`` is
silently re-initialised as a new, empty store. Also, a process must not open ``chroma.sqlite3``
with its own sqlite connection while Chroma has it open: closing any descriptor of a file drops
all of the process's POSIX locks on it.

This module imports only the standard library, numpy and chromadb: the parent runs its source
with ``python -c`` so that it works whatever ``sys.path`` the parent has. Output: JSON lines on
stdout, ``{"stage": ...}`` before each step and a final ``{"ok": ..., ...}`` report.
"""

from __future__ import annotations

import json
import re
import sqlite3
import struct
import sys
from pathlib import Path
from typing import Any

SQLITE_MAGIC = b"SQLite format 3\x00"
# chroma-hnswlib persist format 1: version, offsetLevel0, max_elements, cur_element_count,
# size_data_per_element, label_offset, offsetData, maxlevel, enterpoint, maxM, maxM0, M, mult, ef_construction
HNSW_HEADER = struct.Struct("<iQQQQQQiIQQQdQ")
HNSW_FILES = ("header.bin", "data_level0.bin", "length.bin", "link_lists.bin")
UUID_DIR = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def _emit(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


def segment_dirs(path: Path) -> list[Path]:
    return sorted(p for p in path.iterdir() if p.is_dir() and UUID_DIR.match(p.name))


def check_sqlite(path: Path) -> str | None:
    """Problem with ``chroma.sqlite3`` (header, emptiness, page structure), or None."""
    db = path / "chroma.sqlite3"
    with db.open("rb") as fh:
        head = fh.read(len(SQLITE_MAGIC))
    if not head:
        n = len(segment_dirs(path))
        return f"the file is empty but {n} HNSW segment directories exist" if n else None
    if head != SQLITE_MAGIC:
        return "the file does not start with the SQLite header (truncated or overwritten)"
    try:
        con = sqlite3.connect(f"{db.absolute().as_uri()}?mode=ro", uri=True, timeout=30)
        try:
            rows = con.execute("PRAGMA quick_check").fetchall()
        finally:
            con.close()
    except sqlite3.DatabaseError as exc:
        return f"SQLite cannot read it: {exc}"
    if rows != [("ok",)]:
        return "PRAGMA quick_check failed: " + "; ".join(str(r[0]) for r in rows[:5])
    return None


def check_hnsw_dir(seg: Path) -> tuple[str, str] | None:
    """``(file, problem)`` for an inconsistent persisted HNSW segment, or None.

    Only segments that were persisted (``index_metadata.pickle`` present) are read back by Chroma;
    the others are rebuilt from the log, so their files are not checked.
    """
    if not (seg / "index_metadata.pickle").exists():
        return None
    for name in HNSW_FILES:
        if not (seg / name).exists():
            return name, "file is missing"
    header = (seg / "header.bin").read_bytes()
    if len(header) != HNSW_HEADER.size:
        return "header.bin", f"{len(header)} bytes instead of {HNSW_HEADER.size} (truncated)"
    version, _, max_el, count, per_el, *_ = HNSW_HEADER.unpack(header)
    if version != 1:
        return None  # a format this probe does not know: leave it to Chroma
    size = (seg / "data_level0.bin").stat().st_size
    if size not in (count * per_el, max_el * per_el):
        return "data_level0.bin", f"{size} bytes, expected {count * per_el} for {count} elements (truncated)"
    size = (seg / "length.bin").stat().st_size
    if size not in (count * 4, max_el * 4):
        return "length.bin", f"{size} bytes, expected {count * 4} for {count} elements (truncated)"
    links = (seg / "link_lists.bin").read_bytes()
    pos = 0
    for _ in range(count):
        if pos + 4 > len(links):
            return "link_lists.bin", f"ends at byte {len(links)} before the last element's links (truncated)"
        pos += 4 + struct.unpack_from("<I", links, pos)[0]
    if pos != len(links):
        return "link_lists.bin", f"{len(links)} bytes but the link lists of {count} elements take {pos}"
    return None


def probe_chroma(path: Path) -> dict[str, int]:
    """Open the store with chromadb and touch every collection: count, one stored vector, a query."""
    import chromadb
    import numpy as np
    from chromadb.config import Settings

    _emit(stage="opening the Chroma client")
    client: Any = chromadb.PersistentClient(str(path), settings=Settings(anonymized_telemetry=False, allow_reset=True))
    counts: dict[str, int] = {}
    _emit(stage="listing collections")
    for model in client.list_collections():
        name = model.name
        _emit(stage=f"opening collection {name!r}")
        col = client.get_collection(name, embedding_function=None)
        _emit(stage=f"counting collection {name!r}")
        counts[name] = n = col.count()
        if n == 0:
            continue
        _emit(stage=f"reading a vector of collection {name!r}")
        got: Any = col.get(limit=1, include=["embeddings"])
        vector: Any = np.asarray(got["embeddings"][0], dtype=np.float32)
        _emit(stage=f"querying collection {name!r}")
        col.query(query_embeddings=[vector], n_results=min(5, n), include=["distances"])
    client.close()
    return counts


def main(argv: list[str]) -> int:
    path = Path(argv[1])
    failure: dict[str, Any] | None = None
    try:
        problem = check_sqlite(path)
        if problem:
            failure = {"file": "chroma.sqlite3", "error": problem, "stage": "checking chroma.sqlite3"}
        for seg in segment_dirs(path) if failure is None else []:
            found = check_hnsw_dir(seg)
            if found:
                failure = {"file": f"{seg.name}/{found[0]}", "error": found[1], "stage": "checking HNSW files"}
                break
        if failure is None:
            counts = probe_chroma(path)
            _emit(ok=True, collections=counts)
            return 0
    except BaseException as exc:  # pyo3 panics derive from BaseException
        if isinstance(exc, KeyboardInterrupt | SystemExit):
            raise
        failure = {"file": None, "error": f"{type(exc).__name__}: {exc}"}
    _emit(ok=False, **failure)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
