"""Embedder speed: ONNX MiniLM (the default) against sentence-transformers when it is installed.

On the same 512 short texts (LoCoMo turns) it prints, for each backend (ONNX as a fused int8 graph, the
default; ONNX as shipped, ``quantize=False``; sentence-transformers when installed):
- load: first-use cost in ms (imports, model resolution, session and tokenizer); for the int8
  default also the first load on a new machine, which prepares the int8 model once;
- single p50: latency of embedding one text, median over 200 texts, no cache; "query" is the same
  over LoCoMo questions (what a search embeds);
- throughput: texts/s for all 512 in one ``embed`` call (best of ``--repeat`` runs).
It also prints the throughput ratios against sentence-transformers and the mean cosine of each
backend's vectors to sentence-transformers' (the fp32 reference). The issue's targets: >= 2x
sentence-transformers throughput, single text <= 5 ms, load <= 1 s.

    python bench/embedder.py [--threads N] [--batch-size 16] [--json]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from remindful.embed import OnnxMiniLMEmbedder, SentenceTransformersEmbedder, quantize
from remindful.embed.onnx import default_threads

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo_dev.json"
TARGETS = {"throughput_ratio": 2.0, "single_p50_ms": 5.0, "load_ms": 1000.0}


def load_texts(path: Path, n: int) -> list[str]:
    """The first ``n`` conversation turns of a LoCoMo-format file, in session order."""
    texts: list[str] = []
    for sample in json.loads(path.read_text(encoding="utf-8")):
        conversation = sample["conversation"]
        session = 1
        while f"session_{session}" in conversation:
            texts.extend(turn["text"] for turn in conversation[f"session_{session}"])
            session += 1
    if len(texts) < n:
        raise SystemExit(f"{path} has only {len(texts)} turns, need {n}")
    return texts[:n]


def load_questions(path: Path, n: int) -> list[str]:
    """The first ``n`` QA questions of a LoCoMo-format file."""
    questions = [qa["question"] for sample in json.loads(path.read_text(encoding="utf-8")) for qa in sample["qa"]]
    return questions[:n]


def measure(
    embedder: Any, texts: list[str], questions: list[str], *, singles: int, repeat: int
) -> tuple[dict[str, float], np.ndarray]:
    """Load time, single-text p50 and batch throughput of one embedder; also returns its vectors."""
    progress(f"{type(embedder).__name__}: loading")
    started = time.perf_counter()
    embedder.load()
    load_ms = (time.perf_counter() - started) * 1000
    embedder.embed(texts[:8])  # warm-up: first runs allocate buffers and pick kernels

    progress(f"{type(embedder).__name__}: {singles} single-text calls")
    latencies = []
    for text in texts[:singles]:
        started = time.perf_counter()
        embedder.embed([text])
        latencies.append((time.perf_counter() - started) * 1000)
    query_latencies = []
    for text in questions[:singles]:
        started = time.perf_counter()
        embedder.embed([text])
        query_latencies.append((time.perf_counter() - started) * 1000)

    runs = []
    vectors = np.empty(0)
    for run in range(repeat):
        progress(f"{type(embedder).__name__}: batch of {len(texts)} ({run + 1}/{repeat})")
        started = time.perf_counter()
        vectors = embedder.embed(texts)
        runs.append(time.perf_counter() - started)
    figures = {
        "load_ms": round(load_ms, 1),
        "single_p50_ms": round(statistics.median(latencies), 2),
        "single_p95_ms": round(statistics.quantiles(latencies, n=20)[-1], 2),
        "query_p50_ms": round(statistics.median(query_latencies), 2),
        "throughput_texts_per_s": round(len(texts) / min(runs), 1),
    }
    return figures, vectors


def progress(message: str) -> None:
    if sys.stderr.isatty():
        print(f"\r\033[K{message}...", end="", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="LoCoMo-format JSON file")
    parser.add_argument("--n", type=int, default=512, help="number of texts")
    parser.add_argument("--singles", type=int, default=200, help="texts timed one at a time")
    parser.add_argument("--repeat", type=int, default=3, help="batch runs; the best counts")
    parser.add_argument("--threads", type=int, default=None, help="ONNX intra-op threads (default: all cores)")
    parser.add_argument("--no-spin", action="store_true", help="ONNX worker threads do not busy-wait")
    parser.add_argument("--batch-size", type=int, default=16, help="ONNX internal batch size")
    parser.add_argument("--model-dir", type=Path, default=None, help="directory with model.onnx")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)

    texts = load_texts(args.data, args.n)
    questions = load_questions(args.data, args.singles)
    options = {"threads": args.threads, "batch_size": args.batch_size, "spin": not args.no_spin}
    result: dict[str, Any] = {
        "texts": len(texts),
        "targets": TARGETS,
        # Timings on a shared machine mean little without the load they were taken under.
        "cpus": default_threads(),
        "load_average_1m": round(os.getloadavg()[0], 2),
        **options,
    }
    with tempfile.TemporaryDirectory() as cache:
        os.environ[quantize.ENV_MODEL_CACHE] = cache
        progress("onnx int8: first load on a new machine (prepares the int8 model)")
        first = OnnxMiniLMEmbedder(args.model_dir, **options)
        first.load()
        result["onnx_int8_first_load_ms"] = round(first.load_ms or 0.0, 1)
        vectors: dict[str, np.ndarray] = {}
        for key, embedder in (
            ("onnx_int8", OnnxMiniLMEmbedder(args.model_dir, **options)),
            ("onnx_float", OnnxMiniLMEmbedder(args.model_dir, quantize=False, **options)),
        ):
            figures, vectors[key] = measure(embedder, texts, questions, singles=args.singles, repeat=args.repeat)
            result[key] = {**figures, "origin": embedder.origin}
    if importlib.util.find_spec("sentence_transformers") is not None:
        st = SentenceTransformersEmbedder()
        st_figures, st_vectors = measure(st, texts, questions, singles=args.singles, repeat=args.repeat)
        result["sentence_transformers"] = {**st_figures, "origin": st.origin}
        for key in ("onnx_int8", "onnx_float"):
            result[key]["throughput_ratio_over_st"] = round(
                result[key]["throughput_texts_per_s"] / st_figures["throughput_texts_per_s"], 2
            )
            result[key]["mean_cosine_to_st"] = round(float(np.mean(np.sum(vectors[key] * st_vectors, axis=1))), 5)
    if sys.stderr.isatty():
        print("\r\033[K", end="", file=sys.stderr, flush=True)

    if args.json:
        print(json.dumps(result))
        return 0
    print(f"{len(texts)} texts from {args.data.name}, {result['cpus']} CPUs, load average {result['load_average_1m']}")
    for label, key in (
        ("onnx int8 (default)", "onnx_int8"),
        ("onnx float (shipped)", "onnx_float"),
        ("sentence-transformers", "sentence_transformers"),
    ):
        figures = result.get(key)
        if figures is None:
            print(f"{label:22} not installed (pip install 'remindful[st]' to compare)")
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
        print(line)
    print(
        "onnx int8 first load on a new machine (prepares the int8 model once): "
        f"{result['onnx_int8_first_load_ms']:.0f} ms"
    )
    print(f"targets: single <= {TARGETS['single_p50_ms']} ms, load <= {TARGETS['load_ms']:.0f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
