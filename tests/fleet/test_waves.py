"""Hosts in waves ([worker] max_hosts, auditor.fleet.waves) without stacks: which hosts are held
for the whole cycle, how the serving hosts are chunked, and which stacks end with a chunk. On the
real stacks, with the cap observed: tests/fleet/test_fleet_cap_stacks.py."""

from __future__ import annotations

import copy

from auditor.config.load import parse
from auditor.fleet import waves


def fleet(doc: dict, hosts: str = "infer-[01:03]", max_hosts: int | None = None) -> dict:
    d = copy.deepcopy(doc)
    d["groups"] = {"infer": {"hosts": [hosts], "command": ["env", "H={host}"]}}
    d["stacks"]["lite20"]["group"] = "infer"
    if max_hosts is not None:
        d["worker"] = {**d.get("worker", {}), "max_hosts": max_hosts}
    return d


def chunk_hosts(cfg, plan: waves.Waves) -> list[list[str]]:
    return [sorted({cfg.stacks[n].host for n in c}) for c in plan.chunks]


def test_without_a_cap_every_host_is_one_wave(doc: dict) -> None:
    cfg = parse(fleet(doc), "/etc/auditor/auditor.toml")
    plan = waves.plan(cfg, cfg.stacks)
    assert not plan.capped and plan.chunks == ((),)
    assert plan.held == tuple(cfg.stacks)
    assert plan.released(cfg.stacks) == []


def test_a_cap_holds_the_train_hosts_and_chunks_the_serving_hosts(doc: dict) -> None:
    cfg = parse(fleet(doc, max_hosts=3), "/etc/auditor/auditor.toml")
    plan = waves.plan(cfg, cfg.stacks)
    assert plan.capped and plan.held_hosts == ("local",)
    assert all(cfg.stacks[n].host == "local" for n in plan.held)
    # local is held: two serving hosts per chunk
    assert chunk_hosts(cfg, plan) == [["infer-01", "infer-02"], ["infer-03"]]
    assert plan.size == 2
    # a chunk's workers end with it, never the held ones
    assert plan.released((*plan.held, "lite20@infer-03")) == ["lite20@infer-03"]


def test_every_host_fitting_under_the_cap_is_one_wave(doc: dict) -> None:
    cfg = parse(fleet(doc, max_hosts=4), "/etc/auditor/auditor.toml")
    assert not waves.plan(cfg, cfg.stacks).capped


def test_hosts_are_chunked_in_natural_order_one_at_least(doc: dict) -> None:
    cfg = parse(fleet(doc, hosts="infer-[1:10]", max_hosts=1), "/etc/auditor/auditor.toml")
    plan = waves.plan(cfg, cfg.stacks)
    # the cap cannot hold below the held hosts: one serving host at a time
    assert chunk_hosts(cfg, plan) == [[f"infer-{i}"] for i in range(1, 11)]


def test_a_model_reference_on_a_member_holds_that_host(doc: dict) -> None:
    d = fleet(doc, max_hosts=3)
    d["models"] = {"policy": {"path": "p.mindir", "stacks": ["lite20"], "reference": "lite20@infer-02"}}
    cfg = parse(d, "/etc/auditor/auditor.toml")
    plan = waves.plan(cfg, cfg.stacks)
    assert plan.held_hosts == ("infer-02", "local") and "lite20@infer-02" in plan.held
    assert chunk_hosts(cfg, plan) == [["infer-01"], ["infer-03"]]
