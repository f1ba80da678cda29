"""A group of hosts on one screen (auditor.report.fleet_view): 64 members of lite20, one of them
drifting and one more drifting the same way on three others, a finding of every member, a
finding listing all members but one, telemetry of every host. The report names the hosts that
differ and counts the rest."""

from __future__ import annotations

import re

import numpy as np

from auditor.history.filters import Filters
from auditor.history.queries import Series
from auditor.history.store import Store
from auditor.report import fleet_view
from auditor.report.html import render_report
from auditor.report.text import render_text
from auditor.results import DRIFT, CycleResult, Finding, StackReport
from tests.report_fixtures import _outputs, probe_result

HOSTS = [f"infer-{i:02d}" for i in range(1, 65)]
DRIFTING = ["infer-07", "infer-19", "infer-33", "infer-60"]


def fleet_cycle() -> CycleResult:
    stacks = {"ms20": StackReport("ms20", "train", "mindspore", "/p", "cpu", "local", {"runtime": {}})}
    results = []
    for host in HOSTS:
        name = f"lite20@{host}"
        stacks[name] = StackReport(name, "infer", "mindspore-lite", "/p", "cpu", host, {"runtime": {}})
        for probe, variant in (("ppo_policy", "fp32"), ("obs_normalizer", "fp32")):
            if host in DRIFTING and probe == "ppo_policy":
                outputs = _outputs(probe, {"mean": np.float32(0.01)})
                r = probe_result(f"ms20->{name}", probe, variant, DRIFT, outputs=outputs, message="mean off")
            else:
                r = probe_result(f"ms20->{name}", probe, variant)
            results.append(r)
    findings = [
        Finding(
            "deployed-model",
            "warning",
            f"lite20@{h}",
            f"k/{h}",
            f"lite20@{h}: model /srv/{h}/p.mindir unread",
        )
        for h in HOSTS
    ]
    everyone_but_one = ", ".join(f"lite20@{h}" for h in HOSTS if h != "infer-42")
    findings.append(
        Finding("nan-hazard", "warning", "lite20", "nan", f"NaN masked on {everyone_but_one} (fp32)")
    )
    findings.append(
        Finding(
            "out-of-line",
            "warning",
            "lite20@infer-42",
            "ool",
            "lite20@infer-42 is out of line with its group",
        )
    )
    return CycleResult(1767225600.0, 1767225642.5, "auditor.toml", stacks, results, findings, 7)


def test_a_fleet_of_64_fits_one_screen() -> None:
    text = render_text(fleet_cycle())
    lines = text.splitlines()
    assert len(lines) <= 40, text
    assert "lite20 on 60 hosts  consistent" in text  # the consistent members, counted
    # the drifting ones: the first in full, every one named in its title, as a range
    assert "ms20 → lite20 on infer-[07,19,33,60]" in text
    assert "ms20 → lite20@infer-19" not in text and "the same on" not in text
    # one finding said of every member is one cause with the host in its place
    flat = " ".join(text.split())
    assert "lite20 on infer-[01:64]: model /srv/{host}" in flat
    # a list of all members but one names the one left out
    assert "63 of 64 lite20 hosts (all but infer-42)" in text
    assert "lite20@infer-42 is out of line" in text
    assert lines[2].startswith("Stacks (all ok): ms20 on local") and lines[2].endswith(
        "lite20 on 64 hosts (mindspore-lite ?)"
    )


def test_a_member_with_a_problem_stays_on_its_own() -> None:
    stacks = [
        {
            "name": f"lite20@{h}",
            "host": h,
            "state": "ok",
            "version": "2.0.0",
            "runtime": "lite",
            "problem": None,
        }
        for h in HOSTS[:5]
    ]
    stacks[2] = {**stacks[2], "state": "error", "problem": "no interpreter"}
    folded = fleet_view.stacks_folded(stacks)
    assert [(s["name"], s["host"]) for s in folded] == [
        ("lite20", "4 hosts"),
        ("lite20@infer-03", "infer-03"),
    ]


def test_texts_fold_only_when_they_say_the_same() -> None:
    texts = [f"lite20@{h}: model /srv/{h}/p.mindir unread" for h in HOSTS[:3]]
    texts.append("lite20@infer-09: model /srv/infer-09/p.mindir unread because it moved")
    texts.append("ms20: nothing to do with a group")
    folded = fleet_view.texts_folded(texts)
    assert folded[0] == ("lite20 on infer-[01:03]: model /srv/{host}/p.mindir unread", [0, 1, 2])
    assert [t for t, _ in folded[1:]] == texts[3:]
    # two alike are one already (a cause adds one line however many hosts it hits)
    assert fleet_view.texts_folded(texts[:2]) == [
        ("lite20 on infer-[01:02]: model /srv/{host}/p.mindir unread", [0, 1])
    ]
    # a text that starts with its host is folded by that host, whatever member it names
    said = [f"host {h}: NOT READ: stack lite20@{h} did not start" for h in ("infer-04", "infer-09")]
    assert fleet_view.texts_folded(said) == [
        ("2 hosts (infer-[04,09]): NOT READ: stack lite20@{host} did not start", [0, 1])
    ]


def test_hosts_are_said_as_ranges_where_they_are_short() -> None:
    from auditor.config.groups import expand_pattern, ranges

    assert ranges([f"infer-{i:02d}" for i in range(1, 13)]) == "infer-[01:12]"
    assert (
        ranges(["local", "infer-01", "infer-02", "infer-05", "infer-09", "infer-10"])
        == "local, infer-[01:02,05,09:10]"
    )
    assert ranges(["infer-9", "infer-10", "b.example.com"]) == "infer-[9:10], b.example.com"
    for pattern in ("infer-[01:12]", "10.0.0.[5:7]", "gpu[1:3]-rack"):  # the config's patterns, back
        assert ranges(expand_pattern(pattern)) == pattern
    words = [
        "alpha",
        "bravo",
        "charlie",
        "delta",
        "echo",
        "foxtrot",
        "golf",
        "hotel",
        "india",
        "juliett",
        "kilo",
    ]
    assert fleet_view.named(words) == "alpha, bravo, charlie, delta and 7 more"  # too long as a list


def test_hosts_are_named_then_counted() -> None:
    assert fleet_view.some(["a"]) == "a"
    assert fleet_view.some(["a", "b", "c", "d", "e"]) == "a, b, c, d and e"
    assert fleet_view.some([f"h{i}" for i in range(9)]) == "h0, h1, h2, h3 and 5 more"


def test_the_html_report_gives_a_group_one_plot_per_probe(tmp_path) -> None:
    """64 members' two probe variants: two plots and two summary rows for the group, the
    worst member's divergence and each run's worst status."""
    store = Store.open(f"sqlite:///{tmp_path / 'h.db'}")
    run_id = store.begin_run("auditor.toml")
    store.finish_run(run_id, fleet_cycle(), {})
    with store.engine.connect() as conn:
        page, summary = render_report(conn, Filters(limit=None))
    store.close()
    assert summary.startswith("2 pair/probe/variant plot(s)"), summary
    assert "ms20-&gt;lite20@* (64 hosts)" in page
    assert "lite20@infer-07" not in page.split("<h2>Latest fingerprints</h2>")[0]
    families = fleet_view.family_keys([(f"ms20->lite20@{h}", "ppo_policy", "fp32") for h in HOSTS])
    statuses = fleet_view.fold_statuses(
        {
            (f"ms20->lite20@{h}", "ppo_policy", "fp32"): [(1, 0, DRIFT if h in DRIFTING else "consistent")]
            for h in HOSTS
        },
        families,
    )
    assert statuses == {("ms20->lite20@* (64 hosts)", "ppo_policy", "fp32"): [(1, 0, DRIFT)]}


def test_a_groups_series_is_its_worst_member_or_its_median() -> None:
    families = fleet_view.family_keys([("a->s@h1", "p", "v"), ("a->s@h2", "p", "v"), ("a->t", "p", "v")])
    assert set(families) == {("a->s@h1", "p", "v"), ("a->s@h2", "p", "v")}
    series = [
        Series(
            "a->s@h1",
            "p",
            "v",
            "out",
            "max_abs",
            "a",
            "s@h1",
            [(1, 0, 1.0, "consistent"), (2, 1, 3.0, "drift")],
        ),
        Series(
            "a->s@h2",
            "p",
            "v",
            "out",
            "max_abs",
            "a",
            "s@h2",
            [(1, 0, float("nan"), "error"), (2, 1, 2.0, "consistent")],
        ),
        Series("a->t", "p", "v", "out", "max_abs", "a", "t", [(1, 0, 5.0, "consistent")]),
    ]
    worst = fleet_view.fold_series(series, families, "max")
    assert worst[0] is series[2]
    (merged,) = worst[1:]
    assert merged.pair == "a->s@* (2 hosts)" and merged.infer == "s@*"
    assert np.isnan(merged.points[0][2]) and merged.points[0][3] == "error"
    assert merged.points[1][2:] == (3.0, "drift")
    (median,) = fleet_view.fold_series(series[:2], families, "median")
    assert median.points[1][2] == 2.5


def test_members_blocks_alike_host_names_and_timings_aside_are_one_block() -> None:
    blocks = {
        f"lite20@{h}": f"  lite20@{h}  OK  mindspore-lite 2.0.0\n      load: ok, 0.1{i} s\n"
        f"      evidence: lite20@{h} ran"
        for i, h in enumerate(HOSTS[:5])
    }
    blocks["lite20@infer-03"] = "  lite20@infer-03  ERROR  ?\n      reason: start failed on infer-03"
    blocks["ms20"] = "  ms20  OK  mindspore 2.0.0"
    folded = fleet_view.blocks_folded(blocks)
    assert folded[0].splitlines()[0] == (
        "  lite20 on infer-[01:02,04:05]  OK  mindspore-lite 2.0.0  [4 members alike; --members shows each]"
    )
    assert "evidence: lite20@{host} ran" in folded[0]
    assert folded[1:] == [blocks["lite20@infer-03"], blocks["ms20"]]  # the one that differs, in full
    # what else must be equal is the caller's: a fingerprint drops the machine's own name
    machine = {f"s@{h}": f"s@{h}\n  host         box{i}  Debian" for i, h in enumerate(HOSTS[:3])}
    same = fleet_view.blocks_folded(machine, lambda text, host: re.sub(r"box\d ", "", text))
    assert len(fleet_view.blocks_folded(machine)) == 3 and len(same) == 1
