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

from auditor.worker import files
from auditor.worker.mindir import read_info

NAME = "models"


def collect(context):
    patterns = list(context.get("models") or [])
    limits = files.Limits(
        int(context.get("file_max_bytes") or files.DEFAULT_LIMITS.max_bytes),
        float(context.get("file_timeout") or files.DEFAULT_LIMITS.timeout),
    )
    found, unknown = {}, {}
    for pattern in patterns:
        if glob.has_magic(pattern):
            matched = sorted(p for p in glob.glob(pattern) if os.path.isfile(p))
            if not matched:
                unknown[pattern] = "no file matches"
        else:
            matched = [pattern]
        for path in matched:
            if path in found:
                continue
            entry = describe(path, limits)
            if "error" in entry:
                unknown[path] = entry["error"]
            else:
                found[path] = entry
    return {"patterns": patterns, "files": found, "unknown": unknown}


def describe(path, limits=files.DEFAULT_LIMITS):
    """One file's entry, or ``{"error": why}`` (auditor.worker.files: not a regular file,
    larger than ``[files] max_size_mb``, unreadable, or not read within its deadline)."""
    try:
        data = files.read_bytes(path, limits)
    except files.FileProblem as exc:
        return {"error": str(exc)}
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
