"""The built-in runtimes: MindSpore PyNative (train side), MindSpore graph mode loading a
MindIR with GraphCell, and MindSpore Lite (infer side)."""

from auditor.hookspecs import hookimpl
from auditor.runtime import RuntimeSpec


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
        ),
    ]
