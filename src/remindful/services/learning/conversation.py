"""Capture from a conversation turn: extract, filter by confidence, cap, store, boost triggers.

``capture_conversation(store, turn)`` extracts the statements worth remembering (the LLM when
configured for ``conversation``, else the rules of :mod:`remindful.services.learning.extract`), drops those
under ``learning.min_extraction_confidence`` (0.7), keeps at most ``learning.max_memories_per_turn``
(3) of the most confident, and stores them: semantic and procedural statements as ``knowledge``
memories, episodic ones as ``conversation`` memories, all with source ``conversation``. A statement
made with a trigger phrase ("remember that", "from now on"… — ``learning.memory_trigger_patterns``)
is reinforced (importance + ``learning.trigger_boost``), so it outranks its near-ties in search.
Returns the stored memories (possibly none) and publishes ``MemoryCaptured`` either way.
"""

from __future__ import annotations

import fnmatch
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from remindful.model import Memory, MemoryClass, MemoryType, OriginKind, make_origin
from remindful.services.learning import llm
from remindful.services.learning.common import MemoryWriter, bucket, finish, preview, refresh, store_memories
from remindful.services.learning.extract import extract
from remindful.services.learning.reinforce import ReinforcementReason, reinforce
from remindful.services.learning.types import CaptureSource, ConversationTurn, Extraction, as_datetime

if TYPE_CHECKING:
    from remindful.config import Settings
    from remindful.engine.repositories import LearningRepository

log = logging.getLogger("remindful.services.learning")

SYSTEM = "You extract durable memories from conversations. Answer with JSON only."
PROMPT = """Analyze this conversation turn and extract any learnable information.

User: {user}
Assistant: {assistant}

Extract information that would be useful to remember for future conversations:
- User preferences and requirements
- Project facts and constraints
- Decisions made
- Procedures or workflows mentioned

Write each as a standalone statement (name the user as "{subject}", not "I"), and say who stated it:
"user" only for what the user said, "assistant" for what the assistant said.
Respond with a JSON array:
[{{"content": "statement to remember", "type": "semantic|episodic|procedural", "confidence": 0.0-1.0,
"said_by": "user|assistant"}}]

Return an empty array [] if nothing notable to remember."""


@lru_cache(maxsize=32)
def _compiled(patterns: tuple[str, ...]) -> tuple[re.Pattern[str], ...]:
    return tuple(re.compile(p, re.IGNORECASE) for p in patterns)


def trigger_patterns(settings: Settings) -> tuple[re.Pattern[str], ...]:
    return _compiled(tuple(settings.learning.memory_trigger_patterns))


def conversation_capture_enabled(settings: Settings, conversation_id: str | None = None) -> bool:
    """Whether automatic capture of turns is on: ``enabled``, ``auto_capture.enabled``,
    ``learning.capture_all_conversations``, and the conversation not in an excluded session."""
    if not (settings.enabled and settings.auto_capture.enabled and settings.learning.capture_all_conversations):
        return False
    patterns = [*settings.privacy.exclude_sessions, *settings.auto_capture.filters.ignore_sessions]
    return not (conversation_id and any(fnmatch.fnmatch(conversation_id, p) for p in patterns))


def _validate_llm(value: Any) -> list[Extraction]:
    if not isinstance(value, list):
        raise ValueError(f"expected a JSON array, got {type(value).__name__}")
    out = []
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            raise ValueError(f"item {i} is not an object")
        content, kind, confidence = item.get("content"), item.get("type"), item.get("confidence")
        if not isinstance(content, str) or not content.strip() or len(content) > 2000:
            raise ValueError(f"item {i}: content must be a non-empty string of at most 2000 characters")
        if kind not in {c.value for c in MemoryClass}:
            raise ValueError(f"item {i}: type must be semantic, episodic or procedural, got {kind!r}")
        if isinstance(confidence, bool) or not isinstance(confidence, int | float) or not 0 <= confidence <= 1:
            raise ValueError(f"item {i}: confidence must be a number from 0 to 1, got {confidence!r}")
        said_by = item.get("said_by", "unknown")
        if said_by not in ("user", "assistant", "unknown"):
            raise ValueError(f"item {i}: said_by must be user or assistant, got {said_by!r}")
        # Who said it unknown: the assistant (provenance is never guessed in the user's favour).
        user = said_by == "user"
        out.append(Extraction(content.strip(), MemoryClass(kind), float(confidence), "llm", from_user=user))
    return sorted(out, key=lambda e: -e.confidence)


def capture_conversation(
    store: MemoryWriter,
    learning: LearningRepository,
    turn: ConversationTurn | Mapping[str, Any],
    *,
    automatic: bool = False,
    forgotten: Callable[[str], bool] | None = None,
    known: Callable[[str], bool] | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> list[Memory]:
    """Extract and store the memorable statements of ``turn``; see the module docstring.

    ``automatic=True`` (hooks, event handlers) first checks :func:`conversation_capture_enabled`
    and returns ``[]`` when capture is off. ``forgotten(statement)`` True leaves a statement out
    (the user deleted it before, or a correction replaced it), counted as ``dropped.forgotten``;
    ``known(statement)`` True leaves it out uncounted (it was learned from this very turn before: a
    replayed drain). ``metadata`` is added to every memory stored.
    Raises ValidationError for a malformed turn.
    """
    if not isinstance(turn, ConversationTurn):
        turn = ConversationTurn.from_dict(dict(turn))
    settings = store.settings
    if automatic and not conversation_capture_enabled(settings, turn.conversation_id):
        log.debug("[MEM:CAPTURE] conversation capture is off; turn of %s skipped", turn.conversation_id)
        return []
    store.ready()  # memory disabled: MemoryDisabledError with the reason, even for an empty turn
    if not turn.user_message.strip() and not turn.assistant_response.strip():
        return []
    config = settings.learning
    patterns = trigger_patterns(settings)
    has_trigger = any(p.search(turn.user_message) for p in patterns)
    subject = turn.user_name or "User"
    prompt = PROMPT.format(user=turn.user_message, assistant=turn.assistant_response, subject=subject)
    extractions = llm.ask(store, learning, "conversation", SYSTEM, prompt, _validate_llm)
    extractor = "llm" if extractions is not None else "rules"
    if extractions is not None and not turn.assistant_response.strip():
        extractions = [replace(e, from_user=True) for e in extractions]  # only the user spoke
    if extractions is None:
        extractions = extract(turn, patterns)
    kept = select(extractions, config.min_extraction_confidence)
    counts: dict[tuple[str, str], float] = {}
    for e in extractions:
        counts[("confidence", bucket(e.confidence))] = counts.get(("confidence", bucket(e.confidence)), 0) + 1
    counts[("dropped", "low_confidence")] = len(extractions) - len(kept)
    if forgotten is not None:
        remembered = [e for e in kept if not forgotten(e.content)]
        counts[("dropped", "forgotten")] = len(kept) - len(remembered)
        kept = remembered
    counts[("dropped", "over_cap")] = max(0, len(kept) - config.max_memories_per_turn)
    kept = kept[: config.max_memories_per_turn]
    if known is not None:  # after the cap: a replay stores what the first drain would have
        kept = [e for e in kept if not known(e.content)]
    memories = store_memories(store, [_item(turn, e, extractor, has_trigger, metadata or {}) for e in kept])
    boosted = [
        m
        for m, e in zip(memories, kept, strict=True)
        if e.from_user and (e.trigger or (has_trigger and extractor == "llm"))
    ]
    for memory in boosted:
        reinforce(learning, memory.id, ReinforcementReason.EXPLICIT_USER_CONFIRMATION, config.trigger_boost)
    if boosted:
        memories = refresh(store, memories)
    for memory in memories:
        log.info(
            "[MEM:CAPTURE] Captured %s memory from conversation: %s",
            memory.memory_class.value,
            preview(memory.content, 50),
        )
    finish(learning, CaptureSource.CONVERSATION, turn.conversation_id, memories, counts)
    return memories


def select(extractions: Sequence[Extraction], min_confidence: float) -> list[Extraction]:
    """The extractions at least ``min_confidence``, what the user said before what the assistant
    did (each side most confident first), so the per-turn cap never drops a statement of the user's
    for an observation of the assistant's."""
    kept = [e for e in extractions if e.confidence >= min_confidence]
    return sorted(kept, key=lambda e: (not e.from_user, -e.confidence))


def _item(
    turn: ConversationTurn, e: Extraction, extractor: str, has_trigger: bool, extra: Mapping[str, Any]
) -> dict[str, Any]:
    """The store item of one extraction: whatever the user stated is a ``knowledge`` memory of
    theirs (origin ``user``; its category says decision, preference, rule, fact, event...);
    what the assistant said is an ``observation`` of the assistant's (origin ``assistant``),
    however it is phrased: only the user's words may become a decision, preference or rule."""
    metadata: dict[str, Any] = {
        **extra,
        "conversation_id": turn.conversation_id,
        "user_id": turn.user_id,
        "confidence": round(e.confidence, 3),
        "category": e.category if e.from_user else "observation",
        "trigger": e.from_user and (e.trigger or (has_trigger and extractor == "llm")),
        "extractor": extractor,
        "learned_from": f"Learned from conversation on {turn.timestamp:%Y-%m-%d}",
    }
    if turn.project_id:
        metadata["project_id"] = turn.project_id
    return {
        "content": e.content,
        "type": MemoryType.KNOWLEDGE,
        "memory_class": e.memory_class,
        "source": "conversation",
        "origin": make_origin(OriginKind.USER if e.from_user else OriginKind.ASSISTANT),
        "metadata": metadata,
        "session_id": None if turn.conversation_id == "default" else turn.conversation_id,
        "timestamp": turn.timestamp,
    }


def turn_from_hook_events(prompt_event: Mapping[str, Any], stop_event: Mapping[str, Any]) -> ConversationTurn:
    """A turn from a coding agent's UserPromptSubmit event and the Stop event that followed it.

    The prompt is ``prompt_event["prompt"]``; the response is ``stop_event["last_assistant_message"]``
    (or ``response`` / ``assistant_response``), else the last assistant message of the transcript
    at ``stop_event["transcript_path"]`` (JSON lines). Conversation id: ``session_id``. Raises
    ValidationError if the prompt is missing. Capture it with
    ``manager.capture_conversation(turn, automatic=True)``.
    """
    from remindful.errors import ValidationError

    prompt = prompt_event.get("prompt")
    if not isinstance(prompt, str):
        raise ValidationError("prompt_event.prompt", "expected the UserPromptSubmit event's prompt text")
    response = next(
        (
            stop_event[k]
            for k in ("last_assistant_message", "response", "assistant_response")
            if isinstance(stop_event.get(k), str)
        ),
        None,
    )
    if response is None and isinstance(stop_event.get("transcript_path"), str):
        response = last_assistant_message(stop_event["transcript_path"])
    session = prompt_event.get("session_id") or stop_event.get("session_id") or "default"
    return ConversationTurn(
        user_message=prompt,
        assistant_response=response or "",
        conversation_id=str(session),
        user_id=str(prompt_event.get("user_id") or "user"),
        timestamp=as_datetime(prompt_event.get("timestamp"), "prompt_event.timestamp"),
        project_id=prompt_event.get("cwd") if isinstance(prompt_event.get("cwd"), str) else None,
    )


def last_assistant_message(transcript_path: str) -> str | None:
    """The text of the last assistant message in a Claude Code transcript (JSON lines), or None."""
    import json
    import os
    import stat

    try:
        # Not open(): on a FIFO it waits for a writer, forever (a hook must not hang on any path).
        fd = os.open(transcript_path, os.O_RDONLY | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            lines = fh.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        message = entry.get("message") if isinstance(entry, dict) else None
        if not isinstance(message, dict) or message.get("role") != "assistant":
            continue
        content = message.get("content")
        if isinstance(content, str):
            return content
        if isinstance(content, Sequence):
            texts = [c.get("text", "") for c in content if isinstance(c, dict) and c.get("type") == "text"]
            if any(texts):
                return "\n".join(t for t in texts if t)
    return None


__all__ = [
    "capture_conversation",
    "conversation_capture_enabled",
    "last_assistant_message",
    "trigger_patterns",
    "turn_from_hook_events",
]
