"""`auditor fix` on a user's own policy trained in float32 (tests/model_fixtures/mypolicy,
kind overflow_norm): its first layer's activations pass float16's 65,504 before a LayerNorm
brings them back, and its std head is a softplus. Exported by the real ms210 in the test and
served by ms210-graph; asked for a float16 version (--dtype float16), the search must find
that the first layer and the LayerNorm stay in float32.

The oracles are outside the auditor: the written file is run by MindSpore graph mode in the
test's own script and compared with the network evaluated in float64 with numpy from the
checkpoint; the printed change is applied by hand to the factory's network and exported by
the test, and both files compute the same bits.
"""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.cli import auditor
from tests.conftest import DEFAULT_CONFIG, stack_python
from tests.user_models import FIXTURES, export_policies

pytestmark = pytest.mark.stacks

KIND = "overflow_norm"

RUN_GRAPH = """
import sys, json, numpy as np, mindspore as ms
sys.path.insert(0, sys.argv[1])
from mypolicy import nets
ms.set_context(mode=ms.GRAPH_MODE)
obs = np.random.RandomState(7).standard_normal((8, nets.OBS)).astype(np.float32)
outs = {}
for path in sys.argv[3:]:
    g = ms.nn.GraphCell(ms.load(path))
    outs[path] = [o.asnumpy().astype(np.float64).tolist() for o in g(ms.Tensor(obs))]
w = {k: v.asnumpy().astype(np.float64) for k, v in ms.load_checkpoint(sys.argv[2]).items()}
np.save(sys.argv[2] + ".obs.npy", obs)
json.dump({"outs": outs, "weights": {k: v.tolist() for k, v in w.items()}}, open(sys.argv[2] + ".json", "w"))
"""

APPLY_CHANGE = """
import sys, json, numpy as np, mindspore as ms
sys.path.insert(0, sys.argv[1])
from mypolicy import nets
ms.set_context(mode=ms.PYNATIVE_MODE)
try:
    (ms.Tensor(np.ones(1, np.float32)) + 1).asnumpy()
except SystemError:  # MindSpore 2.10 with numpy 2: the first arithmetic of a process
    pass
net = nets.build_actor(kind="overflow_norm")
ms.load_param_into_net(net, ms.load_checkpoint(sys.argv[2]))
exec("\\n".join(json.loads(sys.argv[3])))
ms.export(net, ms.Tensor(np.zeros((8, nets.OBS), np.float32)), file_name=sys.argv[4], file_format="MINDIR")
"""


def float64_policy(w: dict[str, np.ndarray], obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """OverflowNorm in float64: Dense ×3e4, LayerNorm (MindSpore's epsilon 1e-7), tanh, Dense,
    tanh; a tanh mean and a softplus std (+1e-3)."""

    def dense(name: str, x: np.ndarray) -> np.ndarray:
        return x @ w[f"{name}.weight"].T + w[f"{name}.bias"]

    h = dense("embed.dense", obs) * 3.0e4
    mu, var = h.mean(-1, keepdims=True), h.var(-1, keepdims=True)
    h = (h - mu) / np.sqrt(var + 1e-7) * w["norm.gamma"] + w["norm.beta"]
    h = np.tanh(dense("l2", np.tanh(h)))
    x = dense("std_head", h)
    return np.tanh(dense("mu", h)), np.logaddexp(0.0, x) + 1e-3


@pytest.fixture(scope="module")
def fixed(stacks: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path, Path]:
    d = tmp_path_factory.mktemp("fixmodel")
    (served,) = export_policies("ms210", d, kinds=(KIND,))
    head = (
        DEFAULT_CONFIG.read_text()
        .split("# --- pairs")[0]
        .replace("[rollout]\nenabled = true", "[rollout]\nenabled = false")
    )
    network = (
        f'{{ factory = "mypolicy.nets:build_actor", checkpoint = "{served.with_suffix(".ckpt")}", '
        f'stack = "ms210", path = "{FIXTURES}", kwargs = {{ kind = "{KIND}" }} }}'
    )
    config = d / "auditor.toml"
    config.write_text(
        f'{head}\n[models.policy]\npath = "{served}"\nstacks = ["ms210-graph"]\ntrain = {network}\n'
    )
    out = d / "policy-fixed.mindir"
    args = ("fix", "policy", "--stack", "ms210-graph", "--dtype", "float16", "--json", "--out", str(out))
    proc = auditor("--config", str(config), *args, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(proc.stdout), out, served


def test_fix_keeps_the_overflowing_first_layer_and_its_layernorm_in_float32(
    fixed: tuple[dict, Path, Path],
) -> None:
    doc, out, _ = fixed
    assert doc["target"] == {"kind": "model", "train": "ms210", "stack": "ms210-graph", "model": "policy"}
    # served in float32 today, it passes; the float16 version was asked for
    assert doc["as_configured"]["status"] == "consistent" and doc["found"] is True
    assert doc["candidates"][0]["keep"] == [] and doc["candidates"][0]["status"] == "drift"
    cells = [c["path"] for c in doc["network_cells"]]
    assert cells[:3] == ["embed.dense", "embed", "norm"] and cells[-1] == ""
    assert "embed.dense" in doc["cells"] and "norm" in doc["cells"]  # the first layer and the LayerNorm
    assert not {"l2", "mu", "std_head", ""} & set(doc["cells"])  # the rest computes in float16
    assert len(doc["candidates"]) <= 2 * math.ceil(math.log2(len(cells))) + 2 == doc["max_candidates"]
    assert doc["result"]["status"] == "consistent"
    assert out.stat().st_size == doc["cost"]["fix"]["size"]


def test_the_written_file_computes_the_float32_policy_and_the_change_by_hand_gives_it(
    fixed: tuple[dict, Path, Path],
) -> None:
    doc, out, served = fixed
    ckpt = served.with_suffix(".ckpt")
    by_hand = out.with_name("by_hand")
    subprocess.run(
        [
            str(stack_python("ms210")),
            "-c",
            APPLY_CHANGE,
            str(FIXTURES),
            str(ckpt),
            json.dumps(doc["change"]),
            str(by_hand),
        ],
        check=True,
        timeout=300,
        capture_output=True,
    )
    subprocess.run(
        [
            str(stack_python("ms210")),
            "-c",
            RUN_GRAPH,
            str(FIXTURES),
            str(ckpt),
            str(out),
            f"{by_hand}.mindir",
            str(served),
        ],
        check=True,
        timeout=300,
        capture_output=True,
    )
    got = json.loads(Path(f"{ckpt}.json").read_text())
    w = {k: np.asarray(v) for k, v in got["weights"].items()}
    obs = np.load(f"{ckpt}.obs.npy").astype(np.float64)
    mean, std = float64_policy(w, obs)
    first = (obs @ w["embed.dense.weight"].T + w["embed.dense.bias"]) * 3.0e4
    assert np.abs(first).max() > 65504  # the first layer's activations overflow float16
    fixed_out, hand_out, fp32_out = (got["outs"][p] for p in (str(out), f"{by_hand}.mindir", str(served)))
    assert fixed_out == hand_out  # the printed change gives the same export, bit for bit
    assert np.allclose(fp32_out[0], mean, atol=1e-5) and np.allclose(
        fp32_out[1], std, atol=1e-5
    )  # the oracle
    assert np.allclose(fixed_out[0], mean, atol=3e-3) and np.allclose(fixed_out[1], std, rtol=5e-3, atol=1e-3)
    assert not np.array_equal(np.asarray(fixed_out[0]), np.asarray(fp32_out[0]))  # it computes in float16
