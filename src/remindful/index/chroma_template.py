"""A new embedded Chroma store's ``chroma.sqlite3``, copied from a template this user's first store left.

chromadb makes a new file by running its migrations, in its own code, holding the interpreter lock:
20-30 ms in which no other thread of the process runs (a fresh store's first flush waits for it,
and the stores and embeddings meanwhile wait for the lock). Once made, before any collection
exists, the file holds chromadb's bookkeeping and nothing of the user's: the same for every store
of one chromadb release. So the first store copies it (SQLite's backup: a consistent copy of a file
in use) into the cache, ``$XDG_CACHE_HOME/remindful/chroma/chroma-<version>.sqlite3``, and later new
stores start from a copy of it (chromadb then finds its migrations applied: 5 ms).

The template becomes every new store's index file, so only this user's is used (the cache
directory and the file are checked as the model cache is, :mod:`remindful.owned`); a template
chromadb cannot open is dropped and the store made the usual way (see
:meth:`~remindful.index.chroma.ChromaEmbeddedIndex._make_client`). Standard library only, besides
chromadb's version.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
from pathlib import Path

from remindful.errors import UntrustedPathError
from remindful.index import chroma_sqlite
from remindful.owned import private_dir, trusted_chain

__all__ = ["discard", "keep", "seed", "template_path"]

log = logging.getLogger(__name__)


def template_path() -> Path:
    """This chromadb release's template (migrations differ between releases)."""
    import chromadb

    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "remindful" / "chroma" / f"chroma-{chromadb.__version__}.sqlite3"


def seed(db: Path) -> bool:
    """Copy the template to ``db`` (which must not exist yet; its directory is the store's, 0700),
    the copy 0600; False (nothing copied) when there is no template this user can trust."""
    try:
        template = template_path()
        if not template.is_file() or template.is_symlink():
            return False
        trusted_chain(template, "Chroma template")
        partial = db.with_name(db.name + ".seed")
        shutil.copyfile(template, partial)
        os.chmod(partial, 0o600)
        os.replace(partial, db)
    except UntrustedPathError as exc:
        log.warning("%s; not used", exc)
        return False
    except OSError as exc:
        log.debug("could not copy the Chroma template into %s: %s", db, exc)
        with contextlib.suppress(OSError):
            db.with_name(db.name + ".seed").unlink()
        return False
    return True


def keep(db: Path) -> None:
    """Make ``db``, a file chromadb has just created and that holds no collection yet, the
    template, unless there is one (written whole or not at all: another process may read it)."""
    template = template_path()
    if template.exists():
        return
    partial = template.with_name(f"{template.name}.{os.getpid()}.tmp")
    try:
        private_dir(template.parent, "Chroma template cache")
        chroma_sqlite.copy(db, partial)
        os.chmod(partial, 0o600)
        os.replace(partial, template)
    except (OSError, UntrustedPathError) as exc:
        log.debug("could not keep a Chroma template from %s: %s", db, exc)
        with contextlib.suppress(OSError):
            partial.unlink()


def discard() -> None:
    """Remove the template (chromadb could not open a store made from it)."""
    with contextlib.suppress(OSError):
        template_path().unlink()
