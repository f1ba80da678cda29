"""Input classes of a model probe without stacks: which classes apply, their batches at the
file's batch, the chunked runs, which outputs a NaN must reach. On the real stacks:
tests/stacks/test_model_probe_stacks.py (a policy whose NaN rows come out finite on lite20)."""

from __future__ import annotations

import numpy as np
import pytest

from auditor.compare import input_classes
from auditor.config.user_models import MODEL_CLASSES, ModelConfig, ModelRollout
from auditor.policy import classes as model_classes
from auditor.stacks.worker import WorkerError
from auditor.worker.mindir import MindIRInfo


def test_the_model_classes_are_the_probes_without_the_layer_sweep() -> None:
    assert tuple(c for c in input_classes.CLASSES if c != input_classes.LAYER_SWEEP) == MODEL_CLASSES


def model(**kw: object) -> ModelConfig:
    base = dict(name="m", path="m.mindir", stacks=("lite20",), reference="ms210-graph")
    base.update(kw)
    return ModelConfig(**base)  # type: ignore[arg-type]


def info(*compute: str) -> MindIRInfo:
    return MindIRInfo("0" * 64, 1, True, compute_dtypes=compute)


def test_the_varied_input_and_the_classes_that_apply() -> None:
    x = [np.zeros((1,), np.int32), np.zeros((1, 3), np.float32)]
    assert model_classes.varied_index(model(), x, ["ids", "obs"]) == 1  # the first float input
    assert model_classes.varied_index(model(class_input="ids"), x, ["ids", "obs"]) == 0
    rolled = model(rollout=ModelRollout("Pendulum-v1", observation="ids"))
    assert model_classes.varied_index(rolled, x, ["ids", "obs"]) == 0
    assert model_classes.varied_index(model(), [np.zeros((1,), np.int32)], ["ids"]) is None
    f32, f16 = np.zeros((1, 3), np.float32), np.zeros((1, 3), np.float16)
    assert model_classes.class_names(model(), info("float32"), f32) == ("sweep", "magnitude", "nan-inf")
    assert "fp16-edge" in model_classes.class_names(model(), info("float16"), f32)  # computes in fp16
    assert "fp16-edge" in model_classes.class_names(model(), info(), f16)  # takes fp16
    assert model_classes.class_names(model(input_classes=()), info(), f32) == ()


def test_a_batch_1_file_gets_a_64_row_sweep_run_in_64_calls_and_16_rows_of_the_others() -> None:
    inputs = [np.zeros((1, 3), np.float32), np.full((1, 2), 5.0, np.float32)]
    made = model_classes.batches(model(), info(), inputs, ["obs", "mask"])
    assert [b.name for b in made] == ["sweep", "magnitude", "nan-inf"]
    sweep = made[0].inputs
    assert sweep[0].shape == (64, 3) and sweep[0][0, 0] == -12 and sweep[0][-1, 0] == 12
    assert np.array_equal(sweep[1], np.full((64, 2), 5.0, np.float32))  # the others repeated
    nan_rows = made[2].hazard_rows
    assert made[1].inputs[0].shape == (16, 3) and nan_rows.sum() == 16  # a NaN, +Inf or -Inf in every row
    calls = []

    class Worker:
        def request(self, op, model, inputs):
            calls.append(inputs[0].shape)

            class R:
                result = {"outputs": [np.tanh(inputs[0].sum(axis=1, keepdims=True)), np.zeros(2)]}

            return R

    outputs, failed = model_classes.run(Worker(), "m", made[:1], 1)
    assert len(calls) == 64 and set(calls) == {(1, 3)} and failed == {}
    assert outputs["sweep"][0].shape == (64, 1) and np.array_equal(outputs["sweep"][1], np.zeros(2))

    class Changing(Worker):  # an output that is not per row yet changes with the rows
        def request(self, op, model, inputs):
            class R:
                result = {"outputs": [inputs[0].sum(axis=0)]}

            return R

    outputs, failed = model_classes.run(Changing(), "m", made[:1], 1)
    assert (
        failed == {"sweep": "output 0 is not batch-major ([3]) and changes with the rows"} and outputs == {}
    )


def test_chunks_join_and_a_failing_class_is_named() -> None:
    inputs = [np.zeros((4, 3), np.float32)]
    made = model_classes.batches(model(), info(), inputs, ["obs"])
    assert made[0].inputs[0].shape == (64, 3)

    class Worker:
        def request(self, op, model, inputs):
            if np.isnan(inputs[0]).any():
                raise WorkerError("lite20", "run", "error", "the runtime refused a NaN")

            class R:
                result = {"outputs": [inputs[0] * 2]}

            return R

    outputs, failed = model_classes.run(Worker(), "m", made, 4)
    assert np.array_equal(outputs["sweep"][0], made[0].inputs[0] * 2)
    assert set(outputs) == {"sweep", "magnitude"} and "the runtime refused a NaN" in failed["nan-inf"]


def test_a_nan_must_reach_the_outputs_computed_from_its_input() -> None:
    names = ["mean", "action", "bias"]
    assert model_classes.reached(names, (("obs",), ("obs",), ()), "obs") == ("mean", "action")
    assert model_classes.reached(names, None, "obs") == ("mean", "action", "bias")  # file silent


@pytest.mark.parametrize("batch", [1, 3, 64, 100])
def test_rows_are_a_multiple_of_the_file_batch(batch: int) -> None:
    made = model_classes.batches(model(), info(), [np.zeros((batch, 2), np.float32)], ["obs"])
    for cls, least in zip(made, (64, 16, 16), strict=True):
        rows = cls.inputs[0].shape[0]
        assert rows % batch == 0 and rows >= least and rows - batch < least, cls.name
