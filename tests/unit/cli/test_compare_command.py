"""``auditor compare A.npz B.npz``: saved outputs judged with the probe's thresholds and
comparators (no stack), the files ``audit --save-outputs`` writes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from auditor.cli.main import cli
from auditor.cycle.saved_outputs import side_path, write_side
from auditor.extend.manager import Plugins

CONFIG = """
[stacks.tr]
role = "train"
runtime = "mindspore"
python = "/opt/tr/bin/python"
[stacks.inf]
role = "infer"
runtime = "mindspore-lite"
python = "/opt/inf/bin/python"
[[pairs]]
train = "tr"
infer = "inf"
probes = ["ppo_policy"]
[probes.ppo_policy.outputs.mean]
atol = 0.01
rtol = 0.01
"""


def sides(
    tmp: Path, variant: str = "fp32", shift: float = 0.0, other_inputs: bool = False
) -> tuple[Path, Path]:
    """Both sides of one ppo_policy variant, as --save-outputs writes them; the infer side's
    mean moved by ``shift``."""
    spec = Plugins(entry_points=False).probes()["ppo_policy"]
    params = spec.variant_params(variant, {"batch": 16})
    inputs = spec.make_inputs(params)
    rng = np.random.default_rng(0)
    dtype = np.float16 if "16" in variant else np.float32
    mean = rng.normal(size=(16, 1)).astype(dtype)
    std = np.full((16, 1), 0.6, dtype)
    logp = (-0.5 * np.log(2 * np.pi) - np.log(std.astype(np.float64))).astype(dtype).reshape(16)
    outputs = [mean, std, logp, np.clip(mean, -2, 2)]
    paths = []
    for side, outs, ins in (
        ("train", outputs, inputs),
        (
            "infer",
            [outputs[0] + dtype(shift), *outputs[1:]],
            [x + 1 for x in inputs] if other_inputs else inputs,
        ),
    ):
        paths.append(
            write_side(
                tmp,
                pair="tr->inf",
                probe="ppo_policy",
                variant=variant,
                side=side,
                stack=side[:2] + "x",
                inputs=ins,
                input_names=spec.inputs,
                outputs=outs,
                output_names=spec.outputs,
            )  # fmt: skip
        )
    return paths[0], paths[1]


def compare(tmp: Path, *args: str):  # noqa: ANN201
    (tmp / "auditor.toml").write_text(CONFIG)
    return CliRunner().invoke(cli, ["--config", str(tmp / "auditor.toml"), "compare", *args])


def test_layout_of_saved_outputs(tmp_path):
    a, b = sides(tmp_path)
    assert (
        a
        == side_path(tmp_path, "tr->inf", "ppo_policy", "fp32", "train")
        == tmp_path / "tr__inf" / "ppo_policy.fp32.train.npz"
    )
    assert b.name == "ppo_policy.fp32.infer.npz"


def test_the_config_thresholds_of_each_output_decide(tmp_path):
    a, b = sides(tmp_path, shift=1e-3)  # within mean's 0.01 of the config, beyond the default 1e-5
    ok = compare(tmp_path, str(a), str(b))
    assert ok.exit_code == 0, ok.output
    assert "consistent" in ok.output and "probe ppo_policy [fp32]" in ok.output
    doc = json.loads(compare(tmp_path, str(a), str(b), "--json").output)
    # the output's tolerance, and the limits of the checks on it, as a cycle records them
    assert doc["thresholds"]["mean"] == {"atol": 0.01, "rtol": 0.01, "nonfinite_where_train_finite": 0.0}
    assert doc["thresholds"]["*"]["kl_max"] == 1e-4 and doc["samples"] == 16
    assert {c["metric"] for c in doc["checks"]} >= {"kl_max", "logp_diff_max"}  # the probe's comparators ran
    tight = compare(tmp_path, str(a), str(b), "--atol", "1e-5", "--rtol", "1e-5")
    assert tight.exit_code == 1 and "DRIFT" in tight.output and "mean  16/16 out (100%)" in tight.output


def test_drift_names_each_failing_output_and_check(tmp_path):
    a, b = sides(tmp_path, shift=0.5)
    out = compare(tmp_path, str(a), str(b))
    assert out.exit_code == 1
    assert "mean  16/16 out (100%)  max abs 0.5" in out.output and "would pass at atol 0.5" in out.output
    assert "checks: kl_max" in out.output
    verbose = compare(tmp_path, str(a), str(b), "--verbose")
    assert "min atol" in verbose.output and "action_agreement" in verbose.output


def test_files_of_other_inputs_or_unreadable_files_are_refused(tmp_path):
    a, b = sides(tmp_path, other_inputs=True)
    out = compare(tmp_path, str(a), str(b))
    assert out.exit_code == 2 and "computed from different inputs (input_0 differs)" in out.stderr
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    out = compare(tmp_path, str(a), str(tmp_path / "junk.npz"))
    assert out.exit_code == 2 and "junk.npz: not a golden .npz" in out.stderr
    out = compare(tmp_path, str(a), str(a), "--probe", "nope")
    assert out.exit_code == 2 and "no probe 'nope' is loaded" in out.stderr


@pytest.mark.faults
def test_two_plain_npz_files_are_compared_by_array_name(tmp_path):
    """A user's own dumps (np.savez, no meta, any order): arrays matched by name."""
    rng = np.random.default_rng(1)
    logits, value = rng.normal(size=(8, 4)).astype(np.float32), rng.normal(size=(8, 1)).astype(np.float32)
    np.savez(tmp_path / "train.npz", logits=logits, value=value)
    np.savez(tmp_path / "serve.npz", value=value + 1e-4, logits=logits)
    a, b = str(tmp_path / "train.npz"), str(tmp_path / "serve.npz")
    close = compare(tmp_path, a, b, "--atol", "1e-3", "--rtol", "0", "--json")
    assert close.exit_code == 0, close.output
    doc = json.loads(close.stdout)
    assert doc["status"] == "consistent" and {o["output"] for o in doc["outputs"]} == {"logits", "value"}
    tight = compare(tmp_path, a, b, "--atol", "1e-6", "--rtol", "0")
    assert tight.exit_code == 1 and "value" in tight.output and "max abs 0.0001" in tight.output
    # A golden against a dump: matched by name too.
    golden, _ = sides(tmp_path)
    names = ("mean", "std", "logp", "action")
    np.savez(tmp_path / "mine.npz", **dict(zip(names, _outputs(golden), strict=True)))
    mixed = compare(tmp_path, str(golden), str(tmp_path / "mine.npz"))
    assert mixed.exit_code == 0, mixed.output
    np.savez(tmp_path / "other.npz", logits=logits, q=value)
    out = compare(tmp_path, a, str(tmp_path / "other.npz"))
    assert out.exit_code == 2 and "only in" in out.stderr and "value" in out.stderr and "q" in out.stderr
    np.savez(tmp_path / "text.npz", names=np.array(["a", "b"]))
    out = compare(tmp_path, a, str(tmp_path / "text.npz"))
    assert out.exit_code == 2 and "holds text" in out.stderr


def _outputs(path: Path) -> list[np.ndarray]:
    with np.load(path) as f:
        return [f[f"output_{i}"] for i in range(4)]
