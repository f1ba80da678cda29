"""MindSpore in a stack's worker: PyNative builds probe cells from seeded weights, runs them and
exports them; graph mode loads a MindIR as a GraphCell. Python 3.7 (ms20) and 3.11 (ms210).

Traps handled here (see shared FACTS.md, notes/converter_onnx):
- MindSpore 2.10 with numpy 2: the first Tensor arithmetic in a process can raise
  SystemError("Numpy init failed"); a warm-up absorbs it before any probe runs.
- MindSpore 2.0 runs GraphCell only in GRAPH_MODE.
- MindSpore 2.10 fails a second ONNX export of one cell object in a process ("i: 3 out of
  range"): each ONNX export is of a fresh build of the same probe and weights.
- MindSpore 2.10 logs that ``mindspore.export(file_format="ONNX")`` will be removed;
  ``mindspore.onnx.export`` writes the same bytes and is used where it exists.
"""

import importlib
import os

import numpy as np

from auditor.worker import precision
from auditor.worker.runtimes import Runtime, RuntimeFailure, as_list, parse_device, time_calls

# What MindSpore's exporter writes, by the suffix of the path it is given.
FILE_FORMATS = {".mindir": "MINDIR", ".onnx": "ONNX"}


class MindSporeRuntime(Runtime):
    """PyNative MindSpore: builds probe cells from seeded weights, runs them, exports them."""

    package = "mindspore"
    graph_mode = False
    # What a stack's zygote imports before it forks workers (auditor.worker.zygote): the import
    # alone leaves one thread (two on Python 3.11, numpy's OpenBLAS server, which quiesces
    # itself around a fork); the context and the first tensor come in each worker (__init__).
    preload = ("mindspore",)

    def __init__(self, device):
        Runtime.__init__(self, device)
        import mindspore

        self.ms = mindspore
        self.version = mindspore.__version__
        target, index = parse_device(device)
        mode = mindspore.GRAPH_MODE if self.graph_mode else mindspore.PYNATIVE_MODE
        mindspore.set_context(mode=mode)
        if hasattr(mindspore, "set_device"):
            mindspore.set_device(target, index)
        else:
            mindspore.set_context(device_target=target, device_id=index)
        self.recipes = {}
        self._warm_up()

    def _warm_up(self):
        one = np.ones((1,), np.float32)
        for attempt in range(2):
            try:
                (self.ms.Tensor(one) + self.ms.Tensor(one)).asnumpy()
                return
            except SystemError:
                if attempt:
                    raise

    def _build(self, probe, weights):
        module = importlib.import_module(probe["module"])
        if probe.get("expose_layers"):
            # Divergence localization: the same cell, returning every layer's output as well.
            cell = module.build_cell(probe["params"], weights, expose_layers=True)
        else:
            cell = module.build_cell(probe["params"], weights)
        if probe.get("precision"):
            # `auditor fix`'s candidates: per-cell precision (Cell.to_float), kept in the export.
            precision.apply(self.ms, cell, probe["precision"])
        return cell

    def build(self, model_id, probe, weights):
        self.models[model_id] = self._build(probe, weights)
        self.recipes[model_id] = (probe, weights)

    def _tensors(self, inputs):
        return [self.ms.Tensor(np.ascontiguousarray(x)) for x in inputs]

    def run(self, model_id, inputs):
        model = self._model(model_id)
        outputs = as_list(model(*self._tensors(inputs)))
        return [np.array(o.asnumpy(), copy=True) for o in outputs]

    def time(self, model_id, inputs, warmup, iterations):
        model = self._model(model_id)
        tensors = self._tensors(inputs)

        def call():
            # asnumpy() waits for the result: without it an asynchronous backend times the launch only.
            for o in as_list(model(*tensors)):
                o.asnumpy()

        return time_calls(call, warmup, iterations)

    def export(self, model_id, inputs, path):
        model = self._model(model_id)
        base, suffix = os.path.splitext(path)
        file_format = FILE_FORMATS.get(suffix.lower())
        if file_format is None:
            raise RuntimeFailure(
                "MindSpore %s exports %s, not %r files"
                % (self.version, ", ".join(sorted(FILE_FORMATS)), suffix or path)
            )
        tensors = self._tensors(inputs)
        if file_format == "ONNX":
            model = self._build(*self.recipes[model_id]) if model_id in self.recipes else model
            onnx = getattr(self.ms, "onnx", None)
            if onnx is not None and hasattr(onnx, "export"):
                onnx.export(model, *tensors, file_name=base)
            else:
                self.ms.export(model, *tensors, file_name=base, file_format=file_format)
        else:
            self.ms.export(model, *tensors, file_name=base, file_format=file_format)
        with open(base + suffix.lower(), "rb") as f:
            return f.read()


class MindSporeGraphRuntime(MindSporeRuntime):
    """MindIR through nn.GraphCell(mindspore.load(path)), in GRAPH_MODE (required by 2.0)."""

    graph_mode = True

    def build(self, model_id, probe, weights):
        raise RuntimeFailure("the mindspore-graph runtime loads exported MindIR; it does not build probes")

    def export(self, model_id, inputs, path):
        raise RuntimeFailure("the mindspore-graph runtime does not export")

    def load(self, model_id, path):
        graph = self.ms.load(path)
        self.models[model_id] = self.ms.nn.GraphCell(graph)
