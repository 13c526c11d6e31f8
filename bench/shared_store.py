"""The whole path on a shared store (PostgreSQL catalog + a Chroma server) against the embedded
default (SQLite + embedded Chroma), in one run, through the public API every shell calls.

For each backend, a store of ``--memories`` memories (the texts of ``bench/scale.py``: LoCoMo turns
with a varying detail, tool-call records and Markdown chunks, 20 per session, over a few projects):

- ingest until searchable: ``store_batch`` in batches of 2,000 and the ``flush`` that follows (every
  vector in the index), in memories per second;
- store acknowledgement p50: ``store()`` of one memory, ``--acks`` times, back to back, once the
  process has opened its index, as a running daemon has it (:func:`settled`);
- search p50/p95: ``search()`` of the LoCoMo questions (``--queries``), unscoped;
- found from the other machine p50/p95: a ``UserPromptSubmit`` hook on machine A (its own storage
  directory and spool; the hook process's work, in-process), machine A's drainer polling as the daemon
  does (``daemon.poll_interval_ms``), and machine B searching for the prompt's words every 20 ms: the
  seconds from the hook's return to B's first hit. The embedded default's figure is the same flow
  with A and B on one storage directory (two processes of one machine).

``--member`` measures the shared store a third time as a team member does: a copy of its database
(``CREATE DATABASE ... TEMPLATE``, so a cached store stays the single user's) with one person added
(``remindful team add``, who takes over its memories), opened with that person's token by a login
role that is no superuser: every statement then passes row-level security. Acknowledgements and
searches only (the hook of the other machine would need the token in its settings).

``--cache DIR`` keeps both stores (the storage directories, the PostgreSQL cluster's files and the
Chroma server's) in DIR: the first run builds them there, later runs of the same ``--memories``
measure on them without building again (a build of 100,000 takes tens of minutes on a loaded
machine) and report the first run's ingest figures. Each run adds its acknowledgement probes and
its hooks' prompts (a few hundred memories, with words of their own) to both stores.

Embeddings: the texts' and the queries' vectors are computed once before the timing (by the ONNX
model, or the hash vectors of ``--fake-embedder``) and served from memory to both backends, so that
the figures compare the storage paths, not the model (which costs both the same). PostgreSQL: a
throwaway PostgreSQL 15 cluster (``catalog_backends.throwaway_cluster``) unless ``--url``; Chroma: a
``chroma run`` server on a free port. Run it under ``nice``; the figures carry the machine's load.
"""

from __future__ import annotations

import contextlib
import io
import json
import secrets
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from catalog_backends import throwaway_cluster
from common import add_data_option, emit, load_locomo, machine, parser, pct, progress, scratch_dir, turn_texts, versus
from scale import SESSION_TURNS, scope_of, texts_for

BATCH = 2000
FOUND_TIMEOUT_S = 30.0


class MemoEmbedder:
    """Vectors computed once by ``model`` (before the timing), served from memory."""

    def __init__(self, model: Any, texts: Sequence[str], batch: int = 256) -> None:
        self._model = model
        self._vectors: dict[str, np.ndarray] = {}
        for start in range(0, len(texts), batch):
            progress(f"embedding {start:,} of {len(texts):,}")
            chunk = list(texts[start : start + batch])
            self._vectors.update(zip(chunk, model.embed(chunk), strict=True))
        progress(None)

    @property
    def name(self) -> str:
        return str(self._model.name)

    @property
    def dimension(self) -> int:
        return int(self._model.dimension)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        missing = [t for t in texts if t not in self._vectors]
        if missing:
            self._vectors.update(zip(missing, self._model.embed(missing), strict=True))
        return np.stack([self._vectors[t] for t in texts]) if texts else np.zeros((0, self.dimension), np.float32)


@contextlib.contextmanager
def chroma_server(root: Path) -> Iterator[tuple[str, int]]:
    """A ``chroma run`` server on a free port (the one next to this Python), stopped afterwards."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    exe = Path(sys.executable).with_name("chroma")
    log = (root / "chroma.log").open("wb")
    proc = subprocess.Popen(
        [str(exe), "run", "--path", str(root / "chroma-server"), "--host", "127.0.0.1", "--port", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                opener.open(f"http://127.0.0.1:{port}/api/v2/heartbeat", timeout=1).read()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit("chroma run did not start: " + (root / "chroma.log").read_text()[-1000:]) from None
                time.sleep(0.2)
        yield "127.0.0.1", port
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def open_store(path: Path, embedder: Any, shared: dict[str, Any] | None, size: int) -> Any:
    import remindful

    return remindful.open(
        path,
        embedder=embedder,
        **{"retention.max_items_per_collection": size * 2, "search.min_score": 0.0, **(shared or {})},
    )


def settled(memory: Any) -> Any:
    """``memory`` once its vector index is open, as a daemon serving for a while has it. A process's
    opening compares the index with the catalog, once, in the background: on the shared store at
    100,000 memories a count of each type's indexed rows, about 0.4 s of the server's work, which
    the first acknowledgements timed right after the open shared the two cores with."""
    memory.engine.mirror.index  # noqa: B018 (opened now, waited for)
    return memory


def ms_each(fn: Any, args: Sequence[Any]) -> list[float]:
    out = []
    for a in args:
        started = time.perf_counter()
        fn(a)
        out.append((time.perf_counter() - started) * 1000)
    return out


def found_from_other(a: Any, a_path: Path, b: Any, samples: int, tag: str) -> list[float]:
    """Seconds from a hook's return on machine A to machine B's first search hit of its prompt."""
    from remindful.shells.hook import run

    stop = threading.Event()
    interval = a.settings.daemon.poll_interval_ms / 1000

    def drain() -> None:  # machine A's daemon
        while not stop.is_set():
            with contextlib.suppress(Exception):
                a.drain_spool()
            stop.wait(interval)

    drainer = threading.Thread(target=drain, daemon=True)
    drainer.start()
    out = []
    try:
        for i in range(samples):
            word = f"zebrafish{tag}{i}quokka"  # this run's own: a cached store holds the earlier runs'
            prompt = f"the canary deploy of {word} waits for the smoke tests"
            payload = {"session_id": "bench-found", "prompt": prompt, "cwd": str(a_path)}
            argv = ["--path", str(a_path), "hook", "UserPromptSubmit", "--no-context"]
            assert run(argv, stdin=io.StringIO(json.dumps(payload))) == 0
            returned = time.perf_counter()
            while time.perf_counter() - returned < FOUND_TIMEOUT_S:
                # the prompt, or what was learned from it (which a search gives in its place)
                if any(word in hit.content for hit in b.search(word, session_id="bench-found", limit=5)):
                    break
                time.sleep(0.02)
            out.append(time.perf_counter() - returned)
            time.sleep(0.2)
    finally:
        stop.set()
        drainer.join()
    return out


def measure(name: str, root: Path, texts: list[str], queries: list[str], args: Any, embedder: Any,
            shared: dict[str, Any] | None, built: dict[str, Any]) -> dict[str, Any]:  # fmt: skip
    """One backend's figures; ``built``: the ingest figures of the stores built in ``root`` (by
    backend name), to which this one's is added when it builds its store."""
    size = args.memories
    a_path = root / name / "a"
    b_path = a_path if shared is None else root / name / "b"
    result: dict[str, Any] = {}
    tag = secrets.token_hex(3)
    with open_store(a_path, embedder, shared, size) as memory:
        if name in built:
            result["ingest_per_s"] = built[name]
            progress(f"{name}: the cached store's index")
            memory.flush()
            return {**result, **timed(name, memory, a_path, b_path, embedder, shared, queries, args, tag)}
        started = time.perf_counter()
        for start in range(0, size, BATCH):
            progress(f"{name}: storing {start:,} of {size:,}")
            memory.store_batch(
                [
                    {"content": t, "type": "conversation", "session_id": f"s{(start + i) // SESSION_TURNS:07d}",
                     "scope": scope_of(start + i)}
                    for i, t in enumerate(texts[start : start + BATCH])
                ]
            )  # fmt: skip
        progress(f"{name}: waiting for the index")
        memory.flush()
        result["ingest_per_s"] = built[name] = size / (time.perf_counter() - started)
        return {**result, **timed(name, memory, a_path, b_path, embedder, shared, queries, args, tag)}


def commit_floor(url: str, n: int) -> list[float]:
    """Milliseconds of ``n`` bare durable commits on the catalog's server (one row inserted in its
    own transaction: one round trip and one flush of the write-ahead log), as the acknowledgements'
    floor, taken right after them (the background indexing of their rows still running)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS bench_commit_floor (at DOUBLE PRECISION)")
        out = ms_each(lambda _: conn.execute("INSERT INTO bench_commit_floor VALUES (1)"), range(n))
        conn.execute("DROP TABLE bench_commit_floor")
    return out


def warm(url: str) -> int:
    """Read every table and index of the catalog into the server's buffers (``pg_prewarm``, as far
    as ``shared_buffers`` holds them); how many pages were read."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_prewarm")
        return int(
            conn.execute(
                "SELECT coalesce(sum(pg_prewarm(c.oid)), 0) FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname IN ('public', 'pg_toast') AND c.relkind IN ('r', 'i', 't')"
            ).fetchone()[0]
        )


def timed(name: str, memory: Any, a_path: Path, b_path: Path, embedder: Any, shared: dict[str, Any] | None,
          queries: list[str], args: Any, tag: str) -> dict[str, Any]:  # fmt: skip
    """Acknowledgements, searches and found-from-the-other-machine on the built store ``memory``."""
    progress(f"{name}: acknowledgements and searches")
    settled(memory)
    acks = ms_each(lambda i: memory.store(f"ack probe {tag} {i}: the release train leaves at {i % 24}:00"),
                   range(args.acks))  # fmt: skip
    floor = commit_floor(shared["catalog.url"], args.acks) if shared else None
    memory.flush()
    memory.search(queries[0])  # the index opened, the query path warm
    searches = ms_each(lambda q: memory.search(q, limit=10), queries)
    result: dict[str, Any] = dict(
        ack_p50_ms=pct(acks, 0.5), ack_p95_ms=pct(acks, 0.95),
        search_p50_ms=pct(searches, 0.5), search_p95_ms=pct(searches, 0.95),
    )  # fmt: skip
    if floor:
        result["commit_floor_p50_ms"] = pct(floor, 0.5)
    progress(f"{name}: found from the other machine")
    with open_store(b_path, embedder, shared, args.memories) as other:
        other.search(queries[0])
        found = found_from_other(memory, a_path, other, args.found, tag)
    result.update(found_p50_s=pct(found, 0.5), found_p95_s=pct(found, 0.95), found_max_s=pct(found, 1.0))
    progress(None)
    return result


@contextlib.contextmanager
def as_member(url: str, shared: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The shared store's settings for a team member on a copy of ``url``'s database (see the
    module docstring); the copy is dropped afterwards."""
    import psycopg

    from remindful.engine.postgres.catalog import PostgresCatalog
    from remindful.engine.postgres.team import TeamRepository
    from remindful.engine.redact import StoreRedactor, build_redactor

    base, source = url.rsplit("/", 1)
    copy = f"{source}_member_{secrets.token_hex(3)}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{copy}" TEMPLATE "{source}"')
        conn.execute(
            "DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'bench_member') THEN "
            "CREATE ROLE bench_member LOGIN NOSUPERUSER NOBYPASSRLS; END IF; END $$"
        )
    admin_url = f"{base}/{copy}"
    try:
        with scratch_dir() as keys:
            admin = PostgresCatalog(admin_url, redaction=StoreRedactor(build_redactor(), keys))
            try:
                token = TeamRepository(admin).add("bench")
            finally:
                admin.close()
        member_url = admin_url.replace("://bench@", "://bench_member@", 1)
        yield {**shared, "catalog.url": member_url, "catalog.token": token}
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{copy}" WITH (FORCE)')


def as_member_timed(
    root: Path, embedder: Any, settings: dict[str, Any], queries: list[str], args: Any
) -> dict[str, Any]:
    """Acknowledgements and searches of the shared store opened as a team member. The team's first
    person makes the store forget the single user's term counts; a store in use has counted the
    terms its members search for, so another process of the member searches once first (the timed
    process, fresh, still asks the store for each term, as the embedded store's counts its own)."""
    tag = secrets.token_hex(3)
    with open_store(root / "member" / "warm", embedder, settings, args.memories) as other:
        progress("member: the team's term counts")
        for query in queries:
            other.search(query, limit=10)
    with open_store(root / "member" / "a", embedder, settings, args.memories) as memory:
        progress("member: acknowledgements and searches")
        settled(memory).flush()
        acks = ms_each(lambda i: memory.store(f"ack probe {tag} {i}: the release train leaves at {i % 24}:00"),
                       range(args.acks))  # fmt: skip
        memory.flush()
        memory.search(queries[0])
        searches = ms_each(lambda q: memory.search(q, limit=10), queries)
    progress(None)
    return dict(ack_p50_ms=pct(acks, 0.5), ack_p95_ms=pct(acks, 0.95),
                search_p50_ms=pct(searches, 0.5), search_p95_ms=pct(searches, 0.95))  # fmt: skip


def main() -> None:
    p = parser(__doc__)
    add_data_option(p)
    p.add_argument("--memories", type=int, default=100_000, help="memories in each store (default 100000)")
    p.add_argument("--queries", type=int, default=200, help="searches timed (LoCoMo questions)")
    p.add_argument("--acks", type=int, default=200, help="single stores timed")
    p.add_argument("--found", type=int, default=30, help="hook-to-other-machine samples")
    p.add_argument("--fake-embedder", action="store_true", help="hash vectors instead of the ONNX model")
    p.add_argument("--url", help="an empty PostgreSQL database (default: a throwaway cluster)")
    p.add_argument("--pg-settings", default="", help="server options of the throwaway cluster: '-c shared_buffers=1GB'")
    p.add_argument(
        "--warm",
        action="store_true",
        help="read the catalog's tables and indexes into the server's "
        "buffers before the timing (pg_prewarm), as a server running for a while holds them",
    )
    p.add_argument("--cache", type=Path, help="keep the stores in this folder; reuse those it holds (see above)")
    p.add_argument("--member", action="store_true", help="also as a team member, under row-level security (see above)")
    args = p.parse_args()

    built: dict[str, Any] = {}
    marker = None if args.cache is None else args.cache / "built.json"
    if marker is not None and marker.exists():
        built = json.loads(marker.read_text())
        if built.pop("memories", None) != args.memories:
            raise SystemExit(f"{args.cache} holds stores of another size: give another --cache folder")
    data = load_locomo(args.data)
    texts = [] if built else texts_for(turn_texts(data, speaker=True), args.memories, args.memories)
    queries = [qa["question"] for sample in data for qa in sample.get("qa", [])][: args.queries]
    if args.fake_embedder:
        from remindful.testing import FakeEmbedder

        model: Any = FakeEmbedder()
    else:
        from remindful.embed import default_embedder

        model = default_embedder()
    embedder = MemoEmbedder(model, [*texts, *queries])
    result: dict[str, Any] = {"memories": args.memories, "embedder": embedder.name, "queries": len(queries)}
    result["cached"] = bool(built)
    result["pg_settings"] = args.pg_settings
    with contextlib.ExitStack() as stack:
        root = args.cache or stack.enter_context(scratch_dir())
        root.mkdir(parents=True, exist_ok=True)
        result["embedded"] = measure("embedded", root, texts, queries, args, embedder, None, built)
        keep = None if args.cache is None else root / "pg"
        url = args.url or stack.enter_context(throwaway_cluster(keep, args.pg_settings))
        if args.warm:
            result["warmed_pages"] = warm(url)
        host, port = stack.enter_context(chroma_server(root))
        shared = {"catalog.url": url, "storage.chromadb.mode": "server", "storage.chromadb.host": host,
                  "storage.chromadb.port": port}  # fmt: skip
        result["shared"] = measure("shared", root, texts, queries, args, embedder, shared, built)
        if args.member:
            with as_member(url, shared) as member:
                result["member"] = as_member_timed(root, embedder, member, queries, args)
        if marker is not None and not marker.exists():
            marker.write_text(json.dumps({"memories": args.memories, **built}))
    result["machine"] = machine()
    emit(result, args.json, lines)


def lines(r: dict[str, Any]) -> list[str]:
    e, s = r["embedded"], r["shared"]
    return [
        f"whole path, {r['memories']:,} memories, embedder {r['embedder']} (vectors computed before the timing), "
        f"{r['queries']} searches"
        + (f", PostgreSQL started with {r['pg_settings']}" if r.get("pg_settings") else "")
        + (f", its buffers warmed ({r['warmed_pages']:,} pages)" if r.get("warmed_pages") else ""),
        versus("search p50 PostgreSQL + Chroma server", s["search_p50_ms"], "embedded", e["search_p50_ms"])
        + " (target <= 2x)",
        versus("search p95 PostgreSQL + Chroma server", s["search_p95_ms"], "embedded", e["search_p95_ms"]),
        versus("store ack p50 PostgreSQL + Chroma server", s["ack_p50_ms"], "embedded", e["ack_p50_ms"])
        + " (target <= 3x)",
        versus(
            "its floor: a bare durable commit p50", s.get("commit_floor_p50_ms", 0), "embedded ack", e["ack_p50_ms"]
        ),
        versus(
            "ingest until searchable PostgreSQL + Chroma server",
            s["ingest_per_s"],
            "embedded",
            e["ingest_per_s"],
            unit="memories/s",
        )
        + " (target >= 0.7x)"
        + (" (the cached stores' build)" if r.get("cached") else ""),
        versus("found from the other machine p95", s["found_p95_s"], "one machine", e["found_p95_s"], unit="s")
        + " (target <= 2 s)",
        f"found from the other machine p50 {s['found_p50_s']} s, max {s['found_max_s']} s "
        f"(one machine: p50 {e['found_p50_s']} s, max {e['found_max_s']} s)",
        *member_lines(r),
    ]


def member_lines(r: dict[str, Any]) -> list[str]:
    m, e = r.get("member"), r["embedded"]
    if m is None:
        return []
    return [
        versus("search p50 as a team member (row-level security)", m["search_p50_ms"], "embedded", e["search_p50_ms"])
        + " (target <= 2x)",
        versus("store ack p50 as a team member", m["ack_p50_ms"], "embedded", e["ack_p50_ms"]) + " (target <= 3x)",
    ]


if __name__ == "__main__":
    main()
