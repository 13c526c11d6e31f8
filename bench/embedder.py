"""Embedder speed: ONNX MiniLM (the default) against sentence-transformers when it is installed.

On the same 512 short texts (LoCoMo turns) it prints, for each backend (ONNX as a fused int8 graph, the
default; ONNX as shipped, ``quantize=False``; sentence-transformers when installed):
- load: first-use cost in ms (imports, model resolution, session and tokenizer); for the int8
  default also the first load on a new machine, which prepares the int8 model once;
- single p50: latency of embedding one text, p50 over 200 texts, no cache; "query" is the same
  over LoCoMo questions (what a search embeds);
- throughput: texts/s for all 512 in one ``embed`` call (best of ``--repeat`` runs).
The backends are measured in interleaved rounds (each round: a share of the single texts, then one
batch, for every backend in turn), so a machine whose load drifts during the run slows them alike.
It also prints the throughput ratios against sentence-transformers and the mean cosine of each
backend's vectors to sentence-transformers' (the fp32 reference). The issue's targets: >= 2x
sentence-transformers throughput, single text <= 5 ms, load <= 1 s.

    python bench/embedder.py [--data PATH] [--threads N] [--batch-size 32] [--json]
"""

from __future__ import annotations

import importlib.util
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from common import add_data_option, elapsed_ms, emit, load_locomo, machine, parser, pct, progress, turn_texts
from remindful.embed import OnnxMiniLMEmbedder, SentenceTransformersEmbedder, quantize

TARGETS = {"throughput_ratio": 2.0, "single_p50_ms": 5.0, "load_ms": 1000.0}


WARM_UP = ["a short warm-up text", "and a second, slightly longer one to batch with it"] * 4


def load(embedder: Any) -> float:
    """Load ``embedder`` and warm it up; returns the load time in ms."""
    progress(f"{type(embedder).__name__}: loading")
    started = time.perf_counter()
    embedder.load()
    load_ms = (time.perf_counter() - started) * 1000
    embedder.embed(WARM_UP)  # first runs allocate buffers and pick kernels
    return load_ms


class Timings:
    """One backend's timings, gathered over interleaved rounds."""

    def __init__(self) -> None:
        self.singles: list[float] = []
        self.queries: list[float] = []
        self.batches: list[float] = []
        self.vectors = np.empty(0)


def one_round(embedder: Any, timings: Timings, singles: list[str], questions: list[str], batch: list[str]) -> None:
    """Each of ``singles`` and ``questions`` embedded alone, then ``batch`` in one call."""
    progress(f"{type(embedder).__name__}: {len(singles)} single texts, {len(questions)} questions, one batch")
    for source, into in ((singles, timings.singles), (questions, timings.queries)):
        into.extend(elapsed_ms(embedder.embed, [text]) for text in source)
    started = time.perf_counter()
    timings.vectors = embedder.embed(batch)
    timings.batches.append(time.perf_counter() - started)


def summary(load_ms: float, timings: Timings, n: int) -> dict[str, float]:
    return {
        "load_ms": round(load_ms, 1),
        "single_p50_ms": pct(timings.singles, 0.5, 2),
        "single_p95_ms": pct(timings.singles, 0.95, 2),
        "query_p50_ms": pct(timings.queries, 0.5, 2),
        "throughput_texts_per_s": round(n / min(timings.batches), 1),
    }


def lines(result: dict[str, Any]) -> list[str]:
    out = [f"{result['texts']} texts from {Path(result['data']).name}"]
    for label, key in (
        ("onnx int8 (default)", "onnx_int8"),
        ("onnx float (shipped)", "onnx_float"),
        ("sentence-transformers", "sentence_transformers"),
    ):
        figures = result.get(key)
        if figures is None:
            out.append(f"{label:22} not installed (pip install 'remindful[st]' to compare)")
            continue
        line = (
            f"{label:22} load {figures['load_ms']:7.1f} ms  single p50 {figures['single_p50_ms']:5.2f} ms "
            f"(p95 {figures['single_p95_ms']:.2f}), query p50 {figures['query_p50_ms']:5.2f} ms  "
            f"throughput {figures['throughput_texts_per_s']:6.1f} texts/s"
        )
        if "throughput_ratio_over_st" in figures:
            line += (
                f"  = {figures['throughput_ratio_over_st']:.2f}x st, cosine to st {figures['mean_cosine_to_st']:.4f}"
            )
        out.append(line)
    out.append(
        "onnx int8 first load on a new machine (prepares the int8 model once): "
        f"{result['onnx_int8_first_load_ms']:.0f} ms"
    )
    out.append(
        f"targets: throughput >= {TARGETS['throughput_ratio']}x st, single <= {TARGETS['single_p50_ms']} ms, "
        f"load <= {TARGETS['load_ms']:.0f} ms"
    )
    return out


def main(argv: list[str] | None = None) -> int:
    args_parser = parser(__doc__)
    add_data_option(args_parser)
    args_parser.add_argument("--n", type=int, default=512, help="number of texts")
    args_parser.add_argument("--singles", type=int, default=200, help="texts timed one at a time")
    args_parser.add_argument("--repeat", type=int, default=3, help="batch runs; the best counts")
    args_parser.add_argument(
        "--threads", type=int, default=None, help="model runs at once, one core each (default: all cores)"
    )
    args_parser.add_argument(
        "--no-spin", action="store_true", help="a query's ONNX worker threads (3+ cores) do not busy-wait"
    )
    args_parser.add_argument("--batch-size", type=int, default=32, help="most texts in one model run")
    args_parser.add_argument("--model-dir", type=Path, default=None, help="directory with model.onnx")
    args = args_parser.parse_args(argv)

    data = load_locomo(args.data)
    texts = turn_texts(data)[: args.n]
    if len(texts) < args.n:
        raise SystemExit(f"{args.data} has only {len(texts)} turns, need {args.n}")
    questions = [qa["question"] for sample in data for qa in sample["qa"]][: args.singles]
    options = {"threads": args.threads, "batch_size": args.batch_size, "spin": not args.no_spin}
    result: dict[str, Any] = {"data": str(args.data), "texts": len(texts), "targets": TARGETS, **options}
    with tempfile.TemporaryDirectory() as cache:
        os.environ[quantize.ENV_MODEL_CACHE] = cache
        progress("onnx int8: first load on a new machine (prepares the int8 model)")
        first = OnnxMiniLMEmbedder(args.model_dir, **options)
        first.load()
        result["onnx_int8_first_load_ms"] = round(first.load_ms or 0.0, 1)
        backends: dict[str, Any] = {
            "onnx_int8": OnnxMiniLMEmbedder(args.model_dir, **options),
            "onnx_float": OnnxMiniLMEmbedder(args.model_dir, quantize=False, **options),
        }
        if importlib.util.find_spec("sentence_transformers") is not None:
            backends["sentence_transformers"] = SentenceTransformersEmbedder()
        loads = {key: load(embedder) for key, embedder in backends.items()}
        # Round by round, every backend in turn: a machine whose load drifts during the run
        # then slows them all alike, and the ratios stay fair.
        timings = {key: Timings() for key in backends}
        share = max(1, args.singles // args.repeat)
        for round_ in range(args.repeat):
            part = slice(round_ * share, (round_ + 1) * share)
            for key, embedder in backends.items():
                one_round(embedder, timings[key], texts[part], questions[part], texts)
        for key, embedder in backends.items():
            result[key] = {**summary(loads[key], timings[key], len(texts)), "origin": embedder.origin}
    if "sentence_transformers" in backends:
        reference = timings["sentence_transformers"]
        for key in ("onnx_int8", "onnx_float"):
            result[key]["throughput_ratio_over_st"] = round(
                result[key]["throughput_texts_per_s"] / result["sentence_transformers"]["throughput_texts_per_s"], 2
            )
            cosines = np.sum(timings[key].vectors * reference.vectors, axis=1)
            result[key]["mean_cosine_to_st"] = round(float(np.mean(cosines)), 5)
    progress(None)
    result["machine"] = machine()
    emit(result, args.json, lines)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
