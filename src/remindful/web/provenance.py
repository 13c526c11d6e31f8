"""The effective configuration, one row per setting, with where its value came from.

The sources are those :func:`remindful.config.settings_sources` reads, highest first: the
``REMINDFUL_*`` environment, ``MEMORY_STORAGE_PATH``, the YAML file. A value none of them sets is
the default, unless it differs from the default: then the program that opened the store set it
(``remindful --path``, ``remindful.open(path, **overrides)``). Values that could be secrets (a key
named like a token, password or API key; credentials inside a URL) are never shown.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from pydantic_settings import InitSettingsSource

from remindful.config import Settings, settings_sources
from remindful.errors import RemindfulError

HIDDEN = "(hidden)"
_SECRET_KEY = re.compile(r"(^|_)(secret|password|passwd|api_key|apikey|token|credentials?)$", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class SettingRow:
    """One setting: its dotted name, its value as shown, where it came from, and its description."""

    name: str
    value: str
    source: str
    description: str

    @property
    def section(self) -> str:
        """The part of the configuration it belongs to: ``embeddings`` for ``embeddings.backend``,
        ``general`` for a top-level setting."""
        head, dot, _ = self.name.partition(".")
        return head if dot else "general"


def setting_sections(rows: list[SettingRow]) -> list[tuple[str, list[SettingRow]]]:
    """``rows`` grouped by :attr:`SettingRow.section`, the general settings first, then the sections
    in declaration order."""
    sections: dict[str, list[SettingRow]] = {"general": []}
    for row in rows:
        sections.setdefault(row.section, []).append(row)
    return [(name, found) for name, found in sections.items() if found]


def setting_rows(settings: Settings) -> list[SettingRow]:
    """Every leaf setting of ``settings`` in declaration order (see the module docstring)."""
    layers = _source_layers()
    defaults = _flatten(Settings.model_construct().model_dump(mode="json"))
    descriptions = _descriptions(Settings)
    rows = []
    for name, value in _flatten(settings.model_dump(mode="json")).items():
        source = next((label for label, values in layers if name in values), None)
        if source is None:
            source = "default" if defaults.get(name) == value else "set by the program (--path or remindful.open)"
        rows.append(SettingRow(name, _shown(name, value), source, descriptions.get(name, "")))
    return rows


def _source_layers() -> list[tuple[str, dict[str, Any]]]:
    """``(label, {dotted name: value})`` of each source that sets anything, highest first."""
    out: list[tuple[str, dict[str, Any]]] = []
    try:
        sources = settings_sources(Settings, InitSettingsSource(Settings, {}))
    except RemindfulError as exc:  # the file became unreadable since the store opened: report the rest
        out.append((f"config file (unreadable now: {exc})", {}))
        try:
            sources = settings_sources(Settings, InitSettingsSource(Settings, {}), file=False)
        except RemindfulError:
            return out
    for source in sources:
        label = getattr(source, "label", None)  # the init source (the program's values) has none
        if label is not None:
            out.append((label, _flatten(source())))
    return out


def _flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    if isinstance(data, dict):
        for key, value in data.items():
            name = f"{prefix}.{key}" if prefix else str(key)
            if isinstance(value, dict) and value:
                out.update(_flatten(value, name))
            else:
                out[name] = value
    return out


def _descriptions(model: Any, prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    for key, field in model.model_fields.items():
        name = f"{prefix}.{key}" if prefix else key
        annotation = field.annotation
        if isinstance(annotation, type) and hasattr(annotation, "model_fields"):
            out.update(_descriptions(annotation, name))
        else:
            out[name] = field.description or ""
    return out


def _shown(name: str, value: Any) -> str:
    if value in (None, "", [], {}):
        return "" if value is None else repr(value)
    if _SECRET_KEY.search(name.rsplit(".", 1)[-1]):
        return HIDDEN
    if isinstance(value, str) and "@" in value and "://" in value:
        parts = urlsplit(value)
        if parts.username or parts.password:
            host = parts.hostname or ""
            netloc = f"{HIDDEN}@{host}" + (f":{parts.port}" if parts.port else "")
            return urlunsplit(parts._replace(netloc=netloc))
    if isinstance(value, bool):  # as the config file and the environment write it, not Python's True
        return "true" if value else "false"
    if isinstance(value, list | dict):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


__all__ = ["HIDDEN", "SettingRow", "setting_rows", "setting_sections"]
