"""Work done off the caller's path, in daemon threads that never die of an error.

- :class:`BackgroundIndexer` adds stored memories to the vector index after ``store`` returned:
  the catalog commit is the acknowledgement, and search scores not-yet-indexed rows exactly, so
  nothing is missed in between. ``flush()`` waits for it; a crash leaves rows marked un-indexed,
  which the next open indexes.
- :class:`DeleteFinisher` finishes a large delete after it returned (neighbours' session
  windows, then vectors): the catalog delete is the truth (search checks every index hit
  against it) and queues that work in the same transaction, so a crash leaves it to the next open.
- :class:`Errand` runs one task on request in a thread of its own (the index mirror opens and
  reloads its view of the index that way, so that no search waits for it).
- :class:`AccessRecorder` counts search hits as accesses in batches.
- :func:`close_at_exit` closes a store the program left open when the interpreter exits.

Closing any of them returns only once its thread has ended: a thread still inside Chroma's or the
model's native code while the store closes (or the interpreter exits) used what was closed under
it. The first three serve :class:`~remindful.engine.mirror.IndexMirror`, which also holds the
locks and markers that keep processes out of each other's way.
"""

from __future__ import annotations

import atexit
import logging
import math
import queue
import threading
import time
import weakref
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from remindful.engine.perf import PendingFigures
from remindful.errors import RemindfulError

log = logging.getLogger("remindful")

#: A batch ready while the worker feeding this one (the embedding, for the index writes) has work
#: waits at most this long for the next batch it passes on, to go in one write with it.
FEED_WAIT_S = 0.5


class Worker:
    """A daemon thread draining a queue of id lists in coalesced batches of at most ``max_batch``
    ids. With ``linger`` > 0 a batch waits that many seconds after its first item for more to join
    it; with ``pace`` > 0 batches start at most every ``pace`` seconds: a lone item goes at once,
    and under a stream of items each batch gathers what came since the last one began. Either wait
    is cut short by ``flush``, ``hurry`` or ``close`` (or a full batch). With ``feeding`` (whether
    the worker that submits to this one has work in hand or queued), a batch that would go waits
    once for the next batch that one passes on (at most ``FEED_WAIT_S``) and takes it along: one
    write, not two (a fresh store's first store is embedded alone, at once, and the next ones
    while the index opens; both go in its first write). ``stopping`` is set when a
    :meth:`close` ran out of time: the batch in hand should give up waiting (for a lock, say)."""

    MAX_BATCH = 10_000

    def __init__(
        self,
        name: str,
        handle: Callable[[list[str]], None],
        *,
        linger: float = 0.0,
        pace: float = 0.0,
        max_batch: int | None = None,
        stopping: threading.Event | None = None,
        feeding: Callable[[], bool] | None = None,
    ) -> None:
        self._handle = handle
        self._feeding = feeding
        self.busy = False  # handling a batch now
        self._linger = linger
        self._pace = pace
        self._last_batch = -math.inf  # when the last batch began (monotonic)
        self._max_batch = max_batch or self.MAX_BATCH
        self.stopping = stopping if stopping is not None else threading.Event()
        # An item is a list of ids to handle, an Event to set once everything before it is handled,
        # or None: stop.
        self._queue: queue.Queue[list[str] | threading.Event | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, ids: list[str]) -> None:
        if ids:
            self._queue.put(list(ids))

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until everything submitted so far is handled; False on timeout."""
        done = threading.Event()
        self._queue.put(done)
        return done.wait(timeout) if self._thread.is_alive() else True

    def hurry(self) -> None:
        """Have the batch gathering now go without waiting for more (someone waits for it)."""
        self._queue.put(threading.Event())

    def has_work(self) -> bool:
        """Whether a batch is being handled or ids wait in the queue (a hurry or a flush alone
        brings nothing to pass on)."""
        if self.busy:
            return True
        with self._queue.mutex:
            return any(isinstance(item, list) for item in self._queue.queue)

    def _run(self) -> None:
        while True:
            ids: list[str] = []
            waiting: list[threading.Event] = []
            item = self._queue.get()
            stop = item is None
            deadline = max(time.monotonic() + self._linger, self._last_batch + self._pace)
            fed = self._feeding is None  # waited for the feeding worker once (see the class docstring)
            while item is not None:
                if isinstance(item, threading.Event):
                    waiting.append(item)
                else:
                    ids.extend(item)
                wait = 0.0 if waiting or len(ids) >= self.MAX_BATCH else deadline - time.monotonic()
                if wait <= 0 and ids and not waiting and not fed and self._feeding is not None and self._feeding():
                    fed, wait = True, FEED_WAIT_S
                try:
                    item = self._queue.get(timeout=wait) if wait > 0 else self._queue.get_nowait()
                except queue.Empty:
                    break
                stop = item is None
            if ids:
                self._last_batch = time.monotonic()
            self.busy = True
            for start in range(0, len(ids), self._max_batch):
                if self.stopping.is_set():
                    break
                try:
                    self._handle(ids[start : start + self._max_batch])
                except Exception:  # never let the worker die: the rows stay pending and are retried later
                    _failed("%s failed on %d memories", self._thread.name, len(ids))
            self.busy = False
            for event in waiting:
                event.set()
            if stop:
                return

    def close(self, timeout: float | None = 30) -> None:
        """Handle what is queued, then stop; returns once the thread has ended. After ``timeout``
        seconds (None: no limit) what is still queued is dropped and :attr:`stopping` is set, so
        that the batch in hand gives up too: the caller keeps the work elsewhere (the indexer's
        rows stay marked un-indexed in the catalog, for the next open)."""
        self._queue.put(None)
        self._thread.join(timeout)
        if self._thread.is_alive():
            self.stopping.set()
            self._thread.join()


class BackgroundIndexer(Worker):
    """Updates the vector index off the caller's path; ``handle(keys)`` does the work, at most
    ``max_batch`` keys at a time.

    With ``prepare`` (embedding), a thread of its own runs it on each batch first (at most
    ``prepare_batch`` keys at a time) and passes the batch on: an index write can wait long for
    the lock other processes hold, and the next batches' vectors (which searches wait for) must
    not wait behind it. Both threads share ``stopping`` (see :meth:`close`)."""

    def __init__(
        self,
        handle: Callable[[list[str]], None],
        *,
        prepare: Callable[[list[str]], None] | None = None,
        name: str = "remindful-indexer",
        pace: float = 0.0,
        max_batch: int | None = None,
        prepare_batch: int | None = None,
        stopping: threading.Event | None = None,
    ) -> None:
        # The ids submitted and not yet handled, with how often (a memory stored, then updated).
        self._held: Counter[str] = Counter()
        self._held_lock = threading.Lock()

        def handled(ids: list[str]) -> None:
            try:
                handle(ids)
            finally:
                with self._held_lock:
                    self._held.subtract(ids)
                    self._held = +self._held  # drops the ids at zero

        self._prepare: Worker | None = None  # (before the base class starts the thread that asks for it)
        super().__init__(name, handled, pace=pace, max_batch=max_batch, stopping=stopping, feeding=self._preparing)
        if prepare is not None:

            def forward(ids: list[str]) -> None:
                try:
                    prepare(ids)
                finally:
                    super(BackgroundIndexer, self).submit(ids)

            self._prepare = Worker(
                f"{name}-prepare", forward, pace=pace, max_batch=prepare_batch, stopping=self.stopping
            )

    def _preparing(self) -> bool:
        return self._prepare is not None and self._prepare.has_work()

    def submit(self, ids: list[str]) -> None:
        with self._held_lock:
            self._held.update(ids)
        if self._prepare is not None:
            self._prepare.submit(ids)
        else:
            super().submit(ids)

    def holding(self) -> set[str]:
        """The ids submitted and not yet handled: this indexer's to embed and index."""
        with self._held_lock:
            return set(self._held)

    def flush(self, timeout: float | None = None) -> bool:
        started = time.monotonic()
        if self._prepare is not None and not self._prepare.flush(timeout):
            return False
        left = None if timeout is None else max(0.0, timeout - (time.monotonic() - started))
        return super().flush(left)

    def hurry(self) -> None:
        """Have the batch gathering now be embedded without waiting for more (a search waits for
        its vectors); its index write keeps its pace."""
        if self._prepare is not None:
            self._prepare.hurry()
        else:
            super().hurry()

    def close(self, timeout: float | None = 30) -> None:
        """Handle what is queued for at most ``timeout`` seconds in all, then stop (see
        :meth:`Worker.close`); returns once both threads have ended."""
        started = time.monotonic()
        if self._prepare is not None:
            self._prepare.close(timeout)
        left = None if timeout is None else max(0.0, timeout - (time.monotonic() - started))
        super().close(left)


class DeleteFinisher:
    """Finishes large deletes after they returned, a chunk at a time: the deleted memories' session
    windows, their neighbours', then the vectors (see :meth:`IndexMirror.after_delete`).

    ``drain(limit)`` does up to ``limit`` queued items and returns how many it handled
    (0: none left). Chroma's delete holds the GIL for its whole call (~0.3 ms a vector with
    chromadb 1.5), so one big call would stall every other thread of the process: after each
    chunk the thread sleeps ``pause_ratio`` times as long as the chunk took (0.5: the caller's
    threads keep at least a third of the interpreter), and before the first one ``first_delay``
    seconds, so that the call that queued the work returns first. The queue lives in the catalog,
    so stopping (or dying) part-way loses nothing: the rest is applied by
    :meth:`IndexMirror.close` or at the next open.
    """

    def __init__(
        self,
        drain: Callable[[int], int],
        *,
        chunk: int = 256,
        pause_ratio: float = 0.5,
        first_delay: float = 0.05,
        name: str = "remindful-delete-finisher",
    ) -> None:
        self._drain = drain
        self.chunk = chunk
        self.pause_ratio = pause_ratio
        self.first_delay = first_delay
        self._cond = threading.Condition()
        self._kicked = False  # work queued since the last drain started
        self._busy = False
        self._stop = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def kick(self) -> None:
        """Deletions were queued: drain them."""
        with self._cond:
            self._kicked = True
            self._cond.notify_all()

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until the queue is drained (or a drain failed: the rest waits for the next kick or
        open); False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: self._stop or not (self._kicked or self._busy), timeout)

    def close(self) -> None:
        """Stop after the current chunk (what is left stays queued); returns once the thread has
        ended (the caller makes a chunk waiting for a lock give up first)."""
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        self._thread.join()

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._kicked or self._stop)
                if self._stop:
                    return
                self._kicked, self._busy = False, True
            try:
                pause = self.first_delay
                while True:
                    with self._cond:
                        if self._cond.wait_for(lambda: self._stop, pause):
                            break
                    started = time.perf_counter()
                    if not self._drain(self.chunk):
                        break
                    pause = (time.perf_counter() - started) * self.pause_ratio
            except RemindfulError as exc:  # e.g. the index is unavailable: retried at the next kick or open
                log.warning("%s: %s; the rest stays queued", self._thread.name, exc)
            except Exception:  # never let the worker die: the deletions stay queued
                _failed("%s failed; the rest stays queued", self._thread.name)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()


class Errand:
    """``run()`` in a daemon thread of its own whenever :meth:`ask` is called: asked while it runs,
    it runs once more afterwards (requests in between coalesce). The thread starts at the first
    request and is kept. An error is logged, never raised: the next request tries again."""

    def __init__(self, name: str, run: Callable[[], None]) -> None:
        self._name = name
        self._task = run
        self._cond = threading.Condition()
        self._asked = False
        self._busy = False
        self._closed = False
        self._thread: threading.Thread | None = None

    def ask(self) -> None:
        """Run the task soon (now, or after the run in progress); nothing after :meth:`close`."""
        with self._cond:
            if self._closed:
                return
            self._asked = True
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until no run is asked for or in progress; False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: self._closed or not (self._asked or self._busy), timeout)

    def close(self) -> None:
        """Run nothing more; returns once the run in progress (if any) has ended."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join()

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._asked or self._closed)
                if self._closed:
                    return
                self._asked, self._busy = False, True
            try:
                self._task()
            except Exception:  # never let the thread die: the next request tries again
                _failed("%s failed", self._name)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()


class AccessCounts(Protocol):
    """What :class:`AccessRecorder` writes to: a catalog's access counts (a narrow protocol: the
    catalogs themselves run their own work in these threads, and import this module)."""

    def touch(self, ids: Sequence[str], at: float, counts: Mapping[str, int] | None = None) -> None: ...


class AccessRecorder(Worker):
    """Counts search hits as accesses off the hot path: a daemon thread batches the updates, up to
    a second's worth at a time, so a busy server commits once a second instead of once a search
    (each commit rewrites the hits' rows into the write-ahead log). The searches' latencies and the
    embedding cache's counts (``figures``, :mod:`remindful.engine.perf`) go with them, into the
    store's counters."""

    def __init__(self, catalog: AccessCounts, *, linger: float = 1.0, figures: PendingFigures | None = None) -> None:
        self._catalog = catalog
        self.figures = figures if figures is not None else PendingFigures()
        super().__init__("remindful-access", self._touch, linger=linger)
        _RECORDERS.add(self)

    def record(self, ids: list[str], search_ms: float | None = None) -> None:
        """Count ``ids`` as accessed, and a search of ``search_ms`` milliseconds when given."""
        if search_ms is not None:
            self.figures.search(search_ms)
            ids = ids or [_NO_HIT]  # a search without hits is still written
        self.submit(ids)

    def _touch(self, ids: list[str]) -> None:
        if getattr(self._catalog, "unwritable", None) is not None:  # a read-only view (a full disk): nothing to record
            return
        try:
            self._catalog.touch([i for i in ids if i != _NO_HIT], time.time(), self.figures.take())
        except RemindfulError as exc:  # access counts are best effort; never break a search
            log.warning("could not record memory access: %s", exc)


_NO_HIT = ""  # no memory has an empty id
_RECORDERS: weakref.WeakSet[AccessRecorder] = weakref.WeakSet()


def interpreter_exiting() -> bool:
    """Whether the program's main thread has ended: the interpreter is shutting down under the
    background threads (imports and new thread pools refuse), before the ``atexit`` hooks run;
    what they were doing stays pending for the next open."""
    return not threading.main_thread().is_alive()


def _failed(message: str, *args: object) -> None:
    """Log a background thread's failure with its traceback, unless the interpreter is exiting
    (:func:`interpreter_exiting`): that is no error to show."""
    if not interpreter_exiting():
        log.exception(message, *args)
    else:
        log.debug(message + " at interpreter exit (left for the next open)", *args, exc_info=True)


@atexit.register
def _write_access_counts_at_exit() -> None:
    """A program that ends without closing its store still has its last searches' hits counted."""
    for recorder in list(_RECORDERS):
        recorder.flush(timeout=5)


class _Closable(Protocol):
    def close_for_exit(self) -> None: ...


_OPEN: weakref.WeakSet[Any] = weakref.WeakSet()


def close_at_exit(owner: _Closable) -> None:
    """Call ``owner.close_for_exit()`` when the interpreter exits, if the program did not close it.

    A program that stores and exits without ``close()`` would otherwise end with the background
    threads inside the embedder or Chroma's native code: the interpreter stops them where they
    stand, and a native thread pool torn down under them aborts the process ("terminate called
    without an active exception", exit 134). Closing finishes the queued work, writes the index
    files and removes the process's holder marker, so the next open need not check the files.
    """
    _OPEN.add(owner)


@atexit.register
def _close_at_exit() -> None:
    for owner in list(_OPEN):
        try:
            owner.close_for_exit()
        except Exception:  # one store failing to close must not keep the others open
            log.exception("closing %r at exit failed", owner)
