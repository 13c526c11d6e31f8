"""A store after a pause, in a store holding many attachment copies, against back-to-back stores.

    python bench/store_after_idle.py [--attachments 10000] [--stores 30] [--json]

Near the size quota a store warns; the storage size it compares is measured by walking the storage
directory (a stat per file), at most every ``SIZE_MAX_AGE_S`` seconds. That walk used to run on the
first store after each pause: 0.4-0.5 s with 10,000 attachment copies. It now runs in a thread of
its own. The pause is simulated by marking the measured size stale. The fake embedder and the
in-memory index keep the figures about storage. Target: a store after a pause costs about what a
back-to-back store does (ratio near 1).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import remindful
from remindful.embed import FakeEmbedder
from remindful.index import InMemoryIndex


def bench(attachments: int, stores: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "store"
        with remindful.open(root, embedder=FakeEmbedder(), index=InMemoryIndex()) as memory:
            memory.store("warm up")
            for i in range(attachments):  # as attachments.copy_attachments leaves them
                folder = root / "attachments" / f"action_{i:08x}"
                folder.mkdir(parents=True)
                (folder / "screenshot.png").write_bytes(b"\x89PNG" * 25)
            after_pause, back_to_back = [], []
            for i in range(stores):
                memory.engine._size_at = 0.0  # the measured size is stale, as after a pause
                started = time.perf_counter()
                memory.store(f"after a pause {i}")
                after_pause.append((time.perf_counter() - started) * 1000)
                started = time.perf_counter()
                memory.store(f"right after {i}")
                back_to_back.append((time.perf_counter() - started) * 1000)
                time.sleep(0.05)  # lets a measuring thread finish, as a real pause would
    p50_pause, p50_b2b = statistics.median(after_pause), statistics.median(back_to_back)
    return {
        "attachments": attachments,
        "stores": stores,
        "after_pause_p50_ms": round(p50_pause, 2),
        "back_to_back_p50_ms": round(p50_b2b, 2),
        "ratio": round(p50_pause / p50_b2b, 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--attachments", type=int, default=10_000)
    parser.add_argument("--stores", type=int, default=30)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = bench(args.attachments, args.stores)
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"{result['attachments']} attachment copies: store after a pause p50 {result['after_pause_p50_ms']} ms, "
            f"back to back {result['back_to_back_p50_ms']} ms ({result['ratio']}x)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
