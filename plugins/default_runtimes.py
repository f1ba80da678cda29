"""The built-in runtimes: MindSpore PyNative (train side), MindSpore graph mode loading a
MindIR with GraphCell, and MindSpore Lite (infer side)."""

from auditor.extend.runtime_spec import RuntimeSpec
from auditor.hookspecs import hookimpl

# Measured with the action_sampler probe's seeded variants on the reference lite20 stack.
LITE_20_CPU = {
    "StandardNormal": "MindSpore Lite 2.0.0 has no CPU kernel for it: the load fails with "
    "'schedule node return nullptr ... type: RandomStandardNormal' (measured)",
    "UniformReal": "MindSpore Lite 2.0.0 loads it on CPU, then predict never returns (measured)",
}


@hookimpl
def auditor_runtimes() -> list[RuntimeSpec]:
    return [
        RuntimeSpec(
            "mindspore",
            "export",
            "auditor.worker.runtimes:MindSporeRuntime",
            "MindSpore in PyNative mode: builds probe cells, runs them, exports MindIR",
        ),
        RuntimeSpec(
            "mindspore-graph",
            "load",
            "auditor.worker.runtimes:MindSporeGraphRuntime",
            "MindSpore loading a MindIR as a GraphCell in graph mode",
        ),
        RuntimeSpec(
            "mindspore-lite",
            "load",
            "auditor.worker.runtimes:LiteRuntime",
            "MindSpore Lite (CPU) loading a MindIR",
            unsupported_operators={"2.0.0:cpu": dict(LITE_20_CPU)},
        ),
    ]
