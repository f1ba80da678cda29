"""Every JSON column stores strict JSON: a non-finite number in a finding's details (a peer's
max abs difference of inf, say) is stored as "inf"/"nan", so the history stays valid for
SQLite's json_valid() (the health check) and for PostgreSQL, which refuses Infinity."""

from __future__ import annotations

import sqlite3

from auditor.db import health
from auditor.history.store import Store
from auditor.results import Finding
from tests.report_fixtures import passing_cycle


def test_non_finite_details_are_stored_as_strict_json(tmp_path) -> None:
    db = tmp_path / "h.db"
    store = Store.open(f"sqlite:///{db}")
    result = passing_cycle()
    details = {"max_abs": float("inf"), "values": [float("nan"), -float("inf"), 1.5], "ok": {"x": 2.0}}
    result.findings.append(Finding("out-of-line", "warning", "lite20@a", "k", "differs", details))
    store.finish_run(store.begin_run("auditor.toml"), result, {})
    assert health.check(store.engine, write=False, thorough=True).problems == []
    store.close()
    (stored,) = (
        sqlite3.connect(db).execute("SELECT details FROM findings WHERE kind = 'out-of-line'").fetchone()
    )
    assert stored == '{"max_abs": "inf", "values": ["nan", "-inf", 1.5], "ok": {"x": 2.0}}'
    # and the next audit's health check finds nothing wrong
    assert health.check(Store.open(f"sqlite:///{db}").engine, write=False).problems == []
