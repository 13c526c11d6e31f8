"""What some tests need from the machine (a data set, a browser, ``npx``, root) and what happens
without it: on a developer's machine the test is skipped, saying what it needs; in CI (``CI=true``)
it fails, since CI's own script (``.ci/run``) provides all of them and a silent skip there would
hide a test that never ran. Every such skip goes through :func:`missing` (in a test or a fixture)
or :func:`requires` (a mark, checked by ``conftest.py`` before the test runs)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import NoReturn

import pytest

#: Whether this run is CI's (``CI`` set to true, as CI services and ``.ci/run``'s caller do).
IN_CI = os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}
#: The mark :func:`requires` puts on a test (registered in pyproject.toml).
MARK = "requires"


def missing(what: str) -> NoReturn:
    """End the running test for want of ``what`` (a phrase: "the LoCoMo data at PATH", "root"):
    skipped, or in CI failed."""
    if IN_CI:
        pytest.fail(f"CI lacks {what}: .ci/run must provide it (no test skips in CI)", pytrace=False)
    pytest.skip(f"needs {what}")


def requires(met: bool, what: str) -> pytest.MarkDecorator:
    """A mark: the test runs when ``met``; else :func:`missing` ends it at its setup."""
    return getattr(pytest.mark, MARK)(met=bool(met), what=what)


def check(item: pytest.Item) -> None:
    """What ``conftest.py`` calls before each test: :func:`missing` for an unmet :func:`requires`."""
    for mark in item.iter_markers(MARK):
        if not mark.kwargs["met"]:
            missing(mark.kwargs["what"])


def bench_data(kind: str = "locomo") -> Path:
    """Where the benches read a data set (``$REMINDFUL_BENCH_DATA``, else ``../shared/data/``):
    bench/common.py decides it, for the tests too. Read it at import: the tests' autouse fixture
    drops every ``REMINDFUL_*`` variable before a test runs."""
    spec = importlib.util.spec_from_file_location(
        "remindful_bench_common_for_tests", Path(__file__).resolve().parents[1] / "bench" / "common.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return Path(module.default_data(kind))


def is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


__all__ = ["IN_CI", "bench_data", "check", "is_root", "missing", "requires"]
