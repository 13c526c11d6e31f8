"""The optional LLM path against a local OpenAI-compatible server (http.server on 127.0.0.1):
valid output is used, malformed output and a reached token cap fall back to the rules."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from remindful.api import MemoryManager
from remindful.services.learning.llm import FakeLLM, set_llm
from remindful.services.learning.types import ConversationTurn, UserAction
from remindful.testing import open_fake

pytestmark = pytest.mark.integration


class FakeOpenAI:
    """A chat-completions endpoint answering scripted replies, recording each request."""

    def __init__(self) -> None:
        self.replies: list[str] = []
        self.requests: list[dict[str, Any]] = []
        self.usage = 120
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                owner.requests.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
                text = owner.replies.pop(0) if owner.replies else "[]"
                answer = {
                    "id": "chatcmpl-1",
                    "object": "chat.completion",
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": text}}],
                    "usage": {"prompt_tokens": owner.usage - 20, "completion_tokens": 20, "total_tokens": owner.usage},
                }
                data = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeOpenAI:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


@pytest.fixture
def endpoint() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


def _store(tmp_path: Path, url: str, **overrides: Any) -> MemoryManager:
    settings = {
        "learning.llm.enabled": True,
        "learning.llm.base_url": url,
        "learning.llm.model": "test-model",
        "learning.llm.api_key_env": "REMINDFUL_TEST_LLM_KEY",
        **overrides,
    }
    return open_fake(tmp_path / "store", **settings)


TURN = ConversationTurn("Remember that staging deploys need a VPN.", "Understood.", conversation_id="c9")


def test_valid_llm_output_is_used(tmp_path: Path, endpoint: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REMINDFUL_TEST_LLM_KEY", "sk-test-123")
    endpoint.replies.append(
        json.dumps(
            [
                {
                    "content": "Staging deploys require a VPN connection.",
                    "type": "semantic",
                    "confidence": 0.93,
                    "said_by": "user",
                },
                {"content": "The user said hello.", "type": "episodic", "confidence": 0.2, "said_by": "user"},
            ]
        )
    )
    with _store(tmp_path, endpoint.url) as store:
        (m,) = store.capture_conversation(TURN)
        assert m.content == "Staging deploys require a VPN connection."
        assert m.metadata["extractor"] == "llm" and m.metadata["trigger"] is True and m.importance > 0.5
        llm = store.stats().learning["llm"]
    (request,) = endpoint.requests
    assert request["path"] == "/v1/chat/completions" and request["auth"] == "Bearer sk-test-123"
    assert request["body"]["model"] == "test-model"
    assert "Remember that staging deploys need a VPN." in request["body"]["messages"][1]["content"]
    assert llm["tokens_today"] == 120 and llm["calls"] == 1 and llm["valid"] == 1
    assert llm["cap_remaining"] == 200_000 - 120


@pytest.mark.parametrize(
    "reply",
    [
        "Sure! Here is what I found: staging needs VPN",  # not JSON
        '{"content": "x"}',  # not an array
        '[{"content": "Staging needs VPN", "type": "fact", "confidence": 0.9}]',  # unknown type
        '[{"content": "Staging needs VPN", "type": "semantic", "confidence": 7}]',  # out of range
    ],
)
def test_malformed_output_falls_back_to_rules(tmp_path: Path, endpoint: FakeOpenAI, reply: str) -> None:
    endpoint.replies.append(reply)
    with _store(tmp_path, endpoint.url) as store:
        (m,) = store.capture_conversation(TURN)
        assert m.metadata["extractor"] == "rules" and m.content == "Staging deploys need a VPN."
        assert store.stats().learning["llm"]["invalid"] == 1
    assert len(endpoint.requests) == 1


def test_token_cap_reached_uses_rules(tmp_path: Path, endpoint: FakeOpenAI) -> None:
    endpoint.replies.append(json.dumps([{"content": "A from the LLM.", "type": "semantic", "confidence": 0.9}]))
    # room for exactly one call: the next one's estimate (prompt + max_tokens) would pass the cap
    with _store(tmp_path, endpoint.url, **{"learning.llm.daily_token_cap": 750}) as store:
        assert store.capture_conversation(TURN)[0].metadata["extractor"] == "llm"
        second = store.capture_conversation(ConversationTurn("I prefer rebase over merge for feature branches."))
        assert second[0].metadata["extractor"] == "rules"
        llm = store.stats().learning["llm"]
    assert len(endpoint.requests) == 1  # the capped call never reached the endpoint
    assert llm["capped"] == 1 and llm["tokens_today"] == 120 and llm["daily_token_cap"] == 750


def test_unreachable_endpoint_falls_back(tmp_path: Path) -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with _store(tmp_path, f"http://127.0.0.1:{port}/v1", **{"learning.llm.timeout_seconds": 2}) as store:
        assert store.capture_conversation(TURN)[0].metadata["extractor"] == "rules"
        assert store.stats().learning["llm"]["failed"] == 1


def test_llm_for_corrections_and_workflows(tmp_path: Path, endpoint: FakeOpenAI) -> None:
    endpoint.replies += [
        '```json\n{"statement": "The API authenticates with API keys, not OAuth."}\n```',
        '{"workflow": null}',
        '{"workflow": "To release: 1) Run tests, 2) Tag, 3) Publish"}',
    ]
    start = datetime(2026, 1, 5, 10, tzinfo=UTC)
    steps = [UserAction("cmd", s, start + timedelta(minutes=i)) for i, s in enumerate(["run tests", "tag", "publish"])]
    with _store(tmp_path, endpoint.url) as store:
        m = store.capture_correction("API uses OAuth", "API uses API keys", "auth")
        assert m.content == "The API authenticates with API keys, not OAuth."
        assert m.metadata["synthesized_by"] == "llm"
        assert store.capture_workflow(steps) is None  # the LLM judged them unrelated
        wf = store.capture_workflow(steps)
        assert wf is not None and wf.content == "To release: 1) Run tests, 2) Tag, 3) Publish"
    assert "Corrected to: API uses API keys" in endpoint.requests[0]["body"]["messages"][1]["content"]


def test_use_for_limits_the_capture_points(tmp_path: Path) -> None:
    fake = FakeLLM(replies=['{"statement": "From the LLM."}'])
    with open_fake(tmp_path / "s", **{"learning.llm.use_for": ["correction"]}) as store:
        set_llm(store.engine, fake)
        assert store.capture_correction("a b c", "a b d").content == "From the LLM."
        (m,) = store.capture_conversation(ConversationTurn("I prefer rebase over merge for feature branches."))
        assert m.metadata["extractor"] == "rules" and len(fake.prompts) == 1
