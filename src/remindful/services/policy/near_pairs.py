"""Near pairs: which rows of a matrix of unit vectors have a cosine similarity ≥ a threshold.

One answer shape, two ways of finding it:

- **Every pair** (groups of up to :data:`EXACT_ROWS` rows, or a threshold too low for hashing to
  pay): the similarities are computed in blocks of ``block`` rows (``block x n`` floats at once).
  Exact; quadratic in time (a 20,000-row group takes seconds, a 250,000-row one many minutes).
- **Random-hyperplane LSH** (larger groups): each row's sign bits over fixed random hyperplanes
  (one fixed seed: the same rows give the same pairs in every run, on either catalog backend) are cut
  into ``bands`` bands of ``bits`` bits; two rows are candidates when they agree on a whole band, and
  every candidate is verified by its exact dot product (no false pairs). A pair of cosine ``s`` agrees
  on one bit with probability ``p = 1 - arccos(s) / π``, so on some band with ``1 - (1 - p^bits)^bands``;
  :func:`plan` picks ``bands`` so that a pair *at the threshold* is found with probability
  ≥ :data:`RECALL` (a more similar pair more surely: at 0.98 against a threshold of 0.95 the miss
  probability is below 1e-8), and ``bits`` so that the expected work (hashing, plus verifying the
  chance collisions, about ``n · 2^-bits`` a row and band) is least. A bucket larger than
  :data:`BIG_BUCKET` rows (near-identical vectors) is compared within itself by blocks instead.
  Where the rows would list more than :data:`MAX_CANDIDATES` pairs (rows with hundreds of near
  copies each, estimated from a sample of pairs), no pair is listed: dedup asks for the neighbours of
  each cluster's leader as it comes (:meth:`NearPairs.of`: one search over every band's sorted keys),
  and the rows a leader takes are never asked for. The candidates, and so the pairs, are the same.

The work done is counted (:attr:`NearPairs.compared`: pairs whose similarity was computed) so tests
can check the growth without timing anything.
"""

from __future__ import annotations

import math

import numpy as np

#: Groups up to this many rows compare every pair (exact, and byte-identical to earlier releases).
EXACT_ROWS = 20_000
#: Probability that the LSH finds a pair exactly at the threshold (more similar pairs: more surely).
RECALL = 0.999
#: Rows per block of the exact comparisons.
BLOCK = 1024
#: A bucket of more rows is compared within itself by blocks, not pair by pair.
BIG_BUCKET = 2048
#: Seed of the hyperplanes (fixed: runs and backends agree).
SEED = 20_260_034
#: Candidate pairs held at once (beyond: every row's neighbours are found when it is asked for).
MAX_CANDIDATES = 20_000_000
#: Candidate pairs verified per step (two gathers of this many rows).
VERIFY_CHUNK = 32_768
#: Hash bits per row at most (beyond, hashing costs more than comparing: every pair is compared).
MAX_HASH_BITS = 4096
# Relative costs, per row and band, of hashing one bit, of sorting a band, of verifying one candidate.
# A pair sharing a band is listed (then sorted out, once a band) before it is verified once.
_BIT_COST, _BAND_COST, _OCCURRENCE_COST, _VERIFY_COST = 1.0, 30.0, 5.0, 30.0


def plan(n: int, threshold: float, chance: np.ndarray | None = None, recall: float = RECALL) -> tuple[int, int] | None:
    """``(bits, bands)`` of the cheapest banding that finds a pair at ``threshold`` among ``n`` rows
    with probability ≥ ``recall``; None when no banding of up to :data:`MAX_HASH_BITS` bits does
    (a low threshold: every pair is compared).

    ``chance``: the similarities of some random pairs of the rows (real embeddings are not spread
    evenly: two unrelated texts often have a cosine of 0.2, and collide more often than 2^-bits)."""
    p = 1.0 - math.acos(min(1.0, max(-1.0, threshold))) / math.pi
    agree = 0.5 if chance is None else 1.0 - np.arccos(np.clip(chance, -1.0, 1.0)) / math.pi
    best: tuple[float, int, int] | None = None
    for bits in range(8, 33):
        q = p**bits
        bands = 1 if q >= 1.0 else math.ceil(math.log(1.0 - recall) / math.log1p(-q))
        if bands * bits > MAX_HASH_BITS:
            continue
        collide = agree**bits  # a pair's chance to share one band, and to share some band
        found = float(np.mean(1.0 - (1.0 - collide) ** bands))
        per_pair = bands * float(np.mean(collide)) * _OCCURRENCE_COST + found * _VERIFY_COST
        cost = bands * (bits * _BIT_COST + _BAND_COST) + n / 2 * per_pair
        if best is None or cost < best[0]:
            best = (cost, bits, bands)
    return None if best is None else (best[1], best[2])


def listed(n: int, threshold: float, bits: int, bands: int, chance: np.ndarray) -> float:
    """How many pairs the bands of ``n`` rows are expected to list (a pair once a band it shares)."""
    agree = 1.0 - np.arccos(np.clip(chance, -1.0, 1.0)) / math.pi
    return bands * n * (n - 1) / 2 * float(np.mean(agree**bits))


def chance_similarities(matrix: np.ndarray, pairs: int = 4096) -> np.ndarray:
    """The similarities of ``pairs`` random pairs of rows (fixed seed)."""
    rng = np.random.default_rng(SEED)
    i, j = rng.integers(0, len(matrix), size=(2, pairs))
    return np.einsum("ij,ij->i", matrix[i], matrix[j])[i != j]


def _unique(codes: np.ndarray) -> np.ndarray:
    """The distinct values of ``codes``, ascending (a sort: numpy's hashing unique is slower here)."""
    codes = np.sort(codes)
    return codes[np.r_[True, codes[1:] != codes[:-1]]] if len(codes) else codes


class NearPairs:
    """The rows of ``matrix`` (unit vectors, float32) with a neighbour at cosine ≥ ``threshold``.

    :attr:`neighbours` maps each row that has a neighbour besides itself to its neighbours' indices
    (itself included, ascending), or to None once ``max_stored`` indices are held (then
    :meth:`of` finds them again when asked). Groups of up to ``exact_rows`` rows (default
    :data:`EXACT_ROWS`) compare every pair; ``banding`` (``(bits, bands)``) hashes whatever the
    size, as :func:`plan` would at another."""

    def __init__(
        self,
        matrix: np.ndarray,
        threshold: float,
        *,
        max_stored: int,
        exact_rows: int | None = None,
        block: int = BLOCK,
        banding: tuple[int, int] | None = None,
    ) -> None:
        self.matrix = matrix
        self.threshold = threshold
        self.block = block
        self.max_stored = max_stored
        #: Pairs whose similarity was computed (the work done; every pair is n·n).
        self.compared = 0
        self.neighbours: dict[int, np.ndarray | None] = {}
        self._keys: np.ndarray | None = None  # (bands, n) band keys, when hashed
        # When rows are asked for one by one: every band's keys sorted, band-major, as ``band << 32 |
        # key`` (so one search finds a row's bucket in every band), and the rows in that order.
        self._sorted: np.ndarray | None = None
        self._orders = np.empty(0, dtype=np.int32)
        if banding is None and len(matrix) > (EXACT_ROWS if exact_rows is None else exact_rows):
            banding = plan(len(matrix), threshold, chance := chance_similarities(matrix))
            # Rows with many near copies (hundreds each) list too many pairs to hold: a row's
            # neighbours are then found when it leads a cluster (the rows it takes are not asked).
            lazy = banding is not None and listed(len(matrix), threshold, *banding, chance) > MAX_CANDIDATES
            if lazy:  # no pair listed: fewer hash bits (the near pairs' collisions cost no listing now)
                banding = plan(len(matrix), threshold)
        else:
            lazy = False
        if banding is None:
            self._all_pairs()
        elif lazy:
            self._unstored(band_keys(self.matrix, *banding))
        else:
            self._hashed(*banding)

    # -- every pair -------------------------------------------------------------------------------

    def _all_pairs(self) -> None:
        matrix, threshold, block = self.matrix, self.threshold, self.block
        stored = 0
        for start in range(0, len(matrix), block):
            hit_rows, hit_cols = np.nonzero(matrix[start : start + block] @ matrix.T >= threshold)
            self.compared += min(block, len(matrix) - start) * len(matrix)
            bounds = np.searchsorted(hit_rows, np.arange(min(block, len(matrix) - start) + 1))
            for offset in np.flatnonzero(np.diff(bounds) > 1):
                cols = hit_cols[bounds[offset] : bounds[offset + 1]]
                stored += len(cols)
                self.neighbours[start + int(offset)] = cols.astype(np.int32) if stored <= self.max_stored else None

    # -- hashed -----------------------------------------------------------------------------------

    def _hashed(self, bits: int, bands: int) -> None:
        n = len(self.matrix)
        self._keys = keys = band_keys(self.matrix, bits, bands)
        pending: list[np.ndarray] = []
        verified: list[np.ndarray] = []
        candidates = np.empty(0, dtype=np.int64)
        held = 0
        for band in keys:
            small, big = _buckets(band)
            for rows in big:
                verified.append(self._within(rows))
            for pairs in small:
                pending.append(pairs)
                held += len(pairs)
            if held > max(MAX_CANDIDATES // 4, len(candidates)):  # amortised: each merge at least doubles
                candidates = _unique(np.concatenate([candidates, *pending]))
                pending, held = [], 0
                if len(candidates) > MAX_CANDIDATES:
                    self._unstored(keys)
                    return
        candidates = _unique(np.concatenate([candidates, *pending]))
        verified.append(self._verify(candidates, n))
        pairs = _unique(np.concatenate(verified))
        self._store(pairs, n)

    def _within(self, rows: np.ndarray) -> np.ndarray:
        """The pairs (as ``i * n + j`` codes, ``i < j``) at or above the threshold among ``rows``."""
        n, sub = len(self.matrix), self.matrix[rows]
        found: list[np.ndarray] = []
        for start in range(0, len(rows), self.block):
            a, b = np.nonzero(sub[start : start + self.block] @ sub.T >= self.threshold)
            self.compared += min(self.block, len(rows) - start) * len(rows)
            i, j = rows[a + start].astype(np.int64), rows[b].astype(np.int64)
            keep = i < j
            found.append(i[keep] * n + j[keep])
        return np.concatenate(found)

    def _verify(self, codes: np.ndarray, n: int) -> np.ndarray:
        """The candidate pair codes whose similarity is at or above the threshold."""
        kept: list[np.ndarray] = [np.empty(0, dtype=np.int64)]
        for start in range(0, len(codes), VERIFY_CHUNK):
            chunk = codes[start : start + VERIFY_CHUNK]
            i, j = np.divmod(chunk, n)
            sims = np.einsum("ij,ij->i", self.matrix[i], self.matrix[j])
            self.compared += len(chunk)
            kept.append(chunk[sims >= self.threshold])
        return np.concatenate(kept)

    def _store(self, pairs: np.ndarray, n: int) -> None:
        """Each row's neighbour list (itself included) from the verified pairs, ascending."""
        if not len(pairs):
            return
        i, j = np.divmod(pairs, n)
        rows = _unique(np.concatenate([i, j]))
        codes = np.sort(np.concatenate([pairs, j * n + i, rows * n + rows]))
        row_of, cols = np.divmod(codes, n)
        cols = cols.astype(np.int32)
        bounds = np.searchsorted(row_of, rows, side="left")
        ends = np.append(bounds[1:], len(codes))
        stored = 0
        for row, lo, hi in zip(rows.tolist(), bounds.tolist(), ends.tolist(), strict=True):
            stored += hi - lo
            self.neighbours[row] = cols[lo:hi] if stored <= self.max_stored else None

    def _unstored(self, keys: np.ndarray) -> None:
        """Too many candidates to hold: every row sharing a bucket is asked about when needed
        (:meth:`of` looks its buckets up in each band's rows sorted by key)."""
        self._keys = keys
        bands, n = keys.shape
        shared = np.zeros(n, dtype=bool)
        self._orders = np.empty(bands * n, dtype=np.int32)
        self._sorted = np.empty(bands * n, dtype=np.uint64)
        for b, band in enumerate(keys):
            order = np.argsort(band, kind="stable")
            ordered = band[order]
            self._orders[b * n : (b + 1) * n] = order
            self._sorted[b * n : (b + 1) * n] = ordered.astype(np.uint64) | np.uint64(b << 32)
            same = ordered[1:] == ordered[:-1]
            shared[order[1:][same]] = True
            shared[order[:-1][same]] = True
        self.neighbours = dict.fromkeys(np.flatnonzero(shared).tolist())

    # -- one row ----------------------------------------------------------------------------------

    def of(self, row: int, skip: np.ndarray | None = None) -> np.ndarray:
        """The neighbours of ``row`` (itself included, ascending), found again; but those where
        ``skip`` (a boolean per row) is true, when given."""
        if self._keys is None:
            self.compared += len(self.matrix)
            near = np.flatnonzero(self.matrix @ self.matrix[row] >= self.threshold)
            return near if skip is None else near[~skip[near]]
        if self._sorted is not None:
            bands = np.arange(len(self._keys), dtype=np.uint64)
            wanted = self._keys[:, row].astype(np.uint64) | (bands << np.uint64(32))
            lo = np.searchsorted(self._sorted, wanted)
            lengths = np.searchsorted(self._sorted, wanted, side="right") - lo
            ends = np.cumsum(lengths)
            at = np.repeat(lo - ends + lengths, lengths) + np.arange(ends[-1])  # every bucket's positions
            near = _unique(self._orders[at])
        else:
            near = np.flatnonzero((self._keys == self._keys[:, row : row + 1]).any(axis=0))
        if skip is not None:
            near = near[~skip[near]]
        self.compared += len(near)
        sims = self.matrix[near] @ self.matrix[row]
        return near[sims >= self.threshold]


def band_keys(matrix: np.ndarray, bits: int, bands: int, *, chunk: int = 16_384) -> np.ndarray:
    """Each row's key in each band: its sign bits over ``bits * bands`` fixed random hyperplanes,
    ``bits`` to a key; shape ``(bands, n)``, uint32."""
    planes = np.random.default_rng(SEED).standard_normal((matrix.shape[1], bits * bands)).astype(np.float32)
    weights = (np.uint32(1) << np.arange(bits, dtype=np.uint32)).astype(np.uint32)
    keys = np.empty((bands, len(matrix)), dtype=np.uint32)
    for start in range(0, len(matrix), chunk):
        signs = (matrix[start : start + chunk] @ planes >= 0).reshape(-1, bands, bits)
        keys[:, start : start + chunk] = (signs.astype(np.uint32) * weights).sum(axis=2, dtype=np.uint32).T
    return keys


def _buckets(band: np.ndarray) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """A band's candidate pairs (codes ``i * n + j``, ``i < j``) of its buckets of up to
    :data:`BIG_BUCKET` rows, and the rows of each bigger bucket."""
    n = len(band)
    order = np.argsort(band, kind="stable")
    ordered = band[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    sizes = np.diff(np.append(starts, n))
    bucket = np.repeat(np.arange(len(starts)), sizes)
    big = [order[starts[b] : starts[b] + sizes[b]] for b in np.flatnonzero(sizes > BIG_BUCKET)]
    # Positions (in key order) of the rows in buckets of 2..BIG_BUCKET rows; a bucket's rows are
    # consecutive, so a pair is two positions ``gap`` apart in the same bucket.
    size_at = sizes[bucket]
    at = np.flatnonzero((size_at >= 2) & (size_at <= BIG_BUCKET))
    small: list[np.ndarray] = []
    gap = 1
    while len(at) > gap:
        same = bucket[at[:-gap]] == bucket[at[gap:]]
        i, j = order[at[:-gap][same]].astype(np.int64), order[at[gap:][same]].astype(np.int64)
        small.append(np.minimum(i, j) * n + np.maximum(i, j))
        gap += 1
        at = at[size_at[at] > gap]
    return small, big


__all__ = ["BIG_BUCKET", "BLOCK", "EXACT_ROWS", "RECALL", "NearPairs", "band_keys", "chance_similarities", "plan"]
