"""History queries on a database filled by real audit runs (the reference stacks) and by
generated rows: the values the history returns are the values the audits reported."""

from __future__ import annotations

import csv
import io
import json
from datetime import timedelta

import pytest

from auditor.history.filters import utcnow
from auditor.history.store import Store
from tests.cli import auditor
from tests.conftest import stack_python
from tests.history_fixtures import generate_history

pytestmark = pytest.mark.stacks

PAIRS = ("ms210->ms210-graph", "ms210->lite20", "ms20->lite20", "ms20->ms210-graph")


def config_text() -> str:
    """The shipped stacks and pairs, cut down to one probe variant at a small batch."""
    stacks = "".join(
        f'[stacks.{name}]\nrole = "{role}"\nruntime = "{runtime}"\npython = "{stack_python(base)}"\n\n'
        for name, role, runtime, base in (
            ("ms210", "train", "mindspore", "ms210"),
            ("ms210-graph", "infer", "mindspore-graph", "ms210"),
            ("ms20", "train", "mindspore", "ms20"),
            ("lite20", "infer", "mindspore-lite", "lite20"),
        )
    )
    pairs = "".join(
        f'[[pairs]]\ntrain = "{p.split("->")[0]}"\ninfer = "{p.split("->")[1]}"\nprobes = ["ppo_policy"]\n\n'
        for p in PAIRS
    )
    return (
        "[latency]\nwarmup = 2\niterations = 10\nbatches = []\n\n[rollout]\nenabled = false\n\n"
        + stacks
        + pairs
        + '[probes.ppo_policy]\nvariants = ["fp32"]\nparams = { batch = 64, seed = 0 }\n'
    )


@pytest.fixture(scope="module")
def filled(stacks, tmp_path_factory):
    """Two real audits, then a day of generated history ten days earlier, in one database."""
    tmp = tmp_path_factory.mktemp("hist-stacks")
    config, db = tmp / "auditor.toml", tmp / "history.db"
    config.write_text(config_text())
    started = utcnow().replace(microsecond=0) - timedelta(seconds=1)
    audits = []
    for _ in range(2):
        proc = auditor("--config", str(config), "--db", str(db), "audit", "--json", timeout=900)
        assert proc.returncode in (0, 1), proc.stderr[-3000:]
        audits.append(json.loads(proc.stdout))
    store = Store.open(f"sqlite:///{db}")
    generated = generate_history(store.engine, 96, start=started - timedelta(days=10))
    store.close()
    return config, db, audits, started, generated


def result_of(audit: dict, pair: str) -> dict:
    return next(r for r in audit["results"] if r["pair"] == pair)


def test_real_metric_values_come_back_through_history_csv(filled):
    _, db, audits, started, _ = filled
    proc = auditor(
        "--db", str(db), "history", "--pair", "ms20->lite20", "--metric", "max_abs", "--metric", "cosine",
        "--since", started.isoformat(), "--limit", "0", "--format", "csv",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    rows = list(csv.DictReader(io.StringIO(proc.stdout)))
    expected = {}
    for audit in audits:
        r = result_of(audit, "ms20->lite20")
        assert r["status"] in ("consistent", "drift")
        for o in r["outputs"]:
            for name in ("max_abs", "cosine"):
                expected[(audit["run_id"], o["output"], name)] = o["metrics"][name]
    got = {(int(r["run"]), r["output"], r["metric"]): float(r["value"]) for r in rows}
    assert got == expected
    assert {int(r["run"]) for r in rows} == {a["run_id"] for a in audits}
    # MindSpore 2.0 and Lite 2.0 differ a little, but not by much (FACTS.md: ~1e-6)
    assert all(0 < v < 1e-4 for (_, _, name), v in got.items() if name == "max_abs")


def test_real_incompatibility_by_status_as_json(filled):
    _, db, audits, started, _ = filled
    proc = auditor("--db", str(db), "history", "--status", "incompatible", "--since", started.isoformat(),
                   "--format", "json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert {(d["run"], d["pair"]) for d in doc} == {(a["run_id"], "ms210->lite20") for a in audits}
    for d in doc:
        assert "MindIR version 3" in d["message"] and d["infer_p50_us"] is None and d["train_p50_us"] > 0


def test_real_and_generated_rows_side_by_side(filled):
    _, db, audits, started, generated = filled
    proc = auditor("--db", str(db), "history", "--pair", "ms20->lite20", "--limit", "0", "--format", "json")
    doc = json.loads(proc.stdout)
    real = [d for d in doc if d["run"] in {a["run_id"] for a in audits}]
    fake = [d for d in doc if d["run"] in set(generated.run_ids)]
    assert len(real) == 2 and len(fake) == generated.counts["probe_results"] // len(PAIRS)
    assert doc[0]["run"] == audits[-1]["run_id"]  # the real runs are the newest
    # --until before the real runs leaves only generated ones
    proc = auditor(
        "--db", str(db), "history", "--until", started.isoformat(), "--limit", "0", "--format", "csv"
    )
    runs = {int(r["run"]) for r in csv.DictReader(io.StringIO(proc.stdout))}
    assert runs and runs <= set(generated.run_ids)


def test_show_real_run(filled):
    _, db, audits, _, _ = filled
    audit = audits[-1]
    proc = auditor("--db", str(db), "show", str(audit["run_id"]), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["run"]["outcome"] == audit["outcome"]
    stacks = {s["name"]: s for s in doc["stacks"]}
    assert set(stacks) == set(audit["stacks"])
    for name, s in audit["stacks"].items():
        assert stacks[name]["fingerprint_digest"] == s["fingerprint_digest"]
        assert stacks[name]["fingerprint"] == s["fingerprint"]
        assert not stacks[name]["fingerprint_changed"]  # same stacks as the first audit
        assert stacks[name]["previous_run"] == audits[0]["run_id"]
    shown = {(r["pair"], r["probe"], r["variant"]): r for r in doc["results"]}
    assert len(shown) == len(audit["results"])
    r = result_of(audit, "ms20->lite20")
    s = shown[("ms20->lite20", "ppo_policy", r["variant"])]
    assert s["status"] == r["status"]
    assert s["latency"]["infer"]["p50_us"] == r["infer_latency"]["p50_us"]
    assert {o["output"]: o["metrics"]["max_abs"] for o in r["outputs"]} == {
        o: v["max_abs"] for o, v in s["metrics"].items() if "max_abs" in v
    }
    text = auditor("--db", str(db), "show", "latest").stdout
    assert (
        text.startswith(f"run {audit['run_id']}  complete")
        and "ms210->lite20  ppo_policy [fp32]  INCOMPATIBLE" in text
    )


def test_real_latency_trend(filled):
    _, db, audits, started, _ = filled
    proc = auditor("--db", str(db), "trend", "--metric", "latency.infer.p50_us", "--pair", "ms20->lite20",
                   "--since", started.isoformat(), "--format", "json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (series,) = json.loads(proc.stdout)["series"]
    assert [p["value"] for p in series["points"]] == [
        result_of(a, "ms20->lite20")["infer_latency"]["p50_us"] for a in audits
    ]


def test_report_and_prune_on_the_mixed_history(filled, tmp_path):
    config, db, audits, started, generated = filled
    out = tmp_path / "report.html"
    proc = auditor("--db", str(db), "report", "--out", str(out), "--since", "30d")
    assert proc.returncode == 0, proc.stderr
    page = out.read_text()
    assert page.count('alt="max_abs and p50 latency of ') == len(PAIRS)
    # and the serving side's throughput, where it ran (ms210 -> lite20 cannot load)
    assert page.count("· throughput</h3>") == len(PAIRS) - 1
    assert "mindspore-lite" in page  # the real fingerprints, side by side
    # the generated runs are another auditor's ("generated"): an auditor prunes only its own
    proc = auditor("--db", str(db), "db", "prune", "--keep-days", "5", "--all-auditors", "--json")
    result = json.loads(proc.stdout)
    assert result["runs"] == len(generated.run_ids)
    proc = auditor("--db", str(db), "history", "--limit", "0", "--format", "json")
    assert {d["run"] for d in json.loads(proc.stdout)} == {a["run_id"] for a in audits}
