"""Capture filters: switches, exclusions, repeat interval, mouse moves, redaction and its counts."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from remindful.config import load_settings
from remindful.services.ingest.filters import CaptureFilter, FilterConfig, apply_filters
from remindful.testing import open_fake

SECRETS = {
    "credit_card": "4111 1111 1111 1111",
    "email": "alice.smith@example.com",
    "aws_access_key": "AKIAIOSFODNN7EXAMPLE",
    "github_token": "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
    "api_key": "sk-proj-abcdefghijklmnopqrstuvwxyz123456",
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    "password_pair": "password=hunter2secret",
}


def fresh(**memory: object) -> CaptureFilter:
    return CaptureFilter(FilterConfig.from_mapping(memory))


@pytest.mark.parametrize("name", sorted(SECRETS))
def test_each_default_rule_redacts(name: str) -> None:
    result = fresh().check(f"before {SECRETS[name]} after", trigger="hooks")
    assert result.allowed
    secret = SECRETS[name].split("=")[-1]
    assert secret not in result.content
    assert result.content.startswith("before ") and result.content.endswith(" after")
    assert result.redactions.get(name) == 1


def test_pem_and_private_blocks_and_metadata() -> None:
    pem = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAx\nabc\n-----END RSA PRIVATE KEY-----"
    result = fresh().check(
        f"key {pem} and <private>my diary</private> done",
        trigger="hooks",
        metadata={"nested": {"token": "api_key: 'zzz999secret'"}, "list": ["bob@example.org"]},
    )
    assert "MIIEow" not in result.content and "my diary" not in result.content
    assert result.content == "key [PRIVATE_KEY_REDACTED] and [PRIVATE_REDACTED] done"
    assert "zzz999secret" not in str(result.metadata)
    assert result.metadata["list"] == ["[EMAIL_REDACTED]"]


def test_numbers_that_are_not_cards_stay() -> None:
    text = "build 20231026123456 took 1234567890123 ms"  # fails the Luhn check
    assert fresh().check(text, trigger="hooks").content == text
    digest = "c8c33a6aa4111111111111111daf92439e1f20d5534d6108003abf839acaa46cb03"  # a Luhn-valid run inside a hex key
    assert fresh().check(digest, trigger="hooks").content == digest
    assert fresh().check("card:4111-1111-1111-1111.", trigger="hooks").content == "card:[CARD_REDACTED]."


def test_custom_patterns_and_redaction_off() -> None:
    flt = fresh(privacy={"redact_patterns": [{"regex": r"\bEMP-\d{5}\b", "replacement": "[EMP]", "name": "emp"}]})
    result = flt.check("employee EMP-12345", trigger="hooks")
    assert result.content == "employee [EMP]" and result.redactions == {"emp": 1}
    assert fresh(privacy={"redact": False}).check("bob@example.com", trigger="hooks").content == "bob@example.com"
    only_custom = fresh(privacy={"redact_defaults": False, "redact_patterns": [{"regex": r"\bx+\b"}]})
    assert only_custom.check("bob@example.com xx", trigger="hooks").content == "bob@example.com [REDACTED]"


def test_switches() -> None:
    assert fresh(enabled=False).check("a", trigger="hooks").reason == "memory disabled"
    assert not fresh(auto_capture={"enabled": False}).check("a", trigger="files").allowed
    off = fresh(auto_capture={"triggers": {"hooks": False}})
    assert off.check("a", trigger="hooks").code == "trigger"
    assert off.check("a", trigger="files").allowed
    with pytest.raises(ValueError, match="trigger"):
        fresh().check("a", trigger="nope")


def test_session_exclusion_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    flt = fresh(privacy={"exclude_sessions": ["banking_*"]}, auto_capture={"filters": {"ignore_sessions": ["test_*"]}})
    with caplog.at_level(logging.INFO, "remindful.services.ingest"):
        result = flt.check("transfer", trigger="successful_actions", session_id="banking_session_123")
    assert not result.allowed and result.code == "excluded"
    assert "excluded session: banking_session_123" in caplog.text
    assert flt.check("x", trigger="hooks", session_id="test_run").code == "excluded"
    assert flt.check("x", trigger="hooks", session_id="work_1").allowed


def test_min_interval_and_mouse_moves() -> None:
    flt = fresh()
    assert flt.check("click 500,300", trigger="successful_actions", signature="click:500,300", at=100).allowed
    again = flt.check("click 500,300", trigger="successful_actions", signature="click:500,300", at=102)
    assert again.code == "repeat" and "min_interval_seconds=5" in (again.reason or "")
    assert flt.check("click 500,300", trigger="successful_actions", signature="click:500,300", at=106).allowed
    assert flt.check("moved", trigger="successful_actions", action="mouse_move").code == "mouse_move"
    assert (
        fresh(auto_capture={"filters": {"ignore_mouse_moves": False}})
        .check("moved", trigger="successful_actions", action="mouse_move")
        .allowed
    )
    assert flt.counts == {"skipped_repeat": 1, "skipped_mouse_move": 1}


def test_apply_filters_with_a_store_counts_in_stats_and_audits(tmp_path: Path) -> None:
    with open_fake(tmp_path / "s", **{"privacy.exclude_sessions": ["banking_*"]}) as memory:
        result = apply_filters(memory.engine, "mail carol@example.com", trigger="hooks", session_id="s1")
        assert result.allowed and result.content == "mail [EMAIL_REDACTED]"
        skipped = apply_filters(memory.engine, "pay", trigger="hooks", session_id="banking_42")
        assert not skipped.allowed
        stats = memory.stats().capture
        assert stats == {"redacted_email": 1, "skipped_excluded": 1}
        audit = memory.engine.catalog.read("SELECT action, detail FROM audit_log WHERE action = 'capture_excluded'")
        assert len(audit) == 1 and "banking_42" in audit[0][1]


def test_manual_store_is_redacted_too(tmp_path: Path) -> None:
    with open_fake(tmp_path / "s") as memory:
        mid = memory.store("login with password: swordfish99", metadata={"note": "sk-abcdefghijklmnopqrstuvwxyz12"})
        stored = memory.get(mid)
        assert "swordfish99" not in stored.content and "sk-abc" not in str(stored.metadata)
        memory.update(mid, content="mail dave@example.com")
        assert memory.get(mid).content == "mail [EMAIL_REDACTED]"
    settings = load_settings(tmp_path / "t", **{"privacy.redact": False})
    assert apply_filters(settings, "dave@example.com", trigger="files").content == "dave@example.com"


def test_invalid_custom_pattern_is_a_config_error(tmp_path: Path) -> None:
    from remindful.errors import ConfigError

    with pytest.raises(ConfigError, match=r"privacy.redact_patterns.0.regex.*not a valid regular expression"):
        load_settings(tmp_path, **{"privacy.redact_patterns": [{"regex": "(unclosed"}]})
