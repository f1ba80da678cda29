"""Host leases ([leases], auditor.fleet.leases over auditor.history.leases) on a real database,
SQLite and the test PostgreSQL server, without stacks: claims that never overlap, a holder that
stops renewing losing its hosts by expiry, a waiting auditor taking them over, done and handed
back leases. Two auditor processes on the real stacks: tests/fleet/test_leases_stacks.py."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta

import pytest

from auditor.config.tables import LeasesConfig, ScheduleConfig
from auditor.fleet import leases
from auditor.fleet.window import HostPlan
from auditor.history.leases import LeaseBook
from auditor.history.retention import prune
from auditor.history.store import Store

HOSTS = [f"infer-{i:02d}" for i in range(1, 11)]
WAVES = HostPlan((), None, ("local",), tuple((h, (f"lite20@{h}",)) for h in HOSTS))
T0 = datetime(2026, 12, 6, 9, 0, 0)


class Clock:
    """A clock the test moves (the leases' expiry is judged on it, not on sleeping)."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def store(db_url: str) -> Store:
    return Store.open(db_url, "test")


def book(store: Store, who: str) -> LeaseBook:
    return LeaseBook(store.engine, leases.holder_name(who), who)


class Chunks(leases.SharedHosts):
    """An auditor that audits its claims a chunk at a time: iterated, the stacks of the next
    hosts it claims, the hosts of the chunk before served."""

    _current: list[str] = []

    def __iter__(self) -> Chunks:
        return self

    def __next__(self) -> tuple[str, ...]:
        if self._current:
            self.served(self._current)
        self._current = self.claim()
        if not self._current:
            raise StopIteration
        return self.waves.stacks_of(self._current)


def shared(b: LeaseBook, clock: Clock, pause=None, **kw) -> Chunks:  # noqa: ANN001
    cfg = LeasesConfig(enabled=True, claim=kw.pop("claim", 3), expire=kw.pop("expire", 10.0), **kw)
    more = {"pause": pause} if pause is not None else {}
    return Chunks(b, WAVES, cfg, leases.Slot("fleet:t", None), clock=clock, **more)


def test_one_claim_per_host_and_slot_whoever_asks(store: Store) -> None:
    a, b = book(store, "a"), book(store, "b")
    until = T0 + timedelta(seconds=60)
    assert a.claim("s1", "infer-01", T0, until)
    assert not b.claim("s1", "infer-01", T0, until)  # held, not expired
    assert b.claim("s2", "infer-01", T0, until)  # another slot is another lease
    # expired, unfinished: the next to ask takes it over
    later = until + timedelta(seconds=1)
    assert b.claim("s1", "infer-01", later, later + timedelta(seconds=60))
    assert b.leases("s1")["infer-01"].auditor_id == "b"
    # done (stored in a run): never claimed again in that slot, expired or not
    b.served("s1", ["infer-01"], later)
    assert b.done("s1", None, later) == 1
    far = later + timedelta(days=1)
    assert not a.claim("s1", "infer-01", far, far + timedelta(seconds=60))


def test_two_auditors_split_the_hosts_and_neither_claims_the_others(store: Store) -> None:
    clock = Clock()
    # wait = 0: called one after the other, each would wait for the chunk the other is on
    one, two = shared(book(store, "a"), clock, wait=0.0), shared(book(store, "b"), clock, wait=0.0)
    taken: dict[str, list[str]] = {"a": [], "b": []}
    for who, s in (("a", one), ("b", two), ("a", one), ("b", two)):
        chunk = next(s, None)
        if chunk is not None:
            taken[who] += [n.split("@")[1] for n in chunk]
    assert taken["a"] == ["infer-01", "infer-02", "infer-03", "infer-07", "infer-08", "infer-09"]
    assert taken["b"] == ["infer-04", "infer-05", "infer-06", "infer-10"]
    # nothing left, nobody working on a host (both served theirs): each stops
    assert next(one, None) is None and next(two, None) is None
    shares = one.shares()
    assert shares.mine == taken["a"] and shares.others == {"b": taken["b"]} and not shares.unaudited
    said = {f.kind: f for f in shares.findings()}
    assert set(said) == {"leases"} and "4 serving hosts" in said["leases"].message


def test_concurrent_claims_never_overlap(store: Store) -> None:
    """Five auditors claiming at once from threads: each host goes to exactly one."""
    clock = Clock()
    got: dict[str, list[str]] = {}
    start = threading.Barrier(5)

    def run(who: str) -> None:
        s = shared(book(store, who), clock, claim=1)
        start.wait()
        got[who] = [n for chunk in s for n in chunk]

    threads = [threading.Thread(target=run, args=(f"x{i}",)) for i in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    claimed = [h for hosts in got.values() for h in hosts]
    assert sorted(claimed) == sorted(f"lite20@{h}" for h in HOSTS)


def test_a_holder_that_stops_renewing_loses_its_hosts_to_a_waiting_auditor(store: Store) -> None:
    clock = Clock()
    dead, alive = shared(book(store, "dead"), clock, claim=4), shared(book(store, "alive"), clock, claim=4)
    assert len(next(dead)) == 4  # infer-01..04, then it dies: no renewal, never served
    first = [n for n in next(alive)]
    assert first == [f"lite20@infer-{i:02d}" for i in range(5, 9)]
    assert len(next(alive)) == 2  # infer-09, 10
    # the dead one's hosts are pending (its leases live): the survivor waits, polling
    moved = threading.Timer(0.2, lambda: setattr(clock, "now", T0 + timedelta(seconds=11)))
    moved.start()
    taken = next(alive)
    assert taken == tuple(f"lite20@infer-{i:02d}" for i in range(1, 5))
    assert next(alive, None) is None
    shares = alive.shares()
    assert sorted(shares.mine) == HOSTS and shares.others == {} and shares.unaudited == {}
    alive.close(run_id=None, stored=True)
    rows = alive.book.leases("fleet:t")
    assert {r.auditor_id for r in rows.values()} == {"alive"} and all(r.done_at for r in rows.values())


def test_waiting_ends_at_wait_and_says_what_nobody_audited(store: Store) -> None:
    clock = Clock()
    slow = shared(book(store, "slow"), clock, claim=10)
    assert len(next(slow)) == 10
    late = shared(book(store, "late"), clock, wait=0.3)
    assert next(late, None) is None  # every host pending on a live holder: waited 0.3 s
    assert late.shares().others == {"slow": HOSTS}
    # the slow one gives up (its cycle failed): its hosts are free at once, not after expiry
    slow.close(stored=False)
    assert book(store, "x").leases("fleet:t") == {}
    assert [n.split("@")[1] for n in next(late)] == HOSTS[:3]


def test_a_host_served_but_not_stored_is_taken_over_after_expiry(store: Store) -> None:
    clock = Clock()
    gone = shared(book(store, "gone"), clock, claim=10)
    next(gone)
    gone.book.served("fleet:t", HOSTS, T0)  # served, then died before its run was stored
    looking = shared(book(store, "looking"), clock, claim=10, wait=0.0)
    assert next(looking, None) is None  # served by a live holder: neither claimed nor waited for
    assert looking.shares().others == {"gone": HOSTS}
    clock.now = T0 + timedelta(seconds=11)
    assert len(next(looking)) == 10  # expired unstored: audited again rather than not at all


def test_hosts_nobody_audited_are_unchecked_findings(store: Store) -> None:
    clock = Clock()
    stuck = shared(book(store, "stuck"), clock, claim=2)
    next(stuck)  # infer-01, 02: claimed, never renewed, never served
    quick = shared(book(store, "quick"), clock, claim=10, wait=0.0)
    assert len(next(quick)) == 8 and next(quick, None) is None  # gave up waiting at once
    clock.now = T0 + timedelta(seconds=11)
    shares = quick.shares()
    assert set(shares.unaudited) == {"infer-01", "infer-02"}
    assert "the lease of stuck expired" in shares.unaudited["infer-01"]
    finding = next(f for f in shares.findings() if f.subject == "infer-01")
    assert finding.kind == "unchecked" and "not audited in slot fleet:t" in finding.message


def test_a_slot_is_the_period_now_falls_in_or_the_one_named() -> None:
    cfg, hourly = LeasesConfig(enabled=True), ScheduleConfig(interval=3600.0)
    at = datetime(2026, 12, 6, 9, 59, 59)
    s = leases.slot(cfg, hourly, at)
    assert s.label == "fleet:2026-12-06T09:00:00Z/3600s" and s.ends == datetime(2026, 12, 6, 10, 0)
    assert leases.slot(cfg, hourly, at + timedelta(seconds=1)).label == "fleet:2026-12-06T10:00:00Z/3600s"
    assert leases.slot(LeasesConfig(slot=600.0, pool="blue"), hourly, at).label.startswith(
        "blue:2026-12-06T09:50:00Z/600s"
    )
    cron = ScheduleConfig(interval=None, cron="0 * * * *")
    assert leases.slot(cfg, cron, at).label.endswith("/3600s")
    named = leases.slot(cfg, hourly, at, "deploy-4711")
    assert named.label == "fleet:deploy-4711" and named.ends is None


def test_retention_deletes_leases_of_slots_long_past(store: Store) -> None:
    b = book(store, "a")
    assert b.claim("old", "infer-01", T0, T0 + timedelta(seconds=60))
    assert b.claim("new", "infer-01", T0 + timedelta(days=10), T0 + timedelta(days=10, seconds=60))
    done = prune(store.engine, 5, now=T0 + timedelta(days=10))
    assert done.deleted["host_leases"] == 1
    assert b.leases("old") == {} and set(b.leases("new")) == {"infer-01"}


def test_an_abort_ends_the_wait_for_others_hosts(store: Store) -> None:
    class Aborted(Exception):
        pass

    def aborted(_seconds: float) -> None:
        raise Aborted  # CycleState.pause raises CycleAborted once the cycle is aborted

    clock = Clock()
    next(shared(book(store, "busy"), clock, claim=10))
    with pytest.raises(Aborted):
        next(shared(book(store, "waiting"), clock, pause=aborted))
