"""Session context windows (remindful.engine.windows) and the spaces that use them; context
injection (``MemoryManager.context``, remindful.services.context)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from remindful.api import MemoryManager


def _windows(memory: MemoryManager) -> dict[str, str]:
    catalog = memory.engine.catalog
    contents = dict(catalog.read("SELECT id, content FROM memories"))
    return {contents[mid]: text for mid, text in catalog.windows(list(contents)).items()}


def _seqs(memory: MemoryManager, session: str) -> list[str]:
    rows = memory.engine.catalog.read("SELECT content FROM memories WHERE session_id = ? ORDER BY seq", (session,))
    return [r[0] for r in rows]


def test_window_holds_two_neighbours_each_side_and_the_date(memory: MemoryManager) -> None:
    base = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    memory.store_batch([{"content": f"t{i}", "session_id": "s", "timestamp": base} for i in range(6)])
    windows = _windows(memory)
    assert windows["t0"] == "t0\nt1\nt2\n(8 May 2023)"
    assert windows["t3"] == "t1\nt2\nt3\nt4\nt5\n(8 May 2023)"
    assert windows["t5"] == "t3\nt4\nt5\n(8 May 2023)"


def test_appending_updates_the_previous_windows(memory: MemoryManager) -> None:
    for i in range(3):
        memory.store(f"a{i}", session_id="s")
    memory.store("a3", session_id="s")
    assert _windows(memory)["a2"].startswith("a0\na1\na2\na3\n")
    assert _windows(memory)["a1"].startswith("a0\na1\na2\na3\n")


def test_backdated_memory_is_placed_in_order(memory: MemoryManager) -> None:
    now = datetime.now(UTC)
    for i in range(4):
        memory.store(f"m{i}", session_id="s", timestamp=now + timedelta(seconds=i))
    memory.store("early", session_id="s", timestamp=now + timedelta(seconds=1.5))
    assert _seqs(memory, "s") == ["m0", "m1", "early", "m2", "m3"]
    assert _windows(memory)["m3"].startswith("early\nm2\nm3\n")


def test_delete_and_update_mend_neighbour_windows(memory: MemoryManager) -> None:
    ids = [memory.store(f"w{i}", session_id="s") for i in range(5)]
    memory.delete(ids[2])
    assert "w2" not in _windows(memory)["w1"]
    assert "w2" not in _windows(memory)
    memory.update(ids[3], content="changed")
    assert "changed" in _windows(memory)["w4"]


def test_sessions_do_not_mix_and_loose_memories_get_their_own_window(memory: MemoryManager) -> None:
    memory.store("alpha", session_id="one")
    memory.store("beta", session_id="two")
    assert "beta" not in _windows(memory)["alpha"]


def test_lexical_context_finds_the_turn_next_to_the_words(memory: MemoryManager) -> None:
    """The question's words are in the turn before the answer: only the window space links them."""
    turns = [
        "Mel: What did you do at the support group meeting last week?",
        "Caroline: It was great, I met so many people there.",
        "Mel: Nice weather today.",
        "Caroline: I painted a lake at sunrise.",
    ]
    ids = memory.store_batch([{"content": t, "session_id": "chat", "type": "conversation"} for t in turns])
    hits = memory.search("support group meeting", limit=4, min_score=0)  # the ranking, not the floor
    order = [h.id for h in hits]
    assert order.index(ids[1]) < order.index(ids[3])  # the answer's window holds the words, the last turn's not
    assert "lexical_context" in next(h for h in hits if h.id == ids[1]).sources


def test_date_words_make_dates_searchable(memory: MemoryManager) -> None:
    may = memory.store("went hiking", session_id="a", timestamp="2023-05-08T10:00:00Z")
    memory.store("went hiking", session_id="b", timestamp="2023-09-01T10:00:00Z")
    # Two copies of one text: collapsed, the newer would stand for both; the ranking itself is checked.
    assert memory.search("hiking in May 2023", limit=1, collapse=False)[0].id == may


def test_every_space_can_be_turned_off(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from remindful.testing import open_fake

    for space in ("dense", "context", "lexical", "lexical_context"):
        with open_fake(tmp_path / space, **{f"search.{space}_weight": 0}) as memory:
            memory.store("the quick brown fox", session_id="s")
            hit = memory.search("quick fox")[0]
            assert space not in hit.sources


def test_filters_are_respected_by_every_space_alone(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from remindful.testing import open_fake

    spaces = ("dense", "context", "lexical", "lexical_context")
    for only in spaces:
        weights = {f"search.{s}_weight": (1.0 if s == only else 0.0) for s in spaces}
        with open_fake(tmp_path / only, **weights) as memory:
            memory.store_batch(
                [
                    {"content": f"deploy the api server step {i}", "session_id": "s", "metadata": {"ok": i % 2 == 0}}
                    for i in range(8)
                ]
            )
            hits = memory.search("deploy api server", filters={"ok": True}, limit=10)
            assert hits, only
            assert all(h.metadata["ok"] is True for h in hits), only
            assert all(only in h.sources for h in hits), only


def test_fusion_settings_are_gone_and_named_as_unknown(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # Candidates are judged by their own evidence, not fused by rank: the old switch is refused by name.
    from remindful.errors import ConfigError
    from remindful.testing import open_fake

    with pytest.raises(ConfigError, match="fusion"):
        open_fake(tmp_path / "rrf", **{"search.fusion": "rrf"})


def test_a_term_matching_too_many_rows_ranks_only_its_newest(memory: MemoryManager, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from remindful.engine import lexical as lexical_module
    from remindful.engine.sqlfilter import build_filter

    ids = [memory.store(f"deploy number {i} went fine", type="action") for i in range(12)]
    rare = memory.store("the deploy of the billing service failed", type="action")
    catalog = memory.engine.catalog
    monkeypatch.setattr(lexical_module, "LEXICAL_MAX_MATCHES", 4)
    monkeypatch.setattr(lexical_module, "DOC_FREQ_CAP", 8)
    catalog._lexical._doc_freqs.clear()
    assert catalog._lexical._doc_freq("memories_fts", "deploy", 13, 8) == 8  # counted up to the cap only
    catalog._lexical._doc_freqs.clear()
    # "billing" fits under the cap: it is matched alone, over every row.
    assert catalog._lexical._rarest_terms("memories_fts", ["deploy", "billing"]) == (["billing"], 1)
    assert catalog._lexical._doc_freqs[("memories_fts", "deploy")][::2] == (5, 5)  # no need to count further
    # "deploy" alone matches 13 > 4 rows: only the newest 4 are ranked, so nothing older is returned.
    found = {mid for mid, _ in catalog.lexical(["deploy"], build_filter(), 10, restricted=False)}
    assert found and found <= {*ids[-3:], rare}
    # So does a restricted one, among the rows that pass its filter.
    restricted = catalog.lexical(["deploy"], build_filter(types=["action"]), 20, restricted=True)
    assert {mid for mid, _ in restricted} == {*ids[-3:], rare}
    assert catalog.lexical(["billing"], build_filter(types=["action"]), 20, restricted=True)[0][0] == rare


def test_a_scoped_search_ranks_the_newest_matches_of_its_scope_not_of_the_store(
    memory: MemoryManager, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    """Issue 34: a term matching more than LEXICAL_MAX_MATCHES rows in the store floored a scoped
    search at the store's newest matches, so a small project's own older matches were never ranked
    (at a million memories, 2 % of them in the project, ~6 of 300). The floor is taken among the
    rows that pass the filter, looking through at most LEXICAL_SCAN_MAX of the newest matches."""
    from remindful.engine import lexical as lexical_module
    from remindful.engine.sqlfilter import build_filter

    small = [memory.store(f"deploy of the small project {i}", scope="project:small") for i in range(3)]
    memory.store_batch([{"content": f"deploy number {i} went fine", "scope": "project:big"} for i in range(12)])
    catalog = memory.engine.catalog
    monkeypatch.setattr(lexical_module, "LEXICAL_MAX_MATCHES", 4)
    monkeypatch.setattr(lexical_module, "DOC_FREQ_CAP", 8)
    monkeypatch.setattr(lexical_module, "LEXICAL_SCAN_MAX", 100)
    catalog._lexical._doc_freqs.clear()
    for table in ("memories_fts", "context_fts"):
        found = catalog.lexical(["deploy"], build_filter(scopes=["project:small"]), 10, table=table, restricted=True)
        assert {mid for mid, _ in found} == set(small), table
    # Unrestricted searches still rank the store's newest matches only.
    assert not {mid for mid, _ in catalog.lexical(["deploy"], build_filter(), 10, restricted=False)} & set(small)
    # The look is bounded: past LEXICAL_SCAN_MAX of the newest matches, older rows are not reached.
    monkeypatch.setattr(lexical_module, "LEXICAL_SCAN_MAX", 12)
    assert catalog.lexical(["deploy"], build_filter(scopes=["project:small"]), 10, restricted=True) == []
    monkeypatch.setattr(lexical_module, "LEXICAL_SCAN_MAX", 14)
    found = catalog.lexical(["deploy"], build_filter(scopes=["project:small"]), 10, restricted=True)
    assert {mid for mid, _ in found} == set(small[1:])


def test_when_every_term_is_common_the_rarest_is_told_by_a_longer_count(memory: MemoryManager, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from remindful.engine import lexical as lexical_module

    memory.store_batch([{"content": f"deploy number {i} went fine"} for i in range(12)])
    memory.store_batch([{"content": f"undo step {i}"} for i in range(6)])
    catalog = memory.engine.catalog
    monkeypatch.setattr(lexical_module, "LEXICAL_MAX_MATCHES", 4)
    monkeypatch.setattr(lexical_module, "DOC_FREQ_CAP", 8)
    # Both match more than 4 rows (a tie at 5 for the first count, where the longer term would win);
    # counted on to 8, "undo" (6 rows) is the rarer.
    assert catalog._lexical._rarest_terms("memories_fts", ["deploy", "undo"]) == (["undo"], 6)
    assert catalog._lexical._rarest_terms("memories_fts", ["undo", "deploy"]) == (["undo"], 6)


def test_context_is_what_the_hooks_and_the_cli_print(memory: MemoryManager) -> None:
    from remindful.services.context import HEADER, estimate_tokens, gather_context

    deploy = memory.store("Deploys run make release from the main branch", type="knowledge")
    memory.store("Deploys run make release from the main branch.", type="knowledge")  # a near-duplicate
    staging = memory.store("The staging deploy needs the VPN up", session_id="s1")
    text = memory.context("how do we deploy a release").text
    assert text == gather_context(memory.engine, "how do we deploy a release").text
    assert text.startswith(HEADER + "\n") and "(fact, " in text and f"[{staging}]" in text
    assert text.count("make release") == 1  # near-duplicates collapse into one line
    assert deploy in text or "+1 similar" in text
    assert estimate_tokens(text) <= memory.settings.hooks.context_budget_tokens
    assert estimate_tokens(memory.context("how do we deploy a release", budget_tokens=45).text) <= 45
    assert memory.context("how do we deploy a release", budget_tokens=5).text == ""  # not even the header fits
    assert staging not in memory.context("deploy", types=["knowledge"]).text
    only = memory.context("deploy", session_id="s1")
    assert f"[{staging}]" in only.text and deploy not in only.text and [h.id for h in only.hits] == [staging]
    assert staging not in memory.context("deploy", exclude="the staging  deploy needs the VPN up").text
    assert memory.context("   ").text == ""


def test_a_statement_the_prompt_makes_itself_is_not_handed_back_to_it(memory: MemoryManager) -> None:
    """What was learned from the prompt being answered (spooled and learned before its context is
    looked up) tells the agent nothing it was not just told: only other memories come back."""
    port = memory.store("The staging database listens on port 6543.", type="knowledge")
    vpn = memory.store("The staging database needs the VPN.", type="knowledge")
    prompt = "FYI: the staging database listens on port 6543, not 5432."
    ids = [hit.id for hit in memory.context("staging database", exclude=prompt).hits]
    assert port not in ids and vpn in ids
    assert port in [hit.id for hit in memory.context("staging database", exclude="what port?").hits]
