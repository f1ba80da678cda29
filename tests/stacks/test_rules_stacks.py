"""Rules inside real cycles: ms210 -> lite20 is reported once, by the MindIR rule, and never
loaded; without the rule the load is attempted, refused, and the refusal teaches the limit,
which the next cycle uses."""

from __future__ import annotations

import time

import pytest

from auditor.cycle.cycle import Cycle
from auditor.extend.manager import Plugins
from auditor.history.store import Store
from auditor.results import INCOMPATIBLE, LearnedMaximum
from auditor.stacks.worker import StackWorker
from tests.configs import build

pytestmark = pytest.mark.stacks


@pytest.fixture(scope="module")
def plugins() -> Plugins:
    return Plugins(entry_points=False)


def ms210_to_lite20(default_doc: dict):
    return build(
        default_doc,
        source="test",
        stacks={name: default_doc["stacks"][name] for name in ("ms210", "lite20")},
        pairs=[{"train": "ms210", "infer": "lite20", "probes": ["ppo_policy"]}],
        variants={"ppo_policy": ["fp32", "fp16"]},
        latency={"warmup": 1, "iterations": 3},
    )


@pytest.fixture
def requests(monkeypatch):
    """Every request any worker gets in this test, as (stack, op)."""
    seen: list[tuple[str, str]] = []
    original = StackWorker.request

    def spy(self, op, *args, **kwargs):
        seen.append((self.stack.name, op))
        return original(self, op, *args, **kwargs)

    monkeypatch.setattr(StackWorker, "request", spy)
    return seen


def run_cycle(config, plugins, store, **kw):
    run_id = store.begin_run("test")
    cycle = Cycle(config, plugins.probes(), plugins.runtimes(), plugins=plugins, history=store, **kw)
    result = cycle.run()
    store.finish_run(run_id, result, cycle.artifacts)
    return result


def test_the_mindir_rule_reports_ms210_to_lite20_once_and_skips_the_load(
    stacks, default_doc, plugins, tmp_path, requests
):
    store = Store.open(f"sqlite:///{tmp_path / 'h.db'}")
    result = run_cycle(ms210_to_lite20(default_doc), plugins, store)
    assert [(r.variant, r.status) for r in result.results] == [("fp32", INCOMPATIBLE), ("fp16", INCOMPATIBLE)]
    for r in result.results:
        assert "the file has MindIR version 3, the runtime reads at most version 1" in r.message
        assert "known limit of MindSpore Lite 2.0.0" in r.message and "load was not attempted" in r.message
        assert r.log == "" and r.outputs == () and r.infer_latency is None
        assert r.artifact.info["mind_ir_version"] == 3 and "MatMul" in r.artifact.info["op_types"]
    assert ("lite20", "load") not in requests and ("lite20", "fingerprint") in requests
    incompatible = [f for f in result.findings if f.kind == "incompatible"]
    assert [(f.subject, f.key, f.severity) for f in incompatible] == [
        ("ms210->lite20", "ms210->lite20/mindir-version", "critical")
    ]
    assert result.learned_maxima == []
    # Every exported artifact is stored with its MindIR summary.
    from sqlalchemy import select
    from sqlalchemy.orm import Session

    from auditor.db import schema as m

    with Session(store.engine) as s:
        infos = [a.info for a in s.scalars(select(m.Artifact))]
    assert len(infos) == 2 and all(i["parameter_count"] == 7 for i in infos)
    assert {tuple(i["parameter_dtypes"]) for i in infos} == {("float32",), ("float16",)}


def test_without_the_rule_the_refusal_teaches_the_limit_for_the_next_run(
    stacks, default_doc, plugins, tmp_path
):
    config = ms210_to_lite20(default_doc)
    store = Store.open(f"sqlite:///{tmp_path / 'h.db'}")
    others = [r for r in plugins.rules().values() if r.name != "mindir-version"]
    first = run_cycle(config, plugins, store, rules=others)
    assert {r.status for r in first.results} == {INCOMPATIBLE}
    assert all("maximum mind ir version: 1" in r.log for r in first.results)  # the runtime said so
    assert [(m.package, m.version, m.max_mind_ir_version) for m in first.learned_maxima] == [
        ("mindspore-lite", "2.0.0", 1)
    ]
    learned = store.mindir_limits()[("mindspore-lite", "2.0.0")]
    assert isinstance(learned, LearnedMaximum) and learned.max_mind_ir_version == 1
    assert "maximum mind ir version: 1" in learned.message

    second = run_cycle(config, plugins, store)
    for r in second.results:
        assert r.status == INCOMPATIBLE and r.log == ""
        assert (
            f"learned from its own rejection message on {time.strftime('%Y-%m-%d', time.gmtime())}"
            in r.message
        )
