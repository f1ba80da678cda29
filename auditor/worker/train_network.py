"""The training network as a model probe's reference: the user's own factory builds the policy
in PyNative, its checkpoint is loaded, and the worker keeps it like a built probe cell.

Runs inside a MindSpore train stack (Python 3.7 + numpy 1.21, or 3.11). The factory's package
was registered in the worker like the auditor's probes (it travels to a remote host in the
worker's payload). Every failure is a RuntimeFailure that names the factory, the checkpoint and
what went wrong, for that model only.
"""

import importlib
import os
import traceback

from auditor.worker import precision as mixed_precision
from auditor.worker.runtimes import RuntimeFailure


def _tail(limit=12):
    lines = traceback.format_exc().strip().splitlines()
    return "\n".join(lines[-limit:])


def build(runtime, model_id, factory, kwargs, checkpoint, precision=None):
    """Build the network with ``factory(**kwargs)``, load ``checkpoint`` (a .ckpt path on this
    host, or "") into it, put it in inference mode and keep it as ``model_id``; with
    ``precision`` (a plan of auditor.worker.precision, `auditor fix`'s candidates) computing
    per cell as the plan says. Returns what was loaded: the network's parameter count and the
    checkpoint's entries it did not use."""
    if getattr(runtime, "package", "") != "mindspore" or getattr(runtime, "graph_mode", False):
        raise RuntimeFailure(
            "the training network is built by a MindSpore train stack (runtime mindspore, PyNative), "
            "not by %s" % (getattr(runtime, "package", type(runtime).__name__),)
        )
    ms = runtime.ms
    module_name, _, attr = factory.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # the user's code: any error is this model's
        raise RuntimeFailure(
            "cannot import the factory's module %s on this stack: %s: %s (its package travels to the "
            "stack from [models.NAME] train.path or the auditor's Python path, else the stack's own "
            "environment must have it)\n%s" % (module_name, type(exc).__name__, exc, _tail())
        ) from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise RuntimeFailure("%s has no function %s (factory %s)" % (module_name, attr, factory))
    try:
        cell = fn(**dict(kwargs or {}))
    except Exception as exc:
        raise RuntimeFailure(
            "the factory %s raised %s: %s\n%s" % (factory, type(exc).__name__, exc, _tail())
        ) from None
    if not isinstance(cell, ms.nn.Cell):
        raise RuntimeFailure(
            "the factory %s returned %s, not a mindspore.nn.Cell" % (factory, type(cell).__name__)
        )
    unused = []
    if checkpoint:
        if not os.path.isfile(checkpoint):
            raise RuntimeFailure("no checkpoint file %s" % checkpoint)
        try:
            params = ms.load_checkpoint(checkpoint)
        except Exception as exc:
            raise RuntimeFailure(
                "cannot read the checkpoint %s: %s: %s"
                % (os.path.basename(checkpoint), type(exc).__name__, exc)
            ) from None
        got = ms.load_param_into_net(cell, params)
        # MindSpore 2.0 returns the network's parameters not loaded; 2.10 also the checkpoint's unused.
        if isinstance(got, tuple):
            missing, unused = list(got[0]), list(got[1])
        else:
            missing = list(got or [])
            names = set(p.name for p in cell.get_parameters())
            unused = [k for k in params if k not in names]
        if missing:
            raise RuntimeFailure(
                "the checkpoint %s has no value for %d parameter(s) of the network built by %s: %s "
                "(a network with initializer weights is not the trained policy)"
                % (os.path.basename(checkpoint), len(missing), factory, ", ".join(sorted(missing)[:10]))
            )
    cell.set_train(False)
    if precision:
        try:
            mixed_precision.apply(ms, cell, precision)
        except ValueError as exc:
            raise RuntimeFailure("%s (factory %s)" % (exc, factory)) from None
    runtime.models[model_id] = cell
    return {
        "parameters": len(list(cell.get_parameters())),
        "unused_checkpoint_entries": sorted(unused)[:20],
    }


def layers(runtime, model_id, inputs):
    """The outputs of the kept network's leaf cells on ``inputs``, in the order they ran (a cell
    run twice appears twice): each {"path": "actor.norm", "type": "LayerNorm", "output": array}
    (a cell returning a tuple: its first tensor). PyNative forward hooks, removed after the run."""
    ms = runtime.ms
    cell = runtime.models.get(model_id)
    if cell is None:
        raise RuntimeFailure("no network %s kept on this worker" % model_id)
    seen = []
    handles = []

    def hook_for(path, leaf):
        def hook(*args):
            output = args[-1]
            while isinstance(output, (tuple, list)) and output:
                output = output[0]
            if isinstance(output, ms.Tensor):
                seen.append({"path": path, "type": type(leaf).__name__, "output": output.asnumpy()})

        return hook

    for path, leaf in cell.cells_and_names():
        if path and not list(leaf.cells()):
            handles.append(leaf.register_forward_hook(hook_for(path, leaf)))
    try:
        runtime.run(model_id, inputs)
    finally:
        for handle in handles:
            handle.remove()
    return {"layers": seen}


def cells(runtime, model_id, inputs):
    """The kept network's units (auditor.worker.precision.units) on one forward pass of
    ``inputs``: what `auditor fix` searches over, in graph order."""
    cell = runtime.models.get(model_id)
    if cell is None:
        raise RuntimeFailure("no network %s kept on this worker" % model_id)
    ms = getattr(runtime, "ms", None)
    if ms is None or not isinstance(cell, ms.nn.Cell):
        raise RuntimeFailure(
            "model %s is not a MindSpore network built here (a loaded file has no cells)" % model_id
        )
    return {"cells": mixed_precision.units(cell, lambda: runtime.run(model_id, inputs))}
