"""Storage and search performance of the real stack (ONNX MiniLM + embedded Chroma + SQLite).

Prints, each against a baseline measured in the same run:
- store_batch ingest rate of 1,000 memories vs the raw embedder's rate on the same texts, when the
  call returns (acknowledged: catalog committed) and when Chroma holds every vector (``flush``);
- a batch of 50 vs 50 single stores, the same two ways;
- first-use init (open → first store), get, stats;
- search p50/p95 (including query embedding, query cache off) at each size, with and without a
  session filter, against plain Chroma queries on the same collection; and p50 with two broad
  restrictions (one type, which every memory here has; the newer half by time); p50 with the scope
  filter a hook in a project searches with (its project and the user's: :func:`give_scopes`), for a
  large project and a small one, against the unfiltered p50 of the same run; and p50 of searches
  made after IDLE_S of idleness (as an agent's are), against Chroma queries made the same way.

    python bench/perf.py [--sizes 10000,100000] [--data PATH] [--store-dir DIR] [--json]

``--compare REV`` measures search p50 of this working tree against the commit REV instead, in one
run: REV is checked out with ``git worktree`` in a temporary folder (removed afterwards), and each
tree gets a process of its own, started with that tree's ``src`` on PYTHONPATH, that builds its
store of the same texts and then runs the searches it is sent. The two take turns, round by round
(A B, then B A), so a machine whose load drifts slows both alike; the ratio is this tree over REV.
Beside it, the mean CPU time each search cost its process (every thread), which a busy machine
moves less than the wall time.
The measuring code uses only what both trees have: ``remindful.open``, ``store_batch``, ``search``,
``stats`` and ``close``, and ``remindful.embed.OnnxMiniLMEmbedder``. The working tree is imported
as it is when each module is first loaded: ``--tree REV2`` measures a commit in its place.

    python bench/perf.py --compare 0f1eb84 --size 100000 [--tree REV2] [--queries 200] [--rounds 10]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

from common import (
    REPO,
    add_data_option,
    elapsed_ms,
    emit,
    load_locomo,
    machine,
    parser,
    pct,
    percentile,
    progress,
    scratch_dir,
    timed,
    turn_texts,
    versus,
)

#: Searches "after idleness" wait this long before each: longer than any cache the searches keep warm.
IDLE_S = 1.5
IDLE_QUERIES = 12
#: Memories per ``store_batch`` call when a sized store is built.
BUILD_BATCH = 2000


def turns(data: Path) -> list[str]:
    """The LoCoMo turns of ``data`` as "Speaker: text", the base of :func:`corpus`."""
    return turn_texts(load_locomo(data), speaker=True)


def corpus(base: list[str], n: int, seed: int = 7) -> list[str]:
    """n distinct, realistic texts: the ``base`` turns with a varying detail appended."""
    rng = random.Random(seed)
    words = " ".join(base).split()
    return [f"{base[i % len(base)]} {' '.join(rng.choices(words, k=4))} #{i}" for i in range(n)]


def queries_for(texts: list[str], n: int) -> list[str]:
    """``n`` queries, each a part of one stored text."""
    rng = random.Random(3)
    return [" ".join(t.split()[1:8]) for t in rng.sample(texts, n)]


class NoCache:
    """The raw ONNX embedder under another name, so that no vector stored by an earlier run is
    reused; with ``embeddings.cache_size: 0`` (no in-process LRU) every query pays for its embedding."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name, self.dimension = inner.name + "-nocache", inner.dimension

    def embed(self, texts: list[str]) -> Any:
        return self.inner.embed(texts)

    def embed_query(self, text: str) -> Any:
        return self.inner.embed_query(text)


def _total(stats: Any) -> int:
    """The memory count of ``stats()``: typed now, a dict in the trees before issue 25 (--compare)."""
    return int(stats["total_memories"] if isinstance(stats, dict) else stats.total_memories)


def build(path: Path, texts: list[str], embedder: Any, *, reuse: bool) -> float | None:
    """The store at ``path`` holding ``texts`` as conversation memories spread over 1,000 sessions, all
    indexed; seconds until the last ``store_batch`` returned, or None when ``reuse`` found it built."""
    import remindful

    size = len(texts)
    with remindful.open(path, embedder=embedder, **{"retention.max_items_per_collection": size * 2}) as memory:
        ingest_s = None
        if not (reuse and _total(memory.stats()) == size):
            started = time.perf_counter()
            for start in range(0, size, BUILD_BATCH):
                progress(f"building {size:,} memories: {start:,}")
                memory.store_batch(
                    [
                        {"content": t, "type": "conversation", "session_id": f"session_{(start + i) % 1000:04d}"}
                        for i, t in enumerate(texts[start : start + BUILD_BATCH])
                    ]
                )
            ingest_s = time.perf_counter() - started
        progress(f"{size:,} memories: indexing")
        memory.flush()  # every vector indexed before the searches: none of them races the indexer
        progress(None)
        return ingest_s


#: The scopes :func:`give_scopes` spreads the memories over, by rowid: 2 % in a small project, 5 %
#: the user's, the rest in four large projects (23 % each). A hook in a project searches its
#: project and the user's: 28 % of the store for a large one, 7 % for the small one (the index is
#: asked for more candidates for it: over a quarter of what it gives passes for a large one, 1 in 14
#: for the small one).
SCOPES_SQL = """
UPDATE memories SET scope = CASE
    WHEN rowid % 50 = 0 THEN 'project:small'
    WHEN rowid % 20 = 1 THEN 'user'
    ELSE 'project:large-' || (rowid % 4)
END
"""
LARGE_SCOPE = ("project:large-2", "user")
SMALL_SCOPE = ("project:small", "user")


def give_scopes(memory: Any) -> None:
    """Spread the memories of a built store over scopes (:data:`SCOPES_SQL`), once (a reused store
    keeps them). The vector index holds no scope: nothing else changes."""
    catalog = memory.engine.catalog
    if catalog.read("SELECT 1 FROM memories WHERE scope IS NULL LIMIT 1"):
        catalog.write(lambda conn: conn.execute(SCOPES_SQL), what="giving the memories scopes")


def open_for_search(path: Path, embedder: Any) -> Any:
    """A fresh open of a built store whose searches pay for their query embedding (no cache)."""
    import remindful

    return remindful.open(path, embedder=NoCache(embedder), **{"embeddings.cache_size": 0})


def bench_ingest(embedder: Any, root: Path, base: list[str]) -> dict[str, Any]:
    import remindful

    texts = corpus(base, 1000, seed=1)
    raw_s, _ = timed(embedder.embed, texts)
    raw_rate = len(texts) / raw_s
    with remindful.open(root / "ingest", embedder=NoCache(embedder)) as memory:
        memory.store("warm up the index")
        memory.flush()
        started = time.perf_counter()
        memory.store_batch([{"content": t} for t in corpus(base, 1000, seed=2)])
        acknowledged = time.perf_counter() - started
        memory.flush()  # until Chroma holds every vector: the whole cost of the batch
        indexed = time.perf_counter() - started
        batch50, batch50_indexed, single50, single50_indexed, *_ = batch_vs_single(memory, corpus(base, 100, seed=3))
    return {
        "raw_embed_per_s": round(raw_rate, 1),
        "store_batch_per_s": round(1000 / acknowledged, 1),
        "store_batch_indexed_per_s": round(1000 / indexed, 1),
        "ingest_ratio_vs_raw": round(1000 / acknowledged / raw_rate, 3),
        "ingest_indexed_ratio_vs_raw": round(1000 / indexed / raw_rate, 3),
        "batch50_s": round(batch50, 3),
        "single50_s": round(single50, 3),
        "batch50_speedup": round(single50 / batch50, 2),
        "batch50_indexed_speedup": round(single50_indexed / batch50_indexed, 2),
    }


def batch_vs_single(memory: Any, texts: list[str]) -> tuple[float, float, float, float, float, float]:
    """Seconds of one ``store_batch`` of the first half of ``texts`` and of single stores of the
    other half: until the calls return, and until Chroma holds every vector (``flush``); then the
    CPU seconds this process (every thread) spent on each half until indexed."""
    half = len(texts) // 2
    cpu, started = time.process_time(), time.perf_counter()
    memory.store_batch([{"content": t} for t in texts[:half]])
    batch = time.perf_counter() - started
    memory.flush()
    batch_indexed, batch_cpu = time.perf_counter() - started, time.process_time() - cpu
    cpu, started = time.process_time(), time.perf_counter()
    for t in texts[half:]:
        memory.store(t)
    single = time.perf_counter() - started
    memory.flush()
    return batch, batch_indexed, single, time.perf_counter() - started, batch_cpu, time.process_time() - cpu


def bench_batch(embedder: Any, root: Path, base: list[str], rounds: int, **options: Any) -> dict[str, Any]:
    """``--only batch``: a batch of 50 vs 50 single stores, ``rounds`` times on one store opened
    with ``options``; medians. Also, each round, the model alone on the batch's 50 texts (the floor
    of the batch's time until indexed: the singles embed the same texts while they store), and the
    CPU seconds the process spent on the batch and on the singles until indexed (on a busy machine
    the wall times tend to their ratio)."""
    import remindful

    runs, model = [], []
    with remindful.open(root / f"batch{len(options)}", embedder=NoCache(embedder), **options) as memory:
        memory.store("warm up the index")
        memory.flush()
        for i in range(rounds):
            progress(f"batch of 50 vs 50 singles: round {i + 1} of {rounds}")
            texts = corpus(base, 100, seed=10 + i)
            runs.append(batch_vs_single(memory, texts))
            model.append(timed(embedder.embed, [f"{t} (model)" for t in texts[:50]])[0])
    progress(None)
    batch, batch_indexed, single, single_indexed, cpu_batch, cpu_single = (
        percentile(list(column), 0.5) for column in zip(*runs, strict=True)
    )
    return {
        "model50_s": round(percentile(model, 0.5), 3),
        "batch50_cpu_s": round(cpu_batch, 3),
        "single50_cpu_s": round(cpu_single, 3),
        "rounds": rounds,
        "batch50_s": round(batch, 3),
        "batch50_indexed_s": round(batch_indexed, 3),
        "single50_s": round(single, 3),
        "single50_indexed_s": round(single_indexed, 3),
        "batch50_speedup": round(single / batch, 2),
        "batch50_indexed_speedup": round(single_indexed / batch_indexed, 2),
    }


def chroma_collection(path: Path, name: str) -> Any:
    """The store's Chroma collection through chromadb's own client, for the baseline: Chroma with
    nothing of remindful in between. The client settings are the store's, so that chromadb shares
    one system between the two clients of this process (it refuses a second one with other settings)."""
    import chromadb
    from chromadb.config import Settings

    client = chromadb.PersistentClient(
        str(path / "chroma"), settings=Settings(anonymized_telemetry=False, allow_reset=True)
    )
    return client.get_collection(name, embedding_function=None)


def bench_size(
    embedder: Any, root: Path, base: list[str], size: int, queries: int, *, reuse: bool = False
) -> dict[str, Any]:
    texts = corpus(base, size)
    path = root / f"s{size}"
    ingest_s = build(path, texts, embedder, reuse=reuse)
    open_s, memory = timed(open_for_search, path, embedder)  # a fresh process-like open: nothing cached but files
    first_search_ms = elapsed_ms(memory.search, "warm up")
    qs = queries_for(texts, queries)
    progress(f"{size:,} memories: searches")
    plain = [elapsed_ms(memory.search, q, limit=10) for q in qs]
    filtered = [elapsed_ms(memory.search, q, limit=10, session_id=f"session_{i % 1000:04d}") for i, q in enumerate(qs)]
    # Broad restrictions: one type (every memory here) and the newer half by time.
    half = memory.engine.catalog.read(
        "SELECT created_at FROM memories ORDER BY created_at LIMIT 1 OFFSET ?", [size // 2]
    )[0][0]
    typed, broad = [], []
    for q in qs:
        typed.append(elapsed_ms(memory.search, q, limit=10, types=["conversation"]))
        broad.append(elapsed_ms(memory.search, q, limit=10, since=half))
    # A hook's scope filter (its project and the user's), taking turns with unfiltered searches of
    # the same queries so that both see the same machine.
    give_scopes(memory)
    held = memory.engine.catalog.scope_counts()
    unscoped, large, small = [], [], []
    for q in qs:
        unscoped.append(elapsed_ms(memory.search, q, limit=10, scope="all"))
        large.append(elapsed_ms(memory.search, q, limit=10, scope=LARGE_SCOPE))
        small.append(elapsed_ms(memory.search, q, limit=10, scope=SMALL_SCOPE))
    collection = chroma_collection(path, "conversation_memories")

    def chroma_query(q: str, **options: Any) -> None:
        collection.query(query_embeddings=embedder.embed([q]).tolist(), n_results=10, **options)

    # After idleness, alternating with the baseline (embedding + plain Chroma) made the same way.
    progress(f"{size:,} memories: {IDLE_QUERIES} searches after {IDLE_S} s idle")
    idle, base_idle = [], []
    for q in qs[:IDLE_QUERIES]:
        time.sleep(IDLE_S)
        idle.append(elapsed_ms(memory.search, q, limit=10))
        time.sleep(IDLE_S)
        base_idle.append(elapsed_ms(chroma_query, q))
    gets = [elapsed_ms(memory.get, m.id) for m in memory.list(limit=200)]
    stats_ms = [elapsed_ms(memory.stats) for _ in range(20)]
    # Baseline: plain Chroma on the same collection, same query vectors (embedding included).
    base_plain, base_filtered = [], []
    for i, q in enumerate(qs):
        base_plain.append(elapsed_ms(chroma_query, q))
        base_filtered.append(elapsed_ms(chroma_query, q, where={"session_id": f"session_{i % 1000:04d}"}))
    memory.close()
    progress(None)
    return {
        "size": size,
        "ingest_per_s": round(size / ingest_s, 1) if ingest_s else None,
        "open_ms": round(open_s * 1000, 2),
        "first_search_ms": round(first_search_ms, 1),
        "search_p50_ms": pct(plain, 0.5),
        "search_p95_ms": pct(plain, 0.95),
        "session_search_p50_ms": pct(filtered, 0.5),
        "session_search_p95_ms": pct(filtered, 0.95),
        "type_search_p50_ms": pct(typed, 0.5),
        "half_search_p50_ms": pct(broad, 0.5),
        "scope_baseline_p50_ms": pct(unscoped, 0.5),
        "scope_large_p50_ms": pct(large, 0.5),
        "scope_small_p50_ms": pct(small, 0.5),
        "scope_large_share": round(sum(held.get(s, 0) for s in LARGE_SCOPE) / size, 3),
        "scope_small_share": round(sum(held.get(s, 0) for s in SMALL_SCOPE) / size, 3),
        "idle_search_p50_ms": pct(idle, 0.5),
        "chroma_idle_p50_ms": pct(base_idle, 0.5),
        "chroma_p50_ms": pct(base_plain, 0.5),
        "chroma_session_p50_ms": pct(base_filtered, 0.5),
        "get_p50_ms": pct(gets, 0.5),
        "stats_p50_ms": pct(stats_ms, 0.5),
    }


def bench(args: argparse.Namespace) -> dict[str, Any]:
    import remindful
    from remindful.embed import OnnxMiniLMEmbedder

    base = turns(args.data)
    embedder = OnnxMiniLMEmbedder()
    load_s, _ = timed(embedder.embed, ["load the model"])
    result: dict[str, Any] = {"model_load_ms": round(load_s * 1000, 1)}
    with scratch_dir() as root:
        if not args.search_only:
            started = time.perf_counter()
            with remindful.open(root / "init", embedder=embedder) as memory:
                memory.store("first memory")
                result["first_use_init_ms"] = round((time.perf_counter() - started) * 1000, 1)
            progress("ingest")
            result["ingest"] = bench_ingest(embedder, root, base)
        stores = args.store_dir or root
        result["sizes"] = [
            bench_size(embedder, stores, base, size, args.queries, reuse=args.store_dir is not None)
            for size in args.sizes
        ]
    result["machine"] = machine()
    return result


def batch_only(args: argparse.Namespace) -> dict[str, Any]:
    from remindful.embed import OnnxMiniLMEmbedder

    embedder = OnnxMiniLMEmbedder()
    embedder.embed(["load the model"])
    base = turns(args.data)
    with scratch_dir() as root:
        result = {
            "default": bench_batch(embedder, root, base, args.rounds),
            # the caller embeds (what the capture paths' store_batch(defer=False) does): no coalescing
            "defer_embedding_off": bench_batch(
                embedder, root, base, args.rounds, **{"performance.defer_embedding": False}
            ),
        }
    result["machine"] = machine()
    return result


def batch_lines(result: dict[str, Any]) -> list[str]:
    out = []
    for config in ("default", "defer_embedding_off"):
        out.append(f"{config}:")
        out.extend("  " + line for line in batch_pair_lines(result[config]))
    return out


def batch_pair_lines(result: dict[str, Any]) -> list[str]:
    return [
        versus("50 single stores", result["single50_s"] * 1000, "a batch of 50", result["batch50_s"] * 1000).replace(
            " = ", " = batch "
        )
        + " faster (acknowledged)",
        versus(
            "50 single stores", result["single50_indexed_s"] * 1000, "a batch of 50", result["batch50_indexed_s"] * 1000
        ).replace(" = ", " = batch ")
        + f" faster (until indexed); medians of {result['rounds']} rounds",
        versus(
            "a batch of 50 until indexed",
            result["batch50_indexed_s"] * 1000,
            "the model alone on its texts",
            result["model50_s"] * 1000,
        ),
        versus(
            "CPU of 50 single stores",
            result["single50_cpu_s"] * 1000,
            "of a batch of 50",
            result["batch50_cpu_s"] * 1000,
        )
        + " (until indexed, every thread)",
    ]


def lines(result: dict[str, Any]) -> list[str]:
    out = []
    if "ingest" in result:
        out.append(f"model load {result['model_load_ms']} ms; first-use init {result['first_use_init_ms']} ms")
        ing = result["ingest"]
        out.append(
            f"ingest: store_batch {ing['store_batch_per_s']}/s acknowledged, {ing['store_batch_indexed_per_s']}/s "
            f"indexed, vs raw embedder {ing['raw_embed_per_s']}/s = {ing['ingest_ratio_vs_raw']}x / "
            f"{ing['ingest_indexed_ratio_vs_raw']}x; batch of 50 {ing['batch50_speedup']}x faster than 50 singles "
            f"({ing['batch50_indexed_speedup']}x until indexed)"
        )
    for s in result["sizes"]:
        out.append(
            f"{s['size']:>7} memories: search p50 {s['search_p50_ms']} ms (p95 {s['search_p95_ms']}), "
            f"session-filtered p50 {s['session_search_p50_ms']} ms (p95 {s['session_search_p95_ms']}); "
            f"one type p50 {s['type_search_p50_ms']} ms; newer half p50 {s['half_search_p50_ms']} ms; "
            f"scope filter (a project + the user's, {s['scope_large_share']:.0%} / {s['scope_small_share']:.0%} of "
            f"the store) p50 {s['scope_large_p50_ms']} / {s['scope_small_p50_ms']} ms vs "
            f"{s['scope_baseline_p50_ms']} ms unfiltered, same queries in turn; "
            f"plain Chroma p50 {s['chroma_p50_ms']} / filtered {s['chroma_session_p50_ms']} ms; "
            f"after {IDLE_S} s idle: search p50 {s['idle_search_p50_ms']} ms vs Chroma {s['chroma_idle_p50_ms']} ms; "
            f"get {s['get_p50_ms']} ms; stats {s['stats_p50_ms']} ms; open {s['open_ms']} ms; "
            f"ingest {s['ingest_per_s']}/s"
        )
    return out


# -- --compare REV ---------------------------------------------------------------------------------


def git(*args: str) -> str:
    done = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"git {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout.strip()


def this_tree() -> str:
    """This working tree, as HEAD's short hash and whether src/ has changes not committed."""
    changed = git("status", "--porcelain", "--untracked-files=no", "--", "src")
    return f"working tree ({git('rev-parse', '--short', 'HEAD')}{' + changes' if changed else ''})"


class Worker:
    """A process measuring one tree: ``src`` first on its PYTHONPATH, this file as its program."""

    def __init__(self, label: str, src: Path, store: Path, size: int, data: Path, *, reuse: bool) -> None:
        self.label = label
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(src), os.environ.get("PYTHONPATH")]))}
        command = [sys.executable, __file__, "--worker-store", str(store), "--sizes", str(size), "--data", str(data)]
        self.proc = subprocess.Popen(
            [*command, *(["--reuse"] if reuse else [])],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        package = Path(self.receive()["package"]).resolve()
        if not package.is_relative_to(src.resolve()):
            self.close()
            raise SystemExit(f"{label}: the worker imported remindful from {package}, not from {src}")

    def receive(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"{self.label}: the worker stopped (exit status {self.proc.wait()}); its errors are above")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def searches(self, queries: list[str]) -> tuple[list[float], list[float]]:
        """Milliseconds of each query's search, run back to back after one untimed search, and the
        CPU milliseconds the worker process spent on each (every thread: the lexical queries too)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"queries": queries}) + "\n")
        self.proc.stdin.flush()
        answer = self.receive()
        return answer["ms"], answer["cpu_ms"]

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def worker(args: argparse.Namespace) -> int:
    """The measuring side of ``--compare``: build the store, then answer search requests on stdin."""
    protocol: IO[str] = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # anything else printed goes to stderr

    def send(message: dict[str, Any]) -> None:
        protocol.write(json.dumps(message) + "\n")
        protocol.flush()

    import remindful
    from remindful.embed import OnnxMiniLMEmbedder

    send({"package": remindful.__file__})
    embedder = OnnxMiniLMEmbedder()
    texts = corpus(turns(args.data), args.sizes[0])
    build(args.worker_store, texts, embedder, reuse=args.reuse)
    memory = open_for_search(args.worker_store, embedder)
    memory.search("warm up")
    send({"ready": True})
    for line in sys.stdin:
        request = json.loads(line)
        memory.search("warm up")  # the other tree ran meanwhile: its first search would count that
        timings = [search_timed(memory, q) for q in request["queries"]]
        send({"ms": [ms for ms, _ in timings], "cpu_ms": [cpu for _, cpu in timings]})
    memory.close()
    return 0


def search_timed(memory: Any, query: str) -> tuple[float, float]:
    """Milliseconds of one search, and the CPU milliseconds this process spent meanwhile."""
    cpu = time.process_time()
    ms = elapsed_ms(memory.search, query, limit=10)
    return ms, (time.process_time() - cpu) * 1000


def compare_size(sides: list[tuple[str, Path, Path]], args: argparse.Namespace, size: int) -> dict[str, Any]:
    """Search times of each side (this tree first) at ``size`` memories, in alternating rounds."""
    texts = corpus(turns(args.data), size)
    qs = queries_for(texts, args.queries)
    workers: list[Worker] = []
    try:
        for label, src, store in sides:  # one after the other: two builds at once would slow each other
            print(f"{label}: building or opening {size:,} memories", file=sys.stderr, flush=True)
            workers.append(Worker(label, src, store, size, args.data, reuse=args.store_dir is not None))
            workers[-1].receive()  # ready
        times: list[list[float]] = [[] for _ in workers]
        cpu: list[list[float]] = [[] for _ in workers]
        round_ratios = []
        share = max(1, len(qs) // args.rounds)
        for round_ in range(args.rounds):
            chunk = qs[round_ * share : (round_ + 1) * share] if round_ < args.rounds - 1 else qs[round_ * share :]
            if not chunk:
                continue
            progress(f"{size:,} memories: round {round_ + 1} of {args.rounds}")
            p50 = [0.0, 0.0]
            for side in (0, 1) if round_ % 2 == 0 else (1, 0):
                ms, cpu_ms = workers[side].searches(chunk)
                times[side] += ms
                cpu[side] += cpu_ms
                p50[side] = percentile(ms, 0.5)
            round_ratios.append(p50[0] / p50[1])
        progress(None)
    finally:
        for w in workers:
            w.close()
    tree, rev = (
        {"search_p50_ms": pct(t, 0.5), "search_p95_ms": pct(t, 0.95), "cpu_mean_ms": round(statistics.fmean(c), 3)}
        for t, c in zip(times, cpu, strict=True)
    )
    return {
        "size": size,
        "queries": len(qs),
        "rounds": len(round_ratios),
        "tree": tree,
        "rev": rev,
        "ratio_p50": round(percentile(times[0], 0.5) / percentile(times[1], 0.5), 3),
        "ratio_cpu": round(statistics.fmean(cpu[0]) / statistics.fmean(cpu[1]), 3),
        "round_ratio_min": round(min(round_ratios), 3),
        "round_ratio_max": round(max(round_ratios), 3),
    }


def resolve(rev: str) -> tuple[str, str]:
    """The commit ``rev`` names, and a label for it."""
    sha = git("rev-parse", "--verify", f"{rev}^{{commit}}")
    return sha, (sha[:9] if sha.startswith(rev) else f"{rev} ({sha[:9]})")


def compare(args: argparse.Namespace) -> dict[str, Any]:
    rev_sha, rev_label = resolve(args.compare)
    if args.tree is not None and resolve(args.tree)[0] == rev_sha:
        raise SystemExit(f"--tree and --compare name the same commit {rev_sha[:9]}")
    with scratch_dir("remindful-compare-") as tmp:
        stores = args.store_dir or tmp
        checked_out: list[Path] = []

        def side(rev: str | None, size: int) -> tuple[str, Path, Path]:
            if rev is None:  # the working tree as it is, uncommitted changes included
                return this_tree(), REPO / "src", stores / f"compare-worktree-s{size}"
            sha, label = resolve(rev)
            tree = tmp / sha
            if tree not in checked_out:
                git("worktree", "add", "--detach", "--quiet", str(tree), sha)
                checked_out.append(tree)
            return label, tree / "src", stores / f"compare-{sha[:12]}-s{size}"

        try:
            results = [
                compare_size([side(args.tree, size), side(args.compare, size)], args, size) for size in args.sizes
            ]
            tree_label = side(args.tree, args.sizes[0])[0]
        finally:
            for tree in checked_out:
                git("worktree", "remove", "--force", str(tree))
    return {"tree": tree_label, "rev": rev_label, "rev_sha": rev_sha, "sizes": results, "machine": machine()}


def compare_lines(result: dict[str, Any]) -> list[str]:
    out = []
    for s in result["sizes"]:
        tree, rev = s["tree"], s["rev"]
        out += [
            f"search p50 at {s['size']:,} memories, {s['queries']} queries in {s['rounds']} alternating rounds:",
            f"  {result['tree']:<40} p50 {tree['search_p50_ms']} ms  p95 {tree['search_p95_ms']} ms",
            f"  {result['rev']:<40} p50 {rev['search_p50_ms']} ms  p95 {rev['search_p95_ms']} ms",
            "  "
            + versus(result["tree"], tree["search_p50_ms"], result["rev"], rev["search_p50_ms"], ratio=s["ratio_p50"])
            + f" (per round {s['round_ratio_min']:.2f}-{s['round_ratio_max']:.2f}x)",
            "  CPU per search, every thread of the process: "
            + versus(result["tree"], tree["cpu_mean_ms"], result["rev"], rev["cpu_mean_ms"], ratio=s["ratio_cpu"]),
        ]
    return out


def main(argv: list[str] | None = None) -> int:
    args_parser = parser(__doc__)
    add_data_option(args_parser)
    args_parser.add_argument(
        "--sizes",
        "--size",
        type=lambda text: [int(s) for s in text.split(",")],
        default=[10_000],
        help="comma-separated store sizes (default 10000; e.g. 10000,100000)",
    )
    args_parser.add_argument("--queries", type=int, default=200, help="searches of each kind at each size")
    args_parser.add_argument(
        "--store-dir",
        type=Path,
        default=None,
        help="keep the sized stores here and reuse them on the next run (no ingest figure then)",
    )
    args_parser.add_argument("--search-only", action="store_true", help="skip init and ingest measurements")
    args_parser.add_argument(
        "--compare",
        metavar="REV",
        default=None,
        help="measure search p50 of this working tree against the commit REV instead (see above)",
    )
    args_parser.add_argument(
        "--tree",
        metavar="REV",
        default=None,
        help="with --compare: measure the commit REV instead of the working tree (which others may be editing)",
    )
    args_parser.add_argument(
        "--rounds", type=int, default=10, help="with --compare: the rounds the two trees take turns in"
    )
    args_parser.add_argument("--worker-store", type=Path, default=None, help=argparse.SUPPRESS)
    args_parser.add_argument("--reuse", action="store_true", help=argparse.SUPPRESS)
    args_parser.add_argument(
        "--only",
        choices=["batch"],
        default=None,
        help="batch: only a batch of 50 vs 50 single stores, --rounds times (medians)",
    )
    args = args_parser.parse_args(argv)
    if args.worker_store is not None:
        return worker(args)
    if args.only == "batch":
        emit(batch_only(args), args.json, batch_lines)
        return 0
    if args.compare is not None:
        emit(compare(args), args.json, compare_lines)
    else:
        emit(bench(args), args.json, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
