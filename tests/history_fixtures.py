"""Generated audit history: many runs written straight into the history tables.

The tests of the history queries and the query benchmark need a history far longer than
real cycles can produce in a test run (a real cycle takes seconds; a year of cycles every
15 minutes is 35,000 runs). The generator writes rows shaped like the real ones (the same
stacks, pairs, metric names, fingerprint sections and statuses as the shipped config) with
bulk inserts, and tells a story the queries can be checked against: one stack is upgraded
part-way through, after which one pair drifts.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import numpy as np
from sqlalchemy import JSON, Engine, column, func, insert, inspect, select, table
from sqlalchemy.orm import Session

from auditor.compare.outputs import METRIC_NAMES
from auditor.db import fingerprints
from auditor.db import schema as m
from auditor.db.content import metric_set_digest, threshold_sets
from auditor.history import series
from auditor.results import fingerprint_digest

# (name, role, runtime, python version, runtime package, runtime version), as in auditor.toml.
STACKS: tuple[tuple[str, str, str, str, str, str], ...] = (
    ("ms210", "train", "mindspore", "3.11.7", "mindspore", "2.10.0"),
    ("ms210-graph", "infer", "mindspore-graph", "3.11.7", "mindspore", "2.10.0"),
    ("ms20", "train", "mindspore", "3.7.16", "mindspore", "2.0.0"),
    ("lite20", "infer", "mindspore-lite", "3.7.16", "mindspore-lite", "2.0.0"),
)

# pair -> how it behaves: "bitwise" (same version), "close" (small real difference),
# "incompatible" (the infer stack cannot load the export).
PAIRS: dict[str, str] = {
    "ms210->ms210-graph": "bitwise",
    "ms210->lite20": "incompatible",
    "ms20->lite20": "close",
    "ms20->ms210-graph": "close",
}

UPGRADED_STACK = "lite20"
UPGRADED_VERSION = "2.0.1"
DRIFTING_PAIR = "ms20->lite20"
ATOL = 1e-5


@dataclass
class GeneratedHistory:
    """What was written, for tests and the benchmark to check against."""

    run_ids: list[int] = field(default_factory=list)
    first: datetime | None = None
    last: datetime | None = None
    upgrade_run_id: int | None = None
    upgrade_at: datetime | None = None
    counts: dict[str, int] = field(default_factory=dict)


def fingerprint_document(stack: str, version: str | None = None, host: str = "generated") -> dict:
    """A fingerprint shaped like the collectors' (see the schema note): sections of objects."""
    name, role, runtime, py, package, default_version = next(s for s in STACKS if s[0] == stack)
    version = version or default_version
    numpy_version = "2.4.6" if py.startswith("3.11") else "1.21.6"
    executable = f"/opt/auditor/stacks/{stack}/bin/python"
    return {
        "host": {
            "hostname": host,
            "os_release": {"ID": "debian", "VERSION_ID": "12", "PRETTY_NAME": "Debian GNU/Linux 12"},
            "kernel": "6.1.0-28-amd64",
            "arch": "x86_64",
            "python": {"version": py, "executable": executable, "implementation": "CPython"},
        },
        "packages": {
            "all": {package: version, "numpy": numpy_version},
            "framework": {package: version, "numpy": numpy_version},
        },
        "environment": {"OMP_NUM_THREADS": "2"},
        "runtime": {
            "runtime": runtime,
            "runtime_package": package,
            "runtime_version": version,
            "python": py,
            "numpy": numpy_version,
            "executable": executable,
        },
    }


def member_document(
    host: str, machine_id: str = "0" * 32, serial: str = "SN-1", cann: str = "8.0.RC3"
) -> dict:
    """A group member's document as the collectors and the remote connection make it."""
    model = f"/srv/{host}/policy.mindir"
    return {
        "host": {"hostname": host, "machine_id": machine_id, "kernel": "6.1.0", "arch": "aarch64"},
        "cann": {"version": cann, "root": "/usr/local/Ascend"},
        "npu_smi": {"npus": {"0": {"board": {"serial_number": serial, "firmware_version": "7.5.0"}}}},
        "models": {
            "patterns": [model],
            "files": {model: {"sha256": "ab" * 32, "size": 9012}},
        },
        "runtime": {"executable": f"/opt/{host}/lite20/bin/python", "runtime_version": "2.0.0"},
        "connection": {
            "host": host,
            "transport": "ssh",
            "destination": f"auditor@{host}:22",
            "address": "10.0.0.7:22",
        },
    }


def _next_id(conn, column) -> int:  # type: ignore[no-untyped-def]
    return int(conn.scalar(select(func.coalesce(func.max(column), 0)))) + 1


def generate_history(
    engine: Engine,
    runs: int = 200,
    *,
    start: datetime = datetime(2026, 1, 1),
    interval: timedelta = timedelta(minutes=15),
    probes: Sequence[str] = ("ppo_policy",),
    variants: Sequence[str] = ("fp32",),
    outputs: Sequence[str] = ("mean", "std"),
    upgrade_at: float | None = 0.5,
    error_rate: float = 0.01,
    abort_rate: float = 0.005,
    host: str = "generated",
    seed: int = 0,
    batch_runs: int = 500,
    models: Sequence[str] = (),
) -> GeneratedHistory:
    """Append ``runs`` complete (or aborted) runs, ``interval`` apart from ``start``.

    At ``upgrade_at`` (a fraction of the runs; None: never) stack lite20 moves from
    MindSpore Lite 2.0.0 to 2.0.1 (a new fingerprint) and from then on pair ms20->lite20
    drifts (max_abs above atol). About ``error_rate`` of the results are worker errors and
    ``abort_rate`` of the runs are aborted with nothing stored, like real ones. ``models``:
    ``[models.NAME]`` results too, each served by lite20 against its golden (pair
    ``NAME:golden->lite20``, variant ``model``). ``host`` is the runs' auditor and host.
    """
    rng = np.random.default_rng(seed)
    out = GeneratedHistory(counts=dict.fromkeys(("runs", "probe_results", "metrics", "latencies"), 0))
    upgrade_index = None if upgrade_at is None else int(runs * upgrade_at)
    with engine.begin() as conn:
        # a database at an old revision (migration tests) has no auditor column yet, and its
        # results hold their own metrics and thresholds (before 0013: no metric sets)
        has_auditor_id = "auditor_id" in {c["name"] for c in inspect(conn).get_columns("runs")}
        content = inspect(conn).has_table("metric_sets")
        templates = inspect(conn).has_table("fingerprint_templates")  # since 0014
        results_table, metrics_table = (
            (m.ProbeResultRow, m.MetricRow) if content else (OLD_RESULTS, OLD_METRICS)
        )
        # sets stored by an earlier call on this history
        known_sets = dict(conn.execute(select(m.MetricSet.digest, m.MetricSet.id)).all()) if content else {}
        stack_ids: dict[str, int] = {}
        for name, role, runtime, _py, _pkg, _ver in STACKS:
            sid = conn.scalar(select(m.Stack.id).where(m.Stack.host == host, m.Stack.name == name))
            if sid is None:
                sid = conn.execute(
                    insert(m.Stack).values(
                        host=host,
                        name=name,
                        role=role,
                        runtime=runtime,
                        python=f"/opt/auditor/stacks/{name}/bin/python",
                        device="cpu",
                    )
                ).inserted_primary_key[0]
            stack_ids[name] = sid
        digests: dict[tuple[str, bool], str] = {}
        for name, *_ in STACKS:
            for upgraded in (False, True):
                version = UPGRADED_VERSION if upgraded and name == UPGRADED_STACK else None
                doc = fingerprint_document(name, version, host)
                digest = fingerprint_digest(doc)
                digests[(name, upgraded)] = digest
                if templates:
                    fingerprints.store(Session(conn), {digest: doc}, start)
                else:
                    old = OLD_FINGERPRINTS
                    if conn.scalar(select(old.c.digest).where(old.c.digest == digest)) is None:
                        conn.execute(insert(old).values(digest=digest, created_at=start, document=doc))
        thresholds = {o: {"atol": ATOL, "rtol": ATOL} for o in outputs}
        tolerances: dict[str, object] = {"thresholds": thresholds}
        if content:
            (tolerances["thresholds_id"],) = threshold_sets(Session(conn), [thresholds])
            del tolerances["thresholds"]
            tolerances["metric_set_id"] = None  # set below where the result has figures
            set_id = _next_id(conn, m.MetricSet.id)
        run_id = _next_id(conn, m.Run.id)
        result_id = _next_id(conn, m.ProbeResultRow.id)
        metric_id = _next_id(conn, m.MetricRow.id)
        latency_id = _next_id(conn, m.LatencyRow.id)
        finding_id = _next_id(conn, m.FindingRow.id)

    for chunk_start in range(0, runs, batch_runs):
        rows: dict[str, list[dict]] = {k: [] for k in ("runs", "rs", "pr", "ms", "mt", "lat", "fi")}
        for i in range(chunk_start, min(runs, chunk_start + batch_runs)):
            started = start + i * interval
            upgraded = upgrade_index is not None and i >= upgrade_index
            if upgraded and out.upgrade_run_id is None:
                out.upgrade_run_id, out.upgrade_at = run_id, started
            aborted = rng.random() < abort_rate
            statuses: list[str] = []
            for name, *_ in STACKS:
                rows["rs"].append(
                    {
                        "run_id": run_id,
                        "stack_id": stack_ids[name],
                        "fingerprint_digest": digests[(name, upgraded)],
                        "error": None,
                    }
                )
            units = [*PAIRS.items(), *((f"{name}:golden->lite20", "model") for name in models)]
            for pair, kind in [] if aborted else units:
                train, infer = ("lite20", "lite20") if kind == "model" else pair.split("->")
                for probe in [pair.split(":")[0]] if kind == "model" else probes:
                    for variant in ["model"] if kind == "model" else variants:
                        status, message = "consistent", "all outputs within tolerance"
                        drifting = upgraded and pair == DRIFTING_PAIR
                        if kind == "incompatible":
                            status = "incompatible"
                            message = (
                                f"{infer} (mindspore-lite 2.0.0) cannot load the MindIR exported by {train} "
                                "(MindSpore 2.10.0): the file has MindIR version 3, the runtime reads at "
                                "most version 1"
                            )
                        elif rng.random() < error_rate:
                            status, message = "error", f"infer side: {infer} worker timed out after 120 s"
                        rows["pr"].append(
                            {
                                "id": result_id,
                                "run_id": run_id,
                                "pair": pair,
                                "train_stack_id": stack_ids[train],
                                "infer_stack_id": stack_ids[infer],
                                "probe": probe,
                                "probe_version": "1",
                                "variant": variant,
                                "status": status,
                                "message": message,
                                "artifact_sha256": None,
                                **tolerances,
                            }
                        )
                        base_train = 19000.0 if train == "ms210" else 1500.0
                        base_infer = {"lite20": 90.0, "ms210-graph": 460.0}[infer]
                        sides = [("train", train, base_train)]
                        if status == "consistent":
                            sides.append(("infer", infer, base_infer))
                        # as the store writes them: each side at the probe's batch, then at batch 1
                        for batch, factor in ((256, 1.0), (1, 0.6)):
                            for side, stack, base in sides:
                                p50 = base * factor * float(rng.lognormal(0.0, 0.08))
                                rows["lat"].append(
                                    {
                                        "id": latency_id,
                                        "result_id": result_id,
                                        "stack_id": stack_ids[stack],
                                        "side": side,
                                        "batch": batch,
                                        "samples": 50,
                                        "p50_us": p50,
                                        "p90_us": p50 * 1.3,
                                        "p99_us": p50 * 2.5,
                                        "mean_us": p50 * 1.1,
                                    }
                                )
                                latency_id += 1
                        if status == "consistent":
                            found = []
                            for output in outputs:
                                metrics = _metrics(kind, drifting, rng)
                                if metrics["max_abs"] > ATOL:
                                    status = "drift"
                                # a metric added later reads 0
                                found.extend((output, name, metrics.get(name, 0.0)) for name in METRIC_NAMES)
                            owner = {"result_id": result_id}
                            if content:  # stored once per set of figures, as the store does
                                digest = metric_set_digest(found)
                                known = known_sets.get(digest)
                                rows["pr"][-1]["metric_set_id"] = owner["set_id"] = known or set_id
                                del owner["result_id"]
                                if known is None:
                                    known_sets[digest] = set_id
                                    rows["ms"].append({"id": set_id, "digest": digest, "created_at": start})
                                    set_id += 1
                                else:
                                    found = []
                            for output, name, value in found:
                                rows["mt"].append(
                                    {"id": metric_id, **owner, "output": output, "name": name, "value": value}
                                )
                                metric_id += 1
                            if status == "drift":
                                rows["pr"][-1]["status"] = "drift"
                                rows["pr"][-1]["message"] = "some outputs out of tolerance"
                        if status != "consistent":
                            severity = {"drift": "warning", "incompatible": "critical", "error": "error"}
                            rows["fi"].append(
                                {
                                    "id": finding_id,
                                    "run_id": run_id,
                                    "kind": status,
                                    "severity": severity[status],
                                    "subject": pair,
                                    "key": f"{pair}/{probe}/{variant}/{status}",
                                    "message": rows["pr"][-1]["message"],
                                    "details": {"probe": probe, "variant": variant},
                                }
                            )
                            finding_id += 1
                        statuses.append(status)
                        result_id += 1
            order = ("consistent", "drift", "incompatible", "error")
            rows["runs"].append(
                {
                    "id": run_id,
                    "started_at": started,
                    "finished_at": started + timedelta(seconds=6),
                    "status": "aborted" if aborted else "complete",
                    "outcome": None if aborted else max(statuses or ["consistent"], key=order.index),
                    "host": host,
                    **({"auditor_id": host} if has_auditor_id else {}),
                    "pid": 4242,
                    "config_path": "auditor.toml",
                    "note": "interrupted by SIGTERM" if aborted else None,
                }
            )
            out.run_ids.append(run_id)
            out.first = out.first or started
            out.last = started
            run_id += 1
        with engine.begin() as conn:
            for model, key in (
                (m.Run, "runs"),
                (m.RunStack, "rs"),
                (m.MetricSet, "ms"),
                (results_table, "pr"),
                (metrics_table, "mt"),
                (m.LatencyRow, "lat"),
                (m.FindingRow, "fi"),
            ):
                if rows[key]:
                    conn.execute(insert(model), rows[key])
        out.counts["runs"] += len(rows["runs"])
        out.counts["probe_results"] += len(rows["pr"])
        out.counts["metrics"] += len(rows["mt"])
        out.counts["latencies"] += len(rows["lat"])
    with engine.begin() as conn:
        # At an older revision the list is absent, or its migration (0006, 0013) fills it.
        if inspect(conn).has_table("metric_sets"):
            # what the store does per run, once for the whole bulk insert (once per chunk
            # would read the growing metrics table again and again)
            series.rebuild(conn)
    _advance_sequences(engine)
    return out


OLD_RESULTS = table(
    "probe_results",
    *(column(c) for c in ("id", "run_id", "pair", "train_stack_id", "infer_stack_id", "probe")),
    *(column(c) for c in ("probe_version", "variant", "status", "message", "artifact_sha256")),
    column("thresholds", JSON()),
)
"""probe_results before migration 0013 (its thresholds in each row)."""
OLD_FINGERPRINTS = table("fingerprints", column("digest"), column("created_at"), column("document", JSON()))
"""fingerprints before migration 0014 (each document whole)."""
OLD_METRICS = table("metrics", *(column(c) for c in ("id", "result_id", "output", "name", "value")))
"""metrics before migration 0013 (rows of a result, not of a set)."""


def _advance_sequences(engine: Engine) -> None:
    """Rows were inserted with explicit ids: on PostgreSQL, move each id sequence past them so
    that later ordinary inserts (the auditor's) do not collide. SQLite needs nothing."""
    if engine.dialect.name != "postgresql":
        return
    with engine.begin() as conn:
        models = (m.Run, m.ProbeResultRow, m.MetricRow, m.LatencyRow, m.FindingRow, m.Stack, m.MetricSet)
        for model in models:
            table = model.__table__.name
            if not inspect(conn).has_table(table):
                continue
            conn.exec_driver_sql(
                f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), "
                f"COALESCE((SELECT max(id) FROM {table}), 0) + 1, false)"
            )


def _metrics(kind: str, drifting: bool, rng: np.random.Generator) -> dict[str, float]:
    if kind == "bitwise":
        return {
            "max_abs": 0.0,
            "max_rel": 0.0,
            "mean_abs": 0.0,
            "cosine": 1.0,
            "rel_lt_1e-3": 1.0,
            "bitwise_equal": 1.0,
            "nan_inf_mismatch": 0.0,
            "min_atol": 0.0,
            "min_rtol": 0.0,
        }
    scale = 3e-5 if drifting else 5e-7
    max_abs = scale * float(rng.lognormal(0.0, 0.25))
    return {
        "max_abs": max_abs,
        "max_rel": max_abs * 16.0,
        "mean_abs": max_abs / 4.3,
        "cosine": 1.0 - max_abs * max_abs * 10.0,
        "rel_lt_1e-3": 1.0 if not drifting else 0.97,
        "bitwise_equal": 0.0,
        "nan_inf_mismatch": 0.0,
        "min_atol": max_abs if max_abs > ATOL else 0.0,
        "min_rtol": max_abs * 16.0 if max_abs > ATOL else 0.0,
    }


def metric_rows_per_run(
    probes: Sequence[str] = ("ppo_policy",),
    variants: Sequence[str] = ("fp32",),
    outputs: Sequence[str] = ("mean", "std"),
) -> int:
    """Metric rows one generated run writes (the incompatible pair has none), errors aside."""
    measured = sum(1 for kind in PAIRS.values() if kind != "incompatible")
    return measured * len(probes) * len(variants) * len(outputs) * len(METRIC_NAMES)


def runs_for(metric_rows: int, **shape: Sequence[str]) -> int:
    """How many runs give at least ``metric_rows`` metric rows (with margin for errors/aborts)."""
    return math.ceil(metric_rows / metric_rows_per_run(**shape) / 0.98)


__all__ = [
    "GeneratedHistory",
    "fingerprint_document",
    "generate_history",
    "member_document",
    "metric_rows_per_run",
    "runs_for",
]
