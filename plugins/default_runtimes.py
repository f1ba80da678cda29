"""The built-in runtimes: MindSpore PyNative (train side), MindSpore graph mode loading a
MindIR with GraphCell, and MindSpore Lite (infer side). The serving runtimes ship their measured
operator tables (``operator_tables/<runtime>.json``, written by ``scripts/operator_sweep.py``)."""

import logging
from pathlib import Path

from auditor.extend.operator_table import OperatorTable, TableError, read_tables
from auditor.extend.runtime_spec import RuntimeSpec
from auditor.hookspecs import hookimpl

TABLES = Path(__file__).resolve().parent / "operator_tables"


def measured(runtime: str) -> tuple[OperatorTable, ...]:
    """The runtime's shipped operator tables; none when the file is missing or damaged (said in
    the log: the runtime itself stays usable)."""
    path = TABLES / f"{runtime}.json"
    if not path.is_file():
        return ()
    try:
        return read_tables(path)
    except TableError as exc:
        logging.getLogger(__name__).warning("operator table not used: %s", exc)
        return ()


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
            operator_tables=measured("mindspore-graph"),
        ),
        RuntimeSpec(
            "mindspore-lite",
            "load",
            "auditor.worker.runtimes:LiteRuntime",
            "MindSpore Lite (CPU) loading a MindIR",
            unsupported_operators={"2.0.0:cpu": dict(LITE_20_CPU)},
            operator_tables=measured("mindspore-lite"),
        ),
    ]
