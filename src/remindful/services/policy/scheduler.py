"""The cleanup scheduler: runs retention at ``retention.cleanup.time`` (local) in the daemon.

A plain daemon thread, no dependency: it sleeps until the next run time (in slices of at most
:data:`MAX_SLEEP_S`, so a changed clock or a suspended laptop does not delay a run by more than
that), runs the retention cleanup (:func:`remindful.services.policy.retention.cleanup`), logs
the result and never dies from a cleanup error.
``schedule: daily`` runs once a day at the configured time; ``weekly`` on the configured time
seven days after the last run; ``manual`` (or ``cleanup.enabled: false``) never starts a thread.
A run missed while nothing was running (the last one is older than the period) happens
:data:`CATCH_UP_DELAY_S` after start.

    scheduler = start_scheduler(store)   # None when cleanup is not scheduled
    ...
    scheduler.stop()
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from remindful.services.policy.retention import cleanup, last_cleanup

if TYPE_CHECKING:
    from remindful.engine.store import Store

log = logging.getLogger("remindful")

MAX_SLEEP_S = 300.0
CATCH_UP_DELAY_S = 60.0
PERIOD_DAYS = {"daily": 1, "weekly": 7}


def next_run(at: str, schedule: str, now: datetime, last_run: datetime | None) -> datetime:
    """The next local time to run: the first ``HH:MM`` after ``now`` (weekly: and at least seven
    days after ``last_run``)."""
    hour, minute = (int(part) for part in at.split(":"))
    candidate = now.replace(hour=hour, minute=minute, second=0, microsecond=0)
    if candidate <= now:
        candidate += timedelta(days=1)
    if schedule == "weekly" and last_run is not None:
        while candidate < last_run + timedelta(days=7) - timedelta(minutes=1):
            candidate += timedelta(days=1)
    return candidate


def run_cleanup(store: Store) -> dict[str, Any]:
    """The scheduled job: one retention cleanup of ``store``, once this process's pending vectors
    are computed (dedup compares them); returns the report as a dict."""
    return cleanup(store.vectors_ready()).to_dict()


class CleanupScheduler:
    """Runs ``job`` (default :func:`run_cleanup` of ``store``) on the store's configured schedule
    in a daemon thread."""

    def __init__(
        self,
        store: Store,
        *,
        job: Callable[[], Any] | None = None,
        clock: Callable[[], datetime] = datetime.now,
    ) -> None:
        self.store = store
        self._job = job or (lambda: run_cleanup(store))
        self._clock = clock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.last_run: datetime | None = None
        self.last_result: Any = None
        self.runs = 0

    def due_at(self, now: datetime) -> datetime:
        schedule = self.store.settings.retention.cleanup
        return next_run(schedule.time, schedule.schedule, now, self.last_run)

    def start(self) -> CleanupScheduler:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="remindful-cleanup", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the thread (a running cleanup finishes first, up to ``timeout`` seconds)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def run_once(self) -> Any:
        """Run the job now; errors are logged, not raised (the scheduler must survive them)."""
        started = time.perf_counter()
        try:
            self.last_result = self._job()
            log.info("scheduled cleanup done in %.2f s: %s", time.perf_counter() - started, _brief(self.last_result))
        except Exception as exc:  # the schedule must go on whatever one run hits
            self.last_result = exc
            log.error("scheduled cleanup failed: %s", exc)
        self.last_run = self._clock()
        self.runs += 1
        return self.last_result

    def _loop(self) -> None:
        due = self._first_due()
        while not self._stop.is_set():
            wait = (due - self._clock()).total_seconds()
            if wait > 0:
                self._stop.wait(min(wait, MAX_SLEEP_S))
                continue
            self.run_once()
            due = self.due_at(self._clock())

    def _first_due(self) -> datetime:
        now = self._clock()
        schedule = self.store.settings.retention.cleanup.schedule
        try:
            self.store.ready()
            last = last_cleanup(self.store)
        except Exception:  # a store that cannot open yet: just use the schedule
            last = None
        if last is not None:
            self.last_run = datetime.fromtimestamp(last["at"])
        overdue = self.last_run is None or now - self.last_run > timedelta(days=PERIOD_DAYS.get(schedule, 1))
        return now + timedelta(seconds=CATCH_UP_DELAY_S) if overdue else self.due_at(now)


def _brief(result: Any) -> str:
    if isinstance(result, dict):
        return f"deleted {result.get('deleted')} ({result.get('by_reason')})"
    return repr(result)


def start_scheduler(store: Store) -> CleanupScheduler | None:
    """Start the cleanup thread for ``store``; None when cleanup is disabled or manual, or memory
    is disabled."""
    settings = store.settings.retention.cleanup
    if not settings.enabled or settings.schedule == "manual" or store.disabled_reason:
        return None
    scheduler = CleanupScheduler(store).start()
    log.info("cleanup scheduled %s at %s", settings.schedule, settings.time)
    return scheduler


def stop_scheduler(scheduler: CleanupScheduler | None) -> None:
    """Stop a scheduler returned by :func:`start_scheduler` (None is fine)."""
    if scheduler is not None:
        scheduler.stop()


__all__ = ["CleanupScheduler", "next_run", "run_cleanup", "start_scheduler", "stop_scheduler"]
