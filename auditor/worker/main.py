"""The stack worker's request loop.

Started by the auditor with the stack's interpreter; serves framed requests on stdin and
answers on the original stdout. Everything native libraries print to stdout is sent to
stderr instead, so it can never corrupt a frame. While a request runs, fd 2 is redirected
to a file in the worker's directory: the runtime's native log for that request (MindSpore
Lite's real load error, for example) is returned with the answer, and the auditor can still
read it if the worker dies or hangs mid-request.
"""

import gc
import importlib
import os
import re
import sys
import time
import traceback

import numpy as np

from auditor.worker import fingerprint, protocol, train_network
from auditor.worker.runtimes import RuntimeFailure, make_runtime

LOG_LIMIT = 64 * 1024


class StderrCapture(object):
    """Send fd 2 to ``path`` during a request, then replay it to the real stderr."""

    def __init__(self, path):
        self.path = path
        self.saved = None

    def __enter__(self):
        sys.stderr.flush()
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        self.saved = os.dup(2)
        os.dup2(fd, 2)
        os.close(fd)
        return self

    def __exit__(self, *exc):
        sys.stderr.flush()
        os.dup2(self.saved, 2)
        os.close(self.saved)
        with open(self.path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - LOG_LIMIT))
            self.text = f.read().decode("utf-8", "replace")
        os.write(2, self.text.encode("utf-8"))
        return False


class Worker(object):
    def __init__(self, spec):
        self.spec = spec
        self.runtime = None
        self.workdir = spec["workdir"]

    def handle(self, request):
        op = request.get("op")
        if op == "hello":
            return self.hello()
        if op == "echo":
            # Sends the payload back untouched: checks the protocol against this interpreter's numpy.
            return {"value": request.get("value")}
        if op == "import":
            # auditor plugins --check: does each module of a plugin's stack side import here?
            return {"results": [import_check(name) for name in request.get("modules") or []]}
        if op == "fingerprint":
            # Reads files and runs npu-smi only: needs no runtime.
            return fingerprint.collect(request.get("collectors") or [], request.get("context") or {})
        if self.runtime is None:
            raise RuntimeFailure("runtime not started")
        if op == "build":
            self.runtime.build(request["model"], request["probe"], request["weights"])
            return {}
        if op == "export":
            # The path's suffix names the format (".mindir", ".onnx"): the infer runtime's.
            data = self.runtime.export(request["model"], request["inputs"], request["path"])
            return {"artifact": data}
        if op == "load":
            path = request["path"]
            if request.get("mindir") is not None:
                # A worker on another host: the file travels with the request.
                path = os.path.join(self.spec["workdir"], os.path.basename(path))
                with open(path, "wb") as f:
                    f.write(request["mindir"])
            self.runtime.load(request["model"], path)
            return {}
        if op == "unload":
            # A server replacing its model: the old one freed before the next is built.
            self.runtime.models.pop(request["model"], None)
            gc.collect()
            return {}
        if op == "network":
            # A model probe's reference: the user's training network, built by its factory.
            checkpoint = request.get("checkpoint") or ""
            if request.get("checkpoint_data") is not None:
                # A worker on another host: the checkpoint travels with the request.
                checkpoint = os.path.join(
                    self.spec["workdir"], os.path.basename(checkpoint) or "network.ckpt"
                )
                with open(checkpoint, "wb") as f:
                    f.write(request["checkpoint_data"])
            return train_network.build(
                self.runtime,
                request["model"],
                request["factory"],
                request.get("kwargs") or {},
                checkpoint,
                request.get("precision"),
            )
        if op == "layers":
            # A training network's leaf cells' outputs (localization of a model probe).
            return train_network.layers(self.runtime, request["model"], request["inputs"])
        if op == "cells":
            # A built network's cells in graph order: what `auditor fix` keeps in float32.
            return train_network.cells(self.runtime, request["model"], request["inputs"])
        if op == "convert":
            return self.convert(request)
        if op == "signature":
            signature = getattr(self.runtime, "signature", None)
            if signature is None:
                raise RuntimeFailure("the %s runtime does not list a model's inputs" % self.spec["runtime"])
            return {"inputs": signature(request["model"])}
        if op == "run":
            outputs = self.runtime.run(request["model"], request["inputs"])
            skip, keep = request.get("skip"), request.get("rows")
            if skip is not None or keep is not None:
                # only some outputs' first rows travel back (a policy's hidden nodes at a large
                # batch): the rest stays here, where it is dropped
                skip = int(skip or 0)
                outputs = list(outputs[:skip]) + [
                    o[: int(keep)] if keep is not None and getattr(o, "ndim", 0) else o
                    for o in outputs[skip:]
                ]
            return {"outputs": outputs}
        if op == "time":
            return {
                "ns": self.runtime.time(
                    request["model"],
                    request["inputs"],
                    int(request.get("warmup", 5)),
                    int(request.get("iterations", 50)),
                )
            }
        raise RuntimeFailure("unknown request %r" % (op,))

    def convert(self, request):
        """The runtime's model converter (MindSpore Lite's) on the MindIR sent with the request
        (``mindir``) or on a file of this host (``path``), with ``options`` and the converter
        config file's text (``config``)."""
        convert = getattr(self.runtime, "convert", None)
        if convert is None:
            raise RuntimeFailure("the %s runtime has no model converter" % self.spec["runtime"])
        # "-out": the converter appends .ms or .mindir, unless the name already ends with it
        name = re.sub(r"[^A-Za-z0-9_.-]", "_", request["model"])
        base = os.path.join(self.workdir, "convert-%s-out" % name)
        source = request.get("path")
        if request.get("mindir") is not None:
            source = base + ".source.mindir"
            with open(source, "wb") as f:
                f.write(request["mindir"])
        config = None
        if request.get("config") is not None:
            config = base + ".cfg"
            with open(config, "w") as f:
                f.write(request["config"])
        return convert(source, base, request.get("options") or {}, config)

    def hello(self):
        if self.runtime is None:
            self.runtime = make_runtime(
                self.spec["runtime"], self.spec.get("device", "cpu"), self.spec.get("runtime_class")
            )
        return {
            "pid": os.getpid(),
            "python": "%d.%d.%d" % sys.version_info[:3],
            "executable": sys.executable,
            "numpy": np.__version__,
            "runtime": self.spec["runtime"],
            "runtime_package": self.runtime.package,
            "runtime_version": self.runtime.version,
            # Not part of a fingerprint (the auditor takes them out): where the worker keeps
            # its files on its host, and how a remote worker was reached.
            "workdir": self.spec.get("workdir"),
            "remote": self.spec.get("remote"),
        }


def import_check(name):
    """Import module ``name``; what failed, with the file and line where it failed."""
    entry = {"module": name, "error": None, "file": None, "line": None}
    try:
        importlib.import_module(name)
    except SyntaxError as exc:
        entry.update(error="SyntaxError: %s" % exc.msg, file=exc.filename, line=exc.lineno)
    except BaseException as exc:  # a plugin's import may raise anything
        if isinstance(exc, KeyboardInterrupt):
            raise
        frames = traceback.extract_tb(sys.exc_info()[2])
        if frames:
            entry.update(file=frames[-1].filename, line=frames[-1].lineno)
        entry["error"] = "%s: %s" % (type(exc).__name__, exc)
    return entry


def serve(spec):
    proto_out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    proto_in = sys.stdin.buffer
    worker = Worker(spec)
    capture_path = os.path.join(spec["workdir"], "request.log")
    while True:
        request = protocol.read_frame(proto_in)
        if request is None or request.get("op") == "shutdown":
            break
        started = time.time()
        capture = StderrCapture(capture_path)
        try:
            with capture:
                result = worker.handle(request)
            reply = {"ok": True, "result": result}
        except BaseException as exc:  # the worker must answer, whatever the runtime raised
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            reply = {
                "ok": False,
                "error": {
                    "type": type(exc).__name__,
                    "message": str(exc),
                    "traceback": traceback.format_exc(),
                },
            }
        reply["log"] = getattr(capture, "text", "")
        reply["seconds"] = time.time() - started
        protocol.write_frame(proto_out, reply)
    proto_out.close()
