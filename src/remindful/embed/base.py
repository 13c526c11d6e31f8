"""The embedder protocol: text in, L2-normalised float32 vectors out."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into unit vectors.

    ``embed`` returns a ``(len(texts), dimension)`` float32 array whose rows have L2 norm 1,
    so cosine similarity is a dot product. ``name`` identifies the model and is part of every
    cache key: two embedders with the same name must produce the same vectors.
    """

    @property
    def name(self) -> str: ...

    @property
    def dimension(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...


class EmbeddingStore(Protocol):
    """Persistent embedding cache keyed by (model name, content hash); the catalog implements it."""

    def get_cached_embeddings(self, model: str, hashes: Sequence[str]) -> dict[str, np.ndarray]: ...

    def put_cached_embeddings(self, model: str, items: dict[str, np.ndarray]) -> None: ...
