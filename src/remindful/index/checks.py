"""Argument checks every index shares, so a call that works against the in-memory index works
against Chroma: collection names, metadata, upserts and queries."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from numbers import Integral, Real
from typing import Any

import numpy as np

from remindful.index.base import Scalar

__all__ = ["check_collection_name", "check_query", "check_upsert", "clean_metadata"]

# Chroma's own rule, applied to every backend so a name that works in tests works in production.
_NAME = re.compile(r"^[a-zA-Z0-9](?:[a-zA-Z0-9._-]{1,510})[a-zA-Z0-9]$")


def _scalar(value: object, where_: str) -> Scalar:
    """Normalise a filter operand or metadata value to a plain Python scalar, or raise."""
    if isinstance(value, bool | np.bool_):
        return bool(value)
    if isinstance(value, str):
        return value
    if isinstance(value, Integral):
        return int(value)
    if isinstance(value, Real):
        return float(value)
    raise ValueError(f"{where_}: expected a str, int, float or bool, got {value!r} ({type(value).__name__})")


def check_collection_name(name: str) -> str:
    """Return ``name`` if Chroma accepts it (3-512 chars of ``[a-zA-Z0-9._-]``, alphanumeric ends)."""
    if not isinstance(name, str) or not _NAME.match(name) or ".." in name:
        raise ValueError(
            f"Invalid collection name {name!r}: use 3-512 characters from [a-zA-Z0-9._-], "
            "starting and ending with a letter or digit (e.g. 'screen_memories')"
        )
    return name


def clean_metadata(metadata: Mapping[str, Any]) -> dict[str, Scalar]:
    """Drop ``None`` values and normalise the rest to bool/int/float/str (numpy scalars included).

    Raises ``ValueError`` naming the key for nested or unsupported values.
    """
    out: dict[str, Scalar] = {}
    for key, value in metadata.items():
        if not isinstance(key, str) or not key or key.startswith(("$", "#")):
            raise ValueError(f"Invalid metadata key {key!r}: use a non-empty string not starting with '$' or '#'")
        if value is not None:
            out[key] = _scalar(value, f"metadata {key!r}")
    return out


def check_upsert(
    ids: Sequence[str], embeddings: np.ndarray, metadatas: Sequence[Mapping[str, Any]]
) -> tuple[list[str], np.ndarray, list[dict[str, Scalar]]]:
    """Validate upsert arguments; return ids, a float32 ``(n, d)`` array and cleaned metadata."""
    ids = list(ids)
    vectors = np.asarray(embeddings, dtype=np.float32)
    if vectors.ndim != 2:
        raise ValueError(f"embeddings must be a 2-D array (n, dim), got shape {vectors.shape}")
    if not (len(ids) == vectors.shape[0] == len(metadatas)):
        raise ValueError(
            f"ids, embeddings and metadatas must have the same length, got {len(ids)}, "
            f"{vectors.shape[0]} and {len(metadatas)}"
        )
    if any(not isinstance(i, str) or not i for i in ids):
        raise ValueError("ids must be non-empty strings")
    if len(set(ids)) != len(ids):
        raise ValueError("ids must be unique within one upsert call")
    if not np.isfinite(vectors).all():
        raise ValueError("embeddings contain NaN or infinite values")
    return ids, vectors, [clean_metadata(m) for m in metadatas]


def check_query(embedding: np.ndarray, k: int) -> np.ndarray:
    """Validate query arguments; return the query as a float32 1-D vector."""
    if isinstance(k, bool) or not isinstance(k, Integral) or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    vector = np.asarray(embedding, dtype=np.float32)
    if vector.ndim == 2 and vector.shape[0] == 1:
        vector = vector[0]
    if vector.ndim != 1:
        raise ValueError(f"query embedding must be a 1-D vector, got shape {vector.shape}")
    return vector
