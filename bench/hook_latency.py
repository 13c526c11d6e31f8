"""Wall time of ``remindful hook PreToolUse`` processes against ``python -c pass``.

    python bench/hook_latency.py [--runs 50] [--json]

Each run is a fresh process fed a distinct PreToolUse payload on stdin (as Claude Code does),
writing to a temporary store that already exists. Prints p50/p95 for both and the hook's
overhead over the bare interpreter. Target (issue 4): hook p50 <= 80 ms.

The package is byte-compiled first (as ``pip install`` does): with PYTHONDONTWRITEBYTECODE set
and no ``.pyc`` files, every hook process would recompile remindful's sources (~50 ms).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CPU: list[float] = []


def _time(cmd: list[str], stdin: bytes, env: dict[str, str]) -> float:
    """Wall ms of one process; its CPU ms (user + sys) is appended to CPU."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(cmd, input=stdin, env=env, capture_output=True, check=False)
    elapsed = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU.append((after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000)
    if done.returncode != 0:
        raise SystemExit(f"{cmd} failed ({done.returncode}): {done.stderr.decode()}")
    return elapsed * 1000


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    script = shutil.which("remindful") or str(Path(sys.executable).with_name("remindful"))
    import remindful

    subprocess.run([sys.executable, "-m", "compileall", "-q", str(Path(remindful.__file__).parent)], check=False)
    with tempfile.TemporaryDirectory() as tmp:
        env = {k: v for k, v in os.environ.items() if not k.startswith("REMINDFUL_") and k != "MEMORY_STORAGE_PATH"}
        env["HOME"] = tmp
        store = str(Path(tmp) / "store")
        payload = {
            "session_id": "bench",
            "transcript_path": str(Path(tmp) / "t.jsonl"),
            "cwd": tmp,
            "hook_event_name": "PreToolUse",
            "tool_name": "Bash",
            "tool_input": {"command": "pytest -q", "description": "Run the test suite"},
        }
        hook = [script, "--path", store, "hook", "PreToolUse"]
        _time(hook, json.dumps({**payload, "tool_use_id": "warm"}).encode(), env)  # creates the store
        bare, hooked, bare_cpu, hook_cpu = [], [], [], []
        for i in range(args.runs):
            bare.append(_time([sys.executable, "-c", "pass"], b"", env))
            bare_cpu.append(CPU[-1])
            body = json.dumps({**payload, "tool_use_id": f"toolu_{i}", "tool_input": {"command": f"step {i}"}})
            hooked.append(_time(hook, body.encode(), env))
            hook_cpu.append(CPU[-1])
        load = os.getloadavg()[0]
    result = {
        "runs": args.runs,
        "python_pass_ms": {"p50": _pct(bare, 0.5), "p95": _pct(bare, 0.95)},
        "hook_ms": {"p50": _pct(hooked, 0.5), "p95": _pct(hooked, 0.95)},
        "overhead_p50_ms": round(statistics.median(hooked) - statistics.median(bare), 1),
        "cpu_ms_p50": {"python_pass": _pct(bare_cpu, 0.5), "hook": _pct(hook_cpu, 0.5)},
        "load_average_1min": round(load, 2),
        "cpus": os.cpu_count(),
        "target_p50_ms": 80,
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        bare_ms = result["python_pass_ms"]
        print(f"python -c pass   p50 {bare_ms['p50']:6.1f} ms  p95 {bare_ms['p95']:6.1f} ms")
        print(f"remindful hook   p50 {result['hook_ms']['p50']:6.1f} ms  p95 {result['hook_ms']['p95']:6.1f} ms")
        cpu = result["cpu_ms_p50"]
        print(f"CPU (user+sys) p50: python -c pass {cpu['python_pass']} ms, hook {cpu['hook']} ms")
        print(f"overhead p50 {result['overhead_p50_ms']} ms; target hook p50 <= 80 ms")
        print(f"machine load average {result['load_average_1min']} on {result['cpus']} CPUs")


if __name__ == "__main__":
    main()
