"""Cron schedules as CronJobs use them (``github.com/robfig/cron/v3``, ``ParseStandard``):
five fields (minute, hour, day of month, month, day of week) with ``*``, ``?``, ranges, steps,
lists and month and day names, or a descriptor (``@hourly``, ``@daily``, ...). As in cron, when
both the day of month and the day of week are restricted, a day matching either is chosen.
Times are UTC unless the CronJob names a ``timeZone``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

_DESCRIPTORS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_MONTHS = {
    m: i + 1
    for i, m in enumerate(
        ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
    )
}
_DAYS = {d: i for i, d in enumerate(["sun", "mon", "tue", "wed", "thu", "fri", "sat"])}
_BOUNDS = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 6))
_FIELD_NAMES = ("minute", "hour", "day of month", "month", "day of week")
MAX_YEARS = 5  # a schedule with no time in this many years (Feb 30) never fires


class CronError(ValueError):
    """A schedule that does not parse."""


@dataclass(frozen=True)
class Schedule:
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]
    days_star: bool
    weekdays_star: bool

    def _day_matches(self, moment: datetime) -> bool:
        weekday = (moment.weekday() + 1) % 7  # cron counts from Sunday
        in_days = moment.day in self.days
        in_weekdays = weekday in self.weekdays
        if self.days_star or self.weekdays_star:
            return in_days and in_weekdays
        return in_days or in_weekdays

    def next_after(self, moment: datetime) -> datetime | None:
        """The first scheduled minute strictly after ``moment``."""
        t = moment.replace(second=0, microsecond=0) + timedelta(minutes=1)
        limit = moment + timedelta(days=366 * MAX_YEARS)
        while t <= limit:
            if t.month not in self.months:
                t = (t.replace(day=1, hour=0, minute=0) + timedelta(days=32)).replace(day=1)
                continue
            if not self._day_matches(t):
                t = t.replace(hour=0, minute=0) + timedelta(days=1)
                continue
            if t.hour not in self.hours:
                t = t.replace(minute=0) + timedelta(hours=1)
                continue
            if t.minute not in self.minutes:
                t += timedelta(minutes=1)
                continue
            return t
        return None


def _value(text: str, index: int) -> int:
    names = _MONTHS if index == 3 else _DAYS if index == 4 else {}
    lowered = text.lower()
    if lowered in names:
        return names[lowered]
    if not text.isdigit():
        raise CronError(f"failed to parse int from {text}: strconv.Atoi: parsing {text!r}")
    return int(text)


def _field(text: str, index: int) -> tuple[frozenset[int], bool]:
    low, high = _BOUNDS[index]
    values: set[int] = set()
    star = False
    for part in text.split(","):
        range_part, slash, step_text = part.partition("/")
        step = 1
        if slash:
            if not step_text.isdigit() or int(step_text) == 0:
                raise CronError(f"invalid step in {_FIELD_NAMES[index]}: {part}")
            step = int(step_text)
        if range_part in ("*", "?"):
            start, end = low, high
            star = star or not slash
        elif "-" in range_part:
            a, _, b = range_part.partition("-")
            start, end = _value(a, index), _value(b, index)
        else:
            start = _value(range_part, index)
            end = high if slash else start
        if index == 4 and end == 7:
            end = 6 if start <= 6 else 0
            values.add(0)
        if start < low or end > high or start > end:
            raise CronError(
                f"end of range ({end}) above maximum ({high}): {part}"
                if end > high
                else f"beginning of range ({start}) below minimum ({low}): {part}"
                if start < low
                else f"beginning of range ({start}) beyond end of range ({end}): {part}"
            )
        values.update(range(start, end + 1, step))
    return frozenset(values), star


def parse_schedule(text: str) -> Schedule:
    spec = text.strip()
    if spec.startswith("TZ=") or spec.startswith("CRON_TZ="):
        raise CronError("cannot use TZ or CRON_TZ in schedule, use timeZone field instead")
    spec = _DESCRIPTORS.get(spec, spec)
    if spec.startswith("@"):
        raise CronError(f"unrecognized descriptor: {spec}")
    fields = spec.split()
    if len(fields) != 5:
        raise CronError(f"expected exactly 5 fields, found {len(fields)}: {spec}")
    parsed = [_field(f, i) for i, f in enumerate(fields)]
    return Schedule(
        minutes=parsed[0][0],
        hours=parsed[1][0],
        days=parsed[2][0],
        months=parsed[3][0],
        weekdays=parsed[4][0],
        days_star=parsed[2][1],
        weekdays_star=parsed[4][1],
    )
