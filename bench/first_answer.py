"""The first answer of a fresh machine: with `remindful prepare` run at install, and without it.

A fresh machine has no prepared int8 model under its cache (`~/.cache/remindful/models`, made once
per installation, some seconds) and no MCP manifest. Each run takes a new HOME, cache and store and
times, from spawn:

- `remindful serve` (stdio): the answer to the first `memory_search`, sent with the handshake and a
  `memory_store` (the worst case, the model loads on the call's path), on a fresh machine as is
  (the baseline: the preparation on the call's path) and after `remindful prepare` (target ≤ 3 s);
- `remindful store "…"` from the command line, the same two ways;
- `remindful prepare` itself, what the install step costs.

    python bench/first_answer.py [--runs 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from mcp_cold_start import remindful_command, time_first_call

TARGET_S = 3.0


def run_command(env: dict[str, str], *args: str) -> float:
    """Seconds from spawn to the exit of ``remindful ARGS`` (which must succeed)."""
    started = time.perf_counter()
    subprocess.run([*remindful_command(), *args], env=env, check=True, capture_output=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    base = {k: v for k, v in os.environ.items() if not k.startswith("REMINDFUL_") and k != "PYTHONDONTWRITEBYTECODE"}
    base.pop("XDG_CACHE_HOME", None)
    samples: dict[str, list[float]] = {
        k: [] for k in ("serve_fresh", "serve_prepared", "store_fresh", "store_prepared", "prepare")
    }
    with tempfile.TemporaryDirectory() as tmp:
        counter = iter(range(1_000_000))

        def machine() -> dict[str, str]:
            n = next(counter)
            home = Path(tmp) / f"home{n}"
            return {**base, "HOME": str(home), "MEMORY_STORAGE_PATH": str(home / "store")}

        note = "Stored with the first command of a fresh machine"
        time_first_call(machine(), 0)  # untimed: bytecode written, as an installed package has it
        for _ in range(args.runs):  # interleaved, so that a busy moment weighs on every case alike
            samples["serve_fresh"].append(time_first_call(machine(), 0)[0])
            env = machine()
            samples["prepare"].append(run_command(env, "prepare"))
            samples["serve_prepared"].append(time_first_call(env, 0)[0])
            samples["store_fresh"].append(run_command(machine(), "store", note))
            env = machine()
            run_command(env, "prepare")
            samples["store_prepared"].append(run_command(env, "store", note))
    p50 = {name: round(statistics.median(values), 3) for name, values in samples.items()}
    result = {
        "runs": args.runs,
        **{f"{k}_p50_s": v for k, v in p50.items()},
        **{f"{k}_max_s": round(max(v), 3) for k, v in samples.items()},
        "target_s": TARGET_S,
        "load_average_1min": round(os.getloadavg()[0], 2),
    }
    if args.json:
        print(json.dumps(result))
        return
    print(f"The first answer of a fresh machine, p50 (max) of {args.runs} runs, load {result['load_average_1min']}")
    rows = (
        ("serve_fresh", "first memory_search, fresh machine (baseline)"),
        ("serve_prepared", f"first memory_search after `prepare` (target ≤ {TARGET_S:g} s)"),
        ("store_fresh", "first `remindful store`, fresh machine (baseline)"),
        ("store_prepared", "first `remindful store` after `prepare`"),
        ("prepare", "`remindful prepare` (the install step)"),
    )
    for key, label in rows:
        print(f"  {label:56s} {p50[key]:.2f} s ({result[f'{key}_max_s']:.2f} s)")
    met = p50["serve_prepared"] <= TARGET_S and p50["store_prepared"] <= TARGET_S
    print(f"  target ≤ {TARGET_S:g} s after `remindful prepare`: {'met' if met else 'NOT met'}")


if __name__ == "__main__":
    main()
