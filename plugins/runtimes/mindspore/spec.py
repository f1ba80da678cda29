"""What the auditor knows about MindSpore as a runtime: PyNative on the train side (builds,
runs and exports probes, as MindIR or ONNX), graph mode on the infer side (a MindIR as a
GraphCell); the forms of its MindIR loader's, graph mode's and exporter's failures; the format
of its glog lines (MindSpore Lite writes the same); which release writes (and reads) which
MindIR version (FACTS.md §2); graph mode's measured operator table."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from auditor.rules.engine import version_tuple
from auditor.runtime import (
    DAMAGED,
    EXPORT,
    FIRST_CALL,
    LOAD,
    MINDIR,
    NODE,
    OPERATOR,
    RUN,
    VERSION,
    LogFormat,
    RuntimeSpec,
    form,
    shipped_tables,
)

WORKER = "auditor.plugins.runtimes.mindspore.worker"
HERE = Path(__file__).resolve().parent
"""The package's folder: it holds the measured operator table of mindspore-graph
(``<runtime>.json``, written by ``scripts/operator_sweep.py``)."""

MINDIR_TOO_NEW = form(
    "mindir-version-too-new",
    r"maximum mind ?ir version:\s*(\d+)[^\n]*?support the mind ?ir version:\s*(\d+)",
    VERSION,
    LOAD,
    maximum=1,
    version=2,
)
"""MindSpore's MindIR loader (``mindspore/core/load_mindir/load_model.cc``, in MindSpore and in
MindSpore Lite) refusing a newer file: "This software can only support the maximum mind ir
version: 1, please install the latest version to support the mind ir version: 3" (Lite writes
it to its log, its exception says "Common error code"; MindSpore 2.0 raises it from
mindspore.load)."""

DAMAGED_MINDIR = form(
    "damaged-file",
    r"The model buffer is invalid and fail to create graph"
    r"|Load MindIR file failed, please check the correctness|ParseFromArray failed",
    DAMAGED,
    LOAD,
)
"""A MindIR the loader (MindSpore's or Lite's) cannot parse."""

FIRST_CALL_FORMS = (
    # MindSpore 2.10 GraphCell on a MindSpore 2.0 file: the load works, the first call fails.
    form(
        "ms-null-abstract",
        r"Got null AbstractBasePtr for input \[\d+\] for primitive (\w+)",
        FIRST_CALL,
        RUN,
        1,
    ),
    form("ms-failed-to-get-type", r"Failed to get type in node:\s*" + NODE + r"(?=\s|$)", FIRST_CALL, RUN, 1),
    form("ms-kernel-object-type", r"unsupported kernel object type for " + NODE + r"\s", FIRST_CALL, RUN, 1),
)
"""MindSpore graph mode failing on the first call of a loaded file (measured on the reference
stacks: another release's file; on a file of its own release, an operator it has no kernel for)."""

EXPORT_UNSUPPORTED = form(
    "ms-export-unsupported",
    r"Can not find key (\w+) in convert map\.?(?: Exporting \w+ operator is not yet supported\.)?",
    OPERATOR,
    EXPORT,
    1,
    learned=False,  # a load of another format may run it
)
"""MindSpore's exporter naming an operator it cannot write in the requested format (measured
for ONNX on 2.0 and 2.10: "Can not find key StandardNormal in convert map. Exporting
StandardNormal operator is not yet supported."); the operator is the MindIR primitive."""

# "[ERROR] ME(123,7f..,python):2026-12-03-22:24:38.756.622 [mindspore/lite/src/x.cc:100] Func] text"
GLOG_LINE = re.compile(r"^\[(ERROR|WARNING|CRITICAL|EXCEPTION)\]\s+(\w+)\([^)]*\):\S+\s+\[([^\]]*)\]\s*(.*)$")
"""A line of MindSpore's glog (and MindSpore Lite's): level, module, source file and line, words."""

CROSS_MAJOR_WARNING = re.compile(
    r"Loaded MindIR version is ([\d.]+), but current MindSpore supported MindIR major version is (\d+)"
)
"""MindSpore 2.10 at load of any MindSpore 2.0 file (those that work and those that fail alike)."""

NOISE = r"Numpy init failed|Runtime error for null exception handler"
"""Lines that are no failure: MindSpore 2.10 with numpy 2 "Numpy init failed" (absorbed)."""

MINDSPORE_LOG = LogFormat(GLOG_LINE, re.compile(NOISE), (CROSS_MAJOR_WARNING,))
"""MindSpore's log, read at the level workers run at (GLOG_v=2: warnings and errors)."""

WRITERS = {
    0: "MindSpore before 1.7",
    1: "MindSpore 1.7 to 2.2.x",
    2: "MindSpore 2.3 to 2.4.x",
    3: "MindSpore 2.5 and later",
}


def written_version(mindspore_version: str | None) -> int | None:
    """The mind_ir_version MindSpore writes (and so the highest it reads); None before 1.7,
    which neither writes nor checks it."""
    v = version_tuple(mindspore_version)
    if v is None or len(v) < 2:
        return None
    if v < (1, 7):
        return None
    if v < (2, 3):
        return 1
    if v < (2, 5):
        return 2
    return 3


def reads(version: str, summary: Mapping[str, Any]) -> tuple[int, str] | None:
    """A MindSpore reads what it and older releases write; a newer release's file, at most the
    version it writes itself."""
    reader, writer = version_tuple(version), version_tuple(summary.get("model_version"))
    if reader and writer and reader >= writer:
        return None
    written = written_version(version)
    if written is None:
        return None
    return written, f"MindSpore {version} reads the version it writes"


MINDSPORE = RuntimeSpec(
    "mindspore",
    "export",
    f"{WORKER}:MindSporeRuntime",
    "MindSpore in PyNative mode: builds probe cells, runs them, exports MindIR or ONNX",
    # What its exporter writes (mindspore.export's file_format; the worker's FILE_FORMATS): a
    # format's reader comes with the runtime that loads it.
    exports=("mindir", "onnx"),
    package="mindspore",
    failures=(EXPORT_UNSUPPORTED,),
    log=MINDSPORE_LOG,
    paired_release=True,
    writers={MINDIR.name: WRITERS},
)

MINDSPORE_GRAPH = RuntimeSpec(
    "mindspore-graph",
    "load",
    f"{WORKER}:MindSporeGraphRuntime",
    "MindSpore loading a MindIR as a GraphCell in graph mode",
    loads=MINDIR,
    package="mindspore",
    failures=(MINDIR_TOO_NEW, *FIRST_CALL_FORMS, DAMAGED_MINDIR),
    log=MINDSPORE_LOG,
    paired_release=True,
    reads=reads,
    operator_tables=shipped_tables(HERE / "mindspore-graph.json"),
)
