"""Validation of what callers pass in: every error names the field and the expected form.

The limits (``limits.*`` in the settings: content and query length, metadata size and depth, batch
size) are checked here, before anything is written or embedded: input over a limit is refused with
the setting's name, never truncated and never accepted to fail later. Text must be valid Unicode
(a lone surrogate, which a terminal's undecodable bytes become in ``sys.argv``, cannot be written
as UTF-8), metadata must be JSON that every reader of the catalog and the vector index reads back
(finite numbers, integers within 64 bits, string keys), and timestamps must be representable dates.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from typing import Any

from remindful.config_defaults import default
from remindful.engine.sqlfilter import to_epoch
from remindful.errors import ValidationError
from remindful.model import ChunkMetadata, MemoryClass, MemorySource, MemoryType, make_origin, parse_origin
from remindful.runtime import SESSION_ID_MAX_CHARS

#: The default of ``limits.content_chars``.
MAX_CONTENT_CHARS: int = default("limits.content_chars")
#: Integers in metadata must fit the vector index's (and SQLite's) signed 64-bit integers.
INT64_MAX = 2**63 - 1
#: The earliest and latest creation time a memory may have (its id spells the year with 4 digits).
EARLIEST = datetime(1, 1, 1, tzinfo=UTC)
LATEST = datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class Limits:
    """The ``limits`` settings this module checks, with their defaults (``Limits()``) or read from
    a settings section (``Limits.of(settings.limits)``)."""

    content_chars: int = default("limits.content_chars")
    query_chars: int = default("limits.query_chars")
    metadata_bytes: int = default("limits.metadata_bytes")
    metadata_depth: int = default("limits.metadata_depth")
    batch_items: int = default("limits.batch_items")

    @classmethod
    def of(cls, section: Any) -> Limits:
        return cls(**{f.name: getattr(section, f.name) for f in fields(cls)})


DEFAULT_LIMITS = Limits()


def check_text(value: Any, field: str, *, max_chars: int | None = None, setting: str | None = None) -> str:
    """``value`` if it is a non-empty string of valid Unicode of at most ``max_chars`` characters;
    else ValidationError naming ``field`` (and the ``limits.*`` ``setting`` that bounds it)."""
    if not isinstance(value, str) or not value.strip():
        raise ValidationError(field, "expected a non-empty string")
    if max_chars is not None and len(value) > max_chars:
        raise ValidationError(
            field,
            f"{len(value):,} characters, expected at most {max_chars:,}"
            + (f" (setting limits.{setting})" if setting else ""),
        )
    check_unicode(value, field)
    return value


def check_int(value: Any, field: str, low: int, high: int) -> int:
    """``value`` if it is an integer (not a bool) from ``low`` to ``high``; else ValidationError naming ``field``."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValidationError(field, f"expected an integer from {low} to {high}, got {value!r}")
    return value


def check_unicode(value: str, field: str) -> None:
    """ValidationError naming ``field`` if ``value`` holds a lone surrogate (not writable as UTF-8)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = value[exc.start]
        raise ValidationError(
            field,
            f"expected valid UTF-8 text; character {exc.start} is {_surrogate(bad)}",
        ) from None


def _surrogate(char: str) -> str:
    code = ord(char)
    if 0xDC80 <= code <= 0xDCFF:  # how Python decodes an undecodable byte of argv or a file name
        return f"the undecodable byte 0x{code - 0xDC00:02x}"
    return f"a lone surrogate U+{code:04X}"


def check_metadata(metadata: Any, field: str, limits: Limits = DEFAULT_LIMITS) -> dict[str, Any]:
    """A JSON-safe copy of ``metadata`` (a dict), or ValidationError naming ``field`` (or the path
    inside it) and the expected form: at most ``limits.metadata_depth`` levels and
    ``limits.metadata_bytes`` bytes of UTF-8 JSON; string keys; strings, finite numbers, integers
    within 64 bits, booleans, null, lists and objects."""
    if metadata is None:
        return {}
    if not isinstance(metadata, Mapping):
        raise ValidationError(field, f"expected a dict, got {type(metadata).__name__}")
    # Iterative, so that nesting deeper than Python's recursion limit is an error, not a crash.
    stack: list[tuple[Any, str, int]] = [(metadata, field, 1)]
    while stack:
        value, where, depth = stack.pop()
        if isinstance(value, Mapping | list | tuple):
            if depth > limits.metadata_depth:
                raise ValidationError(
                    where,
                    f"nested deeper than {limits.metadata_depth} levels (setting limits.metadata_depth)",
                )
            if isinstance(value, Mapping):
                for key, item in value.items():
                    if not isinstance(key, str):
                        raise ValidationError(where, f"expected string keys, got {type(key).__name__} {key!r:.40}")
                    check_unicode(key, f"{where} key {key!r:.40}")
                    stack.append((item, child_path(where, key), depth + 1))
            else:
                stack.extend((item, f"{where}[{i}]", depth + 1) for i, item in enumerate(value))
        elif isinstance(value, str):
            check_unicode(value, where)
        elif isinstance(value, bool) or value is None:
            pass
        elif isinstance(value, int):
            if not -INT64_MAX - 1 <= value <= INT64_MAX:
                digits = int(value.bit_length() * math.log10(2)) + 1  # str() refuses over 4,300 digits
                raise ValidationError(
                    where, f"an integer of about {digits:,} digits; expected one within 64 bits (±9.2e18), or a string"
                )
        elif isinstance(value, float):
            if not math.isfinite(value):
                raise ValidationError(where, f"expected a finite number, got {value}")
        else:
            raise ValidationError(
                where, f"expected JSON values (string, number, boolean, null, list, object), got {type(value).__name__}"
            )
    copy: dict[str, Any] = json.loads(json.dumps(dict(metadata), ensure_ascii=False))
    size = len(json.dumps(copy, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
    if size > limits.metadata_bytes:
        raise ValidationError(
            field, f"{size:,} bytes of JSON, expected at most {limits.metadata_bytes:,} (setting limits.metadata_bytes)"
        )
    return copy


def check_protected_keys(metadata: Mapping[str, Any], field: str) -> None:
    """ValidationError naming ``field.key`` unless the metadata keys the store acts on take their
    form: ``bookmarked`` and ``manual_save`` true or false (they protect a memory from retention,
    quotas and dedup), ``importance`` a number from 0 to 1 (the memory's base importance); null
    or absent for none. ``"no"`` must not bookmark a memory, nor ``7`` be kept and ignored."""
    for key in ("bookmarked", "manual_save"):
        value = metadata.get(key)
        if value is not None and not isinstance(value, bool):
            raise ValidationError(child_path(field, key), f"expected true or false, got {_short(value)}")
    importance = metadata.get("importance")
    if importance is not None and (
        isinstance(importance, bool) or not isinstance(importance, int | float) or not 0 <= importance <= 1
    ):
        raise ValidationError(
            child_path(field, "importance"), f"expected a number from 0 to 1, got {_short(importance)}"
        )


def child_path(where: str, key: str) -> str:
    """``where.key``, or ``where['key']`` (quoted and escaped, at most 40 characters) for a key that
    is not a plain word: a key with a newline or a surrogate must not break the one-line error."""
    if key and key.isascii() and all(c.isalnum() or c in "_-$" for c in key):
        return f"{where}.{key}" if where else key
    return f"{where}[{repr(key)[:40]}]"


def check_epoch(value: Any, field: str) -> float:
    """``value`` (epoch seconds, ``datetime`` or ISO 8601 text) as epoch seconds of a date between
    the years 1 and 9999; else ValidationError naming ``field``."""
    try:
        epoch = to_epoch(value, field)
    except ValidationError as exc:
        raise ValidationError(field, exc.message.split(": ", 1)[-1]) from None
    except (OverflowError, ValueError, OSError):  # a datetime without a zone at the ends of the range
        epoch = math.nan
    if not math.isfinite(epoch) or not EARLIEST.timestamp() <= epoch <= LATEST.timestamp():
        raise ValidationError(
            field,
            f"expected a date from 0001-01-01 to 9999-12-31 (ISO 8601 or epoch seconds), got {_short(value)}",
        )
    return epoch


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


#: The forms an origin takes, for the error that refuses another.
ORIGIN_FORMS = "'user', 'user_confirmed', 'assistant', 'tool[:NAME]', 'file[:PATH]', 'web[:URL]' or 'system'"


def check_origin(origin: Any, field: str) -> str:
    """``origin`` in its stored form (:func:`make_origin`), or ValidationError naming ``field``."""
    if not isinstance(origin, str):
        raise ValidationError(field, f"expected {ORIGIN_FORMS}")
    try:
        return make_origin(*parse_origin(origin))
    except ValueError:
        raise ValidationError(field, f"expected {ORIGIN_FORMS}, got {origin[:40]!r}") from None


def validate_item(item: Mapping[str, Any], prefix: str, limits: Limits = DEFAULT_LIMITS) -> dict[str, Any]:
    """Validate one store item; raises ValidationError naming ``prefix + field``."""
    content = check_text(
        item.get("content"), prefix + "content", max_chars=limits.content_chars, setting="content_chars"
    )
    metadata = check_metadata(item.get("metadata"), prefix + "metadata", limits)
    check_protected_keys(metadata, prefix + "metadata")
    session_id = item.get("session_id")
    if session_id is not None:
        if not isinstance(session_id, str) or not session_id.strip():
            raise ValidationError(prefix + "session_id", "expected a non-empty string or None")
        if len(session_id) > SESSION_ID_MAX_CHARS:
            raise ValidationError(
                prefix + "session_id", f"expected at most {SESSION_ID_MAX_CHARS} characters, got {len(session_id)}"
            )
        check_unicode(session_id, prefix + "session_id")
    timestamp = item.get("timestamp")
    epoch = None if timestamp is None else check_epoch(timestamp, prefix + "timestamp")
    chunk = item.get("chunk")
    if isinstance(chunk, ChunkMetadata):
        chunk = chunk.to_dict()
    elif chunk is not None:
        try:
            chunk = ChunkMetadata(**chunk).to_dict()
        except TypeError as exc:
            raise ValidationError(
                prefix + "chunk", f"expected parent_id, index, total[, start_word, end_word]: {exc}"
            ) from None
    origin = item.get("origin")
    if origin is not None:
        origin = check_origin(origin, prefix + "origin")
    return {
        "content": content,
        "origin": origin,
        "type": parse_enum(MemoryType, item.get("type", "action"), prefix + "type"),
        "metadata": metadata,
        "session_id": session_id,
        "timestamp": epoch,
        "source": parse_enum(MemorySource, item.get("source", "manual"), prefix + "source"),
        "memory_class": None
        if item.get("memory_class") is None
        else parse_enum(MemoryClass, item["memory_class"], prefix + "memory_class"),
        "chunk": chunk,
    }


def check_batch(items: Any, limits: Limits = DEFAULT_LIMITS) -> None:
    """ValidationError unless ``items`` is a list of at most ``limits.batch_items`` entries."""
    if not isinstance(items, list | tuple):
        raise ValidationError("items", "expected a list of dicts with at least 'content'")
    if len(items) > limits.batch_items:
        raise ValidationError(
            "items",
            f"{len(items):,} items, expected at most {limits.batch_items:,} per batch (setting limits.batch_items); "
            "split the batch",
        )


def parse_json(text: str, field: str, *, example: str = '{"success": true}') -> Any:
    """``json.loads(text)``, or ValidationError naming ``field`` and the expected form, for any
    text: invalid JSON, nesting deeper than Python can parse, an integer too long to convert."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValidationError(field, "nested too deeply to parse; expected a shallow JSON value") from None
    except json.JSONDecodeError as exc:
        raise ValidationError(field, f"expected JSON, e.g. '{example}' ({exc})") from None
    except ValueError:  # "Exceeds the limit (4300 digits) for integer string conversion"
        raise ValidationError(
            field, "holds an integer of more than 4,300 digits; expected integers within 64 bits (±9.2e18)"
        ) from None


def parse_enum(kind: Any, value: Any, field: str) -> Any:
    """``kind(value)``, or ValidationError naming ``field`` and listing the valid values."""
    try:
        return kind(value)
    except (ValueError, TypeError):
        valid = ", ".join(m.value for m in kind)
        raise ValidationError(field, f"unknown value {_short(value)}; expected one of {valid}") from None
