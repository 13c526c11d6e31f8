"""Capture from a user correction: a ``knowledge`` memory stating the rule, not the instance.

The rules compare the two texts word by word: when they share a frame ("API uses OAuth" →
"API uses API keys"), the statement keeps the corrected text and names what it replaces
("API uses API keys, not OAuth."); when the whole text was replaced, it says which form to use
instead of which. The context, if given, is appended. With an LLM configured for ``correction``
the statement is synthesised by it (spec prompt), falling back to the rules. Corrections are
high-value: the memory is reinforced by ``learning.correction_boost``.
"""

from __future__ import annotations

import logging
import re
import time
from typing import TYPE_CHECKING, Any

from remindful.engine.captures import forget_key
from remindful.errors import ValidationError
from remindful.model import Memory
from remindful.services.learning import llm
from remindful.services.learning.common import MemoryWriter, finish, preview, store_memories
from remindful.services.learning.reinforce import ReinforcementReason, reinforce
from remindful.services.learning.types import CaptureSource

if TYPE_CHECKING:
    from remindful.engine.captures import CaptureRepository
    from remindful.engine.repositories import LearningRepository

log = logging.getLogger("remindful.services.learning")
_WORD = re.compile(r"\w+")

SYSTEM = "You turn user corrections into durable rules. Answer with JSON only."
PROMPT = """The user corrected this output:
Original: {original}
Corrected to: {corrected}
Context: {context}

Synthesize a concise statement to remember that will prevent this mistake in the future.
Focus on the underlying preference or rule, not the specific instance.

Example: If original was "the API uses OAuth" and corrected to "the API uses API keys",
the statement should be "The API uses API keys for authentication, not OAuth."

Respond with JSON: {{"statement": "the statement to remember"}}"""


def synthesize_rule(original: str, corrected: str, context: str = "") -> str:
    """The rule-based statement for a correction (see the module docstring)."""
    o, c = original.strip().rstrip("."), corrected.strip().rstrip(".")
    ow, cw = o.split(), c.split()
    head = 0
    while head < min(len(ow), len(cw)) and ow[head].lower() == cw[head].lower():
        head += 1
    tail = 0
    while tail < min(len(ow), len(cw)) - head and ow[-1 - tail].lower() == cw[-1 - tail].lower():
        tail += 1
    removed = " ".join(ow[head : len(ow) - tail])
    shared = head + tail
    if removed and shared and shared >= min(len(ow), len(cw)) / 3:
        statement = f"{c}, not {removed}."
    elif removed:
        statement = f'Use "{c}" rather than "{o}".'
    else:  # the correction only added words: the corrected form is the rule
        statement = f"{c}."
    statement = statement[0].upper() + statement[1:]
    if context.strip():
        statement = statement.rstrip(".") + f" ({context.strip().rstrip('.')})."
    return statement


def _validate(value: Any) -> str:
    statement = llm.require_keys(value, ["statement"])["statement"]
    if not isinstance(statement, str) or not statement.strip() or len(statement) > 1000:
        raise ValueError("statement must be a non-empty string of at most 1000 characters")
    return statement.strip()


def capture_correction(
    store: MemoryWriter,
    learning: LearningRepository,
    original: str,
    corrected: str,
    context: str = "",
    *,
    captures: CaptureRepository | None = None,
) -> Memory:
    """Store the lesson of a correction (``knowledge``, semantic, source ``correction``),
    reinforce it, publish ``MemoryCaptured``; returns the memory. With ``captures``, what the
    correction replaces stays forgotten: the memories stating ``original`` (the same words, or
    nearly: :func:`replaced`) are marked ``superseded_by`` the correction, and a tombstone of
    ``original`` and of each of them keeps automatic captures from learning them again. Raises
    ValidationError."""
    for name, value in (("original", original), ("corrected", corrected)):
        if not isinstance(value, str) or not value.strip():
            raise ValidationError(name, "expected the non-empty text of the " + name + " output")
    if not isinstance(context, str):
        raise ValidationError("context", "expected a string (may be empty)")
    if original.strip() == corrected.strip():
        raise ValidationError("corrected", "is identical to original; nothing was corrected")
    # Redacted whole before anything reshapes them (the rule statement joins their words on one
    # line, where a multi-line secret such as a key or a .netrc no longer looks like one) or an
    # LLM reads them.
    original, corrected, context = (store.redaction.text(text) for text in (original, corrected, context))
    prompt = PROMPT.format(original=original, corrected=corrected, context=context or "(none)")
    statement = llm.ask(store, learning, "correction", SYSTEM, prompt, _validate)
    synthesized_by = "llm" if statement is not None else "rules"
    if statement is None:
        statement = synthesize_rule(original, corrected, context)
    metadata = {
        "original": original,
        "corrected": corrected,
        "context": context,
        "synthesized_by": synthesized_by,
        "learned_from": f"Learned from correction: {context}" if context else "Learned from correction",
    }
    (memory,) = store_memories(
        store,
        [
            {
                "content": statement,
                "type": "knowledge",
                "memory_class": "semantic",
                "source": "correction",
                "origin": "user",  # the user corrected it
                "metadata": metadata,
            }
        ],
    )
    reinforce(learning, memory.id, ReinforcementReason.USER_CORRECTION, store.settings.learning.correction_boost)
    memory = store.get(memory.id)
    if captures is not None:
        _bury_replaced(store, captures, original, memory.id)
    log.info("[MEM:CAPTURE] Captured correction: %s -> %s", preview(original, 30), preview(corrected, 30))
    finish(learning, CaptureSource.CORRECTION, memory.id, [memory])
    return memory


#: Word overlap (Jaccard) from which a memory states the corrected original.
REPLACED_JACCARD = 0.8


def replaced(original: str, content: str) -> bool:
    """Whether ``content`` states ``original``: the same words, or word sets overlapping at least
    :data:`REPLACED_JACCARD`."""
    a, b = set(_WORD.findall(original.lower())), set(_WORD.findall(content.lower()))
    return bool(a and b) and len(a & b) / len(a | b) >= REPLACED_JACCARD


def _bury_replaced(store: MemoryWriter, captures: CaptureRepository, original: str, correction_id: str) -> None:
    """Mark the memories stating ``original`` superseded by the correction, and bury them and
    ``original`` (see :func:`capture_correction`). Best effort: the correction is stored already."""
    try:
        hits = store.search(
            original,
            types=["knowledge", "conversation"],
            limit=20,
            min_score=0.0,
            collapse=False,
            resumed_session=None,
        )
        stale = [h for h in hits if h.id != correction_id and replaced(original, h.content)]
        for hit in stale:
            store.update(hit.id, metadata={"superseded_by": correction_id})
        graves: dict[str, tuple[str | None, str]] = {forget_key(original): (None, "corrected")}
        graves.update({forget_key(h.content): (h.id, "corrected") for h in stale})
        captures.bury(graves, time.time())
    except Exception as exc:
        log.warning("could not retire what the correction %s replaces: %s", correction_id, exc)


__all__ = ["capture_correction", "replaced", "synthesize_rule"]
