"""The forms of a runtime's failure: how a runtime says, in its message or its log, why it
failed, and what that means (the file is of too new a version, it has no kernel for an
operator, the graph's shape is one it cannot take, it cannot parse the file...).

A runtime's package declares the forms of its own messages (``RuntimeSpec.failures``: a
``Form`` each, measured on the reference stacks); the generic one below ("unsupported
operator: X") applies to every runtime. ``auditor.stacks.failures`` reads a failed request
with the forms of the stack's runtime and turns it into a ``Diagnosis`` (incompatible,
unsupported, or an error; the phase; the runtime's own lines; the remedy), the one reading
the cycle, model probes, the operator sweep and the deployment gate share.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

VERSION = "mindir-version"
"""The file's format version is above what the runtime reads (any format: the word is the one
the operator sweep's tables and results used when MindIR was the only format)."""
OPERATOR = "operator"
"""The runtime has no primitive or kernel for an operator, or its kernel refuses it (or its
exporter cannot write it)."""
GRAPH = "graph"
"""Every operator is known, but the graph's shape is one the runtime cannot take."""
FIRST_CALL = "first-call"
"""The runtime loaded another release's file and cannot infer an operator on the first call."""
DAMAGED = "damaged"
"""The runtime cannot parse the file at all."""
CONTEXT = "context"
"""The runtime's words for a failure that name no cause (Lite's "Common error code")."""
KINDS = (VERSION, OPERATOR, GRAPH, FIRST_CALL, DAMAGED, CONTEXT)
NAMING_KINDS = (VERSION, OPERATOR, GRAPH, FIRST_CALL, DAMAGED)
"""The kinds that name a cause."""

LOAD, RUN, EXPORT = "load", "run", "export"
PHASES = (LOAD, RUN, EXPORT, "")


@dataclass(frozen=True)
class Form:
    """One way a runtime says why it failed. ``kind``: what it means (one of ``KINDS``).
    ``phase``: the request at which the runtime writes it ("load", "run", "export", or "" for
    any). ``operator``, ``maximum``, ``version``: the regex groups naming the operator (as the
    artifact names it: a graph node's name is reduced to its operator), the highest format
    version the runtime reads and the file's. ``remedy``: what to do, when the form alone says
    it. ``learned``: whether the operator it names is one the runtime cannot run in any graph,
    to remember and check before later loads (not when the message's name for it need not be
    the artifact's)."""

    name: str
    regex: re.Pattern[str]
    kind: str
    phase: str = ""
    operator: int | None = None
    remedy: str = ""
    maximum: int | None = None
    version: int | None = None
    learned: bool = True

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(
                f"failure form {self.name}: kind is one of {', '.join(KINDS)}, not {self.kind!r}"
            )
        if self.phase not in PHASES:
            raise ValueError(
                f"failure form {self.name}: phase is load, run, export or '', not {self.phase!r}"
            )
        if not isinstance(self.regex, re.Pattern):
            raise ValueError(f"failure form {self.name}: regex must be a compiled re.Pattern")

    @property
    def names_a_cause(self) -> bool:
        return self.kind in NAMING_KINDS

    def applies(self, phase: str | None) -> bool:
        """Does the runtime write this form at ``phase`` (None: at any)?"""
        return not phase or not self.phase or self.phase == phase or self.kind == CONTEXT

    def find(self, text: str) -> Found | None:
        m = self.regex.search(text)
        return Found(self, m) if m is not None else None


def form(
    name: str,
    regex: str | re.Pattern[str],
    kind: str,
    phase: str = "",
    operator: int | None = None,
    remedy: str = "",
    *,
    maximum: int | None = None,
    version: int | None = None,
    learned: bool = True,
) -> Form:
    """A ``Form`` from a regex string (compiled with ``re.MULTILINE``) or a compiled one."""
    pattern = re.compile(regex, re.MULTILINE) if isinstance(regex, str) else regex
    return Form(name, pattern, kind, phase, operator, remedy, maximum, version, learned)


@dataclass(frozen=True)
class Found:
    """A form found in a runtime's text."""

    form: Form
    match: re.Match[str]

    @property
    def kind(self) -> str:
        return self.form.kind

    @property
    def words(self) -> str:
        """The runtime's words the form matched."""
        return self.match.group(0)

    @property
    def operator(self) -> str | None:
        return node_operator(self.match.group(self.form.operator)) if self.form.operator else None

    @property
    def maximum(self) -> int | None:
        return int(self.match.group(self.form.maximum)) if self.form.maximum else None

    @property
    def version(self) -> int | None:
        return int(self.match.group(self.form.version)) if self.form.version else None


NODE = r"(?:\S*/)?([A-Za-z][A-Za-z0-9_]*?)(?:-op\d+)?"
"""A graph node's name, "Default/network-Policy/ReduceSum-op12": group 1 is the operator."""


def node_operator(name: str) -> str:
    """'Default/network-Policy/ReduceSum-op12' -> 'ReduceSum'."""
    return re.sub(r"-op\d+$", "", name.strip().rpartition("/")[2])


GENERIC: tuple[Form, ...] = (
    form(
        "unsupported-operator",
        r"(?i)unsupported op(?:erator)?(?: type)?:?\s*['\"]?([A-Za-z_][\w.]*)",
        OPERATOR,
        "",
        1,
        learned=False,
    ),
)
"""Any runtime that says "unsupported operator: X" means it (its name for X need not be the
artifact's, so nothing is learned from it). Read after the runtime's own forms."""


def forms_of(own: Iterable[Form]) -> tuple[Form, ...]:
    """A runtime's forms, then the generic ones."""
    return (*own, *GENERIC)


def find(forms: Iterable[Form], text: str, phase: str | None = None) -> Found | None:
    """The first form (of ``forms``, then the generic ones) written at ``phase`` that names a
    cause in ``text``."""
    for f in forms_of(forms):
        if f.names_a_cause and f.applies(phase):
            found = f.find(text)
            if found is not None:
                return found
    return None


def _release(version: str | None) -> tuple[int, int] | None:
    m = re.match(r"\s*(\d+)\.(\d+)", str(version or ""))
    return (int(m.group(1)), int(m.group(2))) if m else None


def other_release(runtime_version: str | None, exported_by: str | None) -> bool:
    """Are two releases (a runtime's, the one that exported a file) different major.minor
    releases? Unknown versions are not another release."""
    a, b = _release(runtime_version), _release(exported_by)
    return a is not None and b is not None and a != b


def release_text(version: str | None) -> str:
    r = _release(version)
    return f"{r[0]}.{r[1]}.x" if r else str(version)
