"""Context-aware suggestions and failure warnings (context-persistence.md, "Context-Aware
Suggestions").

``suggest(store, context)``:

- **suggestions**: past workflows and successful actions similar to the context (MiniLM cosine
  ≥ ``learning.min_suggestion_similarity``), best first, each with its memory id and date:
  "I found similar login automation from Oct 20, 2023, would you like to replay it?"
- **warnings**: when the action the context describes (or ``action={"action": "click",
  "target": {"x": 500, "y": 300}}``, or a tool call: ``action={"tool": "mouse_click",
  "arguments": {"x": 500, "y": 300}}``, or the context ``mouse_click(500, 300)``) has failed
  before — the same action signature (verb + target, see :mod:`remindful.services.learning.actions`),
  which for the tool calls the MCP middleware, the proxy and the hooks captured is their tool and
  arguments — "This action failed 5 times previously, success rate: 0%", with alternatives:
  successful memories for a similar context, and the advice that fits what the action is (a shell
  command, an edit, an action on a screen). Every recorded call of the tool counts (up to
  :data:`CALLS_EXAMINED`), not only those a search of the context finds; a failed command or edit
  that a later success in its session fixed is not counted.

Relevance is judged by cosine similarity of the stored vectors, not by the fused search score,
which is relative (the best hit of any search scores near 1 however poor it is).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from remindful.errors import ValidationError
from remindful.model import Alternative, FailureWarning, Memory, MemoryType, Suggestion, Suggestions
from remindful.services.learning.actions import ADVICE, action_kind, outcome, signature, step_text, tool_call, when
from remindful.services.learning.common import MemoryWriter

if TYPE_CHECKING:
    from remindful.engine.repositories import MemoryRepository

#: Candidates examined per search; enough to count repeated failures of one action.
CANDIDATES = 50
#: Recorded calls of the tool a context names that are examined for its warnings, newest first.
CALLS_EXAMINED = 500


def _similarities(
    store: MemoryWriter, memories: MemoryRepository, context: str, ids: Sequence[str]
) -> dict[str, float]:
    if not ids:
        return {}
    store.ready()
    vector = store.embedder.embed([context])[0]
    stored = memories.embeddings(list(ids))
    return {mid: float(np.dot(vec, vector)) for mid, vec in stored.items()}


def _candidates(store: MemoryWriter, context: str, types: list[str], resumed_session: str | None) -> list[Memory]:
    # Every candidate, however weak, and every copy: repeated failures are counted.
    hits = store.search(
        context, types=types, limit=CANDIDATES, min_score=0.0, collapse=False, resumed_session=resumed_session
    )
    return [m for m in store.get_batch([h.id for h in hits]) if m is not None]


def _what(memory: Memory) -> str:
    if memory.type is MemoryType.WORKFLOW:
        name = memory.metadata.get("name")
        return f"{str(name).replace('_', ' ')} workflow" if name else "workflow"
    return "action"


def suggest(
    store: MemoryWriter,
    memories: MemoryRepository,
    context: str,
    *,
    action: Mapping[str, Any] | None = None,
    limit: int = 3,
    resumed_session: str | None = None,
) -> Suggestions:
    """Suggestions and warnings for ``context``; see the module docstring. Read-only.
    ``resumed_session``: the session the caller resumed, whose memories rank higher as candidates."""
    if not isinstance(context, str) or not context.strip():
        raise ValidationError("context", "expected a description of the current situation or intended action")
    if action is not None and not isinstance(action, Mapping):
        raise ValidationError("action", 'expected an object like {"action": "click", "target": {"x": 1, "y": 2}}')
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 50:
        raise ValidationError("limit", f"expected an integer from 1 to 50, got {limit!r}")
    threshold = store.settings.learning.min_suggestion_similarity
    candidates = _candidates(store, context, ["workflow", "action"], resumed_session)
    similarity = _similarities(store, memories, context, [m.id for m in candidates])

    suggestions = []
    # Workflows first: a workflow is a whole automation the agent can replay.
    ranked = sorted(candidates, key=lambda m: (m.type is not MemoryType.WORKFLOW, -similarity.get(m.id, 0.0)))
    for memory in ranked:
        sim = similarity.get(memory.id, 0.0)
        if sim < threshold or outcome(memory) is False:
            continue
        date = when(memory)
        suggestions.append(
            Suggestion(
                memory_id=memory.id,
                type=memory.type.value,
                content=memory.content,
                date=date,
                created_at=memory.created_at,
                similarity=round(sim, 3),
                message=f"I found similar {_what(memory)} from {date}, would you like to replay it?",
            )
        )
        if len(suggestions) >= limit:
            break

    warnings = []
    wanted = signature(context, dict(action) if action else None)
    call = tool_call(context, dict(action) if action else None)
    if call is not None and wanted:  # the calls of that tool, however the context's search ranks them
        known = {m.id for m in candidates}
        ids = [i for i in memories.tool_calls(call[0], CALLS_EXAMINED) if i not in known]
        candidates += [m for m in store.get_batch(ids) if m is not None]
    same = [m for m in candidates if m.type is MemoryType.ACTION and signature(m.content, m.metadata) == wanted]
    kind = action_kind(context, dict(action) if action else None)
    failures = _open_failures(same, kind)
    successes = [m for m in same if outcome(m) is True]
    if wanted and failures:
        rate = len(successes) / (len(successes) + len(failures))
        times = "time" if len(failures) == 1 else "times"
        verb = wanted.split(" ", 1)[0]

        def alternative(m: Memory) -> bool:
            # Something that worked for this context: similar enough, or the same kind of action
            # done another way (a selector instead of coordinates) and at least loosely similar.
            sig, sim = signature(m.content, m.metadata), similarity.get(m.id, 0.0)
            if outcome(m) is not True or sig == wanted:
                return False
            return sim >= threshold or (sig.split(" ", 1)[0] == verb and sim >= threshold / 2)

        alternatives = [
            Alternative(
                memory_id=m.id,
                content=step_text(m.content),
                date=when(m),
                similarity=round(similarity.get(m.id, 0.0), 3),
            )
            for m in sorted(candidates, key=lambda m: -similarity.get(m.id, 0.0))
            if alternative(m)
        ][:limit]
        warnings.append(
            FailureWarning(
                message=f"This action failed {len(failures)} {times} previously, success rate: {rate:.0%}",
                action=wanted,
                failures=len(failures),
                successes=len(successes),
                success_rate=round(rate, 3),
                memory_ids=tuple(m.id for m in failures),
                last_failure=max(m.created_at for m in failures),
                alternatives=tuple(alternatives),
                advice=ADVICE[kind],
            )
        )
    return Suggestions(context, tuple(suggestions), tuple(warnings))


def _open_failures(same: list[Memory], kind: str) -> list[Memory]:
    """The failures of one action that are still open: for a command or an edit, a failure that a
    later success in its session fixed is not (an action on a screen that works on a retry stays
    unreliable: each failure counts)."""
    failures = [m for m in same if outcome(m) is False]
    if kind == "gui":
        return failures
    fixed_after: dict[str | None, Any] = {}
    for m in same:
        if outcome(m) is True:
            last = fixed_after.get(m.session_id)
            fixed_after[m.session_id] = m.created_at if last is None else max(last, m.created_at)
    return [m for m in failures if not (m.session_id in fixed_after and fixed_after[m.session_id] > m.created_at)]


__all__ = ["suggest"]
