"""`auditor fix` on the shipped config's own drift: ppo_policy [fp16] exported by ms20 and
served by lite20 (std comes out 0 on Lite 2.0, so PPO would clip every sample).

The oracles are outside the auditor: the written file is loaded and run by MindSpore Lite in
the test's own script, and compared with the policy evaluated in float64 with numpy from the
probe's seeded weights; the printed code change is applied by hand to the probe's network on
ms20, exported by the test and run on lite20 next to the written file.
"""

from __future__ import annotations

import json
import math
import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.cli import auditor
from tests.conftest import DEFAULT_CONFIG, REPO, stack_python
from tests.docs import blocks

pytestmark = pytest.mark.stacks

ARGS = ("fix", "ppo_policy", "--stack", "lite20", "--train", "ms20", "--variant", "fp16")

RUN_LITE = """
import sys, numpy as np, mindspore_lite as mslite
inputs = np.load(sys.argv[1])
for path in sys.argv[2:]:
    ctx = mslite.Context(); ctx.target = ["cpu"]
    model = mslite.Model(); model.build_from_file(path, mslite.ModelType.MINDIR, ctx)
    ins = model.get_inputs()
    for t, name in zip(ins, ("obs", "actions")):
        t.set_data_from_numpy(inputs[name].astype(np.float32))
    outs = [o.get_data_to_numpy() for o in model.predict(ins)]
    np.savez(path + ".out.npz", *outs)
"""

RELOAD_LITE = """
import gc, sys, numpy as np, mindspore_lite as mslite
inputs = np.load(sys.argv[1])
outs = []
for _ in range(2):  # a server replacing its model: the old one freed before the new is built
    ctx = mslite.Context(); ctx.target = ["cpu"]
    model = mslite.Model(); model.build_from_file(sys.argv[2], mslite.ModelType.MINDIR, ctx)
    ins = model.get_inputs()
    for t, name in zip(ins, ("obs", "actions")):
        t.set_data_from_numpy(inputs[name].astype(np.float32))
    outs.append([np.array(o.get_data_to_numpy(), copy=True) for o in model.predict(ins)])
    del model, ins
    gc.collect()
print(all(np.array_equal(a, b) for a, b in zip(*outs)))
"""

APPLY_CHANGE = """
import sys, json, numpy as np, mindspore
sys.path.insert(0, sys.argv[1])
from probes import ppo_policy
mindspore.set_context(mode=mindspore.PYNATIVE_MODE)
params = dict(ppo_policy.DEFAULT_PARAMS, **ppo_policy.VARIANTS["fp16"])
params["dtype"] = "float32"
net = ppo_policy.build_cell(params, ppo_policy.make_weights(params))
exec("\\n".join(json.loads(sys.argv[2])))
inputs = np.load(sys.argv[3])
mindspore.export(net, mindspore.Tensor(inputs["obs"]), mindspore.Tensor(inputs["actions"]),
                 file_name=sys.argv[4], file_format="MINDIR")
"""


def probe_inputs() -> tuple[dict, dict[str, np.ndarray]]:
    sys.path.insert(0, str(REPO))
    from probes import ppo_policy

    params = dict(ppo_policy.DEFAULT_PARAMS, **ppo_policy.VARIANTS["fp16"])
    obs, actions = ppo_policy.make_inputs(params)
    return params, {"obs": obs, "actions": actions}


def float64_policy(params: dict, obs: np.ndarray, actions: np.ndarray) -> dict[str, np.ndarray]:
    """The Gaussian policy in float64 from the probe's seeded weights (cast to float32 first,
    as the fixed export holds them): mean, std, logp of the actions."""
    from probes import ppo_policy

    w = ppo_policy.make_weights({**params, "dtype": "float32"})
    n = len([k for k in w if k.endswith(".weight")])
    h = obs.astype(np.float64)
    for i in range(n):
        h = h @ w[f"fc{i}.weight"].astype(np.float64).T + w[f"fc{i}.bias"].astype(np.float64)
        if i < n - 1:
            h = np.tanh(h)
    log_std = w["log_std"].astype(np.float64)
    std = np.exp(log_std) + np.zeros_like(h)
    z = (actions.astype(np.float64) - h) / std
    logp = (-0.5 * z * z - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
    return {"mean": h, "std": std, "logp": logp}


def documented() -> list[list[str]]:
    """The commands of docs/fix.md's walk-through, as written (after the program's name)."""
    out = []
    for lang, code in blocks("docs/fix.md", "The demo's drift, fixed"):
        if lang == "sh":
            out += [
                shlex.split(line)[1:] for line in code.splitlines() if line.startswith(".venv/bin/auditor ")
            ]
    return out


@pytest.fixture(scope="module")
def fixed(stacks: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path, Path]:
    """docs/fix.md's fix command as written, in a folder of the test's own, with --json."""
    d = tmp_path_factory.mktemp("fix")
    out = d / "fixed.mindir"
    fix = documented()[0]
    assert tuple(fix[: len(ARGS)]) == ARGS and fix[len(ARGS) :] == ["--out", "fixed.mindir"]
    proc = auditor("--config", str(DEFAULT_CONFIG), "--db", str(d / "history.db"), *fix, "--json", cwd=d)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    params, inputs = probe_inputs()
    np.savez(d / "inputs.npz", **inputs)
    return json.loads(proc.stdout), out, d


def test_fix_finds_what_makes_the_demos_fp16_policy_pass_and_says_it(fixed: tuple[dict, Path, Path]) -> None:
    doc, out, _ = fixed
    assert doc["found"] is True and doc["already_passes"] is False
    assert doc["as_configured"]["status"] == "drift" and doc["as_configured"]["failed"] > 0
    # the search's cost is bounded by the cells it searched: 2*ceil(log2 n) + 2
    n = len(doc["network_cells"])
    assert [c["path"] for c in doc["network_cells"]][:3] == ["hidden.0", "hidden.1", "head"]
    assert 1 <= len(doc["candidates"]) <= 2 * math.ceil(math.log2(n)) + 2 == doc["max_candidates"]
    assert doc["exports"] == 1 + len(doc["candidates"]) + 1  # as configured, candidates, float32
    chosen = [c for c in doc["candidates"] if c["keep"] == doc["cells"]]
    assert len(chosen) == 1 and chosen[0]["passed"] is True
    # no candidate that passed kept fewer cells in float32 than the fix
    assert all(len(c["keep"]) >= len(doc["cells"]) for c in doc["candidates"] if c["passed"])
    assert doc["change"][0] == "from mindspore import dtype as mstype"
    assert all(
        re.fullmatch(r"net(\.\w+|\[\d+\])*\.to_float\(mstype\.float(16|32)\)", x) for x in doc["change"][1:]
    )
    assert doc["result"]["status"] == "consistent" and doc["result"]["exit_code"] == 0
    ppo = {k["metric"]: k["value"] for k in doc["result"]["checks"] if k["output"] is None}
    assert ppo["ppo_clip_share"] == 0.0 and ppo["ess"] > 0.999
    for side in ("as_configured", "all_float16", "fix", "all_float32"):
        assert doc["cost"][side]["size"] > 0 and doc["cost"][side]["p50_us"] > 0
    assert out.stat().st_size == doc["cost"]["fix"]["size"]


def test_the_written_file_computes_the_policy_on_lite(fixed: tuple[dict, Path, Path]) -> None:
    """Lite runs the written export; its outputs agree with the float64 policy to float16's
    precision (the configured export's std was 0 on Lite)."""
    doc, out, d = fixed
    subprocess.run(
        [str(stack_python("lite20")), "-c", RUN_LITE, str(d / "inputs.npz"), str(out)],
        check=True,
        timeout=300,
    )
    got = np.load(str(out) + ".out.npz")
    params, inputs = probe_inputs()
    want = float64_policy(params, inputs["obs"], inputs["actions"])
    mean, std, logp = (got[f"arr_{i}"].astype(np.float64) for i in range(3))
    assert np.all(std > 0)
    assert np.allclose(std, want["std"], rtol=2e-3)
    assert np.allclose(mean, want["mean"], atol=5e-3, rtol=5e-3)
    assert np.allclose(logp, want["logp"], atol=0.05, rtol=5e-3)


def test_the_written_file_computes_the_same_after_a_reload(fixed: tuple[dict, Path, Path]) -> None:
    """A candidate that computes other values once Lite built it after freeing a model is no fix:
    the written one computes the same bits the second time."""
    doc, out, d = fixed
    proc = subprocess.run(
        [str(stack_python("lite20")), "-c", RELOAD_LITE, str(d / "inputs.npz"), str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0 and proc.stdout.strip().splitlines()[-1] == "True", (
        proc.stdout + proc.stderr[-2000:]
    )
    for c in doc["candidates"]:  # every candidate rejected says why: its verdict or its reload
        assert c["passed"] == (c["status"] == "consistent" and c["reload"] is None)


def test_the_printed_change_applied_by_hand_gives_the_same_export(fixed: tuple[dict, Path, Path]) -> None:
    doc, out, d = fixed
    by_hand = d / "by_hand"
    subprocess.run(
        [
            str(stack_python("ms20")),
            "-c",
            APPLY_CHANGE,
            str(REPO),
            json.dumps(doc["change"]),
            str(d / "inputs.npz"),
            str(by_hand),
        ],
        check=True,
        timeout=300,
    )
    # each file in a process of its own, as a server starts: a second model built in one Lite
    # 2.0 process was seen computing this export's std from stale memory (its constant fold of
    # a float32 + float16 Add fails)
    for path in (out, f"{by_hand}.mindir"):
        subprocess.run(
            [str(stack_python("lite20")), "-c", RUN_LITE, str(d / "inputs.npz"), str(path)],
            check=True,
            timeout=300,
        )
    ours, theirs = np.load(str(out) + ".out.npz"), np.load(f"{by_hand}.mindir.out.npz")
    assert len(ours.files) == len(theirs.files) == 4
    for name in ours.files:
        assert np.array_equal(ours[name], theirs[name]), name


def test_the_gate_judges_the_fixed_file_on_the_fix_stored(fixed: tuple[dict, Path, Path]) -> None:
    """docs/fix.md's gate on the written file, as written: lite20 loads and runs it, and the
    fix's audit of this very file (stored in the history) answers the measured table's
    warning that Lite 2.0 computes Cast differently; without that history, the warning stays."""
    doc, _, d = fixed
    check = documented()[1]
    assert check[:3] == ["check", "--model", "fixed.mindir"]
    assert isinstance(doc["stored"], int)
    got = {}
    for db in ("history.db", "empty.db"):
        proc = auditor("--config", str(DEFAULT_CONFIG), "--db", str(d / db), *check, "--json", cwd=d)
        (verdict,) = json.loads(proc.stdout)["verdicts"]
        assert verdict["stack"] == "lite20" and verdict["load"]["ok"] is True, proc.stdout[-2000:]
        got[db] = (proc.returncode, verdict)
    code, verdict = got["history.db"]
    assert code == 0 and verdict["status"] == "ok"
    assert any(f"auditor fix {doc['stored']} on " in e and "consistent" in e for e in verdict["evidence"])
    code, verdict = got["empty.db"]
    assert code == 1 and verdict["status"] == "warning" and "Cast" in verdict["reason"]


def test_the_next_cycle_says_a_fixed_export_exists(fixed: tuple[dict, Path, Path]) -> None:
    _, _, d = fixed
    proc = auditor(
        "--config",
        str(DEFAULT_CONFIG),
        "--db",
        str(d / "history.db"),
        "audit",
        "--pair",
        "ms20->lite20",
        cwd=d,
    )
    assert "fixed export: fix 1 keeps" in proc.stdout, proc.stdout[-3000:]
    assert (
        "to fix: auditor fix ppo_policy --stack lite20 --train ms20 --variant tanh-fp16" in proc.stdout
        or (
            "ppo_policy [tanh-fp16]          DRIFT        the same outputs as ppo_policy [fp16]"
            in proc.stdout
        )
    )
    listed = auditor(
        "--config", str(DEFAULT_CONFIG), "--db", str(d / "history.db"), "history", "--fixes", "--json"
    )
    (row,) = json.loads(listed.stdout)
    assert row["name"] == "ppo_policy" and row["variant"] == "fp16" and row["found"] is True
    assert row["sha256"] and row["change"][0] == "from mindspore import dtype as mstype"
