"""How the catalog stores a vector: int8 with a scale, a quarter of float32's bytes.

A stored vector is ``b"q"``, its scale as a little-endian float32, then one signed byte per
component (``round(x / scale)``, ``scale = max |x| / 127``): 389 bytes for 384 dimensions, against
1,536 as float32. The error is at most half a step (``scale / 2``) a component: for the unit vectors
the embedder gives, a cosine moves by well under 0.001, below what ranks memories apart. The Chroma
index keeps its own float32 copy; the catalog's serves exact scoring, session neighbourhoods,
dedup and export.

Rows written before (plain little-endian float32, ``4 * d`` bytes) stay readable: a quantised
blob's length is ``d + 5``, which is never a multiple of 4 when ``d`` is, and a vector whose length
is not a multiple of 4 is stored as float32.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

_TAG = b"q"
_HEAD = 5  # the tag and the scale


def encode(vector: np.ndarray | None) -> bytes | None:
    """The blob the catalog stores for ``vector`` (None for None)."""
    if vector is None:
        return None
    values = np.ascontiguousarray(vector, dtype=np.float32).reshape(-1)
    finite = bool(np.all(np.isfinite(values)))
    top = float(np.max(np.abs(values))) if len(values) and finite else 0.0
    scale = np.float32(top / 127.0 if top > 0 else 1.0)
    if len(values) % 4 or not finite or scale == 0:  # a scale so small it underflows: kept as they are
        return values.astype("<f4").tobytes()
    codes = np.clip(np.rint(values / scale), -127, 127).astype(np.int8)
    return _TAG + np.asarray([scale], dtype="<f4").tobytes() + codes.tobytes()


def stored_size(dimension: int) -> int:
    """The bytes :func:`encode` gives a vector of ``dimension`` finite numbers."""
    return 1 + 4 + dimension if dimension % 4 == 0 else 4 * dimension


def is_quantised(blob: bytes) -> bool:
    return len(blob) % 4 == 1 and blob[:1] == _TAG


def decode(blob: bytes) -> np.ndarray:
    """The float32 vector of a stored blob (either form)."""
    if is_quantised(blob):
        scale = np.frombuffer(blob, dtype="<f4", count=1, offset=1)[0]
        return np.frombuffer(blob, dtype=np.int8, offset=_HEAD).astype(np.float32) * scale
    return np.frombuffer(blob, dtype="<f4").astype(np.float32, copy=False)


def decode_bytes(blob: bytes) -> bytes:
    """A stored blob as plain float32 bytes (for callers that join many)."""
    return blob if not is_quantised(blob) else decode(blob).tobytes()


def dimension(blob: bytes) -> int:
    """The number of components of a stored blob."""
    return len(blob) - _HEAD if is_quantised(blob) else len(blob) // 4


def matrix(blobs: Sequence[bytes]) -> np.ndarray:
    """Stored blobs as an (n, d) float32 matrix."""
    unpacked = int8_codes(blobs)
    if unpacked is not None:
        # All of one form and size (the rule): decoded at once, not row by row (a fresh process's first
        # search scores a large store's vectors exactly from the catalog; 100,000 rows took seconds).
        codes, scales = unpacked
        out = codes.astype(np.float32)
        out *= scales[:, None]
        return out
    if not any(is_quantised(b) for b in blobs):
        return np.frombuffer(b"".join(blobs), dtype="<f4").reshape(len(blobs), -1).astype(np.float32, copy=False)
    return np.stack([decode(b) for b in blobs])


def int8_codes(blobs: Sequence[bytes]) -> tuple[np.ndarray, np.ndarray] | None:
    """:func:`unpack` if every blob is an int8 vector and all are of one size, else None."""
    if blobs and all(is_quantised(b) for b in blobs) and len({len(b) for b in blobs}) == 1:
        return unpack(blobs)
    return None


def unpack(blobs: Sequence[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """int8 blobs of one size as their (n, d) int8 codes and their (n,) float32 scales, at once."""
    rows = np.frombuffer(b"".join(blobs), dtype=np.uint8).reshape(len(blobs), -1)
    return rows[:, _HEAD:].view(np.int8), rows[:, 1:_HEAD].copy().view("<f4").reshape(-1)


#: Rows of int8 codes made float32 at a time to be scored (3 MB at 384 dimensions): a 20,000-row
#: scope's codes made float32 whole (30 MB, out of the caches) took 5.5 ms a search, by parts 3.1 ms;
#: the snapshot's 1,000,000 records, 16,384 at a time, 0.30 s, by parts 0.19 s.
SCORE_ROWS = 2048


def cosines(codes: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Each row of the int8 ``codes`` times ``query`` (float32), the rows made float32 a part at a
    time into one buffer. With ``einsum``, one thread: OpenBLAS's threads spin on a busy machine
    (:data:`remindful.engine.index_snapshot.SCAN_ROWS`)."""
    out = np.empty(len(codes), dtype=np.float32)
    buffer = np.empty((min(SCORE_ROWS, len(codes)), codes.shape[1]), dtype=np.float32)
    for start in range(0, len(codes), SCORE_ROWS):
        stop = min(start + SCORE_ROWS, len(codes))
        part = buffer[: stop - start]
        np.copyto(part, codes[start:stop], casting="unsafe")
        np.einsum("ij,j->i", part, query, out=out[start:stop])
    return out


__all__ = ["cosines", "decode", "decode_bytes", "dimension", "encode", "int8_codes", "is_quantised", "matrix", "unpack"]
