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


KEPT = [
    "00:11:22:33:44:55 is the MAC of eth0",  # not a .pgpass line
    "at 12:30:45:100:200 the job ran",
    "das Passwort ist falsch",  # a word after "password", in prose
    "пароль неверный",
    "mot de passe oublié",
    "the password is required",
    "https://host.example:8080/path/to@v2",  # a port, not a password with a /
    "mysql -u root -p prod < dump.sql",  # -p alone prompts for the password
    "docker login -u deploy --password-stdin ghcr.io",
    "redis-cli -a $REDIS_PASSWORD ping",
    "password%3D%24PASSWORD",
    "sessionid cookie expired",
    "TestSecretMatrixWriteBoundaryRegression2024 failed",  # a long identifier
    "id_ed25519.pub: ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl jane@laptop",
    "token 3f9a0c1b2d4e5f60718293a4b5c6d7e8f9012345 is the merge base",  # a hash after a key word
]


@pytest.mark.parametrize("text", KEPT)
@pytest.mark.parametrize("which", ["hook", "store"])
def test_what_the_new_rules_leave_alone(text: str, which: str) -> None:
    redactor = hook_rules() if which == "hook" else store_rules()
    assert redactor.redact(text) == text


@pytest.mark.parametrize(
    "name",
    [
        *("connection_string", "secret_key_base", "DB_PW", "subscriptionKey", "sessionid", "client-key-data"),
        *("fernet_key", "AccountKey", "Passwort", "contraseña", "пароль"),
    ],
)
def test_a_field_named_like_these_loses_its_value(name: str) -> None:
    """The matrix's metadata paths: the value alone (a short password) says nothing; its name does."""
    assert hook_rules().redact_value({"deploy": {name: "HsM6dMYt5we1X6*3#"}}) == {"deploy": {name: "[REDACTED]"}}


def test_a_command_glued_to_a_word_is_still_a_command() -> None:
    text = "deploy-mysql -u root -pJHvlt2I4HBXDYS+0# -h db.internal prod"
    assert "JHvlt2I4HBXDYS" not in hook_rules().redact(text)
