"""The shipped operator tables against a fresh sweep of a few operators on the real stacks
(scripts/operator_sweep.py --compare): one case per failure form the tables hold, through the
auditor's own workers. A runtime that changed, or a failure form the auditor no longer reads,
makes this fail."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.stacks

CASES = ("Dense", "SiLU", "ReduceMean", "LayerNorm", "ArgMinWithValueUnpacked")
"""Lite: no primitive, kernel refusing its attributes, wrong output; MindSpore 2.10 on a 2.0 file:
first-call failure; a 2.10 file refused by Lite and MindSpore 2.0 (Dense's version probe)."""


def test_a_fresh_sweep_agrees_with_the_shipped_tables(stacks: Path, tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "scripts" / "operator_sweep.py"),
            "--cases",
            ",".join(CASES),
            "--out",
            str(tmp_path),
            "--compare",
            str(REPO / "plugins" / "runtimes"),
        ],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "every fresh case agrees with the tables" in proc.stdout
    raw = json.loads((tmp_path / "results.json").read_text())
    serves = {(c, s["server"], s["exporter"]): s for c, case in raw["cases"].items() for s in case["serves"]}
    # Each failure is read as the gate reads it: the operator or the version, at load or first call.
    silu = serves[("SiLU", "lite20", "ms20")]
    assert (silu["status"], silu["phase"], silu["operator"], silu["kind"]) == (
        "load-fails",
        "load",
        "SiLU",
        "operator",
    )
    mean = serves[("ReduceMean", "ms210-graph", "ms20")]
    assert (mean["status"], mean["phase"], mean["operator"]) == ("run-fails", "run", "ReduceMean")
    argmin = serves[("ArgMinWithValueUnpacked", "lite20", "ms20")]
    assert (argmin["operator"], argmin["form"]) == ("ArgMinWithValue", "lite-kernel-prepare")
    refused = serves[("Dense", "lite20", "ms210")]
    assert refused["kind"] == "mindir-version" and not refused["admitted"]
    norm = serves[("LayerNorm", "lite20", "ms20")]
    assert norm["status"] == "wrong-output" and norm["max_abs"] > 0.1
