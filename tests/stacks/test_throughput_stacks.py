"""Throughput on the serving side through real stacks: samples/s at each configured batch and a
sweep that finds the saturation batch, stored as series, trended and plotted."""

from __future__ import annotations

from pathlib import Path

import pytest

from auditor.cycle.audit_run import AuditRun
from auditor.exposition.families import summarize
from auditor.exposition.prometheus import MetricsExporter
from auditor.extend.manager import Plugins
from auditor.history.filters import Filters
from auditor.history.queries import trend
from auditor.history.store import Store
from auditor.report.html import render_report
from auditor.report.text import render_text
from tests.configs import build
from tests.conftest import REPO

pytestmark = pytest.mark.stacks


def test_sweep_stored_trended_and_plotted(stacks, default_doc, tmp_path: Path) -> None:
    cfg = build(
        default_doc,
        source=str(REPO / "auditor.toml"),
        stacks={name: default_doc["stacks"][name] for name in ("ms20", "lite20")},
        pairs=[{"train": "ms20", "infer": "lite20", "probes": ["obs_normalizer"]}],
        probe_tables={"obs_normalizer": {"variants": ["fp32"]}},
        rollout={"enabled": False},
        latency={"batches": [1], "sweep": [8, 64, 512], "iterations": 20, "saturation": 0.9},
        telemetry={"enabled": False},
        storage={"url": f"sqlite:///{tmp_path / 'history.db'}"},
    )
    store = Store.open(cfg.db_url)
    plugins = Plugins(entry_points=False)

    results = [AuditRun(cfg, plugins, store).run() for _ in range(2)]
    (r,) = results[-1].results
    # the serving side timed at its own batch (96), [latency] batches and the sweep; the train
    # side only at its own and [latency] batches
    assert [t.batch for t in r.throughput] == [1, 8, 64, 96, 512]
    assert sorted(lat.batch for lat in r.train_latencies) == [1]
    for t, lat in zip(
        r.throughput, sorted([r.infer_latency, *r.infer_latencies], key=lambda x: x.batch), strict=True
    ):
        assert t.samples_per_s == pytest.approx(lat.batch / (lat.p50_us / 1e6))
    peak = max(t.samples_per_s for t in r.throughput)
    assert r.saturation_batch == min(t.batch for t in r.throughput if t.samples_per_s >= 0.9 * peak)
    verbose = render_text(results[-1], verbose=True)  # the compact report leaves it to --verbose
    assert "served " in verbose and f"saturating at batch {r.saturation_batch}" in verbose

    with store.engine.connect() as conn:
        served = {s.output: s for s in trend(conn, "throughput", Filters())}
        (saturation,) = trend(conn, "saturation_batch", Filters())
        page, _ = render_report(conn, Filters(), metric="max_abs")
    assert set(served) == {"b1", "b8", "b64", "b96", "b512"}
    assert all(len(s.points) == 2 and s.pair == "ms20->lite20" for s in served.values())
    assert served["b512"].points[-1][2] == pytest.approx(r.throughput[-1].samples_per_s)
    assert saturation.points[-1][2] == r.saturation_batch
    assert "<h3>ms20-&gt;lite20 · obs_normalizer [fp32] · throughput</h3>" in page
    assert f"saturation batch {r.saturation_batch}" in page

    exporter = MetricsExporter()
    exporter.record_cycle(summarize(results[-1]))
    metrics = exporter.render().decode()
    assert (
        'auditor_throughput_samples_per_second{batch="512",pair="ms20->lite20",probe="obs_normalizer",'
        'stack="lite20",variant="fp32"}' in metrics
    )
    assert "auditor_saturation_batch{" in metrics
    store.close()
