"""`auditor fix` where the serving stack converts: the shipped config's lite20 with a
deployment's MindSpore Lite conversion to .ms storing weights in float16 (weight_fp16). The
search runs on the converted model; none of its candidates passes with weight_fp16 (Lite 2.0
reads the folded float32 constants of a .ms stored in float16 wrongly), so it searches again
with the converter's other setting and says the config change with the code change.

The oracles are outside the auditor: the test converts the written export itself with Lite's
converter as the fix says (weight_fp16 off), runs the .ms on Lite, and compares it with the
policy evaluated in float64; the converter's precision settings are read by the test from
Lite's own Converter object.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.cli import auditor
from tests.conftest import DEFAULT_CONFIG, stack_python
from tests.stacks.test_fix_stacks import float64_policy, probe_inputs

pytestmark = pytest.mark.stacks

CONVERT = """
import sys, mindspore_lite as mslite
conv = mslite.Converter()
print(" ".join(sorted(a for a in dir(conv) if not a.startswith("_"))))
conv.save_type = mslite.ModelType.MINDIR_LITE
conv.weight_fp16 = False
conv.convert(mslite.FmkType.MINDIR, sys.argv[1], sys.argv[2])
"""

RUN = """
import sys, numpy as np, mindspore_lite as mslite
inputs = np.load(sys.argv[1])
ctx = mslite.Context(); ctx.target = ["cpu"]
model = mslite.Model(); model.build_from_file(sys.argv[3] + ".ms", mslite.ModelType.MINDIR_LITE, ctx)
ins = model.get_inputs()
for t, name in zip(ins, ("obs", "actions")):
    t.set_data_from_numpy(inputs[name].astype(np.float32))
np.savez(sys.argv[3] + ".out.npz", *[o.get_data_to_numpy() for o in model.predict(ins)])
"""


@pytest.fixture(scope="module")
def fixed(stacks: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path, Path]:
    d = tmp_path_factory.mktemp("fixconvert")
    text = DEFAULT_CONFIG.read_text()
    head = 'lite20/bin/python"\ndevice = "cpu"\n'
    assert text.count(head) == 1
    config = d / "auditor.toml"
    config.write_text(
        text.replace(head, head + '[stacks.lite20.convert]\nsave_type = "ms"\nweight_fp16 = true\n')
    )
    out = d / "fixed.mindir"
    args = ("fix", "ppo_policy", "--stack", "lite20", "--train", "ms20", "--variant", "fp16")
    proc = auditor(
        "--config", str(config), "--db", str(d / "h.db"), *args, "--json", "--out", str(out), timeout=900
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(proc.stdout), out, d


def test_the_fix_needs_the_converters_weight_fp16_off_and_says_so(fixed: tuple[dict, Path, Path]) -> None:
    doc, _, _ = fixed
    assert doc["found"] is True and doc["config_change"] == ["[stacks.lite20.convert] weight_fp16 = false"]
    conv = doc["converter"]
    assert conv["options"]["weight_fp16"] is True and conv["needed"] is True
    assert all(not c["passed"] for c in doc["candidates"])  # with weight_fp16 as configured
    again = conv["candidates"]
    assert any(c["passed"] and c["keep"] == doc["cells"] for c in again)
    assert len(again) <= doc["max_candidates"] and len(doc["candidates"]) <= doc["max_candidates"]
    assert doc["result"]["conversion"]["info"]["options"]["weight_fp16"] is False
    # what is served is the converted .ms: its size is the fix's cost
    assert doc["cost"]["fix"]["size"] == doc["result"]["conversion"]["size"]


def test_the_export_converted_as_the_fix_says_computes_the_policy(fixed: tuple[dict, Path, Path]) -> None:
    doc, out, d = fixed
    params, inputs = probe_inputs()
    np.savez(d / "inputs.npz", **inputs)
    lite = str(stack_python("lite20"))
    # converting and serving in one Lite 2.0 process crashes it: a deployment converts apart
    proc = subprocess.run(
        [lite, "-c", CONVERT, str(out), str(d / "converted")], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    ran = subprocess.run(
        [lite, "-c", RUN, str(d / "inputs.npz"), "", str(d / "converted")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    attributes = set(proc.stdout.split("\n")[0].split())
    # every precision setting the fix names is the converter's own, and none of them is per layer
    assert set(doc["converter"]["precision_settings"]) <= attributes
    assert "weight_fp16" in doc["converter"]["precision_settings"]
    assert not {a for a in attributes if "layer" in a or "mixed" in a}
    got = np.load(d / "converted.out.npz")
    want = float64_policy(params, inputs["obs"], inputs["actions"])
    assert np.all(got["arr_1"] > 0) and np.allclose(got["arr_1"], want["std"], rtol=2e-3)
    assert np.allclose(got["arr_0"], want["mean"], atol=5e-3, rtol=5e-3)
    assert np.allclose(got["arr_2"], want["logp"], atol=0.05, rtol=5e-3)
