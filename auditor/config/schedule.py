"""When cycles run: ``[schedule]`` as an APScheduler trigger (an interval or a cron line, with
jitter), and in words. The config checks a cron line with it; the daemon runs on it."""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta
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


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def make_trigger(schedule: ScheduleConfig, shared: bool = False) -> Any:
    """The schedule's trigger. ``shared`` (auditors on one job queue): an interval's cycles
    fall on multiples of it since the epoch, so every auditor's daemon reaches the same cycle
    (a cron line is the same for all as it is)."""
    from apscheduler.triggers.interval import IntervalTrigger

    tz = schedule_timezone(schedule)
    jitter = int(schedule.jitter) if schedule.jitter else None
    if schedule.cron:
        return cron_trigger(schedule.cron, tz, jitter)
    start = EPOCH if shared else None
    return IntervalTrigger(seconds=schedule.interval or 3600.0, jitter=jitter, timezone=tz, start_date=start)


def cycle_tick(schedule: ScheduleConfig, now: datetime) -> tuple[datetime, datetime | None]:
    """When the cycle due at ``now`` (aware) was scheduled, without jitter, and when the next
    one is: the latest time at or before ``now`` that the schedule names (an interval's
    multiples since the epoch). Every auditor on one schedule finds the same time for the
    same cycle, however late its daemon fires (jitter, misfire grace, a run at start)."""
    if not schedule.cron:
        step = schedule.interval or 3600.0
        since = (now - EPOCH).total_seconds()
        tick = EPOCH + timedelta(seconds=math.floor(since / step) * step)
        return tick, tick + timedelta(seconds=step)
    trigger = cron_trigger(schedule.cron, schedule_timezone(schedule))
    back = timedelta(minutes=1)
    first = None
    while back <= timedelta(days=800):  # a cron line fires at least every year (leap days: four)
        first = trigger.get_next_fire_time(None, now - back)
        if first is not None and first <= now:
            break
        back *= 2
    else:
        return now, trigger.get_next_fire_time(None, now)  # a line that never fires: this moment
    tick = first
    while True:
        following = trigger.get_next_fire_time(tick, tick + timedelta(seconds=1))
        if following is None or following > now:
            return tick, following
        tick = following


def schedule_period(schedule: ScheduleConfig, now: datetime) -> float:
    """Seconds from the cycle due at ``now`` to the next, jitter included: an interval, or a
    cron line's current gap (a weekday cron's is longer over the weekend). A cycle that has not
    completed for twice this was missed (contrib/prometheus: AuditorNoRecentCycle)."""
    tick, following = cycle_tick(schedule, now)
    gap = (following - tick).total_seconds() if following is not None else (schedule.interval or 3600.0)
    return gap + schedule.jitter


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
