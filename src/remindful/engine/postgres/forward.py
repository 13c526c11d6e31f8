"""A machine's spool drained into the shared PostgreSQL catalog, each event exactly once.

Hooks and capture points keep spooling to the machine's own SQLite catalog (one short local
transaction: the acknowledgement), whether the server answers or not. The forwarder takes the
oldest spooled rows, hands them to the server in one transaction keyed by their idempotency keys
(:meth:`PostgresCatalog.deliver`), and only then marks them done locally. A server that does not
answer leaves them where they are (the local spool is the bound: ``doctor`` reports what waits
there); a crash or a lost answer between the server's commit and the local one delivers the batch
again, and the server's ``spool_done`` skips what it already holds.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from remindful.engine.captures import CaptureRepository
from remindful.engine.catalog import MemoryRow
from remindful.engine.postgres.catalog import PostgresCatalog

#: Turns one spooled row ``(kind, payload)`` into the memories it stores (none: nothing to store).
ToRows = Callable[[str, str], Sequence[MemoryRow]]
#: Spooled rows handed over per transaction.
BATCH = 200


class SpoolForwarder:
    """Drains ``local`` (a machine's spool) into ``target``; run by the one drainer of that machine."""

    def __init__(
        self,
        local: CaptureRepository,
        target: PostgresCatalog,
        to_rows: ToRows,
        *,
        batch: int = BATCH,
        max_attempts: int = 5,
        payload_limit: int = 4 * 1024 * 1024,
    ) -> None:
        self._local, self._target, self._to_rows = local, target, to_rows
        self._batch, self._max_attempts, self._payload_limit = batch, max_attempts, payload_limit

    def forward_once(self) -> int:
        """Hand over the oldest waiting batch; how many spooled rows left the local spool (0: none
        waited). A StorageError of the server (it does not answer, or the answer was lost) leaves
        the batch in the spool for the next call."""
        claimed = self._local.claim(
            after=0, limit=self._batch, max_attempts=self._max_attempts, payload_limit=self._payload_limit
        )
        if not claimed:
            return 0
        # A payload too large to read stays in the spool, its attempts counted: doctor shows it stuck.
        fits = [(seq, key, kind, payload) for seq, key, kind, payload, _at, _tries in claimed if payload is not None]
        self._target.deliver([(key, self._to_rows(kind, payload)) for _seq, key, kind, payload in fits])
        too_large = {seq: "payload over the size limit" for seq, _key, _kind, payload, *_ in claimed if payload is None}
        self._local.finish_spooled(done=[(seq, key) for seq, key, _, _ in fits], failures=too_large, at=time.time())
        return len(fits)


__all__ = ["SpoolForwarder", "ToRows"]
