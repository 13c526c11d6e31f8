"""Pattern analysis over action memories (context-persistence.md, "Workflow Pattern Learning"
and "Analyze automation success patterns").

``analyze_patterns(engine)`` reads the action memories (newest ``max_memories``, optionally only
the last ``days``), groups them by session in time order and reports:

- **patterns**: contiguous action sequences (``min_length`` = ``learning.min_actions_for_pattern``
  up to ``max_length`` steps, by action signature) seen in at least ``min_support`` sessions.
  ``confidence`` = sessions with the whole sequence / sessions with its first step — how reliably
  the first step leads into the rest. A sequence contained in a longer one with the same support
  is left out. ``store=True`` saves each as a ``workflow`` memory (updated, not duplicated, on the
  next run) so that suggestions can offer it.
- **success rates** per kind of action (verb) and per action (signature), with the high-success
  (≥ 90 %) and failure-prone (≤ 60 %) ones as insights ("click succeeds 95% (19/20)"). A failure
  that a later success of the same command or edit in its session fixed is resolved, not open; a
  kind of action is listed only where none of its actions is; each comes with the advice that fits
  what it is (a shell command, an edit, an action on a screen).
"""

from __future__ import annotations

import json
import math
import time
from collections import Counter, defaultdict
from typing import TYPE_CHECKING, Any

from remindful.errors import ValidationError
from remindful.model import Memory, PatternReport
from remindful.services.learning.actions import ADVICE, action_kind, call_name, label, outcome, signature, step_text
from remindful.services.learning.common import MemoryWriter, store_memories

if TYPE_CHECKING:
    from remindful.engine.repositories import MemoryRepository

METRICS = ("success_rate", "frequency", "sequences")


#: Success rate (open failures counted) at or under which an action or a kind is failure-prone.
FAILURE_PRONE = 0.6


def _rates(
    groups: dict[str, list[bool | None]],
    min_count: int,
    labels: dict[str, Counter[str]],
    resolved: Counter[str],
    kinds: dict[str, Counter[str]],
) -> list[dict[str, Any]]:
    """Success rates per group; ``action`` names the group by its most frequent wording (groups are
    keyed by stemmed words, which are not for display), ``kind`` is what it mostly was (shell,
    edit, gui, other: :func:`~remindful.services.learning.actions.action_kind`), ``resolved`` its
    failures that a later success of the same action in the same session fixed, ``open_failures``
    the others, and ``open_success_rate`` the rate without the resolved ones."""
    out = []
    for key, results in groups.items():
        judged = [r for r in results if r is not None]
        if len(judged) < min_count:
            continue
        successes = sum(judged)
        failures = len(judged) - successes
        fixed = min(resolved.get(key, 0), failures)
        kind = kinds[key].most_common(1)[0][0] if kinds.get(key) else "other"
        out.append(
            {
                "action": labels[key].most_common(1)[0][0] if labels.get(key) else key,
                "key": key,
                "kind": kind,
                "count": len(results),
                "successes": successes,
                "failures": failures,
                "resolved": fixed,
                "open_failures": failures - fixed,
                "success_rate": round(successes / len(judged), 3),
                "open_success_rate": round(successes / (len(judged) - fixed), 3) if len(judged) > fixed else 1.0,
                "advice": ADVICE[kind],
            }
        )
    return sorted(out, key=lambda r: (-r["count"], r["action"]))


def _failure_prone(actions: list[dict[str, Any]], kinds: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The actions whose open failures make them unreliable, then the kinds of action that are, but
    only where no action of that kind is listed already (one entry per action: not ``bash`` beside
    ``bash pnpm test``). A failure fixed later in its session is not open."""
    prone = [r for r in actions if r["open_failures"] and r["open_success_rate"] <= FAILURE_PRONE]
    listed = {r["key"].split(" ", 1)[0] for r in prone}
    return prone + [
        r for r in kinds if r["open_failures"] and r["open_success_rate"] <= FAILURE_PRONE and r["key"] not in listed
    ]


def _insight(r: dict[str, Any]) -> str:
    judged = r["successes"] + r["open_failures"]
    fixed = f", {r['resolved']} more fixed later" if r["resolved"] else ""
    return f"{r['action']} fails {1 - r['open_success_rate']:.0%} ({r['open_failures']}/{judged}{fixed}): {r['advice']}"


def _load(
    engine: MemoryWriter, memories: MemoryRepository, type: str, days: float | None, max_memories: int
) -> list[Memory]:
    since = time.time() - days * 86400 if days else 0.0
    ids = memories.newest_ids(type, since, max_memories)
    found = [m for m in engine.get_batch(ids) if m is not None]
    return sorted(found, key=lambda m: (m.session_id or "", m.created_at))


def _sequences(
    by_session: dict[str, list[tuple[str, Memory]]], min_length: int, max_length: int, min_support: int
) -> list[dict[str, Any]]:
    support: dict[tuple[str, ...], set[str]] = defaultdict(set)
    examples: dict[tuple[str, ...], list[Memory]] = {}
    occurrences: dict[tuple[str, ...], int] = defaultdict(int)
    starts: dict[str, set[str]] = defaultdict(set)
    for session, steps in by_session.items():
        sigs = [s for s, _ in steps]
        for sig in sigs:
            starts[sig].add(session)
        for n in range(min_length, max_length + 1):
            for i in range(len(sigs) - n + 1):
                key = tuple(sigs[i : i + n])
                if len(set(key)) < 2:  # one action repeated is not a workflow
                    continue
                support[key].add(session)
                occurrences[key] += 1
                examples.setdefault(key, [m for _, m in steps[i : i + n]])
    frequent = {k: v for k, v in support.items() if len(v) >= min_support}
    kept = [
        k
        for k in frequent
        if not any(len(o) > len(k) and len(frequent[o]) == len(frequent[k]) and _contains(o, k) for o in frequent)
    ]
    patterns = []
    for key in kept:
        sessions = len(frequent[key])
        memories = examples[key]
        results = [outcome(m) for m in memories]
        judged = [r for r in results if r is not None]
        patterns.append(
            {
                "steps": [step_text(m.content) for m in memories],
                "signatures": list(key),
                "actions": [label(m.content, m.metadata) for m in memories],
                "length": len(key),
                "sessions": sessions,
                "occurrences": occurrences[key],
                "confidence": round(sessions / max(len(starts[key[0]]), 1), 3),
                "success_rate": round(sum(judged) / len(judged), 3) if judged else None,
                "example_memory_ids": [m.id for m in memories],
                "suggestion": f"Automate this {len(key)}-step workflow, seen in {sessions} sessions: "
                + " → ".join(step_text(m.content) for m in memories),
            }
        )
    return sorted(patterns, key=lambda p: (-p["sessions"], -p["length"], p["signatures"]))


def _contains(longer: tuple[str, ...], shorter: tuple[str, ...]) -> bool:
    n = len(shorter)
    return any(longer[i : i + n] == shorter for i in range(len(longer) - n + 1))


def analyze_patterns(
    engine: MemoryWriter,
    memories: MemoryRepository,
    type: str = "action",
    metric: str | None = None,
    *,
    min_support: int = 2,
    max_length: int = 6,
    days: float | None = None,
    max_memories: int = 20_000,
    store: bool = False,
) -> PatternReport:
    """Recurring sequences and success rates; see the module docstring. ``metric`` narrows the
    answer to ``success_rate``, ``frequency`` or ``sequences`` (None: everything)."""
    if type not in ("action", "screen", "workflow"):
        raise ValidationError("type", f"expected action, screen or workflow, got {type!r}")
    if metric is not None and metric not in METRICS:
        raise ValidationError("metric", f"expected one of {', '.join(METRICS)}, got {metric!r}")
    if isinstance(min_support, bool) or not isinstance(min_support, int) or min_support < 1:
        raise ValidationError("min_support", f"expected an integer ≥ 1, got {min_support!r}")
    min_length = engine.settings.learning.min_actions_for_pattern
    if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < min_length:
        raise ValidationError("max_length", f"expected an integer ≥ {min_length}, got {max_length!r}")
    if days is not None and (isinstance(days, bool) or not isinstance(days, int | float) or not 0 < days < math.inf):
        raise ValidationError("days", f"expected a positive number of days, got {days!r}")
    loaded = _load(engine, memories, type, days, max_memories)
    by_session: dict[str, list[tuple[str, Memory]]] = defaultdict(list)
    by_verb: dict[str, list[bool | None]] = defaultdict(list)
    by_signature: dict[str, list[bool | None]] = defaultdict(list)
    sig_labels: dict[str, Counter[str]] = defaultdict(Counter)  # signature -> its wordings
    verb_labels: dict[str, Counter[str]] = defaultdict(Counter)
    sig_kinds: dict[str, Counter[str]] = defaultdict(Counter)
    verb_kinds: dict[str, Counter[str]] = defaultdict(Counter)
    resolved_sig: Counter[str] = Counter()
    resolved_verb: Counter[str] = Counter()
    pending: Counter[str] = Counter()  # failures of each signature not yet followed by a success
    session = None
    for memory in loaded:  # by session, in time order
        if memory.session_id != session:
            session, pending = memory.session_id, Counter()
        sig = signature(memory.content, memory.metadata)
        words = label(memory.content, memory.metadata)
        kind = action_kind(memory.content, memory.metadata)
        by_session[memory.session_id or "none"].append((sig, memory))
        result = outcome(memory)
        verb = sig.split(" ", 1)[0]
        by_verb[verb].append(result)
        by_signature[sig].append(result)
        sig_labels[sig][call_name(memory.metadata) or words] += 1
        verb_labels[verb][words.split(" ", 1)[0]] += 1
        sig_kinds[sig][kind] += 1
        verb_kinds[verb][kind] += 1
        if result is False:
            pending[sig] += 1
        elif result is True and pending[sig] and kind != "gui":
            # A command or an edit that worked after failing was fixed; a screen action that works
            # on a retry stays unreliable (the retry is what the advice is about).
            resolved_sig[sig] += pending[sig]
            resolved_verb[verb] += pending.pop(sig)
    report: dict[str, Any] = {"type": type, "analyzed": len(loaded), "sessions": len(by_session)}
    if metric in (None, "sequences", "frequency"):
        report["patterns"] = _sequences(by_session, min_length, max_length, min_support)
    if metric in (None, "success_rate", "frequency"):
        kinds = _rates(by_verb, 1, verb_labels, resolved_verb, verb_kinds)
        actions = _rates(by_signature, 2, sig_labels, resolved_sig, sig_kinds)
        report["by_kind"] = kinds
        report["by_action"] = actions[:50]
        report["high_success"] = [r for r in kinds if r["success_rate"] >= 0.9 and r["count"] >= 3]
        report["failure_prone"] = _failure_prone(actions, kinds)
        for row in kinds + actions:  # the stemmed key groups, it is not for display
            del row["key"]
        report["insights"] = [
            f"{r['action']} succeeds {r['success_rate']:.0%} ({r['successes']}/{r['successes'] + r['failures']})"
            for r in report["high_success"]
        ] + [_insight(r) for r in report["failure_prone"]]
    if store and report.get("patterns"):
        report["stored"] = [_store_pattern(engine, memories, p) for p in report["patterns"]]
    return PatternReport(**report)


def _store_pattern(engine: MemoryWriter, memories: MemoryRepository, pattern: dict[str, Any]) -> str:
    key = json.dumps(pattern["signatures"])
    found = memories.workflow_with_pattern(key)
    metadata = {
        "pattern_key": key,
        "name": "recurring_" + "_".join(s.split(" ", 1)[0] for s in pattern["actions"]),
        "steps": pattern["steps"],
        "sessions": pattern["sessions"],
        "confidence": pattern["confidence"],
        "category": "workflow_pattern",
    }
    if pattern["success_rate"] is not None:
        metadata["success_rate"] = pattern["success_rate"]
    if found is not None:
        engine.update(found, metadata=metadata)
        return found
    listed = ", ".join(f"{i}) {s}" for i, s in enumerate(pattern["steps"], 1))
    content = (
        f"Recurring workflow seen in {pattern['sessions']} sessions (confidence {pattern['confidence']:.2f}): "
        f"{listed}. Consider automating it."
    )
    (memory,) = store_memories(
        engine,
        [
            {
                "content": content,
                "type": "workflow",
                "memory_class": "procedural",
                "source": "workflow_pattern",
                "metadata": metadata,
            }
        ],
    )
    return memory.id


__all__ = ["analyze_patterns"]
