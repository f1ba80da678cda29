"""The history's size and its projection (auditor.history.size, ``auditor db size``)."""

from __future__ import annotations

import json

from click.testing import CliRunner

from auditor.cli.main import cli
from auditor.history.size import measure
from auditor.history.store import Store
from tests.report_fixtures import passing_cycle


def test_the_projection_is_the_average_run_at_the_schedules_rate(tmp_path) -> None:
    db = tmp_path / "h.db"
    store = Store.open(f"sqlite:///{db}")
    empty = measure(store.engine, 90, 3600.0)
    assert empty.runs == 0 and empty.projected is None and "nothing to project" in empty.summary()
    for _ in range(3):
        store.finish_run(store.begin_run("auditor.toml"), passing_cycle(), {})
    found = measure(store.engine, 90, 3600.0)
    store.close()
    assert found.runs == 3 and found.bytes > 0 and found.runs_per_day == 24.0
    assert found.projected == found.bytes / 3 * 24 * 90
    assert "at 24 run(s) a day kept 90 days: about" in found.summary()
    assert measure(Store.open(f"sqlite:///{db}").engine, 0, 3600.0).projected is None  # never pruned
    out = CliRunner().invoke(cli, ["--db", str(db), "db", "size", "--json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout)
    assert doc["runs"] == 3 and doc["bytes"] == found.bytes
