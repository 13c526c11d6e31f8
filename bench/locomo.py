"""LoCoMo retrieval benchmark through remindful's public API.

For each conversation: a fresh store; every turn stored as one ``conversation`` memory
"Speaker: text" with its session's date as timestamp and its ``dia_id`` in metadata; every
question of categories 1-4 run through ``search()``. Recall@k is the fraction of a question's
evidence turns found in the top k, averaged over questions (shared/data/README.md).

Relevance floor (issue 16): every question is also asked with ``min_score=0`` (the top hits
whatever they score), and the R@5 the default floor costs is printed; and the next conversation's
questions (categories 1-4) are asked against each store: abstention is the share of them that get
no hit with the default ``search.min_score`` and no context block (``context.min_score``).

The baselines in the same run: plain cosine with the store's own embedder over the same turns (what
any vector store gives) and plain BM25 (SQLite FTS5 with remindful's tokenizer, every word of the
question OR-ed); and the same stores reopened with other search settings (by default dense only),
every question asked again. ``--baseline KEY=VALUE`` picks other settings (an ablation),
``--no-baseline`` skips that pass. Each target of issue 26 is printed beside its figure.

    python bench/locomo.py [--data PATH] [--k 5,10] [--conversations N] [--no-baseline]
                           [--embedding-cache PATH] [--json]

Any LoCoMo-format file can be measured the same way (``--data``: see bench/common.py).
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections import defaultdict
from datetime import UTC, datetime
from typing import Any

import remindful
from common import (
    add_data_option,
    add_embedding_cache_option,
    bm25_rankings,
    cosine_at_abstention,
    cosine_ranked,
    embedder_option,
    emit,
    load_locomo,
    machine,
    overrides,
    parser,
    pct,
    scratch_dir,
    sessions,
    timed,
)

DENSE_ONLY = {"search.context_weight": 0, "search.lexical_weight": 0, "search.lexical_context_weight": 0}
#: Issue 26's targets on the dev split (abstention: of the context block).
TARGETS = {"R@5": 0.69, "R@10": 0.77, "abstention": 0.90, "R@5 loss": 0.02}


def parse_session_date(text: str) -> datetime:
    """'1:56 pm on 8 May, 2023' → an aware datetime (UTC)."""
    return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)


def turns(conversation: dict[str, Any]) -> list[dict[str, Any]]:
    """Store items for every turn, in session order."""
    return [
        {
            "content": f"{turn['speaker']}: {turn['text']}",
            "type": "conversation",
            "timestamp": parse_session_date(date),
            "metadata": {"dia_id": turn["dia_id"]},
            "source": "conversation",
        }
        for date, session in sessions(conversation)
        for turn in session
    ]


class Scores:
    """Recall@k, reciprocal ranks and search times of one configuration, question by question."""

    def __init__(self, ks: list[int]) -> None:
        self.ks = ks
        self.recalls: dict[int, list[float]] = {k: [] for k in ks}
        self.by_category: dict[int, dict[int, list[float]]] = defaultdict(lambda: {k: [] for k in ks})
        self.reciprocal: list[float] = []
        self.search_ms: list[float] = []

    def ask(self, memory: Any, qa: dict[str, Any], min_score: float | None = None) -> None:
        seconds, hits = timed(memory.search, qa["question"], limit=max(self.ks), min_score=min_score)
        self.search_ms.append(seconds * 1000)
        self.found(qa, [h.metadata.get("dia_id") for h in hits])

    def found(self, qa: dict[str, Any], ranked: list[Any]) -> None:
        """Count one question's ranked dia_ids."""
        evidence = set(qa["evidence"])
        for k in self.ks:
            found = len(evidence & set(ranked[:k])) / len(evidence)
            self.recalls[k].append(found)
            self.by_category[qa["category"]][k].append(found)
        first = next((i for i, d in enumerate(ranked, 1) if d in evidence), None)
        self.reciprocal.append(1 / first if first else 0.0)

    def summary(self) -> dict[str, Any]:
        return {
            "questions": len(self.reciprocal),
            "recall": {f"R@{k}": round(statistics.fmean(v), 4) for k, v in self.recalls.items()},
            "mrr": round(statistics.fmean(self.reciprocal), 4),
            "by_category": {
                str(c): {f"R@{k}": round(statistics.fmean(v), 4) for k, v in sorted(per.items())}
                | {"n": len(per[self.ks[0]])}
                for c, per in sorted(self.by_category.items())
            },
        } | (
            {"search_p50_ms": pct(self.search_ms, 0.5, 2), "search_p95_ms": pct(self.search_ms, 0.95, 2)}
            if self.search_ms
            else {}
        )


def evaluate(
    data: list[dict[str, Any]], ks: list[int], settings: dict[str, Any], baseline: dict[str, Any] | None
) -> dict[str, Any]:
    """Scores with ``settings``, with ``baseline`` on top of them (the same stores reopened), and
    of plain cosine and BM25 over the same turns."""
    scores, base_scores, floorless = Scores(ks), Scores(ks), Scores(ks)
    cosine, bm25 = Scores(ks), Scores(ks)
    ingest_s = 0.0
    stored = 0
    foreign = {"asked": 0, "no_hit": 0, "no_context": 0}
    #: Issue 31, per conversation: the context's recall and abstention, and plain cosine's view of
    #: the same questions (the first evidence turn's rank and cosine; each foreign question's best cosine).
    decisions: list[dict[str, Any]] = []
    for index, sample in enumerate(data):
        questions = [qa for qa in sample["qa"] if qa.get("category") in (1, 2, 3, 4) and qa.get("evidence")]
        # The next conversation's questions: this store holds nothing that answers them.
        others = [qa for qa in data[(index + 1) % len(data)]["qa"] if qa.get("category") in (1, 2, 3, 4)]
        with scratch_dir() as tmp:
            with remindful.open(tmp, **settings) as memory:
                items = turns(sample["conversation"])
                started = time.perf_counter()
                memory.store_batch(items)
                memory.flush()  # embedded and indexed: the whole cost of ingest
                ingest_s += time.perf_counter() - started
                stored += len(items)
                for qa in questions:
                    scores.ask(memory, qa)
                    floorless.ask(memory, qa, min_score=0)
                texts = [item["content"] for item in items]
                dia = [item["metadata"]["dia_id"] for item in items]
                asked = [qa["question"] for qa in questions]
                vectors_from = settings.get("embedder") or memory.engine.embedder
                foreign_asked = [qa["question"] for qa in others] if len(data) > 1 else []
                found = cosine_ranked(vectors_from, texts, [*asked, *foreign_asked], max(ks))
                decision: dict[str, Any] = {"kept": 0, "asked": len(questions), "abstained": 0, "relevant": []}
                for qa, ranked in zip(questions, found, strict=False):
                    cosine.found(qa, [dia[i] for i, _ in ranked])
                    where = [(r, score) for r, (i, score) in enumerate(ranked, 1) if dia[i] in qa["evidence"]]
                    decision["relevant"].append(where[0] if where else (None, 0.0))
                    injected = {h.metadata.get("dia_id") for h in memory.context(qa["question"]).hits}
                    decision["kept"] += bool(injected & set(qa["evidence"]))
                decision["foreign"] = [ranked[0][1] if ranked else -1.0 for ranked in found[len(asked) :]]
                for qa, ranked in zip(questions, bm25_rankings(texts, asked, max(ks)), strict=True):
                    bm25.found(qa, [dia[i] for i in ranked])
                if len(data) > 1:
                    for qa in others:
                        foreign["asked"] += 1
                        foreign["no_hit"] += not memory.search(qa["question"], limit=max(ks))
                        silent = not memory.context(qa["question"]).text
                        foreign["no_context"] += silent
                        decision["abstained"] += silent
                decisions.append(decision)
            if baseline is not None:
                with remindful.open(tmp, **{**settings, **baseline}) as memory:
                    for qa in questions:
                        base_scores.ask(memory, qa)
    result = {**scores.summary(), "ingest_per_s": round(stored / ingest_s, 1)}
    result["min_score_0"] = floorless.summary()
    result["plain_cosine"] = cosine.summary()
    result["bm25"] = bm25.summary()
    if foreign["asked"]:
        result["abstention"] = {
            "questions": foreign["asked"],
            "no_hit": round(foreign["no_hit"] / foreign["asked"], 4),
            "no_context": round(foreign["no_context"] / foreign["asked"], 4),
        }
    if baseline is not None:
        result["baseline"] = {"settings": baseline, **base_scores.summary()}
    if foreign["asked"]:
        result["injection"] = injection(decisions)
    return result


def injection(decisions: list[dict[str, Any]]) -> dict[str, Any]:
    """Issue 31: the context's recall (any evidence turn injected) at its abstention on the next
    conversation's questions, beside plain cosine's (first 5) at the same abstention; per
    conversation and over all of them."""

    def one(kept: int, asked: int, relevant: list[Any], abstained: int, foreign: list[float]) -> dict[str, float]:
        rate = abstained / max(len(foreign), 1)
        return {
            "recall": round(kept / max(asked, 1), 4),
            "abstention": round(rate, 4),
            "plain_cosine": round(cosine_at_abstention(relevant, foreign, rate), 4),
        }

    per = [one(d["kept"], d["asked"], d["relevant"], d["abstained"], d["foreign"]) for d in decisions]
    pooled = one(
        sum(d["kept"] for d in decisions),
        sum(d["asked"] for d in decisions),
        [r for d in decisions for r in d["relevant"]],
        sum(d["abstained"] for d in decisions),
        [f for d in decisions for f in d["foreign"]],
    )
    return {"per_conversation": per, "pooled": pooled}


def row(figures: dict[str, Any]) -> str:
    recall = "  ".join(f"{k} {v:.3f}" for k, v in figures["recall"].items())
    speed = f"  search p50 {figures['search_p50_ms']:.1f} ms" if "search_p50_ms" in figures else ""
    return f"{recall}  MRR {figures['mrr']:.3f}{speed}"


def lines(result: dict[str, Any]) -> list[str]:
    out = [f"LoCoMo {result['data']}: {result['questions']} questions (categories 1-4)", "  " + row(result)]
    for category, figures in result["by_category"].items():
        out.append(
            f"  category {category} (n={figures['n']}): "
            + "  ".join(f"{k} {v:.3f}" for k, v in figures.items() if k != "n")
        )
    out.append(
        f"  ingest {result['ingest_per_s']:.0f} turns/s; search p50 {result['search_p50_ms']:.1f} ms, "
        f"p95 {result['search_p95_ms']:.1f} ms"
    )
    out.append("plain cosine, same embedder, same turns:")
    out.append("  " + row(result["plain_cosine"]))
    out.append("BM25 (FTS5, every word of the question):")
    out.append("  " + row(result["bm25"]))
    base = result.get("baseline")
    if base is not None:
        name = "dense only" if base["settings"] == DENSE_ONLY else json.dumps(base["settings"])
        out.append(f"baseline, same stores, {name}:")
        out.append("  " + row(base))
        for category, figures in base["by_category"].items():
            out.append(f"  category {category}: " + "  ".join(f"{k} {v:.3f}" for k, v in figures.items() if k != "n"))
    out.append("issue 26 targets (figure | target | same-run baselines):")
    for k in ("R@5", "R@10"):
        if k in result["recall"]:
            against = f"plain cosine {result['plain_cosine']['recall'][k]:.3f}"
            if base is not None:
                against += f", {name} {base['recall'][k]:.3f}"
            out.append(f"  {k} {result['recall'][k]:.3f} | >= {TARGETS[k]:.2f} | {against}")
    floorless = result["min_score_0"]["recall"]
    if "R@5" in floorless:
        loss = floorless["R@5"] - result["recall"]["R@5"]
        out.append(
            f"  R@5 lost to the default min_score {loss:.4f} | <= {TARGETS['R@5 loss']:.2f} | "
            f"min_score=0: " + "  ".join(f"{k} {v:.3f}" for k, v in floorless.items())
        )
    if "abstention" in result:
        a = result["abstention"]
        out.append(
            f"  abstention (next conversation's {a['questions']} questions): no hit {a['no_hit']:.1%}, "
            f"no context {a['no_context']:.1%} | >= {TARGETS['abstention']:.0%} | min_score=0: 0.0%"
        )
    if "injection" in result:
        out.append("issue 31: context recall at its abstention | >= plain cosine (first 5) at the same abstention")
        views = [("all conversations", result["injection"]["pooled"])]
        views += [(f"conversation {i}", v) for i, v in enumerate(result["injection"]["per_conversation"], 1)]
        for name, v in views:
            out.append(
                f"  {name}: {v['recall']:.3f} at abstention {v['abstention']:.1%} | "
                f"plain cosine {v['plain_cosine']:.3f}"
            )
    return out


def main(argv: list[str] | None = None) -> int:
    args_parser = parser(__doc__)
    add_data_option(args_parser, conversations=True)
    args_parser.add_argument("--k", default="5,10", help="comma-separated cut-offs")
    args_parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a setting override, e.g. search.lexical_weight=0 (repeatable)",
    )
    args_parser.add_argument(
        "--baseline",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="the baseline's settings on top of --set (repeatable; default: dense only)",
    )
    args_parser.add_argument("--no-baseline", action="store_true", help="skip the baseline pass")
    add_embedding_cache_option(args_parser)
    args = args_parser.parse_args(argv)
    ks = sorted(int(k) for k in args.k.split(","))
    data = load_locomo(args.data)[: args.conversations]
    settings = overrides(args.set)
    baseline = None if args.no_baseline else overrides(args.baseline) or DENSE_ONLY
    embedder = embedder_option(args.embedding_cache)
    if embedder is not None:
        settings["embedder"] = embedder
    result = evaluate(data, ks, settings, baseline)
    settings.pop("embedder", None)
    result = {"data": str(args.data), **result, "settings": settings, "machine": machine()}
    emit(result, args.json, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
