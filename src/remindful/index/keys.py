"""How the Chroma backends key a memory's vector: its id packed into 20 characters.

Chroma keeps every id four times (its SQLite table of embeddings and that table's unique index, the
HNSW segment's label maps in both directions), and a memory id is 40-odd characters
(``{type}_{YYYYmmddHHMMSSffffff}_{uuid8}``). In a collection of one type the type says nothing, and
the rest is two numbers: the 20 digits of the time and the 8 hex digits of the uuid, together under
2**99, written here in base 32 (``0-9a-v``: the digits ``int(key, 32)`` reads in C, and in ASCII
order, so keys sort as the ids do): 20 characters, 22 fewer for each copy. Base 64 would save three
more a copy, but decoding it in Python took 4-5 us a key against under 1 us, and a restricted
search asks the index for up to 2,000 neighbours.

:func:`pack` is lossless and :func:`unpack` its inverse: an id that does not have that form in the
collection's type (a type changed by an update, an id from elsewhere) is kept whole behind a ``~``,
which the packed digits never use. Which collections are packed is the backend's business
(a collection created before keeps the whole ids it has: :mod:`remindful.index.chroma_base`).
"""

from __future__ import annotations

import re

__all__ = ["pack", "unpack"]

_DIGITS = "0123456789abcdefghijklmnopqrstuv"
_LENGTH = 20  # 32**20 = 2**100 > 10**20 * 2**32
_WHOLE = "~"
_FORM = re.compile(r"([0-9]{20})_([0-9a-f]{8})")


def _type_of(collection: str) -> str:
    return collection.removesuffix("_memories")


def pack(collection: str, memory_id: str) -> str:
    """The key of ``memory_id`` in ``collection`` (``{type}_memories``)."""
    prefix = _type_of(collection) + "_"
    found = _FORM.fullmatch(memory_id, len(prefix)) if memory_id.startswith(prefix) else None
    if found is None:
        return _WHOLE + memory_id
    value = (int(found[1]) << 32) | int(found[2], 16)
    out = []
    for _ in range(_LENGTH):
        value, digit = divmod(value, 32)
        out.append(_DIGITS[digit])
    return "".join(reversed(out))


def unpack(collection: str, key: str) -> str:
    """The memory id that :func:`pack` made ``key`` from."""
    if key.startswith(_WHOLE):
        return key[1:]
    value = int(key, 32)
    return "%s_%020d_%08x" % (_type_of(collection), value >> 32, value & 0xFFFFFFFF)  # noqa: UP031 (faster here)
