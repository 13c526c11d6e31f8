"""A coding agent's prompt and the answer after it become one conversation turn that is learned from."""

from __future__ import annotations

from pathlib import Path

from killed_drain import drain_killed_at
from remindful.testing import open_fake
from test_hooks_events import fire, payload


def test_prompt_and_stop_answer_go_through_conversation_capture(tmp_path: Path) -> None:
    store = tmp_path / "s"
    prompt = "From now on always use pytest with -q for this project, I prefer short output."
    answer = "Understood. I will always run the tests with pytest -q so the output stays short."
    assert fire(store, "UserPromptSubmit", payload("UserPromptSubmit", prompt=prompt))[0] == 0
    assert fire(store, "Stop", payload("Stop", last_assistant_message=answer))[0] == 0
    with open_fake(store) as memory:
        assert memory.drain_spool() == 2
        learned = [m for m in memory.list(limit=50) if m.source.value == "conversation"]
        assert learned, "nothing was learned from the turn"
        assert any("pytest" in m.content for m in learned)
        assert all(m.session_id == "sess-abc123" for m in learned)
        sessions = memory.engine.catalog.read("SELECT metadata FROM sessions WHERE id = 'sess-abc123'")
        assert "pending_prompt" not in sessions[0][0]


def test_no_turn_without_conversation_capture(tmp_path: Path) -> None:
    store = tmp_path / "s"
    fire(store, "UserPromptSubmit", payload("UserPromptSubmit", prompt="From now on always use tabs."))
    fire(store, "Stop", payload("Stop", last_assistant_message="I will always use tabs from now on."))
    with open_fake(store, **{"learning.capture_all_conversations": False}) as memory:
        assert memory.drain_spool() == 2
        assert not [m for m in memory.list(limit=50) if m.source.value == "conversation"]


def test_what_a_prompt_states_is_learned_without_waiting_for_its_answer(tmp_path: Path) -> None:
    """A session cut short before its answer (Ctrl-C, a crash) still teaches what its prompt stated,
    as the user's; the answer, when it comes, adds the assistant's observations, never the user's."""
    store = tmp_path / "s"
    fire(
        store, "UserPromptSubmit", payload("UserPromptSubmit", prompt="FYI: the staging database listens on port 6543.")
    )
    with open_fake(store) as memory:
        memory.drain_spool()
        (learned,) = [m for m in memory.list(limit=50) if m.type.value == "knowledge"]
        assert (learned.content, learned.origin) == ("The staging database listens on port 6543.", "user")
        (prompt,) = [m for m in memory.list(limit=50) if m.metadata.get("kind") == "intent"]
        assert prompt.metadata["learned"] == [learned.id]
    fire(store, "Stop", payload("Stop", last_assistant_message="The staging database is on port 6543 since May."))
    with open_fake(store) as memory:
        memory.drain_spool()
        knowledge = [m for m in memory.list(limit=50) if m.type.value == "knowledge"]
        assert sorted(m.origin for m in knowledge) == ["assistant", "user"]
        assert [m.metadata["category"] for m in knowledge if m.origin == "assistant"] == ["observation"]


def test_a_drain_killed_before_learning_from_a_prompt_learns_it_on_the_next_drain(tmp_path: Path) -> None:
    """The drain finished the prompt's spool row before learning from it: killed in between (it
    stored the prompt, not yet the fact), the next drain had nothing left to learn from."""
    import remindful.services.learning.conversation as conversation

    store = tmp_path / "s"
    fire(
        store, "UserPromptSubmit", payload("UserPromptSubmit", prompt="FYI: the staging database listens on port 6543.")
    )
    with open_fake(store) as memory:
        drain_killed_at(memory, conversation, "capture_conversation")
        memory.drain_spool()
        (learned,) = [m for m in memory.list(limit=50) if m.type.value == "knowledge"]
        assert learned.content == "The staging database listens on port 6543."
        (prompt,) = [m for m in memory.list(limit=50) if m.metadata.get("kind") == "intent"]
        assert prompt.metadata["learned"] == [learned.id]  # the replay found the prompt it had stored


def test_a_drain_killed_after_learning_does_not_learn_the_same_fact_twice(tmp_path: Path) -> None:
    """Killed once the fact is stored but before the spool row is finished, the next drain replays
    the row: the prompt and its fact each stay stored once."""
    store = tmp_path / "s"
    fire(
        store, "UserPromptSubmit", payload("UserPromptSubmit", prompt="FYI: the staging database listens on port 6543.")
    )
    with open_fake(store) as memory:
        captures = type(memory.engine.repositories.captures)
        drain_killed_at(memory, captures, "finish_spooled")
        assert memory.stats().spool_pending == 1
        memory.drain_spool()
        kept = memory.list(limit=50)
        assert [m.content for m in kept if m.type.value == "knowledge"] == [
            "The staging database listens on port 6543."
        ]
        assert len([m for m in kept if m.metadata.get("kind") == "intent"]) == 1


def test_a_prompt_that_is_its_own_fact_is_still_learned(tmp_path: Path) -> None:
    """The prompt's memory and the fact learned from it share their text and their spool row: the
    fact is not taken for one learned before (a replay's check)."""
    store = tmp_path / "s"
    said = "The staging database listens on port 6543."
    fire(store, "UserPromptSubmit", payload("UserPromptSubmit", prompt=said))
    with open_fake(store) as memory:
        memory.drain_spool()
        assert [m.content for m in memory.list(limit=50) if m.type.value == "knowledge"] == [said]
