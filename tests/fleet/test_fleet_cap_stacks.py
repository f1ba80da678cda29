"""Twelve inference hosts in one group on the real stacks, at most four hosts in flight
([worker] max_hosts = 4: the train host held, three serving hosts at a time). Each host is stood
in by the ``command`` transport behind a wrapper that logs when a process on that host starts
and ends, so the cap is observed, not inferred. One host serves another model file, one has
another CANN installed (its stack reports another fingerprint value), one has no interpreter:
the first two are out of line, the third costs only itself. The first host is slow to start: its
processes wait until the last host's first process has ended, which only a window that moves
past it reaches (with chunks, the last host would wait for the first's chunk: past its start
deadline)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from auditor.cli.main import cli
from auditor.cycle.cycle import Cycle
from auditor.extend.manager import Plugins
from auditor.policy import localize
from auditor.results import DRIFT
from tests.ascend_trees import build_tree
from tests.configs import DAEMON_SECTIONS, build
from tests.fault_kit import small_config

pytestmark = pytest.mark.stacks

HOSTS = [f"infer-{i:02d}" for i in range(1, 13)]
OTHER_MODEL, OTHER_CANN, MISSING, SLOW = "infer-04", "infer-09", "infer-11", "infer-01"
TRACKED = f"""
if [ -n "$1" ]; then :; fi
echo "+ $H" >> "$LOG"
if [ "$H" = {SLOW} ]; then until grep -q -- "- {HOSTS[-1]}" "$LOG"; do sleep 0.2; done; fi
"$@"
status=$?
echo "- $H" >> "$LOG"
exit $status
"""


@pytest.fixture(scope="module")
def audited(stacks: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    d = tmp_path_factory.mktemp("cap")
    log = d / "hosts.log"
    config = small_config(d, start_timeout=600)  # the slow host waits for the others' parts
    text = config.read_text()
    lite = text.split("[stacks.lite20]\n", 1)[1].split("[[pairs]]", 1)[0]
    python = next(line for line in lite.splitlines() if line.startswith("python = "))
    for host in HOSTS:
        tree = build_tree(d / host, "cann-8.5" if host == OTHER_CANN else "consistent-8.2")
        (d / host / "tree").symlink_to(tree.top)
        (d / host / "policy.mindir").write_bytes(b"policy v2" if host == OTHER_MODEL else b"policy v1")
        if host != MISSING:
            wrapper = d / host / "python"
            wrapper.write_text(f'#!/bin/sh\nexec {python.split(chr(34))[1]} "$@"\n')
            wrapper.chmod(0o755)
    grouped = lite.replace(
        python,
        f'python = "{d}/{{host}}/python"\n'
        f'models = ["{d}/{{host}}/policy.mindir"]\n'
        f'ascend_root = "{d}/{{host}}/tree/Ascend"\n'
        f'system_root = "{d}/{{host}}/tree/root"\n'
        f'npu_smi = "{d}/{{host}}/tree/bin/npu-smi"',
    )
    group = (
        '[groups.infer]\nhosts = ["infer-[01:12]"]\n'
        f"command = {json.dumps(['env', 'H={host}', f'LOG={log}', 'sh', '-c', TRACKED, 'sh'])}\n"
    )
    text = text.replace("parallel = 2\n", "parallel = 2\nmax_hosts = 4\n")
    text += "[telemetry]\nenabled = false\n"  # the trees' npu-smi answers no telemetry view
    config.write_text(
        group + text.replace(f"[stacks.lite20]\n{lite}", f'[stacks.lite20]\ngroup = "infer"\n{grouped}')
    )
    base = ["--config", str(config), "--db", str(d / "h.db")]
    audit = CliRunner().invoke(cli, [*base, "audit", "--json-file", str(d / "run.json")])
    doc = json.loads((d / "run.json").read_text())
    return {"base": base, "audit": audit, "doc": doc, "log": log.read_text().splitlines()}


def in_flight(lines: list[str]) -> tuple[int, dict[str, int]]:
    """The most hosts with a live process at once, and how many separate times each host was
    reached (a host is reached while any of its processes lives)."""
    live: dict[str, int] = {}
    reached: dict[str, int] = {}
    most = 0
    for line in lines:
        sign, host = line.split(" ", 1)
        before = live.get(host, 0)
        live[host] = before + (1 if sign == "+" else -1)
        assert live[host] >= 0, lines
        if sign == "+" and before == 0:
            reached[host] = reached.get(host, 0) + 1
        most = max(most, sum(1 for n in live.values() if n > 0))
    assert all(n == 0 for n in live.values()), f"processes still running at the end: {live}"
    return most, reached


def test_at_most_the_cap_of_hosts_is_reached_at_once(audited: dict) -> None:
    most, reached = in_flight(audited["log"])
    # four hosts: the train host (this machine, held for the cycle) and three serving hosts
    assert most == 3, audited["log"]
    assert set(reached) == set(HOSTS)
    # once: a chunk is fingerprinted, served and ended before the next is reached (the host
    # without an interpreter is tried by its zygote, then cold)
    assert {h: n for h, n in reached.items() if n != 1} == {MISSING: 2}


def test_a_host_slow_to_start_holds_its_own_place_only(audited: dict) -> None:
    lines = audited["log"]
    ended = lines.index(f"- {SLOW}")  # its first process: its worker, started with the first
    assert f"+ {SLOW}" in lines[:3], lines  # among the first hosts in flight
    # every other host was reached and done with, through the other places, meanwhile
    for host in HOSTS[1:]:
        assert f"+ {host}" in lines[:ended] and f"- {host}" in lines[:ended], (host, lines)


def test_every_reachable_member_is_audited_and_the_missing_one_costs_itself(audited: dict) -> None:
    doc = audited["doc"]
    results = {r["infer"]: r for r in doc["results"]}
    assert set(results) == {f"lite20@{h}" for h in HOSTS}
    assert results[f"lite20@{MISSING}"]["status"] == "error"
    assert f"{MISSING}/python" in results[f"lite20@{MISSING}"]["message"]
    for host in set(HOSTS) - {MISSING, OTHER_CANN}:
        assert results[f"lite20@{host}"]["status"] == "consistent", results[f"lite20@{host}"]["message"]


def test_the_other_model_and_the_other_cann_are_out_of_line(audited: dict) -> None:
    found = {f["subject"]: f for f in audited["doc"]["findings"] if f["kind"] == "out-of-line"}
    assert set(found) == {f"lite20@{OTHER_MODEL}", f"lite20@{OTHER_CANN}"}, list(found)
    (model,) = found[f"lite20@{OTHER_MODEL}"]["details"]["facts"]["facts"]
    assert model["fact"] == "model policy.mindir" and (model["agree"], model["total"]) == (10, 11)
    cann = {f["fact"]: f for f in found[f"lite20@{OTHER_CANN}"]["details"]["facts"]["facts"]}
    assert cann["CANN"]["value"] != cann["CANN"]["majority"], cann["CANN"]
    assert all((f["agree"], f["total"]) == (10, 11) for f in cann.values()), cann


def test_the_same_drift_is_localized_once_for_the_group(
    stacks: Path, default_doc: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three members serving a perturbed export on one runtime release, in three chunks: each
    result carries the localization, and it was run once."""
    plugins = Plugins(entry_points=False)
    probes = plugins.probes()
    doc = copy.deepcopy(default_doc)
    doc["groups"] = {"infer": {"hosts": ["infer-[1:3]"], "command": ["env", "H={host}"]}}
    lite20 = {**doc["stacks"]["lite20"], "group": "infer"}
    config = build(
        doc,
        probes,
        stacks={"ms20": doc["stacks"]["ms20"], "lite20": lite20},
        pairs=[{"train": "ms20", "infer": "lite20", "probes": ["ppo_policy"]}],
        variants={"ppo_policy": ["fp32"]},
        latency={"warmup": 1, "iterations": 3, "batches": []},
        rollout={"enabled": False},
        worker={"max_hosts": 2},
        drop=DAEMON_SECTIONS,
    )
    spec = probes["ppo_policy"]
    weights = spec.make_weights(spec.variant_params("fp32", config.probe("ppo_policy").params))
    raw = weights["fc1.weight"].tobytes()
    changed = weights["fc1.weight"].copy()
    changed.flat[7] += np.float32(0.5)
    calls: list[str] = []
    real = localize.localize

    def counted(**kwargs: object) -> localize.Localization:
        calls.append(str(kwargs["model"]))
        return real(**kwargs)

    monkeypatch.setattr(localize, "localize", counted)
    result = Cycle(
        config, probes, plugins.runtimes(), tamper=lambda data: data.replace(raw, changed.tobytes())
    ).run()
    drifted = [r for r in result.results if r.status == DRIFT]
    assert [r.infer for r in drifted] == [f"lite20@infer-{i}" for i in (1, 2, 3)], [
        (r.infer, r.status, r.message) for r in result.results
    ]
    assert len(calls) == 1, calls
    (found,) = {r.localization for r in drifted}  # one localization, shared by the three
    assert found is not None and found.error is None and found.layer in ("fc0", "fc1"), found


def test_the_report_is_one_screen_naming_the_hosts_that_differ(audited: dict) -> None:
    text = audited["audit"].stdout
    assert audited["audit"].exit_code == 1, text  # infer-11 was not reached
    assert len(text.splitlines()) <= 40, text
    assert "ms20 → lite20 on 11 hosts" in text, text  # infer-09 too: its other CANN computes the same
    flat = " ".join(text.split())
    assert f"lite20@{OTHER_MODEL} is out of line" in flat and f"lite20@{OTHER_CANN} is out of line" in flat
    assert f"lite20@{MISSING}" in flat


def test_hosts_list_gives_every_host_and_the_failing_ones(audited: dict) -> None:
    runner = CliRunner()
    every = runner.invoke(cli, [*audited["base"], "hosts", "list", "--group", "infer", "--json"])
    assert every.exit_code == 0, every.output
    rows = {h["host"]: h for h in json.loads(every.stdout)}
    assert list(rows) == HOSTS and {h["group"] for h in rows.values()} == {"infer"}
    assert (
        rows["infer-01"]["status"] == "consistent" and rows["infer-01"]["run_id"] == audited["doc"]["run_id"]
    )
    assert rows[MISSING]["status"] == "unreached" and f"{MISSING}/python" in rows[MISSING]["errors"][0]
    failing = runner.invoke(cli, [*audited["base"], "hosts", "list", "--failing", "--json"])
    listed = {h["host"]: h for h in json.loads(failing.stdout)}
    assert set(listed) == {OTHER_MODEL, OTHER_CANN, MISSING}, listed
    assert "model policy.mindir" in listed[OTHER_MODEL]["out_of_line"][0]
    table = runner.invoke(cli, [*audited["base"], "hosts", "list", "--stale-after", "0", "--failing"])
    assert table.exit_code == 0 and len(table.stdout.splitlines()) == 1 + len(HOSTS) + 1, (
        table.stdout
    )  # all stale
    unknown = runner.invoke(cli, [*audited["base"], "hosts", "list", "--group", "nosuch"])
    assert (
        unknown.exit_code == 2
        and "no group 'nosuch'" in unknown.output
        and "(groups: infer)" in unknown.output
    )


def test_history_and_audit_take_a_group(audited: dict) -> None:
    runner = CliRunner()
    rows = runner.invoke(cli, [*audited["base"], "history", "--group", "infer", "--format", "json"])
    assert rows.exit_code == 0, rows.output
    assert {r["pair"] for r in json.loads(rows.stdout)} == {f"ms20->lite20@{h}" for h in HOSTS}
    bad = runner.invoke(cli, [*audited["base"], "history", "--group", "edge"])
    assert bad.exit_code == 2 and "no group 'edge'" in bad.output


def test_config_check_says_the_group_once_and_the_cap(audited: dict) -> None:
    out = CliRunner().invoke(cli, [*audited["base"], "config", "check"])
    lines = out.stdout.splitlines()
    said_once = "  stack lite20 on infer-[01:12]: infer mindspore-lite "
    assert any(line.startswith(said_once) for line in lines), out.stdout
    assert not any("lite20@infer-05" in line for line in lines), out.stdout
    said = "hosts in flight: at most 4 ([worker] max_hosts): local held for the cycle"
    assert f"{said}, 3 of the other 12 hosts at a time (the next one starts as one ends)" in out.stdout


@pytest.mark.parametrize("host_fault", ["repeats", "differs"])
def test_a_member_computing_other_bits_is_rerun_on_its_own_host(
    stacks: Path, default_doc: dict, tmp_path: Path, host_fault: str
) -> None:
    """Four members, two per chunk; infer-4 serves the export with one weight a few ulps off
    (a host that computes differently, within tolerance: consistent). Its chunk sees it differ
    from the majority of the peers so far, and runs it again in a fresh process on its own host
    while it is open: a host that repeats its bits is out of line beyond its own repeatability
    ("repeats"); one whose rerun differs again ("differs") does not even repeat itself."""
    plugins = Plugins(entry_points=False)
    probes = plugins.probes()
    doc = copy.deepcopy(default_doc)
    doc["groups"] = {"infer": {"hosts": ["infer-[1:4]"], "command": ["env", "H={host}"]}}
    config = build(
        doc,
        probes,
        stacks={"ms20": doc["stacks"]["ms20"], "lite20": {**doc["stacks"]["lite20"], "group": "infer"}},
        pairs=[{"train": "ms20", "infer": "lite20", "probes": ["ppo_policy"]}],
        variants={"ppo_policy": ["fp32"]},
        latency={"warmup": 1, "iterations": 3, "batches": []},
        rollout={"enabled": False},
        worker={"max_hosts": 3},
        drop=DAEMON_SECTIONS,
    )
    spec = probes["ppo_policy"]
    weight = spec.make_weights(spec.variant_params("fp32", config.probe("ppo_policy").params))["fc1.weight"]
    loads = []
    cycle = Cycle(config, probes, plugins.runtimes())
    real = cycle.state.load

    def faulty(worker, stack, model, path, table=None):  # noqa: ANN001, ANN202 - CycleState.load's
        if stack.name != "lite20@infer-4":
            return real(worker, stack, model, path, table)
        loads.append(model)
        ulps = 4 if host_fault == "repeats" or len(loads) == 1 else 4000
        changed = weight.copy()
        changed.flat[7] = weight.flat[7] + ulps * np.spacing(weight.flat[7])
        odd = tmp_path / f"odd-{len(loads)}.mindir"
        odd.write_bytes(Path(path).read_bytes().replace(weight.tobytes(), changed.tobytes()))
        return real(worker, stack, model, odd, table)

    cycle.state.load = faulty  # type: ignore[method-assign]
    result = cycle.run()
    assert [r.status for r in result.results] == ["consistent"] * 4, [r.message for r in result.results]
    assert len(loads) == 2  # its load, and its rerun's
    (found,) = [f for f in result.findings if f.kind == "out-of-line"]
    assert found.subject == "lite20@infer-4" and found.details["rerun"] == host_fault, found.message
    said = {"repeats": "beyond its own repeatability", "differs": "does not even repeat itself"}
    assert said[host_fault] in found.message and "3 of 4 members" in found.message, found.message
