"""Settings: sources, precedence, and errors that name the field and the expected form."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from remindful.config import Settings, load_settings
from remindful.errors import ConfigError
from remindful.model import MemoryType


def test_defaults_match_the_design() -> None:
    settings = load_settings()
    assert settings.enabled is True
    assert settings.storage.path == Path("~/.remindful/memory").expanduser()
    assert settings.storage.max_size_mb == 500
    assert settings.retention.default_retention_days == 30
    assert settings.retention.max_items_per_collection == 10_000
    assert settings.auto_capture.filters.min_interval_seconds == 5
    assert settings.embeddings.backend == "onnx"


def test_yaml_file_env_and_overrides_in_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "memory_config.yaml"
    config.write_text(
        "memory:\n"
        "  storage:\n    path: /tmp/from-yaml\n    max_size_mb: 100\n"
        "  retention:\n    default_retention_days: 10\n"
        "  privacy:\n    exclude_sessions: ['banking_*']\n"
    )
    monkeypatch.setenv("REMINDFUL_CONFIG", str(config))
    settings = load_settings()
    assert settings.storage.path == Path("/tmp/from-yaml")
    assert settings.retention.default_retention_days == 10
    assert settings.privacy.exclude_sessions == ["banking_*"]
    monkeypatch.setenv("MEMORY_STORAGE_PATH", str(tmp_path / "spec-env"))
    assert load_settings().storage.path == tmp_path / "spec-env"
    monkeypatch.setenv("REMINDFUL_STORAGE__PATH", str(tmp_path / "ours"))
    monkeypatch.setenv("REMINDFUL_RETENTION__DEFAULT_RETENTION_DAYS", "3")
    settings = load_settings()
    assert settings.storage.path == tmp_path / "ours"  # REMINDFUL_* beats MEMORY_STORAGE_PATH
    assert settings.retention.default_retention_days == 3  # env beats file
    assert settings.storage.max_size_mb == 100  # untouched keys still come from the file
    assert (
        load_settings(tmp_path / "arg", **{"retention.default_retention_days": 4}).retention.default_retention_days == 4
    )
    assert load_settings(tmp_path / "arg").storage.path == tmp_path / "arg"  # the path argument wins


@pytest.mark.parametrize(
    ("overrides", "field", "expected"),
    [
        ({"retention.default_retention_days": -5}, "retention.default_retention_days", "greater than or equal to 1"),
        ({"storage.max_items": {"video": 5}}, "storage.max_items.video", "screen"),
        ({"retention.cleanup.time": "25:00"}, "retention.cleanup.time", "HH:MM"),
        ({"embeddings.backend": "gpt"}, "embeddings.backend", "onnx"),
        ({"retention.bogus": 1}, "retention.bogus", "unknown setting"),
        ({"retention.bogus": 1}, "retention.bogus", "known settings under 'retention': cleanup, dedup_threshold"),
        ({"bogus": 1}, "bogus", "known settings: attachments, auto_capture,"),
        ({"search.candidates": 0}, "search.candidates", "expected int (>= 1, <= 1000)"),
    ],
)
def test_invalid_values_name_the_field_and_the_form(overrides: dict, field: str, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(**overrides)
    assert info.value.field == field
    assert expected in str(info.value)


def test_storage_path_that_is_a_file_is_rejected(tmp_path: Path) -> None:
    target = tmp_path / "file.txt"
    target.write_text("x")
    with pytest.raises(ConfigError, match=r"storage\.path"):
        load_settings(target)


def test_bad_yaml_file_is_a_config_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "broken.yaml"
    config.write_text("memory: [unclosed\n")
    monkeypatch.setenv("REMINDFUL_CONFIG", str(config))
    with pytest.raises(ConfigError):
        load_settings()
    monkeypatch.setenv("REMINDFUL_CONFIG", str(tmp_path / "missing.yaml"))
    with pytest.raises(ConfigError, match="REMINDFUL_CONFIG"):
        load_settings()


def test_per_type_quota_overrides_the_default() -> None:
    settings = load_settings(**{"storage.max_items": {"screen": 5}})
    assert settings.max_items_for(MemoryType.SCREEN) == 5
    assert settings.max_items_for(MemoryType.ACTION) == 10_000


def test_every_field_is_described() -> None:
    def walk(model: type) -> list[str]:
        missing = []
        for name, info in model.model_fields.items():  # type: ignore[attr-defined]
            if not info.description:
                missing.append(f"{model.__name__}.{name}")
            if isinstance(info.annotation, type) and hasattr(info.annotation, "model_fields"):
                missing += walk(info.annotation)
        return missing

    assert walk(Settings) == []


def test_the_light_readers_defaults_are_the_settings_defaults() -> None:
    """Hook processes read the settings without pydantic (config_sources, FilterConfig.from_mapping);
    with nothing configured they see exactly the defaults Settings has."""
    from remindful.config_defaults import DEFAULTS, setting
    from remindful.config_sources import read_sources, storage_path
    from remindful.services.ingest.filters import FilterConfig

    settings = load_settings()
    dumped = settings.model_dump(mode="json")

    def leaves(tree: dict[str, Any], prefix: str = "") -> list[str]:
        return [
            key
            for name, value in tree.items()
            for key in (leaves(value, f"{prefix}{name}.") if isinstance(value, dict) else [f"{prefix}{name}"])
        ]

    shared = leaves(DEFAULTS)
    assert "auto_capture.filters.min_interval_seconds" in shared and "hooks.context_budget_tokens" in shared
    for key in shared:
        light = setting({}, key)
        if key == "storage.path":  # Settings expands the user's home
            light = str(Path(light).expanduser())
        full: Any = dumped
        for part in key.split("."):
            full = full[part]
        assert light == full, key
    from_mapping, from_settings = FilterConfig.from_mapping({}), FilterConfig.from_settings(settings)
    for name in FilterConfig.__slots__:
        assert getattr(from_mapping, name) == getattr(from_settings, name), name
    assert read_sources().merged() == {}
    assert storage_path(None, {}) == str(settings.storage.path)


# -- issue 25: one reader of the sources, one set of rules -----------------------------------------

BOOLS = [True, False, 0, 1, 2, 0.0, 1.0, 1.5, "true", "TRUE", "Off", "y", "t", " yes ", "yes\n", "", "maybe", None, []]
NUMBERS = [0, 5, 5.5, "5", " 5 ", "5.0", "1e3", "inf", "-inf", "nan", float("inf"), float("nan"), -1, True, False]
NUMBERS += [None, "", "x", [1], "0x10", "5_0", ".5", "5.", "+5", "\u0663"]
LISTS = [[], ["a*"], ("a*",), "a*", [1], ["a", None], None, {"a": 1}]
PAYLOAD_SIZES = [1024, 1023, "2048", 2048.0, 2048.5, "2048.0", True, None, " 2048 ", "1e4", "x", "2_048", "+2048"]
PAYLOAD_SIZES += ["2048.", "\u0663" * 4, 10**20]
RULES = [[], [{"regex": "a"}], [{"regex": "a", "extra": 1}], [{"regex": "a", "name": None}], [{"regex": ""}]]
RULES += [
    [{"regex": 5}],
    [{"replacement": "x"}],
    ["a"],
    [{"regex": "a", "replacement": None}],
    "a",
    None,
    [{"regex": "("}],
]
RULES += [[{"regex": "a", "name": "n", "replacement": "R"}], [{"regex": "b", "name": 3}]]
PROBES = (
    [(field, v) for field in ("enabled", "auto_capture.triggers.hooks", "privacy.redact") for v in BOOLS]
    + [("auto_capture.filters.min_interval_seconds", v) for v in NUMBERS]
    + [(field, v) for field in ("privacy.exclude_sessions", "auto_capture.filters.ignore_sessions") for v in LISTS]
    + [("privacy.redact_patterns", v) for v in RULES]
    + [("limits.hook_payload_bytes", v) for v in PAYLOAD_SIZES]
    + [("hooks.context_budget_tokens", v) for v in [49, 50, "100000", 100_001, "1500"]]
    + [("auto_capture.bogus", 1), ("auto_capture.filters.bogus", 1), ("privacy.bogus", 1), ("bogus", 1)]
    + [("auto_capture", "x"), ("auto_capture.triggers", ["hooks"]), ("privacy", None)]
)


def _nested(dotted: str, value: Any) -> dict[str, Any]:
    out: Any = value
    for part in reversed(dotted.split(".")):
        out = {part: out}
    return out  # type: ignore[no-any-return]


def _light_verdict(memory: dict[str, Any]) -> tuple[Any, ...]:
    """What a hook makes of a raw ``memory:`` mapping: its filters and the numbers it reads."""
    from remindful.config_defaults import read_int
    from remindful.services.ingest.filters import CaptureFilter, FilterConfig

    try:
        config = FilterConfig.from_mapping(memory)
        redactor = CaptureFilter(config).redactor
        if redactor is not None:
            redactor.check()
        payload = read_int(memory, "limits.hook_payload_bytes", ge=1024)
        budget = read_int(memory, "hooks.context_budget_tokens", ge=50, le=100_000)
    except ValueError:
        return ("invalid",)
    return ("valid", *(getattr(config, name) for name in FilterConfig.__slots__), payload, budget)


def _settings_verdict(field: str, value: Any) -> tuple[Any, ...]:
    from remindful.services.ingest.filters import FilterConfig

    try:
        settings = load_settings(**{field: value})
    except ConfigError:
        return ("invalid",)
    config = FilterConfig.from_settings(settings)
    return (
        "valid",
        *(getattr(config, name) for name in FilterConfig.__slots__),
        settings.limits.hook_payload_bytes,
        settings.hooks.context_budget_tokens,
    )


@pytest.mark.parametrize(("field", "value"), PROBES, ids=[f"{f}={v!r}" for f, v in PROBES])
def test_the_light_path_gives_the_settings_verdict_on_every_value_it_reads(field: str, value: Any) -> None:
    """The pydantic model is the truth; a hook validates the few settings it acts on without it
    (config_defaults' readers, FilterConfig.from_mapping), and must accept and refuse exactly what
    the model does, reading the same values (a string "off" is False to both, "5_0" is 50.0...)."""
    assert _light_verdict(_nested(field, value)) == _settings_verdict(field, value)


def test_the_one_rule_the_light_path_leaves_to_the_model_is_the_backtracking_probe() -> None:
    """The probe of redaction patterns for catastrophic backtracking runs a child process: too slow
    for a hook at every tool call. Every other process refuses such a config, and says so."""
    rules = [{"regex": "(a+)+$"}]
    assert _light_verdict(_nested("privacy.redact_patterns", rules))[0] == "valid"
    assert _settings_verdict("privacy.redact_patterns", rules) == ("invalid",)


def test_the_section_keys_the_light_path_checks_are_the_models() -> None:
    from remindful.config_defaults import SECTION_KEYS

    for section, keys in SECTION_KEYS.items():
        model: Any = Settings
        for part in filter(None, section.split(".")):
            model = model.model_fields[part].annotation
        assert sorted(keys) == sorted(model.model_fields), section


def test_the_hook_reads_the_sources_the_settings_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One reader: the YAML file, the environment over it (a section as JSON, a field as text) and
    MEMORY_STORAGE_PATH give the hook the storage path and filters the settings have."""
    from remindful.config_sources import read_sources, storage_path
    from remindful.services.ingest.filters import FilterConfig

    config = tmp_path / "config.yaml"
    config.write_text(
        "memory:\n"
        "  storage:\n    path: /tmp/from-yaml\n"
        "  auto_capture:\n    filters:\n      min_interval_seconds: 9\n      ignore_sessions: ['ci_*']\n"
        "  privacy:\n    redact_patterns:\n      - {regex: 'EMP-\\d+', name: employee}\n"
    )
    monkeypatch.setenv("REMINDFUL_CONFIG", str(config))

    def both() -> tuple[Any, ...]:
        settings = load_settings()
        memory = read_sources().merged()
        full = FilterConfig.from_settings(settings)
        light = FilterConfig.from_mapping(memory)
        assert [getattr(light, n) for n in FilterConfig.__slots__] == [getattr(full, n) for n in FilterConfig.__slots__]
        assert storage_path(None, memory) == str(settings.storage.path)
        return full.min_interval_seconds, full.excluded_sessions, str(settings.storage.path)

    assert both() == (9.0, ("ci_*",), "/tmp/from-yaml")
    monkeypatch.setenv("MEMORY_STORAGE_PATH", str(tmp_path / "spec"))
    monkeypatch.setenv("REMINDFUL_AUTO_CAPTURE__FILTERS", '{"min_interval_seconds": 3, "ignore_sessions": ["x_*"]}')
    monkeypatch.setenv("REMINDFUL_PRIVACY__EXCLUDE_SESSIONS", '["bank_*"]')
    monkeypatch.setenv("REMINDFUL_AUTO_CAPTURE__FILTERS__MIN_INTERVAL_SECONDS", "4.5")
    monkeypatch.setenv("REMINDFUL_UNRELATED", "not a setting")  # another program's variable: ignored by both
    assert both() == (4.5, ("bank_*", "x_*"), str(tmp_path / "spec"))
    monkeypatch.setenv("REMINDFUL_STORAGE__PATH", "$HOME/ours")
    assert both()[2] == str(Path("~/ours").expanduser())


@pytest.mark.parametrize("value", ["", "  "])
def test_an_empty_storage_path_is_refused_not_read_as_the_current_directory(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from remindful.config_sources import read_sources, storage_path

    monkeypatch.setenv("REMINDFUL_STORAGE__PATH", value)
    with pytest.raises(ConfigError, match=r"storage\.path.*must be a directory path"):
        load_settings()
    with pytest.raises(ValueError, match="must be a directory path"):
        storage_path(None, read_sources().merged())


@pytest.mark.parametrize(
    ("text", "readable"),
    [
        ("", True),
        ("memory:\n", True),
        ("memory:\n  enabled: false\n", True),
        ("other: 1\n", False),
        ("memory: 5\n", False),
        ("- a\n", False),
        ("memory: [unclosed\n", False),
    ],
)
def test_the_settings_and_the_hook_read_a_config_file_alike(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, readable: bool
) -> None:
    from remindful.config_sources import read_sources

    config = tmp_path / "config.yaml"
    config.write_text(text)
    monkeypatch.setenv("REMINDFUL_CONFIG", str(config))
    if readable:
        assert load_settings().enabled is (read_sources().merged().get("enabled", True))
        return
    with pytest.raises(ConfigError, match="config file") as full:
        load_settings()
    with pytest.raises(ConfigError, match="config file") as light:
        read_sources()
    assert str(full.value) == str(light.value) and "\n" not in str(full.value)


# -- issue 14: config failures fail closed ---------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "why"),
    [
        ("(unclosed", "not a valid regular expression"),
        ("(a+)+$", "backtracks"),
        (r"(\w+\s?)+$", "backtracks"),
        ("(a|aa)+$", "backtracks"),
    ],
)
def test_bad_redact_pattern_is_a_config_error_naming_it(pattern: str, why: str) -> None:
    patterns = [{"regex": r"\bEMP-\d{5}\b"}, {"regex": pattern}]
    with pytest.raises(ConfigError) as info:  # the probe cannot hang: pytest's timeout would say so
        load_settings(**{"privacy.redact_patterns": patterns})
    assert info.value.field == "privacy.redact_patterns.1.regex"
    assert pattern in str(info.value) and why in str(info.value)


def test_bad_redact_pattern_in_the_yaml_file_is_a_config_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("memory:\n  privacy:\n    redact_patterns:\n      - regex: '(x+x+)+y'\n")
    monkeypatch.setenv("REMINDFUL_CONFIG", str(config))
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert info.value.field == "privacy.redact_patterns.0.regex"


def test_ordinary_redact_patterns_pass_the_probe() -> None:
    from remindful.engine.redact import DEFAULT_REDACTIONS

    patterns = [{"regex": r"\bEMP-\d{5}\b", "name": "employee"}] + [{"regex": p} for _n, p, _r in DEFAULT_REDACTIONS]
    settings = load_settings(**{"privacy.redact_patterns": patterns})
    assert len(settings.privacy.redact_patterns) == len(patterns)


BILLION_LAUGHS = (
    "a: &a ['lol','lol','lol','lol','lol','lol','lol','lol','lol']\n"
    + "".join(
        f"{chr(ord('a') + i)}: &{chr(ord('a') + i)} [{', '.join(['*' + chr(ord('a') + i - 1)] * 9)}]\n"
        for i in range(1, 9)
    )
    + "memory:\n  privacy:\n    exclude_sessions: *i\n"
)


def test_billion_laughs_yaml_is_a_config_error_fast(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(BILLION_LAUGHS)
    monkeypatch.setenv("REMINDFUL_CONFIG", str(config))
    with pytest.raises(ConfigError, match="alias"):  # its aliases counted, never expanded
        load_settings()


def test_small_yaml_aliases_still_work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        "sessions: &private ['banking_*', 'health_*']\n"
        "memory:\n  privacy:\n    exclude_sessions: *private\n"
        "  auto_capture:\n    filters:\n      ignore_sessions: *private\n"
    )
    monkeypatch.setenv("REMINDFUL_CONFIG", str(config))
    settings = load_settings()
    assert settings.privacy.exclude_sessions == ["banking_*", "health_*"]
    assert settings.auto_capture.filters.ignore_sessions == ["banking_*", "health_*"]


@pytest.mark.parametrize(
    ("variable", "value", "says"),
    [
        ("REMINDFUL_LIMITS", "{", "Invalid setting 'REMINDFUL_LIMITS': expected a JSON object"),
        (
            "REMINDFUL_RETENTION__TIERS__MEDIUM",
            "{x",
            "Invalid setting 'REMINDFUL_RETENTION__TIERS__MEDIUM': expected a JSON object",
        ),
        ("REMINDFUL_LIMITS__QUERY_CHARS", "9" * 5000, "Invalid setting 'limits.query_chars'"),
    ],
)
def test_a_bad_environment_variable_is_named_in_one_short_line(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, says: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigError) as caught:
        load_settings()
    text = str(caught.value)
    assert text.startswith(says) and "\n" not in text and len(text) < 400, text
    assert "YAML" not in text
