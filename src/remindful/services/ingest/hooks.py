"""One coding-agent hook event into the spool: filtered, redacted and committed in one short
transaction (the record is built from the hook's JSON by :mod:`remindful.services.ingest.events`).

Standard library only: a hook process (:mod:`remindful.shells.hook`) runs this at every event of
the agent and must not load the store. What a hook writes besides the spool row is what it counted
(redactions and skips, ``capture_stats``) and, for a session the privacy settings exclude, one
audit-log line and nothing else. If the catalog stays locked past the busy timeout, or cannot be
opened, the row goes to the spool's fallback file, which the next drain imports: nothing is lost.
If that file cannot be written either (a full disk), :class:`Unwritable` carries the record to the
hook, which hands it to the running daemon to keep in memory (see :mod:`remindful.shells.hook`).
"""

from __future__ import annotations

from remindful.engine import spool
from remindful.engine.redact import StoreRedactor, add_counts
from remindful.engine.storelock import StoreLock
from remindful.services.ingest.events import idem_key

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs hook processes milliseconds
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from remindful.engine.spool import Connection
    from remindful.services.ingest.filters import CaptureFilter


class Unwritable(Exception):
    """Neither the catalog nor the spool's fallback file could take a record (a full disk, a
    read-only store): ``record`` is the fallback file's line for it (``idem_key``, ``kind``,
    ``payload``: a redacted :class:`~remindful.engine.spool.Payload`, ``created_at``), for whoever
    can keep it (the running daemon, in memory: :func:`remindful.runtime.ask_daemon` ``keep``)."""

    def __init__(self, record: dict[str, Any], cause: BaseException) -> None:
        super().__init__(f"{type(cause).__name__}: {cause}")
        self.record, self.cause = record, cause
        #: Whether the disk is full (else the store is unwritable for another reason).
        self.full = _full(cause) or "disk is full" in str(cause)


class Prepared:
    """A record ready to commit (:func:`prepare_record`): its key, what it counts, and the filter
    whose redactor the store's redactor wraps when it is written (:func:`commit`)."""

    __slots__ = ("counts", "event", "excluded", "flt", "key", "record", "spooled")

    def __init__(
        self,
        flt: CaptureFilter,
        event: str,
        record: dict[str, Any],
        key: str,
        counts: dict[str, int],
        excluded: str | None,
    ):
        self.flt, self.event, self.record, self.key = flt, event, record, key
        self.counts, self.excluded = counts, excluded
        #: What :func:`spool_record` returns for it: None for an excluded session, else whether
        #: anything of it (memories or a session record) is spooled.
        self.spooled: bool | None = None if excluded is not None else bool(record["memories"] or "session" in record)


def prepare_record(
    flt: CaptureFilter, redacted: dict[str, int], event: str, payload: dict[str, Any], record: dict[str, Any]
) -> Prepared | bool | None:
    """Filter and redact the ``record`` built from ``payload`` for ``event`` (``redacted``: the
    hits of the redaction that ran while it was built): a :class:`Prepared` to :func:`commit`,
    or False if nothing of it is to be written (filtered), or None if memory is off or the session
    is excluded (then nothing at all is written for it, not even context)."""
    if not flt.config.memory_enabled:
        return None
    counts: dict[str, int] = {}
    kept = []
    excluded = None
    for item in record["memories"]:
        result = flt.check(item["content"], trigger="hooks", session_id=record["session_id"], metadata=item["metadata"])
        if result.allowed:
            kept.append({**item, "content": _cut(result.content, result.metadata), "metadata": result.metadata})
            counts.update({f"redacted_{k}": counts.get(f"redacted_{k}", 0) + v for k, v in result.redactions.items()})
        else:
            counts[f"skipped_{result.code}"] = counts.get(f"skipped_{result.code}", 0) + 1
            excluded = excluded or (result.reason if result.code == "excluded" else None)
    if excluded is None and flt.excluded_session(record["session_id"]) is not None:
        excluded = f"privacy exclusion: session {record['session_id']!r}"
    if excluded is not None:  # nothing of an excluded session is written, not even its session record
        kept = []
        record.pop("session", None)
    capture_on = flt.config.enabled and flt.config.triggers.get("hooks", True)
    if kept:
        for name, n in redacted.items():
            counts[f"redacted_{name}"] = counts.get(f"redacted_{name}", 0) + n
    record["memories"] = kept
    if not capture_on:
        record.pop("session", None)
    if not kept and "session" not in record and not counts:
        return None if excluded is not None else False
    return Prepared(flt, event, record, idem_key(event, payload, record), counts, excluded)


def _cut(content: str, metadata: dict[str, Any]) -> str:
    """A memory made from a hook input over ``limits.hook_payload_bytes`` (metadata ``truncated``,
    set by the hook): its text, redacted whole by the filter already, cut to ``keep_chars`` and
    saying so; any other as it is."""
    mark = metadata.get("truncated")
    if not isinstance(mark, dict):
        return content
    keep = int(mark.get("keep_chars") or 16_000)
    note = (
        f" [truncated: the hook input was {int(mark.get('bytes') or 0):,} bytes, over limits.hook_payload_bytes "
        f"({int(mark.get('limit') or 0):,})"
    )
    if len(content) > keep:
        mark["chars"] = len(content)
        return content[:keep] + note + f"; {keep:,} of {len(content):,} characters kept]"
    return content + note + "]"


def commit(
    storage: str,
    prepared: Prepared,
    *,
    warn: Callable[[str], None],
    keep_open: list[Connection] | None = None,
) -> None:
    """Commit a prepared record in one short transaction, or, if the catalog cannot take it, to the
    spool's fallback file (``warn`` reports that). With ``keep_open`` the connection is left open
    and appended to it: closing the last connection to a WAL database checkpoints it (an fsync that
    would double a hook's time), and a process that ends with ``os._exit`` need not (the committed
    transaction is in the WAL file; the next connection sees it)."""
    record, key, event = prepared.record, prepared.key, prepared.event
    counts, excluded, kept = prepared.counts, prepared.excluded, record["memories"]
    # What is written passes the store's redactor: the session id mapped, the rest redacted again
    # (the texts the filter returned cost a lookup).
    redaction = StoreRedactor(prepared.flt.redactor, storage)
    hits: dict[str, int] = {}
    body = spool.encode(record, redaction, hits)
    for name, n in hits.items():
        counts[f"redacted_{name}"] = counts.get(f"redacted_{name}", 0) + n
    fallback = {"idem_key": key, "kind": event, "payload": body, "created_at": record["at"]}
    try:
        conn = spool.connect(storage)
    except Exception as exc:
        _to_fallback(storage, fallback, exc)
        return
    try:
        for attempt in range(2):
            try:
                # A restore or a clear-all waits for this write; while one runs, the fallback file.
                with StoreLock(storage).shared(wait=False), spool.immediate(conn):
                    if kept or "session" in record:
                        spool.append(conn, key, event, body, record["at"], redaction=redaction)
                    add_counts(conn, counts)
                    if excluded is not None:
                        detail = {"reason": excluded, "event": event}
                        spool.audit(conn, "capture_excluded", None, detail, redaction=redaction)
                break
            except Exception as exc:
                if attempt == 0 and "no such table" in str(exc):  # no catalog yet, or an old one
                    spool.ensure_tables(conn)
                    continue
                if excluded is None:
                    _to_fallback(storage, fallback, exc)
                    warn(f"catalog busy ({exc}); event kept in {spool.FALLBACK_NAME}")
                break
    finally:
        if keep_open is None:
            conn.close()
        else:
            keep_open.append(conn)


def _to_fallback(storage: str, fallback: dict[str, Any], cause: BaseException) -> None:
    """The record to the spool's fallback file; Unwritable if that fails too (``cause``: why the
    catalog did not take it)."""
    try:
        spool.write_fallback(storage, fallback)
    except OSError as exc:
        raise Unwritable(fallback, exc if _full(exc) else cause) from exc


def _full(exc: BaseException) -> bool:
    import errno

    return getattr(exc, "errno", None) in (errno.ENOSPC, errno.EDQUOT)


def spool_record(
    storage: str,
    flt: CaptureFilter,
    redacted: dict[str, int],
    event: str,
    payload: dict[str, Any],
    record: dict[str, Any],
    *,
    warn: Callable[[str], None],
    keep_open: list[Connection] | None = None,
) -> bool | None:
    """:func:`prepare_record` then :func:`commit`: True if spooled, False if filtered, None if
    memory is off or the session is excluded."""
    prepared = prepare_record(flt, redacted, event, payload, record)
    if not isinstance(prepared, Prepared):
        return prepared
    commit(storage, prepared, warn=warn, keep_open=keep_open)
    return prepared.spooled


__all__ = ["Prepared", "Unwritable", "commit", "prepare_record", "spool_record"]
