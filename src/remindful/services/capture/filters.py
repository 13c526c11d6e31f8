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
   ``privacy.redact_patterns``. The manager's write path redacts every store and update too
   (:func:`redact_for_store`), so even an explicit memory_store never writes a secret.

This module imports only the standard library, so the hook fast path can use it. Counts of
redactions and skips are kept per process (:attr:`CaptureFilter.counts`) and, through
:func:`apply_filters` with a manager, in the catalog table ``capture_stats`` shown by ``stats()``.
"""

from __future__ import annotations

import fnmatch
import json
import re
import threading
import time
from collections.abc import Callable, Mapping

from remindful.engine.redact import DEFAULT_REDACTIONS, Redactor

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs hook processes milliseconds
if TYPE_CHECKING:
    import sqlite3
    from typing import Any


class _LazyLogger:
    """``logging`` costs milliseconds to import; hook processes only need it to report a skip."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __getattr__(self, attr: str) -> Any:
        import logging

        return getattr(logging.getLogger(self.name), attr)


log = _LazyLogger("remindful.services.capture")

TRIGGERS = (
    "ai_analysis",
    "successful_actions",
    "failed_actions",
    "workflow_completion",
    "manual_save",
    "hooks",
    "files",
)

_MOUSE_MOVE = re.compile(r"(?i)mouse[_ -]?move|move[_ -]?mouse|mouse[_ -]?moved|hover")


class FilterConfig:
    """The settings the filters read, as plain data (built from Settings or a raw config dict).

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
        memory_enabled: bool = True,
        enabled: bool = True,
        triggers: Mapping[str, bool] | None = None,
        min_interval_seconds: float = 5.0,
        ignore_mouse_moves: bool = True,
        excluded_sessions: tuple[str, ...] = (),
        redact: bool = True,
        redact_defaults: bool = True,
        redact_patterns: tuple[tuple[str, str, str], ...] = (),
    ) -> None:
        self.memory_enabled = memory_enabled
        self.enabled = enabled
        self.triggers = dict(triggers or {})
        self.min_interval_seconds = min_interval_seconds
        self.ignore_mouse_moves = ignore_mouse_moves
        self.excluded_sessions = excluded_sessions
        self.redact = redact
        self.redact_defaults = redact_defaults
        self.redact_patterns = redact_patterns

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> FilterConfig:
        """From the ``memory:`` section's shape (missing keys take the defaults)."""
        capture = data.get("auto_capture") or {}
        filters = capture.get("filters") or {}
        privacy = data.get("privacy") or {}
        patterns = []
        for i, rule in enumerate(privacy.get("redact_patterns") or []):
            name = rule.get("name") or f"custom_{i}"
            patterns.append((str(name), str(rule["regex"]), str(rule.get("replacement", "[REDACTED]"))))
        return cls(
            memory_enabled=bool(data.get("enabled", True)),
            enabled=bool(capture.get("enabled", True)),
            triggers={k: bool(v) for k, v in (capture.get("triggers") or {}).items()},
            min_interval_seconds=float(filters.get("min_interval_seconds", 5)),
            ignore_mouse_moves=bool(filters.get("ignore_mouse_moves", True)),
            excluded_sessions=tuple(privacy.get("exclude_sessions") or ())
            + tuple(filters.get("ignore_sessions") or ()),
            redact=bool(privacy.get("redact", True)),
            redact_defaults=bool(privacy.get("redact_defaults", True)),
            redact_patterns=tuple(patterns),
        )

    @classmethod
    def from_settings(cls, settings: Any) -> FilterConfig:
        return cls.from_mapping(settings.model_dump(mode="json"))

    def redactor(self) -> Redactor | None:
        if not self.redact:
            return None
        rules = list(DEFAULT_REDACTIONS) if self.redact_defaults else []
        return Redactor(rules + list(self.redact_patterns), builtin=len(rules))


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
        self._recent: dict[int, float] = {}
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
    ) -> FilterResult:
        """Run every filter; see the module docstring for the order. Never raises on content."""
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
            reason, code = self._repeat(signature or f"{trigger}\x00{session_id}\x00{content}", at), "repeat"
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

    def _repeat(self, signature: str, at: float | None) -> str | None:
        now = time.time() if at is None else at
        key = hash(signature)  # in-process only, so the per-process salt does not matter
        window = self.config.min_interval_seconds
        with self._lock:
            last = self._recent.get(key)
            if last is not None and 0 <= now - last < window:
                return f"repeat of the same action {now - last:.1f}s after the last (min_interval_seconds={window:g})"
            self._recent[key] = now
            if len(self._recent) > 10_000:  # keep the memory bounded in long-running daemons
                cutoff = now - window
                self._recent = {k: v for k, v in self._recent.items() if v >= cutoff}
        return None


# -- persistence of counts (table capture_stats in the catalog) -------------------------------------

COUNTS_DDL = "CREATE TABLE IF NOT EXISTS capture_stats (name TEXT PRIMARY KEY, value INTEGER NOT NULL)"


def add_counts(conn: sqlite3.Connection, counts: Mapping[str, int]) -> None:
    """Add ``counts`` to ``capture_stats`` inside the caller's transaction."""
    if counts:
        conn.execute(COUNTS_DDL)
        conn.executemany(
            "INSERT INTO capture_stats (name, value) VALUES (?, ?) "
            "ON CONFLICT(name) DO UPDATE SET value = value + excluded.value",
            list(counts.items()),
        )


def read_counts(read: Callable[[str], list[Any]]) -> dict[str, int]:
    """Counts from ``capture_stats`` (empty if nothing was ever counted)."""
    if not read("SELECT 1 FROM sqlite_master WHERE name = 'capture_stats'"):
        return {}
    return {str(k): int(v) for k, v in read("SELECT name, value FROM capture_stats ORDER BY name")}


# -- the entry point every capture path calls ----------------------------------------------------

_BY_SETTINGS: dict[int, tuple[Any, CaptureFilter]] = {}
_GUARD = threading.Lock()


def filter_for(target: Any) -> CaptureFilter:
    """The CaptureFilter of a MemoryManager (kept on it) or of a Settings object (cached)."""
    settings = getattr(target, "settings", target)
    with _GUARD:
        cached = getattr(target, "_capture_filter", None) if hasattr(target, "settings") else None
        if cached is not None:
            return cached
        hit = _BY_SETTINGS.get(id(settings))
        if hit is None or hit[0] is not settings:
            hit = (settings, CaptureFilter(FilterConfig.from_settings(settings)))
            _BY_SETTINGS[id(settings)] = hit
        if hasattr(target, "settings"):
            target._capture_filter = hit[1]
        return hit[1]


def apply_filters(
    target: Any,
    content: str,
    *,
    trigger: str,
    session_id: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    signature: str | None = None,
    action: str | None = None,
    at: float | None = None,
) -> FilterResult:
    """Decide whether a capture may be stored, and redact it. Every capture path calls this.

    ``target`` is a MemoryManager (counts and the exclusion audit line go to its catalog) or a
    Settings object (counts kept in the process only). ``trigger`` is one of :data:`TRIGGERS`.
    ``signature`` identifies "the same action" for ``min_interval_seconds`` (default: trigger,
    session and content); ``action`` is the action's name, for ``ignore_mouse_moves``; ``at`` is
    the event's epoch time (default now). Returns a :class:`FilterResult`: when ``allowed``, store
    ``result.content`` and ``result.metadata`` (redacted); otherwise skip — ``result.reason`` was
    logged. Raises ValueError for an unknown trigger.
    """
    flt = filter_for(target)
    result = flt.check(
        content, trigger=trigger, session_id=session_id, metadata=metadata, signature=signature, action=action, at=at
    )
    if hasattr(target, "settings"):
        _persist(target, result, session_id)
    return result


def _persist(manager: Any, result: FilterResult, session_id: str | None) -> None:
    counts = {"redacted_" + k: v for k, v in result.redactions.items()}
    excluded = result.code == "excluded"
    if result.code is not None and result.reason != "memory disabled":
        counts["skipped_" + result.code] = 1
    if not counts:
        return
    try:
        catalog = manager._store.ready().catalog

        def run(conn: sqlite3.Connection) -> None:
            add_counts(conn, counts)
            if excluded:
                catalog.audit(conn, "capture_excluded", None, {"session_id": session_id, "reason": result.reason})

        catalog.write(run, what="recording capture filter counts")
    except Exception as exc:  # counts are best effort; the decision above stands
        log.warning("could not record capture filter counts: %s", exc)


def canonical_json(value: Any) -> str:
    """Stable JSON text (sorted keys) used for signatures and idempotency keys."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str, separators=(",", ":"))


__all__ = [
    "DEFAULT_REDACTIONS",
    "TRIGGERS",
    "CaptureFilter",
    "FilterConfig",
    "FilterResult",
    "Redactor",
    "add_counts",
    "apply_filters",
    "canonical_json",
    "filter_for",
    "read_counts",
    "redact_for_store",
]


def redact_for_store(manager: Any, content: str, metadata: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """Redact ``content`` and ``metadata`` for a manager's write path (every store and update).

    A no-op when ``privacy.redact`` is off. Hits are counted in ``capture_stats``."""
    redactor = filter_for(manager).redactor
    if redactor is None:
        return content, metadata
    counts: dict[str, int] = {}
    content = redactor.redact(content, counts)
    metadata = redactor.redact_value(metadata, counts)
    if counts:
        _persist(manager, FilterResult(True, content, metadata, None, counts), None)
    return content, metadata
