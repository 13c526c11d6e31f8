"""The records the capture points take: a conversation turn, a user action, an extraction."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from remindful.engine.sqlfilter import to_epoch
from remindful.errors import ValidationError
from remindful.model import MemoryClass


class CaptureSource(StrEnum):
    """Which capture point produced a :class:`~remindful.services.learning.bus.MemoryCaptured`."""

    CONVERSATION = "conversation"
    CORRECTION = "correction"
    CONFIGURATION = "configuration"
    WORKFLOW_PATTERN = "workflow_pattern"
    SEARCH_CONFIRMATION = "search_confirmation"


@dataclass(frozen=True, slots=True)
class ConversationTurn:
    """A user message and the assistant's response. ``user_name`` (when known) replaces "I" in
    the extracted statements; without it they say "User"."""

    user_message: str
    assistant_response: str = ""
    conversation_id: str = "default"
    user_id: str = "user"
    timestamp: datetime = field(default_factory=lambda: datetime.now(UTC))
    project_id: str | None = None
    user_name: str | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ConversationTurn:
        """Build a turn from JSON-like input; raises ValidationError naming a bad field."""
        if not isinstance(data, dict):
            raise ValidationError("turn", "expected an object with user_message and assistant_response")
        known = {
            "user_message",
            "assistant_response",
            "conversation_id",
            "user_id",
            "timestamp",
            "project_id",
            "user_name",
        }
        unknown = set(data) - known
        if unknown:
            raise ValidationError("turn", f"unknown keys {sorted(unknown)}; expected {sorted(known)}")
        return cls(
            user_message=_text(data.get("user_message"), "user_message", allow_empty=True),
            assistant_response=_text(data.get("assistant_response", ""), "assistant_response", allow_empty=True),
            conversation_id=_text(data.get("conversation_id", "default"), "conversation_id"),
            user_id=_text(data.get("user_id", "user"), "user_id"),
            timestamp=as_datetime(data.get("timestamp"), "timestamp"),
            project_id=None if data.get("project_id") is None else _text(data["project_id"], "project_id"),
            user_name=None if data.get("user_name") is None else _text(data["user_name"], "user_name"),
        )


@dataclass(frozen=True, slots=True)
class UserAction:
    """One observed action: ``action_type`` (``command``, ``click``, ``tool``…) and what it did."""

    action_type: str
    description: str
    timestamp: datetime
    metadata: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: Any, index: int = 0) -> UserAction:
        where = f"actions[{index}]"
        if not isinstance(data, dict):
            raise ValidationError(where, "expected an object with action_type, description, timestamp")
        metadata = data.get("metadata") or {}
        if not isinstance(metadata, dict):
            raise ValidationError(f"{where}.metadata", "expected an object")
        return cls(
            action_type=_text(data.get("action_type", "action"), f"{where}.action_type"),
            description=_text(data.get("description"), f"{where}.description"),
            timestamp=as_datetime(data.get("timestamp"), f"{where}.timestamp"),
            metadata=metadata,
        )


@dataclass(frozen=True, slots=True)
class Extraction:
    """A statement worth remembering, its cognitive class, confidence in [0, 1] and a category
    (preference, decision, fact, constraint, procedure, instruction, event, plan)."""

    content: str
    memory_class: MemoryClass
    confidence: float
    category: str = "fact"
    trigger: bool = False
    #: Whether the user said it (else the assistant did: it stays an ``observation``).
    from_user: bool = True


def as_datetime(value: Any, field_name: str) -> datetime:
    """``None`` → now (UTC); ISO 8601 text, epoch seconds or a datetime → aware UTC datetime."""
    if value is None:
        return datetime.now(UTC)
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    return datetime.fromtimestamp(to_epoch(value, field_name), UTC)


def _text(value: Any, field_name: str, *, allow_empty: bool = False) -> str:
    if not isinstance(value, str) or (not allow_empty and not value.strip()):
        raise ValidationError(field_name, "expected a non-empty string" if not allow_empty else "expected a string")
    return value
