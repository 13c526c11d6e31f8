"""Chunker: the spec's exact examples (TC-P1-02, 03, 08) and property tests."""

from __future__ import annotations

import logging

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remindful.services.ingest.chunker import chunk_text


def words(n: int, *, end_at: set[int] = frozenset()) -> str:
    """``n`` words w0..w{n-1}; a period after the 0-based words in ``end_at``."""
    return " ".join(f"w{i}." if i in end_at else f"w{i}" for i in range(n))


def spans(text: str) -> list[tuple[int, int]]:
    return [(c.start_word, c.end_word - 1) for c in chunk_text(text)]


def test_tc_p1_02_400_words_give_three_chunks() -> None:
    assert spans(words(400)) == [(0, 199), (150, 349), (300, 399)]


def test_spec_example_450_words() -> None:
    assert spans(words(450)) == [(0, 199), (150, 349), (300, 449)]


def test_tc_p1_03_boundary_snaps_to_sentence_end_at_word_195() -> None:
    # The 195th word (index 194) ends a sentence: the boundary moves from 200 to 195.
    chunks = chunk_text(words(400, end_at={194}))
    assert chunks[0].end_word == 195
    assert chunks[0].text.endswith("w194.")
    assert chunks[1].start_word == 145


def test_sentence_end_beyond_20_words_is_not_used(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, "remindful.services.ingest"):
        chunks = chunk_text(words(400, end_at={170}))
    assert chunks[0].end_word == 200
    assert "Chunk split mid-sentence at word 200" in caplog.text


def test_tc_p1_08_empty_text_gives_no_chunks() -> None:
    assert chunk_text("") == []
    assert chunk_text("  \n\t ") == []


def test_short_text_is_one_chunk_with_offsets() -> None:
    text = "  Hello world.\n\nSecond line here  "
    [chunk] = chunk_text(text)
    assert chunk.text == "Hello world.\n\nSecond line here"
    assert text[chunk.start_char : chunk.end_char] == chunk.text
    assert (chunk.start_word, chunk.end_word) == (0, 5)


def test_500_and_1000_words() -> None:
    assert len(chunk_text(words(500))) == 3  # TC-P1-05
    assert len(chunk_text(words(1000))) == 7  # stride 150 (see the module docstring on TC-P1-06)


def test_bad_parameters() -> None:
    with pytest.raises(ValueError, match="size"):
        chunk_text("a b c", size=50, overlap=40, snap=20)


word = st.text(alphabet="abcxyz.!?,", min_size=1, max_size=8)


@settings(max_examples=150, deadline=None)
@given(st.lists(word, min_size=0, max_size=900), st.sampled_from([" ", "\n", "  ", "\n\n"]))
def test_chunks_cover_the_text_with_the_stated_overlap(tokens: list[str], sep: str) -> None:
    text = sep.join(tokens)
    all_words = text.split()
    chunks = chunk_text(text)
    if not all_words:
        assert chunks == []
        return
    assert chunks[0].start_word == 0
    assert chunks[-1].end_word == len(all_words)
    for i, chunk in enumerate(chunks):
        assert chunk.index == i
        assert 1 <= chunk.word_count <= 200
        assert chunk.text.split() == all_words[chunk.start_word : chunk.end_word]
        assert text[chunk.start_char : chunk.end_char] == chunk.text
        if i + 1 < len(chunks):
            assert chunk.word_count >= 180  # snapped at most 20 words back
            assert chunks[i + 1].start_word == chunk.end_word - 50  # exactly 50 words of overlap
