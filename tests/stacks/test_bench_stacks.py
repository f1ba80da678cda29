"""The benches still run: each bench/*.py with --quick on the real reference stacks exits 0 and
prints its figures (no timing is asserted: the machine is shared and noisy; `make bench`
prints the real figures with their goals). The runs carry the ``benches`` marker: `make
test-long` runs them and CI (.ci/run) runs it after `make test`, which leaves them out to
stay within its 15 minutes."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO

BENCHES = {
    "latency_overhead.py": ("reported µs", "bare µs", "ratio", "95% interval", "all stacks pooled"),
    "full_cycle.py": ("ratio cycle / bare", "pair(s) of runs, warm and cold in turn", "load average"),
    "history_queries.py": ("trend: latest 200 points of every series", "trend: latency p50", "sqlite3 ms"),
    "daemon_memory.py": ("VmRSS MB", "idle RSS after the last cycle"),
    "check_vs_cycle.py": ("of cycle", "auditor audit (full cycle)"),
    "importance_ratios.py": ("ppo_clip_share", "ratio steps / cycle wall", "sampled / deterministic"),
    "detection_power.py": (
        "PPO clip share moves 0.1% at e",
        "false alarms on no mismatch",
        "goal (a 0.1% move of PPO's clip share is detected by the default checks)",
    ),
    "model_probe.py": ("suite / plain", "classes: magnitude, nan-inf, sweep", "rollout: ", "localization: "),
    "policy_batch.py": ("auditor RSS MB", "auditor CPU s", "linear at most"),
    "fleet.py": ("auditor CPU s/host", "report lines", "history KB/host", "HTML s"),
    "false_alarms.py": ("false alarms", "clean cycles in the history", "goal (>= 1000 clean cycles"),
    "fix.py": ("wall time", "exports audited", "goal (under 120 s wall)"),
    "gate_matrix.py": ("runtime did", "OK given by `check` to a file the runtime cannot run:"),
    "remote_hosts.py": ("Remote overhead", "over loopback ssh", "Fleet scaling"),
    "telemetry_cost.py": ("telemetry sample of 8 NPUs", "telemetry share of the cycle"),
    "telemetry_queries.py": (
        "newest 200 points of every series",
        "worst value of every series",
        "sqlite3 ms",
    ),
}
NOT_QUICK = {
    "bench_config.py": "helpers of the benches, not a bench",
    "bench_stats.py": "how the benches sum up their rounds' ratios, not a bench",
    "revision.py": "another revision of the auditor beside this checkout, for --against: a helper",
    "phase_timeline.py": "a helper of the benches (where a cycle's time goes), not a bench",
    "soak.py": "the fault suite at any size; its CI size runs in tests/faults/test_faults_stacks.py",
}


def test_every_bench_is_smoke_tested():
    assert {p.name for p in (REPO / "bench").glob("*.py")} - set(NOT_QUICK) == set(BENCHES)


@pytest.mark.stacks
@pytest.mark.benches
@pytest.mark.parametrize("bench", sorted(BENCHES))
def test_bench_runs_quick(stacks, bench):
    out = subprocess.run(
        [sys.executable, str(REPO / "bench" / bench), "--quick"],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=REPO,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    for figure in BENCHES[bench]:
        assert figure in out.stdout, out.stdout
    assert any(ch.isdigit() for ch in out.stdout)


@pytest.mark.stacks
@pytest.mark.benches
def test_latency_bench_times_only_the_named_stacks(stacks):
    # --stack gives a noisy stack many cheap rounds: only the named stacks' rows. lite20 loads
    # only ms20's export (the version rules refuse ms210's), which the bench must find itself.
    out = subprocess.run(
        [
            sys.executable,
            str(REPO / "bench" / "latency_overhead.py"),
            "--quick",
            "--stack",
            "ms20",
            "--stack",
            "lite20",
        ],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=REPO,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    names = ("ms20", "ms210", "lite20", "ms210-graph")
    # The table's rows (the per-round lines below it are indented).
    firsts = [line.split()[0] for line in out.stdout.splitlines() if line.strip() and line[0] != " "]
    rows = [first for first in firsts if first in names]
    assert rows == ["ms20", "lite20"], out.stdout
    assert "lite20 (ms20 export)" in out.stdout


def test_latency_bench_names_an_unknown_stack():
    out = subprocess.run(
        [sys.executable, str(REPO / "bench" / "latency_overhead.py"), "--stack", "nope"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert out.returncode == 1
    assert "--stack nope: no such stack in auditor.toml" in out.stderr
    assert "ms210" in out.stderr  # the known ones are listed
