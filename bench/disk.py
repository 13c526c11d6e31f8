"""Bytes on disk by component: a store of LoCoMo turns built with ``store_batch``, measured.

Usage:
    python bench/disk.py [--size 10000] [--compare REV] [--embedding-cache PATH] [--json]

The store holds ``--size`` turns of the LoCoMo data (cycled, each copy made distinct by a suffix),
stored as conversation memories in sessions of 20 turns with ``store_batch``, flushed (every vector
indexed) and closed. Reported: the catalog table by table (SQLite's ``dbstat``, indexes and the
full-text shadow tables under their own names), the catalog file, the Chroma directory, the whole
storage directory, and the total per memory.

``--compare REV`` builds the same store with the tree at commit REV too (checked out with
``git worktree`` in a temporary folder, removed afterwards), in the same run: each tree gets a
process of its own with its ``src`` first on PYTHONPATH. ``--embedding-cache PATH`` keeps the model's
vectors between runs and between the two trees (the same texts in the same batches give the same
vectors), so the comparison costs the model once.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from common import REPO, add_data_option, add_embedding_cache_option, emit, load_locomo, machine, turn_texts

#: Memories per ``store_batch`` call, and turns per session.
BATCH = 500
SESSION_TURNS = 20


def texts_of(data: Path, size: int) -> list[str]:
    """``size`` turns, the data's cycled, each copy after the first made distinct by a suffix."""
    base = turn_texts(load_locomo(data), speaker=True)
    return [base[i % len(base)] + (f" ({i // len(base)})" if i >= len(base) else "") for i in range(size)]


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def catalog_tables(path: Path) -> dict[str, int]:
    """Bytes per table and index of the SQLite file at ``path`` (``dbstat``), else the file size alone."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name ORDER BY 2 DESC").fetchall()
    except sqlite3.OperationalError:  # SQLite built without dbstat
        return {"(file)": path.stat().st_size}
    finally:
        conn.close()
    return {str(name): int(size) for name, size in rows}


def chroma_files(chroma: list[Path]) -> dict[str, int]:
    """Bytes of the Chroma directories by file name (the HNSW segments' files summed over the
    collections), with the free pages of ``chroma.sqlite3`` apart."""
    out: dict[str, int] = {}
    for root in chroma:
        for p in root.rglob("*"):
            if p.is_file():
                out[p.name] = out.get(p.name, 0) + p.stat().st_size
        db = root / "chroma.sqlite3"
        if db.exists():
            conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
            try:
                free, page = (int(conn.execute(f"PRAGMA {p}").fetchone()[0]) for p in ("freelist_count", "page_size"))
            finally:
                conn.close()
            out["chroma.sqlite3 (free pages)"] = out.get("chroma.sqlite3 (free pages)", 0) + free * page
    return out


def measure(store: Path, size: int, data: Path, embedding_cache: Path | None) -> dict[str, Any]:
    """Build the store with the ``remindful`` on ``sys.path`` and measure it."""
    import remindful
    from common import DiskEmbedder

    embedder: Any = DiskEmbedder(embedding_cache) if embedding_cache else None
    texts = texts_of(data, size)
    with remindful.open(store, embedder=embedder, **{"retention.max_items_per_collection": size * 2}) as memory:
        for start in range(0, size, BATCH):
            memory.store_batch(
                [
                    {"content": t, "type": "conversation", "session_id": f"s{(start + i) // SESSION_TURNS:05d}"}
                    for i, t in enumerate(texts[start : start + BATCH])
                ]
            )
        memory.flush()
    catalog = store / "catalog.sqlite3"
    chroma = [p for p in store.iterdir() if p.is_dir() and "chroma" in p.name]
    total = dir_bytes(store)
    return {
        "size": size,
        "text_bytes": sum(len(t.encode()) for t in texts),
        "tables": catalog_tables(catalog),
        "catalog": catalog.stat().st_size,
        "catalog_wal": sum(p.stat().st_size for p in store.glob("catalog.sqlite3-*")),
        "chroma": sum(dir_bytes(p) for p in chroma),
        "chroma_files": chroma_files(chroma),
        "chroma_tables": catalog_tables(chroma[0] / "chroma.sqlite3") if chroma else {},
        "total": total,
        "per_memory": total / size,
    }


def git(*args: str) -> str:
    done = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"git {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout.strip()


def run_tree(src: Path, store: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Measure in a process of its own, importing remindful from ``src``."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(src), os.environ.get("PYTHONPATH")]))}
    command = [sys.executable, __file__, "--worker", str(store), "--size", str(args.size), "--data", str(args.data)]
    if args.embedding_cache:
        command += ["--embedding-cache", str(args.embedding_cache)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"measuring {src} failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def bench(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="remindful-disk-") as scratch:
        root = Path(scratch)
        results["this tree"] = run_tree(REPO / "src", root / "this", args)
        if args.compare:
            sha = git("rev-parse", "--short", args.compare)
            tree = root / "tree"
            git("worktree", "add", "--detach", "--quiet", str(tree), sha)
            try:
                results[sha] = run_tree(tree / "src", root / "before", args)
            finally:
                git("worktree", "remove", "--force", str(tree))
    return {"size": args.size, "trees": results}


def kib(n: float) -> str:
    return f"{n / 1024:,.1f} KiB" if n < 1024 * 1024 else f"{n / 1024 / 1024:,.2f} MiB"


def lines(result: dict[str, Any]) -> list[str]:
    trees = result["trees"]
    names = list(trees)
    out = [f"disk by component, {result['size']:,} LoCoMo turns stored with store_batch"]
    out.append(f"{'':34}" + "".join(f"{n:>20}" for n in names))
    keys = sorted({k for t in trees.values() for k in t["tables"]}, key=lambda k: -trees[names[0]]["tables"].get(k, 0))
    for key in keys:
        out.append(f"  {key[:32]:32}" + "".join(f"{kib(trees[n]['tables'].get(key, 0)):>20}" for n in names))
    for part in ("chroma_files", "chroma_tables"):
        out.append(f"Chroma, {'by file' if part == 'chroma_files' else 'chroma.sqlite3 by table (dbstat)'}")
        first = trees[names[0]].get(part, {})
        found = sorted({k for t in trees.values() for k in t.get(part, {})}, key=lambda k: -first.get(k, 0))
        for key in found[:12]:
            out.append(f"  {key[:32]:32}" + "".join(f"{kib(trees[n].get(part, {}).get(key, 0)):>20}" for n in names))
    for label, key in [
        ("catalog file", "catalog"),
        ("catalog WAL/SHM", "catalog_wal"),
        ("Chroma", "chroma"),
        ("total", "total"),
    ]:
        out.append(f"{label:34}" + "".join(f"{kib(trees[n][key]):>20}" for n in names))
    out.append(f"{'per memory':34}" + "".join(f"{trees[n]['per_memory']:>17,.0f} B " for n in names))
    text = trees[names[0]]["text_bytes"] / result["size"]
    out.append(f"(text kept: {text:,.0f} B per memory)")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=10_000, help="memories in the store (default 10,000)")
    parser.add_argument("--compare", metavar="REV", help="measure the tree at this commit too, in the same run")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    add_data_option(parser)
    add_embedding_cache_option(parser)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(measure(args.worker, args.size, args.data, args.embedding_cache)))
        return 0
    result = {**bench(args), "machine": machine()}
    emit(result, args.json, lines)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
