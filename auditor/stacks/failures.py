"""What a runtime's failure means, read from its message and log, in the words a user thinks
in: the file is another release's (incompatible, with the version pair and the remedy), the
runtime has no kernel for an operator (unsupported, with the operator), or the graph's shape
is one the runtime cannot take; whether it failed to load the file or loaded it and failed on
the first call; and the runtime's own lines around the failure.

One table of forms (``FORMS``: the regex, what it means, where the runtime writes it and which
runtime), measured on the reference stacks (shared notes: opsweep), so the cycle, model probes,
the operator sweep and the deployment gate classify a failure the same way. MindSpore Lite 2.0's
exception says only "Common error code" for every load failure; the operator is named only in
its native log at ``GLOG_v=2`` (the level workers run at), in several forms.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from auditor.results import ERROR, INCOMPATIBLE, UNSUPPORTED
from auditor.stacks.worker import WorkerError

VERSION = "mindir-version"
"""The file's MindIR version is above what the runtime reads."""
OPERATOR = "operator"
"""The runtime has no primitive or kernel for an operator, or its kernel refuses it."""
GRAPH = "graph"
"""Every operator is known, but the graph's shape is one the runtime cannot take."""
FIRST_CALL = "first-call"
"""MindSpore loaded another release's file and cannot infer an operator on the first call."""
DAMAGED = "damaged"
"""The runtime cannot parse the file at all."""
CONTEXT = "context"
"""The runtime's words for a failure that name no cause (Lite's "Common error code")."""
KINDS = (VERSION, OPERATOR, GRAPH, FIRST_CALL, DAMAGED, CONTEXT)

LOAD, RUN = "load", "run"
TABLE_FORM = "operator-table"
"""A Diagnosis's form when a measured operator table, not the runtime's words, named the operator."""
LITE, MINDSPORE = "mindspore-lite", "mindspore"
"""Runtime packages whose releases pair with the MindSpore release that exported a file."""
PAIRED_RELEASES = (LITE, MINDSPORE)

_NODE = r"(?:\S*/)?([A-Za-z][A-Za-z0-9_]*?)(?:-op\d+)?"
"""A graph node's name, "Default/network-Policy/ReduceSum-op12": group 1 is the operator."""


@dataclass(frozen=True)
class Form:
    """One way a runtime says why it failed. ``operator``: the regex group naming the
    operator (as the MindIR names it: a node name is reduced to its operator). ``phase``: where
    the runtime writes it ("load", "run", or "" for either). ``runtime``: the runtime package
    that writes it ("" for any). ``remedy``: what to do, when the form alone says it."""

    name: str
    regex: re.Pattern[str]
    kind: str
    phase: str = ""
    runtime: str = ""
    operator: int | None = None
    remedy: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(
                f"failure form {self.name}: kind is one of {', '.join(KINDS)}, not {self.kind!r}"
            )


def _form(
    name: str, regex: str, kind: str, phase: str, runtime: str, operator: int | None = None, remedy: str = ""
) -> Form:
    return Form(name, re.compile(regex, re.MULTILINE), kind, phase, runtime, operator, remedy)


TUPLE_REMEDY = "return the tuple's elements one by one (`a, b = op(x); return a, b`), not the tuple itself"
EMPTY_GRAPH_REMEDY = (
    "after the runtime's own passes the graph computes nothing (an identity, a constant): "
    "export the graph that computes the outputs"
)

FORMS: tuple[Form, ...] = (
    # The file is too new: Lite writes it to its log (its exception says "Common error code"),
    # MindSpore 2.0 raises it from mindspore.load.
    _form(
        "mindir-version-too-new",
        r"maximum mind ?ir version:\s*(\d+)[^\n]*?support the mind ?ir version:\s*(\d+)",
        VERSION,
        LOAD,
        "",
    ),
    # MindSpore Lite 2.0, load: no primitive at all (the operator's name, ~40 times at GLOG_v=2).
    _form(
        "lite-unsupported-primitive", r"Unsupported primitive type in Create: (\w+)", OPERATOR, LOAD, LITE, 1
    ),
    _form("lite-no-ops-registry", r"can not find MSOpsRegistry for op: (\w+)", OPERATOR, LOAD, LITE, 1),
    # ... a primitive without a CPU kernel: the node name carries the MindIR operator; the type
    # is Lite's own schema name (RandomStandardNormal for StandardNormal).
    _form(
        "lite-no-kernel",
        r"(?:schedule node|FindBackendKernel) return nullptr, name: " + _NODE + r", type: \w+",
        OPERATOR,
        LOAD,
        LITE,
        1,
    ),
    # ... a kernel that refuses its attributes (Argmin: "Invalid topk 0" first).
    _form("lite-kernel-prepare", r"node: " + _NODE + r" prepare failed", OPERATOR, LOAD, LITE, 1),
    # ... graph shapes Lite cannot take, every operator known.
    _form(
        "lite-tuple-output",
        r"Abstract is not abstract tensor\. " + _NODE + r"(?=\s|$)",
        GRAPH,
        LOAD,
        LITE,
        1,
        TUPLE_REMEDY,
    ),
    _form(
        "lite-dropout-mask",
        r"Unsupported Dropout: " + _NODE + r" with mask output",
        GRAPH,
        LOAD,
        LITE,
        1,
        "Lite takes this operator for a Dropout with a mask output and fails: keep it out of "
        "the served graph",
    ),
    _form(
        "lite-constant-output",
        r"the node (\S+?)\s*is not output node",
        GRAPH,
        LOAD,
        LITE,
        None,
        EMPTY_GRAPH_REMEDY,
    ),
    # MindSpore 2.10 GraphCell on a MindSpore 2.0 file: the load works, the first call fails.
    _form(
        "ms-null-abstract",
        r"Got null AbstractBasePtr for input \[\d+\] for primitive (\w+)",
        FIRST_CALL,
        RUN,
        MINDSPORE,
        1,
    ),
    _form(
        "ms-failed-to-get-type",
        r"Failed to get type in node:\s*" + _NODE + r"(?=\s|$)",
        FIRST_CALL,
        RUN,
        MINDSPORE,
        1,
    ),
    _form(
        "ms-kernel-object-type",
        r"unsupported kernel object type for " + _NODE + r"\s",
        FIRST_CALL,
        RUN,
        MINDSPORE,
        1,
    ),
    # A file the runtime cannot parse.
    _form(
        "damaged-file",
        r"The model buffer is invalid and fail to create graph"
        r"|Load MindIR file failed, please check the correctness|ParseFromArray failed",
        DAMAGED,
        LOAD,
        "",
    ),
    # Words that name no cause (listed so the lines are shown first among the log's).
    _form("lite-common-error", r"Common error code", CONTEXT, LOAD, LITE),
    _form("lite-invalid-graph", r"meta_graph is invalid, please check your model file", CONTEXT, LOAD, LITE),
    _form("lite-outputs-info", r"Get outputs info of funcgraph failed", CONTEXT, LOAD, LITE),
    # Any runtime that says "unsupported operator: X" means it.
    _form(
        "unsupported-operator",
        r"(?i)unsupported op(?:erator)?(?: type)?:?\s*['\"]?([A-Za-z_][\w.]*)",
        OPERATOR,
        "",
        "",
        1,
    ),
)
NAMING = tuple(f for f in FORMS if f.kind in (VERSION, OPERATOR, GRAPH, FIRST_CALL, DAMAGED))

CROSS_MAJOR_WARNING = re.compile(
    r"Loaded MindIR version is ([\d.]+), but current MindSpore supported MindIR major version is (\d+)"
)
"""MindSpore 2.10 at load of any MindSpore 2.0 file (those that work and those that fail alike)."""

NOISE = re.compile(
    r"IsConvNode\] prim is nullptr|Open libnuma\.so failed|libnuma|Numpy init failed|"
    r"Runtime error for null exception handler"
)
"""Lines that are no failure: Lite prints "IsConvNode prim is nullptr" on loads that work and
the libnuma line on every load; MindSpore 2.10 with numpy 2 "Numpy init failed" (absorbed)."""

MINDIR_REJECTION = FORMS[0].regex
"""The MindIR-version rejection (group 1: the runtime's maximum, group 2: the file's version)."""

# "[ERROR] ME(123,7f..,python):2026-12-03-22:24:38.756.622 [mindspore/lite/src/x.cc:100] Func] text"
_LOG_LINE = re.compile(r"^\[(ERROR|WARNING|CRITICAL|EXCEPTION)\]\s+(\w+)\([^)]*\):\S+\s+\[([^\]]*)\]\s*(.*)$")
LOG_LINES = 12
"""Runtime lines kept with a failure: enough to read the cause, not the whole log."""


def node_operator(name: str) -> str:
    """'Default/network-Policy/ReduceSum-op12' -> 'ReduceSum'."""
    return re.sub(r"-op\d+$", "", name.strip().rpartition("/")[2])


def runtime_lines(text: str) -> list[str]:
    """The runtime's own ERROR/WARNING/CRITICAL lines in ``text``, each once in order, in a short
    form (no pid, time or directory: "[ERROR] ME lite_model.h ConvertNodes] ..."), with how
    often a line repeated; the known noise left out."""
    seen: dict[str, int] = {}
    for raw in text.splitlines():
        m = _LOG_LINE.match(raw.strip())
        if not m or NOISE.search(raw):
            continue
        level, module, where, words = m.groups()
        source = re.sub(r":\d+$", "", where).rpartition("/")[2]
        short = f"[{level}] {module} {source} {words.strip()}"
        seen[short] = seen.get(short, 0) + 1
    return [line if n == 1 else f"{line} (x{n})" for line, n in seen.items()]


def _relevant(lines: list[str], limit: int = LOG_LINES) -> tuple[str, ...]:
    """The lines a person needs first: those of a known form, then errors, then warnings."""

    def rank(line: str) -> int:
        if any(f.regex.search(line) for f in NAMING):
            return 0
        if CROSS_MAJOR_WARNING.search(line):
            return 1
        if any(f.regex.search(line) for f in FORMS):
            return 2
        return 3 if line.startswith(("[ERROR]", "[CRITICAL]", "[EXCEPTION]")) else 4

    ordered = sorted(range(len(lines)), key=lambda i: (rank(lines[i]), i))[:limit]
    kept = tuple(lines[i] for i in sorted(ordered))
    if len(lines) > limit:
        kept += (f"... {len(lines) - limit} more line(s) of the runtime's log",)
    return kept


def runtime_warnings(log: str) -> tuple[str, ...]:
    """What the runtime warned about during a request that worked (MindSpore 2.10's
    cross-major warning on a 2.0 file, say), noise left out."""
    return _relevant(runtime_lines(log), 6)


def _release(version: str | None) -> tuple[int, int] | None:
    m = re.match(r"\s*(\d+)\.(\d+)", str(version or ""))
    return (int(m.group(1)), int(m.group(2))) if m else None


def other_release(package: str | None, runtime_version: str | None, exported_by: str | None) -> bool:
    """Does a MindSpore-family runtime serve a file that another MindSpore release exported?
    (Lite is meant to match the MindSpore that exported the model; MindSpore reads its own
    release's files.) Unknown versions are not another release."""
    a, b = _release(runtime_version), _release(exported_by)
    return package in PAIRED_RELEASES and a is not None and b is not None and a != b


def release_text(version: str | None) -> str:
    r = _release(version)
    return f"{r[0]}.{r[1]}.x" if r else str(version)


@dataclass(frozen=True)
class Diagnosis:
    """A failed load or first call, as a user thinks of it."""

    status: str
    """incompatible (another release's file, or too new a MindIR version), unsupported (an
    operator or graph shape this release cannot take), or error (no known cause)."""
    phase: str
    """"load" (the runtime refused the file) or "run" (it loaded it and the first call failed)."""
    summary: str
    """One sentence: who failed, at which phase, on what."""
    remedy: str
    operator: str | None = None
    kind: str | None = None
    """The form's kind (VERSION, OPERATOR, GRAPH, FIRST_CALL, DAMAGED), None when no form named a cause."""
    form: str | None = None
    words: str = ""
    """The runtime's own line that names the cause."""
    exported_by: str | None = None
    runtime_version: str | None = None
    maximum: int | None = None
    """The highest MindIR version the runtime reads, when it said so."""
    file_version: int | None = None
    log_lines: tuple[str, ...] = ()
    """The runtime's lines around the failure (the load's warnings too, for a first-call failure)."""
    facts: dict[str, Any] = field(default_factory=dict)

    @property
    def named_by_runtime(self) -> bool:
        """The runtime's own words named the cause (not only a measured table)."""
        return self.form is not None and self.form != TABLE_FORM

    @property
    def learnable(self) -> bool:
        """An operator this runtime release cannot run in any graph, to remember: the runtime
        named it, for a file of its own release."""
        return self.status == UNSUPPORTED and self.kind == OPERATOR and self.operator is not None

    def text(self) -> str:
        """The summary, the runtime's lines, and the remedy, for a person."""
        lines = [self.summary]
        if self.log_lines:
            lines.append("  the runtime's log:")
            lines += [f"    {line}" for line in self.log_lines]
        if self.remedy:
            lines.append(f"  remedy: {self.remedy}")
        return "\n".join(lines)


def _match(form: Form, text: str, package: str | None, phase: str) -> re.Match[str] | None:
    if form.runtime and package and form.runtime != package:
        return None
    if form.phase and form.phase != phase and form.kind != CONTEXT:
        return None
    return form.regex.search(text)


def diagnose(
    error: WorkerError,
    package: str | None,
    runtime_version: str | None,
    file: Mapping[str, Any] | None = None,
    earlier_log: str = "",
    known: Mapping[str, str] | None = None,
    target: str = "cpu",
) -> Diagnosis:
    """What ``error`` (a failed "load" or "run" request of a stack worker) means.

    ``package``/``runtime_version``: the stack's runtime (from its hello); ``file``: the
    MindIR's summary (``model_version``, ``mind_ir_version``, ``op_types``); ``earlier_log``:
    the log of the load that preceded a failed run (its warnings belong to the story);
    ``known``: operators of this file that a measured table says fail on this runtime (operator
    -> what was measured), used to name the operator when the runtime's words do not.
    """
    file = file or {}
    phase = RUN if error.op == RUN else LOAD if error.op == LOAD else error.op
    exported_by = file.get("model_version")
    ops = set(file.get("op_types") or ())
    runtime = f"{package or 'the runtime'} {runtime_version or ''}".strip()
    who = f"{error.stack} ({runtime}, {target})"
    text = f"{error.message}\n{error.log}\n{error.traceback}"
    lines = _relevant(runtime_lines(earlier_log) + runtime_lines(error.log))
    cross = other_release(package, runtime_version, exported_by)
    pair_remedy = (
        f"serve it with {package} {release_text(exported_by)} (the release that exported it), or export "
        f"it with MindSpore {release_text(runtime_version)}"
    )
    base = dict(exported_by=exported_by, runtime_version=runtime_version, log_lines=lines)
    how = "fails to load it" if phase == LOAD else "loads it, then fails on the first call"
    of_file = f"a MindIR exported by MindSpore {exported_by}" if exported_by else "the file"

    if error.kind != "error":
        # No words from the runtime: it crashed or hung (killed at the deadline).
        verb = {"timeout": "hangs", "crash": "crashes"}.get(error.kind, "fails")
        at = "while loading it" if phase == LOAD else "on the first call" if phase == RUN else f"at {phase}"
        summary = f"{who} {verb} {at} ({of_file}): {error.message}"
        if cross:
            summary += f"; the file is of another release (MindSpore {exported_by} on {runtime})"
        suspects = sorted(o for o in (known or {}) if o in ops)
        if suspects:
            summary += "; the measured operator table knows " + "; ".join(
                f"{o}: {known[o]}" for o in suspects
            )
        remedy = (
            pair_remedy
            if cross
            else (
                "a runtime that hangs or crashes gives no reason: try the file with "
                f"`auditor check --model FILE --stack {error.stack}` and report it with the file"
            )
        )
        return Diagnosis(ERROR, phase, summary, remedy, suspects[0] if len(suspects) == 1 else None, **base)

    for form in NAMING:
        m = _match(form, text, package, phase)
        if m is None:
            continue
        words = _line_of(text, m)
        if form.kind == VERSION:
            maximum, version = int(m.group(1)), int(m.group(2))
            summary = (
                f"{who} cannot load {of_file}: the file has MindIR version {version}, the runtime reads at "
                f"most version {maximum}"
            )
            remedy = (
                f"export it with MindSpore {release_text(runtime_version)} (the release of {runtime}), "
                f"or serve it with {package} {release_text(exported_by)}"
                if exported_by
                else f"export it with a MindSpore release that writes MindIR version {maximum} or lower"
            )
            return Diagnosis(
                INCOMPATIBLE,
                LOAD,
                summary,
                remedy,
                None,
                VERSION,
                form.name,
                words,
                maximum=maximum,
                file_version=version,
                **base,
            )
        if form.kind == DAMAGED:
            summary = f"{who} cannot parse the file: it is damaged or not a MindIR ({words})"
            return Diagnosis(
                ERROR,
                phase,
                summary,
                "export the model again and copy it whole",
                None,
                DAMAGED,
                form.name,
                words,
                **base,
            )
        operator = node_operator(m.group(form.operator)) if form.operator else None
        if form.kind == GRAPH and operator == "data":
            operator = None  # "the node Default/data-0 is not output node": a constant output
        # A first-call failure of MindSpore on a file of its own release: no kernel for it.
        kind = OPERATOR if form.kind == FIRST_CALL and not cross else form.kind
        on = f" at operator {operator}" if operator else ""
        if operator and ops and operator not in ops:
            on += " (a node the runtime made from the file's operators)"
        if words and words not in lines:
            on += f" ({words})"  # the runtime's exception: shown nowhere else
        if cross:
            summary = f"{who} {how}{on}: {of_file} on {runtime}, another release"
            return Diagnosis(
                INCOMPATIBLE,
                phase,
                summary,
                pair_remedy,
                operator,
                kind,
                form.name,
                words,
                **base,
            )
        if kind == GRAPH:
            summary = f"{who} {how}{on}: the graph's shape is one the runtime cannot take"
            remedy = form.remedy
        else:
            verb = "load" if phase == LOAD else "run"
            summary = f"{who} {how}: it cannot {verb} operator {operator}" if operator else f"{who} {how}"
            remedy = _operator_remedy(operator or "the operator its log names", runtime)
        return Diagnosis(UNSUPPORTED, phase, summary, remedy, operator, kind, form.name, words, **base)

    # No form names a cause. The measured table may know which operator of the file fails here.
    first = (error.message.strip().splitlines() or [""])[0]
    suspects = sorted(o for o in (known or {}) if o in ops)
    if cross:
        summary = (
            f"{who} {how}: {of_file} on {runtime}, another release ({error.error_type or 'error'}: {first})"
        )
        if suspects:
            summary += "; the measured operator table says " + "; ".join(f"{o}: {known[o]}" for o in suspects)
        return Diagnosis(
            INCOMPATIBLE, phase, summary, pair_remedy, suspects[0] if len(suspects) == 1 else None, **base
        )
    if len(suspects) == 1:
        op = suspects[0]
        summary = f"{who} {how} ({first}); the measured operator table says {op}: {known[op]}"
        remedy = _operator_remedy(op, runtime)
        return Diagnosis(UNSUPPORTED, phase, summary, remedy, op, OPERATOR, TABLE_FORM, known[op], **base)
    summary = f"{who} {how}: {error.error_type + ': ' if error.error_type else ''}{first}"
    if suspects:
        summary += "; the measured operator table says " + "; ".join(f"{o}: {known[o]}" for o in suspects)
    remedy = (
        "the runtime's lines above say what it tried (no known form names the cause): report it with the file"
        if lines
        else "the runtime wrote no line about it (its exception above is all it said): run the file "
        f"on {error.stack} by hand with GLOG_v=1 for more, and report it with the file"
    )
    return Diagnosis(ERROR, phase, summary, remedy, **base)


def _operator_remedy(operator: str, runtime: str) -> str:
    return (
        f"replace {operator} in the network by operators {runtime} runs, or serve the model with a "
        f"runtime that runs {operator}"
    )


def _line_of(text: str, m: re.Match[str]) -> str:
    """The whole line of a match, in the short form when it is a log line."""
    start = text.rfind("\n", 0, m.start()) + 1
    end = text.find("\n", m.end())
    line = text[start : end if end >= 0 else len(text)].strip()
    short = runtime_lines(line)
    return (short[0] if short else line)[:400]


def unsupported_operator(error: WorkerError) -> str | None:
    """The operator a runtime said it cannot load or run, if that is the failure (any runtime's
    forms; kept for callers that know nothing of the file)."""
    if error.kind != "error":
        return None
    text = f"{error.message}\n{error.log}"
    for form in NAMING:
        if form.kind in (OPERATOR, FIRST_CALL) and form.operator:
            m = form.regex.search(text)
            if m:
                return node_operator(m.group(form.operator))
    return None


def named_operators(text: str, forms: Sequence[Form] = NAMING) -> list[tuple[str, str, str]]:
    """Every (form, operator, line) that ``text`` names, in order, each once (the sweep
    attributes a failing case with it)."""
    out: list[tuple[str, str, str]] = []
    for form in forms:
        if not form.operator:
            continue
        for m in form.regex.finditer(text):
            item = (form.name, node_operator(m.group(form.operator)), _line_of(text, m))
            if all(item[:2] != o[:2] for o in out):
                out.append(item)
    return out
