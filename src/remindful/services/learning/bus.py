"""The in-process capture bus: ``MemoryCaptured`` after each capture.

Built on a blinker signal. :func:`publish` calls every subscriber itself, each in its own
``try``: a subscriber that raises is logged and skipped, so it can neither break the capture nor
starve the subscribers after it (blinker's own ``send`` would stop at the first exception).
The memories are already committed when the event is published.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from blinker import Signal

from remindful.model import Memory
from remindful.services.learning.types import CaptureSource

log = logging.getLogger("remindful.services.learning")

#: Receivers get ``(sender, event=MemoryCaptured)``; prefer :func:`subscribe`.
memory_captured = Signal("memory-captured")


@dataclass(frozen=True, slots=True)
class MemoryCaptured:
    """Memories captured from one source: a conversation id, a setting key, a workflow name,
    a memory id (for a search confirmation, whose ``memories`` is the reinforced memory)."""

    source_id: str
    source: CaptureSource
    memories: tuple[Memory, ...]
    at: datetime = field(default_factory=lambda: datetime.now(UTC))


Subscriber = Callable[[MemoryCaptured], object]


def subscribe(fn: Subscriber) -> Callable[[], None]:
    """Call ``fn(event)`` after every capture; returns a function that unsubscribes it.
    Held strongly: it stays subscribed until unsubscribed."""

    def receiver(_sender: object, event: MemoryCaptured) -> None:
        fn(event)

    memory_captured.connect(receiver, weak=False)
    return lambda: memory_captured.disconnect(receiver)


def publish(event: MemoryCaptured) -> int:
    """Deliver ``event`` to every subscriber; returns how many raised (each is logged)."""
    failed = 0
    for receiver in list(memory_captured.receivers_for(None)):
        try:
            receiver(None, event=event)
        except Exception:  # a subscriber's bug must not lose or undo a capture
            failed += 1
            log.exception("[MEM:CAPTURE] subscriber %r failed on %s event", receiver, event.source.value)
    return failed


__all__ = ["MemoryCaptured", "memory_captured", "publish", "subscribe"]
