"""Fixtures of the reliability tests that run remindful in processes of their own."""

from __future__ import annotations

import os

import pytest


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The environment of the test's processes: this test's (its HOME), with the fake model."""
    monkeypatch.setenv("REMINDFUL_EMBEDDINGS__BACKEND", "fake")
    return dict(os.environ)
