"""The time anchors a query names (engine/retrieval/anchors.py): "10 days ago", "last week", "on May
3rd" as windows of creation times measured from a reference time; spans asked about ("How many
days ago …"), future phrases and quoted or pasted text are not anchors."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from remindful.engine.retrieval.anchors import Window, moment, weight, windows, without
from remindful.errors import ValidationError

#: A Tuesday evening.
NOW = datetime(2023, 5, 30, 20, 0, tzinfo=UTC)
DAY = 86400.0


def days_before(window: Window, now: datetime = NOW) -> tuple[float, float]:
    """A window as (how many days before ``now`` it starts, and ends)."""
    at = now.timestamp()
    return round((at - window.start) / DAY, 2), round((at - window.end) / DAY, 2)


def only(query: str, now: datetime = NOW) -> Window:
    found = windows(query, now)
    assert len(found) == 1, (query, found)
    return found[0]


def day(y: int, m: int, d: int) -> float:
    return datetime(y, m, d, tzinfo=UTC).timestamp()


@pytest.mark.parametrize(
    ("query", "centre", "tolerance"),
    [
        ("What kitchen appliance did I buy 10 days ago?", 10, 3),
        ("I mentioned participating in a sports event two weeks ago. What was the event?", 14, 4.2),
        ("what did I say 2 weeks ago about the deploy", 14, 4.2),
        ("the bug we fixed a week ago", 7, 3.5),
        ("the bug we fixed one week ago", 7, 3.5),
        ("what did I order a day ago", 1, 0.5),
        ("the book I started 3 months ago", 3 * 30.44, 0.3 * 3 * 30.44),
        ("where did we go a year ago", 365.25, 0.5 * 365.25),
        ("the recipe from a couple of weeks ago", 14, 7),
        ("what I tried a few days ago", 3, 1.5),
        ("several days ago I mentioned a book", 4, 2),
        ("TEN DAYS AGO I bought a blender", 10, 3),
    ],
)
def test_an_amount_ago_is_that_moment_give_or_take_a_share_of_it(query: str, centre: float, tolerance: float) -> None:
    window = only(query)
    start, end = days_before(window)
    assert start == pytest.approx(centre + tolerance, abs=0.01)
    assert end == pytest.approx(max(centre - tolerance, 0.0), abs=0.01)
    assert window.margin / DAY == pytest.approx(tolerance, abs=0.01)


def test_two_weeks_ago_is_ten_to_eighteen_days_before_now() -> None:
    start, end = days_before(only("the event two weeks ago"))
    assert 17.5 <= start <= 18.5
    assert 9.5 <= end <= 10.5


def test_hours_and_minutes_ago() -> None:
    # Give or take 30 % of the span (36 minutes of two hours), at least half a unit.
    assert days_before(only("the error I saw 2 hours ago")) == (round(2.6 / 24, 2), round(1.4 / 24, 2))
    assert days_before(only("the error I saw an hour ago")) == (round(1.5 / 24, 2), round(0.5 / 24, 2))
    start, end = days_before(only("what did I paste 30 minutes ago"))
    assert (start, end) == (round(39 / 1440, 2), round(21 / 1440, 2))


@pytest.mark.parametrize(
    "query",
    [
        "How many days ago did I buy a smoker?",
        "How many weeks ago did I attend the friends and family sale at Nordstrom?",
        "how many months ago did I book the Airbnb in San Francisco?",
        "How long ago did I start learning Spanish?",
        "how much time ago was the release",
        "the log line says `updated 3 days ago`",
        'the test prints "cached 2 days ago" and fails',
        "the message 'last modified 5 days ago' is wrong",
        "```\nINFO job finished 3 days ago\n```\nwhy is this stale?",
        "what do I have planned in two weeks?",
        "what is on next week?",
        "I'll do it next month",
        "show me the last commit",
        "the last time we deployed",
        "what was the last thing I said",
        "a long time ago in a galaxy far away",
        "write a haiku about autumn",
        "give me a banana bread recipe",
        "how do I deploy this project?",
        "fix the test on line 42",
        "I may 3D-print a case for it",
        "5 may be enough",
        "you may call me at 5",
        "what happened in the past",
        "the 3 days of the conference",
        "a while ago I mentioned a book",
        "",
    ],
)
def test_no_anchor(query: str) -> None:
    assert windows(query, NOW) == ()


def test_a_span_question_keeps_its_other_anchor() -> None:
    (window,) = windows("How many days ago did I buy the smoker I mentioned last week?", NOW)
    assert window.phrase == "last week"


def test_yesterday_today_and_the_day_before() -> None:
    assert (only("what did we decide yesterday?").start, only("yesterday").end) == (day(2023, 5, 29), day(2023, 5, 30))
    window = only("what did I say the day before yesterday")
    assert (window.start, window.end) == (day(2023, 5, 28), day(2023, 5, 29))
    window = only("what did I do this morning")
    assert (window.start, window.end) == (day(2023, 5, 30), NOW.timestamp())
    assert only("what did we discuss today").start == day(2023, 5, 30)
    window = only("the movie I watched last night")
    assert window.start < day(2023, 5, 30) < window.end


def test_calendar_periods() -> None:
    # Tuesday 2023-05-30: last week is Monday 22nd to Sunday 28th, last weekend Saturday 27th (to the Monday).
    window = only("Where did I attend the religious activity last week?")
    assert (window.start, window.end) == (day(2023, 5, 22), day(2023, 5, 29))
    window = only("What cocktail did I try last weekend?")
    assert (window.start, window.end) == (day(2023, 5, 27), day(2023, 5, 30))
    window = only("what did I read last month")
    assert (window.start, window.end) == (day(2023, 4, 1), day(2023, 5, 1))
    window = only("what did I read this month")
    assert (window.start, window.end) == (day(2023, 5, 1), NOW.timestamp())
    window = only("where did we travel last year")
    assert (window.start, window.end) == (day(2022, 1, 1), day(2023, 1, 1))
    window = only("what did I cook this week")
    assert (window.start, window.end) == (day(2023, 5, 29), NOW.timestamp())
    window = only("the bar we went to last Friday")
    assert (window.start, window.end) == (day(2023, 5, 26), day(2023, 5, 27))
    window = only("what did I buy last Tuesday")  # today is a Tuesday: the one a week ago
    assert window.start == day(2023, 5, 23)


def test_last_weekend_seen_on_a_sunday_is_the_one_before() -> None:
    sunday = datetime(2023, 5, 28, 12, tzinfo=UTC)
    window = only("what did I do last weekend", sunday)
    assert window.start == day(2023, 5, 20)


@pytest.mark.parametrize(
    ("query", "days"),
    [
        ("How many plants did I acquire in the last month?", 30.44),
        ("what did I buy in the past two weeks", 14),
        ("the cuisines I tried in the past few months", 3 * 30.44),
        ("over the last 3 days what did I eat", 3),
        ("within the past year", 365.25),
        ("the trips I took in the past three months", 3 * 30.44),
    ],
)
def test_the_last_so_many_units_run_until_now(query: str, days: float) -> None:
    start, end = days_before(only(query))
    assert (start, end) == (pytest.approx(days, abs=0.01), 0.0)


@pytest.mark.parametrize(
    ("query", "when"),
    [
        ("what did I do on May 3rd?", (2023, 5, 3)),
        ("what happened on 3 May", (2023, 5, 3)),
        ("the call on the 3rd of May", (2023, 5, 3)),
        ("notes from Jan 12, 2022", (2022, 1, 12)),
        ("notes from 2022-01-12", (2022, 1, 12)),
        ("my birthday on december 24", (2022, 12, 24)),  # no year: the last one before now
        ("what did I do on May 31", (2023, 5, 31)),  # tomorrow: said in another time zone, perhaps
        ("the party on June 2nd", (2022, 6, 2)),
    ],
)
def test_a_date_is_its_day(query: str, when: tuple[int, int, int]) -> None:
    window = only(query)
    assert (window.start, window.end) == (day(*when), day(*when) + DAY)
    assert window.margin == DAY


def test_a_month_is_not_an_anchor_a_day_is() -> None:
    # What happened in a month is told in the next as often as in it (LoCoMo's dev questions).
    for query in ("what did I do in March", "what did I do in May 2021", "what did I do last May"):
        assert windows(query, NOW) == ()
    assert windows("what did I eat on February 30", NOW) == ()


def test_several_anchors_in_order() -> None:
    found = windows("what did I say yesterday about what I bought 10 days ago?", NOW)
    assert [w.phrase for w in found] == ["yesterday", "10 days ago"]


def test_days_begin_in_the_reference_times_zone() -> None:
    tokyo = timezone(timedelta(hours=9))
    window = only("what did we decide yesterday?", NOW.astimezone(tokyo))  # 05:00 on the 31st in Tokyo
    assert window.start == datetime(2023, 5, 30, tzinfo=tokyo).timestamp()


def test_weight_is_one_inside_and_fades_over_the_margin() -> None:
    window = Window(start=100 * DAY, end=110 * DAY, margin=4 * DAY, phrase="x")
    assert weight(105 * DAY, (window,)) == 1.0
    assert weight(100 * DAY, (window,)) == 1.0
    assert weight(98 * DAY, (window,)) == pytest.approx(0.5)
    assert weight(113 * DAY, (window,)) == pytest.approx(0.25)
    assert weight(95 * DAY, (window,)) == 0.0
    assert weight(105 * DAY, ()) == 0.0
    other = Window(start=90 * DAY, end=95 * DAY, margin=DAY, phrase="y")
    assert weight(95.5 * DAY, (window, other)) == pytest.approx(0.5)


def test_moment_takes_a_datetime_iso_text_or_epoch_seconds() -> None:
    assert moment(NOW) == NOW
    assert moment("2023-05-30T20:00:00Z") == NOW
    assert moment("2023-05-30T22:00:00+02:00").utcoffset() == timedelta(hours=2)
    assert moment(NOW.timestamp()).timestamp() == NOW.timestamp()
    assert moment(NOW.timestamp()).tzinfo is not None


@pytest.mark.parametrize("bad", ["yesterday", "2023-13-01", True, [2023], float("nan"), float("inf"), 1e20])
def test_a_bad_reference_time_is_one_line_naming_the_field(bad: object) -> None:
    with pytest.raises(ValidationError) as raised:
        moment(bad, "now")
    assert raised.value.field == "now"
    assert "\n" not in str(raised.value)


def test_without_drops_the_relative_phrases_and_keeps_dates() -> None:
    query = "What kitchen appliance did I buy 10 days ago, after the sale on May 3rd?"
    left = without(query, windows(query, NOW))
    assert "ago" not in left
    assert "May 3rd" in left
    assert without("what did I buy?", ()) == "what did I buy?"
