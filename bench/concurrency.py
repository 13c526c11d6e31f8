"""Several processes storing and searching one store: throughput, search latency and whether the
vector index stays on and complete.

For N = 1 (the baseline, same run), 2, 4 and 8 processes on one storage path, each process stores
``--stores`` memories one at a time and searches after every fifth. Printed per N: stores/s (all
processes together, over the wall time of the storing), search p50 (ms, over every process's
searches), index errors (warnings from the vector index in any process: must be 0) and the rows
still un-indexed 1 s after the last store was acknowledged (must be 0). The embedded Chroma index;
the real embedder unless ``--fake-embedder``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from common import emit, machine, parser, pct, progress, scratch_dir, versus

WORKER = r"""
import json, logging, sys, time
import remindful

path, me, n, fake = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
errors = []

class Catch(logging.Handler):
    def emit(self, record):
        if record.levelno >= logging.WARNING and "index" in record.getMessage().lower():
            errors.append(record.getMessage()[:200])

logging.getLogger("remindful").addHandler(Catch())
kwargs = {}
if fake:
    from remindful.embed.fake import FakeEmbedder
    kwargs["embedder"] = FakeEmbedder()
memory = remindful.open(path, **kwargs)
memory.search("warm up")  # load the model and open the index before the clock starts
print("ready", flush=True)
sys.stdin.readline()  # start together
searches = []
started = time.perf_counter()
for i in range(n):
    memory.store(f"process {me} stored note {i} about subject {i % 13} of the release plan", type="action")
    if i % 5 == 4:
        t = time.perf_counter()
        memory.search(f"subject {i % 13} release")
        searches.append((time.perf_counter() - t) * 1000)
print(json.dumps({"done": time.time(), "seconds": time.perf_counter() - started}), flush=True)
sys.stdin.readline()  # the parent has counted the un-indexed rows
memory.close()
print(json.dumps({"searches": searches, "errors": errors}), flush=True)
"""


def run(path: Path, processes: int, stores: int, fake: bool) -> dict[str, Any]:
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, str(path), str(me), str(stores), "1" if fake else "0"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for me in range(processes)
    ]
    for proc in procs:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    finished = [json.loads(proc.stdout.readline()) for proc in procs if proc.stdout is not None]
    wall = max(f["seconds"] for f in finished)
    time.sleep(max(0.0, max(f["done"] for f in finished) + 1.0 - time.time()))
    from remindful.testing import catalog_rows

    unindexed = catalog_rows(path, "SELECT count(*) FROM memories WHERE indexed = 0")[0][0]
    reports = []
    for proc in procs:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
        reports.append(json.loads(proc.stdout.readline()))
        proc.wait(timeout=120)
    searches = [ms for r in reports for ms in r["searches"]]
    return {
        "processes": processes,
        "stores_per_s": processes * stores / wall,
        "search_p50_ms": pct(searches, 0.5, 1),
        "index_errors": sum(len(r["errors"]) for r in reports),
        "unindexed_after_1s": unindexed,
        "examples": [e for r in reports for e in r["errors"]][:3],
    }


def main() -> None:
    cli = parser(__doc__)
    cli.add_argument("--stores", type=int, default=100, help="memories each process stores (default 100)")
    cli.add_argument("--processes", type=int, nargs="+", default=[2, 4, 8], help="the N to measure (default 2 4 8)")
    cli.add_argument("--fake-embedder", action="store_true", help="hash words instead of running the model")
    args = cli.parse_args()
    rows = []
    with scratch_dir() as scratch:
        for n in [1, *args.processes]:
            progress(f"{n} processes")
            rows.append(run(scratch / f"n{n}", n, args.stores, args.fake_embedder))
    progress(None)
    base = rows[0]
    result = {"stores_per_process": args.stores, "fake_embedder": args.fake_embedder, "runs": rows}
    result["machine"] = machine()

    def lines(res: dict[str, Any]) -> list[str]:
        out = [f"{args.stores} stores per process, searching after every fifth; baseline: 1 process"]
        for row in res["runs"]:
            n = row["processes"]
            out.append(
                f"N={n}: "
                + versus("stores", row["stores_per_s"], "N=1", base["stores_per_s"], unit="/s")
                + "; "
                + versus("search p50", row["search_p50_ms"], "N=1", base["search_p50_ms"])
                + f"; index errors {row['index_errors']}; unindexed after 1 s {row['unindexed_after_1s']}"
            )
            out += [f"    {e}" for e in row["examples"]]
        return out

    emit(result, args.json, lines)


if __name__ == "__main__":
    main()
