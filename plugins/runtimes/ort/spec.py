"""What the auditor knows about ONNX Runtime: it loads ONNX files (the format, read without the
onnx package by ``onnx_wire``), the forms of its errors (an operator it has no kernel for, an IR
or opset version above its own) and the highest ONNX IR version a release reads (measured,
notes/converter_onnx B4)."""

from __future__ import annotations

import re

from auditor.plugins.runtimes.ort import onnx_wire

from auditor.runtime import LOAD, OPERATOR, VERSION, ArtifactFormat, RuntimeSpec, form, known_maxima

ONNX = ArtifactFormat(
    "onnx",
    "ONNX",
    ".onnx",
    onnx_wire.read_info,
    version_field="ir_version",
    # MindSpore 2.0 and 2.10 both write producer_version "1.0": the exporting release is not in the file.
    producer_field=None,
)

# "Unsupported model IR version: 99, max supported IR version: 14" (onnxruntime 1.32.0, measured)
MAX_IR_VERSION = {"1.32.0": 14}

FORMS = (
    # "... INVALID_GRAPH : ... Error No Op registered for NoSuchOp with domain_version of 11"
    form("ort-no-op-registered", r"No Op registered for (\w+) with domain_version of \d+", OPERATOR, LOAD, 1),
    # "... NOT_IMPLEMENTED : Could not find an implementation for Gemm(6) node with name '1Gemm'"
    form(
        "ort-no-implementation", r"Could not find an implementation for (\w+)\(\d+\) node", OPERATOR, LOAD, 1
    ),
    form(
        "ort-ir-version-too-new",
        r"Unsupported model IR version: (\d+), max supported IR version: (\d+)",
        VERSION,
        LOAD,
        version=1,
        maximum=2,
    ),
    # "Opset 30 is under development ... Current official support for domain ai.onnx is till opset 28."
    form(
        "ort-opset-too-new",
        re.compile(
            r"Opset \d+ is under development.*?official support for domain [\w.]+ is till opset \d+", re.S
        ),
        VERSION,
        LOAD,
    ),
)


ORT = RuntimeSpec(
    "ort",
    "load",
    "auditor.plugins.runtimes.ort.worker:OrtRuntime",
    "ONNX Runtime (CPU; CANN or CUDA execution provider on ascend:N / gpu:N) loading an ONNX export",
    loads=ONNX,
    package="onnxruntime",
    # onnxruntime starts a thread of its own when it is imported (3 threads after the import
    # here, 2 after numpy's): a fork would copy a process whose other threads may hold locks.
    # Its import costs about 0.2 CPU-s, so its workers start cold.
    cold="onnxruntime starts a thread when it is imported, so a fork after the import is not safe",
    failures=FORMS,
    reads=known_maxima(MAX_IR_VERSION, "onnxruntime {version} says so when it refuses a newer file"),
)
