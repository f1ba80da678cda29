"""When cycles run: ``[schedule]`` as an APScheduler trigger (an interval or a cron line, with
jitter), and in words. The config checks a cron line with it; the daemon runs on it."""

from __future__ import annotations

import re
from typing import Any

from auditor.config.tables import ScheduleConfig

_CRON_WEEKDAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat", "sun")


def cron_trigger(expr: str, timezone: Any = None, jitter: float | None = None) -> Any:
    """An APScheduler CronTrigger for a crontab line (minute hour day month weekday).

    APScheduler 3 numbers weekdays from Monday = 0, crontab from Sunday = 0 (7 too): numeric
    weekdays are translated to names so ``0``, ``1-5`` mean what they mean in crontab."""
    from apscheduler.triggers.cron import CronTrigger

    fields = expr.split()
    if len(fields) != 5:
        raise ValueError(f"expected 5 fields (minute hour day month weekday), got {len(fields)}")
    weekday = re.sub(r"(?<![/\w])([0-7])(?!\w)", lambda m: _CRON_WEEKDAYS[int(m.group(1))], fields[4])
    return CronTrigger(
        minute=fields[0],
        hour=fields[1],
        day=fields[2],
        month=fields[3],
        day_of_week=weekday,
        timezone=timezone,
        jitter=int(jitter) if jitter else None,
    )


def make_trigger(schedule: ScheduleConfig) -> Any:
    from apscheduler.triggers.interval import IntervalTrigger

    tz = schedule_timezone(schedule)
    jitter = int(schedule.jitter) if schedule.jitter else None
    if schedule.cron:
        return cron_trigger(schedule.cron, tz, jitter)
    return IntervalTrigger(seconds=schedule.interval or 3600.0, jitter=jitter, timezone=tz)


def schedule_timezone(schedule: ScheduleConfig) -> Any:
    if schedule.timezone:
        import zoneinfo

        return zoneinfo.ZoneInfo(schedule.timezone)
    from tzlocal import get_localzone

    return get_localzone()


def describe_schedule(schedule: ScheduleConfig) -> str:
    what = f"cron '{schedule.cron}'" if schedule.cron else f"every {schedule.interval:g} s"
    if schedule.timezone:
        what += f" ({schedule.timezone})"
    if schedule.jitter:
        what += f", jitter up to {schedule.jitter:g} s"
    return what
