"""Every kind of process on one store at once (issue 15: "the same with `remindful daemon` + 2 x
`serve` + CLI + hooks" switched the vector index off): a daemon, two `remindful serve` driven by the
MCP SDK's own client, CLI stores and searches in a loop, and hook processes whose events the
daemon drains, all for :data:`RUN_S` seconds. Then every acknowledged memory must be in the
catalog, indexed, in the vector index and found by dense retrieval in a fresh process; no process
may log an index error or a traceback, and every one must exit 0 when stopped.

Real processes, the real embedded Chroma and the real MCP client; the fake embedder (as in
test_concurrency.py), because the defect is in how processes share the index files, and loading
the ONNX model in every CLI process on two cores would take the time the scenario needs.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp.client import stdio as sdk_stdio

from mcp_client import call
from remindful.testing import catalog_rows

pytestmark = pytest.mark.slow

SCRIPT = str(Path(sys.executable).with_name("remindful"))
#: Seconds every writer and searcher runs at once.
RUN_S = 25.0
#: Seconds the daemon gets to drain the spool and the indexers to finish once the writers stop.
SETTLE_S = 60.0
#: What no process may log: the index switched off or damaged, and any traceback.
INDEX_ERRORS = ("Vector index unavailable", "Vector index unusable", "unusable", "Error finding id", "Traceback")
#: The one line a UserPromptSubmit hook may log: its context came after its deadline, a speed
#: target (bench/hook_latency.py) that a loaded machine may miss; the event is spooled all the same.
LATE_CONTEXT = "no context for UserPromptSubmit: not ready within"
#: What else a process may say on stderr: that line, and the daemon's banner.
BENIGN = (LATE_CONTEXT, "(Ctrl-C to stop)")
WORDS = ("deploy", "cache", "schema", "parser", "widget", "ledger", "kernel", "bucket", "router", "quorum", "beacon")


@dataclass
class Ack:
    origin: str
    content: str
    at: float  # time.monotonic() when the store was acknowledged
    memory_id: str | None = None  # None: a hook event, stored when the daemon drains it


@dataclass
class Finished:
    name: str
    returncode: int | None
    stderr: str
    seconds: float = 0.0


@dataclass
class Run:
    """What the scenario did: the store, what each process acknowledged and said, and what each
    long-lived process failed to find by dense retrieval in time."""

    store: Path
    acks: list[Ack] = field(default_factory=list)
    finished: list[Finished] = field(default_factory=list)
    late: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # per searcher: misses
    ages: dict[str, list[float]] = field(default_factory=dict)  # per searcher: seconds from ack to check
    settled: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    def ack(self, origin: str, content: str, memory_id: str | None = None) -> None:
        with self.lock:
            self.acks.append(Ack(origin, content, time.monotonic(), memory_id))

    def acked(self) -> list[Ack]:
        with self.lock:
            return list(self.acks)

    def done(self, name: str, returncode: int | None, stderr: str, seconds: float = 0.0) -> None:
        with self.lock:
            self.finished.append(Finished(name, returncode, stderr, seconds))


def child_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REMINDFUL_") and k != "MEMORY_STORAGE_PATH"}
    env.update(HOME=str(home), REMINDFUL_EMBEDDINGS__BACKEND="fake", REMINDFUL_HOOKS__START_DAEMON="false")
    return env


def content_for(origin: str, n: int, rng: random.Random) -> str:
    """A text no other memory shares a bag of words with (the fake embedder hashes words)."""
    return f"{origin} note {n}: {' '.join(rng.sample(WORDS, 3))} marker {origin}x{n}q"


def spread(values: list[float]) -> str:
    ordered = sorted(values)
    return f"median {ordered[len(ordered) // 2]:.2f}, max {ordered[-1]:.2f}" if ordered else "none"


def dense_top(hits: list[dict[str, Any]], content: str) -> bool:
    return bool(hits) and hits[0]["content"] == content and "dense" in hits[0]["sources"]


def remindful(run: Run, name: str, env: dict[str, str], *args: str, stdin: str | None = None) -> tuple[int, str]:
    """Run one CLI process to its end and record how it ended; its exit code and output."""
    started = time.monotonic()
    done = subprocess.run(
        [SCRIPT, "--path", str(run.store), *args], input=stdin, capture_output=True, text=True, env=env, timeout=120
    )
    run.done(name, done.returncode, done.stderr, time.monotonic() - started)
    return done.returncode, done.stdout


# -- the writers and searchers -----------------------------------------------------------------------


def cli_stores(run: Run, env: dict[str, str], stop: threading.Event) -> None:
    rng, n = random.Random(1), 0
    while not stop.is_set():
        content = content_for("cli", n, rng)
        returncode, out = remindful(run, f"cli store {n}", env, "store", "--json", content)
        if returncode == 0:
            run.ack("cli", content, json.loads(out)["memory_id"])
        n += 1


def cli_searches(run: Run, env: dict[str, str], stop: threading.Event) -> None:
    """A fresh process each time: a memory acknowledged before it started must be found by dense retrieval."""
    rng, n = random.Random(2), 0
    misses, ages = run.late.setdefault("cli search", []), run.ages.setdefault("cli search", [])
    while not stop.is_set():
        candidates = [a for a in run.acked() if a.memory_id is not None]
        if not candidates:
            time.sleep(0.2)
            continue
        target = rng.choice(candidates[-20:])
        age = time.monotonic() - target.at
        query = ("search", "--json", "--min-score", "0", "--limit", "3", target.content)
        returncode, out = remindful(run, f"cli search {n}", env, *query)
        if returncode == 0:
            ages.append(age)
            hits = json.loads(out)["memories"]
            if not dense_top(hits, target.content):
                misses.append({"content": target.content, "age_s": round(age, 2), "hits": hits[:1]})
        n += 1


#: Events that are stored at once (a call's start waits in the spool for its outcome: drainer.HOLD_S).
HOOK_EVENTS = ("PostToolUseFailure", "PostToolUse", "UserPromptSubmit")


def hooks(run: Run, env: dict[str, str], stop: threading.Event) -> None:
    n = 0
    while not stop.is_set():
        event, marker = HOOK_EVENTS[n % 3], f"hook{n}k"
        payload: dict[str, Any] = {"session_id": "mix-hooks", "hook_event_name": event, "cwd": str(run.store)}
        if event == "UserPromptSubmit":
            payload["prompt"] = f"why does the {marker} step fail on {WORDS[n % len(WORDS)]}"
        else:
            payload.update(tool_name="Bash", tool_input={"command": f"echo {marker}"}, tool_use_id=f"toolu_{n:05d}")
            if event == "PostToolUse":
                payload["tool_response"] = {"stdout": f"{marker} done", "stderr": "", "interrupted": False}
            else:
                payload["error"] = f"{marker} failed"
        returncode, _out = remindful(run, f"hook {event} {n}", env, "hook", event, stdin=json.dumps(payload))
        if returncode == 0:
            run.ack("hook", marker)
        n += 1
        time.sleep(0.15)


def indexed(run: Run, memory_id: str) -> bool:
    """Whether the catalog marks ``memory_id`` indexed: its vector is in the shared index."""
    return catalog_rows(run.store, "SELECT indexed FROM memories WHERE id = ?", (memory_id,)) == [(1,)]


async def serve(run: Run, env: dict[str, str], name: str, stop_at: float, settled: anyio.Event) -> None:
    """One `remindful serve` driven by the SDK's client: stores (singly and in batches), and
    checks that what the other processes stored is found by dense retrieval in it once indexed.
    Its exit code is written by the shell wrapping it (the SDK does not give it)."""
    rng, n = random.Random(name), 0
    rc_file, err_file = run.store.parent / f"{name}.rc", run.store.parent / f"{name}.stderr"
    wrapped = ["-c", '"$@"; echo $? > "$0"', str(rc_file), SCRIPT, "--path", str(run.store), "serve"]
    checked: set[int] = set()
    misses, ages = run.late.setdefault(name, []), run.ages.setdefault(name, [])
    with err_file.open("w") as errlog:
        transport = sdk_stdio.stdio_client(StdioServerParameters(command="sh", args=wrapped, env=env), errlog=errlog)
        async with Client(transport, read_timeout_seconds=120) as client:
            while time.monotonic() < stop_at:
                if n % 3 == 2:
                    contents = [content_for(name, n + k, rng) for k in range(5)]
                    out = await call(client, "memory_store_batch", items=[{"content": c} for c in contents])
                    for content, memory_id in zip(contents, out["memory_ids"], strict=True):
                        run.ack(name, content, memory_id)
                    n += 5
                else:
                    content = content_for(name, n, rng)
                    out = await call(client, "memory_store", content=content)
                    run.ack(name, content, out["memory_id"])
                    n += 1
                now = time.monotonic()
                for i, ack in enumerate(run.acked()):
                    if i in checked or ack.memory_id is None or ack.origin == name or not indexed(run, ack.memory_id):
                        continue  # once its writer has put its vector in the index, every process finds it
                    checked.add(i)
                    ages.append(now - ack.at)
                    found = await call(client, "memory_search", query=ack.content, limit=3, min_score=0)
                    if not dense_top(found["memories"], ack.content):
                        misses.append({"content": ack.content, "age_s": round(now - ack.at, 2), "later": False})
                await anyio.sleep(0.3)
            await settled.wait()
            for miss in misses:  # found at last, once every process has stopped writing?
                found = await call(client, "memory_search", query=miss["content"], limit=3, min_score=0)
                miss["later"] = dense_top(found["memories"], miss["content"])
    rc = rc_file.read_text().strip() if rc_file.exists() else ""
    run.done(name, int(rc) if rc.lstrip("-").isdigit() else None, err_file.read_text())


async def settle(run: Run, threads: list[threading.Thread], stop_at: float, settled: anyio.Event) -> None:
    """Once the writers stop: wait for the daemon to drain the spool and for every row to be indexed."""
    await anyio.sleep(max(0.0, stop_at - time.monotonic()))
    for thread in threads:
        await anyio.to_thread.run_sync(thread.join)
    deadline = time.monotonic() + SETTLE_S
    while time.monotonic() < deadline:
        left = catalog_rows(
            run.store, "SELECT (SELECT count(*) FROM spool) + (SELECT count(*) FROM memories WHERE indexed = 0)"
        )
        if left == [(0,)]:
            run.settled = True
            break
        await anyio.sleep(0.2)
    settled.set()


@pytest.fixture(scope="module")
def mixed_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    root = tmp_path_factory.mktemp("mix")
    (root / "home").mkdir()
    env, run = child_env(root / "home"), Run(root / "store")
    daemon_err = (root / "daemon.stderr").open("w")
    stop = threading.Event()
    threads = [
        threading.Thread(target=loop, args=(run, env, stop), name=loop.__name__)
        for loop in (cli_stores, cli_searches, hooks)
    ]
    daemon = subprocess.Popen(
        [SCRIPT, "--path", str(run.store), "daemon"], env=env, stdout=subprocess.DEVNULL, stderr=daemon_err, text=True
    )
    try:
        deadline = time.monotonic() + 60
        while not (run.store / "daemon.json").exists():  # it holds the store's daemon role
            assert daemon.poll() is None, (root / "daemon.stderr").read_text()
            assert time.monotonic() < deadline, "the daemon never started"
            time.sleep(0.1)

        async def scenario() -> None:
            stop_at, settled = time.monotonic() + RUN_S, anyio.Event()
            for thread in threads:
                thread.start()
            async with anyio.create_task_group() as tg:
                tg.start_soon(serve, run, env, "mcpa", stop_at, settled)
                tg.start_soon(serve, run, env, "mcpb", stop_at, settled)
                await anyio.sleep(max(0.0, stop_at - time.monotonic()))
                stop.set()
                tg.start_soon(settle, run, threads, stop_at, settled)

        # The SDK kills a server that has not exited 2 s after its input closed; this test checks
        # the exit itself, on a loaded machine, so it waits longer (and fails if the code is not 0).
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(sdk_stdio, "PROCESS_TERMINATION_TIMEOUT", 60.0)
            anyio.run(scenario)
    finally:
        stop.set()
        for thread in threads:  # no CLI process outlives the scenario, however it ended
            if thread.is_alive():
                thread.join(150)
        if daemon.poll() is None:
            daemon.send_signal(signal.SIGTERM)
        try:
            returncode: int | None = daemon.wait(60)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait(10)
            returncode = None
        daemon_err.close()
    run.done("daemon", returncode, (root / "daemon.stderr").read_text())
    origins = [a.origin for a in run.acked()]
    print({o: origins.count(o) for o in sorted(set(origins))}, "acknowledged")
    for name, ages in run.ages.items():
        print(f"{name}: {len(ages)} checked, {len(run.late[name])} not found, seconds after the ack: {spread(ages)}")
    for kind in ("cli store", "cli search", *(f"hook {event}" for event in HOOK_EVENTS)):
        took = sorted(f.seconds for f in run.finished if f.name.startswith(kind))
        print(f"{kind}: {len(took)} processes, seconds each: {spread(took)}")
    return run


# -- what must hold ----------------------------------------------------------------------------------


def test_every_process_exits_0_and_none_logs_an_index_error_or_a_traceback(mixed_run: Run) -> None:
    run = mixed_run
    names = {f.name.split(" ")[0] for f in run.finished}
    assert {"daemon", "mcpa", "mcpb", "cli", "hook"} <= names, names
    assert [(f.name, f.returncode, f.stderr[-1500:]) for f in run.finished if f.returncode != 0] == []
    said = [(f.name, s) for f in run.finished for s in f.stderr.splitlines() if not any(b in s for b in BENIGN)]
    assert [(name, line) for name, line in said if any(e in line for e in INDEX_ERRORS)] == []
    assert said == []  # nor any other warning
    logs = run.store / "logs"
    logged = [line for p in sorted(logs.glob("*")) for line in p.read_text().splitlines()] if logs.exists() else []
    assert [line for line in logged if LATE_CONTEXT not in line] == []


def test_every_acknowledged_memory_is_in_the_catalog(mixed_run: Run) -> None:
    run = mixed_run
    acks = run.acked()
    by_id = {a.memory_id: a.content for a in acks if a.memory_id is not None}
    assert {a.origin for a in acks} == {"mcpa", "mcpb", "cli", "hook"}
    stored = dict(catalog_rows(run.store, "SELECT id, content FROM memories"))
    assert {i: stored.get(i) for i in by_id} == by_id
    hook_rows = [r[0] for r in catalog_rows(run.store, "SELECT content FROM memories WHERE source = 'hook'")]
    markers = [a.content for a in acks if a.memory_id is None]
    assert [m for m in markers if sum(m in c for c in hook_rows) != 1] == []  # each drained exactly once
    assert len(stored) == len(by_id) + len(markers)  # nothing more, nothing twice
    assert catalog_rows(run.store, "SELECT count(*) FROM spool") == [(0,)]
    assert not (run.store / "spool-rejected.jsonl").exists()


VECTOR_COUNTS = """
import json, sys, chromadb
client = chromadb.PersistentClient(sys.argv[1])
print(json.dumps({c.name: c.count() for c in client.list_collections()}))
"""

DENSE_IN_A_FRESH_PROCESS = """
import json, sys
import remindful
from remindful.testing import catalog_rows
missed = []
with remindful.open(sys.argv[1]) as memory:
    for (content,) in catalog_rows(sys.argv[1], "SELECT content FROM memories"):
        hits = memory.search(content, limit=3, min_score=0)
        if not hits or hits[0].content != content or "dense" not in hits[0].sources:
            missed.append([content, [(h.content, h.sources) for h in hits[:1]]])
print(json.dumps(missed))
"""


def test_after_the_drain_every_memory_is_indexed_and_found_by_dense_retrieval_in_a_fresh_process(
    mixed_run: Run,
) -> None:
    run = mixed_run
    assert run.settled, "the spool was not drained or rows were left unindexed"
    assert catalog_rows(run.store, "SELECT count(*) FROM memories WHERE indexed = 0") == [(0,)]
    indexed = dict(catalog_rows(run.store, "SELECT type || '_memories', count(*) FROM memories GROUP BY type"))
    counted = subprocess.run(
        [sys.executable, "-c", VECTOR_COUNTS, str(run.store / "chroma")], capture_output=True, text=True, timeout=120
    )
    assert counted.returncode == 0, counted.stderr
    assert {k: v for k, v in json.loads(counted.stdout).items() if v} == indexed
    env = child_env(run.store.parent / "home")
    fresh = subprocess.run(
        [sys.executable, "-c", DENSE_IN_A_FRESH_PROCESS, str(run.store)],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
    )
    assert (fresh.returncode, fresh.stderr) == (0, "")
    assert json.loads(fresh.stdout) == []


@pytest.mark.parametrize("searcher", ["mcpa", "mcpb", "cli search"])
def test_each_process_finds_what_the_others_stored_by_dense_retrieval_once_indexed(
    mixed_run: Run, searcher: str
) -> None:
    assert mixed_run.ages[searcher], f"{searcher} checked nothing"
    assert mixed_run.late[searcher] == []
