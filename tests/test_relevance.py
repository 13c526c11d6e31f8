"""Issue 16: relevance an agent can trust. Calibrated scores and the relevance floor, context that
is empty when nothing fits (and a hook that then injects nothing), near-duplicates that collapse
instead of starving the context, and newer versions of a fact ranking first. The user-facing
cases run on the real embedder and Chroma; the pure parts are unit-tested."""

from __future__ import annotations

import io
import json
import re
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
from remindful.engine.retrieval import calibration, diversity
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
    assert deploy.text.startswith("Remembered by remindful")
    assert [hit.content for hit in deploy.hits] == [THREE[2]] and f"[{deploy.hits[0].id}]" in deploy.text

    def hook(prompt: str) -> str:
        # No cwd: the hook reads the user's and the unscoped memories (the library stored these in no
        # project; from a project's directory it would read that project's and the user's).
        payload = {"session_id": "s1", "hook_event_name": "UserPromptSubmit", "prompt": prompt}
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


@given(evidence=st.floats(-1, 3), own=st.floats(-1, 3), more=st.floats(0, 0.5))
def test_the_calibrated_score_is_a_probability_rising_with_the_evidence(
    evidence: float, own: float, more: float
) -> None:
    score = calibration.relevance(evidence, own)
    assert 0.0 <= score <= 1.0
    assert calibration.relevance(evidence + more, own) >= score
    assert calibration.relevance(evidence, own + more) >= score


def test_the_score_is_graded_among_strong_hits_and_the_gate_keeps_neighbours_out() -> None:
    # Strong matches do not all read 1.0: a full lexical match over a good cosine still leaves room above.
    strong, stronger = calibration.relevance(1.2), calibration.relevance(1.5)
    assert 0.7 < strong < stronger < 0.95
    # A paraphrase (a cosine of 0.3-0.45, no shared word) clears the search floor, not the context one.
    from remindful.config import ContextSettings, SearchSettings

    for cosine in (0.3, 0.45):
        assert SearchSettings().min_score <= calibration.relevance(cosine) < ContextSettings().min_score
    # The gate: a memory whose own evidence is nil stays under every floor, whatever its window adds.
    assert calibration.relevance(0.05 + 0.8, 0.05) < 0.05
    assert calibration.relevance(0.05) < 0.02  # an unrelated memory


def test_lexical_evidence_needs_two_shared_terms_and_weighs_rare_ones() -> None:
    from remindful.engine.retrieval import rerank

    terms = rerank.QueryTerms.of(["oldies", "music"], {"oldies": 5.0, "music": 1.0})
    assert terms.lexical("my favourite music is country music") == 0.0  # one shared word: coincidence
    assert terms.lexical("I love oldies music") == 1.0
    single = rerank.QueryTerms.of(["zebra4x3"])
    assert single.lexical("note 3: zebra4x3 calibrated") == 1.0  # a one-term query needs its one term
    weighted = rerank.QueryTerms.of(["melanie", "paint", "sunrise"], {"melanie": 0.5, "paint": 2.0, "sunrise": 3.0})
    count, share = weighted.match("Melanie: I painted that lake sunrise")
    assert count == 3 and share == 1.0
    count, share = weighted.match("Melanie: I went painting")
    assert count == 2 and share == (0.5 + 2.0) / 5.5
    assert weighted.lexical("Melanie: I went painting") == share**rerank.COVERAGE_POWER
    assert rerank.idf(1, 1000) > rerank.idf(100, 1000) > rerank.idf(1000, 1000) > 0
    own, evidence = rerank.evidence(
        0.4, 0.5, 1.0, None, lexical_weight=0.5, lexical_context_weight=0.8, context_weight=0.0
    )
    assert own == 0.4 + 0.25 and evidence == own + 0.8


def test_what_neighbours_add_counts_as_far_as_it_is_more_than_chance() -> None:
    # "how do I deploy?" in a project whose logs all say "deploy": "The build passed." rode on a
    # neighbour's "deploy" into the context (0.79), above the deploy facts. Four neighbours hold a
    # word most of the store holds almost surely; a rare one they hold says something.
    from remindful.engine.retrieval import rerank

    common = rerank.QueryTerms.of(["deploy"], {"deploy": rerank.idf(8, 20)}, {"deploy": 8 / 20})
    rare = rerank.QueryTerms.of(["deploy"], {"deploy": rerank.idf(3, 1000)}, {"deploy": 3 / 1000})
    window = "The build passed.\nRan `./deploy.sh staging`: ok"
    held = common.held(window)
    assert held == [0]
    assert common.window_lexical_of(held, [], 4) == pytest.approx(common.lexical_of(held) * 0.6**4)
    assert common.window_lexical_of(held, [], 4) < 0.15 < 0.98 < rare.window_lexical_of(held, [], 4)
    # The memory's own words are its own: not discounted, however common.
    assert common.window_lexical_of(held, held, 4) == common.lexical_of(held) == 1.0
    # What the window adds beyond the memory's own words is discounted by the chance that the
    # neighbours would hold every term the window holds: a rare one among them makes it unlikely.
    two = rerank.QueryTerms.of(["melanie", "sunrise"], None, {"melanie": 0.5, "sunrise": 0.01})
    both = two.held("Melanie: I painted that lake sunrise")
    assert two.chance(both) == pytest.approx(0.5 * 0.01)
    assert two.chance([1], 4) == pytest.approx(1 - 0.99**4)
    chance = (1 - 0.5**4) * (1 - 0.99**4)
    assert two.window_lexical_of(both, [], 4) == pytest.approx(1 - chance)
    assert two.lexical_of([0]) == 0.0  # one of two terms: no evidence of its own
    assert two.window_lexical_of(both, [0], 4) == pytest.approx(1 - chance)
    three = rerank.QueryTerms.of(["melanie", "paint", "sunrise"], None, {"melanie": 0.5, "paint": 0.5, "sunrise": 0.5})
    mine = three.lexical_of([0, 1])
    assert 0 < mine < 1  # two of three terms: evidence of its own, kept whole
    assert three.window_lexical_of([0, 1, 2], [0, 1], 4) == pytest.approx(mine + (1 - mine) * (1 - (1 - 0.5**4) ** 3))
    # Not knowing how common the terms are (no counts), nothing is taken off.
    assert rerank.QueryTerms.of(["deploy"]).window_lexical_of([0], [], 4) == 1.0


def test_a_word_pointing_at_the_workspace_is_no_query_term() -> None:
    from remindful.engine.retrieval.search import lexical_terms

    assert lexical_terms("how do I deploy this project?") == ["deploy"]
    assert lexical_terms("what does our repo use for tests") == ["use", "tests"]
    assert lexical_terms("which project did Caroline start?") == ["project", "caroline", "start"]
    assert lexical_terms("what is this project?") == ["project"]  # nothing else left: kept


#: Letters whose case changes length or kind (dotted capital I, dotless i, sharp s), a combining
#: dot, a superscript and an Arabic-Indic digit (both word characters), beside plain letters and separators.
_ODD = "\u0130\u0131\u00df\u1e9e\u0307\u00b2\u0663"
_WORDS = st.text(st.sampled_from("abcde\u00e9_-1 " + _ODD), min_size=1, max_size=8)
_TEXTS = st.text(st.sampled_from("abcdefg\u00e9\u00c9_-.1 \n" + _ODD), max_size=60)


@example(text="a-b ab", words=["a-b"], more="")
@example(text="happiness going", words=["happy", "go"], more="went gone")
@given(text=_TEXTS, words=st.lists(_WORDS, max_size=6), more=_TEXTS)
def test_the_terms_held_are_those_stemming_every_word_finds(text: str, words: list[str], more: str) -> None:
    # The query's terms come from its words (lowercased); what QueryTerms finds of them must be what
    # stemming every word of the text finds, on any text: words of other scripts, underscores, case
    # that changes length. And a text holding another (a session window holding its memory) holds
    # what was found there: found again, it is not looked for.
    from remindful.engine.retrieval import rerank

    terms = sorted(set(words) | {w for word in words for w in re.findall(r"\w+", word)})
    query = rerank.QueryTerms.of(terms)
    every_word = {rerank.stem_of(word) for word in re.findall(r"\w+", text.lower())}
    held = query.held(text)
    assert {query.stems[i] for i in held} == set(query.stems) & every_word
    window = f"{more}\n{text}\n{more}"
    assert query.held(window, known=held) == query.held(window)
    needed = query.needed
    assert query.lexical(text) == (query.lexical_of(held) if len(held) >= needed else 0.0)


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


@pytest.mark.parametrize("n", [1, 25, 26, 27, 53, 300])
def test_collapse_finds_every_near_pair_whatever_the_tiles_of_its_products(n: int) -> None:
    """The similarities are computed in tiles small enough for one thread (26 rows at 384
    dimensions): every pair of near-duplicates is found, across tiles too, as one product finds it."""
    rng = np.random.default_rng(n)
    matrix = rng.standard_normal((n, 384)).astype(np.float32)
    copies = rng.permutation(n)[: n // 2]  # rows made near copies of rows anywhere else
    matrix[copies] = matrix[rng.integers(0, n, len(copies))] + 0.05 * rng.standard_normal((len(copies), 384))
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    every = matrix @ matrix.T >= 0.95
    want = {row: [c for c in range(row) if every[row, c]] for row in range(n)}
    assert diversity._near_earlier(matrix, 0.95) == {row: cols for row, cols in want.items() if cols}
    assert n < 27 or sum(map(len, want.values())) > n // 4


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


FACTS = [
    "My daughter plays the violin in the school orchestra.",
    "I drive an old pickup truck to work.",
    "I have been vegetarian for ten years.",
    "We spend every summer at a lake cabin up north.",
]
CHAT = [
    "did you watch the game last night?",
    "no, i was busy fixing the fence in the backyard.",
    "the weather has been so rainy this week.",
    "i just finished reading a mystery novel, it was great.",
    "what do you usually cook on weekends?",
    "my neighbour got a new puppy, it barks all day.",
]


@pytest.mark.slow
def test_a_paraphrase_sharing_no_word_with_its_memory_is_found_first_and_kept_at_the_floor(
    store_path: Path, onnx_embedder: Any
) -> None:
    with remindful.open(store_path, embedder=onnx_embedder) as memory:
        facts = memory.store_batch([{"content": text, "type": "knowledge", "session_id": "me"} for text in FACTS])
        memory.store_batch([{"content": text, "type": "conversation", "session_id": "chat"} for text in CHAT])
        for query, fact in [
            ("my child is a musician", facts[0]),
            ("i don't eat meat", facts[2]),
            ("our family vacations by the water", facts[3]),
        ]:
            hits = memory.search(query, limit=5)  # the default floor
            assert hits and hits[0].id == fact, (query, [(h.content, h.score) for h in hits])
        assert memory.search("how do I rotate the TLS certificates of the ingress") == []


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
    assert sorted((g.leader.id, len(g.members)) for g in groups) == sorted(expected)


def test_a_common_words_share_of_the_store_is_counted_past_the_weights_tie(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The weights (idf) count a term's memories up to LEXICAL_MAX_MATCHES + 1, where common terms
    # tie; its share of the store, which says how likely neighbours hold it by chance, was read from
    # the same count: in a store of 2,000 with "deploy" in 600, a share of 0.15 instead of 0.3.
    from remindful.engine.lexical import LEXICAL_MAX_MATCHES
    from remindful.engine.retrieval import rerank
    from remindful.engine.retrieval.search import SPREAD_COUNT, Model
    from remindful.testing import open_fake

    with open_fake(tmp_path / "s") as memory:
        memory.store_batch(
            [
                {"content": f"step {i}: " + ("deploy ran" if i % 10 < 3 else "tests ran"), "type": "action"}
                for i in range(2000)
            ]
        )
        catalog = memory.engine.catalog
        assert catalog.doc_freqs(["deploy"]) == ({"deploy": LEXICAL_MAX_MATCHES + 1}, 2000)
        counts = catalog.doc_freqs(["deploy"], SPREAD_COUNT)
        assert counts == ({"deploy": 600}, 2000)
        model = Model(catalog, np.zeros(4, dtype=np.float32), ["deploy"], memory.settings.search, None, None)
        model.weigh(counts)
        assert model.query.spread == (0.3,)
        assert model.query.weights == (rerank.idf(LEXICAL_MAX_MATCHES + 1, 2000),)  # as the weights were fitted
        # and a search weighs its terms so
        weighed: list[dict[str, int]] = []
        weigh = Model.weigh
        monkeypatch.setattr(Model, "weigh", lambda self, freqs: (weighed.append(freqs[0]), weigh(self, freqs))[1])
        memory.search("how do I deploy", limit=3)
        assert weighed == [{"deploy": 600}]
