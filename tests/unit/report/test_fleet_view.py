"""A group of hosts on one screen (auditor.report.fleet_view): 64 members of lite20, one of them
drifting and one more drifting the same way on three others, a finding of every member, a
finding listing all members but one, telemetry of every host. The report names the hosts that
differ and counts the rest."""

from __future__ import annotations

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
    # the drifting ones: the first in full, the others named
    assert "ms20 → lite20@infer-07" in text
    assert "the same on 3 more hosts: infer-19, infer-33 and infer-60" in text
    assert "ms20 → lite20@infer-19" not in text
    # one finding said of every member is one cause with the host in its place
    flat = " ".join(text.split())
    assert (
        "lite20 on 64 hosts (infer-01, infer-02, infer-03, infer-04 and 60 more): model /srv/{host}" in flat
    )
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
    assert folded[0] == (
        "lite20 on 3 hosts (infer-01, infer-02 and infer-03): model /srv/{host}/p.mindir unread",
        [0, 1, 2],
    )
    assert [t for t, _ in folded[1:]] == texts[3:]
    # two alike are not folded (folding starts at three)
    assert [t for t, _ in fleet_view.texts_folded(texts[:2])] == texts[:2]


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
