"""What the ingest package needs of the store: :class:`CaptureStore`, a narrow view of the
:class:`~remindful.engine.store.Store` (which is one). Every capture path stores through its
write path (validated, redacted, indexed) and reads or records the rest through
:attr:`CaptureStore.captures` (:class:`~remindful.engine.captures.CaptureRepository`); none runs SQL
or holds the catalog."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from remindful.services.learning.common import MemoryWriter

if TYPE_CHECKING:
    from remindful.config import Settings
    from remindful.engine.captures import CaptureRepository
    from remindful.model import Memory


class CaptureStore(MemoryWriter, Protocol):
    """The store as the capture paths use it: the write path the learning layer uses too (a
    drain learns from the turns it stores), and what capture needs besides."""

    @property
    def path(self) -> Path:
        """The storage directory (the spool's lock and fallback files live there)."""

    @property
    def settings(self) -> Settings: ...

    @property
    def session_id(self) -> str:
        """This process's session: what a capture belongs to when it names none."""

    @property
    def disabled_reason(self) -> str | None: ...

    @property
    def captures(self) -> CaptureRepository: ...

    def ready(self) -> object:
        """Open the catalog (MemoryDisabledError when memory is off)."""

    def store_batch(self, items: Sequence[Mapping[str, Any]], *, defer: bool | None = None) -> list[str]: ...

    def update(
        self, memory_id: str, content: str | None = None, metadata: Mapping[str, Any] | None = None
    ) -> Memory: ...

    def delete_many(self, ids: Sequence[str], *, reason: str | Mapping[str, str] = ...) -> int: ...

    def index_status(self) -> dict[str, Any]: ...


__all__ = ["CaptureStore"]
