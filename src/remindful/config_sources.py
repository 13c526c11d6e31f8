"""Where settings come from, and how a failure to read them is reported.

:mod:`remindful.config` declares what the settings are; this module loads them: the sources in
precedence order (keyword overrides, ``REMINDFUL_*``, the spec's ``MEMORY_STORAGE_PATH``, the YAML
file's ``memory:`` section), the YAML file's location, dotted keyword overrides, and the
translation of every failure (a pydantic validation error, an unreadable or malformed YAML file)
into one :class:`~remindful.errors.ConfigError` naming the field and the expected form.
It never imports :mod:`remindful.config`: the settings class is passed in.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError as PydanticValidationError
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    YamlConfigSettingsSource,
)

from remindful.errors import ConfigError

# The logger keeps the name it had when this code lived in remindful.config (logging setups name it).
log = logging.getLogger("remindful.config")

DEFAULT_CONFIG_FILE = "~/.remindful/config.yaml"

SettingsT = TypeVar("SettingsT", bound=BaseSettings)


class MemoryStoragePathSource(EnvSettingsSource):
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


def settings_sources(
    settings_cls: type[BaseSettings],
    init_settings: PydanticBaseSettingsSource,
    env_settings: PydanticBaseSettingsSource,
) -> tuple[PydanticBaseSettingsSource, ...]:
    """The sources of ``settings_cls``, highest first (``settings_customise_sources`` returns them).

    Raises :class:`ConfigError` if ``$REMINDFUL_CONFIG`` names no file.
    """
    sources: tuple[PydanticBaseSettingsSource, ...] = (
        init_settings,
        env_settings,
        MemoryStoragePathSource(settings_cls),
    )
    yaml_file = config_file()
    if yaml_file is not None:
        sources += (YamlConfigSettingsSource(settings_cls, yaml_file=yaml_file, yaml_config_section="memory"),)
    return sources


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


def _config_error(exc: PydanticValidationError, settings_cls: type[BaseSettings]) -> ConfigError:
    first = exc.errors()[0]
    field = ".".join(str(part) for part in first["loc"] if part != "[key]") or "settings"
    got = first.get("input")
    message = first["msg"]
    if first["type"] == "extra_forbidden":
        message = "unknown setting"
    elif first["type"] == "enum" or (got is not None and not isinstance(got, dict)):
        message = f"{message} (got {got!r})"
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
