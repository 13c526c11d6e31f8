"""A real small disk for the full-disk tests: a tmpfs mounted for one test (root only), and a file
that takes every free byte of it."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

from requirements import missing


@contextlib.contextmanager
def mounted(mount: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` (``mount``'s form: "24m") at the new directory ``mount``, unmounted after."""
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        missing(f"a tmpfs mount (mount said: {done.stderr.decode().strip()})")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(disk: Path) -> Path:
    """Take every free byte of the disk; returns the file that holds them. Written unbuffered until
    the disk refuses: a buffered file kept what did not fit and raised ENOSPC again from its close,
    outside any suppress (a CI run failed so)."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        with contextlib.suppress(OSError):
            while True:
                os.write(fd, bytes(1 << 20))
    finally:
        os.close(fd)
    assert os.statvfs(disk).f_bavail == 0
    return filler
