"""Optional LLM for extraction and synthesis: any OpenAI-compatible chat endpoint.

``LLM`` is the protocol; :class:`OpenAICompatibleLLM` talks to ``{base_url}/chat/completions``
with httpx (key from the environment variable named by ``learning.llm.api_key_env``), and
:class:`FakeLLM` answers from a script for tests.

:func:`ask` is how capture points use it. It returns the validated answer, or ``None`` meaning
"use the rules" — when the LLM is off or not used for this capture point, when the daily token cap
(``learning.llm.daily_token_cap``, per UTC day, kept in the catalog so every process shares it)
would be exceeded, when the request fails, or when the answer is not the JSON asked for. Each
outcome is counted (``stats()["learning"]["llm"]``) and logged; a capture never fails because of
the LLM.
"""

from __future__ import annotations

import json
import logging
import os
import re
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar

from remindful.engine.store import Store
from remindful.errors import RemindfulError
from remindful.services.learning.common import bump

log = logging.getLogger("remindful.services.learning")
T = TypeVar("T")


class LLMError(RemindfulError):
    """The LLM endpoint could not be reached or answered with an error."""


@dataclass(frozen=True, slots=True)
class Completion:
    """The reply text and the tokens it cost (as reported by the endpoint, else estimated)."""

    text: str
    tokens: int


class LLM(Protocol):
    """A chat model: one system + user message in, text out. Raises LLMError on failure."""

    def complete(self, system: str, prompt: str, *, max_tokens: int) -> Completion: ...


def estimate_tokens(text: str) -> int:
    """About 4 characters per token: the usual estimate for English with BPE tokenizers."""
    return max(1, len(text) // 4)


class OpenAICompatibleLLM:
    """``POST {base_url}/chat/completions`` (OpenAI, vLLM, llama.cpp server, Ollama, LM Studio…)."""

    def __init__(
        self, base_url: str, model: str, *, api_key: str | None = None, timeout: float = 20.0, transport: Any = None
    ) -> None:
        import httpx

        if not model:
            raise LLMError("learning.llm.model is empty", suggestion="set the chat model name, e.g. gpt-4o-mini")
        self.base_url = base_url.rstrip("/")
        self.model = model
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(timeout=timeout, headers=headers, transport=transport)

    def complete(self, system: str, prompt: str, *, max_tokens: int) -> Completion:
        import httpx

        body = {
            "model": self.model,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": prompt}],
            "temperature": 0,
            "max_tokens": max_tokens,
        }
        try:
            response = self._client.post(f"{self.base_url}/chat/completions", json=body)
            response.raise_for_status()
            data = response.json()
            text = data["choices"][0]["message"]["content"]
        except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as exc:
            raise LLMError(f"LLM request to {self.base_url} failed: {exc}") from exc
        if not isinstance(text, str):
            raise LLMError("LLM reply has no text content")
        usage = data.get("usage") if isinstance(data, dict) else None
        tokens = usage.get("total_tokens") if isinstance(usage, dict) else None
        if not isinstance(tokens, int) or tokens <= 0:
            tokens = estimate_tokens(system + prompt) + estimate_tokens(text)
        return Completion(text, tokens)

    def close(self) -> None:
        self._client.close()


@dataclass
class FakeLLM:
    """Answers from ``replies`` in order (the last one repeats), or from ``reply(prompt)``.
    Records each prompt in ``prompts``. A reply that is an exception is raised."""

    replies: list[str | Exception] = field(default_factory=list)
    reply: Callable[[str], str] | None = None
    tokens_per_call: int = 100
    prompts: list[str] = field(default_factory=list)

    def complete(self, system: str, prompt: str, *, max_tokens: int) -> Completion:
        self.prompts.append(prompt)
        if self.reply is not None:
            return Completion(self.reply(prompt), self.tokens_per_call)
        if not self.replies:
            raise LLMError("FakeLLM has no reply scripted")
        answer = self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]
        if isinstance(answer, Exception):
            raise answer
        return Completion(answer, self.tokens_per_call)


_INJECTED: weakref.WeakKeyDictionary[Store, LLM] = weakref.WeakKeyDictionary()
_BUILT: weakref.WeakKeyDictionary[Store, LLM] = weakref.WeakKeyDictionary()


def set_llm(store: Store, llm: LLM | None) -> None:
    """Use ``llm`` for this store's capture points named in ``learning.llm.use_for`` (even if
    ``learning.llm.enabled`` is false); ``None`` goes back to the configured one. A manager's
    store is ``manager.engine``."""
    if llm is None:
        _INJECTED.pop(store, None)
    else:
        _INJECTED[store] = llm


def llm_for(store: Store, point: str) -> LLM | None:
    """The LLM to ask at capture point ``point``, or None (rules)."""
    settings = store.settings.learning.llm
    if point not in settings.use_for:
        return None
    if store in _INJECTED:
        return _INJECTED[store]
    if not settings.enabled:
        return None
    if store not in _BUILT:
        _BUILT[store] = OpenAICompatibleLLM(
            settings.base_url,
            settings.model,
            api_key=os.environ.get(settings.api_key_env) or None,
            timeout=settings.timeout_seconds,
        )
    return _BUILT[store]


def _today() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%d")


def tokens_used_today(store: Store) -> int:
    rows = store.catalog.read("SELECT value FROM learning_counters WHERE kind = 'llm_tokens' AND key = ?", (_today(),))
    return int(rows[0][0]) if rows else 0


def parse_json(text: str) -> Any:
    """The JSON in a reply, tolerating a Markdown code fence around it. Raises ValueError."""
    stripped = text.strip()
    fenced = re.match(r"^```(?:json)?\s*([\s\S]*?)\s*```$", stripped)
    if fenced:
        stripped = fenced.group(1)
    return json.loads(stripped)


def ask(
    store: Store,
    point: str,
    system: str,
    prompt: str,
    validate: Callable[[Any], T],
    *,
    max_tokens: int = 512,
) -> T | None:
    """Ask the LLM at ``point`` and return ``validate(parsed JSON)``; None → use the rules."""
    try:
        llm = llm_for(store, point)
    except RemindfulError as exc:
        log.warning("LLM not usable (%s); using the rules", exc)
        bump(store.catalog, {("llm", "unusable"): 1})
        return None
    if llm is None:
        return None
    catalog = store.catalog
    cap = store.settings.learning.llm.daily_token_cap
    used = tokens_used_today(store)
    if used + estimate_tokens(system + prompt) + max_tokens > cap:
        log.warning("[MEM:CAPTURE] LLM daily token cap reached (%d of %d used); using the rules", used, cap)
        bump(catalog, {("llm", "capped"): 1})
        return None
    try:
        completion = llm.complete(system, prompt, max_tokens=max_tokens)
    except Exception as exc:  # a broken endpoint or client must not fail the capture
        log.warning("LLM call failed (%s); using the rules", exc)
        bump(catalog, {("llm", "failed"): 1})
        return None
    bump(catalog, {("llm_tokens", _today()): completion.tokens, ("llm", "calls"): 1})
    try:
        result = validate(parse_json(completion.text))
    except (ValueError, TypeError, KeyError) as exc:
        log.warning("LLM answer rejected (%s): %.200r; using the rules", exc, completion.text)
        bump(catalog, {("llm", "invalid"): 1})
        return None
    bump(catalog, {("llm", "valid"): 1})
    return result


def require_keys(value: Any, keys: Iterable[str]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"expected a JSON object, got {type(value).__name__}")
    missing = [k for k in keys if k not in value]
    if missing:
        raise ValueError(f"missing keys {missing}")
    return value


__all__ = [
    "LLM",
    "Completion",
    "FakeLLM",
    "LLMError",
    "OpenAICompatibleLLM",
    "ask",
    "estimate_tokens",
    "llm_for",
    "parse_json",
    "set_llm",
    "tokens_used_today",
]
