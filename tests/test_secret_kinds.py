"""Issue 32, secrets: every kind of secret the corpus generates (``bench/secret_corpus.py``: real
OpenAI and Anthropic formats, AWS secret keys, command-line passwords, config files, other languages,
XML/YAML/URL-encoded forms, key lines without BEGIN or with line numbers...) is redacted by the hook's
fast rules (before the spool write) and by the store's full pass (detect-secrets' plugins on top),
and ordinary developer text stays as it is."""

from __future__ import annotations

import importlib.util
import random
import sys
from pathlib import Path
from types import ModuleType

import pytest

from remindful.engine.redact import Redactor, build_redactor

BENCH = Path(__file__).resolve().parent.parent / "bench" / "secret_corpus.py"


def load_corpus() -> ModuleType:
    spec = importlib.util.spec_from_file_location("remindful_bench_secret_corpus", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


corpus = load_corpus()
SAMPLES = 25


def hook_rules() -> Redactor:
    redactor = build_redactor()
    assert redactor is not None
    return redactor


def store_rules() -> Redactor:
    redactor = build_redactor(library=True)
    assert redactor is not None
    return redactor


@pytest.mark.parametrize("kind", [k for k in corpus.KINDS if k != corpus.CANARY])
@pytest.mark.parametrize("which", ["hook", "store"])
def test_every_kind_is_redacted(kind: str, which: str) -> None:
    """No 8-character piece of any sample's secret survives the hook's rules or the store's pass."""
    redactor = hook_rules() if which == "hook" else store_rules()
    leaked = []
    for i in range(SAMPLES):
        sample = corpus.KINDS[kind](random.Random(f"test:{kind}:{i}"))
        written = redactor.redact(sample.text)
        if corpus.leaks(sample, written):
            leaked.append(f"{sample.text!r}\n  -> {written!r}")
    assert not leaked, f"{len(leaked)} of {SAMPLES} leaked, e.g.\n" + "\n".join(leaked[:3])


@pytest.mark.parametrize("which", ["hook", "store"])
def test_ordinary_text_is_left_alone(which: str) -> None:
    """At most 1 % of ordinary texts change (code, prose, git log, logs, hashes, UUIDs, base64
    images, long identifiers); emails are redacted on purpose and counted as changes too."""
    redactor = hook_rules() if which == "hook" else store_rules()
    texts = corpus.ordinary_texts()
    result = corpus.false_redaction(redactor.redact, texts)
    changed = sum(c for c, _ in result["by_category"].values())
    assert len(texts) > 2000
    assert changed <= len(texts) // 100, f"{changed} of {len(texts)} changed:\n" + "\n".join(result["examples"])
