"""Files and directories only this user controls: what remindful reads its settings, its caches and
its memories from, and how it creates them (standard library only: hook processes import it).

Another local user must not be able to plant or change what remindful trusts. A path is trusted
(:func:`problem` says why not) when it is owned by this user (or root), nobody else can write it
(other-writable never; group-writable only when the group is the user's own private group, as
distributions with user private groups make every file), and, if it is a symbolic link, the link
is this user's too (a link another user planted is refused, wherever it points). Where a directory
others could write leads to it (``~/.cache`` 0777), another user can swap what lies inside:
:func:`trusted_chain` checks the directories from the home directory down.

What remindful creates it makes private whatever the umask: :func:`private_dir` creates every
missing directory 0700 (``mkdir -p`` would give the parents the umask's mode), :func:`private_file`
opens a new file 0600, not following a link.
"""

from __future__ import annotations

import contextlib
import os
import stat

from remindful.errors import UntrustedPathError

_OTHERS_WRITE = stat.S_IWOTH
_GROUP_WRITE = stat.S_IWGRP


def problem(path: str | os.PathLike[str]) -> tuple[str, str] | None:
    """Why ``path`` cannot be trusted, as ``(what is wrong, the fix)``; None when it can, or when
    nothing is there."""
    path = os.fspath(path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    me = os.geteuid()
    if stat.S_ISLNK(st.st_mode):
        if st.st_uid not in (me, 0):
            return (f"is a symbolic link another user (uid {st.st_uid}) made", f"Remove it: rm {path}")
        try:
            st = os.stat(path)
        except OSError:
            return None  # a dangling link of ours: whoever creates through it decides
    if st.st_uid not in (me, 0):
        return (
            f"is owned by another user (uid {st.st_uid})",
            f"Move it away and let remindful create its own: mv {path} {path}.untrusted",
        )
    if st.st_mode & _OTHERS_WRITE and not (stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX and st.st_uid == 0):
        return ("is writable by other users", f"chmod o-w {path}")
    if st.st_mode & _GROUP_WRITE and not _private_group(st.st_gid):
        return ("is writable by its group", f"chmod g-w {path}")
    return None


def refuse_untrusted(path: str | os.PathLike[str], what: str) -> None:
    """Raise :class:`~remindful.errors.UntrustedPathError` (one line: ``what``, the path, why, the
    fix) if ``path`` cannot be trusted (:func:`problem`)."""
    found = problem(path)
    if found is not None:
        raise UntrustedPathError(f"{what} {os.fspath(path)} {found[0]}", suggestion=found[1])


def trusted_chain(path: str | os.PathLike[str], what: str) -> None:
    """Refuse ``path`` and every directory above it up to the home directory (those only if
    ``path`` lies under it: elsewhere ``path`` alone) when one cannot be trusted."""
    path = os.path.abspath(os.fspath(path))
    home = os.path.abspath(os.path.expanduser("~"))
    current = path
    while True:
        refuse_untrusted(current, what if current == path else f"{what} lies under {current}, which")
        if current == home or not path.startswith(home + os.sep):
            return
        parent = os.path.dirname(current)
        if parent == current:
            return
        current = parent


def private_dir(path: str | os.PathLike[str], what: str = "directory", *, tighten: bool = True) -> str:
    """Create ``path`` and its missing parents 0700 whatever the umask, then refuse it (and the
    directories above it, see :func:`trusted_chain`) if another user owns or can write it. With
    ``tighten``, an existing directory of this user that others can read is made 0700. Returns
    the path."""
    path = os.path.abspath(os.fspath(path))
    missing = []
    current = path
    while not os.path.lexists(current):
        missing.append(current)
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    for directory in reversed(missing):
        try:
            os.mkdir(directory, 0o700)
        except FileExistsError:
            continue  # another process made it meanwhile: checked below like any existing one
        os.chmod(directory, 0o700)  # mkdir's mode is masked by the umask
    trusted_chain(path, what)
    st = os.stat(path)
    if tighten and st.st_uid == os.geteuid() and st.st_mode & 0o077:
        with contextlib.suppress(OSError):  # a filesystem without modes
            os.chmod(path, 0o700)
    return path


def private_file(path: str | os.PathLike[str], flags: int = os.O_WRONLY | os.O_CREAT | os.O_APPEND) -> int:
    """A descriptor of ``path`` opened with ``flags``, a new file created 0600 whatever the umask,
    never through a symbolic link (OSError ``ELOOP`` then); an existing file of another user is
    refused (:class:`~remindful.errors.UntrustedPathError`)."""
    fd = os.open(path, flags | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0), 0o600)
    try:
        st = os.fstat(fd)
        if st.st_uid not in (os.geteuid(), 0):
            raise UntrustedPathError(
                f"{os.fspath(path)} is owned by another user (uid {st.st_uid})", suggestion=f"Remove it: rm {path}"
            )
        if st.st_mode & 0o077 and st.st_uid == os.geteuid():
            os.fchmod(fd, 0o600)
    except BaseException:
        os.close(fd)
        raise
    return fd


def secret_key(path: str | os.PathLike[str], size: int = 32) -> bytes:
    """The bytes of the key file at ``path`` (0600): ``size`` random bytes made on first need. The
    file appears whole or not at all (written aside, then put in place by ``link(2)``), so two
    processes making it at once agree on the first one. Raises OSError when it can be neither read
    nor written."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        pass
    key = os.urandom(size)
    aside = f"{path}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    fd = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        try:
            os.write(fd, key)
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(aside, path)
        except FileExistsError:  # another process made it first: use theirs
            with open(path, "rb") as f:
                return f.read()
        return key
    finally:
        os.unlink(aside)


def _private_group(gid: int) -> bool:
    """Whether ``gid`` is this user's private group (named as the user, the user's primary group,
    no other members): a group-writable file in it is writable by this user alone."""
    try:
        import grp
        import pwd

        user = pwd.getpwuid(os.geteuid())
        group = grp.getgrgid(gid)
    except (ImportError, KeyError):
        return False
    return gid == user.pw_gid and group.gr_name == user.pw_name and not [m for m in group.gr_mem if m != user.pw_name]


__all__ = ["private_dir", "private_file", "problem", "refuse_untrusted", "secret_key", "trusted_chain"]
