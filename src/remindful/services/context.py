"""Context injection: the memories most relevant to a prompt, within a token budget.

:func:`gather_context` searches with the relevance floor ``context.min_score`` (the calibrated
score of :mod:`remindful.engine.retrieval.calibration`), so a prompt no memory is about gets no context at
all, not even the header. Search has already collapsed near-duplicates into one hit ("+N
similar", shown on the line) and put newer versions of a subject first; here a memory another hit
supersedes is left out, and so is any remaining near-duplicate (same text, or word sets
overlapping ≥ 80 %). Each memory is one short line with its id so the agent can fetch more
(``remindful get ID`` / ``memory_get``). Token counts use :func:`estimate_tokens`, which
over-counts (letters ~4 chars/token, digits 3, every symbol 1), so the text is never over the
budget. ``MemoryManager.context`` returns the :class:`~remindful.model.Context`;
:func:`gather_context` (its ``.text``) is what ``remindful context``, the daemon's ``POST /context`` and
the hooks print. A hook (:mod:`remindful.shells.hook`) asks the store's daemon on its Unix socket
(:func:`remindful.runtime.ask_daemon`), else the store itself; both apply the same settings, so
both inject the same text.

The hook's light path imports this module: it imports only the standard library at module level.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from remindful.config_defaults import default

if TYPE_CHECKING:
    from remindful.config import Settings
    from remindful.model import Context, SearchHit

DEFAULT_BUDGET: int = default("hooks.context_budget_tokens")
DEFAULT_CANDIDATES: int = default("hooks.context_candidates")
DEFAULT_LINE_CHARS: int = default("hooks.line_chars")
DEFAULT_MIN_SCORE: float = default("context.min_score")
DUPLICATE_JACCARD = 0.8
HEADER = "Relevant memories from remindful (fetch one in full with `remindful get <id>`):"

_TOKEN = re.compile(r"[A-Za-z]+|\d+|[^\sA-Za-z\d]")
_WORDS = re.compile(r"\w+")


class Searcher(Protocol):
    """What context injection reads: the settings and a search. The :class:`~remindful.engine.store.Store`
    is one (so is anything offering the same two)."""

    @property
    def settings(self) -> Settings: ...

    def search(
        self,
        query: str,
        *,
        types: Sequence[str] | None = ...,
        session_id: str | None = ...,
        limit: int,
        min_score: float,
        collapse: bool,
        resumed_session: str | None,
        scopes: Sequence[str | None] | None = ...,
    ) -> Sequence[SearchHit]: ...


def estimate_tokens(text: str) -> int:
    """An upper estimate of the tokens ``text`` takes in a BPE tokenizer."""
    total = 0
    for match in _TOKEN.finditer(text):
        piece = match.group(0)
        if piece.isalpha():
            total += math.ceil(len(piece) / 4)
        elif piece.isdigit():
            total += math.ceil(len(piece) / 3)
        else:
            total += len(piece.encode("utf-8"))  # non-ASCII may cost a token per byte
    return total + text.count("\n")


def _short(text: str, width: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def line_of(hit: SearchHit, line_chars: int = DEFAULT_LINE_CHARS) -> str:
    """The context line of one hit: id, type, date, the near-duplicates it stands for, its text."""
    similar = f", +{hit.similar} similar" if hit.similar else ""
    return f"- [{hit.id}] ({hit.type.value}, {hit.created_at:%Y-%m-%d}{similar}) {_short(hit.content, line_chars)}"


def build_context(
    searcher: Searcher,
    query: str,
    *,
    budget_tokens: int = DEFAULT_BUDGET,
    candidates: int = DEFAULT_CANDIDATES,
    line_chars: int = DEFAULT_LINE_CHARS,
    min_score: float = DEFAULT_MIN_SCORE,
    exclude: str | None = None,
    types: Sequence[str] | None = None,
    session_id: str | None = None,
    resumed_session: str | None = None,
    scopes: Sequence[str | None] | None = None,
) -> Context:
    """The memories most relevant to ``query`` scoring at least ``min_score``, as lines within
    ``budget_tokens`` (estimated) in all; an empty Context when none fits. ``exclude`` drops hits
    whose text equals it (the prompt being answered, just captured); ``types``, ``session_id`` and
    ``scopes`` (None: every scope) narrow the search; ``resumed_session`` ranks that session's
    memories higher. Raises what the search raises (ValidationError, MemoryDisabledError)."""
    from remindful.model import Context

    if not query.strip() or budget_tokens <= estimate_tokens(HEADER) + 1:
        return Context("")
    hits = searcher.search(
        query,
        types=types,
        session_id=session_id,
        limit=candidates,
        min_score=min_score,
        collapse=True,
        resumed_session=resumed_session,
        scopes=scopes,
    )
    shown = {hit.id for hit in hits}
    lines: list[str] = []
    kept: list[SearchHit] = []
    used = estimate_tokens(HEADER)
    seen: list[set[str]] = []
    skip = " ".join(exclude.split()).lower() if exclude else None
    for hit in hits:
        if hit.superseded_by in shown:
            continue  # its newer version is in the context: the old one would mislead
        text = " ".join(hit.content.split())
        if skip is not None and text.lower() == skip:
            continue
        words = set(_WORDS.findall(text.lower()))
        if any(words == other or _jaccard(words, other) >= DUPLICATE_JACCARD for other in seen):
            continue
        line = line_of(hit, line_chars)
        cost = estimate_tokens(line) + 1
        if used + cost > budget_tokens:
            continue  # a shorter line further down may still fit
        seen.append(words)
        lines.append(line)
        kept.append(hit)
        used += cost
    return Context("\n".join([HEADER, *lines]), tuple(kept)) if lines else Context("")


def _jaccard(a: set[str], b: set[str]) -> float:
    if not a or not b:
        return 0.0
    return len(a & b) / len(a | b)


def context_query(event: str, payload: dict[str, Any]) -> str:
    """What to search for: the prompt, or (SessionStart) the project and its recent work."""
    if event == "UserPromptSubmit":
        prompt = payload.get("prompt")
        return prompt if isinstance(prompt, str) else ""
    project = Path(str(payload.get("cwd") or ".")).resolve().name
    return f"{project} project: recent work, decisions, errors and open tasks"


def gather_context(
    searcher: Searcher,
    query: str,
    *,
    budget_tokens: int | None = None,
    exclude: str | None = None,
    types: Sequence[str] | None = None,
    session_id: str | None = None,
    min_score: float | None = None,
) -> Context:
    """:func:`build_context` with the settings, as :meth:`remindful.api.MemoryManager.context`
    resolves them, for the context hook (which opens a bare Store, not a manager):
    ``hooks.context_budget_tokens`` when ``budget_tokens`` is None, ``hooks.context_candidates``,
    ``hooks.line_chars``, and ``context.min_score`` when ``min_score`` is None; no session is
    resumed."""
    settings = searcher.settings
    return build_context(
        searcher,
        query,
        budget_tokens=settings.hooks.context_budget_tokens if budget_tokens is None else budget_tokens,
        candidates=settings.hooks.context_candidates,
        line_chars=settings.hooks.line_chars,
        min_score=settings.context.min_score if min_score is None else min_score,
        exclude=exclude,
        types=types,
        session_id=session_id,
    )


__all__ = [
    "build_context",
    "context_query",
    "estimate_tokens",
    "gather_context",
    "line_of",
]
