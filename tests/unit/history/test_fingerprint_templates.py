"""A group's fingerprints stored once (auditor.db.fingerprints): twelve members that differ
only in what names their machine store one template and twelve small own parts; every reader
gets each document back whole, drift compares the same digests, and migration 0014 moves an
existing history's documents into templates and back without changing one."""

from __future__ import annotations

import json
from datetime import datetime

from sqlalchemy import func, select, text

from auditor.db import schema as m
from auditor.history.queries import latest_fingerprints, run_detail
from auditor.history.store import Store
from auditor.results import CycleResult, StackReport, fingerprint_digest
from tests.history_fixtures import generate_history, member_document

HOSTS = [f"infer-{i:02d}" for i in range(1, 13)]


def fleet_result(cann: dict[str, str] | None = None) -> CycleResult:
    """A cycle of twelve lite20 members (``cann``: host -> another CANN version)."""
    stacks = {
        f"lite20@{h}": StackReport(
            f"lite20@{h}",
            "infer",
            "mindspore-lite",
            "/opt/lite20/bin/python",
            "cpu",
            h,
            member_document(h, machine_id=f"{i:032x}", serial=f"SN-{i}", cann=(cann or {}).get(h, "8.0.RC3")),
        )
        for i, h in enumerate(HOSTS)
    }
    return CycleResult(1.0, 2.0, "auditor.toml", stacks, [], [])


def test_twelve_members_store_one_template_and_read_back_whole(store):
    result = fleet_result()
    run_id = store.begin_run("auditor.toml")
    store.finish_run(run_id, result, {})
    with store.engine.connect() as conn:
        templates = conn.scalar(select(func.count()).select_from(m.FingerprintTemplate))
        own = [json.dumps(o) for o in conn.execute(select(m.Fingerprint.own)).scalars()]
        detail = run_detail(conn, run_id)
        latest = {r["name"]: r for r in latest_fingerprints(conn)}
    assert templates == 1 and len(own) == 12
    assert max(len(o) for o in own) < 600  # a member's own part, not its ~2 KB document
    for stack in detail.stacks:
        report = result.stacks[stack["name"]]
        assert stack["fingerprint"] == report.fingerprint
        assert stack["fingerprint_digest"] == report.fingerprint_digest
        assert latest[stack["name"]]["document"] == report.fingerprint
    # drift reads the same digest and document the cycle computes
    run, digest, document = store.previous_fingerprint("infer-07", "lite20@infer-07")
    assert (run, digest, document) == (
        run_id,
        fingerprint_digest(result.stacks["lite20@infer-07"].fingerprint),
        result.stacks["lite20@infer-07"].fingerprint,
    )


def test_an_upgraded_member_adds_a_template_and_the_next_cycle_adds_none(store):
    store.finish_run(store.begin_run("auditor.toml"), fleet_result(), {})
    upgraded = fleet_result({"infer-03": "8.1.RC1"})
    run_id = store.begin_run("auditor.toml")
    store.finish_run(run_id, upgraded, {})
    store.finish_run(store.begin_run("auditor.toml"), upgraded, {})
    with store.engine.connect() as conn:
        templates = conn.scalar(select(func.count()).select_from(m.FingerprintTemplate))
        fingerprints = conn.scalar(select(func.count()).select_from(m.Fingerprint))
        changed = [s["name"] for s in run_detail(conn, run_id).stacks if s["fingerprint_changed"]]
    assert (templates, fingerprints, changed) == (2, 13, ["lite20@infer-03"])


def test_migration_0014_splits_every_stored_document_and_joins_them_again(db_url):
    store = Store(db_url)
    try:
        store.upgrade("0013")
        for host in ("infer-01", "infer-02"):
            generate_history(store.engine, 6, start=datetime(2026, 1, 1), host=host)
        with store.engine.begin() as conn:
            for i, host in enumerate(HOSTS[:4]):
                doc = member_document(host, machine_id=f"{i:032x}", serial=f"SN-{i}")
                conn.execute(
                    text("INSERT INTO fingerprints (digest, created_at, document) VALUES (:d, :t, :doc)"),
                    {"d": fingerprint_digest(doc), "t": datetime(2026, 1, 1), "doc": json.dumps(doc)},
                )
            before = _whole(conn)
        store.upgrade()
        assert store.fingerprints(list(before)) == before
        with store.engine.connect() as conn:
            templates = conn.scalar(select(func.count()).select_from(m.FingerprintTemplate))
            runs = conn.execute(text("SELECT id FROM runs")).scalars().all()
            stacks = [s for r in runs for s in run_detail(conn, r).stacks]
        assert len(stacks) > 12 and all(s["fingerprint"] == before[s["fingerprint_digest"]] for s in stacks)
        # the two hosts' generated documents differ in their hostname only, as the members do
        # in their machine: one template per stack and version, and one for the members
        generated = len(before) - 4
        assert generated > 0 and templates == generated // 2 + 1
        store.downgrade("0013")
        with store.engine.connect() as conn:
            assert _whole(conn) == before
    finally:
        store.close()


def _whole(conn) -> dict[str, dict]:
    out = {}
    for digest, document in conn.execute(text("SELECT digest, document FROM fingerprints")).all():
        out[digest] = json.loads(document) if isinstance(document, str) else document
    return out
