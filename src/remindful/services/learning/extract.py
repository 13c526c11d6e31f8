"""Rule-based extraction: the statements in a conversation turn worth remembering.

No model, no network: sentences are classified by patterns into preferences, decisions,
project facts and constraints, procedures, instructions, personal facts, plans and events, each
with a fixed confidence; questions, greetings, small talk and hedged remarks score low and are
dropped by the caller's confidence threshold. First-person statements are rewritten in the third
person ("I love painting" → "Melanie loves painting"), so a memory reads correctly out of context.

Confidences (before the hedging penalty of 0.2): explicit trigger 0.95, preference 0.85,
decision 0.85, procedure 0.82, identity/work/home 0.82, project fact 0.8, constraint 0.8,
"my X is Y" 0.78, possession 0.75, plan 0.75, past event 0.72, feelings and small talk ≤ 0.55.
The assistant's side contributes only decisions, procedures, facts and constraints (its "I" is
the agent, not the user), at 0.05 less.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime

from remindful.model import MemoryClass
from remindful.services.learning.types import ConversationTurn, Extraction

_I = r"\b(?:i|we)\s+(?:really\s+|much\s+|strongly\s+|just\s+|also\s+|still\s+|usually\s+|generally\s+)?"
PREFERENCE = re.compile(
    _I + r"(?:prefer|like|love|enjoy|hate|dislike|can't stand|don't like|do not like|want|need|"
    r"would rather|would love to|am (?:a )?(?:big |huge )?fan of|"
    r"am (?:really |so )?(?:keen on|into|interested in|passionate about))\b"
    r"|\bi(?:'m| am)\s+(?:really\s+|so\s+)?"
    r"(?:keen on|into|interested in|passionate about|(?:a\s+)?(?:big\s+|huge\s+)?fan of)\b"
    r"|\bi(?:'d| would)\s+(?:really\s+)?(?:love|like|rather|prefer)\b"
    r"|\bmy\s+fav(?:ou?rite)?\b|\bprefer(?:ably|red)?\b",
    re.IGNORECASE,
)
DECISION = re.compile(
    r"\b(?:we|i)\s+(?:have\s+|'ve\s+)?(?:decided|chose|chosen|agreed|settled on|went with|"
    r"(?:are|am|'re|'m) going (?:to go )?with|will go with|'ll go with|will use|'ll use|are switching|switched)\b"
    r"|\blet'?s\s+(?:go with|use|stick with|keep)\b|\bthe decision (?:is|was)\b",
    re.IGNORECASE,
)
PROJECT_FACT = re.compile(
    r"\b(?:we|our\s+\w+|the\s+(?:\w+\s+)?(?:project|app|application|api|codebase|code|repo|repository|service|database|db|"
    r"server|build|team|backend|frontend|company|client|stack|deployment|pipeline|tests?))\s+"
    r"(?:use|uses|is|are|runs|run|has|have|depends on|deploys?|stores?|targets?|lives?|requires?|supports?|"
    r"relies on|is built|are built|is written|talks to|calls)\b",
    re.IGNORECASE,
)
CONSTRAINT = re.compile(
    r"\b(?:must(?:n't| not)?|has to|have to|needs to|cannot|can't|should (?:never|always|not)|"
    r"is required|are required|not allowed|only supports?|deadline|due (?:on|by)|at most|at least|no more than)\b",
    re.IGNORECASE,
)
PROCEDURE = re.compile(
    r"^(?:to|in order to)\s+\w.{2,80}?,\s*(?:first\s+)?\w+"
    r"|\bfirst\b.{3,120}\bthen\b|\bstep\s+(?:1|one)\b|\bafter that\b.{3,}\bthen\b",
    re.IGNORECASE,
)
INSTRUCTION = re.compile(r"^(?:always|never|don't|do not|please|use|avoid|make sure|ensure|only)\b", re.IGNORECASE)
IDENTITY = re.compile(
    r"\bi(?:'m| am)\s+(?:a|an)\s+\w+|\bi\s+(?:work|live|study|grew up|was born)\s+(?:at|in|as|for|on|near)\b"
    r"|\bi(?:'m| am) from\b|\bmy name is\b",
    re.IGNORECASE,
)
MY_FACT = re.compile(r"\bmy\s+(?:\w+\s+){0,3}(?:is|are|was|were|has|have)\b", re.IGNORECASE)
POSSESSION = re.compile(r"\bi\s+(?:have|'ve got|have got|own)\s+(?:a|an|two|three|four|\d+|some|my)\b", re.IGNORECASE)
PLAN = re.compile(
    r"\bi(?:'m| am)\s+(?:planning|going|thinking about|hoping|about|trying|looking)\s+(?:to|on)\b"
    r"|\bi\s+(?:will|'ll|plan to|intend to|hope to)\b|\bi(?:'m| am)\s+gonna\b"
    r"|\bi(?:'m| am)\s+(?:off|heading|leaving)\s+to\b|^(?:gonna|going to|planning to|about to)\b",
    re.IGNORECASE,
)
_IRREGULAR_PAST = (
    "went|got|made|took|saw|found|thought|felt|met|had|did|bought|began|started|finished|won|lost|left|"
    "came|gave|ran|wrote|read|heard|told|said|kept|brought|built|learned|learnt|joined|visited|tried|sat|stood|"
    "spent|sent|knew|grew|drew|threw|flew|wore|forgot|became|chose|drove|ate|drank|sang|swam|rode|broke|fell|"
    "held|paid|sold|taught|caught|fought|hurt|put|cut|set|let|hit|quit|understood|slept|woke|meant|fed|led|"
    "spoke|stole|hid|shook|lent|dealt|bet|won|saw"
)
EVENT = re.compile(
    r"\bi\s+(?:just\s+|recently\s+|finally\s+|also\s+|actually\s+|even\s+)?"
    rf"(?:{_IRREGULAR_PAST}|\w+ed)\b"
    rf"|\bi(?:'ve| have)\s+(?:just\s+|recently\s+|finally\s+)?(?:been|\w+ed|{_IRREGULAR_PAST})\b",
    re.IGNORECASE,
)
FIRST_PERSON = re.compile(r"\b(?:i|me|my|myself|mine|i'm|i've|i'd)\b", re.IGNORECASE)
HEDGE = re.compile(r"\b(?:maybe|perhaps|i think|i guess|probably|might|not sure|i wonder|kind of|sort of)\b", re.I)
FEELING = re.compile(
    r"^\W*(?:i(?:'m| am)\s+(?:so\s+|really\s+|very\s+)?(?:happy|glad|excited|sorry|thankful|"
    r"grateful|proud|sad|lucky|blessed)\b)|^\W*i\s+(?:was|felt|feel)\s+(?:so\s+|really\s+|very\s+)?"
    r"(?:happy|glad|excited|sorry|thankful|grateful|proud|sad|lucky|blessed)\b",
    re.IGNORECASE,
)
RELATIVE_TIME = re.compile(
    r"\b(?:yesterday|today|tonight|tomorrow|last (?:week|month|year|night|weekend)|next (?:week|month|year)|"
    r"this (?:week|month|year|weekend|morning)|(?:a|two|few|couple of) (?:days|weeks|months|years) ago)\b",
    re.IGNORECASE,
)
_LEAD = re.compile(
    r"^(?:(?:hey|hi|hello|oh|wow|yeah|yes|yep|well|so|and|but|also|haha|lol|ok|okay|aw+|ah|hmm|thanks|"
    r"thank you|sure|great|cool|omg|by the way|btw|actually|honestly)\b[\s,!.:-]*)+",
    re.IGNORECASE,
)
_TRIGGER_PREFIX = re.compile(
    r"^(?:from now on,?\s+(?=(?:please\s+)?(?:remember|note|keep in mind)))?(?:please\s+)?"
    r"(?:remember|note|keep in mind|don't forget|do not forget|never forget)\s+(?:that\s+)?[,:]?\s*",
    re.IGNORECASE,
)
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[\"'(A-Z0-9])|\n+")
_STEP_LINE = re.compile(r"^\s*(?:\d+[.)]|[-*•])\s+(.+)$")
_ADVERBS = {
    "really",
    "just",
    "also",
    "always",
    "never",
    "still",
    "usually",
    "often",
    "actually",
    "finally",
    "recently",
    "definitely",
    "totally",
    "even",
    "mostly",
    "sometimes",
    "generally",
    "strongly",
    "much",
}
_FIXED_VERBS = {
    "was",
    "were",
    "will",
    "would",
    "can",
    "could",
    "should",
    "might",
    "must",
    "shall",
    "may",
    "did",
    "had",
    "didn't",
    "can't",
    "won't",
    "wouldn't",
    "couldn't",
    "shouldn't",
    "wasn't",
}
_IRREGULAR = set(_IRREGULAR_PAST.split("|")) | {"thought", "wanted", "needed"}
_CONTRACTIONS = {
    "i'm": "{s} is",
    "i've": "{s} has",
    "i'd": "{s} would",
    "i'll": "{s} will",
    "i am": "{s} is",
    "i was": "{s} was",
}


MAX_STATEMENT_CHARS = 500
_CODE_BLOCK = re.compile(r"```[\s\S]*?(?:```|\Z)|^(?: {4}|\t).*$", re.MULTILINE)


def split_sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.split(text.strip()) if s and s.strip()]


def third_person(sentence: str, subject: str) -> str:
    """Rewrite the speaker's first person as ``subject`` ("I love it" → "Ann loves it")."""
    out = re.sub(
        r"\b(i'm|i've|i'd|i'll|i am|i was)\b",
        lambda m: _CONTRACTIONS[m.group(1).lower().replace("\u2019", "'")].format(s=subject),
        sentence.replace("\u2019", "'"),
        flags=re.IGNORECASE,
    )
    out = re.sub(
        r"\bi\s+((?:(?:" + "|".join(_ADVERBS) + r")\s+)*)(\w+n't|\w+)\b",
        lambda m: f"{subject} {m.group(1)}{_conjugate(m.group(2))}",
        out,
        flags=re.IGNORECASE,
    )
    out = re.sub(r"\b(?<!')I\b", subject, out)
    out = re.sub(r"\bmy\b", f"{subject}'s", out, flags=re.IGNORECASE)
    out = re.sub(r"\bmine\b", f"{subject}'s", out, flags=re.IGNORECASE)
    out = re.sub(r"\bmyself\b", "themselves", out, flags=re.IGNORECASE)
    out = re.sub(r"\bme\b", subject, out, flags=re.IGNORECASE)
    return out


def _conjugate(verb: str) -> str:
    low = verb.lower()
    if low in _FIXED_VERBS or low in _IRREGULAR or low.endswith("ed"):
        return verb
    special = {"am": "is", "have": "has", "do": "does", "go": "goes", "don't": "doesn't", "haven't": "hasn't"}
    if low in special:
        return special[low]
    if low.endswith("n't"):
        return verb
    if low.endswith(("s", "sh", "ch", "x", "z", "o")):
        return verb + "es"
    if low.endswith("y") and len(low) > 1 and low[-2] not in "aeiou":
        return verb[:-1] + "ies"
    return verb + "s"


def clean(sentence: str) -> str:
    """Drop leading interjections and emoji; capitalise; end with a full stop."""
    text = _LEAD.sub("", sentence.strip()).strip(" ,;:-")
    text = re.sub(r"[\U0001F300-\U0001FAFF\u2600-\u27BF]+", "", text).strip()
    text = re.sub(r"\s+", " ", text)
    if not text:
        return ""
    text = text[0].upper() + text[1:]
    if text[-1] not in ".!?":
        text += "."
    return re.sub(r"!+$", ".", text)


def classify(sentence: str, *, from_user: bool) -> tuple[str, MemoryClass, float]:
    """(category, class, confidence) of one cleaned sentence."""
    s = sentence
    words = len(s.split())
    if s.endswith("?") or words < 4:
        return "small_talk", MemoryClass.EPISODIC, 0.2
    if len(s) > MAX_STATEMENT_CHARS:  # a pasted log or paragraph, not a statement
        return "long_text", MemoryClass.EPISODIC, 0.3
    candidates: list[tuple[str, MemoryClass, float]] = []
    if PROCEDURE.search(s):
        candidates.append(("procedure", MemoryClass.PROCEDURAL, 0.82))
    if DECISION.search(s):
        candidates.append(("decision", MemoryClass.SEMANTIC, 0.85))
    if PROJECT_FACT.search(s):
        candidates.append(("fact", MemoryClass.SEMANTIC, 0.8))
    if CONSTRAINT.search(s):
        personal = bool(re.match(r"^\W*i\b", s, re.IGNORECASE))
        candidates.append(("constraint", MemoryClass.SEMANTIC, 0.6 if personal else 0.8))
    if from_user:
        if PREFERENCE.search(s):
            candidates.append(("preference", MemoryClass.SEMANTIC, 0.85))
        if INSTRUCTION.search(s):
            candidates.append(("instruction", MemoryClass.SEMANTIC, 0.8))
        if IDENTITY.search(s):
            candidates.append(("personal_fact", MemoryClass.SEMANTIC, 0.82))
        if MY_FACT.search(s):
            candidates.append(("personal_fact", MemoryClass.SEMANTIC, 0.78))
        if POSSESSION.search(s):
            candidates.append(("personal_fact", MemoryClass.SEMANTIC, 0.75))
        if PLAN.search(s):
            candidates.append(("plan", MemoryClass.EPISODIC, 0.75))
        if EVENT.search(s):
            candidates.append(("event", MemoryClass.EPISODIC, 0.72))
        if FEELING.search(s):
            candidates.append(("feeling", MemoryClass.EPISODIC, 0.55))
        elif words >= 6 and FIRST_PERSON.search(s):
            # Something about the speaker that no sharper rule names: worth keeping, just.
            candidates.append(("personal", MemoryClass.EPISODIC, 0.7))
    if not candidates:
        return "small_talk", MemoryClass.EPISODIC, 0.4
    category, memory_class, confidence = max(candidates, key=lambda c: c[2])
    if not from_user:
        confidence -= 0.05
    if HEDGE.search(s):
        confidence -= 0.2
    return category, memory_class, round(confidence, 3)


def _procedure(text: str) -> tuple[str, list[str]] | None:
    """A numbered or bulleted list of ≥ 2 steps, with the goal from the line before it."""
    lines = [line for line in text.splitlines() if line.strip()]
    steps = [m.group(1).strip().rstrip(".") for line in lines if (m := _STEP_LINE.match(line))]
    if len(steps) < 2:
        return None
    head = next((line for line in lines if not _STEP_LINE.match(line)), "")
    goal = re.search(r"\b(?:to|how to|in order to)\s+([^:.,?!]{3,80})", head, re.IGNORECASE)
    return (goal.group(1).strip() if goal else "complete the task"), steps


def extract(turn: ConversationTurn, trigger_patterns: Sequence[re.Pattern[str]]) -> list[Extraction]:
    """Every candidate statement of the turn with its confidence, best first (no threshold, no cap)."""
    subject = turn.user_name or "User"
    found: list[Extraction] = []
    for side, text in (("user", turn.user_message), ("assistant", turn.assistant_response)):
        if not text or not text.strip():
            continue
        from_user = side == "user"
        text = _CODE_BLOCK.sub(" ", text)  # code is not a statement to remember
        procedure = _procedure(text)
        if procedure is not None:
            goal, steps = procedure
            listed = ", ".join(f"{i}) {step}" for i, step in enumerate(steps, 1))
            found.append(Extraction(f"To {goal}: {listed}.", MemoryClass.PROCEDURAL, 0.85, "procedure"))
        for raw in split_sentences(text):
            if _STEP_LINE.match(raw) and procedure is not None:
                continue
            trigger = from_user and any(p.search(raw) for p in trigger_patterns)
            sentence = clean(_TRIGGER_PREFIX.sub("", clean(raw)) if from_user else raw)
            if not sentence:
                continue
            category, memory_class, confidence = classify(sentence, from_user=from_user)
            if trigger:
                confidence = max(confidence, 0.95)
                if category in ("small_talk", "feeling"):
                    category, memory_class = (
                        ("instruction" if INSTRUCTION.search(sentence) else "fact"),
                        (MemoryClass.SEMANTIC),
                    )
            content = third_person(sentence, subject) if from_user else sentence
            if from_user and re.match(r"(?:gonna|going to|planning to|about to)\b", content, re.IGNORECASE):
                content = f"{subject} is {content[0].lower()}{content[1:]}"
            if memory_class is MemoryClass.EPISODIC and RELATIVE_TIME.search(sentence):
                content = content.rstrip(".") + f" (said on {_day(turn.timestamp)})."
            if category == "instruction" and not content.lower().startswith(subject.lower()):
                content = f"{subject} instruction: {content}"
            found.append(Extraction(content, memory_class, confidence, category, trigger))
    seen: set[str] = set()
    unique = []
    for item in sorted(found, key=lambda e: -e.confidence):  # stable: ties keep message order
        key = re.sub(r"\W+", " ", item.content.lower()).strip()
        if key not in seen:
            seen.add(key)
            unique.append(item)
    return unique


def _day(at: datetime) -> str:
    return f"{at.day} {at:%B %Y}"


__all__ = ["classify", "clean", "extract", "split_sentences", "third_person"]
