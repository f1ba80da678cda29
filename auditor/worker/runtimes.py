"""The worker side of the runtime interface: what every runtime class a stack's worker drives
implements, the helpers they share, and how the worker instantiates the class its runtime's
spec names (``RuntimeSpec.worker_class``, "package.module:Class").

The runtimes themselves live in their packages (the built-ins in
``auditor/plugins/runtimes/<name>/worker.py``); this module is all of the auditor they import.
Python 3.7, standard library and numpy only.
"""

import importlib
import time


class RuntimeFailure(Exception):
    """The runtime refused a request (bad model, unsupported operation, ...)."""


def parse_device(device):
    """'cpu' -> ('CPU', 0); 'ascend:1' -> ('Ascend', 1); 'gpu:0' -> ('GPU', 0)."""
    kind, _, index = (device or "cpu").partition(":")
    targets = {"cpu": "CPU", "ascend": "Ascend", "gpu": "GPU"}
    if kind.lower() not in targets:
        raise RuntimeFailure("unknown device %r (use cpu, ascend:N or gpu:N)" % device)
    return targets[kind.lower()], int(index or 0)


def as_list(outputs):
    if isinstance(outputs, (tuple, list)):
        return list(outputs)
    return [outputs]


def time_calls(call, warmup, iterations):
    """Nanoseconds per call of ``call()``, after ``warmup`` untimed calls."""
    for _ in range(warmup):
        call()
    samples = []
    for _ in range(iterations):
        t0 = time.perf_counter_ns()
        call()
        samples.append(time.perf_counter_ns() - t0)
    return samples


class Runtime(object):
    """What a runtime class implements; instantiated once per worker with the stack's device
    string ("cpu", "ascend:0"). ``package`` and ``version`` are what the worker's hello
    reports (``runtime_package``, ``runtime_version``): the distribution and its version.

    An export runtime (a train stack) builds probes and exports them: ``build`` and
    ``export``; a load runtime (an infer stack) loads exported files: ``load``. Both
    ``run`` and ``time`` what they hold. Models are kept by id for the worker's life. A
    request the runtime cannot serve raises RuntimeFailure with a message a person can act on.
    """

    package = ""
    version = ""
    preload = ()
    """Modules a stack's zygote imports before it forks this runtime's workers (the framework:
    ``("mindspore",)``). Imports only: a context, a device or a first tensor belong in
    ``__init__``, which runs in each forked worker. Classes of one module share a zygote."""

    def __init__(self, device):
        self.device = device
        self.models = {}

    def _model(self, model_id):
        try:
            return self.models[model_id]
        except KeyError:
            raise RuntimeFailure("no model %r in this worker" % (model_id,)) from None

    def build(self, model_id, probe, weights):
        """Build the probe cell ``probe["module"].build_cell(probe["params"], weights)``."""
        raise RuntimeFailure("the %s runtime loads exported models; it does not build probes" % self.package)

    def export(self, model_id, inputs, path):
        """Write model ``model_id`` with example ``inputs`` to ``path`` in the format its suffix
        names (".mindir", ".onnx", ...) and return the file's bytes."""
        raise RuntimeFailure("the %s runtime does not export" % self.package)

    def load(self, model_id, path):
        """Load the exported file at ``path`` as model ``model_id``."""
        raise RuntimeFailure("the %s runtime builds models; it does not load exported files" % self.package)

    def run(self, model_id, inputs):
        """The outputs (numpy arrays, copies the runtime no longer touches) for ``inputs``."""
        raise NotImplementedError

    def time(self, model_id, inputs, warmup, iterations):
        """Nanoseconds per call, measured around the runtime's call only (``time_calls``)."""
        raise NotImplementedError


def make_runtime(name, device, worker_class):
    """Instantiate ``worker_class`` ("module:Class", from the runtime's spec) for runtime ``name``."""
    if not worker_class:
        raise RuntimeFailure(
            "runtime %r: the auditor sent no worker class (no runtime plugin registers it)" % (name,)
        )
    module, _, attr = worker_class.partition(":")
    try:
        cls = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise RuntimeFailure("runtime %r: cannot import %s: %s" % (name, worker_class, exc)) from None
    return cls(device)
