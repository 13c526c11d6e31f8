"""Every error remindful raises, under one base class.

    RemindfulError                                                                       HTTP 500
    ├── ConfigError             invalid setting: names the field and the expected form        500
    ├── StorageError            the catalog or the index could not be read or written         500
    │   ├── StorageFullError    the disk is full ("Storage full, unable to save memory")      507
    │   ├── StorageLockedError  lock contention outlasted the retries                         503
    │   └── CorruptionError     index or catalog files are damaged                            500
    ├── NotFoundError           no memory with that id ("Memory not found")                   404
    ├── ValidationError         bad input to the API: names the field and the expected form   400
    │   └── StaleVersionError   an update made on a version another writer has changed since  409
    ├── EmbedderError           the embedding model could not be found, loaded or run         500
    ├── DependencyMissingError  an optional package is not installed: says which extra        500
    ├── UntrustedPathError      a config, cache or store another user owns or can write       500
    ├── AccessDeniedError       a team store's token is missing, unknown or revoked, or its   403
    │                           person may not do this (refused by the database itself)
    └── MemoryDisabledError     memory is turned off in config, or was disabled by an error   503

Shells translate these at the edge: the CLI prints the message and exits non-zero, the MCP server
raises the SDK's tool error (``isError: true``) with the message, and every HTTP surface answers
the status :func:`http_status` gives (the column above).
"""

from __future__ import annotations

import errno
import os


class RemindfulError(Exception):
    """Base class of every remindful error. ``suggestion`` says what the user can do."""

    def __init__(self, message: str, *, suggestion: str | None = None) -> None:
        self.message = message
        self.suggestion = suggestion
        super().__init__(f"{message}. {suggestion}" if suggestion else message)


class ConfigError(RemindfulError):
    """A configuration value is invalid; the message names the field and the expected form."""

    def __init__(self, field: str, message: str, *, suggestion: str | None = None) -> None:
        self.field = field
        super().__init__(f"Invalid setting '{field}': {message}", suggestion=suggestion)


class StorageError(RemindfulError):
    """The catalog or the vector index failed."""


class StorageFullError(StorageError):
    """The disk is full: nothing was saved."""

    def __init__(self, detail: str = "") -> None:
        super().__init__(
            "Storage full, unable to save memory" + (f" ({detail})" if detail else ""),
            suggestion="Run `remindful cleanup` to apply retention, or free disk space",
        )


class StorageLockedError(StorageError):
    """Another process held a lock through every retry."""


class CorruptionError(StorageError):
    """Index or catalog files are damaged. ``backup_path`` holds a copy of the damaged files;
    ``part`` says which: ``"index"`` (rebuilt by ``remindful reindex --reset``) or ``"catalog"``
    (the truth: nothing destructive runs on it; ``remindful doctor`` says the way out)."""

    def __init__(
        self, message: str, *, backup_path: str | None = None, suggestion: str | None = None, part: str = "index"
    ) -> None:
        self.backup_path = backup_path
        self.part = part
        super().__init__(message, suggestion=suggestion)


class NotFoundError(RemindfulError):
    """No memory has the requested id (or, with ``kind="session"``, no session)."""

    def __init__(self, memory_id: str, *, kind: str = "memory") -> None:
        self.memory_id = memory_id
        self.kind = kind
        if kind == "session":
            suggestion = "Use memory_list_sessions() (or `remindful sessions`) to see the session ids"
        else:
            suggestion = "Use memory_search() (or `remindful search`) to find similar memories"
        super().__init__(f"{kind.capitalize()} not found: {memory_id!r}", suggestion=suggestion)


class ValidationError(RemindfulError):
    """Bad input to the API; ``field`` names the offending parameter."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        # A field path built from the caller's keys may hold a newline or a lone surrogate: shown
        # escaped, so that the error stays one printable line.
        shown = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in field)
        super().__init__(f"Invalid '{shown}': {message}")


class StaleVersionError(ValidationError):
    """An update was made on a copy of a memory that another writer has changed since: refused,
    nothing written (a shared catalog keeps a version per memory)."""

    def __init__(self, memory_id: str, current: int, given: int) -> None:
        self.memory_id, self.current, self.given = memory_id, current, given
        super().__init__(
            "version",
            f"memory {memory_id} is at version {current}, the change was made on version {given}: "
            "read it again and redo the change",
        )


class EmbedderError(RemindfulError):
    """The embedding model could not be found, loaded or run."""


class DependencyMissingError(RemindfulError):
    """An optional dependency is missing; the message names the extra to install."""

    def __init__(self, package: str, extra: str) -> None:
        self.package = package
        self.extra = extra
        super().__init__(
            f"The optional package {package!r} is not installed",
            suggestion=f"Install it with: pip install 'remindful[{extra}]'",
        )


class UntrustedPathError(RemindfulError):
    """A file or directory remindful would trust (its config, a cache, the store) is owned by
    another user, writable by others, or a link another user made (:mod:`remindful.owned`); the
    message names the path, the suggestion the fix."""


class AccessDeniedError(RemindfulError):
    """On a team store (PostgreSQL, ``catalog.url``): the person's token (``catalog.token``) is
    missing, unknown or revoked, or the person may not do what was asked (another person's private
    memory). The database refuses it in its own queries; the message is one line and never holds
    the token."""


class MemoryDisabledError(RemindfulError):
    """Memory features are disabled; ``reason`` says why (config, or an earlier failure)."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"Memory features are disabled: {reason}")


#: The HTTP status of each error class; a class not listed takes its nearest listed ancestor's.
#: Below this much free space a vague write error (SQLite's "disk I/O error" at a -shm it cannot
#: grow, chromadb's compaction errors) means a full disk.
NEARLY_FULL = 1024 * 1024


def unwritable(directory: str | os.PathLike[str], exc: BaseException | None = None) -> StorageError | None:
    """Why nothing can be written in the storage ``directory`` (or a directory in it), if that is
    the cause of ``exc`` (a failed write or open; None: whatever the cause would be): it is
    read-only (a StorageError saying so), or its disk is full (StorageFullError). None: something
    else. A ``statvfs``; the caller reports the error it got. The catalog, the vector index, backup
    and doctor ask it."""
    try:
        stat = os.statvfs(directory)
        free = stat.f_bavail * stat.f_frsize
    except OSError:
        return None
    if (
        stat.f_flag & os.ST_RDONLY
        or not os.access(directory, os.W_OK)
        or (isinstance(exc, OSError) and exc.errno == errno.EROFS)
    ):
        return StorageError(
            f"the storage directory {directory} is read-only: memories can be read, not written",
            suggestion="Make it writable (remount the filesystem read-write, or chmod 700), or configure another path",
        )
    text = str(exc).lower()
    if free < NEARLY_FULL or "disk is full" in text or (isinstance(exc, OSError) and exc.errno == errno.ENOSPC):
        return StorageFullError(f"the disk is full: {free} bytes free under {directory}")
    return None


_HTTP_STATUS: dict[type, int] = {
    RemindfulError: 500,
    StaleVersionError: 409,
    ValidationError: 400,
    NotFoundError: 404,
    MemoryDisabledError: 503,
    StorageLockedError: 503,
    StorageFullError: 507,
    AccessDeniedError: 403,
}


def http_status(exc: BaseException) -> int:
    """The HTTP status every HTTP surface answers for ``exc``: the client's fault (400, 404), the
    server's state (503: disabled or busy, retry later; 507: disk full), else 500 (any other error,
    remindful's or not)."""
    for cls in type(exc).__mro__:
        if cls in _HTTP_STATUS:
            return _HTTP_STATUS[cls]
    return 500
