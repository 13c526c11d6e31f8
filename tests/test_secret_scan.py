"""The secret matrix's scanner (bench/secret_matrix.py) counts a secret's piece found in a file, and
not the digits every memory id's timestamp holds: a Slack token's 8-digit run met by chance in an id
(``action_20261128210518820500_c91900d8``) once failed a CI run with a leak that was none."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parent.parent / "bench"


def load(name: str) -> ModuleType:
    sys.path.insert(0, str(BENCH))
    try:
        spec = importlib.util.spec_from_file_location(f"remindful_bench_{name}", BENCH / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCH))


matrix = load("secret_matrix")
SLACK = matrix.Sample(
    "the bot posts with xoxb-21051882050-123456789012-abcdefghijklmnopqrstuvwx to #deploys",
    "xoxb-21051882050-123456789012-abcdefghijklmnopqrstuvwx",
    ("21051882050-123456789012-abcdefghijklmnopqrstuvwx",),
)
CELL = ("slack_xoxb", "cli.session")


def scanned(tmp_path: Path, text: str) -> dict[tuple[str, str], dict[str, str]]:
    (tmp_path / "catalog.sqlite3").write_text(text)
    return matrix.scan(tmp_path, {CELL: SLACK})


def test_an_id_whose_timestamp_shares_eight_digits_with_the_secret_is_no_leak(tmp_path: Path) -> None:
    assert scanned(tmp_path, "id action_20261128210518820500_c91900d8 stored") == {}


def test_any_piece_of_the_secret_is_a_leak(tmp_path: Path) -> None:
    pieces = ["abcdefgh", "050-1234", "123456789012", "xoxb-21051882050-123456789012-abcdefghijklmnopqrstuvwx"]
    for piece in pieces:
        assert scanned(tmp_path, f"... {piece} ...") == {CELL: {"catalog.sqlite3": "C"}}, piece
