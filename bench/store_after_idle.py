"""A store after a pause, in a store holding many attachment copies, against back-to-back stores.

    python bench/store_after_idle.py [--attachments 10000] [--stores 30] [--json]

Near the size quota a store warns; the storage size it compares is measured by walking the storage
directory (a stat per file), at most every ``SIZE_MAX_AGE_S`` seconds. The first store after a pause
must not wait for that walk: the walk runs in a thread of its own. The pause is simulated by marking
the measured size stale. The fake embedder and the in-memory index keep the figures about storage.

Printed: a store after a pause against back-to-back stores (target: a ratio near 1), and the walk
itself (``size_mb`` measured afresh), which is what a store after a pause would cost if it waited.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from common import elapsed_ms, emit, fake_store, machine, parser, pct, percentile, scratch_dir, versus


def bench(attachments: int, stores: int) -> dict[str, Any]:
    with scratch_dir() as tmp:
        root = tmp / "store"
        with fake_store(root) as memory:
            memory.store("warm up")
            for i in range(attachments):  # as attachments.copy_attachments leaves them
                folder = root / "attachments" / f"action_{i:08x}"
                folder.mkdir(parents=True)
                (folder / "screenshot.png").write_bytes(b"\x89PNG" * 25)
            after_pause, back_to_back, walks = [], [], []
            for i in range(stores):
                memory.engine.quotas.forget_size()  # as a pause longer than SIZE_MAX_AGE_S does
                after_pause.append(elapsed_ms(memory.store, f"after a pause {i}"))
                back_to_back.append(elapsed_ms(memory.store, f"right after {i}"))
                time.sleep(0.05)  # lets a measuring thread finish, as a real pause would
            for _ in range(min(stores, 5)):
                walks.append(elapsed_ms(memory.engine.size_mb, max_age_s=0))
    return {
        "attachments": attachments,
        "stores": stores,
        "after_pause_p50_ms": pct(after_pause, 0.5, 2),
        "back_to_back_p50_ms": pct(back_to_back, 0.5, 2),
        "ratio": round(percentile(after_pause, 0.5) / percentile(back_to_back, 0.5), 2),
        "size_walk_p50_ms": pct(walks, 0.5, 1),
        "machine": machine(),
    }


def lines(result: dict[str, Any]) -> list[str]:
    return [
        f"{result['attachments']} attachment copies, {result['stores']} stores of each kind:",
        "  "
        + versus(
            "store after a pause p50",
            result["after_pause_p50_ms"],
            "back to back p50",
            result["back_to_back_p50_ms"],
            ratio=result["ratio"],
        ),
        f"  the size walk it does not wait for: p50 {result['size_walk_p50_ms']} ms",
    ]


def main(argv: list[str] | None = None) -> int:
    args_parser = parser(__doc__)
    args_parser.add_argument("--attachments", type=int, default=10_000)
    args_parser.add_argument("--stores", type=int, default=30)
    args = args_parser.parse_args(argv)
    emit(bench(args.attachments, args.stores), args.json, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
