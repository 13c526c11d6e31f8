"""Time-anchored queries through the API: "what did I buy 10 days ago?" favours what was said about
10 days before the search's reference time (``now=``, default the current time); a query without
an anchor ranks exactly as before; a bad ``now`` is one line naming the field."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import remindful
from remindful import MemoryManager
from remindful.engine.retrieval import anchors, search
from remindful.errors import ValidationError
from remindful.testing import open_fake

NOW = datetime(2023, 3, 25, 18, 26, tzinfo=UTC)
#: Two purchases; the older one is the closer match of the two on its words alone.
RECENT = "I finally bought the espresso machine I wanted"
OLD = "I bought a blender for smoothies"
#: Other things said over the months, of other subjects.
OTHERS = [
    ("We went hiking in the hills and the weather was lovely", 2),
    ("My sister is visiting next month with her two kids", 20),
    ("I finished reading a novel about a lighthouse keeper", 45),
    ("The car needed new tyres before the winter", 120),
]


def fill(memory: MemoryManager) -> dict[str, str]:
    ids = {
        RECENT: memory.store(RECENT, "conversation", timestamp=NOW - timedelta(days=10, hours=2)),
        OLD: memory.store(OLD, "conversation", timestamp=NOW - timedelta(days=92)),
    }
    for text, days in OTHERS:
        ids[text] = memory.store(text, "conversation", timestamp=NOW - timedelta(days=days))
    memory.flush()
    return ids


@pytest.mark.slow
def test_what_was_bought_ten_days_ago_wins_over_a_same_topic_memory_of_three_months_ago(
    tmp_path: Path, onnx_embedder: Any
) -> None:
    with remindful.open(tmp_path / "real", embedder=onnx_embedder) as memory:
        fill(memory)
        question = "what did I buy 10 days ago?"
        assert memory.search(question, now=NOW)[0].content == RECENT
        hits = memory.context("What kitchen appliance did I buy 10 days ago?", now=NOW, min_score=0.3).hits
        assert [hit.content for hit in hits[:2]] == [RECENT, OLD]
        # Asked as of ten days after the older one was said, the anchor points at it instead.
        assert memory.search(question, now=NOW - timedelta(days=82))[0].content == OLD
        # As of three months later "10 days ago" points at neither: the closer words win.
        assert memory.search(question, now=NOW + timedelta(days=90), min_score=0)[0].content == OLD


@pytest.mark.parametrize(
    "query",
    ["what did I buy for the kitchen?", "How many days ago did I buy a blender?", "the blender `bought 10 days ago`"],
)
def test_a_query_without_an_anchor_ranks_as_it_did(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, query: str) -> None:
    with open_fake(tmp_path / "store") as memory:
        fill(memory)
        shown = [(h.id, h.score, h.sources) for h in memory.search(query, now=NOW, min_score=0)]
        context = memory.context(query, now=NOW).text
        monkeypatch.setattr(search, "ANCHOR_BOOST", 0.0)
        assert [(h.id, h.score, h.sources) for h in memory.search(query, now=NOW, min_score=0)] == shown
        assert memory.context(query, now=NOW).text == context
        # And an anchored query does move (so the comparison above can fail).
        monkeypatch.setattr(search, "ANCHOR_BOOST", 0.1)
        anchored = [(h.id, h.score) for h in memory.search(f"{query} 10 days ago", now=NOW, min_score=0)]
        monkeypatch.setattr(search, "ANCHOR_BOOST", 0.0)
        assert [(h.id, h.score) for h in memory.search(f"{query} 10 days ago", now=NOW, min_score=0)] != anchored


def test_the_reference_time_is_the_wall_clock_by_default(tmp_path: Path) -> None:
    with open_fake(tmp_path / "store") as memory:
        now = datetime.now(UTC)
        memory.store("I bought a lamp", "conversation", timestamp=now - timedelta(days=10))
        memory.store("I bought a lamp shade", "conversation", timestamp=now - timedelta(days=200))
        memory.flush()
        default = [(h.id, round(h.score, 6)) for h in memory.search("what did I buy 10 days ago?")]
        given = [(h.id, round(h.score, 6)) for h in memory.search("what did I buy 10 days ago?", now=now)]
        assert default == given
        assert default[0][0] == memory.search("lamp 10 days ago", now=now.isoformat())[0].id


@pytest.mark.parametrize("bad", ["last tuesday", "2023-02-30", True, float("nan")])
def test_a_bad_now_is_one_line_naming_it(tmp_path: Path, bad: object) -> None:
    with open_fake(tmp_path / "store") as memory:
        for call in (memory.search, memory.context):
            with pytest.raises(ValidationError, match="'now'") as raised:
                call("what did I buy 10 days ago?", now=bad)  # type: ignore[operator]
            assert raised.value.field == "now"
            assert "\n" not in str(raised.value)


def test_a_window_holding_every_candidate_lifts_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ "how was your day today?" in a store of today's memories: the anchor tells nothing of which
    one is meant, so no score rises (a floor keeps out what it kept out)."""
    texts = ["I fixed the login bug", "We chose Postgres for the catalog", "The deploy needs the VPN"]
    with open_fake(tmp_path / "store") as memory:
        for number, text in enumerate(texts):
            memory.store(text, "conversation", timestamp=NOW - timedelta(hours=number + 1))
        memory.flush()

        def scores() -> list[tuple[str, float]]:
            return [(h.id, h.score) for h in memory.search("what did I fix today?", now=NOW, min_score=0)]

        boosted = scores()
        monkeypatch.setattr(search, "ANCHOR_BOOST", 0.0)
        assert scores() == boosted
        # One of them a month old: the window now tells them apart.
        memory.store("I fixed the flaky test", "conversation", timestamp=NOW - timedelta(days=30))
        memory.flush()
        unboosted = scores()
        monkeypatch.setattr(search, "ANCHOR_BOOST", 0.2)
        assert scores() != unboosted


def test_a_window_no_memory_reaches_changes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Asked of a store whose memories are a year old, "last weekend" points at none of them: the
    query is read as if it named no time (its words too: a memory may say "last weekend")."""
    year_ago = NOW - timedelta(days=365)
    with open_fake(tmp_path / "store") as memory:
        memory.store("John: I volunteered at the food bank last weekend", "conversation", timestamp=year_ago)
        memory.store("John: I volunteered at the shelter", "conversation", timestamp=year_ago)
        memory.store("Maria: the weekend was rainy", "conversation", timestamp=year_ago)
        memory.flush()
        question = "What event did John volunteer at last weekend?"

        def shown(at: datetime) -> list[tuple[str, float, tuple[str, ...]]]:
            return [(h.id, h.score, h.sources) for h in memory.search(question, now=at, min_score=0)]

        read, replayed = shown(NOW), shown(year_ago + timedelta(days=3))
        monkeypatch.setattr(anchors, "windows", lambda query, now: ())
        assert shown(NOW) == read
        # As of three days after they were said, the window holds them: the query reads otherwise.
        assert shown(year_ago + timedelta(days=3)) != replayed
