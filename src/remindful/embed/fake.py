"""A deterministic, model-free embedder for tests: feature hashing of words."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

_WORD = re.compile(r"\w+")
# Weight of a word's 4-character prefix relative to the word: enough that "login" and "logins"
# are near neighbours, small enough that unrelated words sharing a prefix stay apart.
_PREFIX_WEIGHT = 0.5


@lru_cache(maxsize=65536)
def _feature(token: str, dimension: int) -> tuple[int, float]:
    """The (index, sign) a token hashes to; blake2b because ``hash()`` is salted per process."""
    digest = hashlib.blake2b(token.encode("utf-8"), digest_size=8).digest()
    value = int.from_bytes(digest, "little")
    return value % dimension, 1.0 if (value >> 63) & 1 else -1.0


class FakeEmbedder:
    """Bag-of-words vectors by signed feature hashing: same text, same vector, in any process.

    Texts sharing words get a positive cosine, texts sharing none get about zero, which is enough
    for tests of hybrid search to make sense. Rows are L2-normalised; a text without any word
    (including the empty string) maps to one fixed unit vector. ``calls`` counts ``embed`` calls
    and ``texts_embedded`` the texts they received, so tests can check what a cache saved.
    """

    def __init__(self, dimension: int = 384) -> None:
        if dimension < 2:
            raise ValueError(f"dimension must be at least 2, got {dimension}")
        self._dimension = dimension
        self.calls = 0
        self.texts_embedded = 0

    @property
    def name(self) -> str:
        return f"fake-hash-{self._dimension}"

    @property
    def dimension(self) -> int:
        return self._dimension

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """A ``(len(texts), dimension)`` float32 array of unit rows."""
        if isinstance(texts, str):
            raise TypeError("embed() takes a sequence of texts, not a single string")
        self.calls += 1
        self.texts_embedded += len(texts)
        out = np.zeros((len(texts), self._dimension), dtype=np.float32)
        for row, text in enumerate(texts):
            vector = out[row]
            for word in _WORD.findall(text.lower()):
                index, sign = _feature(word, self._dimension)
                vector[index] += sign
                if len(word) > 4:
                    index, sign = _feature(word[:4] + "#", self._dimension)
                    vector[index] += sign * _PREFIX_WEIGHT
            norm = float(np.linalg.norm(vector))
            if norm == 0.0:
                # No words, or features that cancelled out: a fixed direction keeps the row unit-length.
                vector[0] = 1.0
            else:
                vector /= norm
        return out

    def __repr__(self) -> str:
        return f"FakeEmbedder(dimension={self._dimension}, calls={self.calls})"
