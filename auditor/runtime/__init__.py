"""The runtime plugin API: what a runtime package tells the auditor (``auditor_runtimes``).

A runtime is one package: its worker side (a class the stack's worker instantiates, Python
3.7, ``auditor.worker.runtimes``), its ``RuntimeSpec`` (which side of a pair, the artifact
formats it writes or reads, the failure patterns of its messages, its version facts) and,
when it brings one, its ``ArtifactFormat``. The built-in ones live in
``auditor/plugins/runtimes/`` and are examples of this API.

``from auditor.runtime import RuntimeSpec`` is also the path plugins used before the layered
layout: it keeps working.
"""

from auditor.results import INCOMPATIBLE, UNSUPPORTED
from auditor.runtime.failures import GENERIC, Failure, Pattern, explain
from auditor.runtime.formats import MINDIR, ArtifactFormat
from auditor.runtime.spec import RuntimeSpec, formats_of, known_maxima, readers_facts, writers_of

__all__ = [
    "GENERIC",
    "INCOMPATIBLE",
    "MINDIR",
    "UNSUPPORTED",
    "ArtifactFormat",
    "Failure",
    "Pattern",
    "RuntimeSpec",
    "explain",
    "formats_of",
    "known_maxima",
    "readers_facts",
    "writers_of",
]
