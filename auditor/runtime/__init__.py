"""The runtime plugin API: what a runtime package tells the auditor (``auditor_runtimes``).

A runtime is one package: its worker side (a class the stack's worker instantiates, Python
3.7, ``auditor.worker.runtimes``), its ``RuntimeSpec`` (which side of a pair, the artifact
formats it writes or reads, the forms of its failures, the format of its log (``LogFormat``),
its version facts, its measured operator tables) and, when it brings one, its
``ArtifactFormat``. The built-in ones live in ``auditor/plugins/runtimes/`` and are examples of
this API.

``from auditor.runtime import RuntimeSpec`` is also the path plugins used before the layered
layout: it keeps working.
"""

from auditor.runtime.failures import (
    CONTEXT,
    DAMAGED,
    EXPORT,
    FIRST_CALL,
    GENERIC,
    GRAPH,
    LOAD,
    NODE,
    OPERATOR,
    RUN,
    VERSION,
    Form,
    Found,
    find,
    form,
)
from auditor.runtime.formats import MINDIR, ArtifactFormat
from auditor.runtime.logs import LogFormat
from auditor.runtime.operator_table import OperatorTable, read_tables, shipped_tables
from auditor.runtime.spec import RuntimeSpec, formats_of, known_maxima, readers_facts, writers_of

__all__ = [
    "CONTEXT",
    "DAMAGED",
    "EXPORT",
    "FIRST_CALL",
    "GENERIC",
    "GRAPH",
    "LOAD",
    "MINDIR",
    "NODE",
    "OPERATOR",
    "RUN",
    "VERSION",
    "ArtifactFormat",
    "Form",
    "Found",
    "LogFormat",
    "OperatorTable",
    "RuntimeSpec",
    "find",
    "form",
    "formats_of",
    "known_maxima",
    "read_tables",
    "shipped_tables",
    "readers_facts",
    "writers_of",
]
