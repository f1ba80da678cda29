"""The runtimes a worker can drive: MindSpore PyNative, MindSpore graph (GraphCell over a
loaded MindIR) and MindSpore Lite. Each keeps its models by id for the life of the worker.

Traps handled here (see shared FACTS.md):
- MindSpore 2.10 with numpy 2: the first Tensor arithmetic in a process can raise
  SystemError("Numpy init failed"); a warm-up absorbs it before any probe runs.
- MindSpore 2.0 runs GraphCell only in GRAPH_MODE.
- Lite 2.0's get_data_to_numpy() is a view into the runtime's buffer: copied at once.
- Lite 2.0 cannot always rebuild a model after an earlier Model object was freed: models
  are kept alive until the worker exits.
"""

import importlib
import os
import time

import numpy as np

from auditor.worker import lite_convert


class RuntimeFailure(Exception):
    """The runtime refused a request (bad model, unsupported operation, ...)."""


def parse_device(device):
    """'cpu' -> ('CPU', 0); 'ascend:1' -> ('Ascend', 1); 'gpu:0' -> ('GPU', 0)."""
    kind, _, index = (device or "cpu").partition(":")
    targets = {"cpu": "CPU", "ascend": "Ascend", "gpu": "GPU"}
    if kind.lower() not in targets:
        raise RuntimeFailure("unknown device %r (use cpu, ascend:N or gpu:N)" % device)
    return targets[kind.lower()], int(index or 0)


def _as_list(outputs):
    if isinstance(outputs, (tuple, list)):
        return list(outputs)
    return [outputs]


def _time_calls(call, warmup, iterations):
    for _ in range(warmup):
        call()
    samples = []
    for _ in range(iterations):
        t0 = time.perf_counter_ns()
        call()
        samples.append(time.perf_counter_ns() - t0)
    return samples


class MindSporeRuntime(object):
    """PyNative MindSpore: builds probe cells from seeded weights, runs them, exports MindIR."""

    package = "mindspore"
    graph_mode = False

    def __init__(self, device):
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
        self.models = {}
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

    def _model(self, model_id):
        try:
            return self.models[model_id]
        except KeyError:
            raise RuntimeFailure("no model %r in this worker" % (model_id,)) from None

    def build(self, model_id, probe, weights):
        module = importlib.import_module(probe["module"])
        if probe.get("expose_layers"):
            # Divergence localization: the same cell, returning every layer's output as well.
            self.models[model_id] = module.build_cell(probe["params"], weights, expose_layers=True)
            return
        self.models[model_id] = module.build_cell(probe["params"], weights)

    def _tensors(self, inputs):
        return [self.ms.Tensor(np.ascontiguousarray(x)) for x in inputs]

    def run(self, model_id, inputs):
        model = self._model(model_id)
        outputs = _as_list(model(*self._tensors(inputs)))
        return [np.array(o.asnumpy(), copy=True) for o in outputs]

    def time(self, model_id, inputs, warmup, iterations):
        model = self._model(model_id)
        tensors = self._tensors(inputs)

        def call():
            # asnumpy() waits for the result: without it an asynchronous backend times the launch only.
            for o in _as_list(model(*tensors)):
                o.asnumpy()

        return _time_calls(call, warmup, iterations)

    def export(self, model_id, inputs, path):
        model = self._model(model_id)
        base = path[: -len(".mindir")] if path.endswith(".mindir") else path
        self.ms.export(model, *self._tensors(inputs), file_name=base, file_format="MINDIR")
        written = base + ".mindir"
        with open(written, "rb") as f:
            return f.read()

    def load(self, model_id, path):
        raise RuntimeFailure(
            "the mindspore (PyNative) runtime builds models; use mindspore-graph to load MindIR"
        )


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


_LITE_FLOATS = {"FLOAT16": np.float16, "FLOAT32": np.float32, "FLOAT64": np.float64}


def _as_lite_input(tensor, x):
    """Lite 2.0 on CPU (precision_mode "enforce_fp32", its default) loads an fp16 MindIR with
    fp32 inputs and computes in fp32; it refuses fp16 data ("data type not equal"). Widen a
    float input to the dtype the model declares, exactly, as a serving system has to."""
    want = _LITE_FLOATS.get(str(getattr(tensor, "dtype", "")).rpartition(".")[2])
    if want is not None and x.dtype.kind == "f" and np.dtype(want).itemsize > x.dtype.itemsize:
        return x.astype(want)
    return x


class LiteRuntime(object):
    """MindSpore Lite (cloud inference package), MindIR on the configured target."""

    package = "mindspore-lite"

    def __init__(self, device):
        import mindspore_lite

        self.mslite = mindspore_lite
        self.version = mindspore_lite.__version__
        self.target, self.device_id = parse_device(device)
        self.models = {}

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

    def build(self, model_id, probe, weights):
        raise RuntimeFailure("the mindspore-lite runtime loads exported MindIR; it does not build probes")

    def export(self, model_id, inputs, path):
        raise RuntimeFailure("the mindspore-lite runtime does not export")

    def load(self, model_id, path):
        if not os.path.exists(path):
            raise RuntimeFailure("no such MindIR: %s" % path)
        model = self.mslite.Model()
        # a converted .ms loads as MINDIR_LITE only, a MindIR as MINDIR only
        model.build_from_file(path, lite_convert.model_type(self.mslite, path), self._context())
        self.models[model_id] = model

    def convert(self, source, output_base, options, config_path=None):
        """Lite's converter on ``source`` (auditor.worker.lite_convert)."""
        return lite_convert.convert(self.mslite, source, output_base, options, config_path)

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

    def _model(self, model_id):
        try:
            return self.models[model_id]
        except KeyError:
            raise RuntimeFailure("no model %r in this worker" % (model_id,)) from None

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
        return _time_calls(lambda: model.predict(tensors), warmup, iterations)


RUNTIMES = {
    "mindspore": MindSporeRuntime,
    "mindspore-graph": MindSporeGraphRuntime,
    "mindspore-lite": LiteRuntime,
}


def make_runtime(name, device, worker_class=None):
    """Instantiate the runtime; ``worker_class`` ("module:Class") comes from a runtime plugin."""
    if worker_class:
        module, _, attr = worker_class.partition(":")
        try:
            cls = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as exc:
            raise RuntimeFailure("runtime %r: cannot import %s: %s" % (name, worker_class, exc)) from None
        return cls(device)
    try:
        cls = RUNTIMES[name]
    except KeyError:
        raise RuntimeFailure("unknown runtime %r (known: %s)" % (name, ", ".join(sorted(RUNTIMES)))) from None
    return cls(device)
