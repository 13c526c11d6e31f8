"""Tracing the SQL a catalog runs on its shared connection, without deadlocking its threads.

``sqlite3.Connection.set_trace_callback`` takes the connection's mutex while holding the GIL; a
background thread (the indexer, the access recorder) running a statement on that connection holds
the mutex, and its trace callback waits for the GIL: a deadlock. Setting and unsetting the callback
inside one of the catalog's (empty) transactions means no other thread is inside a statement on the
shared connection then: a transaction holds it (a reader finds it held and reads on its own)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def traced(catalog: Any, sink: Callable[[str], object]) -> Iterator[None]:
    """Every statement run on ``catalog``'s shared connection meanwhile goes to ``sink`` (not the
    BEGIN and COMMIT of the transactions this function sets and unsets the callback in)."""
    own = [True]

    def record(statement: str) -> None:
        if not own[0]:
            sink(statement)

    with catalog.transaction() as conn:
        conn.set_trace_callback(record)
    own[0] = False
    try:
        yield
    finally:
        own[0] = True
        with catalog.transaction() as conn:
            conn.set_trace_callback(None)
