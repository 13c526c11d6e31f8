"""Long memories seen whole: the vectors of their parts.

The embedder reads a text's first 256 word pieces (all-MiniLM-L6-v2's window, about 1,000
characters of English prose), and one vector of a text that talks of several things is the blur of
them all. A long memory (a chat session's turns joined, a long Markdown section, a long tool
output) is then close to no question, and whatever its later parts hold is not seen at all. So a
memory longer than :data:`LONG_CHARS` is also embedded in parts (:func:`split`: about
:data:`CHUNK_CHARS` each, the size of a chat turn or a paragraph, which holds one or two things as a
short memory does; cut at line ends, then sentence ends, then spaces, each part beginning with the
last short piece of the one before), and its cosine with a query is the best of its own
vector's and its parts' (:func:`best_cosines`): it is found by its best part, as the same text
stored as several memories would be.

The parts' vectors are derived data, like the index: kept in the catalog (``chunk_vectors``), by
the memory's rowid and for its text's hash (a part of an earlier text is never read), dropped with
their memory by a trigger, made by the store's embedding work right after the memory's own vector
(:class:`ChunkFiller`), and read for a search's long candidates only. A short memory has none: its
rows, its disk and its searches are as they were. They do not go to the vector index: candidates
still come from each memory's own vector and its words, and the parts judge them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

import numpy as np

from remindful.embed.base import Embedder

#: A memory longer than this (characters) is also embedded in parts: above about two parts' worth.
LONG_CHARS = 600
#: The size a part is cut to (characters), unless the text would need more than MAX_CHUNKS of them.
CHUNK_CHARS = 320
#: The most parts of one memory: a longer text has longer parts (beyond about 64,000 characters,
#: each part is seen only as far as the model's window).
MAX_CHUNKS = 64
#: The last piece of a part begins the next one when it is at most this share of a part: a
#: statement cut between two parts is then whole in one of them.
OVERLAP_SHARE = 0.25

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def is_long(text: str) -> bool:
    """Whether ``text`` is embedded in parts."""
    return len(text) > LONG_CHARS


def split(text: str) -> list[str]:
    """The parts of a long ``text`` (none for a short one): consecutive pieces of it, each about
    :data:`CHUNK_CHARS` long (longer when the text would need more than :data:`MAX_CHUNKS`),
    cut at line ends where they fall, else at sentence ends, else at spaces; a part's last piece
    opens the next part when it is short. Together they hold every word of the text."""
    if not is_long(text):
        return []
    size = max(CHUNK_CHARS, -(-len(text) // MAX_CHUNKS))
    pieces = _pieces(text, size)
    parts = _pack(pieces, size)
    while len(parts) > MAX_CHUNKS:  # whole pieces leave parts shorter than ``size``: pack more in each
        size = -(-size * len(parts) // MAX_CHUNKS) + 1
        parts = _pack(pieces, size)
    return parts


def _pack(pieces: Sequence[str], size: int) -> list[str]:
    """Consecutive ``pieces`` joined into parts of at most ``size`` characters (a piece longer than
    that is a part alone), a part's last piece opening the next when it is short."""
    parts: list[str] = []
    current: list[str] = []
    length = 0
    for piece in pieces:
        if current and length + len(piece) > size:
            parts.append(" ".join(current))
            last = current[-1]
            carried = len(last) <= size * OVERLAP_SHARE and len(last) + 1 + len(piece) <= size
            current, length = ([last], len(last) + 1) if carried else ([], 0)
        current.append(piece)
        length += len(piece) + 1
    if current:
        parts.append(" ".join(current))
    return parts


def _pieces(text: str, size: int) -> list[str]:
    """``text`` cut into pieces of at most ``size`` characters: its lines, a longer line at its
    sentence ends, a longer sentence at spaces (a word longer than ``size`` is cut where it must)."""
    pieces: list[str] = []
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        if len(line) <= size:
            pieces.append(line)
            continue
        for sentence in _SENTENCE_END.split(line):
            while len(sentence) > size:
                cut = sentence.rfind(" ", 0, size + 1)
                cut = cut if cut > 0 else size
                pieces.append(sentence[:cut].strip())
                sentence = sentence[cut:].strip()
            if sentence:
                pieces.append(sentence)
    return pieces


class ChunkStore(Protocol):
    """What the parts' vectors need of the catalog."""

    def long_without_chunks(self, ids: Sequence[str], min_chars: int) -> list[tuple[str, str, str]]:
        """``(id, content, content_hash)`` of those of ``ids`` longer than ``min_chars`` whose
        parts' vectors are not stored for their present text."""
        ...

    def set_chunk_vectors(self, items: Mapping[str, tuple[str, np.ndarray]]) -> None:
        """Store each memory's parts' vectors (an (n, d) matrix) for the text of the hash given."""
        ...

    def chunk_vectors(self, ids: Sequence[str]) -> dict[str, np.ndarray]:
        """The parts' vectors of those of ``ids`` that have them for their present text."""
        ...


class ChunkFiller:
    """Embeds the parts of long memories and stores their vectors (:class:`ChunkStore`)."""

    def __init__(self, catalog: ChunkStore, embedder: Callable[[], Embedder]) -> None:
        self._catalog = catalog
        self._embedder = embedder

    def fill(self, ids: Sequence[str]) -> int:
        """Make the parts' vectors of the long memories among ``ids`` that lack them; returns how
        many memories got them. One batch through the embedder for all their parts."""
        if not ids:
            return 0
        wanted = self._catalog.long_without_chunks(ids, LONG_CHARS)
        if not wanted:
            return 0
        parts = [(mid, content_hash, split(content)) for mid, content, content_hash in wanted]
        texts = [text for _, _, pieces in parts for text in pieces]
        if not texts:
            return 0
        vectors = np.asarray(self._embedder().embed(texts), dtype=np.float32)
        items: dict[str, tuple[str, np.ndarray]] = {}
        at = 0
        for mid, content_hash, pieces in parts:
            items[mid] = (content_hash, vectors[at : at + len(pieces)])
            at += len(pieces)
        self._catalog.set_chunk_vectors(items)
        return len(items)


def best_cosines(
    catalog: ChunkStore, rows: Sequence[tuple[str, str]], query: np.ndarray, cosines: Sequence[float]
) -> list[float]:
    """Each candidate's cosine with ``query``: its own vector's (``cosines``, in the order of
    ``rows``, ``(id, content)`` pairs), or its best part's where it is long and higher. Reads the
    catalog only when a candidate is long."""
    long_ids = [mid for mid, content in rows if is_long(content)]
    if not long_ids:
        return list(cosines)
    found = catalog.chunk_vectors(long_ids)
    if not found:
        return list(cosines)
    best = {mid: float(np.max(matrix @ query)) for mid, matrix in found.items() if len(matrix)}
    return [max(cosine, best.get(mid, cosine)) for (mid, _), cosine in zip(rows, cosines, strict=True)]


__all__ = [
    "CHUNK_CHARS",
    "LONG_CHARS",
    "MAX_CHUNKS",
    "ChunkFiller",
    "ChunkStore",
    "best_cosines",
    "is_long",
    "split",
]
