"""Redaction rules: secrets are replaced before anything is written (standard library only).

Built-in rules (:data:`DEFAULT_REDACTIONS`): PEM private keys, ``<private>…</private>``, JWTs, AWS
access keys, GitHub tokens, OpenAI-style ``sk-`` keys, ``password=``-style pairs (the key is kept,
the value replaced), credit card numbers (13-19 digits passing the Luhn check, not inside a longer
token such as a hex digest) and emails. Each built-in rule is compiled only when a cheap substring
test says it may match, which keeps hook processes fast.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs hook processes milliseconds
if TYPE_CHECKING:
    from typing import Any

_PAIR_KEYS = (
    r"password|passwd|pwd|passphrase|secret|client_secret|api[_-]?key|apikey|access[_-]?token|auth[_-]?token"
    r"|refresh[_-]?token|private[_-]?key|aws_secret_access_key"
)

#: Built-in rules: (name, pattern, replacement). Order matters: whole blocks first, pairs late.
DEFAULT_REDACTIONS: tuple[tuple[str, str, str], ...] = (
    (
        "pem_private_key",
        r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----[\s\S]*?(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----|\Z)",
        "[PRIVATE_KEY_REDACTED]",
    ),
    ("private_block", r"<private>[\s\S]*?(?:</private>|\Z)", "[PRIVATE_REDACTED]"),
    ("jwt", r"\beyJ[A-Za-z0-9_-]{4,}\.eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}", "[JWT_REDACTED]"),
    ("aws_access_key", r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA)[0-9A-Z]{16}\b", "[AWS_KEY_REDACTED]"),
    ("github_token", r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{20,})", "[GITHUB_TOKEN_REDACTED]"),
    ("api_key", r"\bsk-(?:[A-Za-z0-9]+-)*[A-Za-z0-9_]{16,}", "[API_KEY_REDACTED]"),
    (
        "password_pair",
        rf"(?i)\b((?:{_PAIR_KEYS})[\"']?\s*[:=]\s*)([\"']?)(?!\[)[^\s\"',;&]+\2",
        r"\1\2[REDACTED]\2",
    ),
    # Not inside a longer token (a hex digest, an id): bounded by non-word characters.
    ("credit_card", r"(?<![\w-])(?:\d[ -]?){12,18}\d(?![\w-])", "[CARD_REDACTED]"),
    ("email", r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}\b", "[EMAIL_REDACTED]"),
)


def _luhn(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        n = int(ch)
        if i % 2:
            n = n * 2 - 9 if n > 4 else n * 2
        total += n
    return total % 10 == 0


#: Cheap substring tests: a built-in rule is compiled and run only when its test passes, since
#: compiling every pattern costs a hook process more than the rest of its work.
_PRECHECKS: dict[str, Callable[[str], bool]] = {
    "pem_private_key": lambda t: "PRIVATE KEY" in t,
    "private_block": lambda t: "<private>" in t,
    "jwt": lambda t: "eyJ" in t,
    "aws_access_key": lambda t: any(p in t for p in ("AKIA", "ASIA", "AGPA", "AIDA", "AROA")),
    "github_token": lambda t: "gh" in t and "_" in t,
    "api_key": lambda t: "sk-" in t,
    "password_pair": lambda t: any(k in t.lower() for k in ("pass", "pwd", "secret", "key", "token")),
    "credit_card": lambda t: sum(map(str.isdigit, t)) >= 13,
    "email": lambda t: "@" in t,
}


class Redactor:
    """Redaction rules, compiled on first need. ``redact(text)`` returns the new text and adds
    hits per rule to ``counts``."""

    def __init__(self, rules: list[tuple[str, str, str]], *, builtin: int = 0) -> None:
        self.rules = rules
        self.builtin = builtin  # the first ``builtin`` rules are DEFAULT_REDACTIONS (have prechecks)
        self._compiled: dict[int, re.Pattern[str]] = {}

    def _pattern(self, i: int) -> re.Pattern[str]:
        pattern = self._compiled.get(i)
        if pattern is None:
            pattern = self._compiled[i] = re.compile(self.rules[i][1])
        return pattern

    def redact(self, text: str, counts: dict[str, int] | None = None) -> str:
        """``text`` with every rule applied; adds hits per rule name to ``counts``."""
        for i, (name, _, replacement) in enumerate(self.rules):
            check = _PRECHECKS.get(name) if i < self.builtin else None
            if check is not None and not check(text):
                continue
            if name == "credit_card":
                text, n = _redact_cards(self._pattern(i), replacement, text)
            else:
                text, n = self._pattern(i).subn(replacement, text)
            if n and counts is not None:
                counts[name] = counts.get(name, 0) + n
        return text

    def redact_value(self, value: Any, counts: dict[str, int] | None = None) -> Any:
        """Redact every string inside a JSON-like value, dict keys included (a secret used as a
        key is as much a leak as one used as a value). Two keys that redact to the same text are
        both kept: the later one gets a ``_2``, ``_3``… suffix."""
        if isinstance(value, str):
            return self.redact(value, counts)
        if isinstance(value, Mapping):
            out: dict[Any, Any] = {}
            for k, v in value.items():
                key = self.redact(k, counts) if isinstance(k, str) else k
                if key in out:
                    n = 2
                    while f"{key}_{n}" in out:
                        n += 1
                    key = f"{key}_{n}"
                out[key] = self.redact_value(v, counts)
            return out
        if isinstance(value, list | tuple):
            return [self.redact_value(v, counts) for v in value]
        return value

    def check(self) -> None:
        """Compile every rule now; raises ValueError naming the first pattern that does not compile
        (``privacy.redact_patterns[i].regex``), so that a config error is reported, not hit mid-capture."""
        for i in range(len(self.rules)):
            try:
                self._pattern(i)
            except re.error as exc:
                where = f"privacy.redact_patterns[{i - self.builtin}].regex" if i >= self.builtin else self.rules[i][0]
                raise ValueError(
                    f"{where}: {self.rules[i][1]!r} is not a valid regular expression ({exc}); expected a Python regex"
                ) from None


def redact_then_truncate(
    text: str,
    limit: int,
    redactor: Redactor | None,
    counts: dict[str, int] | None = None,
    *,
    flatten: bool = False,
    ellipsis: str = "…",
) -> str:
    """THE way a capture path shortens a text: redact the whole text, then cut it to ``limit``
    characters (``ellipsis`` included). Cutting first could split a secret so that no rule
    matches its remaining head (``…AKIAIOSFODNN7EXA``); cutting redacted text cannot. With
    ``flatten`` runs of whitespace become one space (after redaction, so multi-line blocks such
    as PEM keys are still whole when the rules see them). ``redactor`` None (``privacy.redact``
    off) only cuts."""
    if redactor is not None:
        text = redactor.redact(text, counts)
    if flatten:
        text = " ".join(text.split())
    if len(text) <= limit:
        return text
    return text[: max(0, limit - len(ellipsis))] + ellipsis


def _redact_cards(pattern: re.Pattern[str], replacement: str, text: str) -> tuple[str, int]:
    hits = 0

    def sub(match: re.Match[str]) -> str:
        nonlocal hits
        digits = re.sub(r"\D", "", match.group(0))
        if 13 <= len(digits) <= 19 and _luhn(digits):
            hits += 1
            return replacement
        return match.group(0)

    return pattern.sub(sub, text), hits


def build_redactor(
    redact: bool = True, defaults: bool = True, patterns: tuple[tuple[str, str, str], ...] = ()
) -> Redactor | None:
    """The redactor for these privacy settings; None when ``redact`` is off."""
    if not redact:
        return None
    rules = list(DEFAULT_REDACTIONS) if defaults else []
    return Redactor(rules + list(patterns), builtin=len(rules))


def redactor_for(privacy: Any) -> Redactor | None:
    """The redactor of a ``PrivacySettings`` (``privacy.redact``, ``redact_defaults``, ``redact_patterns``)."""
    patterns = tuple(
        (rule.name or f"custom_{i}", rule.regex, rule.replacement) for i, rule in enumerate(privacy.redact_patterns)
    )
    return build_redactor(privacy.redact, privacy.redact_defaults, patterns)


# -- counts of redactions and skipped captures: the catalog table ``capture_stats`` ----------------


def add_counts(conn: Any, counts: Mapping[str, int]) -> None:
    """Add ``counts`` (name → hits) to ``capture_stats`` inside the caller's transaction. The table
    is :data:`remindful.engine.schema.CAPTURE_STATS_DDL`: the catalog creates it at open, and a hook
    process that finds no catalog creates it with the spool."""
    if counts:
        conn.executemany(
            "INSERT INTO capture_stats (name, value) VALUES (?, ?) "
            "ON CONFLICT(name) DO UPDATE SET value = value + excluded.value",
            list(counts.items()),
        )


def read_counts(read: Callable[[str], list[Any]]) -> dict[str, int]:
    """Counts from ``capture_stats``, by name (empty if nothing was ever counted); ``read`` runs a
    query on an open catalog (``catalog.read``)."""
    return {str(k): int(v) for k, v in read("SELECT name, value FROM capture_stats ORDER BY name")}


__all__ = [
    "DEFAULT_REDACTIONS",
    "Redactor",
    "add_counts",
    "build_redactor",
    "read_counts",
    "redact_then_truncate",
    "redactor_for",
]
