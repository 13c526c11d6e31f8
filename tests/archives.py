"""Backup archives changed by hand, for the tests of what a restore accepts."""

from __future__ import annotations

import hashlib
import json
import tarfile
from collections.abc import Callable
from pathlib import Path


def repacked(archive: Path, out: Path, change: Callable[[Path], None]) -> Path:
    """``archive`` unpacked under ``out``, ``change(folder)`` applied, the manifest's digests made to
    match (its seal left as it was: only the store that wrote it can make one), packed again."""
    work = out / "unpacked"
    with tarfile.open(archive) as tar:
        tar.extractall(work, filter="data")
    change(work)
    manifest = json.loads((work / "manifest.json").read_text())
    for rel in manifest["files"]:
        data = (work / rel).read_bytes()
        manifest["files"][rel] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
    (work / "manifest.json").write_text(json.dumps(manifest))
    target = out / "repacked.tar.gz"
    with tarfile.open(target, "w:gz") as tar:
        for rel in ["manifest.json", *manifest["files"]]:
            tar.add(work / rel, arcname=rel, recursive=False)
    return target
