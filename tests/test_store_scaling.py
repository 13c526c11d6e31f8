"""The cost of one store does not grow with the store: counted in SQLite steps, not timed."""

from __future__ import annotations

from pathlib import Path

from remindful.api import MemoryManager
from remindful.testing import open_fake


def steps_of_one_store(memory: MemoryManager, session: str) -> int:
    """SQLite virtual-machine steps (in hundreds) of one ``store`` into ``session``."""
    conn = memory.engine.catalog.write(lambda c: c, what="reaching the connection")
    steps = 0

    def count() -> int:
        nonlocal steps
        steps += 1
        return 0

    conn.set_progress_handler(count, 100)
    try:
        memory.store("one more turn of a long conversation", session_id=session)
    finally:
        conn.set_progress_handler(None, 0)
    return steps


def test_a_store_into_a_long_session_costs_what_one_into_a_short_one(tmp_path: Path) -> None:
    # Numbering the new row within its session read every earlier row of the session (max(seq)),
    # so an agent's single stores slowed down as its session grew: 10 ms each at 5,000 rows.
    with open_fake(tmp_path / "s", **{"performance.async_indexing": False}) as memory:
        memory.store_batch([{"content": f"turn {i}", "session_id": "short"} for i in range(50)])
        memory.store_batch([{"content": f"turn {i}", "session_id": "long"} for i in range(5000)])
        short = min(steps_of_one_store(memory, "short") for _ in range(3))
        long = min(steps_of_one_store(memory, "long") for _ in range(3))
        # a 100 times longer session: a few more B-tree levels, not 100 times the work
        assert long <= 4 * short + 10, f"{long}00 steps into a 5,000-row session, {short}00 into a 50-row one"
