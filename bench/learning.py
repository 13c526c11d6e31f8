"""Learning from what the user says: what is kept of the user's turns, and what is kept by mistake.

Three figures, each for remindful's rules of this tree and, in the same run, for the rules of the
tree before this design (the extractor of commit ``BASE``, read with ``git show``: "today's rules"),
through the same policy (confidence >= ``learning.min_extraction_confidence``, at most
``learning.max_memories_per_turn`` per turn):

- **evidence** (LongMemEval dev, ``longmemeval_dev.json.xz``): of the user turns marked
  ``has_answer`` (they hold the evidence of a later question), the share that yield a knowledge
  memory of the user's; where the question's ``answer`` string appears in the turn, a memory must
  contain it;
- **nothing to keep** (``tests/fixtures/learning/nothing_to_keep.txt``, ~240 hand-written
  coding-agent prompts: requests, questions, pasted code and logs, chit-chat): the share that yield
  any knowledge memory (learned by mistake), per label;
- **other turns** (for the record): every 20th LongMemEval user turn without ``has_answer``, the
  share that yields a knowledge memory; no measure of mistakes, as those users state facts about
  themselves in most turns;
- **facts** (``tests/fixtures/learning/states_facts.txt``, coding-agent prompts stating ports,
  package managers, conventions, decisions): the share of stated facts some knowledge memory holds.

This tree's figures go through ``MemoryManager.capture_conversation`` on a fake-embedder store (the
rules need no model); a knowledge memory counts when its origin is the user's. Today's rules count
what they stored as knowledge (their non-episodic extractions), whoever said it.

    python bench/learning.py [--data PATH] [--base COMMIT] [--show-misses N] [--json]
"""

from __future__ import annotations

import json
import lzma
import re
import subprocess
import sys
import tempfile
import types
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from common import REPO, add_data_option, emit, machine, parser

#: The tree whose rules are "today's": the commit this design starts from.
BASE = "2f4459f"
FIXTURES = REPO / "tests" / "fixtures" / "learning"

Learner = Callable[[str], list[str]]


def prompt_set(path: Path) -> list[tuple[str, str]]:
    """``(head, prompt)`` of each block of a prompt set (the format its header describes)."""
    out = []
    for block in path.read_text(encoding="utf-8").split("\n---\n"):
        lines = [line for line in block.strip("\n").split("\n") if not line.startswith("# ") and line != "#"]
        out.append((lines[0].removeprefix("#").strip(), "\n".join(lines[1:])))
    return out


def evidence_turns(path: Path) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """``(answer, turn text)`` of every ``has_answer`` user turn of the LongMemEval file, and of
    every 20th other user turn (``("", text)``: for the record, not a measure of mistakes, since
    LongMemEval's users state facts about themselves in most turns)."""
    with lzma.open(path, "rt", encoding="utf-8") as fh:
        questions = json.load(fh)
    turns = [(q["answer"], t) for q in questions for session in q["sessions"] for t in session["turns"]]
    evidence = [(answer, t["content"]) for answer, t in turns if t.get("has_answer")]
    others = [("", t["content"]) for _, t in turns if not t.get("has_answer")][::20]
    return evidence, others


def this_tree() -> tuple[Learner, Callable[[], None]]:
    """Learn through ``capture_conversation`` of this tree, on a fresh fake-embedder store."""
    from remindful.model import MemoryType
    from remindful.testing import open_fake

    scratch = tempfile.TemporaryDirectory(prefix="remindful-learning-")
    store = open_fake(Path(scratch.name) / "store")
    count = iter(range(10**9))

    def learn(text: str) -> list[str]:
        turn = {"user_message": text, "conversation_id": f"c{next(count)}"}
        return [
            m.content for m in store.capture_conversation(turn) if m.type is MemoryType.KNOWLEDGE and m.origin == "user"
        ]

    def close() -> None:
        store.close()
        scratch.cleanup()

    return learn, close


def todays_rules(base: str) -> Learner | None:
    """The extractor of commit ``base`` (None when git cannot show it), under the policy of its tree."""
    try:
        source = subprocess.run(
            ["git", "-C", str(REPO), "show", f"{base}:src/remindful/services/learning/extract.py"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    from remindful.config import DEFAULT_TRIGGER_PATTERNS, Settings
    from remindful.model import MemoryClass
    from remindful.services.learning.types import ConversationTurn

    old = types.ModuleType("remindful_learning_base")
    exec(compile(source, f"{base}:extract.py", "exec"), old.__dict__)
    patterns = [re.compile(p, re.IGNORECASE) for p in DEFAULT_TRIGGER_PATTERNS]
    config = Settings().learning

    def learn(text: str) -> list[str]:
        found = [
            e for e in old.extract(ConversationTurn(text), patterns) if e.confidence >= config.min_extraction_confidence
        ]
        return [e.content for e in found[: config.max_memories_per_turn] if e.memory_class is not MemoryClass.EPISODIC]

    return learn


def holds(memories: Sequence[str], wanted: str) -> bool:
    return any(wanted.lower() in m.lower() for m in memories)


def measure(
    learn: Learner,
    evidence: Sequence[tuple[str, str]],
    negatives: Sequence[tuple[str, str]],
    facts: Sequence[tuple[str, str]],
) -> dict[str, Any]:
    kept = 0
    missed: list[str] = []
    for answer, text in evidence:
        memories = learn(text)
        ok = holds(memories, answer) if answer.lower() in text.lower() else bool(memories)
        kept += ok
        if not ok:
            missed.append(text)
    by_label: dict[str, list[int]] = {}
    mistakes: list[str] = []
    for label, text in negatives:
        learned = bool(learn(text))
        counts = by_label.setdefault(label, [0, 0])
        counts[0] += learned
        counts[1] += 1
        if learned:
            mistakes.append(text)
    stated = found = 0
    lost: list[str] = []
    for head, text in facts:
        memories = learn(text)
        for wanted in head.split(" | "):
            stated += 1
            found += holds(memories, wanted)
            if not holds(memories, wanted):
                lost.append(f"{wanted}: {text}")
    wrong = sum(c[0] for c in by_label.values())
    return {
        "evidence": {"kept": kept, "turns": len(evidence), "share": round(kept / max(1, len(evidence)), 3)},
        "nothing_to_keep": {
            "learned": wrong,
            "prompts": len(negatives),
            "share": round(wrong / max(1, len(negatives)), 3),
            "by_label": {k: f"{v[0]}/{v[1]}" for k, v in sorted(by_label.items())},
        },
        "facts": {"found": found, "stated": stated, "share": round(found / max(1, stated), 3)},
        "misses": {"evidence": missed, "nothing_to_keep": mistakes, "facts": lost},
    }


def share_learned(learn: Learner, turns: Sequence[tuple[str, str]]) -> dict[str, Any]:
    learned = sum(bool(learn(text)) for _, text in turns)
    return {"learned": learned, "turns": len(turns), "share": round(learned / max(1, len(turns)), 3)}


def lines(result: dict[str, Any]) -> list[str]:
    out = [f"data: {result['data']}"]
    for name, figures in result["rules"].items():
        if figures is None:
            out.append(f"{name}: not measured ({result['base_error']})")
            continue
        ev, neg, facts = figures["evidence"], figures["nothing_to_keep"], figures["facts"]
        out.append(
            f"{name:>22}: evidence turns kept {ev['kept']}/{ev['turns']} = {ev['share']:.3f} | "
            f"nothing-to-keep prompts learned {neg['learned']}/{neg['prompts']} = {neg['share']:.3f} "
            f"({', '.join(f'{k} {v}' for k, v in neg['by_label'].items())}) | "
            f"stated facts found {facts['found']}/{facts['stated']} = {facts['share']:.3f}"
        )
        other = figures["other_turns"]
        out.append(
            f"{'':>24}other LongMemEval user turns (every 20th) that yield knowledge, for the record: "
            f"{other['learned']}/{other['turns']} = {other['share']:.3f}"
        )
    for name, figures in result["rules"].items():
        for kind, texts in (figures or {}).get("shown_misses", {}).items():
            for text in texts:
                out.append(f"  {name} {kind} miss: {' '.join(text.split())[:160]}")
    out.append("targets: evidence >= 0.80, nothing-to-keep <= 0.05")
    return out


def main(argv: list[str] | None = None) -> int:
    args_parser = parser(__doc__)
    add_data_option(args_parser, kind="longmemeval")
    args_parser.add_argument("--base", default=BASE, help="the commit whose rules are today's (default %(default)s)")
    args_parser.add_argument("--show-misses", type=int, default=0, metavar="N", help="print N misses of each kind")
    args = args_parser.parse_args(argv)
    evidence, others = evidence_turns(args.data)
    negatives = prompt_set(FIXTURES / "nothing_to_keep.txt")
    facts = prompt_set(FIXTURES / "states_facts.txt")
    learn, close = this_tree()
    try:
        rules: dict[str, Any] = {"this tree": measure(learn, evidence, negatives, facts)}
        rules["this tree"]["other_turns"] = share_learned(learn, others)
    finally:
        close()
    old = todays_rules(args.base)
    rules[f"today's rules ({args.base})"] = None if old is None else measure(old, evidence, negatives, facts)
    if old is not None:
        rules[f"today's rules ({args.base})"]["other_turns"] = share_learned(old, others)
    for figures in rules.values():
        if figures is not None:
            misses = figures.pop("misses")
            if args.show_misses:
                figures["shown_misses"] = {k: v[: args.show_misses] for k, v in misses.items()}
    result = {
        "data": str(args.data),
        "rules": rules,
        "base_error": f"git show {args.base} failed",
        "machine": machine(),
    }
    emit(result, args.json, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
