"""A coding agent's prompt and the answer after it become one conversation turn that is learned from."""

from __future__ import annotations

from pathlib import Path

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
