"""Which project a working directory belongs to: the root of its git repository (every worktree of
one repository is one project: a worktree's ``.git`` file names the repository's git directory),
else the directory itself. The hooks' captures carry it (metadata ``project_id``), and context
injection, the SessionStart brief and the ledger of injected tokens are kept per project.
"""

from __future__ import annotations

import functools
import os


@functools.lru_cache(maxsize=256)
def project_of(cwd: str) -> str:
    """The project of the directory ``cwd`` (an absolute path; see the module docstring). Reads a
    few directory entries; cached per process."""
    start = os.path.realpath(os.path.expanduser(cwd))
    here = start
    while True:
        marker = os.path.join(here, ".git")
        if os.path.isdir(marker):
            return here
        if os.path.isfile(marker):
            return _main_worktree(here, marker) or here
        parent = os.path.dirname(here)
        if parent == here:
            return start
        here = parent


def _main_worktree(root: str, marker: str) -> str | None:
    """The main worktree of the repository whose linked worktree ``root`` is (its ``.git`` file
    says ``gitdir: <repo>/.git/worktrees/<name>``), or None when the file says something else."""
    try:
        with open(marker, encoding="utf-8") as f:
            line = f.readline().strip()
    except OSError:
        return None
    if not line.startswith("gitdir:"):
        return None
    gitdir = os.path.normpath(os.path.join(root, line.split(":", 1)[1].strip()))
    parts = gitdir.split(os.sep)
    if len(parts) >= 3 and parts[-2] == "worktrees" and parts[-3] == ".git":
        return os.sep.join(parts[:-3]) or os.sep
    return None


__all__ = ["project_of"]
