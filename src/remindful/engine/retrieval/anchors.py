"""Time anchors in a query: "what did I buy 10 days ago?" asks about what was said then.

:func:`windows` reads the relative (and absolute) time phrases of a query as windows of creation
times, measured from a reference time ``now``; the search favours the memories created in them
(:func:`weight`, a soft boost: an anchor is approximate and a memory may state a date of its own).

Read (case-insensitive, English):

- ``N minutes|hours|days|weeks|months|years ago`` (N a number, a word up to twelve, "a", "an",
  "a couple of", "a few", "several"): the moment N units before ``now``, give or take
  ``max(half a unit, 30 % of the span)`` (vague amounts: half the span), so "two weeks ago" is
  10 to 18 days before ``now``;
- ``yesterday``, ``the day before yesterday``, ``today``, ``this morning``, ``tonight``, ``last night``;
- ``last|this week``, ``last|this weekend``, ``last|this month``, ``last|this year`` (calendar
  periods; weeks start on Monday), ``last Monday`` … ``last Sunday`` (the most recent such day
  before today);
- ``in|over|during|within the last|past N days|weeks|months|years`` ("the past few months", "the
  last month"): from N units before ``now`` until ``now``;
- dates: ``May 3rd``, ``3 May``, ``May 3, 2023``, ``2023-05-03`` (a day; without a year the most
  recent one not after tomorrow).

Not anchors: a month ("in March 2023": what happened in a month is told during the next as often as
in it: on the LoCoMo dev questions such a window put memories of the month above the evidence told
after it), a question about a span ("How many days ago did I …", "how long ago"), future phrases
("in two weeks", "next week"), and anything inside quotes or backticks (pasted code and log text:
"the log says `updated 3 days ago`").
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from remindful.engine.sqlfilter import to_epoch
from remindful.errors import ValidationError

DAY = 86400.0
#: Seconds in each unit (months and years on average).
UNITS = {
    "minute": 60.0,
    "hour": 3600.0,
    "day": DAY,
    "week": 7 * DAY,
    "month": 30.44 * DAY,
    "year": 365.25 * DAY,
}
NUMBERS = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
    "a couple of": 2,
    "a couple": 2,
    "couple of": 2,
    "a few": 3,
    "few": 3,
    "several": 4,
}
#: Amounts said loosely: their tolerance is half the span.
VAGUE = frozenset({"a couple of", "a couple", "couple of", "a few", "few", "several"})
MONTHS = {
    name: number
    for number, names in enumerate(
        (
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ),
        1,
    )
    for name in names
}
WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")

_AMOUNT = r"(?P<n>\d{1,4}|" + "|".join(sorted((re.escape(k) for k in NUMBERS), key=len, reverse=True)) + r")"
_UNIT = r"(?P<unit>minute|hour|day|week|month|year)s?"
_MONTH = r"(?P<month>" + "|".join(sorted(MONTHS, key=len, reverse=True)) + r")\.?"
_DAYNUM = r"(?P<day>[0-3]?\d)(?:st|nd|rd|th)?"
_YEAR = r"(?P<year>(?:19|20)\d\d)"

#: Text the anchors are not looked for in: quoted or back-ticked (code, log lines, titles).
_QUOTED = re.compile(r"```.*?```|`[^`\n]*`|\"[^\"\n]*\"|“[^”\n]*”|(?<!\w)'[^'\n]*'(?!\w)", re.DOTALL)
#: A span asked about, not an anchor: "how many days ago", "how long ago", "how many weeks ago".
_SPAN_QUESTION = re.compile(r"\bhow\s+(?:many\s+\w+|much\s+time|long)\s+ago\b", re.IGNORECASE)

_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (name, re.compile(pattern, re.IGNORECASE))
    for name, pattern in (
        ("ago", rf"\b{_AMOUNT}\s+{_UNIT}\s+ago\b"),
        ("since", rf"\b(?:in|over|during|within|for)\s+the\s+(?:last|past)\s+(?:{_AMOUNT}\s+)?{_UNIT}\b"),
        ("day before yesterday", r"\bthe\s+day\s+before\s+yesterday\b"),
        ("yesterday", r"\byesterday\b"),
        ("last night", r"\blast\s+night\b"),
        ("today", r"\b(?:today|this\s+morning|tonight|this\s+afternoon|this\s+evening)\b"),
        ("period", r"\b(?P<which>last|this|past)\s+(?P<period>weekend|week|month|year)\b"),
        ("weekday", r"\blast\s+(?P<weekday>" + "|".join(WEEKDAYS) + r")\b"),
        ("iso", rf"\b{_YEAR}-(?P<month>[01]\d)-(?P<day>[0-3]\d)\b"),
        ("month day", rf"\b{_MONTH}\s+{_DAYNUM}\b(?:,?\s+{_YEAR}\b)?"),
        ("day month", rf"\b{_DAYNUM}\s+(?:of\s+)?{_MONTH}\b(?:,?\s+{_YEAR}\b)?"),
    )
)


@dataclass(frozen=True, slots=True)
class Window:
    """Creation times a query's anchor points at: ``start`` to ``end`` (epoch seconds), the
    boost fading over ``margin`` seconds on either side; ``phrase`` is the query's words;
    ``relative``: measured from the reference time ("10 days ago"), not a date ("May 3rd"), whose
    words a memory's text (or its window's date) may hold too."""

    start: float
    end: float
    margin: float
    phrase: str
    relative: bool = True


def windows(query: str, now: datetime) -> tuple[Window, ...]:
    """The time anchors of ``query`` as windows, measured from ``now`` (an aware datetime: its
    time zone decides where days begin), in the order they appear; () when it has none."""
    if not _has_hint(query):
        return ()
    text = _QUOTED.sub(lambda m: " " * len(m.group(0)), query)
    spans = [m.span() for m in _SPAN_QUESTION.finditer(text)]
    found: list[tuple[int, Window]] = []
    taken: list[tuple[int, int]] = []
    for name, pattern in _PATTERNS:
        for match in pattern.finditer(text):
            start, end = match.span()
            if any(s < end and start < e for s, e in spans + taken):
                continue
            window = _window(name, match, now)
            if window is not None:
                taken.append((start, end))
                found.append((start, window))
    return tuple(window for _, window in sorted(found, key=lambda item: item[0]))


def without(query: str, anchored: tuple[Window, ...]) -> str:
    """``query`` without the phrases of its ``anchored`` windows measured from the reference time
    ("10 days ago", "last week": what is left names its subject); dates stay (a memory may say them)."""
    for window in anchored:
        if window.relative:
            query = query.replace(window.phrase, " ", 1)
    return query


def moment(value: Any, field: str = "now") -> datetime:
    """A reference time given as a datetime, ISO 8601 text or epoch seconds, as an aware datetime
    in its own time zone (a naive one, text without an offset and epoch seconds: the local one);
    raises ValidationError naming ``field``."""
    at = to_epoch(value, field)
    zone = value.tzinfo if isinstance(value, datetime) else None
    if isinstance(value, str):
        zone = datetime.fromisoformat(value.strip().replace("Z", "+00:00")).tzinfo
    try:
        if not math.isfinite(at):
            raise ValueError(at)
        return datetime.fromtimestamp(at, zone) if zone is not None else datetime.fromtimestamp(at).astimezone()
    except (ValueError, OverflowError, OSError):
        raise ValidationError(field, f"expected a date/time from year 1 to 9999, got {value!r}") from None


def weight(created_at: float, anchors: tuple[Window, ...]) -> float:
    """How much a memory created at ``created_at`` lies in ``anchors``: 1 inside a window, falling
    linearly to 0 over its margin outside it (the best of the windows)."""
    best = 0.0
    for w in anchors:
        if w.start <= created_at <= w.end:
            return 1.0
        distance = w.start - created_at if created_at < w.start else created_at - w.end
        if w.margin > 0 and distance < w.margin:
            best = max(best, 1.0 - distance / w.margin)
    return best


_HINT = re.compile(
    r"ago|yesterday|today|tonight|this|last|past|\d|" + "|".join(sorted(MONTHS, key=len, reverse=True)),
    re.IGNORECASE,
)


def _has_hint(query: str) -> bool:
    """A cheap test before the patterns: most queries name no time at all."""
    return _HINT.search(query) is not None


def _amount(text: str | None) -> tuple[float, bool]:
    if text is None:
        return 1.0, False
    lowered = " ".join(text.lower().split())
    if lowered.isdigit():
        return float(lowered), False
    return float(NUMBERS[lowered]), lowered in VAGUE


def _day_start(moment: datetime) -> datetime:
    return moment.replace(hour=0, minute=0, second=0, microsecond=0)


def _days(start: datetime, days: float, margin_days: float, phrase: str) -> Window:
    return Window(start.timestamp(), (start + timedelta(days=days)).timestamp(), margin_days * DAY, phrase)


def _window(name: str, match: re.Match[str], now: datetime) -> Window | None:
    phrase = match.group(0)
    at = now.timestamp()
    today = _day_start(now)
    if name == "ago":
        amount, vague = _amount(match.group("n"))
        unit = UNITS[match.group("unit").lower()]
        if amount <= 0:
            return None
        span = amount * unit
        tolerance = max(0.5 * unit, (0.5 if vague else 0.3) * span)
        return Window(at - span - tolerance, min(at - span + tolerance, at), tolerance, phrase)
    if name == "since":
        amount, vague = _amount(match.group("n"))
        span = amount * UNITS[match.group("unit").lower()]
        return Window(at - span, at, (0.5 if vague else 0.25) * span, phrase)
    if name == "day before yesterday":
        return _days(today - timedelta(days=2), 1, 0.5, phrase)
    if name == "yesterday":
        return _days(today - timedelta(days=1), 1, 0.5, phrase)
    if name == "last night":
        evening = today - timedelta(hours=6)
        return Window(evening.timestamp(), (evening + timedelta(hours=12)).timestamp(), DAY / 4, phrase)
    if name == "today":
        return Window(today.timestamp(), at, DAY / 4, phrase)
    if name == "period":
        return _period(match.group("which").lower(), match.group("period").lower(), now, phrase)
    if name == "weekday":
        wanted = WEEKDAYS.index(match.group("weekday").lower())
        back = (now.weekday() - wanted) % 7 or 7
        return _days(today - timedelta(days=back), 1, 1.0, phrase)
    if name in {"iso", "month day", "day month"}:
        return _date(match, now, phrase)
    return None


def _period(which: str, period: str, now: datetime, phrase: str) -> Window | None:
    today = _day_start(now)
    at = now.timestamp()
    if which == "past":
        # "the past week" without "in the": the last seven days (or month, year) until now.
        span = UNITS[period] if period != "weekend" else 3 * DAY
        return Window(at - span, at, 0.25 * span, phrase)
    if period == "week":
        monday = today - timedelta(days=now.weekday())
        if which == "last":
            return _days(monday - timedelta(days=7), 7, 3.0, phrase)
        return Window(monday.timestamp(), at, 2 * DAY, phrase)
    if period == "weekend":
        saturday = today - timedelta(days=(now.weekday() - 5) % 7)
        if which == "last" and now.weekday() >= 5:
            saturday -= timedelta(days=7)
        # Said of a weekend, on the Monday after too.
        return _days(saturday, 3, 2.0, phrase)
    if period == "month":
        first = today.replace(day=1)
        if which == "last":
            previous = (first - timedelta(days=1)).replace(day=1)
            return Window(previous.timestamp(), first.timestamp(), 7 * DAY, phrase)
        return Window(first.timestamp(), at, 3 * DAY, phrase)
    # a year
    first = today.replace(month=1, day=1)
    if which == "last":
        return Window(first.replace(year=first.year - 1).timestamp(), first.timestamp(), 30 * DAY, phrase)
    return Window(first.timestamp(), at, 14 * DAY, phrase)


def _date(match: re.Match[str], now: datetime, phrase: str) -> Window | None:
    month_text = match.group("month").lower().rstrip(".")
    if match.group("month") == "may":
        return None  # lower-case "may" is the verb's ("I may 3D-print it", "5 may be enough")
    month = int(month_text) if month_text.isdigit() else MONTHS[month_text]
    day = int(match.group("day"))
    year_text = match.group("year")
    try:
        if year_text is not None:
            when = _day_start(now).replace(year=int(year_text), month=month, day=day)
        else:
            when = _day_start(now).replace(month=month, day=day)
            if when > now + timedelta(days=1):
                when = when.replace(year=when.year - 1)
    except ValueError:  # no such day (February 30th, "May 0")
        return None
    return Window(when.timestamp(), (when + timedelta(days=1)).timestamp(), DAY, phrase, relative=False)
