"""remindful's settings: one pydantic-settings class.

Sources, highest first: keyword overrides (``remindful.open(path, **overrides)``), environment
variables ``REMINDFUL_*`` (``__`` nests: ``REMINDFUL_RETENTION__DEFAULT_RETENTION_DAYS=7``), the
spec's ``MEMORY_STORAGE_PATH``, the YAML file's ``memory:`` section, then the defaults below.
The YAML file is ``$REMINDFUL_CONFIG`` if set, else ``~/.remindful/config.yaml`` if it exists.
Every invalid value raises :class:`~remindful.errors.ConfigError` naming the field and the
expected form.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic import ValidationError as PydanticValidationError
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from remindful.errors import ConfigError
from remindful.model import MemoryType

log = logging.getLogger(__name__)

DEFAULT_STORAGE_PATH = "~/.remindful/memory"
DEFAULT_CONFIG_FILE = "~/.remindful/config.yaml"


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class HnswSettings(_Section):
    M: int = Field(16, ge=2, le=256, description="HNSW graph degree")
    ef_construction: int = Field(200, ge=8, description="HNSW build-time candidate list size")
    ef_search: int = Field(100, ge=8, description="HNSW query-time candidate list size")


class ChromaSettings(_Section):
    mode: Literal["embedded", "server"] = Field("embedded", description="embedded PersistentClient or a Chroma server")
    host: str = Field("127.0.0.1", description="Chroma server host (server mode)")
    port: int = Field(8000, ge=1, le=65535, description="Chroma server port (server mode)")
    hnsw: HnswSettings = Field(default_factory=HnswSettings, description="HNSW index parameters")


class StorageSettings(_Section):
    path: Path = Field(
        Path(DEFAULT_STORAGE_PATH),
        validate_default=True,
        description="storage directory (catalog, Chroma data, backups)",
    )
    max_size_mb: float = Field(500, gt=0, description="size quota; a warning is logged at 90 %")
    max_items: dict[MemoryType, int] = Field(
        default_factory=dict, description="per-type item quota overriding retention.max_items_per_collection"
    )
    chromadb: ChromaSettings = Field(default_factory=ChromaSettings, description="vector index settings")

    @field_validator("path")
    @classmethod
    def _expand(cls, value: Path) -> Path:
        path = Path(os.path.expandvars(str(value))).expanduser()
        if not str(value).strip():
            raise ValueError("must be a directory path, e.g. ~/.remindful/memory")
        if path.exists() and not path.is_dir():
            raise ValueError(f"{path} exists and is not a directory; expected a directory path")
        return path


class EmbeddingSettings(_Section):
    model: str = Field("sentence-transformers/all-MiniLM-L6-v2", description="embedding model id")
    backend: Literal["onnx", "sentence-transformers", "fake"] = Field(
        "onnx", description="onnx (default, no torch), sentence-transformers (extra 'st'), fake (tests)"
    )
    model_dir: Path | None = Field(None, description="directory holding model.onnx and tokenizer.json")
    device: Literal["cpu", "cuda"] = Field("cpu", description="device for the sentence-transformers backend")
    cache_size: int = Field(1000, ge=0, description="in-process LRU embedding cache entries")


class CaptureTriggers(_Section):
    ai_analysis: bool = Field(True, description="capture screen analyses")
    successful_actions: bool = Field(True, description="capture actions that succeeded")
    failed_actions: bool = Field(True, description="capture actions that failed")
    workflow_completion: bool = Field(True, description="capture completed workflows")
    manual_save: bool = Field(True, description="allow explicit memory_store calls")


class CaptureFilters(_Section):
    min_interval_seconds: float = Field(5, ge=0, description="skip an identical capture repeated within this window")
    ignore_mouse_moves: bool = Field(True, description="skip mouse-move actions")
    ignore_sessions: list[str] = Field(default_factory=list, description="fnmatch patterns of sessions to skip")


class AutoCaptureSettings(_Section):
    enabled: bool = Field(True, description="master switch for every automatic capture")
    triggers: CaptureTriggers = Field(default_factory=CaptureTriggers, description="per-kind capture switches")
    filters: CaptureFilters = Field(default_factory=CaptureFilters, description="capture filters")


class CleanupSettings(_Section):
    enabled: bool = Field(True, description="run retention automatically in the daemon")
    schedule: Literal["daily", "weekly", "manual"] = Field("daily", description="how often cleanup runs")
    time: str = Field("03:00", pattern=r"^([01]\d|2[0-3]):[0-5]\d$", description="local time HH:MM")


class RetentionSettings(_Section):
    default_retention_days: int = Field(30, ge=1, description="delete unprotected memories older than this")
    max_items_per_collection: int = Field(10_000, ge=1, description="item quota per memory type")
    cleanup: CleanupSettings = Field(default_factory=CleanupSettings, description="cleanup schedule")


class RedactPattern(_Section):
    regex: str = Field(description="regular expression to replace")
    replacement: str = Field("[REDACTED]", description="replacement text")


class PrivacySettings(_Section):
    redact_screenshots: bool = Field(False, description="redact sensitive text in screen memories")
    redact_patterns: list[RedactPattern] = Field(default_factory=list, description="extra redaction rules")
    exclude_sessions: list[str] = Field(default_factory=list, description="fnmatch patterns never stored")
    auto_delete_days: int | None = Field(None, ge=1, description="set expires_at this many days after creation")
    delete_on_exit: bool = Field(False, description="delete the session's memories when the daemon exits")


class PerformanceSettings(_Section):
    batch_size: int = Field(100, ge=1, description="rows per catalog/index write batch")
    embedding_batch_size: int = Field(32, ge=1, description="texts per model call")
    search_timeout_ms: int = Field(5000, ge=1, description="search time budget")


class SearchSettings(_Section):
    dense_weight: float = Field(1.0, ge=0, description="weight of the dense (MiniLM) space in fusion")
    lexical_weight: float = Field(1.0, ge=0, description="weight of the lexical (FTS5/BM25) space in fusion")
    rrf_k: int = Field(60, ge=1, description="reciprocal-rank-fusion constant")
    candidates: int = Field(50, ge=1, le=1000, description="candidates taken from each space before fusion")
    importance_boost: float = Field(0.1, ge=0, le=1, description="max score share added for importance")
    session_boost: float = Field(0.15, ge=0, le=1, description="score share added for the resumed session")
    exact_filter_max: int = Field(
        20_000, ge=0, description="filtered sets up to this size are scored exactly instead of via the HNSW index"
    )


class Settings(BaseSettings):
    """All of remindful's configuration (the design's ``memory:`` YAML schema)."""

    model_config = SettingsConfigDict(
        env_prefix="REMINDFUL_", env_nested_delimiter="__", extra="forbid", validate_assignment=True
    )

    enabled: bool = Field(True, description="turn every memory feature on or off")
    storage: StorageSettings = Field(default_factory=StorageSettings, description="where and how much")
    embeddings: EmbeddingSettings = Field(default_factory=EmbeddingSettings, description="embedding model")
    auto_capture: AutoCaptureSettings = Field(default_factory=AutoCaptureSettings, description="capture")
    retention: RetentionSettings = Field(default_factory=RetentionSettings, description="retention policy")
    privacy: PrivacySettings = Field(default_factory=PrivacySettings, description="privacy controls")
    performance: PerformanceSettings = Field(default_factory=PerformanceSettings, description="tuning")
    search: SearchSettings = Field(default_factory=SearchSettings, description="ranking")

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: tuple[PydanticBaseSettingsSource, ...] = (
            init_settings,
            env_settings,
            _MemoryStoragePathSource(settings_cls),
        )
        yaml_file = config_file()
        if yaml_file is not None:
            sources += (YamlConfigSettingsSource(settings_cls, yaml_file=yaml_file, yaml_config_section="memory"),)
        return sources

    @property
    def storage_path(self) -> Path:
        return self.storage.path

    def max_items_for(self, memory_type: MemoryType) -> int:
        return self.storage.max_items.get(memory_type, self.retention.max_items_per_collection)


class _MemoryStoragePathSource(EnvSettingsSource):
    """The spec's ``MEMORY_STORAGE_PATH`` names the storage directory (below ``REMINDFUL_*``)."""

    def __call__(self) -> dict[str, Any]:
        value = os.environ.get("MEMORY_STORAGE_PATH")
        return {"storage": {"path": value}} if value else {}


def config_file() -> Path | None:
    """The YAML file to read: ``$REMINDFUL_CONFIG``, else the default file if it exists."""
    named = os.environ.get("REMINDFUL_CONFIG")
    if named:
        path = Path(named).expanduser()
        if not path.is_file():
            raise ConfigError("REMINDFUL_CONFIG", f"{path} is not a file", suggestion="point it at a YAML file")
        return path
    default = Path(DEFAULT_CONFIG_FILE).expanduser()
    return default if default.is_file() else None


def load_settings(path: str | os.PathLike[str] | None = None, **overrides: Any) -> Settings:
    """Build :class:`Settings` from every source; ``path`` (if given) is the storage directory.

    ``overrides`` take dotted or nested keys: ``load_settings(retention={"default_retention_days": 7})``
    or ``load_settings(**{"retention.default_retention_days": 7})``.
    Raises :class:`ConfigError` naming the first invalid field and the expected form.
    """
    nested: dict[str, Any] = {}
    for key, value in overrides.items():
        _set_dotted(nested, key.split("."), value)
    if path is not None:
        _set_dotted(nested, ["storage", "path"], Path(path))
    try:
        settings = Settings(**nested)
    except PydanticValidationError as exc:
        raise _config_error(exc) from None
    except ConfigError:
        raise
    except Exception as exc:  # a YAML syntax error, an unreadable file
        raise ConfigError("config file", str(exc), suggestion="fix the YAML file named by REMINDFUL_CONFIG") from exc
    _log_sources(nested)
    return settings


def _set_dotted(target: dict[str, Any], keys: list[str], value: Any) -> None:
    for key in keys[:-1]:
        target = target.setdefault(key, {})
    if isinstance(value, dict) and isinstance(target.get(keys[-1]), dict):
        target[keys[-1]].update(value)
    else:
        target[keys[-1]] = value


def _config_error(exc: PydanticValidationError) -> ConfigError:
    first = exc.errors()[0]
    field = ".".join(str(part) for part in first["loc"] if part != "[key]") or "settings"
    got = first.get("input")
    message = first["msg"]
    if first["type"] == "extra_forbidden":
        message = "unknown setting"
    elif first["type"] == "enum" or (got is not None and not isinstance(got, dict)):
        message = f"{message} (got {got!r})"
    return ConfigError(field, message, suggestion=_expected_form(field))


def _expected_form(field: str) -> str:
    """A description of the valid form, taken from the field's declaration."""
    model: Any = Settings
    info = None
    for part in field.split("."):
        fields = getattr(model, "model_fields", None)
        if not fields or part not in fields:
            break
        info = fields[part]
        model = info.annotation
    if info is None:
        return "see `remindful config --defaults` for every setting and its form"
    constraints = ", ".join(str(m) for m in info.metadata)
    kind = getattr(info.annotation, "__name__", None) or str(info.annotation)
    kind = kind.replace("typing.", "").replace("remindful.model.", "")
    return (
        f"expected {kind}"
        + (f" ({constraints})" if constraints else "")
        + (f": {info.description}" if info.description else "")
    )


def _log_sources(overrides: dict[str, Any]) -> None:
    if not log.isEnabledFor(logging.DEBUG):
        return
    env = sorted(k for k in os.environ if k.startswith("REMINDFUL_") or k == "MEMORY_STORAGE_PATH")
    log.debug("settings sources: overrides=%s env=%s file=%s", sorted(overrides), env, config_file())
