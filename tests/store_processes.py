"""Running remindful's command line in a process of its own, with the fake model (tests of real
processes on one store: full disks, restores under load; the ``env`` they take is the fixture of
``tests/conftest.py``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def cli(env: dict[str, str], path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``remindful --path PATH ARGS…`` run to its end in ``env``."""
    return subprocess.run(
        [sys.executable, "-m", "remindful.shells.entry", "--path", str(path), *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
