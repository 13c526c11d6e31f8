"""Tracing the SQL a catalog runs on its shared connection, without deadlocking its threads.

``sqlite3.Connection.set_trace_callback`` takes the connection's mutex while holding the GIL; a
background thread (the indexer, the access recorder) running a statement on that connection holds
the mutex, and its trace callback waits for the GIL: a deadlock. Setting and unsetting the callback
under the catalog's own lock of the shared connection means no other thread is inside a statement
on it then (a reader finds it held and reads on its own connection)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def traced(catalog: Any, sink: Callable[[str], object]) -> Iterator[None]:
    """Every statement run on ``catalog``'s shared connection meanwhile goes to ``sink``."""
    with catalog._lock:
        catalog._conn.set_trace_callback(sink)
    try:
        yield
    finally:
        with catalog._lock:
            catalog._conn.set_trace_callback(None)
