"""How the dashboard writes numbers: counts with their noun in the right number, thousands grouped,
durations in a unit a person reads (the Jinja filters ``count``, ``num``, ``ms``, ``minutes``,
``setting``)."""

from __future__ import annotations

import math
from typing import Any

#: What stands for a value there is none of.
DASH = "\u2013"
#: Nouns whose plural is not the noun plus "s".
_PLURALS = {
    "search": "searches",
    "memory": "memories",
}


def plural(noun: str, n: float) -> str:
    """``noun`` in the number ``n`` asks for: ``memory`` for 1, ``memories`` otherwise."""
    if n == 1:
        return noun
    head, _, last = noun.rpartition(" ")  # "forgotten memory": the last word takes the number
    if last in _PLURALS:
        many = _PLURALS[last]
    elif last.endswith("y") and last[-2:-1] not in ("a", "e", "o", "u"):
        many = last[:-1] + "ies"
    else:
        many = last + ("es" if last.endswith(("s", "sh", "ch", "x")) else "s")
    return f"{head} {many}" if head else many


def num(value: Any, digits: int = 0) -> str:
    """A number with its thousands grouped (``10,000``), ``digits`` decimals at most, trailing zeros
    dropped; ``?`` for an unknown one (None), the value itself for anything that is not a number."""
    if value is None:
        return "?"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if digits <= 0 or float(value).is_integer():
        return f"{round(value):,}"
    text = f"{value:,.{digits}f}".rstrip("0").rstrip(".")
    return text


def count(value: Any, noun: str, digits: int = 0) -> str:
    """``1 search``, ``3 searches``, ``1,204 memories``; an unknown count (None) is ``? <plural>``."""
    if value is None:
        return f"? {plural(noun, 2)}"
    return f"{num(value, digits)} {plural(noun, value)}"


def ms(value: Any) -> str:
    """A duration in milliseconds as precise as it matters: ``165 ms``, ``4.2 ms``, ``0.37 ms``;
    ``1.2 s`` from a second on; a dash for none."""
    if value is None:
        return DASH
    value = float(value)
    if value >= 1000:
        return f"{num(value / 1000, 1)} s"
    if value >= 10:
        return f"{round(value):,} ms"
    if value >= 1:
        return f"{num(value, 1)} ms"
    return f"{num(value, 2)} ms"


def minutes(value: Any) -> str:
    """A span given in minutes: ``45 s``, ``12 min``, ``5.5 h``, ``3.2 days``."""
    if value is None:
        return DASH
    value = float(value)
    if value < 1:
        return f"{round(value * 60)} s"
    if value < 90:
        return f"{num(value, 0 if value >= 10 else 1)} min"
    if value < 48 * 60:
        return f"{num(value / 60, 1)} h"
    return count(round(value / 1440, 1), "day", 1)


def setting(value: Any) -> str:
    """A setting's value as the config file writes it: ``true``/``false``, ``null`` shown as empty."""
    if value is True:
        return "true"
    if value is False:
        return "false"
    return "" if value is None else str(value)


__all__ = ["count", "minutes", "ms", "num", "plural", "setting"]
