"""Who may use remindful, and what its tools may touch.

**HTTP: one bearer token per storage directory.**

Every HTTP surface (the MCP server's streamable HTTP, the daemon's API, the dashboard) answers only
requests carrying ``Authorization: Bearer <token>``. The token is ``$REMINDFUL_HTTP_TOKEN`` when
that is set; otherwise it is generated once (``secrets.token_urlsafe(32)``) and kept in
``<storage>/http_token``, created with mode 0600 in a 0700 directory, and read back on later starts
by every process that serves the same store.

    token = http_token(settings.storage_path)
    if not bearer_ok(request_headers.get("authorization"), token):
        ...  # 401

**Files: the allowed roots.** A tool (an MCP tool, whose caller is a model that a web page or a
file may have prompt-injected) reads or writes only files inside the storage directory, the
``auto_capture.watch_dirs`` and ``security.allowed_paths`` (``Settings.allowed_roots()``), judged after
every symlink is resolved (:func:`tool_path`). The CLI and the Python API, used by the person at
the keyboard, may name any path.

Standard library only (plus remindful's errors): HTTP shells import this before anything heavy.
"""

from __future__ import annotations

import errno
import hmac
import os
import secrets
import stat
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from remindful.errors import StorageError, StorageFullError, ValidationError
from remindful.owned import private_dir

if TYPE_CHECKING:
    from remindful.config import Settings

TOKEN_ENV = "REMINDFUL_HTTP_TOKEN"
TOKEN_FILE = "http_token"
#: How long a reader waits for a token file another process has created but not yet written.
_WRITE_GRACE_S = 2.0


def token_file(storage_path: str | os.PathLike[str]) -> Path:
    """Where the generated token of the store at ``storage_path`` is kept."""
    return Path(storage_path).expanduser() / TOKEN_FILE


def token_source(storage_path: str | os.PathLike[str]) -> str:
    """Where :func:`http_token` takes the token from, for telling the user (never the token)."""
    if os.environ.get(TOKEN_ENV, "").strip():
        return f"${TOKEN_ENV}"
    return str(token_file(storage_path))


def http_token(storage_path: str | os.PathLike[str]) -> str:
    """The bearer token for the store at ``storage_path``.

    ``$REMINDFUL_HTTP_TOKEN`` if set (and not blank); else the content of ``<storage>/http_token``,
    which is created (mode 0600, with a new random token) if it does not exist. Two processes
    starting together agree on one token: the file is created with ``O_EXCL`` and the loser reads
    the winner's.

    Raises StorageError if the file cannot be created or read, is empty, or can be read by other
    users (a token that may have leaked is not used; the message says how to replace it).
    """
    from_env = os.environ.get(TOKEN_ENV, "").strip()
    if from_env:
        return from_env
    path = token_file(storage_path)
    deadline = time.monotonic() + _WRITE_GRACE_S
    while True:
        try:
            token = _read(path)
        except FileNotFoundError:
            try:
                return _create(path)
            except FileExistsError:
                continue  # another process created it first: read theirs
        if token or time.monotonic() > deadline:
            break
        time.sleep(0.02)  # created by another process that has not written it yet
    if not token:
        raise StorageError(f"The HTTP token file {path} is empty", suggestion="Delete it to generate a new token")
    return token


def bearer_ok(header_value: str | bytes | None, token: str) -> bool:
    """Whether an ``Authorization`` header value is ``Bearer <token>`` (scheme case-insensitive,
    compared in constant time). False for a missing header or an empty ``token``."""
    if not header_value or not token:
        return False
    if isinstance(header_value, bytes):
        header_value = header_value.decode("latin-1")
    scheme, _, credentials = header_value.strip().partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(credentials.strip().encode("utf-8"), token.encode("utf-8"))


def inside(path: Path, roots: Iterable[Path]) -> bool:
    """Whether the resolved ``path`` is one of ``roots`` or lies below one."""
    return any(path == root or path.is_relative_to(root) for root in roots)


def tool_path(value: object, settings: Settings, *, field: str) -> Path:
    """The real path (every symlink resolved) of the file a tool named in ``field``, when it lies
    inside ``Settings.allowed_roots()``; the caller then uses that path, not the name it was given.

    Raises ValidationError naming ``field`` and the allowed roots otherwise (also for a relative
    path, whose meaning would depend on the server's working directory)."""
    if not isinstance(value, str) or not value.strip() or "\x00" in value:
        raise ValidationError(field, "expected an absolute file path")
    given = Path(value).expanduser()
    if not given.is_absolute():
        raise ValidationError(field, f"expected an absolute file path, got {value!r}")
    try:
        real = given.resolve()
    except (OSError, RuntimeError) as exc:  # a symlink loop
        raise ValidationError(field, f"cannot resolve {value!r}: {exc}") from None
    roots = settings.allowed_roots()
    if not inside(real, roots):
        via = f" (a link to {real})" if real != given else ""
        raise ValidationError(
            field,
            f"{value!r}{via} is outside the directories tools may use: {', '.join(map(str, roots))} "
            "(the storage directory, auto_capture.watch_dirs and security.allowed_paths)",
        )
    return real


def _read(path: Path) -> str:
    """The token in ``path``; FileNotFoundError if there is none (then the caller creates it)."""
    try:
        with open(path, "rb", opener=lambda p, flags: os.open(p, flags | getattr(os, "O_NOFOLLOW", 0))) as f:
            mode = os.fstat(f.fileno()).st_mode
            if not stat.S_ISREG(mode):
                raise StorageError(f"The HTTP token file {path} is not a regular file", suggestion="Remove it")
            if mode & 0o077:
                raise StorageError(
                    f"The HTTP token file {path} can be read by other users (mode {stat.S_IMODE(mode):o})",
                    suggestion="Delete it to generate a new token (the old one may have leaked)",
                )
            data = f.read()
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise StorageError(f"Cannot read the HTTP token file {path}: {exc}") from exc
    try:
        return data.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise StorageError(
            f"The HTTP token file {path} is not text", suggestion="Delete it to generate a new token"
        ) from None


def _create(path: Path) -> str:
    """Write a new token to ``path``; FileExistsError if it exists (then the caller reads it).

    The token is written and synced in a temporary file first, then linked into place (which
    fails if ``path`` exists, as ``O_EXCL`` would): ``path`` never exists empty or half-written.
    An empty token file, left by a write that failed on a full disk, made every HTTP surface
    refuse to start."""
    token = secrets.token_urlsafe(32)
    try:
        private_dir(path.parent, "storage directory")
        fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{TOKEN_FILE}-")  # mode 0600
    except OSError as exc:  # a storage path that is a file, a read-only disk, ...
        raise _cannot_write(path, exc) from exc
    try:
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(token + "\n")
                f.flush()
                os.fsync(f.fileno())
            os.link(temporary, path)
        except FileExistsError:
            raise
        except OSError as exc:
            raise _cannot_write(path, exc) from exc
    finally:
        os.unlink(temporary)
    return token


def _cannot_write(path: Path, exc: OSError) -> StorageError:
    if exc.errno == errno.ENOSPC:
        return StorageFullError(f"the disk is full: cannot write the HTTP token file {path}")
    return StorageError(f"Cannot create the HTTP token file {path}: {exc}")


__all__ = [
    "TOKEN_ENV",
    "TOKEN_FILE",
    "bearer_ok",
    "http_token",
    "inside",
    "token_file",
    "token_source",
    "tool_path",
]
