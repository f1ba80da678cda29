"""What the auditor knows about MindSpore Lite as a runtime: it loads a MindIR (with MindSpore's
own loader, so it refuses a newer MindIR in MindSpore's words), the forms of its failures, the
operators it has no CPU kernel for, its measured operator table, and the highest MindIR version
a release reads.

MindSpore Lite 2.0's exception says only "Common error code" for every load failure; the
operator is named only in its native log at ``GLOG_v=2`` (the level workers run at), in
several forms (measured on the reference stacks: shared notes, opsweep)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from auditor.plugins.runtimes.mindspore.spec import DAMAGED_MINDIR, MINDIR_TOO_NEW, MINDSPORE_LOG, NOISE

from auditor.runtime import (
    CONTEXT,
    GRAPH,
    LOAD,
    MINDIR,
    NODE,
    OPERATOR,
    RuntimeSpec,
    form,
    known_maxima,
    shipped_tables,
)

# Known maxima of MindSpore Lite builds (FACTS.md: measured or published).
MAXIMA = {"2.0.0": 1, "2.2.11": 1}

# Measured with the action_sampler probe's seeded variants on the reference lite20 stack.
CPU_2_0 = {
    "StandardNormal": "MindSpore Lite 2.0.0 has no CPU kernel for it: the load fails with "
    "'schedule node return nullptr ... type: RandomStandardNormal' (measured)",
    "UniformReal": "MindSpore Lite 2.0.0 loads it on CPU, then predict never returns (measured)",
}

TUPLE_REMEDY = "return the tuple's elements one by one (`a, b = op(x); return a, b`), not the tuple itself"
EMPTY_GRAPH_REMEDY = (
    "after the runtime's own passes the graph computes nothing (an identity, a constant): "
    "export the graph that computes the outputs"
)

FORMS = (
    MINDIR_TOO_NEW,
    # Load: no primitive at all (the operator's name, ~40 times at GLOG_v=2).
    form("lite-unsupported-primitive", r"Unsupported primitive type in Create: (\w+)", OPERATOR, LOAD, 1),
    form("lite-no-ops-registry", r"can not find MSOpsRegistry for op: (\w+)", OPERATOR, LOAD, 1),
    # ... a primitive without a CPU kernel: the node name carries the MindIR operator; the type
    # is Lite's own schema name (RandomStandardNormal for StandardNormal).
    form(
        "lite-no-kernel",
        r"(?:schedule node|FindBackendKernel) return nullptr, name: " + NODE + r", type: \w+",
        OPERATOR,
        LOAD,
        1,
    ),
    # ... a kernel that refuses its attributes (Argmin: "Invalid topk 0" first).
    form("lite-kernel-prepare", r"node: " + NODE + r" prepare failed", OPERATOR, LOAD, 1),
    # ... graph shapes Lite cannot take, every operator known.
    form(
        "lite-tuple-output",
        r"Abstract is not abstract tensor\. " + NODE + r"(?=\s|$)",
        GRAPH,
        LOAD,
        1,
        TUPLE_REMEDY,
    ),
    form(
        "lite-dropout-mask",
        r"Unsupported Dropout: " + NODE + r" with mask output",
        GRAPH,
        LOAD,
        1,
        "Lite takes this operator for a Dropout with a mask output and fails: keep it out of "
        "the served graph",
    ),
    form(
        "lite-constant-output", r"the node (\S+?)\s*is not output node", GRAPH, LOAD, None, EMPTY_GRAPH_REMEDY
    ),
    DAMAGED_MINDIR,
    # Words that name no cause (listed so the lines are shown first among the log's).
    form("lite-common-error", r"Common error code", CONTEXT, LOAD),
    form("lite-invalid-graph", r"meta_graph is invalid, please check your model file", CONTEXT, LOAD),
    form("lite-outputs-info", r"Get outputs info of funcgraph failed", CONTEXT, LOAD),
)


LITE_LOG = dataclasses.replace(
    MINDSPORE_LOG, noise=re.compile(r"IsConvNode\] prim is nullptr|Open libnuma\.so failed|libnuma|" + NOISE)
)
"""MindSpore's glog lines (Lite writes them with MindSpore's code, its loader's warnings too),
and its own noise: "IsConvNode prim is nullptr" on loads that work, the libnuma line on every
load."""

LITE = RuntimeSpec(
    "mindspore-lite",
    "load",
    "auditor.plugins.runtimes.lite.worker:LiteRuntime",
    "MindSpore Lite (CPU) loading a MindIR",
    unsupported_operators={"2.0.0:cpu": dict(CPU_2_0)},
    loads=MINDIR,
    package="mindspore-lite",
    failures=FORMS,
    log=LITE_LOG,
    paired_release=True,
    reads=known_maxima(MAXIMA, "known limit of MindSpore Lite {version}"),
    operator_tables=shipped_tables(Path(__file__).resolve().parent / "mindspore-lite.json"),
)
