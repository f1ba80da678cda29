"""MindSpore Lite in a stack's worker (Python 3.7: Lite 2.0 exists only for it): loads a MindIR
and runs it on the configured target.

Traps handled here (see shared FACTS.md):
- Lite 2.0's get_data_to_numpy() is a view into the runtime's buffer: copied at once.
- Lite 2.0 cannot always rebuild a model after an earlier Model object was freed: models
  are kept alive until the worker exits.
"""

import os

import numpy as np
from auditor.plugins.runtimes.lite import converter

from auditor.worker.runtimes import Runtime, RuntimeFailure, parse_device, time_calls

_LITE_FLOATS = {"FLOAT16": np.float16, "FLOAT32": np.float32, "FLOAT64": np.float64}


def _as_lite_input(tensor, x):
    """Lite 2.0 on CPU (precision_mode "enforce_fp32", its default) loads an fp16 MindIR with
    fp32 inputs and computes in fp32; it refuses fp16 data ("data type not equal"). Widen a
    float input to the dtype the model declares, exactly, as a serving system has to."""
    want = _LITE_FLOATS.get(str(getattr(tensor, "dtype", "")).rpartition(".")[2])
    if want is not None and x.dtype.kind == "f" and np.dtype(want).itemsize > x.dtype.itemsize:
        return x.astype(want)
    return x


class LiteRuntime(Runtime):
    """MindSpore Lite (cloud inference package), MindIR on the configured target."""

    package = "mindspore-lite"
    # Imported once in the stack's zygote (auditor.worker.zygote); one thread after the import.
    preload = ("mindspore_lite",)

    def __init__(self, device):
        Runtime.__init__(self, device)
        import mindspore_lite

        self.mslite = mindspore_lite
        self.version = mindspore_lite.__version__
        self.target, self.device_id = parse_device(device)

    def _context(self):
        ctx = self.mslite.Context()
        if self.target == "CPU":
            ctx.target = ["cpu"]
        elif self.target == "Ascend":
            ctx.target = ["ascend"]
            ctx.ascend.device_id = self.device_id
        else:
            ctx.target = ["gpu"]
            ctx.gpu.device_id = self.device_id
        return ctx

    def load(self, model_id, path):
        if not os.path.exists(path):
            raise RuntimeFailure("no such MindIR: %s" % path)
        model = self.mslite.Model()
        # a converted .ms loads as MINDIR_LITE only, a MindIR as MINDIR only
        model.build_from_file(path, converter.model_type(self.mslite, path), self._context())
        self.models[model_id] = model

    def convert(self, source, output_base, options, config_path=None):
        """Lite's converter on ``source`` (``converter.py`` of this package)."""
        return converter.convert(self.mslite, source, output_base, options, config_path)

    def signature(self, model_id):
        """The loaded model's inputs: name, shape and numpy dtype (a .ms has no reader outside Lite)."""
        return [
            {
                "name": t.name,
                "shape": [int(d) for d in t.shape],
                "dtype": str(t.dtype).rpartition(".")[2].lower(),
            }
            for t in self._model(model_id).get_inputs()
        ]

    def _prepare(self, model, inputs):
        tensors = model.get_inputs()
        if len(tensors) != len(inputs):
            raise RuntimeFailure("model takes %d inputs, got %d" % (len(tensors), len(inputs)))
        shapes = [list(x.shape) for x in inputs]
        if [list(t.shape) for t in tensors] != shapes:
            model.resize(tensors, shapes)
            tensors = model.get_inputs()
        for tensor, x in zip(tensors, inputs):
            tensor.set_data_from_numpy(_as_lite_input(tensor, np.ascontiguousarray(x)))
        return tensors

    def run(self, model_id, inputs):
        model = self._model(model_id)
        outputs = model.predict(self._prepare(model, inputs))
        # get_data_to_numpy() is a view into Lite's buffer, overwritten by the next predict().
        return [np.array(o.get_data_to_numpy(), copy=True) for o in outputs]

    def time(self, model_id, inputs, warmup, iterations):
        model = self._model(model_id)
        tensors = self._prepare(model, inputs)
        return time_calls(lambda: model.predict(tensors), warmup, iterations)
