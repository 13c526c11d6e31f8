"""Files that appear whole or not at all."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any


@contextlib.contextmanager
def replaced_atomically(path: Path, mode: str = "wb", *, overwrite: bool = True, **open_args: Any) -> Iterator[IO[Any]]:
    """A file written privately (0600) beside ``path``, which replaces ``path`` when the block ends
    without an error; on an error it is removed and ``path`` is left as it was. Every writer gets a
    temporary file of its own, so two writing one path at once never mix their bytes.

    With ``overwrite=False`` the file is put in place only if nothing (not even a dangling link)
    is at ``path`` by then: FileExistsError otherwise, decided atomically by ``link(2)``."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, mode, **open_args) as out:
            yield out
        if overwrite:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)
            os.unlink(tmp)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
