"""The built-in runtimes, one package each under ``auditor/plugins/runtimes/``: MindSpore
PyNative (train side), MindSpore graph mode loading a MindIR with GraphCell, MindSpore Lite
and ONNX Runtime (infer side). The MindSpore-family serving runtimes ship their measured
operator tables in their packages (``<runtime>.json``, written by ``scripts/operator_sweep.py``)."""

from auditor.plugins.runtimes.lite.spec import LITE
from auditor.plugins.runtimes.mindspore.spec import MINDSPORE, MINDSPORE_GRAPH
from auditor.plugins.runtimes.ort.spec import ORT

from auditor.hookspecs import hookimpl
from auditor.runtime import RuntimeSpec


@hookimpl
def auditor_runtimes() -> list[RuntimeSpec]:
    return [MINDSPORE, MINDSPORE_GRAPH, LITE, ORT]
