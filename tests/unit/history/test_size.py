"""The history's size and its projection (auditor.history.size, ``auditor db size``)."""

from __future__ import annotations

import json

from click.testing import CliRunner

from auditor.cli.main import cli
from auditor.history.size import database_bytes, measure
from auditor.history.store import Store
from tests.report_fixtures import passing_cycle


def test_the_projection_counts_shared_rows_once_and_the_newest_runs_growth_per_run(tmp_path) -> None:
    db = tmp_path / "h.db"
    store = Store.open(f"sqlite:///{db}")
    empty = measure(store.engine, 90, 3600.0)
    assert empty.runs == 0 and empty.projected is None and "nothing to project" in empty.summary()
    for _ in range(3):
        store.finish_run(store.begin_run("auditor.toml"), passing_cycle(), {})
    found = measure(store.engine, 90, 3600.0)
    assert found.runs == 3 and found.bytes > 0 and found.runs_per_day == 24.0
    # the first run stored the shared rows (fingerprints, metric sets, thresholds): a later one adds less
    assert found.newest_run is not None and 0 < found.newest_run < found.per_run
    assert found.projected == max(found.bytes - 3 * found.newest_run, 0) + found.newest_run * 24 * 90
    assert "added by the newest; at 24 run(s) a day kept 90 days: about" in found.summary()
    # and the newest run's figure is what a run adds, once the tables fill more than their first
    # pages: 30 more runs grow the database by about 30 of it
    for _ in range(30):
        store.finish_run(store.begin_run("auditor.toml"), passing_cycle(), {})
    estimate, before = measure(store.engine, 90, 3600.0).newest_run, database_bytes(store.engine)
    for _ in range(30):
        store.finish_run(store.begin_run("auditor.toml"), passing_cycle(), {})
    grown = (database_bytes(store.engine) - before) / 30
    store.close()
    assert estimate is not None and estimate / 2 < grown < estimate * 2, (grown, estimate)
    assert measure(Store.open(f"sqlite:///{db}").engine, 0, 3600.0).projected is None  # never pruned
    out = CliRunner().invoke(cli, ["--db", str(db), "db", "size", "--json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout)
    now = measure(Store.open(f"sqlite:///{db}").engine, 90, 3600.0)
    assert doc["runs"] == 63 and doc["bytes"] == now.bytes and doc["newest_run"] == now.newest_run > 0
