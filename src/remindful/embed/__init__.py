"""Embedders: the protocol, the ONNX default, the sentence-transformers extra, the cache and the fake.

Importing this package imports numpy only: onnxruntime, tokenizers and torch load on first use.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from remindful.embed.base import Embedder, EmbeddingStore
from remindful.embed.cache import CachedEmbedder
from remindful.embed.fake import FakeEmbedder
from remindful.embed.onnx import ModelFiles, OnnxMiniLMEmbedder, resolve_model_files
from remindful.embed.st import SentenceTransformersEmbedder
from remindful.errors import ConfigError

__all__ = [
    "BACKENDS",
    "CachedEmbedder",
    "Embedder",
    "EmbeddingStore",
    "FakeEmbedder",
    "ModelFiles",
    "OnnxMiniLMEmbedder",
    "SentenceTransformersEmbedder",
    "default_embedder",
    "resolve_model_files",
]

Backend = Literal["onnx", "sentence-transformers", "fake"]
BACKENDS: tuple[str, ...] = ("onnx", "sentence-transformers", "fake")


def default_embedder(
    model_dir: Path | str | None = None,
    backend: Backend | str = "onnx",
    *,
    quantize: bool = True,
    batch_size: int = 32,
) -> Embedder:
    """A new, not yet loaded embedder for ``backend``, without a cache (wrap it in :class:`CachedEmbedder`).

    ``model_dir`` applies to the ONNX backend (see :func:`resolve_model_files`) and, when given, is the
    model path of the sentence-transformers backend; ``quantize`` (the fused int8 graph) and ``batch_size``
    (texts per model run, ``performance.embedding_batch_size``) to the ONNX backend.
    Raises :class:`ConfigError` for an unknown backend and :class:`DependencyMissingError` when
    sentence-transformers is asked for but missing.
    """
    if backend == "onnx":
        return OnnxMiniLMEmbedder(model_dir, quantize=quantize, batch_size=batch_size)
    if backend == "sentence-transformers":
        return SentenceTransformersEmbedder(model_dir) if model_dir is not None else SentenceTransformersEmbedder()
    if backend == "fake":
        return FakeEmbedder()
    raise ConfigError(
        "embeddings.backend", f"unknown embedder backend {backend!r}", suggestion=f"Use one of {', '.join(BACKENDS)}"
    )
