"""The dashboard's pages at 100k memories: each page's response time against the API call it wraps.

Builds (or reuses, with ``--store-dir``) a store of ``--size`` memories with the fake embedder and
the in-memory index: the pages read the catalog, and a page's cost over its API call is the
dashboard's own (routing, the gate, rendering). Sessions of 200 memories over 30 days: actions with
an outcome, screens, conversations, knowledge and documents. Each page is requested in-process
(Starlette's TestClient, no sockets) in rounds that alternate with its API call; the p50 of both is
printed with their ratio. The target is 300 ms per page.

    python bench/dashboard.py [--size 100000] [--rounds 7] [--store-dir DIR] [--json]
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common import elapsed_ms, emit, fake_store, figure, machine, parser, pct, progress, scratch_dir, versus

TARGET_MS = 300.0
SESSION_SIZE = 200
TOKEN = "bench-token"


def _settings(size: int) -> dict[str, Any]:
    return {"retention.max_items_per_collection": size * 2, "storage.max_size_mb": 1_000_000}


def build(path: Path, size: int) -> float | None:
    """Fill the store at ``path`` with ``size`` memories (seconds taken), or None if it holds them."""
    with fake_store(path, **_settings(size)) as memory:
        if memory.stats().total_memories >= size:
            return None
        started = time.perf_counter()
        rng = random.Random(7)
        now = time.time()
        verbs = ["click", "type", "navigate", "scroll", "submit", "open"]
        screens = ["Login page", "Dashboard", "Settings", "Inbox", "Editor"]
        batch: list[dict[str, Any]] = []
        for i in range(size):
            kind = ["action", "action", "screen", "conversation", "knowledge", "document"][i % 6]
            meta: dict[str, Any] = {}
            if kind == "action":
                verb = rng.choice(verbs)
                meta = {"action": verb, "success": rng.random() > 0.2}
                content = f"{verb} the button number {i % 97} on {rng.choice(screens)}"
            elif kind == "screen":
                screen = rng.choice(screens)
                meta = {"screen_name": screen}
                content = f"Screen {screen} shows {i % 50} items"
            else:
                content = f"Memory {i}: the deploy script for project {i % 300} needs profile p{i % 7}"
            item = {
                "content": content,
                "type": kind,
                "metadata": meta,
                "session_id": f"session_bench_{i // SESSION_SIZE}",
            }
            batch.append(item | {"timestamp": now - (size - i) * (30 * 86400 / size)})
            if len(batch) == 2000:
                memory.store_batch(batch, defer=False)
                batch = []
                progress(f"building {i + 1:,} of {size:,}")
        if batch:
            memory.store_batch(batch, defer=False)
        memory.flush()
        progress(None)
        return time.perf_counter() - started


def measure(path: Path, size: int, rounds: int) -> dict[str, Any]:
    from starlette.testclient import TestClient

    from remindful.web import build_app
    from remindful.web.app import PATTERN_MEMORIES
    from remindful.web.provenance import setting_rows

    with fake_store(path, **_settings(size)) as memory:
        client = TestClient(
            build_app(memory, TOKEN, hosts=["testserver"]), headers={"Authorization": f"Bearer {TOKEN}"}
        )
        newest = memory.list(limit=1)[0]
        session = newest.session_id
        middle = time.strftime("%Y-%m-%d", time.gmtime(time.time() - 15 * 86400))
        memory.search("deploy script")  # the in-memory index loads the vectors on the first search
        pages: list[tuple[str, str, str, Callable[[], Any]]] = [
            ("overview", "/", "stats()", memory.stats),
            ("memories, first page", "/memories", "list(limit=51)", lambda: memory.list(limit=51)),
            (
                "memories, page 1,000",
                "/memories?page=1000",
                "list(limit=51, offset=50000)",
                lambda: memory.list(limit=51, offset=50_000),
            ),
            (
                "memories, type + one day",
                f"/memories?type=action&since={middle}&until={middle}",
                "list(type, limit=51)",
                lambda: memory.list("action", limit=51),
            ),
            (
                "memories, search",
                "/memories?q=deploy+script",
                "search(limit=50)",
                lambda: memory.search("deploy script", limit=50),
            ),
            ("memory", f"/memories/{newest.id}", "get()", lambda: memory.get(newest.id)),
            (
                "sessions",
                "/sessions",
                "list_sessions(limit=50) + session_count()",
                lambda: (memory.list_sessions(limit=50), memory.session_count()),
            ),
            (
                "session",
                f"/sessions/{session}",
                "list_sessions(session_id) + list(session)",
                lambda: (memory.list_sessions(session_id=session), memory.list(session_id=session, limit=100)),
            ),
            (
                "patterns",
                "/patterns",
                f"analyze_patterns(max_memories={PATTERN_MEMORIES})",
                lambda: memory.analyze_patterns(max_memories=PATTERN_MEMORIES),
            ),
            ("settings", "/settings", "setting_rows()", lambda: setting_rows(memory.settings)),
        ]
        out = []
        for name, url, api_name, api in pages:
            progress(f"measuring {name}")
            assert client.get(url).status_code == 200, url
            page_ms, api_ms = [], []
            for _ in range(rounds):
                api_ms.append(elapsed_ms(api))
                page_ms.append(elapsed_ms(client.get, url))
            out.append(
                {
                    "page": name,
                    "url": url,
                    "api": api_name,
                    "page_p50_ms": pct(page_ms, 0.5),
                    "api_p50_ms": pct(api_ms, 0.5),
                }
            )
        progress(None)
        return {"size": size, "rounds": rounds, "pages": out}


def lines(result: dict[str, Any]) -> list[str]:
    out = [
        f"dashboard pages at {result['size']:,} memories, p50 of {result['rounds']} rounds (target {TARGET_MS:.0f} ms)"
    ]
    if result.get("build_s") is not None:
        out.append(f"built the store in {figure(result['build_s'])} s (fake embedder, in-memory index)")
    for row in result["pages"]:
        mark = "ok" if row["page_p50_ms"] <= TARGET_MS else "OVER TARGET"
        line = versus(row["page"], row["page_p50_ms"], row["api"], row["api_p50_ms"])
        out.append(f"  {line}  [{mark}]")
    return out


def main() -> None:
    cli = parser(__doc__)
    cli.add_argument("--size", type=int, default=100_000, help="memories in the store (default 100,000)")
    cli.add_argument("--rounds", type=int, default=7, help="alternating rounds per page (default 7)")
    cli.add_argument("--store-dir", type=Path, help="keep the built store here and reuse it on the next run")
    args = cli.parse_args()

    def run(folder: Path) -> dict[str, Any]:
        path = folder / f"dashboard_{args.size}"
        built = build(path, args.size)
        return {"build_s": built, **measure(path, args.size, args.rounds), "machine": machine()}

    if args.store_dir:
        args.store_dir.mkdir(parents=True, exist_ok=True)
        result = run(args.store_dir)
    else:
        with scratch_dir() as folder:
            result = run(folder)
    emit(result, args.json, lines)


if __name__ == "__main__":
    main()
