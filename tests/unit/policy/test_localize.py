"""Divergence localization from layer outputs (no stacks): the first layer out of tolerance."""

from __future__ import annotations

import numpy as np
import pytest

from auditor.compare.outputs import Tolerance
from auditor.policy.localize import Localization, layer_names, localize, locate, report_lines

OUTPUTS = ["mean", "std"]
LAYERS = ["fc0", "fc1"]


def _tensors(rng: np.random.Generator) -> list[np.ndarray]:
    """Regular outputs first, then the layers, as the worker returns them."""
    return [
        rng.standard_normal((8, 1)),
        np.full((8, 1), 0.6),
        rng.standard_normal((8, 4)),
        rng.standard_normal((8, 4)),
    ]


def tol(_name: str) -> Tolerance:
    return Tolerance(1e-5, 1e-5)


@pytest.mark.parametrize("perturbed", ["fc0", "fc1", "std", None])
def test_names_the_first_layer_out_of_tolerance(perturbed):
    rng = np.random.default_rng(0)
    train = _tensors(rng)
    infer = [t.copy() for t in train]
    order = LAYERS + OUTPUTS
    index = {"fc0": 2, "fc1": 3, "mean": 0, "std": 1}
    if perturbed is not None:
        # The divergence propagates: every layer after the perturbed one moves too.
        for name in order[order.index(perturbed) :]:
            infer[index[name]] = infer[index[name]] + 1e-3
    loc = locate(LAYERS, OUTPUTS, train, infer, tol)
    assert [d.layer for d in loc.layers] == order
    assert loc.layer == perturbed
    if perturbed is None:
        assert "every layer and output is within tolerance" in loc.message
        return
    first = loc.layers[order.index(perturbed)]
    assert not first.passed and first.failing == first.total and first.max_abs == pytest.approx(1e-3)
    assert all(d.passed and d.max_abs == 0.0 for d in loc.layers[: order.index(perturbed)])
    if perturbed in OUTPUTS:
        assert first.output and f"output {perturbed} (after the last exposed layer fc1)" in loc.message
    else:
        assert f"first divergent: layer {perturbed}" in loc.message


def test_below_tolerance_differences_do_not_count():
    rng = np.random.default_rng(1)
    train = _tensors(rng)
    infer = [t.copy() for t in train]
    infer[2] = infer[2] + 5e-6  # fc0 within atol
    infer[3] = infer[3] + 5e-3  # fc1 out
    loc = locate(LAYERS, OUTPUTS, train, infer, tol)
    assert loc.layer == "fc1" and "fc0 within tolerance" in loc.message
    assert loc.layers[0].passed and loc.layers[0].max_abs == pytest.approx(5e-6)


def test_per_output_tolerance_is_used():
    rng = np.random.default_rng(2)
    train = _tensors(rng)
    infer = [t.copy() for t in train]
    infer[3] = infer[3] + 1e-3
    loose = locate(LAYERS, OUTPUTS, train, infer, lambda n: Tolerance(1e-2, 1e-2) if n == "fc1" else tol(n))
    assert loose.layer is None


def test_wrong_number_of_outputs_is_reported():
    rng = np.random.default_rng(3)
    train = _tensors(rng)
    loc = locate(LAYERS, OUTPUTS, train, train[:3], tol)
    assert loc.layer is None and loc.error == "output count mismatch"
    assert "expected 4 (2 outputs + 2 layers)" in loc.message


def test_probe_declares_its_layers():
    from auditor.extend.manager import builtin_probes

    spec = builtin_probes()["ppo_policy"]
    params = spec.variant_params("fp32", {})
    assert layer_names(spec.module, params) == ["fc0", "fc1"]
    assert layer_names(spec.module, {**params, "hidden": [8, 8, 8]}) == ["fc0", "fc1", "fc2"]
    assert layer_names("tests.probe_fixtures.faulty", {}) is None


class FakeWorker:
    """Answers build/run/export/load like a worker; ``outputs`` is what run returns."""

    def __init__(self, outputs, fail_on: str | None = None):
        self.outputs, self.fail_on, self.workdir, self.requests = outputs, fail_on, "/tmp", []

    def request(self, op, **payload):
        self.requests.append((op, payload))
        if op == self.fail_on:
            raise RuntimeError(f"{op} failed")
        result = (
            {"outputs": self.outputs} if op == "run" else {"artifact": b"bytes"} if op == "export" else {}
        )
        return type("Reply", (), {"result": result})()


def test_localize_drives_both_workers_through_the_staging_hook(tmp_path):
    from auditor.extend.manager import builtin_probes

    spec = builtin_probes()["ppo_policy"]
    params = spec.variant_params("fp32", {"batch": 8})
    rng = np.random.default_rng(4)
    outputs = list(spec.outputs)
    train_out = [rng.standard_normal((8, 1)) for _ in outputs] + [
        rng.standard_normal((8, 64)) for _ in range(2)
    ]
    infer_out = [t.copy() for t in train_out]
    infer_out[len(outputs) + 1] += 1.0
    staged = []

    def stage(data: bytes):
        staged.append(data)
        return tmp_path / "layers.mindir"

    train, infer = FakeWorker(train_out), FakeWorker(infer_out)
    loc = localize(
        train_worker=train,
        infer_worker=infer,
        module=spec.module,
        params=params,
        weights={},
        inputs=[],
        outputs=outputs,
        model="m@layers",
        stage=stage,
        tolerance_for=tol,
        error_types=(RuntimeError,),
    )
    assert loc.layer == "fc1" and staged == [b"bytes"]
    assert train.requests[0][0] == "build" and train.requests[0][1]["probe"]["expose_layers"] is True
    assert [op for op, _ in infer.requests] == ["load", "run"]
    assert infer.requests[0][1]["path"] == str(tmp_path / "layers.mindir")
    failed = localize(
        train_worker=FakeWorker(train_out),
        infer_worker=FakeWorker(infer_out, fail_on="load"),
        module=spec.module,
        params=params,
        weights={},
        inputs=[],
        outputs=outputs,
        model="m",
        stage=stage,
        tolerance_for=tol,
        error_types=(RuntimeError,),
    )
    assert failed.layer is None and "localization rerun failed: load failed" in failed.message
    assert report_lines(failed) == [f"    localization: {failed.message}"]
    assert report_lines(None) == []
    assert isinstance(failed, Localization)
