"""The model files a stack serves (``[stacks.X] models``: paths or glob patterns), read without
any framework: path, size, sha256, MindIR identity (ir_version, producer,
exporting MindSpore, mind_ir_version), operator list, input/output signatures and the
weights' count and dtypes.

Runs in the stack's worker, so the files are read where they are served. A pattern that
matches nothing and a file that cannot be read are listed in ``unknown``; a file that is
not a readable MindIR keeps its digest and the reason. The modification time is left out: a
copy of the same file is the same deployment. Without configured models the
section is empty (and left out of the stack's fingerprint by the auditor).
"""

import glob
import os

from auditor.worker.mindir import read_info

NAME = "models"
MAX_BYTES = 512 * 1024 * 1024


def collect(context):
    patterns = list(context.get("models") or [])
    files, unknown = {}, {}
    for pattern in patterns:
        if glob.has_magic(pattern):
            matched = sorted(p for p in glob.glob(pattern) if os.path.isfile(p))
            if not matched:
                unknown[pattern] = "no file matches"
        else:
            matched = [pattern]
        for path in matched:
            if path in files:
                continue
            entry = describe(path)
            if "error" in entry:
                unknown[path] = entry["error"]
            else:
                files[path] = entry
    return {"patterns": patterns, "files": files, "unknown": unknown}


def describe(path):
    """One file's entry, or ``{"error": why}``."""
    try:
        size = os.path.getsize(path)
        if size > MAX_BYTES:
            return {"error": "%s: %d bytes, more than the %d this collector reads" % (path, size, MAX_BYTES)}
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return {"error": "%s: no such file" % path}
    except IsADirectoryError:
        return {"error": "%s: is a directory" % path}
    except PermissionError:
        return {"error": "%s: not readable (permission denied)" % path}
    except OSError as exc:
        return {"error": "%s: %s" % (path, exc.strerror or exc)}
    info = read_info(data)
    entry = {
        "size": info.size,
        "sha256": info.sha256,
        "readable": info.readable,
    }
    if not info.readable:
        entry["reason"] = info.reason
        return entry
    entry.update(
        {
            "ir_version": info.ir_version,
            "producer_name": info.producer_name,
            "producer_version": info.producer_version,
            "model_version": info.model_version,
            "mind_ir_version": info.mind_ir_version,
            "op_types": list(info.op_types or ()),
            "inputs": [_tensor(t) for t in info.inputs or ()],
            "outputs": [_tensor(t) for t in info.outputs or ()],
            "parameter_count": info.parameter_count,
            "parameter_elements": info.parameter_elements,
            "parameter_dtypes": list(info.parameter_dtypes or ()),
        }
    )
    return entry


def _tensor(t):
    return {"name": t.name, "shape": list(t.shape), "dtype": t.dtype}
