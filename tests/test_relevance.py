"""Issue 16: relevance an agent can trust. Calibrated scores and the relevance floor, context that
is empty when nothing fits (and a hook that then injects nothing), near-duplicates that collapse
instead of starving the context, and newer versions of a fact ranking first. The user-facing
cases run on the real embedder and Chroma; the pure parts are unit-tested."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

import remindful
from remindful.api import MemoryManager
from remindful.engine.retrieval import calibration
from remindful.engine.retrieval.diversity import Candidate, collapse, supersede
from remindful.errors import ValidationError

THREE = [
    "User prefers dark mode in every editor",
    "Meeting with Anna moved to Thursday 3pm",
    "The deploy script needs AWS_PROFILE=prod",
]
DEPLOY = [
    "The deploy script needs AWS_PROFILE=prod",
    "Deploys go through GitHub Actions on merge to main",
    "Connect to the VPN before you deploy to staging",
]


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    return tmp_path / "real"


@pytest.fixture
def three(store_path: Path, onnx_embedder: Any) -> Iterator[MemoryManager]:
    with remindful.open(store_path, embedder=onnx_embedder) as memory:
        for text in THREE:
            memory.store(text, type="knowledge")
        yield memory


@pytest.mark.slow
def test_an_unrelated_query_finds_nothing_and_scores_do_not_normalise_per_query(three: MemoryManager) -> None:
    assert three.search("best pizza recipe with mozzarella") == []
    everything = three.search("best pizza recipe with mozzarella", min_score=0)
    assert len(everything) == 3  # min_score=0: the top hits as before, whatever they score
    assert max(hit.score for hit in everything) < 0.1  # the top hit no longer scores 1.0
    theme = three.search("which editor theme does the user like")
    assert [hit.content for hit in theme] == [THREE[0]]
    assert three.settings.search.min_score <= theme[0].score <= 1.0
    with pytest.raises(ValidationError, match="min_score"):
        three.search("editor", min_score=1.5)


@pytest.mark.slow
def test_no_context_and_no_hook_output_when_nothing_is_relevant(three: MemoryManager, store_path: Path) -> None:
    from remindful.shells.hook import run

    found = three.context("give me a pizza recipe")
    assert found.text == "" and found.hits == () and not found
    deploy = three.context("how do I deploy")
    assert deploy.text.startswith("Relevant memories from remindful")
    assert [hit.content for hit in deploy.hits] == [THREE[2]] and f"[{deploy.hits[0].id}]" in deploy.text

    def hook(prompt: str) -> str:
        payload = {"session_id": "s1", "hook_event_name": "UserPromptSubmit", "prompt": prompt, "cwd": "/tmp"}
        out = io.StringIO()
        argv = ["--path", str(store_path), "hook", "UserPromptSubmit"]
        assert run(argv, stdin=io.StringIO(json.dumps(payload)), stdout=out) == 0
        return out.getvalue()

    assert hook("give me a pizza recipe") == ""  # no additionalContext, not even the header
    injected = json.loads(hook("how do I deploy?"))["hookSpecificOutput"]["additionalContext"]
    assert "AWS_PROFILE" in injected and "dark mode" not in injected


@pytest.mark.slow
def test_thirty_near_identical_log_lines_do_not_starve_the_context(store_path: Path, onnx_embedder: Any) -> None:
    with remindful.open(store_path, embedder=onnx_embedder) as memory:
        memory.store_batch(
            [{"content": f"Deploy log line {i}: deploy step ran, deploy finished", "type": "action"} for i in range(30)]
        )
        distinct = set(memory.store_batch([{"content": text, "type": "knowledge"} for text in DEPLOY]))
        found = memory.context("how do I deploy", budget_tokens=1500)
        assert distinct <= {hit.id for hit in found.hits}
        assert [hit.similar for hit in found.hits if hit.id not in distinct] == [29]
        assert "+29 similar" in found.text and found.text.count("Deploy log line") == 1
        top = memory.search("how do I deploy", limit=4)  # collapsed before the top-k is cut
        assert distinct <= {hit.id for hit in top}


@pytest.mark.slow
def test_the_current_version_of_a_fact_ranks_first(store_path: Path, onnx_embedder: Any) -> None:
    now = datetime.now(UTC)
    with remindful.open(store_path, embedder=onnx_embedder) as memory:
        fact = "The staging database runs on port 5433"
        dated = [memory.store(fact, type="knowledge", timestamp=now - timedelta(days=d)) for d in (1200, 500, 0)]
        memory.store("The production database is backed up nightly", type="knowledge")
        hits = memory.search("which port does the staging database use")
        assert hits[0].id == dated[-1] and hits[0].similar == 2  # today's copy, standing for the older two
        berlin = memory.store("The user moved to Berlin", timestamp=now - timedelta(days=900))
        lisbon = memory.store("The user moved to Lisbon", timestamp=now - timedelta(days=400))
        hits = memory.search("where did the user move to", limit=2)
        assert [hit.id for hit in hits] == [lisbon, berlin]
        assert hits[1].superseded_by == lisbon and hits[0].superseded_by is None
        assert hits[1].to_dict()["superseded_by"] == lisbon


def test_the_relevance_floor_is_a_setting_and_the_cli_takes_it(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from remindful.shells.cli import app
    from remindful.testing import open_fake

    with open_fake(tmp_path / "s", **{"search.min_score": 1.0}) as memory:
        memory.store("kubernetes ingress certificate renewal")
        assert memory.search("ingress certificate") == [] or memory.search("ingress certificate")[0].score == 1.0
        assert memory.search("ingress certificate", min_score=0)[0].content.startswith("kubernetes")
        assert memory.context("ingress certificate", min_score=0).hits
    runner = CliRunner()
    bad = runner.invoke(app, ["--path", str(tmp_path / "s"), "search", "x", "--min-score", "2"])
    assert bad.exit_code == 2 and "min_score" in bad.output and len(bad.output.strip().splitlines()) == 1


@given(
    own=st.floats(-1, 1.2),
    best=st.floats(-1, 1.2),
    more=st.floats(0, 0.5),
)
def test_the_calibrated_score_is_a_probability_rising_with_the_evidence(own: float, best: float, more: float) -> None:
    score = calibration.relevance(own, best)
    assert 0.0 <= score <= 1.0
    assert calibration.relevance(own + more, best) >= score
    assert calibration.relevance(own, best + more) >= score
    first = calibration.relevance(own, best, first=True)
    assert score <= first <= 1.0
    assert calibration.relevance(own + more, best, first=True) >= first


def test_the_ranking_s_first_hit_scores_higher_than_the_same_evidence_further_down() -> None:
    assert calibration.relevance(0.4, 0.5, first=True) > calibration.relevance(0.4, 0.5) + 0.1
    # Not past the gate: an unrelated first hit stays unrelated.
    assert calibration.relevance(0.05, 0.05, first=True) < 0.01
    # A search's scores: the best evidence among all its hits, the bonus for the first one only.
    assert calibration.scores([0.4, 0.6, 0.4]) == [
        calibration.relevance(0.4, 0.6, first=True),
        calibration.relevance(0.6, 0.6),
        calibration.relevance(0.4, 0.6),
    ]
    assert calibration.scores([]) == []


def test_a_weak_hit_stays_weak_beside_a_strong_one() -> None:
    assert calibration.relevance(0.9, 0.9) > 0.99
    assert calibration.relevance(0.05, 0.9) < 0.01  # the gate: an unrelated memory is not lifted
    assert calibration.relevance(0.2, 0.2) < 0.01  # an off-topic query
    assert calibration.coverage(["deploy", "staging"], "Deploys to the staging box") == 1.0
    assert calibration.coverage(["pizza"], "Deploys to the staging box") == 0.0


#: Letters whose case changes length or kind (dotted capital I, dotless i, sharp s), a combining
#: dot, a superscript and an Arabic-Indic digit (both word characters), beside plain letters and separators.
_ODD = "\u0130\u0131\u00df\u1e9e\u0307\u00b2\u0663"
_WORDS = st.text(st.sampled_from("abcde\u00e9_-1 " + _ODD), min_size=1, max_size=8)
_TEXTS = st.text(st.sampled_from("abcdefg\u00e9\u00c9_-.1 \n" + _ODD), max_size=60)


@example(text="a-b ab", words=["a-b"])
@given(text=_TEXTS, words=st.lists(_WORDS, max_size=6))
def test_the_finder_finds_what_splitting_into_words_finds(text: str, words: list[str]) -> None:
    # The query's terms come from its words (lowercased); a finder must give every coverage the
    # word split gives, on any text: words of other scripts, underscores, case that changes length.
    terms = calibration.stems(" ".join(words)) | set(words)  # stems, whole words and odd strings alike
    terms_list = sorted(terms)
    find = calibration.finder(terms_list)
    assert calibration.covered(terms_list, find(text)) == calibration.coverage(terms_list, text)
    assert find(text) <= calibration.stems(text)


def _unit(*values: float) -> np.ndarray:
    vector = np.asarray(values, dtype=np.float32)
    return vector / np.linalg.norm(vector)


def test_collapse_chains_near_duplicates_and_shows_the_best_ranked() -> None:
    # a ~ b and b ~ c, a and c less alike: one group, found in the order a, c, b.
    vectors = {"a": _unit(1, 0, 0), "c": _unit(0.8, 0.6, 0), "b": _unit(0.95, 0.31, 0), "x": _unit(0, 0, 1)}
    ranked = [Candidate("a", "a", 1.0), Candidate("c", "c", 3.0), Candidate("b", "b", 2.0), Candidate("x", "x", 0.0)]
    groups, consumed = collapse(ranked, vectors, 0.9)
    assert [(g.shown.id, g.similar) for g in groups] == [("a", 2), ("x", 0)]
    assert consumed == 4
    groups, consumed = collapse(ranked, vectors, 0.999, stop_at=2)
    assert [g.leader.id for g in groups] == ["a", "c"] and consumed == 2


def test_supersede_moves_the_newer_version_of_a_subject_up() -> None:
    vectors = {"old": _unit(1, 0.2, 0), "new": _unit(1, 0.25, 0), "other": _unit(0, 1, 0)}
    ranked = [
        Candidate("old", "The user moved to Berlin", 0.0),
        Candidate("other", "Something else entirely", 5.0),
        Candidate("new", "The user moved to Lisbon", 86400.0),
    ]
    groups, _ = collapse(ranked, vectors, 0.9999)
    order = supersede(groups, vectors, 0.6)
    assert [g.shown.id for g in order] == ["new", "old", "other"]
    assert order[1].superseded_by == "new" and order[0].superseded_by is None
    # Different subjects (few shared words) are left alone, however close the vectors.
    ranked[2] = Candidate("new", "Completely different words here", 86400.0)
    groups, _ = collapse(ranked, vectors, 0.9999)
    assert [g.shown.id for g in supersede(groups, vectors, 0.6)] == ["old", "other", "new"]


@pytest.mark.slow
def test_a_question_naming_someone_ranks_their_answer_above_anothers_question(
    store_path: Path, onnx_embedder: Any
) -> None:
    # Fused alone put Caroline's question first: it shares "play" and "instruments" with the query,
    # and BM25 weighs a name the store repeats at almost nothing. The re-ranking counts the name.
    turns = [
        "Caroline: You play any instruments?",
        "Melanie: Yeah, I play clarinet! Started when I was young.",
        "Caroline: What type of music do you play?",
        "Melanie: I carve out me-time each day, running, reading or playing my violin.",
    ]
    with remindful.open(store_path, embedder=onnx_embedder) as memory:
        memory.store_batch([{"content": text, "type": "conversation"} for text in turns])
        hits = memory.search("What instrument does Melanie play?", min_score=0)
        assert hits[0].content == turns[1]
        plain = remindful.open(store_path, embedder=onnx_embedder, **{"search.rerank": False})
        with plain:  # the setting turns the model off: the fused order
            assert plain.search("What instrument does Melanie play?", min_score=0)[0].content == turns[0]


def test_the_rerank_features_read_names_terms_and_cosines() -> None:
    from remindful.engine.retrieval import rerank
    from remindful.engine.retrieval.search import STOPWORDS

    # The first word is capitalised by any sentence; stopwords are not names.
    assert rerank.entities("Which books has Tim read with The Anna team?", STOPWORDS) == ["tim", "anna"]
    assert rerank.entities("what does anna like", STOPWORDS) == []
    base = (0.5, 0.4, 0.5, 0.5, 0.0)  # fused, cosine, context BM25, coverage, names
    more = [tuple(v + 0.1 * (i == j) for i, v in enumerate(base)) for j in range(len(rerank.FEATURES))]
    first, *others = rerank.scores([base, *more])
    assert all(other > first for other in others)  # each feature counts for the memory
    assert rerank.scores([]) == []


def _collapse_reference(ranked: list[Candidate], vectors: dict[str, np.ndarray], similarity: float) -> list[set[str]]:
    """Single linkage, spelled out: a candidate joins every earlier group holding a near-duplicate."""
    groups: list[set[str]] = []
    for cand in ranked:
        near = [g for g in groups if any(float(vectors[m] @ vectors[cand.id]) >= similarity for m in g)]
        merged = {cand.id}.union(*near)
        groups = [g for g in groups if g not in near] + [merged]
    return groups


@given(seed=st.integers(0, 10_000), n=st.integers(1, 60))
def test_collapse_groups_as_single_linkage_does(seed: int, n: int) -> None:
    rng = np.random.default_rng(seed)
    bases = rng.standard_normal((max(1, n // 4), 384))
    # Clusters (noise around a few bases: some pairs above 0.9, some under, so chains form) among
    # unrelated vectors.
    raw = [
        bases[rng.integers(len(bases))] + rng.normal(0, rng.choice([0.15, 0.3, 0.4]), 384)
        if rng.random() < 0.7
        else rng.standard_normal(384)
        for _ in range(n)
    ]
    vectors = {f"m{i}": (v / np.linalg.norm(v)).astype(np.float32) for i, v in enumerate(raw)}
    ranked = [Candidate(mid, mid, 0.0) for mid in vectors]
    groups, consumed = collapse(ranked, vectors, 0.9)
    assert consumed == n
    order = {c.id: i for i, c in enumerate(ranked)}
    expected = [(min(g, key=order.__getitem__), len(g)) for g in _collapse_reference(ranked, vectors, 0.9)]
    assert sorted((g.leader.id, g.members) for g in groups) == sorted(expected)
