"""Capture filters: the gate every automatic capture passes before anything is written.

Order of checks (the first that fails skips the capture and logs why):

1. ``enabled`` (memory on) and ``auto_capture.enabled`` (master switch);
2. the per-trigger switch (``ai_analysis``, ``successful_actions``, ``failed_actions``,
   ``workflow_completion``, ``manual_save``, ``hooks``, ``files``);
3. session exclusions: ``privacy.exclude_sessions`` and ``auto_capture.filters.ignore_sessions``
   (fnmatch, e.g. ``banking_*``) — logged at INFO and written to the audit log;
4. ``ignore_mouse_moves`` for mouse-move actions;
5. ``min_interval_seconds``: the same action signature seen within the window is a repeat;
6. redaction (``privacy.redact``, on by default) of the content and every string in the metadata:
   credit cards (Luhn-checked), emails, AWS/GitHub/``sk-`` API keys, JWTs, PEM private keys,
   ``password=``-style pairs and ``<private>…</private>`` (:mod:`remindful.engine.redact`), plus
   ``privacy.redact_patterns``. The Store's write path redacts every store and update with the
   same rules (``Store.redact``), so even an explicit memory_store never writes a secret.

This module imports only the standard library, so the hook fast path can use it; its defaults are
those of the settings (:mod:`remindful.config_defaults`). Counts of redactions and skips are kept
per process (:attr:`CaptureFilter.counts`) and, through :func:`apply_filters` with a Store, in the
catalog table ``capture_stats`` shown by ``stats()``.
"""

from __future__ import annotations

import fnmatch
import json
import re
import threading
import time
from collections.abc import Mapping

from remindful.config_defaults import (
    CAPTURE_TRIGGERS,
    REDACT_REPLACEMENT,
    check_keys,
    read_bool,
    read_float,
    read_list,
    read_strings,
)
from remindful.engine.redact import Redactor, build_redactor, read_counts

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs hook processes milliseconds
if TYPE_CHECKING:
    from typing import Any

    from remindful.config import Settings
    from remindful.engine.captures import CaptureRepository
    from remindful.services.ingest.ports import CaptureStore


class _LazyLogger:
    """``logging`` costs milliseconds to import; hook processes only need it to report a skip."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __getattr__(self, attr: str) -> Any:
        import logging

        return getattr(logging.getLogger(self.name), attr)


log = _LazyLogger("remindful.services.ingest")

TRIGGERS = CAPTURE_TRIGGERS

_MOUSE_MOVE = re.compile(r"(?i)mouse[_ -]?move|move[_ -]?mouse|mouse[_ -]?moved|hover")


class FilterConfig:
    """The settings the filters read, as plain data (built from Settings or a raw config dict).
    Construct it with :meth:`from_mapping` or :meth:`from_settings`, which fill in the defaults.

    A plain class, not a dataclass: importing dataclasses costs hook processes ~10 ms."""

    __slots__ = (
        "enabled",
        "excluded_sessions",
        "ignore_mouse_moves",
        "memory_enabled",
        "min_interval_seconds",
        "redact",
        "redact_defaults",
        "redact_patterns",
        "triggers",
    )

    def __init__(
        self,
        *,
        memory_enabled: bool,
        enabled: bool,
        triggers: Mapping[str, bool],
        min_interval_seconds: float,
        ignore_mouse_moves: bool,
        excluded_sessions: tuple[str, ...],
        redact: bool,
        redact_defaults: bool,
        redact_patterns: tuple[tuple[str, str, str], ...],
    ) -> None:
        self.memory_enabled = memory_enabled
        self.enabled = enabled
        self.triggers = dict(triggers)
        self.min_interval_seconds = min_interval_seconds
        self.ignore_mouse_moves = ignore_mouse_moves
        self.excluded_sessions = excluded_sessions
        self.redact = redact
        self.redact_defaults = redact_defaults
        self.redact_patterns = redact_patterns

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> FilterConfig:
        """From a raw ``memory:`` mapping (:meth:`remindful.config_sources.Sources.merged`), for a
        process without the settings model (a hook): missing keys take the defaults, and every value
        read is validated by the model's rules (:mod:`remindful.config_defaults`'s readers), unknown
        keys in the sections read included. Raises ValueError naming the first bad field and the
        expected form, so that a hook fails closed instead of capturing with a setting it misread.
        One rule is left to the processes that have the model: the probe of ``redact_patterns``
        for catastrophic backtracking, which runs a child process (a hook cannot spend that)."""
        for section in ("", "auto_capture", "auto_capture.triggers", "auto_capture.filters", "privacy"):
            check_keys(data, section)
        patterns: list[tuple[str, str, str]] = []
        rules = read_list(data, "privacy.redact_patterns", "a list of {regex, replacement, name} mappings")
        for i, rule in enumerate(rules):
            field = f"privacy.redact_patterns.{i}"
            if not isinstance(rule, dict):
                raise ValueError(f"{field}: expected a {{regex, replacement, name}} mapping, got {rule!r}")
            unknown = sorted(set(rule) - {"regex", "replacement", "name"})
            if unknown:
                raise ValueError(f"{field}.{unknown[0]}: unknown setting; known settings: name, regex, replacement")
            regex, replacement, name = rule.get("regex"), rule.get("replacement", REDACT_REPLACEMENT), rule.get("name")
            for key, value in (("regex", regex), ("replacement", replacement), ("name", name or "")):
                if not isinstance(value, str):
                    raise ValueError(f"{field}.{key}: expected a string, got {value!r}")
            patterns.append((str(name or f"custom_{i}"), str(regex), str(replacement)))
        return cls(
            memory_enabled=read_bool(data, "enabled"),
            enabled=read_bool(data, "auto_capture.enabled"),
            triggers={t: read_bool(data, f"auto_capture.triggers.{t}") for t in TRIGGERS},
            min_interval_seconds=read_float(data, "auto_capture.filters.min_interval_seconds", ge=0),
            ignore_mouse_moves=read_bool(data, "auto_capture.filters.ignore_mouse_moves"),
            excluded_sessions=tuple(read_strings(data, "privacy.exclude_sessions"))
            + tuple(read_strings(data, "auto_capture.filters.ignore_sessions")),
            redact=read_bool(data, "privacy.redact"),
            redact_defaults=read_bool(data, "privacy.redact_defaults"),
            redact_patterns=tuple(patterns),
        )

    @classmethod
    def from_settings(cls, settings: Settings) -> FilterConfig:
        """From validated settings, as they are: nothing is validated twice."""
        capture, privacy = settings.auto_capture, settings.privacy
        return cls(
            memory_enabled=settings.enabled,
            enabled=capture.enabled,
            triggers={t: getattr(capture.triggers, t) for t in TRIGGERS},
            min_interval_seconds=capture.filters.min_interval_seconds,
            ignore_mouse_moves=capture.filters.ignore_mouse_moves,
            excluded_sessions=tuple(privacy.exclude_sessions) + tuple(capture.filters.ignore_sessions),
            redact=privacy.redact,
            redact_defaults=privacy.redact_defaults,
            redact_patterns=tuple(
                (rule.name or f"custom_{i}", rule.regex, rule.replacement)
                for i, rule in enumerate(privacy.redact_patterns)
            ),
        )

    def redactor(self) -> Redactor | None:
        """The redaction rules these settings ask for; None when ``privacy.redact`` is off."""
        return build_redactor(self.redact, self.redact_defaults, self.redact_patterns)


class FilterResult:
    """What a capture may write. ``allowed`` False means skip; ``reason`` says why and ``code``
    names it shortly (disabled, trigger, excluded, mouse_move, repeat)."""

    __slots__ = ("allowed", "code", "content", "metadata", "reason", "redactions")

    def __init__(
        self,
        allowed: bool,
        content: str,
        metadata: dict[str, Any],
        reason: str | None = None,
        redactions: dict[str, int] | None = None,
        code: str | None = None,
    ) -> None:
        self.allowed = allowed
        self.content = content
        self.metadata = metadata
        self.reason = reason
        self.redactions = redactions or {}
        self.code = code

    def __repr__(self) -> str:
        return f"FilterResult(allowed={self.allowed}, reason={self.reason!r}, redactions={self.redactions})"


class CaptureFilter:
    """Stateful filters for one process (the min-interval memory of recent signatures)."""

    def __init__(self, config: FilterConfig) -> None:
        self.config = config
        self.redactor = config.redactor()
        self.counts: dict[str, int] = {}
        self._recent: dict[int, tuple[float, str | None]] = {}  # signature -> (last seen, its occurrence)
        self._lock = threading.Lock()

    def excluded_session(self, session_id: str | None) -> str | None:
        """The exclusion pattern ``session_id`` matches, or None."""
        if not session_id:
            return None
        return next((p for p in self.config.excluded_sessions if fnmatch.fnmatchcase(session_id, p)), None)

    def check(
        self,
        content: str,
        *,
        trigger: str,
        session_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        signature: str | None = None,
        action: str | None = None,
        at: float | None = None,
        occurrence: str | None = None,
    ) -> FilterResult:
        """Run every filter; see the module docstring for the order. Never raises on content.
        ``occurrence`` names this one event (a spool row's key): the same occurrence checked again
        (a drain retrying a row whose store failed) is not a repeat of itself."""
        if trigger not in TRIGGERS:
            raise ValueError(f"trigger: unknown capture trigger {trigger!r}; expected one of {', '.join(TRIGGERS)}")
        cfg = self.config
        meta = dict(metadata or {})
        reason: str | None = None
        code = "disabled"
        if not cfg.memory_enabled:
            reason = "memory disabled"
        elif not cfg.enabled:
            reason = "auto-capture disabled (auto_capture.enabled: false)"
        elif not cfg.triggers.get(trigger, True):
            reason, code = f"trigger {trigger} disabled (auto_capture.triggers.{trigger}: false)", "trigger"
        elif (pattern := self.excluded_session(session_id)) is not None:
            reason, code = f"privacy exclusion: session {session_id!r} matches {pattern!r}", "excluded"
            log.info("Skipping memory storage for excluded session: %s (pattern %s)", session_id, pattern)
        elif cfg.ignore_mouse_moves and action and _MOUSE_MOVE.search(action):
            reason, code = f"mouse move ignored ({action})", "mouse_move"
        elif cfg.min_interval_seconds > 0:
            signature = signature or f"{trigger}\x00{session_id}\x00{content}"
            reason, code = self._repeat(signature, at, occurrence), "repeat"
        if reason is not None:
            with self._lock:
                self.counts["skipped_" + code] = self.counts.get("skipped_" + code, 0) + 1
            log.info("capture skipped (%s): %s", trigger, reason)
            return FilterResult(False, content, meta, reason, code=code)
        redactions: dict[str, int] = {}
        if self.redactor is not None:
            content = self.redactor.redact(content, redactions)
            meta = self.redactor.redact_value(meta, redactions)
        with self._lock:
            for name, n in redactions.items():
                self.counts["redacted_" + name] = self.counts.get("redacted_" + name, 0) + n
        return FilterResult(True, content, meta, None, redactions)

    def _repeat(self, signature: str, at: float | None, occurrence: str | None) -> str | None:
        now = time.time() if at is None else at
        key = hash(signature)  # in-process only, so the per-process salt does not matter
        window = self.config.min_interval_seconds
        with self._lock:
            seen = self._recent.get(key)
            if seen is not None and 0 <= now - seen[0] < window and (occurrence is None or seen[1] != occurrence):
                last = seen[0]
                return f"repeat of the same action {now - last:.1f}s after the last (min_interval_seconds={window:g})"
            self._recent[key] = (now, occurrence)
            if len(self._recent) > 10_000:  # keep the memory bounded in long-running daemons
                cutoff = now - window
                self._recent = {k: v for k, v in self._recent.items() if v[0] >= cutoff}
        return None


# -- the entry point every capture path calls ----------------------------------------------------

_BY_SETTINGS: dict[int, tuple[Any, CaptureFilter]] = {}  # id(settings) -> (weak ref to them, filter)
_GUARD = threading.Lock()


def filter_for(target: CaptureStore | Settings) -> CaptureFilter:
    """The CaptureFilter of a Store's settings, or of a Settings object: one per settings object
    for as long as it lives, so that the repeat window spans every capture path of a store."""
    settings = _settings_of(target)
    key = id(settings)
    with _GUARD:
        hit = _BY_SETTINGS.get(key)
        if hit is not None and hit[0]() is settings:
            return hit[1]
        import weakref  # not at module level: the hook fast path never needs it

        def forget(ref: Any) -> None:  # no lock: this may run in a garbage collection under _GUARD
            if (entry := _BY_SETTINGS.get(key)) is not None and entry[0] is ref:
                _BY_SETTINGS.pop(key, None)

        flt = CaptureFilter(FilterConfig.from_settings(settings))
        _BY_SETTINGS[key] = (weakref.ref(settings, forget), flt)
        return flt


def _settings_of(target: Any) -> Settings:
    return target.settings if hasattr(target, "settings") else target


def apply_filters(
    target: CaptureStore | Settings,
    content: str,
    *,
    trigger: str,
    session_id: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    signature: str | None = None,
    action: str | None = None,
    at: float | None = None,
    occurrence: str | None = None,
) -> FilterResult:
    """Decide whether a capture may be stored, and redact it. Every capture path calls this.

    ``target`` is a store (counts and the exclusion audit line go to its catalog, through its
    ``captures``) or a Settings object (counts kept in the process only). ``trigger`` is one of :data:`TRIGGERS`.
    ``signature`` identifies "the same action" for ``min_interval_seconds`` (default: trigger,
    session and content); ``action`` is the action's name, for ``ignore_mouse_moves``; ``at`` is
    the event's epoch time (default now); ``occurrence`` names the one event (a spool row's key: a
    drain retrying it after a failed store is not a repeat of itself). Returns a
    :class:`FilterResult`: when ``allowed``, store ``result.content`` and ``result.metadata``
    (redacted); otherwise skip — ``result.reason`` was logged. Raises ValueError for an unknown
    trigger.
    """
    flt = filter_for(target)
    result = flt.check(
        content,
        trigger=trigger,
        session_id=session_id,
        metadata=metadata,
        signature=signature,
        action=action,
        at=at,
        occurrence=occurrence,
    )
    if hasattr(target, "captures"):  # a store; Settings have no catalog
        _persist(target, result, session_id)
    return result


def _persist(store: Any, result: FilterResult, session_id: str | None) -> None:
    """Count the result's redactions and skip in ``capture_stats``, and audit a session exclusion.
    Best effort: a failure is logged, and the filters' decision stands."""
    counts = {"redacted_" + k: v for k, v in result.redactions.items()}
    if result.code is not None and result.reason != "memory disabled":
        counts["skipped_" + result.code] = 1
    if not counts:
        return
    excluded = (session_id, result.reason or "") if result.code == "excluded" else None
    try:
        store.captures.count(counts, excluded=excluded)
    except Exception as exc:
        log.warning("could not record capture filter counts: %s", exc)


def count_skips(captures: CaptureRepository, counts: dict[str, int]) -> None:
    """Add ``counts`` (``skipped_<reason>``: captures a later check than the filters skipped, such
    as a forgotten statement) to ``capture_stats``. Best effort, like the filters' own counts."""
    try:
        captures.count(counts)
    except Exception as exc:
        log.warning("could not record capture counts: %s", exc)


def canonical_json(value: Any) -> str:
    """Stable JSON text (sorted keys) used for signatures and idempotency keys."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str, separators=(",", ":"))


__all__ = [
    "TRIGGERS",
    "CaptureFilter",
    "FilterConfig",
    "FilterResult",
    "apply_filters",
    "canonical_json",
    "count_skips",
    "filter_for",
    "read_counts",
]
