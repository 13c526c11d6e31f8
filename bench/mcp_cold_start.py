"""Cold start of `remindful serve`: process spawn → `initialize` → `tools/list` answered.

Speaks raw JSON-RPC over the pipes (no client library in the timing) and compares against the
interpreter's own start (`python -c pass`) measured in the same run. Each run uses a fresh storage
directory; the first start of a fresh HOME has no manifest yet (the SDK answers, ~the SDK import
time); later starts answer from the manifest the first one recorded.

    python bench/mcp_cold_start.py [--runs 10] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REQUESTS = [
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "bench", "version": "0"},
        },
    },
    {"jsonrpc": "2.0", "method": "notifications/initialized"},
    {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
]


def remindful_command() -> list[str]:
    script = Path(sys.executable).parent / "remindful"
    return [str(script), "serve"] if script.exists() else [sys.executable, "-m", "remindful.shells.cli", "serve"]


def time_serve(env: dict[str, str]) -> tuple[float, int]:
    """Seconds from spawn to the tools/list answer, and the number of tools listed."""
    started = time.perf_counter()
    proc = subprocess.Popen(
        remindful_command(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(b"".join(json.dumps(r).encode() + b"\n" for r in REQUESTS))
    proc.stdin.flush()
    tools = -1
    for line in proc.stdout:
        message = json.loads(line)
        if message.get("id") == 2:
            tools = len(message["result"]["tools"])
            break
    elapsed = time.perf_counter() - started
    proc.stdin.close()
    proc.wait(timeout=60)
    return elapsed, tools


def time_python() -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        env = {k: v for k, v in os.environ.items() if not k.startswith("REMINDFUL_")}
        env["HOME"] = str(Path(tmp) / "home")
        env.pop("XDG_CACHE_HOME", None)
        first, tools = time_serve({**env, "MEMORY_STORAGE_PATH": str(Path(tmp) / "first")})
        warm = [time_serve({**env, "MEMORY_STORAGE_PATH": str(Path(tmp) / f"s{i}")})[0] for i in range(args.runs)]
        python = [time_python() for _ in range(args.runs)]
    result = {
        "tools": tools,
        "first_start_s": round(first, 3),
        "serve_p50_s": round(statistics.median(warm), 3),
        "serve_max_s": round(max(warm), 3),
        "python_pass_p50_s": round(statistics.median(python), 3),
        "overhead_p50_s": round(statistics.median(warm) - statistics.median(python), 3),
        "budget_s": 0.5,
    }
    if args.json:
        print(json.dumps(result))
        return
    print(f"remindful serve: initialize + tools/list ({tools} tools), {args.runs} runs")
    print(f"  first start (no manifest yet, SDK answers) {result['first_start_s']:.3f} s")
    print(f"  later starts p50 {result['serve_p50_s']:.3f} s, max {result['serve_max_s']:.3f} s  (budget 0.5 s)")
    print(f"  baseline python -c pass p50 {result['python_pass_p50_s']:.3f} s")
    print(f"  overhead over the interpreter p50 {result['overhead_p50_s']:.3f} s")


if __name__ == "__main__":
    main()
