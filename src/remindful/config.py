"""remindful's settings: one pydantic-settings class.

Sources, highest first: keyword overrides (``remindful.open(path, **overrides)``), environment
variables ``REMINDFUL_*`` (``__`` nests: ``REMINDFUL_RETENTION__DEFAULT_RETENTION_DAYS=7``), the
spec's ``MEMORY_STORAGE_PATH``, the YAML file's ``memory:`` section, then the defaults below.
The YAML file is ``$REMINDFUL_CONFIG`` if set, else ``~/.remindful/config.yaml`` if it exists.
Every invalid value raises :class:`~remindful.errors.ConfigError` naming the field and the
expected form. This module declares the settings and validates them: it is the truth. The
sources are read by :mod:`remindful.config_sources`, which the stdlib-only hook path reads too;
the defaults they share are in :mod:`remindful.config_defaults`.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator
from pydantic import ValidationError as PydanticValidationError
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from remindful import config_sources
from remindful.config_defaults import REDACT_REPLACEMENT, STORAGE_PATH, default
from remindful.errors import ConfigError
from remindful.model import MemoryType

log = logging.getLogger("remindful.config")

# -- where settings come from (remindful.config_sources reads them) and how failures are reported ---

SettingsT = TypeVar("SettingsT", bound=BaseSettings)


class SourceLayer(PydanticBaseSettingsSource):
    """One layer of :func:`remindful.config_sources.read_sources` as a pydantic-settings source;
    ``label`` says where it came from (the dashboard's settings page shows it)."""

    def __init__(self, settings_cls: type[BaseSettings], data: dict[str, Any], label: str) -> None:
        super().__init__(settings_cls)
        self.data = data
        self.label = label

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return self.data.get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return self.data


def config_file() -> Path | None:
    """The YAML file the settings are read from (:func:`remindful.config_sources.config_file`)."""
    found = config_sources.config_file()
    return None if found is None else Path(found)


def settings_sources(
    settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource, *, file: bool = True
) -> tuple[PydanticBaseSettingsSource, ...]:
    """The sources of ``settings_cls``, highest first (``settings_customise_sources`` returns them):
    ``init_settings``, then the layers :func:`remindful.config_sources.read_sources` reads (the
    YAML file's only with ``file``).

    Raises :class:`ConfigError` if ``$REMINDFUL_CONFIG`` names no file, the file cannot be read,
    or a ``REMINDFUL_*`` value is not the JSON it looks like.
    """
    sources = config_sources.read_sources(file=file)
    layers: tuple[PydanticBaseSettingsSource, ...] = (
        init_settings,
        SourceLayer(settings_cls, sources.env, "environment (REMINDFUL_*)"),
        SourceLayer(settings_cls, sources.storage_layer(), f"environment ({config_sources.STORAGE_VARIABLE})"),
    )
    if sources.file is not None:
        layers += (SourceLayer(settings_cls, sources.file_section, f"config file {sources.file}"),)
    return layers


# -- user redaction patterns: each must compile and must not backtrack catastrophically ------------

#: CPU time one pattern may spend on one 10 kB probe.
REGEX_PROBE_BUDGET_S = 0.05
REGEX_PROBE_CHARS = 10_000

# Run in a child process: Python's re cannot be interrupted, so a catastrophic pattern would hang
# whoever runs it. Before each probe the child arms a CPU-time timer whose default action (SIGPROF,
# no handler installed) kills it, so the budget is CPU time, unaffected by a loaded machine; where
# there is no setitimer (Windows) the parent's wall-clock deadline alone stops it.
_PROBE_CHILD = r"""
import json, re, signal, sys, time
patterns, size, budget = json.loads(sys.stdin.read())
timer = getattr(signal, "setitimer", None)
for i, pattern in enumerate(patterns):
    compiled = re.compile(pattern)
    chars = sorted(set("a0A .-_@/=:\t\n") | {c for c in pattern if c.isalnum()})
    for c in chars:
        text = c * size + "!"
        print(json.dumps([i, c]), flush=True)
        if timer:
            timer(signal.ITIMER_PROF, budget)
        start = time.process_time()
        compiled.search(text)
        spent = time.process_time() - start
        if timer:
            timer(signal.ITIMER_PROF, 0)
        if spent > budget:
            print(json.dumps([i, c, spent]), flush=True)
            sys.exit(0)
print(json.dumps(["done"]), flush=True)
"""

_probed: dict[str, str | None] = {}  # pattern -> why it is refused (None: it passed); one probe per process


def check_redact_patterns(patterns: list[str]) -> None:
    """Raise :class:`ConfigError` naming ``privacy.redact_patterns.<i>.regex`` for the first pattern
    that spends more than 50 ms of CPU on a 10 kB run of one character (a pattern with nested
    quantifiers such as ``(a+)+$`` takes exponential time there). The probe runs once per pattern
    and process, in a child process that is killed when over budget: the caller never hangs."""
    todo = [p for p in dict.fromkeys(patterns) if p not in _probed]
    if todo:
        _probed.update(_probe(todo))
    for i, pattern in enumerate(patterns):
        why = _probed.get(pattern)
        if why:
            raise ConfigError(
                f"privacy.redact_patterns.{i}.regex",
                f"'{pattern}' {why}",
                suggestion="bound the repetition (e.g. \\w{1,64}) and avoid a repeated group that repeats, "
                "such as (a+)+; expected e.g. '\\bEMP-\\d{5}\\b'",
            )


def _probe(patterns: list[str]) -> dict[str, str | None]:
    import json
    import selectors
    import subprocess
    import sys
    import time

    verdicts: dict[str, str | None] = dict.fromkeys(patterns)
    payload = json.dumps([patterns, REGEX_PROBE_CHARS, REGEX_PROBE_BUDGET_S])
    try:
        child = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", _PROBE_CHILD],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
    except OSError as exc:  # no interpreter to spawn (an embedded Python): the patterns did compile
        log.warning("cannot probe redaction patterns for catastrophic backtracking: %s", exc)
        return verdicts
    assert child.stdin is not None and child.stdout is not None
    last: list[Any] = []
    # Wall-clock backstops: the interpreter's start on a loaded machine, then each probe.
    deadline = time.monotonic() + 10
    try:
        child.stdin.write(payload)
        child.stdin.close()
        with selectors.DefaultSelector() as selector:
            selector.register(child.stdout, selectors.EVENT_READ)
            while True:
                if not selector.select(timeout=max(0.0, deadline - time.monotonic())):
                    break  # over the deadline: killed below
                line = child.stdout.readline()
                if not line:
                    break  # the child exited (done, over budget, or killed by its CPU timer)
                last = json.loads(line)
                if last == ["done"]:
                    break
                deadline = time.monotonic() + 2
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()
        child.stdout.close()
    if last and last != ["done"]:
        i, char = last[0], last[1]
        spent = f"{last[2] * 1000:.0f} ms" if len(last) > 2 else f"more than {REGEX_PROBE_BUDGET_S * 1000:.0f} ms"
        verdicts[patterns[i]] = (
            f"backtracks catastrophically: {spent} on a {REGEX_PROBE_CHARS // 1000} kB run of {char!r} "
            f"(at most {REGEX_PROBE_BUDGET_S * 1000:.0f} ms allowed)"
        )
        for later in patterns[i + 1 :]:
            verdicts.pop(later, None)  # not probed: probed again at the next load
    elif not last:
        log.warning("the redaction pattern probe did not run; patterns accepted after compiling")
    return verdicts


def build_settings(
    settings_cls: type[SettingsT], path: str | os.PathLike[str] | None, overrides: dict[str, Any]
) -> SettingsT:
    """``settings_cls`` from every source; ``path`` (if given) is the storage directory and
    ``overrides`` take dotted or nested keys (see :func:`remindful.config.load_settings`).
    Raises :class:`ConfigError` naming the first invalid field and the expected form."""
    nested: dict[str, Any] = {}
    for key, value in overrides.items():
        _set_dotted(nested, key.split("."), value)
    if path is not None:
        _set_dotted(nested, ["storage", "path"], Path(path))
    try:
        settings = settings_cls(**nested)
    except PydanticValidationError as exc:
        raise _config_error(exc, settings_cls) from None
    except ConfigError:
        raise
    except Exception as exc:  # whatever else a source or a validator raised: one line, naming the config
        reason = " ".join(str(exc).split())
        raise ConfigError("settings", reason, suggestion="check the config file and the REMINDFUL_* variables") from exc
    _log_sources(nested)
    return settings


def _set_dotted(target: dict[str, Any], keys: list[str], value: Any) -> None:
    for key in keys[:-1]:
        target = target.setdefault(key, {})
    if isinstance(value, dict) and isinstance(target.get(keys[-1]), dict):
        target[keys[-1]].update(value)
    else:
        target[keys[-1]] = value


#: Settings whose value may hold a credential: an error about one never repeats the value.
_NEVER_SHOWN = frozenset({"catalog.url", "catalog.token"})


def _config_error(exc: PydanticValidationError, settings_cls: type[BaseSettings]) -> ConfigError:
    first = exc.errors()[0]
    field = ".".join(str(part) for part in first["loc"] if part != "[key]") or "settings"
    got = None if field in _NEVER_SHOWN else first.get("input")
    message = first["msg"]
    if first["type"] == "extra_forbidden":
        message = "unknown setting"
    elif first["type"] == "enum" or (got is not None and not isinstance(got, dict)):
        shown = repr(got) if not isinstance(got, int) or abs(got) < 10**60 else "an integer of many digits"
        message = f"{message} (got {shown if len(shown) <= 80 else shown[:77] + '...'})"
    return ConfigError(field, message, suggestion=_expected_form(field, settings_cls))


def _expected_form(field: str, settings_cls: type[BaseSettings]) -> str:
    """A description of the valid form, taken from the field's declaration; for an unknown setting,
    the known ones beside it."""
    model: Any = settings_cls
    info = None
    parts = field.split(".")
    for depth, part in enumerate(parts):
        fields = getattr(model, "model_fields", None)
        if not fields:
            break
        if part not in fields:
            where = f" under '{'.'.join(parts[:depth])}'" if depth else ""
            return f"known settings{where}: {', '.join(sorted(fields))}"
        info = fields[part]
        model = info.annotation
    if info is None:
        return "see `remindful config --defaults` for every setting and its form"
    constraints = ", ".join(_constraint(m) for m in info.metadata)
    kind = getattr(info.annotation, "__name__", None) or str(info.annotation)
    kind = kind.replace("typing.", "").replace("remindful.model.", "")
    return (
        f"expected {kind}"
        + (f" ({constraints})" if constraints else "")
        + (f": {info.description}" if info.description else "")
    )


_BOUNDS = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<", "min_length": "length >=", "max_length": "length <="}


def _constraint(meta: Any) -> str:
    """``Ge(ge=1)`` as ``>= 1``; other metadata as itself."""
    for attribute, sign in _BOUNDS.items():
        value = getattr(meta, attribute, None)
        if value is not None:
            return f"{sign} {value}"
    return str(meta)


def _log_sources(overrides: dict[str, Any]) -> None:
    if not log.isEnabledFor(logging.DEBUG):
        return
    env = sorted(k for k in os.environ if k.startswith("REMINDFUL_") or k == "MEMORY_STORAGE_PATH")
    log.debug("settings sources: overrides=%s env=%s file=%s", sorted(overrides), env, config_file())


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


class CatalogSettings(_Section):
    url: str | None = Field(
        None,
        description="where the catalog lives: unset for the local SQLite file (the default), or "
        "postgresql://USER@HOST:PORT/DB for a store shared by a team or several machines (the password "
        "from PGPASSWORD or ~/.pgpass rather than the URL; the 'postgres' extra)",
    )

    @field_validator("url", mode="before")
    @classmethod
    def _postgres_url(cls, value: Any) -> str | None:
        if value is None or (isinstance(value, str) and not value.strip()):
            return None
        if not isinstance(value, str) or not value.startswith(("postgresql://", "postgres://")):
            raise ValueError("expected a URL like postgresql://USER@HOST:5432/DB, or nothing for the local SQLite file")
        return value.strip()

    # The person's token on a team store (``remindful team add`` prints it once). A SecretStr: every
    # dump of the settings (``remindful config``, the dashboard's settings page, a backup's
    # settings.json) shows it as '**********'; there is no command-line option for it.
    token: SecretStr | None = Field(
        None,
        description="your token on a team store (catalog.url): set REMINDFUL_CATALOG__TOKEN, or name a 0600 file "
        "in token_file; never on a command line. Unset: the store's single user, until a team has people",
    )
    token_file: Path | None = Field(
        None, description="a file holding your team-store token (yours, mode 0600); used when token is unset"
    )

    @field_validator("token", mode="before")
    @classmethod
    def _token(cls, value: Any) -> Any:
        if isinstance(value, SecretStr):
            value = value.get_secret_value()
        if value is None or (isinstance(value, str) and not value.strip()):
            return None
        if not isinstance(value, str) or not value.strip().isprintable() or len(value.strip()) > 200:
            raise ValueError("expected the token `remindful team add` printed (one line of printable text)")
        return value.strip()


class StorageSettings(_Section):
    path: Path = Field(
        Path(STORAGE_PATH),
        validate_default=True,
        description="storage directory (catalog, Chroma data, backups)",
    )
    max_size_mb: float = Field(500, gt=0, description="size quota; a warning is logged at 90 %")
    max_items: dict[MemoryType, int] = Field(
        default_factory=dict, description="per-type item quota overriding retention.max_items_per_collection"
    )
    chromadb: ChromaSettings = Field(default_factory=ChromaSettings, description="vector index settings")

    @field_validator("path", mode="before")
    @classmethod
    def _expand(cls, value: Any) -> Path:
        # Before pydantic's own conversion, which reads "" as "." (the current directory).
        return Path(config_sources.expand_storage_path(value))  # the rule the hook's light path applies


class EmbeddingSettings(_Section):
    model: str = Field("sentence-transformers/all-MiniLM-L6-v2", description="embedding model id")
    backend: Literal["onnx", "sentence-transformers", "fake"] = Field(
        "onnx", description="onnx (default, no torch), sentence-transformers (extra 'st'), fake (tests)"
    )
    model_dir: Path | None = Field(None, description="directory holding model.onnx and tokenizer.json")
    quantize: bool = Field(
        True, description="onnx: int8 matrix multiplications, prepared once per model file (~1.5x faster)"
    )
    device: Literal["cpu", "cuda"] = Field("cpu", description="device for the sentence-transformers backend")
    cache_size: int = Field(1000, ge=0, description="in-process LRU embedding cache entries")


class CaptureTriggers(_Section):
    ai_analysis: bool = Field(default("auto_capture.triggers.ai_analysis"), description="capture screen analyses")
    successful_actions: bool = Field(
        default("auto_capture.triggers.successful_actions"), description="capture actions that succeeded"
    )
    failed_actions: bool = Field(
        default("auto_capture.triggers.failed_actions"), description="capture actions that failed"
    )
    workflow_completion: bool = Field(
        default("auto_capture.triggers.workflow_completion"), description="capture completed workflows"
    )
    manual_save: bool = Field(
        default("auto_capture.triggers.manual_save"), description="allow explicit memory_store calls"
    )
    hooks: bool = Field(
        default("auto_capture.triggers.hooks"), description="capture coding-agent hook events (remindful hook)"
    )
    files: bool = Field(
        default("auto_capture.triggers.files"), description="capture Markdown files from watch_dirs / remindful watch"
    )


class CaptureFilters(_Section):
    min_interval_seconds: float = Field(
        default("auto_capture.filters.min_interval_seconds"),
        ge=0,
        description="skip an identical capture repeated within this window",
    )
    ignore_mouse_moves: bool = Field(
        default("auto_capture.filters.ignore_mouse_moves"), description="skip mouse-move actions"
    )
    ignore_sessions: list[str] = Field(default_factory=list, description="fnmatch patterns of sessions to skip")


class AutoCaptureSettings(_Section):
    enabled: bool = Field(default("auto_capture.enabled"), description="master switch for every automatic capture")
    triggers: CaptureTriggers = Field(default_factory=CaptureTriggers, description="per-kind capture switches")
    filters: CaptureFilters = Field(default_factory=CaptureFilters, description="capture filters")
    watch_dirs: list[Path] = Field(
        default_factory=list, description="directories whose .md files the daemon indexes and watches"
    )


class CleanupSettings(_Section):
    enabled: bool = Field(True, description="run retention automatically in the daemon")
    schedule: Literal["daily", "weekly", "manual"] = Field("daily", description="how often cleanup runs")
    time: str = Field("03:00", pattern=r"^([01]\d|2[0-3]):[0-5]\d$", description="local time HH:MM")


class KeepCriteria(_Section):
    successful_workflows: bool = Field(True, description="keep workflow memories whose metadata has success: true")
    manual_bookmarks: bool = Field(True, description="keep bookmarked / manual_save memories (always on for retention)")
    unique_screens: bool = Field(True, description="keep screen memories that represent a consolidated dedup cluster")


class RetentionTier(_Section):
    max_age_days: int = Field(ge=1, description="memories up to this age (days) belong to the tier")
    max_items: int | None = Field(None, ge=1, description="per-type cap inside the tier (None: unlimited)")
    keep_successful: bool = Field(False, description="memories with metadata success: true are exempt from the cap")
    discard_repetitive: bool = Field(False, description="deduplicate near-identical memories of this tier")
    keep_criteria: KeepCriteria | None = Field(None, description="what survives past default_retention_days")

    @field_validator("keep_criteria", mode="before")
    @classmethod
    def _merge_list(cls, value: Any) -> Any:
        # The design's YAML writes keep_criteria as a list of one-key dicts; accept that form too.
        if isinstance(value, list) and all(isinstance(v, dict) for v in value):
            return {k: v for item in value for k, v in item.items()}
        return value


#: Each tier's defaults; a tier given in part (one field from YAML, env or ``open()``) is merged with them.
RETENTION_TIER_DEFAULTS: dict[str, dict[str, Any]] = {
    "recent": {"max_age_days": 7},
    "medium": {"max_age_days": 30, "max_items": 1000, "keep_successful": True, "discard_repetitive": True},
    "long_term": {"max_age_days": 365, "max_items": 500, "keep_criteria": {}},
}


class RetentionTiers(_Section):
    recent: RetentionTier = Field(
        default_factory=lambda: RetentionTier(**RETENTION_TIER_DEFAULTS["recent"]),
        description="keep everything this young",
    )
    medium: RetentionTier = Field(
        default_factory=lambda: RetentionTier(**RETENTION_TIER_DEFAULTS["medium"]),
        description="keep important items, remove duplicates",
    )
    long_term: RetentionTier = Field(
        default_factory=lambda: RetentionTier(**RETENTION_TIER_DEFAULTS["long_term"]),
        description="keep only significant items; everything older is deleted unless bookmarked",
    )

    @model_validator(mode="before")
    @classmethod
    def _merge_with_defaults(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        return {
            name: {**RETENTION_TIER_DEFAULTS[name], **given}
            if isinstance(given, dict) and name in RETENTION_TIER_DEFAULTS
            else given
            for name, given in value.items()
        }


class RetentionSettings(_Section):
    default_retention_days: int = Field(30, ge=1, description="delete unprotected memories older than this")
    max_items_per_collection: int = Field(10_000, ge=1, description="item quota per memory type")
    cleanup: CleanupSettings = Field(default_factory=CleanupSettings, description="cleanup schedule")
    tiers: RetentionTiers = Field(default_factory=RetentionTiers, description="age tiers (design 'Retention Policy')")
    dedup_threshold: float = Field(0.95, gt=0, le=1, description="cosine similarity at which memories are duplicates")


class AttachmentSettings(_Section):
    copy_attachments: bool = Field(False, description="copy attached files into <storage>/attachments/")
    path_keys: list[str] = Field(
        default_factory=lambda: ["screenshot_path"], description="metadata keys holding a file path to attach"
    )


class SecuritySettings(_Section):
    allowed_paths: list[Path] = Field(
        default_factory=list,
        description=(
            "directories whose files MCP tools may read or write (export, import, restore, index_file, "
            "attachments), besides the storage directory and auto_capture.watch_dirs"
        ),
    )


class LimitSettings(_Section):
    """Sizes past which input is refused with an error naming the limit (never truncated)."""

    content_chars: int = Field(
        default("limits.content_chars"), ge=1, description="most characters of one memory's content"
    )
    query_chars: int = Field(default("limits.query_chars"), ge=1, description="most characters of a search query")
    metadata_bytes: int = Field(
        default("limits.metadata_bytes"), ge=2, description="most bytes of one memory's metadata, as UTF-8 JSON"
    )
    metadata_depth: int = Field(
        default("limits.metadata_depth"), ge=1, le=100, description="most nesting levels of one memory's metadata"
    )
    hook_payload_bytes: int = Field(
        default("limits.hook_payload_bytes"),
        ge=1024,
        description="most bytes of a hook's stdin payload; a larger one is logged and not captured",
    )
    batch_items: int = Field(default("limits.batch_items"), ge=1, description="most items of one store_batch call")


class BackupSettings(_Section):
    keep_automatic: int = Field(5, ge=1, description="automatic backups kept (older ones are deleted)")


class RedactPattern(_Section):
    regex: str = Field(description="regular expression to replace")
    replacement: str = Field(REDACT_REPLACEMENT, description="replacement text")
    name: str | None = Field(None, description="name under which stats() counts this rule's hits")

    @field_validator("regex")
    @classmethod
    def _compiles(cls, value: str) -> str:
        import re

        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"not a valid regular expression ({exc}); expected e.g. '\\bEMP-\\d{{5}}\\b'") from None
        return value


class PrivacySettings(_Section):
    redact_screenshots: bool = Field(False, description="redact sensitive text in screen memories")
    redact_patterns: list[RedactPattern] = Field(
        default_factory=list,
        description="extra redaction rules; each must compile and spend under 50 ms on a 10 kB text",
    )
    redact: bool = Field(
        default("privacy.redact"),
        description="redact secrets (cards, emails, API keys, ...) before anything is written",
    )
    redact_defaults: bool = Field(
        default("privacy.redact_defaults"), description="apply the built-in redaction rules (besides redact_patterns)"
    )
    exclude_sessions: list[str] = Field(default_factory=list, description="fnmatch patterns never stored")
    auto_delete_days: int | None = Field(None, ge=1, description="set expires_at this many days after creation")
    delete_on_exit: bool = Field(False, description="delete the session's memories when the daemon exits")

    @field_validator("redact_patterns")
    @classmethod
    def _no_catastrophic_backtracking(cls, value: list[RedactPattern]) -> list[RedactPattern]:
        # Raises ConfigError itself (pydantic passes it through): the field names the pattern's index.
        check_redact_patterns([p.regex for p in value])
        return value


class ProjectInjection(_Section):
    """How much context one project's agents get (``hooks.projects``); an unset field is ``hooks``'s."""

    inject: bool | None = Field(None, description="inject context into this project's sessions at all")
    context_budget_tokens: int | None = Field(
        None, ge=0, le=100_000, description="token budget of a prompt's context in this project (0: none)"
    )
    brief_budget_tokens: int | None = Field(
        None, ge=0, le=100_000, description="token budget of the SessionStart brief in this project (0: none)"
    )


class HookSettings(_Section):
    inject: bool = Field(
        default("hooks.inject"),
        description="inject context on SessionStart/UserPromptSubmit (false: the hooks only capture)",
    )
    brief_budget_tokens: int = Field(
        default("hooks.brief_budget_tokens"),
        ge=0,
        le=100_000,
        description="token budget of the SessionStart brief: the project's recent decisions, open failures "
        "and preferences (0: no brief)",
    )
    projects: dict[str, ProjectInjection] = Field(
        default_factory=dict,
        description="per project (its key, its name or its root directory, or an fnmatch pattern of one of "
        "them): inject, context_budget_tokens, brief_budget_tokens overriding these; the first key that matches wins",
    )
    context_budget_tokens: int = Field(
        default("hooks.context_budget_tokens"),
        ge=50,
        le=100_000,
        description="token budget of the context printed on SessionStart/UserPromptSubmit",
    )
    context_candidates: int = Field(
        default("hooks.context_candidates"), ge=1, le=200, description="memories searched before the budget is applied"
    )
    line_chars: int = Field(
        default("hooks.line_chars"), ge=40, le=2000, description="maximum characters of one injected context line"
    )
    start_daemon: bool = Field(
        default("hooks.start_daemon"),
        description="a hook that finds no daemon for its store starts one, detached (it stores what the hooks "
        "spool and answers their context; it stops after daemon.idle_exit_s without activity)",
    )


class ContextSettings(_Section):
    min_score: float = Field(
        default("context.min_score"),
        ge=0,
        le=1,
        description="relevance floor of injected context (hooks, context()): when no memory scores this much, nothing "
        "is injected; higher than search.min_score, so unrelated prompts get silence",
    )
    maybe_min_score: float = Field(
        default("context.maybe_min_score"),
        ge=0,
        le=1,
        description="lower floor of the context's 'maybe relevant' lines: facts, decisions, preferences, corrections "
        "and open failures scoring this much but under min_score are added as short lines (at most maybe_lines), "
        "so a paraphrase of a stated fact still reaches the agent; 1 turns them off",
    )
    maybe_lines: int = Field(
        default("context.maybe_lines"), ge=0, le=20, description="'maybe relevant' lines a context holds at most"
    )
    kin_min_score: float = Field(
        default("context.kin_min_score"),
        ge=0,
        le=1,
        description="lowest floor of a 'maybe relevant' line: a fact, decision, preference, correction or open "
        "failure scoring this much but under maybe_min_score joins a block that already holds lines when its "
        "own text holds a word of the prompt those lines hold (it is about what the block is about); "
        "maybe_min_score or more turns this off",
    )


class ScopeSettings(_Section):
    project: str | None = Field(
        None,
        description="name of the project every memory written by this process belongs to, whatever its directory "
        "(REMINDFUL_SCOPES__PROJECT=name for one MCP server or script); unset: the project of the directory "
        "(its git repository, a .remindful marker, or scopes.projects)",
    )
    projects: dict[str, str] = Field(
        default_factory=dict,
        description="directory -> project name: that directory and everything under it is one project of that "
        "name (nearest wins, before git repositories and .remindful markers)",
    )
    user_level: bool = Field(
        True,
        description="put a new memory that states a preference or a rule holding everywhere (always/never, "
        "'I prefer', a setting, a wording correction; naming nothing of a project) at user level, seen from "
        "every project; off: it stays in the project it was captured in",
    )

    @field_validator("project")
    @classmethod
    def _named(cls, value: str | None) -> str | None:
        if value is not None and not _nameable(value):
            raise ValueError(f"expected a project name with letters or digits, got {value!r}")
        return value

    @field_validator("projects")
    @classmethod
    def _names(cls, value: dict[str, str]) -> dict[str, str]:
        for path, name in value.items():
            if not path.strip() or not _nameable(name):
                raise ValueError(
                    f"expected directory: name pairs, each name with letters or digits; got {path!r}: {name!r}"
                )
        return value


def _nameable(name: str) -> bool:
    """Whether ``name`` can name a project (its key keeps an ASCII letter or digit)."""
    return any(c.isascii() and c.isalnum() for c in name)


class DaemonSettings(_Section):
    port: int = Field(0, ge=0, le=65535, description="loopback HTTP port of the daemon (0: any free port)")
    poll_interval_ms: int = Field(100, ge=10, le=5000, description="how often the daemon checks the hook spool")
    idle_exit_s: float = Field(
        1800.0,
        ge=0,
        description="a daemon started by the hooks stops after this many seconds without a hook request, a spooled "
        "event or an HTTP request (`remindful daemon --idle-exit S` for one started by hand); 0: never",
    )
    in_serve: bool = Field(True, description="`remindful serve` also runs the daemon's roles once the server is up")
    serve_start_delay_s: float = Field(
        1.0,
        ge=0,
        le=600,
        description="seconds `remindful serve` waits after answering its first tool call (without a call, 10 s "
        "after its start) before starting the daemon's roles; 0: at its start",
    )


class PerformanceSettings(_Section):
    batch_size: int = Field(100, ge=1, description="rows per catalog/index write batch")
    async_indexing: bool = Field(
        True, description="add new memories to the vector index in a background thread (store returns after the commit)"
    )
    defer_embedding: bool = Field(
        True,
        description="with async_indexing: store returns after the catalog commit and the text is embedded in the "
        "background with the indexing (a search first waits for the pending embeddings of this process's small "
        "writes and of its own thread's large ones)",
    )
    embedding_batch_size: int = Field(32, ge=1, description="texts per model call")
    search_timeout_ms: int = Field(5000, ge=1, description="search time budget")


class SearchSettings(_Section):
    dense_weight: float = Field(
        1.0,
        ge=0,
        description="weight of a memory's MiniLM cosine with the query in its evidence (the dense space; 0: not asked, "
        "and the scores lose their scale)",
    )
    lexical_weight: float = Field(
        0.5,
        ge=0,
        description="evidence added by the memory's own words: its share of the query's terms (weighted by rarity, "
        "raised to 1.5; none below two shared terms); 0 turns the lexical space (BM25 over the text) off",
    )
    lexical_context_weight: float = Field(
        0.8,
        ge=0,
        description="evidence added by the words of the memory's session window (it, two neighbours each side, its "
        "date), as lexical_weight reads its own; 0 turns the lexical context space off",
    )
    context_weight: float = Field(
        0.0,
        ge=0,
        description="evidence added by the context cosine (the memory's vector averaged with its session "
        "neighbours') where it exceeds the memory's own; 0 turns the context space off",
    )
    context_neighbour_weight: float = Field(
        0.5, ge=0, le=1, description="weight of each adjacent memory's vector in the context space"
    )
    candidates: int = Field(
        20, ge=1, le=1000, description="candidates taken from each space and judged (more when duplicates fold them)"
    )
    context_candidates: int = Field(
        10, ge=1, le=1000, description="dense candidates whose session neighbourhood the context space scores"
    )
    importance_boost: float = Field(
        0.15,
        ge=0,
        le=1,
        description="evidence (in cosine units) added at importance 1 and taken at 0, in proportion (0.5 adds none): "
        "a confirmed memory ranks higher",
    )
    session_boost: float = Field(
        0.1, ge=0, le=1, description="evidence (in cosine units) added to the memories of the resumed session"
    )
    exact_filter_max: int = Field(
        10_000,
        ge=0,
        description="filtered sets up to this size may be scored exactly instead of via the HNSW index "
        "(always up to 1,000; above that when they are under a fifth of the searched memories); stores up to "
        "this size are scored exactly by `remindful serve` until its index is open, and by a hook's context "
        "without a daemon (that one up to 100,000 at least)",
    )
    min_score: float = Field(
        default("search.min_score"),
        ge=0,
        le=1,
        description="relevance floor of explicit searches: hits whose calibrated score (the estimated probability "
        "that the hit is what the query asks for) is lower are not returned; low, so paraphrases are kept; 0 returns "
        "the top hits whatever they score",
    )
    recency_half_life_days: float = Field(
        default("search.recency_half_life_days"),
        ge=0,
        description="recency prior: a memory this many days old gets half the recency boost of a new one (0: off)",
    )
    recency_boost: float = Field(
        0.03, ge=0, le=1, description="evidence (in cosine units) added to a new memory, halving every half-life"
    )
    collapse_similarity: float = Field(
        0.9, gt=0, le=1, description="cosine at which near-duplicate memories collapse into one hit (+N similar)"
    )
    supersede_similarity: float = Field(
        0.6,
        gt=0,
        le=1,
        description="cosine at which two memories with mostly the same words are versions of one subject: "
        "the newer ranks first and the older is marked superseded",
    )


DEFAULT_TRIGGER_PATTERNS = [
    r"\bremember\s+that\b",
    r"\balways\s+use\b",
    r"\bnever\s+do\b",
    r"\bprefer\s+to\b",
    r"\bi\s+want\b",
    r"\bfrom\s+now\s+on\b",
]


LLMCapturePoint = Literal["conversation", "correction", "workflow", "session"]
LLM_CAPTURE_POINTS: tuple[LLMCapturePoint, ...] = ("conversation", "correction", "workflow", "session")


class LLMSettings(_Section):
    enabled: bool = Field(False, description="use an OpenAI-compatible chat endpoint instead of the built-in rules")
    base_url: str = Field("http://127.0.0.1:11434/v1", description="OpenAI-compatible API base URL (…/v1)")
    model: str = Field("", description="chat model name sent to the endpoint; required when enabled")
    api_key_env: str = Field("OPENAI_API_KEY", description="environment variable holding the API key (may be unset)")
    timeout_seconds: float = Field(20, gt=0, description="per-request timeout; a timeout falls back to the rules")
    daily_token_cap: int = Field(200_000, ge=0, description="tokens per UTC day; at the cap the rules are used")
    use_for: list[LLMCapturePoint] = Field(
        default_factory=lambda: list(LLM_CAPTURE_POINTS),
        description="capture points that ask the LLM (the others use the rules)",
    )


class LearningSettings(_Section):
    capture_all_conversations: bool = Field(True, description="capture memories from agent conversation turns")
    capture_config_changes: bool = Field(True, description="capture configuration changes as preferences")
    min_extraction_confidence: float = Field(0.7, ge=0, le=1, description="drop extractions below this confidence")
    max_memories_per_turn: int = Field(3, ge=1, le=50, description="most memories extracted from one turn")
    min_actions_for_pattern: int = Field(3, ge=2, description="fewest actions that form a workflow pattern")
    pattern_time_window_minutes: float = Field(30, gt=0, description="actions of one pattern fall within this window")
    memory_trigger_patterns: list[str] = Field(
        default_factory=lambda: list(DEFAULT_TRIGGER_PATTERNS),
        description="case-insensitive regexes marking an explicit 'remember this' (boosts salience)",
    )
    trigger_boost: float = Field(0.25, ge=0, le=0.5, description="importance added when a trigger phrase is used")
    correction_boost: float = Field(0.3, ge=0, le=0.5, description="importance added to a correction memory")
    confirm_boost: float = Field(0.15, ge=0, le=0.5, description="importance added per confirmed search result")
    min_suggestion_similarity: float = Field(
        0.35, ge=0, le=1, description="cosine similarity a past memory needs to be suggested"
    )
    llm: LLMSettings = Field(default_factory=LLMSettings, description="optional LLM for extraction and synthesis")

    @field_validator("memory_trigger_patterns")
    @classmethod
    def _compile(cls, value: list[str]) -> list[str]:
        import re

        for pattern in value:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"{pattern!r} is not a valid regular expression ({exc})") from None
        return value


class Settings(BaseSettings):
    """All of remindful's configuration (the design's ``memory:`` YAML schema)."""

    model_config = SettingsConfigDict(
        env_prefix="REMINDFUL_", env_nested_delimiter="__", extra="forbid", validate_assignment=True
    )

    enabled: bool = Field(default("enabled"), description="turn every memory feature on or off")
    storage: StorageSettings = Field(default_factory=StorageSettings, description="where and how much")
    catalog: CatalogSettings = Field(default_factory=CatalogSettings, description="the catalog's backend")
    embeddings: EmbeddingSettings = Field(default_factory=EmbeddingSettings, description="embedding model")
    auto_capture: AutoCaptureSettings = Field(default_factory=AutoCaptureSettings, description="capture")
    retention: RetentionSettings = Field(default_factory=RetentionSettings, description="retention policy")
    privacy: PrivacySettings = Field(default_factory=PrivacySettings, description="privacy controls")
    performance: PerformanceSettings = Field(default_factory=PerformanceSettings, description="tuning")
    search: SearchSettings = Field(default_factory=SearchSettings, description="ranking")
    hooks: HookSettings = Field(default_factory=HookSettings, description="coding-agent hooks and context injection")
    context: ContextSettings = Field(default_factory=ContextSettings, description="context injection relevance")
    daemon: DaemonSettings = Field(default_factory=DaemonSettings, description="the capture daemon")
    attachments: AttachmentSettings = Field(default_factory=AttachmentSettings, description="attached files")
    backup: BackupSettings = Field(default_factory=BackupSettings, description="backups")
    limits: LimitSettings = Field(default_factory=LimitSettings, description="input size limits")
    security: SecuritySettings = Field(default_factory=SecuritySettings, description="what tools may touch")
    learning: LearningSettings = Field(default_factory=LearningSettings, description="learning from conversations")
    scopes: ScopeSettings = Field(default_factory=ScopeSettings, description="projects and the user's scope")

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return settings_sources(settings_cls, init_settings)

    @property
    def storage_path(self) -> Path:
        return self.storage.path

    def allowed_roots(self) -> list[Path]:
        """The directories whose files tools may read or write, symlinks resolved: the storage
        directory, ``auto_capture.watch_dirs`` and ``security.allowed_paths``."""
        roots = [self.storage_path, *self.auto_capture.watch_dirs, *self.security.allowed_paths]
        return list(dict.fromkeys(Path(root).expanduser().resolve() for root in roots))

    def max_items_for(self, memory_type: MemoryType) -> int:
        return self.storage.max_items.get(memory_type, self.retention.max_items_per_collection)


def load_settings(path: str | os.PathLike[str] | None = None, **overrides: Any) -> Settings:
    """Build :class:`Settings` from every source; ``path`` (if given) is the storage directory.

    ``overrides`` take dotted or nested keys: ``load_settings(retention={"default_retention_days": 7})``
    or ``load_settings(**{"retention.default_retention_days": 7})``.
    Raises :class:`ConfigError` naming the first invalid field and the expected form.
    """
    return build_settings(Settings, path, overrides)
