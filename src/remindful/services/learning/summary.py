"""A coding session summarised at its end, when an LLM is configured for it (``session`` in
``learning.llm.use_for``): what was decided, changed, learned and left failing, in a few sentences,
stored as one ``knowledge`` memory (``kind`` summary) of the session's project, so the next session's
brief and context can say it. Without an LLM nothing is stored: the distilled memories of the
session (:mod:`remindful.services.ingest.distill`) already say what happened, line by line.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from remindful.model import Memory, MemoryType
from remindful.services.learning import llm
from remindful.services.learning.common import MemoryWriter, store_memories

if TYPE_CHECKING:
    from remindful.engine.repositories import LearningRepository

log = logging.getLogger("remindful.services.learning")

#: The session's memories (newest first) that the summary is asked of.
SESSION_MEMORIES = 80
#: Kinds of memory left out of what the LLM reads: raw activity and what only repeats the prompts.
_SKIPPED = ("activity",)

SYSTEM = "You summarise coding sessions for the developer's next session. Answer with JSON only."
PROMPT = """Here is what happened in a coding session, oldest first (one line per event):

{events}

Write what the next session in this project must know: decisions made, what was changed and why,
facts learned about the project, and failures still open. At most 5 short sentences; no greetings.
Respond with JSON: {{"summary": "the sentences"}}"""


def _validate(value: Any) -> str:
    summary = llm.require_keys(value, ["summary"])["summary"]
    if not isinstance(summary, str) or not summary.strip() or len(summary) > 2000:
        raise ValueError("summary must be a non-empty string of at most 2000 characters")
    return summary.strip()


def summarize_session(
    store: MemoryWriter, learning: LearningRepository, session_id: str, project_id: str | None
) -> Memory | None:
    """Ask the LLM configured for ``session`` to summarise the session and store the summary; None
    when no LLM is configured for it, the session holds nothing to summarise, or the LLM's answer
    cannot be used (:func:`remindful.services.learning.llm.ask` logs and counts why)."""
    if llm.llm_for(store, "session") is None:
        return None
    memories = store.list_memories(session_id=session_id, limit=SESSION_MEMORIES)
    events = [
        f"- ({m.type.value}) {' '.join(m.content.split())[:300]}"
        for m in reversed(memories)
        if m.metadata.get("kind") not in _SKIPPED and m.metadata.get("kind") != "summary"
    ]
    if not events:
        return None
    summary = llm.ask(store, learning, "session", SYSTEM, PROMPT.format(events="\n".join(events)), _validate)
    if summary is None:
        return None
    metadata: dict[str, Any] = {"kind": "summary", "synthesized_by": "llm", "summarized_session": session_id}
    if project_id:
        metadata["project_id"] = project_id
    (memory,) = store_memories(
        store,
        [
            {
                "content": summary,
                "type": MemoryType.KNOWLEDGE,
                "memory_class": "semantic",
                "source": "conversation",
                "origin": "system",  # an LLM's summary of what both sides said: nobody's own words
                "session_id": session_id,
                "metadata": metadata,
            }
        ],
    )
    log.info("[MEM:CAPTURE] Summarised session %s", session_id)
    return memory


__all__ = ["summarize_session"]
