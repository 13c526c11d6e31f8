"""Rule-based extraction: the statements in a conversation turn worth remembering.

No model, no network. The user's sentences go through gates first: a question, a request to the
assistant (an imperative, "can you", "I'd like to know"), a report of what fails right now, words
said to the assistant about this session, a remark about the session itself, a hedged guess, small
talk, a line of code or of a log: none of these is a statement to keep. Whatever passes is a
statement, categorised by its phrasing (decision, preference, rule — ``instruction`` —, procedure,
constraint, fact, personal fact, plan, event) with a fixed confidence; a plain declarative sentence
needs no trigger phrase ("The staging database listens on port 6543" is a ``fact``, 0.75). A
sentence that is a request as a whole is cut at its clauses about the speaker ("I'm looking for
boots, and I just got back from a trip to Big Sur"), and the clauses that state something are
kept. First-person statements are rewritten in the third person ("I love painting" → "Melanie loves
painting"), so a memory reads correctly out of context.

Confidences (before the hedging penalty): explicit trigger 0.95, preference 0.85, decision 0.85,
rule 0.85, procedure 0.82, identity/work/home 0.82, project fact 0.8, constraint 0.8, "my X is Y"
0.78, possession 0.75, plan 0.75, any other statement 0.75 (0.6 when its subject is a bare "it" or
"that"), past event 0.72; feelings and small talk ≤ 0.55, what the gates stop ≤ 0.45.

Provenance decides what a statement may become: only the user's are decisions, preferences and
rules. The assistant's sentences pass the same gates (its own "I", its offers and courtesies left
out) and are ``observation``s of what the assistant said, at 0.05 less, however they are phrased.
bench/learning.py measures the rules (LongMemEval evidence turns, coding-agent prompts that state
nothing, prompts that state facts) beside the rules before this design.
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
# -- what the user says that is not a statement to keep (see :func:`user_statement`) ------------------
#: A question without its mark ("which file defines the routes").
QUESTION = re.compile(
    r"^\W*(?:what|what's|whats|why|how|where|which|who|whom|whose|is|are|was|were|does|did|can|could|would|"
    r"should|will|shall|have you|has|any idea|anyone|do(?!\s+not\b|n't\b))\b",
    re.IGNORECASE,
)
#: Small talk of a working session: thanks, approval, greetings, apologies.
CHIT_CHAT = re.compile(
    r"^\W*(?:thanks?|thank you|thx|ty|ok(?:ay)?|lgtm|cool|nice|great|perfect|awesome|amazing|excellent|sounds good|"
    r"looks good|makes sense|good (?:morning|afternoon|evening|night|catch|job|work|point)|hi|hello|hey|sorry|"
    r"never ?mind|nvm|hold on|wait|one sec|yes|yeah|yep|nope|no,|sure|got it|i see|my bad|interesting|wow|"
    r"haha|lol|hope you|appreciate|welcome back|bye|cheers)\b"
    r"|^\W*(?:that|this|it)(?:'s|\s+is|\s+was|\s+looks|\s+seems|\s+sounds|\s+works|\s+worked)\s+(?:\w+\s+)?"
    r"(?:fast|quick|weird|odd|strange|great|perfect|exactly|better|cleaner|nicer|it|fine|good|right|helpful|"
    r"cool|nice|awesome|interesting|amazing|much|what)\b"
    r"|^\W*(?:that|this|it)\s+(?:works|worked|fixed it|helps|helped|makes sense)\b"
    r"|\bappreciate it\b|\bthanks? (?:a lot|so much|for)\b",
    re.IGNORECASE,
)
#: A line of code or of a tool's output that no fence or indentation marked.
CODE_LINE = re.compile(
    r"^\s*(?:async\s+)?(?:def|class|import|from\s+\S+\s+import|return|const|let|var|function|export|fn|func|"
    r"public|private|protected|static|select|insert|update\s+\w+\s+set|create\s+table|alter\s+table|#include|"
    r"package)\b.*[(){}=:;,<>]"
    r"|^\s*@\w|[{};]\s*$|=>|!=|==|::|->|\w\(\)|"
    r"^\s*(?:at\s+\S+\s*\(|file\s+\"|npm\s+err|e\s{2,}|warn\b|warning:|error:|error\[|fatal:|info\b|debug\b|"
    r"\d{4}-\d\d-\d\d[t ]\d\d:)"
    r"|\b[\w/.-]+\.\w{1,5}:\d+(?::\d+)?\b",
    re.IGNORECASE,
)
#: A rule the user lays down: always/never, from now on, a "you must" said to anyone, an
#: instruction made general ("use snake_case for all column names", "make sure X before Y").
RULE = re.compile(
    r"^\W*(?:from now on|going forward|in (?:the )?future|whenever|as a rule)\b"
    r"|^\W*(?:please\s+)?(?:always|never(?!\s*mind)|don't|do not|avoid|no one|nobody)\b"
    r"|\byou\s+(?:always\s+)?(?:must|should|need to|have to|can't|cannot|shouldn't|mustn't|'ll need to)\b"
    r"|^\W*(?:please\s+)?(?:make sure|ensure|remember to)\b.*\b(?:before|after|whenever|every|each|all|always)\b"
    r"|^\W*(?:please\s+)?(?:use|prefer|keep|put|write|name|indent|format|prefix|store|pin|run)\b.*"
    r"\b(?:all|every|each|always|instead of|rather than|over|not|only|by default|whenever)\b",
    re.IGNORECASE,
)
#: What makes a rule-like sentence a request of this session all the same.
REQUEST_ONLY = re.compile(r"\b(?:can|could|would|will) you\b|\bfor me\b", re.IGNORECASE)
_ASK_VERBS = (
    "fix|add|make|write|create|refactor|rename|update|bump|split|implement|remove|convert|run|revert|explain|show|"
    "generate|move|review|set up|setup|replace|change|help|extract|delete|scaffold|wire|wire up|port|install|sort|"
    "document|finish|try|look|check|tell|go ahead|go|read|clean|break|translate|optimi[sz]e|squash|continue|keep going|"
    "start|stop|find|give|list|print|describe|summari[sz]e|investigate|debug|test|commit|push|merge|open|close|"
    "build|deploy|upgrade|downgrade|migrate|rewrite|simplify|drop|rerun|re-run|undo|redo|apply|draft|compare|"
    "verify|ensure|make sure|modify|edit|insert|append|include|enable|disable|configure|wrap|handle|catch|profile|"
    "benchmark|measure|copy|fill|complete|do|send|fetch|get|pull|clone|reproduce|trace|inspect|search|grep|patch|"
    "mock|stub|annotate|lint|tighten|increase|decrease|reduce|raise|lower|limit|cache|memoi[sz]e|parallelize|"
    "speed up|walk me through|think|consider|suggest|recommend|propose|sketch|outline|prepare|diff|ship|tackle|"
    "convert|split|tone down|skip|rebase|regenerate|recompute|port|mark|flag|hide|display|render|return|throw"
)
_ADV = r"(?:(?:actually|also|just|really|currently|still|now|kind of|basically)\s+)?"
#: A request to the assistant: an imperative, "can you", "I need you to", "I'd like to know".
REQUEST = re.compile(
    rf"^\W*(?:(?:please|now|then|just|also|first|next|so|and|but|ok|okay|alright)\b,?\s+)*(?:{_ASK_VERBS})\b"
    r"|^\W*let'?s\s+(?!(?:use|go with|stick with|keep|standardi[sz]e on|switch to|adopt|always|never|not)\b)"
    r"|\b(?:can|could|would|will) you\b"
    rf"|\bi(?:'d| would)\s+{_ADV}(?:like|love|want)\s+(?:you|to\s+(?:know|see|understand|learn|get|have|ask|add|make|"
    r"try|find|hear|discuss|talk|explore|create|write|build|improve|focus|change|fix))\b"
    rf"|\bi\s+{_ADV}(?:need|want)\s+(?:you|help|some help|advice|to\s+(?:know|understand|see|add|make sure|find|figure|"
    r"fix|learn|get|write|create|build|change|improve|move|try|check|ask|clean))\b"
    rf"|\bi(?:'m| am)\s+{_ADV}(?:looking for|hoping (?:you|to get)|wondering|curious|confused|stuck|"
    r"trying to (?:figure|understand|find|fix|debug|decide|work out|get (?:the|this|it)))\b"
    r"|\bi was (?:wondering|going to suggest)\b|\bi have a question\b|\bhelp me\b"
    r"|\bi (?:don't|do not) (?:understand|get it|know)\b|\blet me know\b"
    r"|^\W*(?:any|some)\s+(?:idea|ideas|thoughts|tips|suggestions|pointers)\b|\bit would be (?:nice|great|good|cool)\b",
    re.IGNORECASE,
)
#: What makes a sentence hold in general (and not only now), whatever else it says.
GENERAL = re.compile(
    r"\b(?:always|never|every|each|all|whenever|by default|if|unless|must|usually|typically|generally|normally)\b",
    re.IGNORECASE,
)
#: A report of what is failing right now: a debugging session's, not a fact to keep.
PROBLEM = re.compile(
    r"\w*(?:error|exception)s?\b|\btraceback\b|\bfail(?:s|ed|ing|ure)?\b|\bcrash(?:es|ed|ing)?\b|\bbroken\b|"
    r"\bbugs?\b|\b(?:doesn't|does not|didn't|did not|won't|will not)\s+(?:work|help|compile|build|start|load)\b|"
    r"\bnot working\b|\bpermission denied\b|\brefused\b|\btime[sd]? ?out\b|\btimeout\b|\bhangs?\b|\bflaky\b|"
    r"\bwarnings?\b|\bmemory leak\b|\brace condition\b|\bcomplains?\b|\bstack ?trace\b|\bsegmentation fault\b|"
    r"\bcore dumped\b|\breturns?\s+[45]\d\d\b|\b[45]\d\d\s+(?:error|status|response)\b|"
    r"\bstill\s+(?:throws|fails|resets|doesn't|does not|returns|shows|prints|breaks|crashes|missing|empty|blank)\b|"
    r"\bis (?:blank|empty|broken)\b|\btaking forever\b|\bnoisy\b|\bred (?:on|in)\b|\bnothing (?:compiles|works)\b",
    re.IGNORECASE,
)
#: Words said to the assistant ("like you said", "your last change"): about this session.
TO_ASSISTANT = re.compile(r"\b(?:you|your|you're|you've|you'd|you'll|yours)\b", re.IGNORECASE)
_SESSION_THINGS = (
    r"(?:(?:the|this|that|my|these|those|some)\s+(?:\w+\s+)?(?:file|function|script|code|test|tests|import|branch|parser|"
    r"change|changes|snippet|output|line|module|class|method|config|diff|pr|commit|logs?|build|page|editor|server|"
    r"container|query|migration|linter|cache|component|endpoint|variable|loop|repo)\b|it\b|that\b|this\b|"
    r"main\b|line \d+\b)"
)
#: A remark about this very session: what the user just did to the code, where they are going.
SESSION_REMARK = re.compile(
    r"^\W*i(?:'ve| have)?\s+(?:just\s+|already\s+|also\s+)?(?:pulled|pushed|ran|run|opened|changed|made|pasted|"
    r"tried|added|removed|edited|updated|fixed|restarted|rebased|merged|committed|noticed|see|saw|found|looked|"
    r"checked|reverted|deleted|installed|upgraded|bumped|copied|moved|renamed|been staring|staring|got)\s+"
    r"(?:\w+\s+)?(?:at\s+|to\s+)?"
    + _SESSION_THINGS
    + r"|\bi(?:'m| am)\s+(?:working on|going to (?:restart|take|grab|step|try|look|check|run)|back\b|done\b|"
    r"about to)|\bi'll\s+(?:take a look|be (?:away|back)|check|try|look|get back|do it|handle|come back)\b"
    r"|\b(?:right now|at this point|one sec|where were we|done for today|move on to|figured it out)\b"
    r"|^\W*(?:let me|here is|here's|this is what)\b|\bwhat i have so far\b",
    re.IGNORECASE,
)
#: A finite verb, roughly: what a declarative sentence has and a fragment ("Same error as before") lacks.
VERB = re.compile(
    r"\b(?:is|are|was|were|be|been|has|have|had|do|does|did|can|could|will|would|shall|should|must|may|might|"
    r"need|needs|use|uses|used|run|runs|live|lives|get|gets|go|goes|follow|follows|talk|talks|take|takes|happen|"
    r"happens|own|owns|hold|holds|keep|keeps|make|makes|ship|ships|work|works|call|calls|start|starts|handle|"
    r"handles|store|stores|point|points|depend|depends|require|requires|expect|expects|listen|listens|support|"
    r"supports|contain|contains|target|targets|host|hosts|serve|serves|read|reads|write|writes)\b"
    r"|^\W*(?:we|they|you)\s+(?:\w+ly\s+)?[a-z]{3,}\b|'(?:s|re|ve|ll|d|m)\b|\b\w+s\s+(?:to|on|in|with|through|as|by|from|over|at|for|into|under)\b|\b\w{3,}ed\b",
    re.IGNORECASE,
)
_LEAD = re.compile(
    r"^(?:(?:hey|hi|hello|oh|wow|yeah|yes|yep|well|so|and|but|also|haha|lol|ok|okay|aw+|ah|hmm|thanks|"
    r"thank you|sure|great|cool|omg|by the way|btw|actually|honestly|fyi|heads up|quick note|side note|psa|"
    r"for the record|just so you know|for your information)\b[\s,!.:-]*)+",
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
    """(category, class, confidence) of one cleaned sentence.

    The user's side (:func:`user_statement`): whatever the user states (a fact, decision,
    preference, rule, procedure, something about themselves) scores at least 0.7; a question, a
    request, a report of what is failing right now, a remark about this very session and
    small talk score below. The assistant's side passes the same gates (its own "I", its offers
    and courtesies left out), but what it states is only ever an ``observation`` of what the
    assistant said, however it is phrased (provenance decides what a memory may become)."""
    if from_user:
        return user_statement(sentence)
    if AGENT_NARRATION.match(sentence):  # the agent's own "I", its offers and courtesies
        return "small_talk", MemoryClass.EPISODIC, 0.3
    category, memory_class, confidence = user_statement(sentence)
    if confidence < 0.7 or category in ("preference", "personal_fact", "plan", "event", "feeling"):
        return category, memory_class, confidence
    return "observation", memory_class, round(confidence - 0.05, 3)


#: How an assistant speaks of itself and to the user, not of the project.
AGENT_NARRATION = re.compile(
    r"^\W*(?:i|i'm|i've|i'll|i'd|let me|let's|here(?:'s| is| are)|sure|noted|done|got it|you're welcome|"
    r"happy to|feel free|hope|if you)\b",
    re.IGNORECASE,
)


#: What :func:`user_statement` finds is no statement, even with a trigger phrase in it.
NOT_STATEMENTS = frozenset({"request", "problem", "to_assistant", "session", "long_text"})


def user_statement(sentence: str) -> tuple[str, MemoryClass, float]:
    """(category, class, confidence) of one cleaned sentence of the user's: see :func:`classify`.
    The gates come first (what is not a statement to keep), then the category by phrasing, and
    any other declarative sentence is a ``fact`` (0.75): a plain statement needs no trigger."""
    s = sentence
    words = len(s.split())
    if s.endswith("?") or QUESTION.match(s) or words < 3:
        return "small_talk", MemoryClass.EPISODIC, 0.2
    if len(s) > MAX_STATEMENT_CHARS:  # a pasted log or paragraph, not a statement
        return "long_text", MemoryClass.EPISODIC, 0.3
    if CHIT_CHAT.search(s) or CODE_LINE.search(s):
        return "small_talk", MemoryClass.EPISODIC, 0.3
    if RULE.search(s) and not REQUEST_ONLY.search(s):
        return "instruction", MemoryClass.SEMANTIC, 0.85
    if REQUEST.search(s):
        return "request", MemoryClass.EPISODIC, 0.3
    if HEDGE.search(s):
        return "hedged", MemoryClass.EPISODIC, 0.45
    general = GENERAL.search(s) is not None
    if PROBLEM.search(s) and not general:
        return "problem", MemoryClass.EPISODIC, 0.35
    if TO_ASSISTANT.search(s) and not general:
        return "to_assistant", MemoryClass.EPISODIC, 0.35
    if SESSION_REMARK.search(s) and not general:
        return "session", MemoryClass.EPISODIC, 0.4
    if FEELING.search(s):
        return "feeling", MemoryClass.EPISODIC, 0.55
    candidates: list[tuple[str, MemoryClass, float]] = []
    if PROCEDURE.search(s):
        candidates.append(("procedure", MemoryClass.PROCEDURAL, 0.82))
    if DECISION.search(s):
        candidates.append(("decision", MemoryClass.SEMANTIC, 0.85))
    if PREFERENCE.search(s):
        candidates.append(("preference", MemoryClass.SEMANTIC, 0.85))
    if PROJECT_FACT.search(s):
        candidates.append(("fact", MemoryClass.SEMANTIC, 0.8))
    if CONSTRAINT.search(s):
        personal = bool(re.match(r"^\W*i\b", s, re.IGNORECASE))
        candidates.append(("constraint", MemoryClass.SEMANTIC, 0.75 if personal else 0.8))
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
    if not candidates and FIRST_PERSON.search(s) and words >= 5:
        candidates.append(("personal_fact", MemoryClass.SEMANTIC, 0.72))
    if not candidates and VERB.search(s):
        # "It's special to me": whose "it" the memory would not say, out of its conversation.
        vague = re.match(
            r"^\W*(?:it|that|they|he|she|these|those|something|someone|somebody|nothing|everything)(?:'s|'re|\s)",
            s,
            re.IGNORECASE,
        )
        candidates.append(("fact", MemoryClass.SEMANTIC, 0.6 if vague else 0.75))
    if not candidates:
        return "small_talk", MemoryClass.EPISODIC, 0.4
    category, memory_class, confidence = max(candidates, key=lambda c: c[2])
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


_CLAUSE = re.compile(
    r"(?:,|;|\s+-+)\s+(?:and\s+|but\s+|so\s+|since\s+|because\s+)?(?=(?:i|i'm|i've|my|we|our)\b)", re.IGNORECASE
)


def _statements(text: str, from_user: bool) -> list[str]:
    """The sentences of ``text``; a sentence of the user's that is no statement as a whole (a
    request, a question) is cut at its clauses about the user ("…, and I've been keeping them under
    my bed"), and the clauses that state something are kept beside it."""
    out: list[str] = []
    for raw in split_sentences(text):
        out.append(raw)
        if not from_user:
            continue
        sentence = clean(raw)
        if not sentence or user_statement(sentence)[2] >= 0.7:
            continue
        clauses = [c for c in _CLAUSE.split(raw) if len(c.split()) >= 4]
        if len(clauses) > 1:
            out += [c for c in clauses if not c.rstrip().endswith("?") or c is clauses[-1]]
    return out


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
            category = "procedure" if from_user else "observation"  # the assistant's steps stay its own
            found.append(
                Extraction(f"To {goal}: {listed}.", MemoryClass.PROCEDURAL, 0.85, category, from_user=from_user)
            )
        for raw in _statements(text, from_user):
            if _STEP_LINE.match(raw) and procedure is not None:
                continue
            trigger = from_user and any(p.search(raw) for p in trigger_patterns)
            sentence = clean(_TRIGGER_PREFIX.sub("", clean(raw)) if from_user else raw)
            if not sentence:
                continue
            category, memory_class, confidence = classify(sentence, from_user=from_user)
            if trigger and category not in NOT_STATEMENTS:  # "I want you to…" asks; it states nothing
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
            found.append(Extraction(content, memory_class, confidence, category, trigger, from_user))
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
