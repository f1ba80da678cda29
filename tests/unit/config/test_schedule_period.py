"""The schedule's period, against which a missed cycle is told (auditor_schedule_interval_seconds,
the rule AuditorNoRecentCycle): the expected values are worked out by hand from the calendar."""

from __future__ import annotations

from datetime import UTC, datetime

from auditor.config.schedule import schedule_period
from auditor.config.tables import ScheduleConfig


def test_an_interval_is_its_period_and_the_jitter_is_added() -> None:
    now = datetime(2026, 12, 7, 10, 0, 7, tzinfo=UTC)
    assert schedule_period(ScheduleConfig(interval=600.0), now) == 600.0
    assert schedule_period(ScheduleConfig(interval=600.0, jitter=30.0), now) == 630.0


def test_a_cron_line_has_its_current_gap() -> None:
    weekdays = ScheduleConfig(interval=None, cron="0 9 * * 1-5", timezone="UTC")
    friday_noon = datetime(2026, 12, 11, 12, 0, tzinfo=UTC)  # Friday 09:00 -> Monday 09:00
    assert schedule_period(weekdays, friday_noon) == 72 * 3600.0
    tuesday = datetime(2026, 12, 8, 12, 0, tzinfo=UTC)  # Tuesday 09:00 -> Wednesday 09:00
    assert schedule_period(weekdays, tuesday) == 24 * 3600.0
    quarter = ScheduleConfig(interval=None, cron="*/15 * * * *", timezone="UTC")
    assert schedule_period(quarter, datetime(2026, 12, 8, 12, 7, tzinfo=UTC)) == 900.0
