"""Choose the relevance model's weights and the score's calibration on both dev sets together, and
measure them held out: by data set, by LoCoMo conversation and by PersonaChat persona.

Recorded through the real pipeline (``search(min_score=0)``, the spy on ``search.Model.features``):
every candidate of every question, with what the model reads of it (its cosine, the lexical
evidence of its text and of its session window, its boost; for a candidate that cannot reach the
first twenty, the window's lower bound, its text's) and whether it is relevant, for
- LoCoMo (``--data``): each conversation's questions (categories 1-4; relevant: the evidence turns)
  and the next conversation's questions (nothing relevant), a store per conversation as
  bench/locomo.py builds it;
- PersonaChat (``--personachat``): the per-user stores and the pooled store as bench/personachat.py
  builds them, with their queries and abstention queries.

``--recorded PATH`` keeps what was recorded, and a later run with it fits from the file alone.

Then, on the recorded candidates (ranked by the calibrated score; collapse is left out):
1. the weights (``search.lexical_weight``, ``search.lexical_context_weight``): the point of a grid
   that maximises the mean, over the three views (LoCoMo, PersonaChat per user, pooled), of
   (R@5 + R@10) / 2; held out: fitted without one data set and measured on it, and fitted without
   one LoCoMo conversation (or one persona's per-user store) and measured on it, in turn;
2. the calibration (``calibration.SLOPE``, ``CENTRE``): a logistic regression of "relevant" on the
   boosted evidence of the first ten hits of every question, the other data set's questions and
   the abstention questions all counting as negatives, classes and data sets weighted equally;
3. the two floors at the shipped score: the R@5 ``search.min_score`` costs each view, and at
   ``context.min_score`` the share of abstention questions left with no hit and of relevant
   memories kept (among the first ten hits).

The baseline in the same run: plain cosine (weights 0) on the same candidates, and the shipped
settings.

    python bench/fit_ranking.py [--data PATH] [--personachat PATH] [--embedding-cache PATH] [--json]
"""

from __future__ import annotations

import json
import pickle
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np

import remindful
from common import (
    add_data_option,
    add_embedding_cache_option,
    default_data,
    embedder_option,
    emit,
    load_locomo,
    logistic,
    machine,
    parser,
    progress,
    scratch_dir,
)
from locomo import turns
from personachat import items, load, views

LEXICAL = [round(0.1 * i, 1) for i in range(11)]
CONTEXT = [round(0.1 * i, 1) for i in range(15)]
VIEWS = ("locomo", "per_user", "pooled")
#: Hits of each question the calibration reads.
DEPTH = 10


@dataclass
class Question:
    """One recorded search: its candidates' features and labels, the relevant count (0: a question
    the store cannot answer), its view and store."""

    cosine: np.ndarray
    own: np.ndarray
    window: np.ndarray
    gain: np.ndarray
    relevant: np.ndarray
    wanted: int
    view: str
    store: str

    def scores(self, lexical: float, context: float) -> tuple[np.ndarray, np.ndarray]:
        """(calibrated score, boosted evidence) of each candidate under these weights."""
        from remindful.engine.retrieval import calibration

        own = self.cosine + lexical * self.own
        evidence = own + context * self.window + self.gain
        z = np.clip(calibration.SLOPE * (evidence - calibration.CENTRE), -60, 60)
        gate = np.clip(calibration.GATE_SLOPE * (own - calibration.GATE_EVIDENCE), -60, 60)
        return 1 / (1 + np.exp(-z)) / (1 + np.exp(-gate)), evidence

    def recall(self, lexical: float, context: float, k: int) -> float:
        score, _ = self.scores(lexical, context)
        order = np.argsort(-score, kind="stable")[:k]
        return float(self.relevant[order].sum()) / self.wanted


class Recorder:
    """Spies on the model: the features of every candidate of the current search."""

    def __init__(self) -> None:
        self.seen: list[tuple[Any, Any]] = []

    def __enter__(self) -> Recorder:
        from remindful.engine.retrieval import search

        features = search.Model.features
        recorder = self

        def spy(model: Any, rows: Any, candidates: Any) -> Any:
            found = features(model, rows, candidates)
            recorder.seen += [(f, f.gain) for f in found]
            return found

        self._patch = mock.patch.object(search.Model, "features", spy)
        self._patch.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._patch.__exit__(*exc)

    def ask(self, memory: Any, query: str, relevant: set[str], key: str, view: str, store: str) -> Question:
        self.seen = []
        memory.search(query, limit=DEPTH, min_score=0)
        label = [json.loads(f.row.metadata).get(key) in relevant for f, _ in self.seen]
        column = [[f.cosine, f.own_lexical, f.window_lexical, gain] for f, gain in self.seen]
        values = np.array(column, dtype=float).reshape(-1, 4)
        return Question(*values.T, np.array(label, dtype=bool), len(relevant), view, store)


def record_locomo(path: Path, embedder: Any) -> list[Question]:
    data = load_locomo(path)
    recorded: list[Question] = []
    with Recorder() as recorder:
        for index, sample in enumerate(data):
            progress(f"LoCoMo conversation {index + 1} of {len(data)}")
            own = [qa for qa in sample["qa"] if qa.get("category") in (1, 2, 3, 4) and qa.get("evidence")]
            others = [qa for qa in data[(index + 1) % len(data)]["qa"] if qa.get("category") in (1, 2, 3, 4)]
            name = str(sample.get("sample_id", index))
            with scratch_dir() as tmp, remindful.open(tmp, **_given(embedder)) as memory:
                memory.store_batch(turns(sample["conversation"]))
                memory.flush()
                for qa in own:
                    recorded.append(recorder.ask(memory, qa["question"], set(qa["evidence"]), "dia_id", "locomo", name))
                for qa in others:
                    recorded.append(recorder.ask(memory, qa["question"], set(), "dia_id", "locomo", name))
    return recorded


def record_personachat(path: Path, embedder: Any) -> list[Question]:
    recorded: list[Question] = []
    with Recorder() as recorder:
        for view, stores in views(load(path), "both").items():
            for number, (memories, queries, abstain) in enumerate(stores):
                progress(f"PersonaChat {view} store {number + 1} of {len(stores)}")
                name = f"{view}-{number}"
                with scratch_dir() as tmp, remindful.open(tmp, **_given(embedder)) as memory:
                    memory.store_batch(items(memories))
                    memory.flush()
                    for q in queries:
                        recorded.append(recorder.ask(memory, q["query"], set(q["relevant"]), "pc_id", view, name))
                    for a in abstain:
                        recorded.append(recorder.ask(memory, a["query"], set(), "pc_id", view, name))
    return recorded


def _given(embedder: Any) -> dict[str, Any]:
    return {} if embedder is None else {"embedder": embedder}


# -- the fits ------------------------------------------------------------------------------------


def recalls(questions: list[Question], lexical: float, context: float) -> dict[str, dict[str, float]]:
    """R@5 and R@10 of each view's answerable questions."""
    result = {}
    for view in VIEWS:
        own = [q for q in questions if q.view == view and q.wanted]
        if own:
            result[view] = {
                f"R@{k}": round(float(np.mean([q.recall(lexical, context, k) for q in own])), 4) for k in (5, 10)
            }
    return result


def objective(figures: dict[str, dict[str, float]]) -> float:
    """The mean over the views present of (R@5 + R@10) / 2."""
    return float(np.mean([(f["R@5"] + f["R@10"]) / 2 for f in figures.values()])) if figures else 0.0


def fit_weights(questions: list[Question]) -> tuple[float, float]:
    """The grid point that maximises :func:`objective` (the smaller weights on ties)."""
    best = max(
        ((objective(recalls(questions, lex, ctx)), -lex - ctx, lex, ctx) for lex in LEXICAL for ctx in CONTEXT),
    )
    return best[2], best[3]


def held_out(questions: list[Question]) -> dict[str, Any]:
    """Weights fitted without a part and measured on it: each data set, each LoCoMo conversation,
    each per-user store (pooled with the rest)."""
    result: dict[str, Any] = {}
    for left, views_out in (("LoCoMo", ("locomo",)), ("PersonaChat", ("per_user", "pooled"))):
        weights = fit_weights([q for q in questions if q.view not in views_out])
        result[f"without {left}"] = {"weights": weights} | recalls(
            [q for q in questions if q.view in views_out], *weights
        )
    for view in ("locomo", "per_user"):
        stores = sorted({q.store for q in questions if q.view == view})
        measured: list[Question] = []
        per_part: list[tuple[list[Question], tuple[float, float]]] = []
        for store in stores:
            progress(f"held out: {view} {store}")
            weights = fit_weights([q for q in questions if q.store != store])
            part = [q for q in questions if q.store == store]
            per_part.append((part, weights))
            measured += part
        figures = {
            f"R@{k}": round(
                float(np.mean([q.recall(*w, k) for part, w in per_part for q in part if q.wanted])),
                4,
            )
            for k in (5, 10)
        }
        result[f"{view}, one {'conversation' if view == 'locomo' else 'persona'} out"] = figures | {
            "weights seen": sorted({w for _, w in per_part})
        }
    progress(None)
    return result


def fit_calibration(questions: list[Question], lexical: float, context: float) -> tuple[float, float]:
    """(SLOPE, CENTRE) of the score's logistic (see the module docstring)."""
    x: list[float] = []
    y: list[float] = []
    sets: list[str] = []
    for q in questions:
        score, evidence = q.scores(lexical, context)
        for i in np.argsort(-score, kind="stable")[:DEPTH]:
            x.append(float(evidence[i]))
            y.append(float(q.relevant[i]))
            sets.append("locomo" if q.view == "locomo" else "personachat")
    counts = {name: sets.count(name) for name in set(sets)}
    # Each data set weighs as much as the other; the weights average 1, as the L2 penalty expects.
    row_weights = [len(sets) / (len(counts) * counts[name]) for name in sets]
    slope, bias = logistic(np.array(x)[:, None], np.array(y), 1e-4, row_weights)
    return float(slope[0]), float(-bias / slope[0])


def floors(questions: list[Question], lexical: float, context: float) -> dict[str, dict[str, float]]:
    """At the shipped floors: R@5 lost to search.min_score; at context.min_score, abstention and
    relevant memories kept, per view."""
    from remindful.config import ContextSettings, SearchSettings

    search_floor, context_floor = SearchSettings().min_score, ContextSettings().min_score
    result = {}
    for view in VIEWS:
        lost, kept, abstained, own, foreign = 0.0, 0.0, 0, 0, 0
        for q in (q for q in questions if q.view == view):
            score, _ = q.scores(lexical, context)
            order = np.argsort(-score, kind="stable")[:DEPTH]
            top = score[order]
            if q.wanted:
                own += 1
                top5 = order[:5]
                passing = order[top >= search_floor][:5]
                lost += (q.relevant[top5].sum() - q.relevant[passing].sum()) / q.wanted
                kept += q.relevant[order[top >= context_floor]].sum() / q.wanted
            else:
                foreign += 1
                abstained += not (top >= context_floor).any()
        if own:
            result[view] = {
                "R@5 lost to search.min_score": round(lost / own, 4),
                "context: abstention": round(abstained / max(foreign, 1), 4),
                "context: relevant kept": round(kept / own, 4),
            }
    return result


def main(argv: list[str] | None = None) -> int:
    from remindful.config import SearchSettings
    from remindful.engine.retrieval import calibration

    args_parser = parser(__doc__)
    add_data_option(args_parser)
    add_embedding_cache_option(args_parser)
    args_parser.add_argument(
        "--personachat",
        type=Path,
        default=default_data("personachat"),
        metavar="PATH",
        help="PersonaChat paraphrase JSON file (default: as bench/personachat.py's --data; now %(default)s)",
    )
    args_parser.add_argument(
        "--recorded",
        type=Path,
        default=None,
        metavar="PATH",
        help="keep the recorded candidates in this file and fit from it when it exists (no search is run then)",
    )
    args = args_parser.parse_args(argv)
    if args.recorded is not None and args.recorded.exists():
        questions = [Question(**q) for q in pickle.loads(args.recorded.read_bytes())]
    else:
        embedder = embedder_option(args.embedding_cache)
        questions = record_locomo(args.data, embedder) + record_personachat(args.personachat, embedder)
        if args.recorded is not None:
            args.recorded.write_bytes(pickle.dumps([vars(q) for q in questions]))
    shipped = SearchSettings()
    weights = fit_weights(questions)
    result = {
        "data": [str(args.data), str(args.personachat)],
        "questions": {view: sum(1 for q in questions if q.view == view) for view in VIEWS},
        "fitted weights": {"lexical_weight": weights[0], "lexical_context_weight": weights[1]},
        "shipped weights": {
            "lexical_weight": shipped.lexical_weight,
            "lexical_context_weight": shipped.lexical_context_weight,
        },
        "fitted": recalls(questions, *weights),
        "shipped": recalls(questions, shipped.lexical_weight, shipped.lexical_context_weight),
        "plain cosine": recalls(questions, 0.0, 0.0),
        "held out": held_out(questions),
    }
    slope, centre = fit_calibration(questions, *weights)
    result["calibration"] = {
        "fitted": {"SLOPE": round(slope, 3), "CENTRE": round(centre, 3)},
        "shipped": {"SLOPE": calibration.SLOPE, "CENTRE": calibration.CENTRE},
        "held out": {
            f"without {name}": dict(
                zip(
                    ("SLOPE", "CENTRE"),
                    (round(v, 3) for v in fit_calibration([q for q in questions if not test(q)], *weights)),
                    strict=True,
                )
            )
            for name, test in (("LoCoMo", lambda q: q.view == "locomo"), ("PersonaChat", lambda q: q.view != "locomo"))
        },
    }
    result["floors"] = floors(questions, shipped.lexical_weight, shipped.lexical_context_weight)
    result["machine"] = machine()
    emit(result, args.json, lines)
    return 0


def lines(result: dict[str, Any]) -> list[str]:
    def show(figures: dict[str, Any]) -> str:
        return "  ".join(
            f"{view} {f['R@5']:.3f}/{f['R@10']:.3f}" if isinstance(f, dict) else f"{view} {f}"
            for view, f in figures.items()
        )

    out = [
        f"relevance model fitted on {' and '.join(result['data'])}: questions {result['questions']}",
        f"  weights fitted {result['fitted weights']}, shipped {result['shipped weights']}",
        "  R@5/R@10 on the recorded candidates:",
        f"    fitted:       {show(result['fitted'])}",
        f"    shipped:      {show(result['shipped'])}",
        f"    baseline, plain cosine: {show(result['plain cosine'])}",
        "  held out:",
    ]
    for name, figures in result["held out"].items():
        out.append(f"    {name}: {show(figures)}")
    cal = result["calibration"]
    out.append(f"  calibration fitted {cal['fitted']}, shipped {cal['shipped']}; held out {cal['held out']}")
    out.append("  floors at the shipped settings:")
    for view, figures in result["floors"].items():
        out.append(f"    {view}: " + ", ".join(f"{k} {v}" for k, v in figures.items()))
    return out


if __name__ == "__main__":
    sys.exit(main())
