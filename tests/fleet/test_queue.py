"""Auditors sharing a cycle's serving hosts through the job queue ([queue], auditor.queue) on
the test PostgreSQL server, without stacks: each host's job deferred once whoever joins,
takes that never overlap, a stalled auditor's hosts (its heartbeat older than the timeout by
the database's clock) retaken by a waiting one, a run that lost a host refused by the store's
transaction, hosts given back at once, and who audited what. Auditor processes on the real
stacks: tests/fleet/test_queue_stacks.py."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text

from auditor.config.schedule import cycle_tick
from auditor.config.tables import QueueConfig, ScheduleConfig
from auditor.cycle.causes import group
from auditor.fleet.window import HostPlan
from auditor.queue import cycles
from auditor.queue.fence import HostsLost
from auditor.queue.jobs import JobQueue, QueueError, conninfo
from auditor.queue.shared import SharedCycle
from auditor.queue.watch import AGAIN, DONE, GAVE_UP, watch
from auditor.results import CycleResult

HOSTS = [f"infer-{i:02d}" for i in range(1, 11)]
PLAN = HostPlan((), None, ("local",), tuple((h, (f"lite20@{h}",)) for h in HOSTS))


@pytest.fixture
def url(postgres_url: str) -> str:
    from auditor.history.store import Store

    Store.open(postgres_url, "setup").engine.dispose()  # the history's tables (cycle_hosts)
    return postgres_url


@pytest.fixture
def store(url: str):  # noqa: ANN201
    from auditor.history.store import Store

    s = Store.open(url, "test")
    yield s
    s.engine.dispose()


class Auditor:
    """One auditor's part of one cycle: its worker on the queue and its SharedCycle."""

    def __init__(self, url: str, store, who: str, cycle: cycles.CycleId, beat: float = 0.5, **cfg):  # noqa: ANN001
        self.queue = JobQueue(url, beat).open()
        config = QueueConfig(
            enabled=True, **{"claim": 3, "heartbeat": 1.0, "timeout": 3.0, "wait": 0.0, **cfg}
        )
        self.shared = SharedCycle(self.queue, cycle, PLAN, config, who, store.engine)
        self.shared.join()

    @classmethod
    def following(cls, url: str, store, who: str, cycle: cycles.CycleId, watched) -> Auditor:  # noqa: ANN001
        """A follow-up run's part: the watch's worker, with the hosts it took."""
        out = cls.__new__(cls)
        out.queue = watched.queue
        config = QueueConfig(enabled=True, claim=3, heartbeat=1.0, timeout=3.0)
        out.shared = SharedCycle(out.queue, cycle, PLAN, config, who, store.engine, taken=watched.taken)
        return out

    @staticmethod
    def jobs_of(url: str, cycle: cycles.CycleId) -> list:
        queue = JobQueue(url, 1.0).open(register=False)
        try:
            return queue.jobs(cycle.queue)
        finally:
            queue.close()

    def take_all(self) -> list[str]:
        out: list[str] = []
        while got := self.shared.claim():
            out += got
        return out

    def store_run(self, store, hosts: list[str] | None = None) -> int:  # noqa: ANN001
        run_id = store.begin_run("test.toml")
        result = CycleResult(time.time(), time.time(), "test.toml", {}, [], [])
        store.finish_run(run_id, result, {}, None, self.shared.fence(sorted(hosts or self.shared.mine)))
        return run_id

    def close(self) -> None:
        self.queue.close()


def cycle(label: str = "c1") -> cycles.CycleId:
    return cycles.named("fleet", label)


def stored(url: str, label: str) -> dict[str, str]:
    from sqlalchemy import create_engine

    engine = create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                text("SELECT host, auditor_id FROM cycle_hosts WHERE cycle = :c"), {"c": label}
            ).all()
    finally:
        engine.dispose()
    return dict(rows)


def test_a_cycles_hosts_are_deferred_once_whoever_joins(url: str, store) -> None:  # noqa: ANN001
    a = Auditor(url, store, "a", cycle())
    b = Auditor(url, store, "b", cycle())
    try:
        assert len(a.queue.jobs(cycle().queue)) == len(HOSTS)  # b's join deferred none
        other = Auditor(url, store, "a", cycle("c2"))  # another cycle: all of its hosts are due
        assert sorted(j.host for j in other.queue.jobs(cycle("c2").queue)) == HOSTS
        other.close()
    finally:
        a.close()
        b.close()


def test_two_auditors_split_the_hosts_and_store_each_once(url: str, store) -> None:  # noqa: ANN001
    a = Auditor(url, store, "a", cycle())
    b = Auditor(url, store, "b", cycle())
    try:
        first = a.shared.claim()
        second = b.shared.claim()
        rest_a, rest_b = a.take_all(), b.take_all()
        mine_a, mine_b = first + rest_a, second + rest_b
        assert sorted(mine_a + mine_b) == HOSTS and not set(mine_a) & set(mine_b)
        a.store_run(store)
        b.store_run(store)
        assert stored(url, "c1") == {**dict.fromkeys(mine_a, "a"), **dict.fromkeys(mine_b, "b")}
        statuses = {j.status for j in a.queue.jobs(cycle().queue)}
        assert statuses == {"succeeded"}
        shares = a.shared.shares()
        assert shares.mine == sorted(mine_a) and shares.others == {"b": mine_b} and not shares.unaudited
        said = [f for f in shares.findings() if f.kind == "queue"]
        assert len(said) == 1 and f"{len(mine_b)} serving hosts of cycle c1" in said[0].message
    finally:
        a.close()
        b.close()


def test_concurrent_takes_never_overlap(url: str, store) -> None:  # noqa: ANN001
    """Five auditors taking at once from threads: each host goes to exactly one."""
    start = threading.Barrier(5)
    got: dict[str, list[str]] = {}
    auditors = {f"x{i}": Auditor(url, store, f"x{i}", cycle(), claim=1) for i in range(5)}

    def run(who: str) -> None:
        start.wait()
        got[who] = auditors[who].take_all()

    threads = [threading.Thread(target=run, args=(who,)) for who in auditors]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        taken = [h for hosts in got.values() for h in hosts]
        assert sorted(taken) == HOSTS, got
    finally:
        for a in auditors.values():
            a.close()


def test_a_stalled_auditors_hosts_go_to_a_watching_one_and_its_store_is_refused(url: str, store) -> None:  # noqa: ANN001
    # a beats once an hour: by the database's clock it has stalled 3 s after it registered
    a = Auditor(url, store, "a", cycle(), beat=3600.0)
    b = Auditor(url, store, "b", cycle(), wait=None)
    follow: Auditor | None = None
    try:
        held = a.shared.claim(2)
        assert len(held) == 2
        rest = b.take_all()  # b never waits for a's hosts before it stores its own
        assert sorted(held + rest) == HOSTS
        b.store_run(store)
        assert b.queue.stalled(cycle().queue, 3.0) == []  # a's beat is fresh: not retaken yet
        watched = watch(url, cycle(), b.shared.config)  # b waits for a's two after its store
        assert watched.outcome == AGAIN and sorted(j.host for j in watched.taken) == sorted(held)
        # b's follow-up run goes on with the worker that took them
        follow = Auditor.following(url, store, "b", cycle(), watched)
        assert sorted(follow.take_all()) == sorted(held) and sorted(follow.shared.taken_over) == sorted(held)
        follow.store_run(store)
        # a comes back and tries to store its two hosts: refused, nothing of its run written
        run_before = store.begin_run("test.toml")
        result = CycleResult(time.time(), time.time(), "test.toml", {}, [], [])
        with pytest.raises(HostsLost) as lost:
            store.finish_run(run_before, result, {}, None, a.shared.fence(held))
        assert sorted(lost.value.lost) == sorted(held) and "another auditor took them" in str(lost.value)
        assert stored(url, "c1") == dict.fromkeys(HOSTS, "b")
        with store.engine.connect() as conn:
            status = conn.execute(text("SELECT status FROM runs WHERE id = :i"), {"i": run_before}).scalar()
        assert status == "running"  # the transaction rolled back: its results are not there
        assert watch(url, cycle(), b.shared.config).outcome == DONE  # every host stored
    finally:
        a.close()
        b.close()
        if follow is not None:
            follow.close()


def test_of_two_watchers_one_takes_a_stalled_host_and_the_other_keeps_watching(url: str, store) -> None:  # noqa: ANN001
    a = Auditor(url, store, "a", cycle(), beat=3600.0)
    b = Auditor(url, store, "b", cycle())
    try:
        (host,) = a.shared.claim(1)
        b.take_all()
        b.store_run(store)
        time.sleep(3.2)
        first = watch(url, cycle(), b.shared.config)
        assert first.outcome == AGAIN and [j.host for j in first.taken] == [host]
        second = watch(url, cycle(), QueueConfig(enabled=True, heartbeat=1.0, timeout=3.0, wait=1.0))
        assert second.outcome == GAVE_UP and second.open == [host] and not second.taken  # not stolen
        assert first.queue is not None
        first.queue.close()
    finally:
        a.close()
        b.close()


def test_a_job_retaken_by_a_live_auditor_is_not_put_back_by_a_late_retry(url: str, store) -> None:  # noqa: ANN001
    a = Auditor(url, store, "a", cycle(), beat=3600.0)
    b = Auditor(url, store, "b", cycle())
    try:
        (host,) = a.shared.claim(1)
        job = a.shared.mine[host]
        time.sleep(3.5)
        (stalled,) = [j for j in b.queue.stalled(cycle().queue, 3.0) if j.host == host]
        assert b.queue.retry([job], stalled.worker_id) == [job]
        assert b.shared.claim(1) == [host] or host in b.take_all()
        # a third auditor that saw the same stalled job before b retried it must not steal it
        assert b.queue.retry([job], stalled.worker_id) == []
        assert {j.host: j.worker_id for j in b.queue.jobs(cycle().queue)}[host] == b.queue.worker_id
    finally:
        a.close()
        b.close()


def test_hosts_given_back_are_taken_at_once(url: str, store) -> None:  # noqa: ANN001
    a = Auditor(url, store, "a", cycle())
    b = Auditor(url, store, "b", cycle(), timeout=600.0, heartbeat=10.0)
    try:
        held = a.take_all()
        assert sorted(held) == HOSTS
        a.shared.give_back()  # its cycle failed
        assert b.queue.stalled(cycle().queue, 600.0) == []  # nothing b would retake for 600 s
        assert sorted(b.take_all()) == HOSTS  # b never waits: they are in the queue already
    finally:
        a.close()
        b.close()


def test_hosts_nobody_audited_are_one_finding_per_reason(url: str, store) -> None:  # noqa: ANN001
    a = Auditor(url, store, "a", cycle())
    b = Auditor(url, store, "b", cycle())
    try:
        b.shared.claim(2)  # b works on two
        mine = a.take_all()
        assert len(mine) == len(HOSTS) - 2
        shares = a.shared.shares()
        assert sorted(shares.others["another auditor (still at work)"]) == sorted(b.shared.mine)
        b.close()  # b leaves without storing: its two are stalled at once (no worker)
        shares = a.shared.shares()
        assert sorted(shares.unaudited) == sorted(b.shared.mine)
        merged = group(shares.findings())
        unaudited = [f for f in merged if f.kind == "unchecked"]
        assert len(unaudited) == 1, [f.message for f in merged]  # one cause, both hosts named
        assert all(h in unaudited[0].message for h in b.shared.mine)
    finally:
        a.close()


def test_the_schedules_cycle_is_the_same_for_every_auditor_however_late_it_fires() -> None:
    cron = ScheduleConfig(cron="*/15 * * * *", timezone="UTC", jitter=120.0)
    due = datetime(2026, 12, 7, 6, 30, tzinfo=UTC)
    for late in (0, 1, 119, 14 * 60 + 59):  # jitter, a busy daemon: still the 06:30 cycle
        tick, following = cycle_tick(cron, due + timedelta(seconds=late))
        assert tick == due and following == due.replace(minute=45)
    # two cycles in one hour are two cycles (leases had one slot per hour under cron: the
    # second cycle audited no host)
    a = cycles.scheduled("fleet", *cycle_tick(cron, due))
    b = cycles.scheduled("fleet", *cycle_tick(cron, due.replace(minute=46)))
    assert a.label == "2026-12-07T06:30:00Z" and b.label == "2026-12-07T06:45:00Z" and a.queue != b.queue
    every = ScheduleConfig(interval=600.0)
    tick, following = cycle_tick(every, datetime(2026, 12, 7, 6, 37, 12, tzinfo=UTC))
    assert tick == datetime(2026, 12, 7, 6, 30, tzinfo=UTC) and (following - tick).total_seconds() == 600
    weekly = ScheduleConfig(cron="0 3 * * 1", timezone="Europe/Berlin")  # Mondays 03:00 Berlin
    tick, _ = cycle_tick(weekly, datetime(2026, 12, 10, 12, 0, tzinfo=UTC))  # a Thursday
    assert tick.astimezone(UTC) == datetime(2026, 12, 7, 2, 0, tzinfo=UTC)


def test_queue_names_fit_postgresqls_notification_channels() -> None:
    long = cycles.named("fleet", "x" * 300)
    assert len("procrastinate_queue_v1#" + long.queue) <= 63  # PostgreSQL's channel names
    assert long.queue != cycles.named("fleet2", "x" * 300).queue
    assert len(long.host_key("infer-01")) <= 128
    assert long.host_key("infer-01") != long.host_key("infer-02")
    assert cycles.named("fleet", "x" * 300).queue == long.queue


def test_the_queue_needs_postgresql(tmp_path) -> None:  # noqa: ANN001
    with pytest.raises(QueueError, match="needs a PostgreSQL history"):
        conninfo(f"sqlite:///{tmp_path}/h.db")
    assert conninfo("postgresql://u:pw@127.0.0.1:5432/db").startswith("postgresql://u:pw@127.0.0.1")


def test_a_beating_auditor_is_never_stalled_and_retention_clears_cycles_long_over(url: str, store) -> None:  # noqa: ANN001
    from auditor.history.retention import prune

    a = Auditor(url, store, "a", cycle(), beat=0.3)
    b = Auditor(url, store, "b", cycle())
    try:
        held = a.shared.claim(2)
        time.sleep(2.0)  # past b's 1.5 s timeout below; a beats every 0.3 s
        assert b.queue.stalled(cycle().queue, 1.5) == []
        assert b.shared.retake_stalled() == [] and sorted(a.shared.mine) == sorted(held)
        b.take_all()
        a.store_run(store)
        b.store_run(store)
    finally:
        a.close()
        b.close()
    assert len(Auditor.jobs_of(url, cycle())) == len(HOSTS)
    kept = prune(store.engine, 30)  # nothing is 30 days old
    assert kept.deleted.get("queue jobs", 0) == 0 and len(Auditor.jobs_of(url, cycle())) == len(HOSTS)
    done = prune(store.engine, 1, now=datetime.now(UTC).replace(tzinfo=None) + timedelta(days=3))
    assert done.deleted["queue jobs"] == len(HOSTS) and Auditor.jobs_of(url, cycle()) == []
    assert done.deleted["queue keys"] == len(HOSTS)  # the once-only keys go with their jobs
