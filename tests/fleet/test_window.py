"""Hosts in flight ([worker] max_hosts, auditor.fleet.window) without stacks: which hosts are held
for the whole cycle, which serve, and how the window runs the serving hosts' parts: at most its
size at once, the next host as soon as one ends, a slow host holding its own place only, hosts
claimed only when a place is free, the first failure stopping the rest. On the real stacks, with
the cap observed: tests/fleet/test_fleet_cap_stacks.py."""

from __future__ import annotations

import copy
import threading

import pytest

from auditor.config.load import parse
from auditor.fleet import window

WAIT = 60.0
"""A bound on waiting for an event that the code under test must set (never reached when it works)."""


def fleet(doc: dict, hosts: str = "infer-[01:03]", max_hosts: int | None = None) -> dict:
    d = copy.deepcopy(doc)
    d["groups"] = {"infer": {"hosts": [hosts], "command": ["env", "H={host}"]}}
    d["stacks"]["lite20"]["group"] = "infer"
    if max_hosts is not None:
        d["worker"] = {**d.get("worker", {}), "max_hosts": max_hosts}
    return d


def test_without_a_cap_every_serving_host_is_in_flight_at_once(doc: dict) -> None:
    cfg = parse(fleet(doc), "/etc/auditor/auditor.toml")
    plan = window.plan(cfg, cfg.stacks)
    assert not plan.capped and plan.size is None
    assert plan.held_hosts == ("local",) and all(cfg.stacks[n].host == "local" for n in plan.held)
    assert plan.hosts == ["infer-01", "infer-02", "infer-03"]


def test_a_cap_holds_the_train_hosts_and_leaves_the_rest_to_the_serving_hosts(doc: dict) -> None:
    cfg = parse(fleet(doc, max_hosts=3), "/etc/auditor/auditor.toml")
    plan = window.plan(cfg, cfg.stacks)
    assert plan.capped and plan.held_hosts == ("local",) and plan.size == 2
    assert plan.stacks_of(["infer-03"]) == ("lite20@infer-03",)


def test_every_host_fitting_under_the_cap_waits_for_nothing(doc: dict) -> None:
    cfg = parse(fleet(doc, max_hosts=4), "/etc/auditor/auditor.toml")
    assert not window.plan(cfg, cfg.stacks).capped


def test_serving_hosts_in_natural_order_one_at_least(doc: dict) -> None:
    cfg = parse(fleet(doc, hosts="infer-[1:10]", max_hosts=1), "/etc/auditor/auditor.toml")
    plan = window.plan(cfg, cfg.stacks)
    # the cap cannot hold below the held hosts: one serving host at a time
    assert plan.size == 1 and plan.hosts == [f"infer-{i}" for i in range(1, 11)]


def test_a_model_reference_on_a_member_holds_that_host(doc: dict) -> None:
    d = fleet(doc, max_hosts=3)
    d["models"] = {"policy": {"path": "p.mindir", "stacks": ["lite20"], "reference": "lite20@infer-02"}}
    cfg = parse(d, "/etc/auditor/auditor.toml")
    plan = window.plan(cfg, cfg.stacks)
    assert plan.held_hosts == ("infer-02", "local") and "lite20@infer-02" in plan.held
    assert plan.hosts == ["infer-01", "infer-03"] and plan.size == 1


class Log:
    """Starts and ends of the parts, in order, and how many ran at once at most."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.events: list[str] = []
        self.now = 0
        self.most = 0

    def start(self, host: str) -> None:
        with self.lock:
            self.events.append(f"+{host}")
            self.now += 1
            self.most = max(self.most, self.now)

    def end(self, host: str) -> None:
        with self.lock:
            self.events.append(f"-{host}")
            self.now -= 1


def test_the_next_host_starts_as_soon_as_one_ends_and_a_stuck_host_holds_its_own_place() -> None:
    """h1 does not end until h6 has ended: with chunks of two, h6 would wait for h1's chunk
    forever; in the window, h2..h6 go through the other place."""
    log = Log()
    last_ended = threading.Event()

    def part(host: str) -> None:
        log.start(host)
        if host == "h1":
            assert last_ended.wait(WAIT), "h6 never ran while h1 was stuck"
        log.end(host)
        if host == "h6":
            last_ended.set()

    hosts = [f"h{i}" for i in range(1, 7)]
    given = [hosts]
    flight = window.Window(2, part, lambda n: given.pop() if given else None, lambda: None).start()
    flight.join()
    assert log.most == 2
    assert log.events[0] == "+h1" and log.events[-1] == "-h1"
    # one place went through h2..h6 in order, each ending before the next started
    assert log.events[1:-1] == [e for h in hosts[1:] for e in (f"+{h}", f"-{h}")]


def test_hosts_are_claimed_only_when_a_place_is_free() -> None:
    """With [queue], taking hosts ahead would take hosts another auditor could audit now."""
    unfinished: list[int] = []  # hosts claimed before and not ended, at each claim
    asked: list[int] = []  # those and the places the claim asked for
    claimed = ended = 0
    lock = threading.Lock()
    batches = [["a", "b"], ["c", "d"], ["e"]]

    def part(host: str) -> None:
        nonlocal ended
        with lock:
            ended += 1

    def claim(places: int) -> list[str] | None:
        nonlocal claimed
        with lock:
            unfinished.append(claimed - ended)
            asked.append(places + claimed - ended)
        got = batches.pop(0) if batches else []
        claimed += len(got)
        return got

    window.Window(2, part, claim, lambda: None).start().join()
    assert ended == 5 and len(unfinished) == 4
    # each claim found a place free and no claimed host waiting for one
    assert all(n < 2 for n in unfinished), unfinished
    assert all(n <= 2 for n in asked), asked  # never more than the places free


def test_the_first_failure_stops_the_others_and_is_raised() -> None:
    stopped = threading.Event()
    ran: list[str] = []

    def part(host: str) -> None:
        ran.append(host)
        if host == "bad":
            raise RuntimeError("a bug in one host's part")
        assert stopped.wait(WAIT), "the window did not stop the other parts"

    flight = window.Window(2, part, lambda n: ["ok", "bad", "later"] if not ran else [], stopped.set).start()
    with pytest.raises(RuntimeError, match="a bug in one host's part"):
        flight.join()
    assert stopped.is_set() and sorted(ran) == ["bad", "ok"]  # nothing started after the failure
