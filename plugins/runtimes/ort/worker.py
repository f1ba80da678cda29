"""ONNX Runtime in a stack's worker: an ``InferenceSession`` per loaded ONNX file, run and timed
on the configured target.

What it takes (notes/converter_onnx B2, onnxruntime 1.32 on MindSpore 2.0 and 2.10 exports):
- inputs by position: the names are MindSpore's parameter names (ppo_policy's first input
  is ``h``), the outputs node ids that differ between MindSpore releases;
- the dtypes the model declares: an fp16 export takes and returns float16, and onnxruntime
  refuses any other dtype; a float input is widened to the declared dtype when that is
  exact, as a serving system has to, and otherwise refused in words;
- the batch the model was exported with (onnxruntime refuses another): the cycle exports
  once per batch size, as it does for MindIR.
Its errors derive from Exception; the worker reports their type and message (the
"[ONNXRuntimeError] : 10 : INVALID_GRAPH : ..." text the spec's patterns read).
"""

import os

import numpy as np

from auditor.worker.runtimes import Runtime, RuntimeFailure, parse_device, time_calls

# onnxruntime's input type names -> numpy dtypes
_NUMPY = {
    "tensor(float16)": np.float16,
    "tensor(float)": np.float32,
    "tensor(double)": np.float64,
    "tensor(int8)": np.int8,
    "tensor(int16)": np.int16,
    "tensor(int32)": np.int32,
    "tensor(int64)": np.int64,
    "tensor(uint8)": np.uint8,
    "tensor(bool)": np.bool_,
}
# the execution provider of each device kind (the CPU one always follows as a fallback)
_PROVIDERS = {"Ascend": "CANNExecutionProvider", "GPU": "CUDAExecutionProvider"}


class OrtRuntime(Runtime):
    """ONNX Runtime: loads an ONNX file, runs and times it."""

    package = "onnxruntime"

    def __init__(self, device):
        Runtime.__init__(self, device)
        import onnxruntime

        self.ort = onnxruntime
        self.version = onnxruntime.__version__
        target, index = parse_device(device)
        self.providers = ["CPUExecutionProvider"]
        if target in _PROVIDERS:
            provider = _PROVIDERS[target]
            available = onnxruntime.get_available_providers()
            if provider not in available:
                raise RuntimeFailure(
                    "device %s needs onnxruntime's %s, which this onnxruntime %s does not have "
                    "(it has: %s)" % (device, provider, self.version, ", ".join(available))
                )
            self.providers = [(provider, {"device_id": index}), "CPUExecutionProvider"]

    def load(self, model_id, path):
        if not os.path.exists(path):
            raise RuntimeFailure("no such ONNX file: %s" % path)
        self.models[model_id] = self.ort.InferenceSession(path, providers=self.providers)

    def _feed(self, session, inputs):
        declared = session.get_inputs()
        if len(declared) != len(inputs):
            raise RuntimeFailure("model takes %d inputs, got %d" % (len(declared), len(inputs)))
        feed = {}
        for arg, x in zip(declared, inputs):
            x = np.ascontiguousarray(x)
            want = _NUMPY.get(arg.type)
            if want is not None and x.dtype != want:
                want = np.dtype(want)
                if x.dtype.kind != "f" or want.kind != "f" or want.itemsize < x.dtype.itemsize:
                    raise RuntimeFailure(
                        "input %s: the model takes %s, given %s (not widened: it would not be exact)"
                        % (arg.name, want, x.dtype)
                    )
                x = x.astype(want)
            feed[arg.name] = x
        return feed

    def run(self, model_id, inputs):
        session = self._model(model_id)
        return [np.array(o, copy=True) for o in session.run(None, self._feed(session, inputs))]

    def time(self, model_id, inputs, warmup, iterations):
        session = self._model(model_id)
        feed = self._feed(session, inputs)
        return time_calls(lambda: session.run(None, feed), warmup, iterations)
