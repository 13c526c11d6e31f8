"""The capture worker: stores captured tool calls as memories from a background thread, off the
request path of the middleware and the proxy that hand them over."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from remindful.services.ingest.calls import ToolCall, TypeMapping, capture_item
from remindful.services.ingest.relate import relate

if TYPE_CHECKING:
    from remindful.services.ingest.ports import CaptureStore
    from remindful.services.ingest.spooled import CaptureSpool

log = logging.getLogger("remindful.services.ingest")


class CaptureWorker:
    """Stores :class:`ToolCall` records as memories from a daemon thread.

    ``submit`` never raises and blocks only for the spool commit: each call is first committed,
    redacted, to the store's spool (``spool``, a :class:`~remindful.services.ingest.spooled.CaptureSpool`;
    by default the worker thread makes one from the store as soon as it starts, and a call
    submitted before that waits for it, up to ``SPOOL_WAIT_S``). So a call survives the process
    being killed once it has been answered: the next owner of the store stores it. When the
    bounded queue is full the call is dropped from memory and counted (``stats["dropped"]``) — its
    spool row is still stored once this process has exited. ``get_store`` (returning the store:
    a :class:`~remindful.services.ingest.ports.CaptureStore`) is called in the worker thread, so
    loading the store costs the host nothing; ``warm=True`` also opens the vector index at once. ``session_id``
    defaults to the spool's session (the store's, one per process).
    :meth:`close` at shutdown stores what is queued.
    """

    #: How long a call submitted before the spool exists waits for the worker to make it; past
    #: that (the store cannot be opened, say) the call is kept in memory only.
    SPOOL_WAIT_S = 10.0

    def __init__(
        self,
        get_store: Callable[[], CaptureStore],
        *,
        mapping: Callable[[str], str] | None = None,
        session_id: str | None = None,
        max_queue: int = 10_000,
        warm: bool = False,
        spool: CaptureSpool | None = None,
    ) -> None:
        self._get_store = get_store
        self._warm = warm
        self.mapping = mapping or TypeMapping()
        self.session_id = session_id or (spool.session_id if spool is not None else None)
        self.spool = spool
        self._spool_made = threading.Event()  # set once making the spool succeeded or failed
        if spool is not None:
            self._spool_made.set()
        self._queue: queue.Queue[tuple[ToolCall, str | None, str] | None] = queue.Queue(maxsize=max_queue)
        self.stats = {"captured": 0, "skipped": 0, "failed": 0, "dropped": 0}
        self.memory_ids: list[str] = []
        self._thread = threading.Thread(target=self._run, name="remindful-capture", daemon=True)
        self._thread.start()

    @property
    def spool_made(self) -> bool:
        """Whether :meth:`submit` can commit at once (else it waits for the worker to make the spool)."""
        return self._spool_made.is_set()

    def submit(self, call: ToolCall) -> None:
        memory_type, key = self.mapping(call.tool), None
        self._spool_made.wait(self.SPOOL_WAIT_S)  # at once when the spool is made
        spool = self.spool
        if spool is not None:
            try:
                key, call = spool.append(call, memory_type)
            except Exception as exc:  # not durable, still captured by this process
                log.warning("could not spool the call of %s: %s", call.tool, exc)
        try:
            self._queue.put_nowait((call, key, memory_type))
        except queue.Full:
            self.stats["dropped"] += 1
            log.warning("capture queue full: dropped the call of %s", call.tool)

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every submitted call is stored (or skipped); False on timeout."""
        deadline = time.monotonic() + timeout
        while self._queue.unfinished_tasks:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.005)
        return True

    def close(self, timeout: float = 10.0) -> None:
        """Store what is queued, then stop the thread."""
        self.flush(timeout)
        try:
            self._queue.put(None, timeout=timeout)
        except queue.Full:  # still busy after the timeout: leave the daemon thread behind
            return
        self._thread.join(timeout)
        if self.spool is not None:
            self.spool.close()

    def _run(self) -> None:
        self._start()
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                self._store(*item)
            except Exception as exc:  # capture is best effort; the host must never see it fail
                self.stats["failed"] += 1
                log.warning("could not capture the call of %s: %s", item[0].tool if item else "?", exc)
            finally:
                self._queue.task_done()

    def _start(self) -> None:
        """Make the spool from the store (unless given) and, with ``warm``, open the store and
        its vector index before the first call arrives, so that captures are stored within
        milliseconds even when the host is stopped soon after its last call."""
        try:
            if self.spool is None:
                from remindful.services.ingest.spooled import CaptureSpool

                try:
                    spool = CaptureSpool.for_store(self._get_store(), self.session_id)
                    self.session_id = self.session_id or spool.session_id
                    self.spool = spool
                finally:
                    self._spool_made.set()
            if self._warm:
                store = self._get_store()
                if not store.disabled_reason:
                    store.ready()
                    store.index_status()
        except Exception as exc:  # the first capture reports it again, with its own error
            log.debug("capture start-up failed: %s", exc)

    def _store(self, call: ToolCall, key: str | None, memory_type: str) -> None:
        store = self._get_store()
        spool = self.spool
        if key is None and spool is not None:  # submitted before the spool was made
            key, call = spool.append(call, memory_type)
        item = capture_item(store, call, memory_type, self.session_id or store.session_id, key)
        if item is None:
            self.stats["skipped"] += 1
        else:
            args = ("content", "type", "metadata", "session_id", "timestamp", "source")
            memory_id = store.store_batch([{a: item[a] for a in args}])[0]
            self.memory_ids.append(memory_id)
            self.stats["captured"] += 1
            relate(store, memory_id, item["metadata"], call.finished_at)
        if key is not None and spool is not None:
            spool.done(key)


__all__ = ["CaptureWorker"]
