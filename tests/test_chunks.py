"""Long memories are embedded in parts, and judged by their best part (remindful.engine.chunks)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remindful.api import MemoryManager
from remindful.engine import chunks
from remindful.testing import open_fake

_FILLER = " ".join(
    f"Note {i}: we talked about the weather, the garden and the new bicycle lanes in town." for i in range(24)
)
#: A fact past the model's window (about 1,000 characters), between two long stretches of other talk.
_BURIED = f"{_FILLER}\nThe staging database listens on port 6543.\n{_FILLER}"


def _parts(memory: MemoryManager) -> list[tuple[int, int, str]]:
    return memory.engine.catalog.read("SELECT memory, part, content_hash FROM chunk_vectors ORDER BY memory, part")


def test_a_short_text_has_no_parts() -> None:
    assert chunks.split("The staging database listens on port 6543.") == []
    assert chunks.split("x" * chunks.LONG_CHARS) == []


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.text(alphabet=st.characters(codec="utf-8", categories=("L", "N", "P", "Zs")), min_size=1, max_size=900),
        min_size=1,
        max_size=40,
    )
)
def test_the_parts_of_a_long_text_hold_all_its_words_in_order(lines: list[str]) -> None:
    text = "\n".join(lines)
    parts = chunks.split(text)
    if not chunks.is_long(text):
        assert parts == []
        return
    assert 1 <= len(parts) <= chunks.MAX_CHUNKS
    size = max(chunks.CHUNK_CHARS, -(-len(text) // chunks.MAX_CHUNKS))
    assert all(len(part) <= size for part in parts)
    # Every word of the text, in order, in the parts joined (a part may begin with its predecessor's last piece).
    words = re.findall(r"\S+", text)
    joined = re.findall(r"\S+", " ".join(parts))
    at = 0
    for word in joined:
        if at < len(words) and word == words[at]:
            at += 1
    assert at == len(words) or all(word in " ".join(parts) for word in words)


def test_a_very_long_text_has_longer_parts_not_more() -> None:
    text = "\n".join(f"line {i} " + "word " * 40 for i in range(2000))
    parts = chunks.split(text)
    assert chunks.MAX_CHUNKS // 2 < len(parts) <= chunks.MAX_CHUNKS
    assert "line 1999" in parts[-1]


def test_a_fact_past_the_window_of_a_long_memory_is_found_at_the_default_floor(real_memory: MemoryManager) -> None:
    """The memory's own vector sees its first 256 word pieces (the weather and the garden): without
    its parts it scored under the search floor and the search found nothing."""
    buried = real_memory.store(_BURIED)
    real_memory.store("Lunch was a sandwich with cheese and a pickle.")
    real_memory.flush()
    hits = real_memory.search("which port does the staging DB use?")
    assert [h.id for h in hits][:1] == [buried]


def test_parts_are_kept_for_long_memories_only_and_follow_their_memory(memory: MemoryManager) -> None:
    short = memory.store("The staging database listens on port 6543.")
    long = memory.store(_BURIED)
    memory.flush()
    parts = _parts(memory)
    rowid = memory.engine.catalog.read("SELECT rowid FROM memories WHERE id = ?", [long])[0][0]
    assert {p[0] for p in parts} == {rowid}
    assert len(parts) == len(chunks.split(_BURIED))
    assert memory.engine.catalog.read("SELECT count(*) FROM memories WHERE id = ?", [short]) == [(1,)]

    # A new text: the parts of the old one are dropped, the new one's made.
    memory.update(long, content=_BURIED.replace("6543", "7654"))
    memory.flush()
    new_hash = memory.engine.catalog.read("SELECT content_hash FROM memories WHERE id = ?", [long])[0][0]
    assert {p[2] for p in _parts(memory)} == {new_hash}
    assert memory.engine.catalog.chunk_vectors([long])[long].shape[0] == len(_parts(memory))

    # Shortened: no part is left.
    memory.update(long, content="The staging database listens on port 7654.")
    memory.flush()
    assert _parts(memory) == []
    assert memory.engine.catalog.chunk_vectors([long]) == {}

    other = memory.store(_BURIED + " And one more line.")
    memory.flush()
    assert _parts(memory)
    memory.delete(other)
    assert _parts(memory) == []


def test_parts_survive_a_reindex_and_are_made_again_on_import(tmp_path: Path) -> None:
    with open_fake(tmp_path / "a") as memory:
        long = memory.store(_BURIED)
        memory.flush()
        before = _parts(memory)
        memory.reindex()
        memory.flush()
        assert _parts(memory) == before
        exported = tmp_path / "export.json"
        memory.export("json", exported)
    with open_fake(tmp_path / "b") as other:
        other.import_memories(exported)
        other.flush()
        assert other.get(long) is not None
        assert len(_parts(other)) == len(before)


def test_a_search_reads_no_parts_when_no_candidate_is_long(memory: MemoryManager, monkeypatch: Any) -> None:
    memory.store("The staging database listens on port 6543.")
    memory.flush()
    asked: list[Any] = []
    catalog = memory.engine.catalog
    original = catalog.chunk_vectors
    monkeypatch.setattr(catalog, "chunk_vectors", lambda ids: asked.append(ids) or original(ids))
    assert memory.search("staging database port")
    assert asked == []


@pytest.mark.parametrize("floor", [None, 0.0])
def test_a_long_memory_without_parts_is_judged_by_its_own_vector(tmp_path: Path, floor: float | None) -> None:
    """Parts not made yet (a catalog from before, or their embedding still to come): searches
    still find the memory by its own vector and words."""
    with open_fake(tmp_path / "s") as memory:
        long = memory.store(_BURIED)
        memory.flush()
        memory.engine.catalog.write(lambda c: c.execute("DELETE FROM chunk_vectors"))
        hits = memory.search("staging database port", min_score=floor)
        assert [h.id for h in hits] == [long]


def test_dedup_leaves_the_parts_of_the_memory_it_keeps_only(memory: MemoryManager) -> None:
    memory.store(_BURIED)
    memory.store(_BURIED + " Again.")
    memory.flush()
    assert len({p[0] for p in _parts(memory)}) == 2
    memory.dedup(threshold=0.95)
    memory.flush()
    left = memory.engine.catalog.read("SELECT rowid, id FROM memories")
    assert len(left) == 1
    assert {p[0] for p in _parts(memory)} == {left[0][0]}
