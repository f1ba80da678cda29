"""What the auditor knows about MindSpore Lite as a runtime: it loads a MindIR (with MindSpore's
own loader, so it refuses a newer MindIR in MindSpore's words), the operators it has no CPU
kernel for, what it says when a node has none, and the highest MindIR version a release reads."""

from __future__ import annotations

import re

from auditor.plugins.runtimes.mindspore.spec import MINDIR_REJECTION

from auditor.results import UNSUPPORTED
from auditor.runtime import MINDIR, Pattern, RuntimeSpec, known_maxima

# Known maxima of MindSpore Lite builds (FACTS.md: measured or published).
MAXIMA = {"2.0.0": 1, "2.2.11": 1}

# Measured with the action_sampler probe's seeded variants on the reference lite20 stack.
CPU_2_0 = {
    "StandardNormal": "MindSpore Lite 2.0.0 has no CPU kernel for it: the load fails with "
    "'schedule node return nullptr ... type: RandomStandardNormal' (measured)",
    "UniformReal": "MindSpore Lite 2.0.0 loads it on CPU, then predict never returns (measured)",
}


def _mindir_operator(match: re.Match[str]) -> str:
    """The node's name ends with the MindIR primitive ("Default/StandardNormal-op12"), which is
    what a MindIR's operator list holds; Lite's own type name ("RandomStandardNormal") is not."""
    node = match.group(1).strip().rpartition("/")[2]
    return re.sub(r"-op\d+$", "", node) or match.group(2)


NO_KERNEL = Pattern(
    re.compile(r"schedule node return nullptr, name: ([^,\n]*), type: (\w+)"),
    UNSUPPORTED,
    operator=2,
    artifact_operator=_mindir_operator,
)
"""Lite 2.0 with no CPU kernel for a node (its Python error says only "Common error code"):
"schedule node return nullptr, name: Default/StandardNormal-op12, type: RandomStandardNormal"."""


LITE = RuntimeSpec(
    "mindspore-lite",
    "load",
    "auditor.plugins.runtimes.lite.worker:LiteRuntime",
    "MindSpore Lite (CPU) loading a MindIR",
    unsupported_operators={"2.0.0:cpu": dict(CPU_2_0)},
    loads=MINDIR,
    package="mindspore-lite",
    failures=(MINDIR_REJECTION, NO_KERNEL),
    reads=known_maxima(MAXIMA, "known limit of MindSpore Lite {version}"),
)
