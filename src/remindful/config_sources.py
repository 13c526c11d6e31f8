"""Where remindful's settings come from: the one reader of the config file, the environment and the
storage path, shared by the full settings and the hook's light path.

Sources, highest first:

1. what the program passes (``remindful --path``, ``remindful.open(path, **overrides)``), applied
   by the caller;
2. ``REMINDFUL_*`` environment variables, ``__`` nesting (``REMINDFUL_RETENTION__DEFAULT_RETENTION_DAYS=7``),
   names in any case. A value starting with ``{`` or ``[`` is JSON (a whole section or a list);
   any other value is kept as the string it is, for the validation to read as its field's type;
3. ``MEMORY_STORAGE_PATH`` (the specification's name for ``storage.path``; empty means unset);
4. the YAML file's ``memory:`` section: ``$REMINDFUL_CONFIG`` if set (it must name a file), else
   ``~/.remindful/config.yaml`` if it exists;
5. the defaults (:mod:`remindful.config_defaults`).

:func:`read_sources` reads 2-4 once, as raw layers (:class:`Sources`). Two readers use them:

- :func:`remindful.config.load_settings` hands each layer to pydantic-settings, and the pydantic
  model validates every value: it is the truth.
- A hook process must not import pydantic (it runs at every tool call of a coding agent). It
  takes the storage directory from :func:`storage_path` (the one resolution, with the rule the
  model's ``storage.path`` validator applies, :func:`expand_storage_path`), and validates only the
  capture settings it acts on, with :meth:`remindful.services.ingest.filters.FilterConfig.from_mapping`,
  whose verdicts tests/test_config.py holds to the model's for every field it reads, valid and
  invalid values alike. A process that has the full settings never validates twice: it builds
  its filters from the validated values (``FilterConfig.from_settings``).

Standard library only; PyYAML is imported when a config file exists. Every failure is a
:class:`~remindful.errors.ConfigError` naming the variable or the file and the expected form.
"""

from __future__ import annotations

import json
import os

from remindful.config_defaults import CONFIG_FILE, SECTION_KEYS, STORAGE_PATH
from remindful.errors import ConfigError

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs hook processes milliseconds
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

ENV_PREFIX = "REMINDFUL_"
#: Names the YAML file; not a setting.
CONFIG_VARIABLE = "REMINDFUL_CONFIG"
#: The specification's name for ``storage.path``.
STORAGE_VARIABLE = "MEMORY_STORAGE_PATH"
#: Nodes a YAML document may hold once its aliases are expanded (a real config holds a few hundred).
YAML_MAX_NODES = 10_000


class Sources:
    """What each source says, raw (nothing validated): ``env`` (the ``REMINDFUL_*`` variables as a
    nested mapping), ``storage_env`` (``MEMORY_STORAGE_PATH`` or None), ``file`` (the YAML file
    read, or None) and ``file_section`` (its ``memory:`` mapping)."""

    __slots__ = ("env", "file", "file_section", "storage_env")

    def __init__(
        self, env: dict[str, Any], storage_env: str | None, file: str | None, file_section: dict[str, Any]
    ) -> None:
        self.env = env
        self.storage_env = storage_env
        self.file = file
        self.file_section = file_section

    def storage_layer(self) -> dict[str, Any]:
        """``MEMORY_STORAGE_PATH`` as a layer of the ``memory:`` shape."""
        return {"storage": {"path": self.storage_env}} if self.storage_env else {}

    def merged(self) -> dict[str, Any]:
        """The layers as one ``memory:`` mapping, higher layers over lower ones key by key."""
        merged: dict[str, Any] = {}
        for layer in (self.file_section, self.storage_layer(), self.env):
            _merge(merged, layer)
        return merged


def read_sources(environ: Mapping[str, str] | None = None, *, file: bool = True) -> Sources:
    """Read the environment and (unless ``file`` is False) the YAML file. Raises ConfigError for
    a ``REMINDFUL_*`` value that looks like JSON and is not, a ``$REMINDFUL_CONFIG`` that names
    no file, and a file that cannot be read, is not YAML, or is not a mapping with a ``memory:``
    mapping (an empty file is no settings)."""
    environ = os.environ if environ is None else environ
    path = config_file(environ) if file else None
    if path is not None:
        refuse_untrusted_config(path)
    section = read_config_file(path) if path is not None else {}
    return Sources(env_settings(environ), environ.get(STORAGE_VARIABLE) or None, path, section)


def config_file(environ: Mapping[str, str] | None = None) -> str | None:
    """The YAML file to read: ``$REMINDFUL_CONFIG`` (ConfigError if it names no file), else
    ``~/.remindful/config.yaml`` if it exists, else None."""
    environ = os.environ if environ is None else environ
    named = environ.get(CONFIG_VARIABLE)
    if named:
        path = os.path.expanduser(named)
        if not os.path.isfile(path):
            raise ConfigError(CONFIG_VARIABLE, f"{path} is not a file", suggestion="point it at a YAML file")
        return path
    path = os.path.expanduser(CONFIG_FILE)
    return path if os.path.isfile(path) else None


def refuse_untrusted_config(path: str) -> None:
    """ConfigError (one line naming the path and the fix) when the config file, or a directory
    above it up to the home directory (its own directory only, outside the home), is owned by
    another user, writable by others or a link another user made (:func:`remindful.owned.problem`):
    whoever can write the config can point ``learning.llm`` at a server of theirs."""
    from remindful.owned import problem

    path = os.path.abspath(path)
    home = os.path.abspath(os.path.expanduser("~"))
    current = path
    while True:
        found = problem(current)
        if found is not None:
            raise ConfigError("config file", f"{current} {found[0]}; not read", suggestion=found[1])
        parent = os.path.dirname(current)
        if current == home or parent == current or (current != path and not path.startswith(home + os.sep)):
            return
        current = parent


def read_config_file(path: str) -> dict[str, Any]:
    """The ``memory:`` section of the YAML file at ``path``. It is read with ``SafeLoader`` but
    refused when its aliases expand to more than :data:`YAML_MAX_NODES` nodes (or into a cycle):
    PyYAML shares an aliased node rather than copying it, so a "billion laughs" document loads in
    microseconds, and it is whoever walks the result (validation, an error message's repr of it)
    that runs out of time and memory. The expanded size is counted on the composed node graph,
    before anything is built."""
    import yaml

    try:
        with open(path, encoding="utf-8") as stream:
            loader = yaml.SafeLoader(stream)
            try:
                node = loader.get_single_node()
                if node is None:
                    return {}
                size = _expanded_size(node, {})
                if size > YAML_MAX_NODES:
                    raise ConfigError(
                        "config file",
                        f"{path}: YAML aliases expand to {_count(size)} nodes, more than {YAML_MAX_NODES:,}",
                        suggestion="write the values out instead of repeating them through aliases (*name)",
                    )
                document = loader.construct_document(node)
            finally:
                loader.dispose()
    except (OSError, ValueError, RecursionError, yaml.YAMLError) as exc:  # ValueError: not UTF-8, a huge integer
        reason = " ".join(str(exc).split())
        raise ConfigError("config file", f"{path}: {reason}", suggestion="expected a readable YAML file") from None
    if document is None:
        return {}
    section = document.get("memory") if isinstance(document, dict) else None
    if section is None and isinstance(document, dict) and "memory" in document:
        return {}  # "memory:" with nothing under it
    if not isinstance(section, dict):
        raise ConfigError(
            "config file",
            f"{path}: expected a mapping with a 'memory:' mapping",
            suggestion="put the settings under a top-level 'memory:' key",
        )
    return section


def env_settings(environ: Mapping[str, str]) -> dict[str, Any]:
    """The ``REMINDFUL_*`` variables as a nested mapping: a section's JSON value first, then its
    fields' variables over it. A variable whose first part names no setting (``REMINDFUL_CONFIG``,
    another program's ``REMINDFUL_TOKEN``) is not a setting and is left out; an unknown key below a
    setting is kept, for the validation to refuse."""
    found = []
    for name, raw in environ.items():
        if name.upper().startswith(ENV_PREFIX):
            keys = name[len(ENV_PREFIX) :].lower().split("__")
            if all(keys) and keys[0] in SECTION_KEYS[""]:
                found.append((keys, name, raw))
    out: dict[str, Any] = {}
    for keys, name, raw in sorted(found, key=lambda item: len(item[0])):
        _merge(out, _nest(keys, _env_value(name, raw)))
    return out


def _env_value(name: str, raw: str) -> Any:
    start = raw.lstrip()[:1]
    if start not in ("{", "["):
        return raw
    try:
        return json.loads(raw)
    except ValueError:
        kind = "a JSON object" if start == "{" else "a JSON array"
        example = '{"key": 1}' if start == "{" else '["a", "b"]'
        raise ConfigError(name, f"expected {kind}", suggestion=f"e.g. {name}='{example}', or set one field") from None


def _nest(keys: list[str], value: Any) -> dict[str, Any]:
    for key in reversed(keys):
        value = {key: value}
    return value


def _merge(target: dict[str, Any], layer: Mapping[str, Any]) -> None:
    """Merge ``layer`` into ``target``: mappings key by key, anything else replaced."""
    for key, value in layer.items():
        if isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        elif isinstance(value, dict):
            target[key] = {}
            _merge(target[key], value)
        else:
            target[key] = value


def storage_path(path: str | os.PathLike[str] | None, memory: Mapping[str, Any]) -> str:
    """THE storage directory: ``path`` if given (``--path``, ``remindful.open(path)``), else
    ``storage.path`` of the merged sources ``memory`` (:meth:`Sources.merged`), else the default;
    expanded and checked by :func:`expand_storage_path` (ValueError naming ``storage.path`` if it is
    not usable)."""
    if path is None:
        storage = memory.get("storage")
        path = storage.get("path") if isinstance(storage, dict) else None
    try:
        return expand_storage_path(STORAGE_PATH if path is None else path)
    except ValueError as exc:
        raise ValueError(f"storage.path: {exc}") from None


def expand_storage_path(value: Any) -> str:
    """``value`` with ``$VARS`` and ``~`` expanded, made absolute (a relative path names a directory
    of the current one, for good: a daemon or a child process may run elsewhere). Raises ValueError
    when it is blank or names something that exists and is not a directory: the rule of the
    settings' ``storage.path``."""
    if not isinstance(value, str | os.PathLike) or not os.fspath(value).strip():
        raise ValueError("must be a directory path, e.g. ~/.remindful/memory")
    path = os.path.abspath(os.path.expanduser(os.path.expandvars(os.fspath(value))))
    if os.path.exists(path) and not os.path.isdir(path):
        raise ValueError(f"{path} exists and is not a directory; expected a directory path")
    return path


def _expanded_size(node: Any, sizes: dict[int, int | None]) -> int:
    """Nodes under ``node`` with every alias expanded (``sizes`` memoises shared nodes; a cycle
    counts as unbounded)."""
    key = id(node)
    if key in sizes:
        known = sizes[key]
        return YAML_MAX_NODES + 1 if known is None else known  # None: still being counted, a cycle
    sizes[key] = None
    total = 1
    if isinstance(node.value, list):
        for item in node.value:
            for child in item if isinstance(item, tuple) else (item,):
                total += _expanded_size(child, sizes)
                if total > YAML_MAX_NODES * 1000:  # enough to refuse; stop before the integers grow huge
                    break
    sizes[key] = total
    return total


def _count(size: int) -> str:
    return f"{size:,}" if size <= YAML_MAX_NODES * 1000 else f"more than {YAML_MAX_NODES * 1000:,}"


__all__ = [
    "Sources",
    "config_file",
    "env_settings",
    "expand_storage_path",
    "read_config_file",
    "read_sources",
    "storage_path",
]
