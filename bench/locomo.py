"""LoCoMo retrieval benchmark through remindful's public API.

For each conversation: a fresh store; every turn stored as one ``conversation`` memory
"Speaker: text" with its session's date as timestamp and its ``dia_id`` in metadata; every
question of categories 1-4 run through ``search()``. Recall@k is the fraction of a question's
evidence turns found in the top k, averaged over questions (shared/data/README.md).

    python bench/locomo.py --data ../shared/data/locomo_dev.json --k 5,10 [--json]

Any LoCoMo-format file can be measured the same way.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import remindful

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo_dev.json"


def parse_session_date(text: str) -> datetime:
    """'1:56 pm on 8 May, 2023' → an aware datetime (UTC)."""
    return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)


def turns(conversation: dict[str, Any]) -> list[dict[str, Any]]:
    """Store items for every turn, in session order."""
    items = []
    n = 1
    while f"session_{n}" in conversation:
        when = parse_session_date(conversation[f"session_{n}_date_time"])
        for turn in conversation[f"session_{n}"]:
            items.append(
                {
                    "content": f"{turn['speaker']}: {turn['text']}",
                    "type": "conversation",
                    "timestamp": when,
                    "metadata": {"dia_id": turn["dia_id"]},
                    "source": "conversation",
                }
            )
        n += 1
    return items


def evaluate(data: list[dict[str, Any]], ks: list[int], open_store: Any) -> dict[str, Any]:
    top = max(ks)
    recalls: dict[int, list[float]] = {k: [] for k in ks}
    by_category: dict[int, dict[int, list[float]]] = defaultdict(lambda: {k: [] for k in ks})
    reciprocal: list[float] = []
    search_ms: list[float] = []
    ingest_s = 0.0
    stored = 0
    for sample in data:
        with tempfile.TemporaryDirectory() as tmp, open_store(Path(tmp)) as memory:
            items = turns(sample["conversation"])
            started = time.perf_counter()
            memory.store_batch(items)
            memory.flush()  # embedded and indexed: the whole cost of ingest
            ingest_s += time.perf_counter() - started
            stored += len(items)
            for qa in sample["qa"]:
                if qa.get("category") not in (1, 2, 3, 4) or not qa.get("evidence"):
                    continue
                evidence = set(qa["evidence"])
                started = time.perf_counter()
                hits = memory.search(qa["question"], limit=top)
                search_ms.append((time.perf_counter() - started) * 1000)
                ranked = [h.metadata.get("dia_id") for h in hits]
                for k in ks:
                    found = len(evidence & set(ranked[:k])) / len(evidence)
                    recalls[k].append(found)
                    by_category[qa["category"]][k].append(found)
                first = next((i for i, d in enumerate(ranked, 1) if d in evidence), None)
                reciprocal.append(1 / first if first else 0.0)
    search_ms.sort()
    return {
        "questions": len(reciprocal),
        "recall": {f"R@{k}": round(statistics.fmean(v), 4) for k, v in recalls.items()},
        "mrr": round(statistics.fmean(reciprocal), 4),
        "by_category": {
            str(c): {f"R@{k}": round(statistics.fmean(v), 4) for k, v in sorted(per.items())} | {"n": len(per[ks[0]])}
            for c, per in sorted(by_category.items())
        },
        "ingest_per_s": round(stored / ingest_s, 1),
        "search_p50_ms": round(search_ms[len(search_ms) // 2], 2),
        "search_p95_ms": round(search_ms[int(len(search_ms) * 0.95)], 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="LoCoMo-format JSON file")
    parser.add_argument("--k", default="5,10", help="comma-separated cut-offs")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--conversations", type=int, default=None, help="only the first N conversations")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a setting override, e.g. search.lexical_weight=0 (repeatable)",
    )
    parser.add_argument(
        "--embedding-cache",
        type=Path,
        default=None,
        help="reuse embeddings across runs from this SQLite file (for ablations; ingest rates are then not comparable)",
    )
    args = parser.parse_args(argv)
    ks = sorted(int(k) for k in args.k.split(","))
    data = json.loads(args.data.read_text())[: args.conversations]
    overrides = {}
    for pair in args.set:
        key, _, value = pair.partition("=")
        overrides[key] = json.loads(value) if value[:1] in "0123456789-[{tf" else value
    if args.embedding_cache is not None:
        from remindful.embed import CachedEmbedder, OnnxMiniLMEmbedder
        from remindful.engine.catalog import Catalog

        overrides["embedder"] = CachedEmbedder(OnnxMiniLMEmbedder(), store=Catalog(args.embedding_cache))
    result = evaluate(data, ks, lambda path: remindful.open(path, **overrides))
    overrides.pop("embedder", None)
    result["settings"] = overrides
    if args.json:
        print(json.dumps(result))
    else:
        print(f"LoCoMo {args.data.name}: {result['questions']} questions (categories 1-4)")
        print("  " + "  ".join(f"{k} {v:.3f}" for k, v in result["recall"].items()) + f"  MRR {result['mrr']:.3f}")
        for category, figures in result["by_category"].items():
            print(
                f"  category {category} (n={figures['n']}): "
                + "  ".join(f"{k} {v:.3f}" for k, v in figures.items() if k != "n")
            )
        print(
            f"  ingest {result['ingest_per_s']:.0f} turns/s; search p50 {result['search_p50_ms']:.1f} ms, "
            f"p95 {result['search_p95_ms']:.1f} ms"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
