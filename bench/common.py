"""What the benches share: where the data is, the command line, timing, the machine note, scratch stores.

The data option
---------------
A bench that reads the LoCoMo data takes ``--data PATH`` (a LoCoMo-format JSON file). Its default,
decided here and nowhere else:

1. the environment variable ``REMINDFUL_BENCH_DATA``, if set;
2. else ``<repo>/../shared/data/locomo_dev.json``: the ``shared/`` folder beside the repository,
   where ``<repo>`` is the folder that holds ``bench/`` (found once, from this file's place).

The paraphrase bench reads ``personachat_dev.json`` the same way (``$REMINDFUL_BENCH_PERSONACHAT``,
else ``<repo>/../shared/data/personachat_dev.json``). The data stays there: never copy it into the
repository (shared/data/README.md says why).

Embeddings of a data set can be kept on disk between runs (``--embedding-cache PATH``,
:class:`DiskEmbedder`): experiments then cost the ranking, not the model.

Using it
--------
The benches run as scripts (``python bench/perf.py``), and Python puts a script's own folder first on
``sys.path``, so ``from common import ...`` finds this module. It imports only the standard library
when loaded; remindful is imported inside the functions that need it, because ``perf.py --compare``
runs the same measuring code against an older tree whose package layout differs.

Every bench prints its figures next to a baseline measured in the same run, and the machine note
(cores, load average): timings on a shared machine mean little without the load they were taken
under. Past figures belong in those outputs, not in comments.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

#: The repository: the folder that holds ``bench/``.
REPO = Path(__file__).resolve().parent.parent
#: The environment variable that overrides the default of ``--data``.
DATA_ENV = "REMINDFUL_BENCH_DATA"
#: The same for the paraphrase bench's data.
PERSONACHAT_ENV = "REMINDFUL_BENCH_PERSONACHAT"
#: The same for the LongMemEval bench's data.
LONGMEMEVAL_ENV = "REMINDFUL_BENCH_LONGMEMEVAL"
#: Each data set: its environment variable and its file under ``<repo>/../shared/data/``.
DATA_SETS = {
    "locomo": (DATA_ENV, "locomo_dev.json"),
    "personachat": (PERSONACHAT_ENV, "personachat_dev.json"),
    "longmemeval": (LONGMEMEVAL_ENV, "longmemeval_dev.json.xz"),
}


def default_data(kind: str = "locomo") -> Path:
    """The default of ``--data``: ``$REMINDFUL_BENCH_DATA``, else ``<repo>/../shared/data/locomo_dev.json``
    (``kind="personachat"``: ``$REMINDFUL_BENCH_PERSONACHAT``, else ``.../personachat_dev.json``)."""
    env, name = DATA_SETS[kind]
    configured = os.environ.get(env)
    if configured:
        return Path(configured).expanduser()
    return REPO.parent / "shared" / "data" / name


# -- the command line ----------------------------------------------------------------------------


def parser(doc: str | None) -> argparse.ArgumentParser:
    """A bench's parser: its module docstring as the description (kept as written) and ``--json``."""
    result = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    result.add_argument("--json", action="store_true", help="print one JSON object instead of the text lines")
    return result


def add_data_option(parser: argparse.ArgumentParser, *, conversations: bool = False, kind: str = "locomo") -> None:
    """``--data PATH``, the one way a bench is told where its data is (see this module's docstring):
    the LoCoMo data, or with ``kind="personachat"`` the paraphrase data; with ``conversations``,
    ``--conversations N`` too (only the first N of them)."""
    if conversations:
        parser.add_argument("--conversations", type=int, default=None, help="only the first N conversations")
    env, name = DATA_SETS[kind]
    what = {"locomo": "LoCoMo-format JSON file", "personachat": "PersonaChat paraphrase JSON file"}.get(
        kind, "LongMemEval JSON file (xz-compressed)"
    )
    parser.add_argument(
        "--data",
        type=Path,
        default=default_data(kind),
        metavar="PATH",
        help=f"{what} (default: ${env}, else <repo>/../shared/data/{name}; now %(default)s)",
    )


def add_embedding_cache_option(parser: argparse.ArgumentParser) -> None:
    """``--embedding-cache PATH``: keep the model's vectors of every text (memories and queries) in
    this SQLite file between runs (:class:`DiskEmbedder`)."""
    parser.add_argument(
        "--embedding-cache",
        type=Path,
        default=None,
        metavar="PATH",
        help="reuse the model's vectors across runs from this SQLite file, queries included (for experiments; "
        "ingest and search times are then not comparable)",
    )


def overrides(pairs: list[str]) -> dict[str, Any]:
    """``KEY=VALUE`` pairs as settings; a VALUE that looks like JSON (a number, list, object, true/false) is read so."""
    result: dict[str, Any] = {}
    for pair in pairs:
        key, _, value = pair.partition("=")
        result[key] = json.loads(value) if value[:1] in "0123456789-[{tf" else value
    return result


def emit(result: dict[str, Any], as_json: bool, lines: Callable[[dict[str, Any]], Iterable[str]]) -> None:
    """Print ``result`` as one JSON object, or the text ``lines(result)`` followed by the machine note."""
    if as_json:
        print(json.dumps(result))
        return
    for line in lines(result):
        print(line)
    if "machine" in result:
        print(machine_note(result["machine"]))


# -- timing --------------------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q`` quantile (``0 <= q <= 1``) of ``values``, which must not be empty: the
    value at index ``int(q * n)`` of the sorted values, so the p50 of an even count is the upper middle."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def pct(values: Sequence[float], q: float, digits: int = 3) -> float:
    """:func:`percentile`, rounded for printing."""
    return round(percentile(values, q), digits)


def timed(fn: Callable[..., T], *args: Any, **kwargs: Any) -> tuple[float, T]:
    """Wall seconds of one call ``fn(*args, **kwargs)``, and what it returned."""
    started = time.perf_counter()
    result = fn(*args, **kwargs)
    return time.perf_counter() - started, result


def elapsed_ms(fn: Callable[..., object], *args: Any, **kwargs: Any) -> float:
    """Wall milliseconds of one call ``fn(*args, **kwargs)``."""
    return timed(fn, *args, **kwargs)[0] * 1000


def figure(value: float) -> str:
    """``value`` with three significant digits or more, never in exponent form."""
    if value >= 100:
        return f"{value:.0f}"
    if value >= 10:
        return f"{value:.1f}"
    if value >= 1:
        return f"{value:.2f}"
    return f"{value:.3g}"


def versus(
    name: str, value: float, baseline_name: str, baseline: float, *, unit: str = "ms", ratio: float | None = None
) -> str:
    """One line: a figure, its same-run baseline and their ratio; ``ratio`` defaults to ``value / baseline``
    (pass the ratio of the unrounded figures when these are rounded)."""
    if ratio is None and baseline:
        ratio = value / baseline
    times = "n/a" if ratio is None else f"{ratio:.2f}x"
    return f"{name} {figure(value)} {unit} vs {baseline_name} {figure(baseline)} {unit} = {times}"


# -- the machine ---------------------------------------------------------------------------------


def cores() -> int:
    """The CPU cores this process may run on (the affinity mask, which containers narrow)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def machine() -> dict[str, Any]:
    """The cores and the 1-minute load average now: call it at the end of a run, when the average
    covers the measurements."""
    return {"cpus": cores(), "load_average_1m": round(os.getloadavg()[0], 2)}


def machine_note(info: dict[str, Any]) -> str:
    return f"machine: {info['cpus']} CPUs, load average {info['load_average_1m']} (1 min) at the end of the run"


def progress(message: str | None) -> None:
    """Show what a long run is doing on a terminal's stderr (``None`` clears the line); silent otherwise,
    so piped and ``--json`` output stays clean."""
    if not sys.stderr.isatty():
        return
    if message is None:
        print("\r\033[K", end="", file=sys.stderr, flush=True)
    else:
        print(f"\r\033[K{message}...", end="", file=sys.stderr, flush=True)


# -- stores --------------------------------------------------------------------------------------


@contextlib.contextmanager
def scratch_dir(prefix: str = "remindful-bench-") -> Iterator[Path]:
    """A temporary folder for stores, removed afterwards (what cannot be removed is left behind)."""
    with tempfile.TemporaryDirectory(prefix=prefix, ignore_cleanup_errors=True) as tmp:
        yield Path(tmp)


def fake_store(path: Path, *, index: str = "memory", **settings: Any) -> Any:
    """A store at ``path`` with the fake embedder, so that a figure is about storage and not the model;
    ``index`` is ``"memory"`` (the in-memory index) or ``"chroma"`` (the configured default, embedded
    Chroma). ``settings`` are dotted setting overrides, as ``remindful.open`` takes them."""
    import remindful
    from remindful.embed import FakeEmbedder

    if index == "memory":
        from remindful.index import InMemoryIndex

        settings["index"] = InMemoryIndex()
    elif index != "chroma":
        raise ValueError(f"index must be 'memory' or 'chroma', not {index!r}")
    return remindful.open(path, embedder=FakeEmbedder(), **settings)


# -- the LoCoMo data -----------------------------------------------------------------------------


def load_locomo(path: Path) -> list[dict[str, Any]]:
    """The samples of a LoCoMo-format file (``shared/data/README.md`` describes the format)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SystemExit(f"no LoCoMo data at {path}: pass --data PATH or set {DATA_ENV}") from None
    data: list[dict[str, Any]] = json.loads(text)
    return data


def sessions(conversation: dict[str, Any]) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """Each session of a LoCoMo conversation in order: its date text ("1:56 pm on 8 May, 2023") and
    its turns (``speaker``, ``dia_id``, ``text``)."""
    n = 1
    while f"session_{n}" in conversation:
        yield conversation.get(f"session_{n}_date_time", ""), conversation[f"session_{n}"]
        n += 1


def turn_texts(data: Iterable[dict[str, Any]], *, speaker: bool = False) -> list[str]:
    """Every turn's text in session order, as ``"Speaker: text"`` with ``speaker``."""
    return [
        f"{turn['speaker']}: {turn['text']}" if speaker else turn["text"]
        for sample in data
        for _, turns in sessions(sample["conversation"])
        for turn in turns
    ]


def logistic(x: Any, y: Any, l2: float, row_weights: Any = None) -> tuple[Any, float]:
    """Raw-unit weights and bias of a class-balanced, L2-regularised logistic regression of labels
    ``y`` (0 or 1) on the rows of ``x``: features standardised, Newton's method, then expressed in
    the features' own units (the fitting benches' models). ``row_weights``: each row's weight (default
    1), applied before the classes are balanced."""
    import numpy as np

    mean, scale = x.mean(0), x.std(0) + 1e-9
    z = np.hstack([(x - mean) / scale, np.ones((len(x), 1))])
    given = np.ones(len(y)) if row_weights is None else np.asarray(row_weights, dtype=float)
    positive = (given * (y > 0)).sum()
    sample = given * np.where(y > 0, (given.sum() - positive) / max(positive, 1e-9), 1.0)
    w = np.zeros(z.shape[1])
    for _ in range(30):
        p = 1 / (1 + np.exp(-(z @ w)))
        gradient = z.T @ (sample * (p - y)) + l2 * len(y) * w
        hessian = (z * (sample * p * (1 - p))[:, None]).T @ z + l2 * len(y) * np.eye(len(w))
        w -= np.linalg.solve(hessian, gradient)
    weights = w[:-1] / scale
    return weights, float(w[-1] - mean @ weights)


# -- embeddings kept between runs, and the two same-run baselines -----------------------------------


class DiskEmbedder:
    """The default embedder (ONNX MiniLM) with the vectors of every call kept in a SQLite file, keyed
    by the call's texts in order: memories and queries alike, so a second run of a bench computes
    none. Keyed by the whole call, because the int8 model moves a vector slightly with the texts
    batched beside it: a run with the cache gives exactly the figures of a run without it."""

    def __init__(self, path: Path) -> None:
        import sqlite3

        from remindful.embed import OnnxMiniLMEmbedder

        self.inner = OnnxMiniLMEmbedder()
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(path, check_same_thread=False)
        self._db.execute("CREATE TABLE IF NOT EXISTS calls (key TEXT PRIMARY KEY, vectors BLOB NOT NULL)")

    @property
    def name(self) -> str:
        return str(self.inner.name)

    @property
    def dimension(self) -> int:
        return int(self.inner.dimension)

    def _cached(self, kind: str, texts: Sequence[str], compute: Callable[[], Any]) -> Any:
        import hashlib

        import numpy as np

        key = hashlib.sha256("\x00".join([kind, *texts]).encode("utf-8", "surrogatepass")).hexdigest()
        found = self._db.execute("SELECT vectors FROM calls WHERE key = ?", [key]).fetchone()
        if found is not None:
            return np.frombuffer(found[0], dtype=np.float32).reshape(len(texts), -1)
        vectors = np.ascontiguousarray(compute(), dtype=np.float32).reshape(len(texts), -1)
        self._db.execute("INSERT OR REPLACE INTO calls VALUES (?, ?)", [key, vectors.tobytes()])
        self._db.commit()
        return vectors

    def embed(self, texts: Sequence[str]) -> Any:
        return self._cached("embed", list(texts), lambda: self.inner.embed(list(texts)))

    def embed_query(self, text: str) -> Any:
        return self._cached("query", [text], lambda: self.inner.embed_query(text))[0]


def embedder_option(path: Path | None) -> Any:
    """The embedder a bench stores and searches with: a :class:`DiskEmbedder` on ``path``, or None
    (the store's default)."""
    return None if path is None else DiskEmbedder(path)


def cosine_rankings(embedder: Any, texts: Sequence[str], queries: Sequence[str], k: int) -> list[list[int]]:
    """Plain cosine search, the baseline a vector store gives: for each query, the indexes of the
    ``k`` texts of highest cosine with it, best first (``embedder``: the store's own; None: the default)."""
    import numpy as np

    if embedder is None:
        from remindful.embed import OnnxMiniLMEmbedder

        embedder = OnnxMiniLMEmbedder()
    matrix = np.asarray(embedder.embed(list(texts)), dtype=np.float32)
    ask = getattr(embedder, "embed_query", None)
    result = []
    for query in queries:
        vector = ask(query) if ask is not None else embedder.embed([query])[0]
        scores = matrix @ np.asarray(vector, dtype=np.float32)
        result.append([int(i) for i in np.argsort(-scores, kind="stable")[:k]])
    return result


def bm25_rankings(texts: Sequence[str], queries: Sequence[str], k: int) -> list[list[int]]:
    """Plain BM25, the keyword baseline: SQLite FTS5 with remindful's tokenizer (porter stemming)
    over the texts, every word of the query OR-ed (no stopword list: a stock BM25); for each query,
    the indexes of its first ``k`` matches, best first (none when no word matches)."""
    import re
    import sqlite3

    from remindful.engine.lexical import fts_or

    def lexical_terms(query: str) -> list[str]:
        return list(dict.fromkeys(re.findall(r"\w+", query.lower())))

    db = sqlite3.connect(":memory:")
    db.execute("CREATE VIRTUAL TABLE t USING fts5(text, tokenize='porter unicode61 remove_diacritics 2')")
    db.executemany("INSERT INTO t (rowid, text) VALUES (?, ?)", list(enumerate(texts)))
    result = []
    for query in queries:
        terms = lexical_terms(query)
        sql = "SELECT rowid FROM t WHERE t MATCH ? ORDER BY bm25(t) LIMIT ?"
        found = db.execute(sql, [fts_or(terms), k]).fetchall() if terms else []
        result.append([int(r[0]) for r in found])
    db.close()
    return result


# -- the injection decision beside a plain cosine threshold ------------------------------------------


def cosine_at_abstention(
    relevant_ranks: Sequence[tuple[int | None, float]], abstention_best: Sequence[float], abstained: float, k: int = 5
) -> float:
    """The recall a plain cosine threshold gets when set to abstain as often as the context block
    does: ``abstained`` (the context's share of abstention queries given nothing) picks the
    threshold under which that share of ``abstention_best`` (each abstention query's best cosine)
    falls; a query's relevant memory is then "injected" when it is in the first ``k`` by cosine
    (``relevant_ranks``: its rank, None when not there, and its cosine) and at/above the threshold."""
    import numpy as np

    if not relevant_ranks:
        return 0.0
    best = np.sort(np.asarray(abstention_best, dtype=np.float64))
    if len(best) == 0 or abstained <= 0:
        threshold = -np.inf
    elif abstained >= 1:
        threshold = float(best[-1]) + 1e-9
    else:
        # The smallest threshold that leaves round(abstained * n) of them under it.
        under = round(abstained * len(best))
        threshold = -np.inf if under == 0 else float(best[under - 1]) + 1e-9
    kept = sum(rank is not None and rank <= k and score >= threshold for rank, score in relevant_ranks)
    return kept / len(relevant_ranks)


def cosine_ranked(embedder: Any, texts: Sequence[str], queries: Sequence[str], k: int) -> list[list[tuple[int, float]]]:
    """:func:`cosine_rankings` with each text's cosine: for each query, ``(index, cosine)`` of its
    first ``k`` texts, best first."""
    import numpy as np

    if embedder is None:
        from remindful.embed import OnnxMiniLMEmbedder

        embedder = OnnxMiniLMEmbedder()
    matrix = np.asarray(embedder.embed(list(texts)), dtype=np.float32)
    ask = getattr(embedder, "embed_query", None)
    result = []
    for query in queries:
        vector = ask(query) if ask is not None else embedder.embed([query])[0]
        scores = matrix @ np.asarray(vector, dtype=np.float32)
        order = np.argsort(-scores, kind="stable")[:k]
        result.append([(int(i), float(scores[i])) for i in order])
    return result
