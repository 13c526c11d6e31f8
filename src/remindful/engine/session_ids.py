"""The id under which a caller's session id is stored, for one catalog (either backend).

A session id is written mapped (:meth:`~remindful.engine.redact.StoreRedactor.session_id`: itself,
unless it carries a secret), and the mapping is idempotent: a stored id maps to itself. So an id
the catalog has recorded (a session row, or a memory of that session) is its own stored id, and
finding it there needs no secret detector. Loading detect-secrets' rules costs a process
0.15-0.25 s (its imports and ~80 regular expressions): a reader's first session filter (``search
--session``, ``list``) paid that on the command line, and a serving process on its first such
search. An id not recorded goes through the mapping. Answers are remembered (the mapping is
fixed for a process), the ``KEPT`` most recently asked.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from typing import Any

from remindful.errors import RemindfulError
from remindful.runtime import SESSION_ID_MAX_CHARS

__all__ = ["KEPT", "StoredSessionIds"]

log = logging.getLogger(__name__)

#: Session ids whose stored id is remembered, per catalog.
KEPT = 4096
#: Whether an id is a stored session id (both parameters: the id), in the dialect both catalogs
#: take; two primary-key or index lookups.
_RECORDED = (
    "SELECT EXISTS (SELECT 1 FROM sessions WHERE id = ?) OR EXISTS (SELECT 1 FROM memories WHERE session_id = ?)"
)


class StoredSessionIds:
    """``ids(session_id)``: the stored id of ``session_id``. ``read(sql, params)`` is the catalog's
    read; ``mapped(id)`` the redactor's mapping, which also refuses an id that is too long."""

    def __init__(self, read: Callable[[str, Sequence[Any]], list[Any]], mapped: Callable[[str], str]) -> None:
        self._read = read
        self._mapped = mapped
        self._stored = functools.lru_cache(maxsize=KEPT)(self._look_up)

    def __call__(self, session_id: str) -> str:
        return self._stored(session_id)

    def _look_up(self, session_id: str) -> str:
        return session_id if self._recorded(session_id) else self._mapped(session_id)

    def _recorded(self, session_id: str) -> bool:
        if not session_id or len(session_id) > SESSION_ID_MAX_CHARS:
            return False  # the mapping refuses an id too long; an empty one is never recorded
        try:
            return bool(self._read(_RECORDED, (session_id, session_id))[0][0])
        except RemindfulError as exc:  # the mapping answers as well, only slower
            log.debug("session %r not looked up (%s); mapped instead", session_id, exc)
            return False
