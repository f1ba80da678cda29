"""Alerts people keep switching on: what opens one by default (the user's models,
compatibility, version drift, stacks, latency; not the built-in probes), hysteresis (open after
N failing runs in a row, resolve after M passing ones, so a result on the edge does not flap),
and narrowed runs that resolve nothing they did not run."""

from __future__ import annotations

import pytest

from auditor.alerts.engine import AlertEngine, ConfiguredSink, category, list_alerts
from auditor.config.selection import Scope
from auditor.config.tables import AlertsConfig, SinkConfig
from auditor.history.store import Store
from auditor.results import CycleResult, Finding
from tests.unit.alerts.test_alerts import Clock, Recorder

BUILTIN = {"ppo_policy", "action_sampler", "obs_normalizer"}
MODEL_DRIFT = Finding(
    "drift", "warning", "policy:golden->lite20", "policy:golden->lite20/policy/model/drift", "logits drifted",
    {"probe": "policy", "variant": "model"},
)  # fmt: skip
PROBE_DRIFT = Finding(
    "drift", "warning", "ms20->lite20", "ms20->lite20/ppo_policy/fp16/drift", "std drifted",
    {"probe": "ppo_policy", "variant": "fp16"},
)  # fmt: skip
HAZARD = Finding(
    "nan-hazard", "warning", "lite20", "lite20/ppo_policy/fp32/nan-hazard", "NaN masked",
    {"probe": "ppo_policy", "variant": "fp32"},
)  # fmt: skip
RULE = Finding(
    "version-match", "warning", "ms210->lite20", "ms210->lite20/version-match", "versions differ",
    {"rule": "version-match", "action": "match them"},
)  # fmt: skip
INFO_RULE = Finding(
    "version-match", "info", "ms20->ms210-graph", "ms20->ms210-graph/version-match", "versions differ",
    {"rule": "version-match"},
)  # fmt: skip
INCOMPATIBLE = Finding(
    "incompatible", "critical", "ms210->lite20", "ms210->lite20/mindir", "cannot load", {"rule": "mindir"}
)
VERSION = Finding("version-drift", "warning", "ms20", "ms20/version-drift", "ms20 changed", {"changes": []})
LATENCY = Finding(
    "latency-regression", "warning", "lite20", "lite20/ppo_policy/fp32/b1/infer/ms20/latency-regression",
    "slower", {"probe": "ppo_policy", "variant": "fp32", "side": "infer", "source": "ms20"},
)  # fmt: skip
UNAVAILABLE = Finding("stack-unavailable", "error", "ms20", "ms20/stack-unavailable", "no python")


@pytest.fixture
def store(history_db):
    s = Store.open(f"sqlite:///{history_db}")
    yield s
    s.close()


def run(store: Store, findings: list[Finding], scope: Scope | None = None) -> int:
    run_id = store.begin_run("t.toml", scope.to_json() if scope else None)
    store.finish_run(run_id, CycleResult(0.0, 1.0, "t.toml", {}, [], list(findings)), {})
    return run_id


def engine(store: Store, rec: Recorder, **config) -> AlertEngine:
    sink = {"rec": ConfiguredSink(SinkConfig("rec", "test", "info"), rec)}
    return AlertEngine(store.engine, AlertsConfig(**config), sink, clock=Clock(), builtin_probes=BUILTIN)


def events(e: AlertEngine, run_id: int) -> list[tuple[str, str]]:
    out = [(x.event, x.key) for x in e.evaluate(run_id)]
    e.deliver()
    return out


def test_categories_of_the_findings_a_cycle_makes():
    assert category(MODEL_DRIFT.kind, MODEL_DRIFT.details, BUILTIN) == "models"
    assert category(PROBE_DRIFT.kind, PROBE_DRIFT.details, BUILTIN) == "probes"
    assert category(HAZARD.kind, HAZARD.details, BUILTIN) == "probes"
    assert category(RULE.kind, RULE.details, BUILTIN) == "compatibility"
    assert category(INCOMPATIBLE.kind, INCOMPATIBLE.details, BUILTIN) == "compatibility"
    assert category(VERSION.kind, VERSION.details, BUILTIN) == "version-drift"
    assert category("model-drift", {"rule": "deployed-model-watch"}, BUILTIN) == "version-drift"
    assert category(LATENCY.kind, LATENCY.details, BUILTIN) == "latency"
    assert category(UNAVAILABLE.kind, UNAVAILABLE.details, BUILTIN) == "stacks"
    # a plugin's probe is the user's own
    assert category("drift", {"probe": "discrete_policy"}, BUILTIN) == "models"


def test_by_default_the_built_in_probes_latency_and_info_findings_page_no_one(store):
    rec = Recorder()
    e = engine(store, rec)
    every = [MODEL_DRIFT, PROBE_DRIFT, HAZARD, RULE, INFO_RULE, INCOMPATIBLE, VERSION, LATENCY, UNAVAILABLE]
    first = events(e, run(store, every))
    # at once: the critical incompatibility and the version drift (an event, seen once)
    assert sorted(first) == sorted([("opened", INCOMPATIBLE.key), ("opened", VERSION.key)])
    second = events(e, run(store, [f for f in every if f is not VERSION]))
    assert sorted(k for _, k in second) == sorted([MODEL_DRIFT.key, RULE.key, UNAVAILABLE.key])
    opened = {a["key"] for a in list_alerts(store.engine) if a["state"] == "open"}
    assert PROBE_DRIFT.key not in opened and HAZARD.key not in opened and INFO_RULE.key not in opened
    assert LATENCY.key not in opened  # timings move with the machine's load: on only when asked
    # the built-in probes' findings are still recorded with their run
    with store.engine.connect() as conn:
        from auditor.history.queries import run_detail

        kinds = {f["key"] for f in run_detail(conn, 2).findings}
    assert {PROBE_DRIFT.key, HAZARD.key} <= kinds
    # configurable: [alerts] on = [..., "probes"], min_severity = "info"
    rec2 = Recorder()
    e2 = engine(store, rec2, on=("probes", "compatibility"), min_severity="info", open_after=1)
    e2.auditor_id = None
    assert {k for _, k in events(e2, run(store, every))} >= {PROBE_DRIFT.key, HAZARD.key, INFO_RULE.key}


def test_a_result_alternating_across_the_threshold_opens_no_alert_until_n_in_a_row(store):
    rec = Recorder()
    e = engine(store, rec, open_after=3, resolve_after=2)
    for _ in range(4):  # fail, pass, fail, pass ...: never three in a row
        assert events(e, run(store, [MODEL_DRIFT])) == []
        assert events(e, run(store, [])) == []
    assert rec.events == [] and list_alerts(store.engine) == []
    assert events(e, run(store, [MODEL_DRIFT])) == []
    assert events(e, run(store, [MODEL_DRIFT])) == []
    assert [a["state"] for a in list_alerts(store.engine)] == ["pending"]
    assert events(e, run(store, [MODEL_DRIFT])) == [("opened", MODEL_DRIFT.key)]
    # open: one passing run does not resolve it, a failing one starts the count over
    assert events(e, run(store, [])) == []
    assert events(e, run(store, [MODEL_DRIFT])) == []
    assert events(e, run(store, [])) == []
    assert events(e, run(store, [])) == [("resolved", MODEL_DRIFT.key)]
    assert [x["event"] for x in rec.events] == ["opened", "resolved"]


def test_a_narrowed_run_resolves_only_what_it_ran(store):
    rec = Recorder()
    on = ("models", "compatibility", "version-drift", "stacks", "latency", "devices")
    e = engine(store, rec, open_after=1, resolve_after=1, on=on)
    assert len(events(e, run(store, [MODEL_DRIFT, RULE, LATENCY]))) == 3
    other = Scope(
        {"pair": ["ms20->ms210-graph"]}, ("ms20->ms210-graph",), ("ms20", "ms210-graph"), ("ppo_policy",)
    )
    assert events(e, run(store, [], other)) == []  # neither the model, the rule's pair nor lite20
    pair = Scope({"pair": ["ms210->lite20"]}, ("ms210->lite20",), ("ms210", "lite20"), ("ppo_policy",))
    # the rule's pair was run; the latency of lite20 running ms20's export was not
    assert events(e, run(store, [], pair)) == [("resolved", RULE.key)]
    stack = Scope({"model": ["policy"]}, ("policy:golden->lite20",), ("lite20",), ("policy",))
    assert events(e, run(store, [], stack)) == [("resolved", MODEL_DRIFT.key)]
    stack = Scope({"pair": ["ms20->lite20"]}, ("ms20->lite20",), ("ms20", "lite20"), ("ppo_policy",))
    assert events(e, run(store, [], stack)) == [("resolved", LATENCY.key)]


def test_a_narrowed_run_is_stored_as_such(store):
    scope = Scope({"probe": ["ppo_policy"]}, ("ms20->lite20",), ("ms20", "lite20"), ("ppo_policy",))
    run_id = run(store, [], scope)
    with store.engine.connect() as conn:
        from auditor.history.queries import run_detail

        assert run_detail(conn, run_id).run["selection"]["selectors"] == {"probe": ["ppo_policy"]}
        assert run_detail(conn, run(store, [])).run["selection"] is None
    from auditor.db.health import check

    assert check(store.engine).ok, check(store.engine).problems  # a whole run's NULL is no damage
