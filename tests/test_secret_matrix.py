"""Issue 28 item 5 and issue 32, the secret matrix: 67 kinds of secret x 28 write paths through the public
surfaces (library, CLI, MCP client, hook processes, Markdown watcher, proxy), then every file of the
store scanned, backups and exports included (``bench/secret_matrix.py`` runs it and prints the matrix)."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench" / "secret_matrix.py"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]


def load_matrix() -> ModuleType:
    """bench/secret_matrix.py under a name of its own (as a script it is ``__main__``)."""
    spec = importlib.util.spec_from_file_location("remindful_bench_secrets", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


matrix = load_matrix()


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    yield matrix.run_matrix(tmp_path_factory.mktemp("secret-matrix"))


def report(result: dict[str, Any]) -> str:
    return "\n".join(matrix.matrix_lines(result, "secret matrix"))


def test_every_write_path_writes_and_every_read_path_does_not(result: dict[str, Any]) -> None:
    """The harness itself: the canary (a harmless unique word) reaches disk through every write path,
    so a clean cell there means redaction, not a path that wrote nothing; searches write nothing."""
    assert result["canary_missing"] == [], report(result)
    assert result["read_paths_writing"] == [], report(result)
    assert len(result["paths"]) == 28 and result["total"] == 67 * 28
    scanned = result["files_scanned"]
    assert scanned >= 10, scanned  # catalog, -wal, Chroma's files, logs, export, backup members


def test_no_secret_reaches_any_file(result: dict[str, Any]) -> None:
    """Every field a write path takes (content, metadata at any depth, session ids, queries kept for
    reinforcement, chunks, imports, settings) passes the store's one redactor on its way to disk."""
    leaks = matrix.format_leaks(result)
    refused = "\n".join(f"  {cell}: {error}" for cell, error in result["errors"].items())
    assert result["leaked"] == {} and result["errors"] == {}, (
        f"\n{report(result)}\n{result['leaked_count']} leaked cells:\n{leaks}\nrefused:\n{refused}"
    )
