"""Conversation capture (spec conversation-capture.md): the four gherkin scenarios, the
confidence filter and per-turn cap, trigger boosting, events and metrics."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from remindful.api import MemoryManager
from remindful.engine.repositories import LearningRepository
from remindful.errors import ValidationError
from remindful.model import MemoryClass, MemorySource, MemoryType
from remindful.services.learning.bus import MemoryCaptured, subscribe
from remindful.services.learning.reinforce import history
from remindful.services.learning.types import CaptureSource, ConversationTurn, UserAction
from remindful.testing import open_fake


def _learning(memory: MemoryManager) -> LearningRepository:
    """The learning tables of ``memory``'s store."""
    return LearningRepository(memory.engine.catalog)


@pytest.fixture
def events() -> list[MemoryCaptured]:
    seen: list[MemoryCaptured] = []
    unsubscribe = subscribe(seen.append)
    yield seen
    unsubscribe()


# -- the spec's scenarios --------------------------------------------------------------------------


def test_capture_from_conversation_with_trigger(
    memory: MemoryManager, events: list[MemoryCaptured], caplog: pytest.LogCaptureFixture
) -> None:
    turn = ConversationTurn("Remember that we use PostgreSQL", "Noted: PostgreSQL it is.", conversation_id="c1")
    with caplog.at_level(logging.INFO, logger="remindful.services.learning"):
        captured = memory.capture_conversation(turn)
    assert len(captured) == 1
    (m,) = captured
    assert m.memory_class is MemoryClass.SEMANTIC
    assert m.type is MemoryType.KNOWLEDGE and m.source is MemorySource.CONVERSATION
    assert m.content == "We use PostgreSQL."
    assert m.metadata["trigger"] is True and m.metadata["confidence"] >= 0.9
    # salience boosted via reinforcement: importance above the 0.5 default, logged as such
    assert m.importance == pytest.approx(0.5 + memory.settings.learning.trigger_boost)
    assert [r["reason"] for r in history(_learning(memory), m.id)] == ["explicit_user_confirmation"]
    assert "[MEM:CAPTURE] Captured semantic memory from conversation: We use PostgreSQL." in caplog.text
    assert events[-1].source is CaptureSource.CONVERSATION and events[-1].source_id == "c1"
    assert [x.id for x in events[-1].memories] == [m.id]


def test_capture_user_correction(memory: MemoryManager, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="remindful.services.learning"):
        m = memory.capture_correction("API uses OAuth", "API uses API keys", "authentication")
    assert "API keys" in m.content
    assert m.content == "API uses API keys, not OAuth (authentication)."  # the rule, not the instance
    assert m.type is MemoryType.KNOWLEDGE and m.memory_class is MemoryClass.SEMANTIC
    assert m.source is MemorySource.CORRECTION
    assert m.importance > 0.5 and history(_learning(memory), m.id)[0]["reason"] == "user_correction"  # reinforced
    assert "[MEM:CAPTURE] Captured correction: API uses OAuth -> API uses API keys" in caplog.text


def test_capture_configuration_change(memory: MemoryManager, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="remindful.services.learning"):
        m = memory.capture_config_change("theme", "light", "dark")
    assert m is not None
    assert m.content.startswith("User prefers dark mode.")
    assert "from light to dark" in m.content
    assert m.source is MemorySource.CONFIG and m.memory_class is MemoryClass.SEMANTIC
    assert memory.search("dark mode", limit=1)[0].id == m.id
    assert "[MEM:CAPTURE] Captured config change: theme = dark" in caplog.text
    newer = memory.capture_config_change("theme", "dark", "light")
    assert newer is not None and memory.get(m.id).metadata["superseded_by"] == newer.id


def test_capture_workflow_pattern(memory: MemoryManager, caplog: pytest.LogCaptureFixture) -> None:
    start = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
    names = ["run tests", "build", "commit", "push"]
    actions = [UserAction("command", n, start + timedelta(minutes=5 * i)) for i, n in enumerate(names)]
    with caplog.at_level(logging.INFO, logger="remindful.services.learning"):
        m = memory.capture_workflow(actions)
    assert m is not None
    assert m.content == "To ship changes: 1) Run tests, 2) Build, 3) Commit, 4) Push."
    assert m.type is MemoryType.WORKFLOW and m.memory_class is MemoryClass.PROCEDURAL
    assert m.source is MemorySource.WORKFLOW_PATTERN and m.metadata["steps"] == names
    assert "[MEM:CAPTURE] Captured workflow: To ship changes" in caplog.text


# -- workflows: what is not a pattern ---------------------------------------------------------------


def test_workflow_needs_enough_related_actions_within_the_window(memory: MemoryManager) -> None:
    start = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)

    def acts(names: list[str], step_minutes: float) -> list[UserAction]:
        return [UserAction("command", n, start + timedelta(minutes=step_minutes * i)) for i, n in enumerate(names)]

    assert memory.capture_workflow(acts(["run tests", "push"], 1)) is None  # too few
    assert memory.capture_workflow(acts(["run tests", "build", "push"], 20)) is None  # 40 min > 30
    assert memory.capture_workflow(acts(["open calendar", "play music", "check weather"], 1)) is None
    # noise does not count as a step, and does not break a pattern
    noisy = acts(["navigate to example.com/login", "mouse move", "fill form", "click submit"], 1)
    m = memory.capture_workflow(noisy)
    assert m is not None and m.content.startswith("To submit the form: 1) Navigate")
    assert memory.capture_workflow(acts(["a", "b", "c"], 1), goal="x") is None
    with pytest.raises(ValidationError, match=r"actions\[1\]\.description"):
        memory.capture_workflow([{"description": "build", "timestamp": start.isoformat()}, {"action_type": "x"}])


# -- confidence filter, cap, triggers ---------------------------------------------------------------


def test_low_confidence_statements_are_dropped(memory: MemoryManager) -> None:
    turn = ConversationTurn("Hey! How are you? Maybe I might try that later, not sure.", "Sounds good!")
    assert memory.capture_conversation(turn) == []
    learning = memory.stats().learning
    assert learning["dropped"]["low_confidence"] >= 3
    assert sum(v for k, v in learning["extraction_confidence"].items() if k < "0.7") >= 3


def test_threshold_is_configurable(tmp_path: Path) -> None:
    turn = ConversationTurn("I went to a support group yesterday.", user_name="Caroline")
    with open_fake(tmp_path / "c", **{"learning.min_extraction_confidence": 0.8}) as strict:
        assert strict.capture_conversation(turn) == []  # an event scores 0.72 < 0.8
    with open_fake(tmp_path / "d") as default:
        (m,) = default.capture_conversation(turn)
        assert m.content.startswith("Caroline went to a support group yesterday (said on")
        # What the user states of themselves is knowledge of theirs, however episodic.
        assert m.memory_class is MemoryClass.EPISODIC and m.type is MemoryType.KNOWLEDGE and m.origin == "user"


def test_at_most_three_memories_per_turn_most_confident_first(memory: MemoryManager) -> None:
    message = (
        "I prefer tabs over spaces. We decided to use FastAPI for the backend. "
        "The project uses PostgreSQL 16. Our deploys must go through staging first. I love dark themes."
    )
    captured = memory.capture_conversation(ConversationTurn(message, "OK."))
    assert len(captured) == 3
    confidences = [m.metadata["confidence"] for m in captured]
    assert confidences == sorted(confidences, reverse=True) and min(confidences) >= 0.7
    assert memory.stats().learning["dropped"]["over_cap"] == 2
    with open_fake(memory.path.parent / "one", **{"learning.max_memories_per_turn": 1}) as one:
        assert len(one.capture_conversation(ConversationTurn(message, ""))) == 1


#: Other knowledge, each in its own session: ranking is relative, so near-ties need a realistic
#: field around them (min-max fusion over two candidates would set them far apart).
DISTRACTORS = [
    "We back up the database every night.",
    "The analytics team will use Grafana dashboards.",
    "Use the staging database for load tests.",
    "Our main API is written in Go.",
    "Database migrations run in CI.",
    "We use Redis as a cache.",
    "Use feature flags for risky changes.",
    "The database password rotates monthly.",
    "Backups are kept for thirty days.",
    "We use Terraform for infrastructure.",
]


def _with_distractors(store: MemoryManager) -> None:
    for i, text in enumerate(DISTRACTORS):
        store.store(text, type="knowledge", session_id=f"other_{i}")


def test_trigger_boost_is_visible_in_search_ranking(tmp_path: Path) -> None:
    pair = ["We use PostgreSQL for the main database.", "We use MySQL for the main database."]
    query, side_query = "which database do we use", "nightly database backups"

    def capture(store: MemoryManager, triggered: str | None) -> None:
        _with_distractors(store)
        for i, text in enumerate(pair):
            said = f"From now on remember that {text[0].lower()}{text[1:]}" if text == triggered else text
            store.capture_conversation(ConversationTurn(said, conversation_id=f"c{i}"))

    # Without a trigger the two statements are near-ties; find which one loses...
    with open_fake(tmp_path / "plain") as store:
        capture(store, None)
        loser = store.search(query, limit=2)[1].content
        before = [h.content for h in store.search(side_query, limit=20)].index(loser)
    # ... then say the loser with a trigger phrase: it now ranks first, and scores higher.
    with open_fake(tmp_path / "trigger") as store:
        capture(store, loser)
        hits = store.search(query, limit=2)
        assert hits[0].content == loser, [(h.content, h.score) for h in hits]
        after = [h.content for h in store.search(side_query, limit=20)].index(loser)
    # The importance factor orders; the score is a calibrated relevance, which importance leaves alone.
    assert after <= before


def test_custom_trigger_patterns(tmp_path: Path) -> None:
    with open_fake(tmp_path / "s", **{"learning.memory_trigger_patterns": [r"\bnote to self\b"]}) as store:
        (m,) = store.capture_conversation(ConversationTurn("Note to self: staging runs on port 8443"))
        assert m.metadata["trigger"] is True and m.importance > 0.5
        (n,) = store.capture_conversation(ConversationTurn("Remember that the staging database is Postgres 15."))
        assert n.metadata["trigger"] is False and n.importance == 0.5


# -- events and metrics ------------------------------------------------------------------------------


def test_subscriber_raising_does_not_lose_the_memory(memory: MemoryManager, events: list[MemoryCaptured]) -> None:
    def broken(event: MemoryCaptured) -> None:
        raise RuntimeError("subscriber bug")

    unsubscribe = subscribe(broken)
    try:
        m = memory.capture_correction("Use tabs", "Use spaces")
    finally:
        unsubscribe()
    assert memory.get(m.id).content == m.content
    assert events[-1].memories[0].id == m.id  # later subscribers still ran


def test_every_capture_publishes_an_event_and_is_counted(memory: MemoryManager, events: list[MemoryCaptured]) -> None:
    memory.capture_conversation(ConversationTurn("Hello there!", "Hi!"))  # nothing memorable: still an event
    memory.capture_conversation(ConversationTurn("I prefer short answers without emojis.", ""))
    memory.capture_correction("colour", "color", "US spelling")
    memory.capture_config_change("editor.fontSize", 12, 14)
    m = memory.capture_config_change("notifications", None, False)
    assert m is not None and m.content == "User prefers notifications disabled."
    memory.confirm("short answers", memory.search("short answers")[0].id)
    sources = [e.source.value for e in events]
    assert sources == [
        "conversation",
        "conversation",
        "correction",
        "configuration",
        "configuration",
        "search_confirmation",
    ]
    learning = memory.stats().learning
    assert learning["capture_events"] == {
        "conversation": 2,
        "correction": 1,
        "configuration": 2,
        "search_confirmation": 1,
    }
    assert learning["memories_created"]["by_type"] == {"knowledge": 4}
    assert learning["memories_created"]["by_class"] == {"semantic": 4}
    assert learning["extraction_confidence"]["0.8-0.9"] == 1  # the preference (0.85)
    assert sum(learning["extraction_confidence"].values()) >= 2


def test_automatic_capture_respects_switches(tmp_path: Path) -> None:
    turn = ConversationTurn("I prefer pytest over unittest.", conversation_id="banking_42")
    with open_fake(tmp_path / "a", **{"learning.capture_all_conversations": False}) as store:
        assert store.capture_conversation(turn, automatic=True) == []
        assert len(store.capture_conversation(turn)) == 1  # an explicit call still captures
    with open_fake(tmp_path / "b", **{"privacy.exclude_sessions": ["banking_*"]}) as store:
        assert store.capture_conversation(turn, automatic=True) == []
    with open_fake(tmp_path / "c", **{"learning.capture_config_changes": False}) as store:
        assert store.capture_config_change("theme", "light", "dark", automatic=True) is None


def test_bad_input_names_the_field(memory: MemoryManager) -> None:
    with pytest.raises(ValidationError, match="'user_message'"):
        memory.capture_conversation({"assistant_response": "hi"})
    with pytest.raises(ValidationError, match="'turn'"):
        memory.capture_conversation({"user_message": "hi", "speaker": "x"})
    with pytest.raises(ValidationError, match="'timestamp'"):
        memory.capture_conversation({"user_message": "hi", "timestamp": "yesterday-ish"})
    with pytest.raises(ValidationError, match="'corrected'"):
        memory.capture_correction("same", "same")
    with pytest.raises(ValidationError, match="'key'"):
        memory.capture_config_change("", "a", "b")


def test_disabled_memory_reports_it(tmp_path: Path) -> None:
    from remindful.errors import MemoryDisabledError

    with open_fake(tmp_path / "off", enabled=False) as store:
        with pytest.raises(MemoryDisabledError):
            store.capture_conversation(ConversationTurn("Hello!"))
        with pytest.raises(MemoryDisabledError):
            store.capture_correction("a", "b")
        with pytest.raises(MemoryDisabledError):
            store.suggest("anything")
        assert store.capture_conversation(ConversationTurn("I prefer tabs."), automatic=True) == []
