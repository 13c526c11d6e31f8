"""Writers and searchers in processes of their own on one store, as users run them (several ``serve``,
CLI and library processes): does search hold while others write, and does every process end well?

A store is seeded with ``--seed`` memories of the writers' type, whose quota (``--quota``, default
the seed plus 1,000) the writers soon reach: quota eviction runs through most of the load. Then, in
the same run:

1. the baseline: one searcher process alone on the seeded store, for ``--baseline-seconds``;
2. the load: ``--writers`` processes storing one memory at a time and ``--searchers`` processes
   searching one query at a time, as fast as each can, for ``--seconds``.

Every process opens the store and loads the model before the start (as ``serve`` does while it
waits for its first call); the vector index opens at its first use, after the start. Printed: the
writes (all writers together) and the slowest store; writes lost (acknowledged, but neither in
the catalog nor evicted by the quota); search p50, p99 and max under load, against the baseline's;
each searcher's first answer (seconds after the start); errors (a call that raised, a traceback
or a log record of warning level or above in any process) and crashes (a process that died of a
signal or exited non-zero). The targets: 0 lost, 0 errors, 0 crashes, search p99 at most 10 times
the baseline's, every first answer within 2 s. The real embedder unless ``--fake-embedder``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from common import emit, figure, machine, parser, pct, progress, scratch_dir, versus

WORKER = r"""
import json, logging, random, sys, time
import remindful

path, role, me, seconds, fake, quota = sys.argv[1:7]
me, seconds, quota = int(me), float(seconds), int(quota)
WORDS = (
    "deploy release branch merge test build cache index query latency memory store search writer reader "
    "lock file process thread python schema migration backup restore token session hook agent prompt "
    "config quota eviction vector graph model embed batch commit rollback server client socket port"
).split()
logged = []


class Catch(logging.Handler):
    def emit(self, record):
        if record.levelno >= logging.WARNING:
            logged.append(f"{record.levelname}: {record.getMessage()[:300]}")


logging.getLogger("remindful").addHandler(Catch())
options = {"retention.max_items_per_collection": quota}
if fake == "1":
    from remindful.embed.fake import FakeEmbedder

    options["embedder"] = FakeEmbedder()
memory = remindful.open(path, **options)
rng = random.Random(me)


def text(i):
    return f"{role} {me} note {i}: " + " ".join(rng.choices(WORDS, k=12))


if role == "seed":
    n = int(seconds)
    for start in range(0, n, 500):
        memory.store_batch([{"content": text(i), "type": "action"} for i in range(start, min(n, start + 500))])
    memory.flush()
    memory.close()
    print(json.dumps({"logged": logged}), flush=True)
    sys.exit(0)

memory.load_model()
print("ready", flush=True)
sys.stdin.readline()  # start together
started = time.perf_counter()
calls, errors, acknowledged = [], [], []
i = 0
while (now := time.perf_counter()) < started + seconds:
    cpu = time.process_time()
    try:
        if role == "writer":
            acknowledged.append(memory.store(text(i), type="action"))
        else:
            memory.search(" ".join(rng.choices(WORDS, k=4)), limit=10)
    except Exception as exc:
        errors.append(f"{type(exc).__name__}: {exc}"[:300])
    took, cpu = time.perf_counter() - now, time.process_time() - cpu
    calls.append((round((now - started) * 1000, 1), round(took * 1000, 3), round(cpu * 1000, 3)))  # ms
    i += 1
print(json.dumps({"calls": calls, "errors": errors, "ids": acknowledged}), flush=True)
memory.close()
print(json.dumps({"logged": logged}), flush=True)
"""


class Worker:
    """One process of the run; its stderr goes to a file (read for tracebacks when it ends)."""

    def __init__(self, path: Path, role: str, me: int, seconds: float, fake: bool, quota: int) -> None:
        self.role, self.me = role, me
        self.stderr_path = path.parent / f"{path.name}-{role}{me}.stderr"
        command = [sys.executable, "-X", "faulthandler", "-c", WORKER, str(path), role, str(me), str(seconds)]
        with self.stderr_path.open("w") as err:
            self.proc = subprocess.Popen(
                [*command, "1" if fake else "0", str(quota)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
            )
        self.report: dict[str, Any] = {"calls": [], "errors": [], "ids": [], "logged": []}

    def line(self) -> str:
        assert self.proc.stdout is not None
        return self.proc.stdout.readline()

    def go(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    def finish(self, timeout: float) -> dict[str, Any]:
        """Read the reports and wait for the exit; ``problems`` lists the tracebacks, a death by a
        signal or a non-zero exit, and ``crashed`` says whether it did not end well."""
        for _ in range(2):
            line = self.line()
            if line.strip().startswith("{"):
                self.report.update(json.loads(line))
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        stderr = self.stderr_path.read_text(errors="replace")
        self.report["exit"] = code
        self.report["crashed"] = code != 0
        tracebacks = stderr.count("Traceback (most recent call last)")
        self.report["tracebacks"] = tracebacks
        self.report["stderr_tail"] = stderr.strip().splitlines()[-3:] if (tracebacks or code) else []
        return self.report


def seed(path: Path, n: int, fake: bool, quota: int) -> None:
    worker = Worker(path, "seed", 0, n, fake, quota)
    report = worker.finish(timeout=1800)
    if report["crashed"] or report["logged"]:
        raise SystemExit(f"seeding failed: {report['stderr_tail'] or report['logged']}")


def run(path: Path, writers: int, searchers: int, seconds: float, fake: bool, quota: int) -> dict[str, Any]:
    """Start the processes, let them run ``seconds`` after they all got ready, and gather their reports."""
    workers = [Worker(path, "writer", me, seconds, fake, quota) for me in range(writers)]
    workers += [Worker(path, "searcher", me, seconds, fake, quota) for me in range(searchers)]
    for worker in workers:
        got = worker.line().strip()
        if got != "ready":
            worker.finish(timeout=60)
            raise SystemExit(f"{worker.role} {worker.me} did not start: {worker.report['stderr_tail']}")
    for worker in workers:
        worker.go()
    reports = [(w.role, w.finish(timeout=seconds + 300)) for w in workers]
    return summarise(path, reports)


def summarise(path: Path, reports: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    from remindful.testing import catalog_rows

    writes = [r for role, r in reports if role == "writer"]
    searches = [r for role, r in reports if role == "searcher"]
    acknowledged = {mid for r in writes for mid in r["ids"]}
    present = {row[0] for row in catalog_rows(path, "SELECT id FROM memories")}
    evicted = {r[0] for r in catalog_rows(path, "SELECT memory_id FROM audit_log WHERE action = 'quota_evict'")}
    search_ms = [ms for r in searches for _at, ms, _cpu in r["calls"]]
    search_cpu_ms = [cpu for r in searches for _at, _ms, cpu in r["calls"]]
    store_ms = [ms for r in writes for _at, ms, _cpu in r["calls"]]
    errors = [e for _role, r in reports for e in r["errors"] + r["logged"]]
    errors += [line for _role, r in reports for line in r["stderr_tail"]]
    return {
        "writes": len(acknowledged),
        "lost": len(acknowledged - present - evicted),
        "evicted": len(evicted),
        "store_p50_ms": pct(store_ms, 0.5, 1) if store_ms else None,
        "store_max_ms": max(store_ms, default=None),
        "searches": len(search_ms),
        "search_p50_ms": pct(search_ms, 0.5, 1) if search_ms else None,
        "search_p99_ms": pct(search_ms, 0.99, 1) if search_ms else None,
        "search_max_ms": max(search_ms, default=None),
        # CPU time the searching process spent (every thread of it) during each search: what the
        # search cost, against what it took (the rest is waiting: for a core, a lock, the disk).
        "search_cpu_p50_ms": pct(search_cpu_ms, 0.5, 1) if search_cpu_ms else None,
        "search_cpu_p99_ms": pct(search_cpu_ms, 0.99, 1) if search_cpu_ms else None,
        # The first answer: when the first search returned, in seconds after the start (calls are
        # (started, took, cpu) in ms).
        "first_answers_s": [round(sum(r["calls"][0][:2]) / 1000, 2) if r["calls"] else None for r in searches],
        "errors": sum(len(r["errors"]) + len(r["logged"]) + r["tracebacks"] for _role, r in reports),
        "crashes": sum(1 for _role, r in reports if r["crashed"]),
        "examples": list(dict.fromkeys(errors))[:8],
        "exits": [r["exit"] for _role, r in reports],
    }


def main() -> None:
    cli = parser(__doc__)
    cli.add_argument("--writers", type=int, default=8, help="writing processes (default 8)")
    cli.add_argument("--searchers", type=int, default=4, help="searching processes (default 4)")
    cli.add_argument("--seconds", type=float, default=60.0, help="length of the load (default 60)")
    cli.add_argument("--baseline-seconds", type=float, default=15.0, help="length of the baseline (default 15)")
    cli.add_argument("--seed", type=int, default=3000, help="memories stored before the start (default 3000)")
    cli.add_argument("--quota", type=int, default=None, help="the writers' type's item quota (default: seed + 1000)")
    cli.add_argument("--fake-embedder", action="store_true", help="hash words instead of running the model")
    cli.add_argument("--keep", type=Path, default=None, help="copy every process's stderr into this folder")
    args = cli.parse_args()
    quota = args.quota if args.quota is not None else args.seed + 1000
    with scratch_dir() as scratch:
        progress(f"seeding {args.seed} memories")
        seed(scratch / "base", args.seed, args.fake_embedder, quota)
        progress("the baseline: one searcher alone")
        base = run(scratch / "base", 0, 1, args.baseline_seconds, args.fake_embedder, quota)
        progress(f"{args.writers} writers and {args.searchers} searchers")
        load = run(scratch / "base", args.writers, args.searchers, args.seconds, args.fake_embedder, quota)
        if args.keep is not None:
            args.keep.mkdir(parents=True, exist_ok=True)
            for stderr in scratch.glob("*.stderr"):
                shutil.copy(stderr, args.keep / stderr.name)
    progress(None)
    result: dict[str, Any] = {
        "writers": args.writers,
        "searchers": args.searchers,
        "seconds": args.seconds,
        "seed": args.seed,
        "quota": quota,
        "fake_embedder": args.fake_embedder,
        "baseline": base,
        "load": load,
    }
    firsts = [f for f in load["first_answers_s"] if f is not None]
    result["targets_met"] = bool(
        load["lost"] == 0
        and load["errors"] == 0
        and load["crashes"] == 0
        and load["search_p99_ms"] is not None
        and load["search_p99_ms"] <= 10 * base["search_p99_ms"]
        and len(firsts) == args.searchers
        and max(firsts) <= 2.0
    )
    result["machine"] = machine()

    def lines(res: dict[str, Any]) -> list[str]:
        b, lo = res["baseline"], res["load"]
        out = [
            f"{res['writers']} writers + {res['searchers']} searchers for {res['seconds']:.0f} s on a store seeded "
            f"with {res['seed']} memories (quota {res['quota']}); baseline: 1 searcher alone, same run",
            f"writes {lo['writes']} ({lo['writes'] / res['seconds']:.0f}/s), lost {lo['lost']}, "
            f"evicted {lo['evicted']}; store p50 {lo['store_p50_ms']} ms, max {figure(lo['store_max_ms'] or 0)} ms",
            f"searches {lo['searches']} (baseline {b['searches']}): "
            + versus("p50", lo["search_p50_ms"], "alone", b["search_p50_ms"])
            + "; "
            + versus("p99", lo["search_p99_ms"], "alone", b["search_p99_ms"])
            + f"; max {figure(lo['search_max_ms'] or 0)} ms (alone {figure(b['search_max_ms'] or 0)} ms)",
            f"CPU of the searching process per search: p50 {lo['search_cpu_p50_ms']} ms, "
            f"p99 {lo['search_cpu_p99_ms']} ms (alone {b['search_cpu_p50_ms']} / {b['search_cpu_p99_ms']} ms)",
            f"first answers (s after the start): {lo['first_answers_s']} (alone {b['first_answers_s']})",
            f"errors {lo['errors'] + b['errors']}, crashes {lo['crashes'] + b['crashes']} (exit codes {lo['exits']})",
        ]
        out += [f"    {e}" for e in (b["examples"] + lo["examples"])[:8]]
        out.append(
            "targets (0 lost, 0 errors, 0 crashes, p99 <= 10x alone, first answers <= 2 s): "
            + ("met" if res["targets_met"] else "NOT met")
        )
        return out

    emit(result, args.json, lines)


if __name__ == "__main__":
    main()
