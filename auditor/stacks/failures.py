"""What a runtime's failure means, read from its message and log, in the words a user thinks
in: the file is another release's (incompatible, with the version pair and the remedy), the
runtime has no kernel for an operator (unsupported, with the operator), or the graph's shape
is one the runtime cannot take; whether it failed to load the file or loaded it and failed on
the first call; and the runtime's own lines around the failure (read with its log format,
``RuntimeSpec.log``: none for a runtime without one).

The forms a runtime writes are declared by its package (``RuntimeSpec.failures``, measured on
the reference stacks: shared notes, opsweep; ``auditor.runtime.failures``), read here with the
generic ones, so the cycle, model probes, the operator sweep and the deployment gate classify a
failure the same way.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from auditor.results import ERROR, INCOMPATIBLE, UNSUPPORTED
from auditor.runtime import MINDIR, LogFormat, RuntimeSpec
from auditor.runtime.failures import (
    DAMAGED,
    EXPORT,
    FIRST_CALL,
    GRAPH,
    LOAD,
    OPERATOR,
    RUN,
    VERSION,
    Form,
    find,
    forms_of,
    node_operator,
    other_release,
    release_text,
)
from auditor.stacks.worker import WorkerError

TABLE_FORM = "operator-table"
"""A Diagnosis's form when a measured operator table, not the runtime's words, named the operator."""


def _forms(runtime: RuntimeSpec | None) -> tuple[Form, ...]:
    """The runtime's forms, then the generic ones."""
    return forms_of(runtime.failures if runtime is not None else ())


LOG_LINES = 12
"""Runtime lines kept with a failure: enough to read the cause, not the whole log."""


def _log_of(runtime: RuntimeSpec | None) -> LogFormat | None:
    return runtime.log if runtime is not None else None


def runtime_lines(text: str, runtime: RuntimeSpec | None) -> list[str]:
    """The runtime's own lines in ``text``, read with its log format (``RuntimeSpec.log``): each
    once in order, in a short form, with how often a line repeated, its noise left out; none
    without a runtime or a log format."""
    log = _log_of(runtime)
    return log.lines(text) if log is not None else []


def _relevant(
    lines: list[str], forms: Iterable[Form], log: LogFormat | None, limit: int = LOG_LINES
) -> tuple[str, ...]:
    """The lines a person needs first: those of a known form naming a cause, then the log
    format's notable ones, those of other known forms, errors, then warnings."""
    forms = tuple(forms)
    naming = [f for f in forms if f.names_a_cause]

    def rank(line: str) -> int:
        if any(f.regex.search(line) for f in naming):
            return 0
        if log is not None and log.is_notable(line):
            return 1
        if any(f.regex.search(line) for f in forms):
            return 2
        return 3 if log is not None and log.is_error(line) else 4

    ordered = sorted(range(len(lines)), key=lambda i: (rank(lines[i]), i))[:limit]
    kept = tuple(lines[i] for i in sorted(ordered))
    if len(lines) > limit:
        kept += (f"... {len(lines) - limit} more line(s) of the runtime's log",)
    return kept


def runtime_warnings(log: str, runtime: RuntimeSpec | None) -> tuple[str, ...]:
    """What the runtime warned about during a request that worked (MindSpore 2.10's
    cross-major warning on a 2.0 file, say), read with its log format, noise left out; none
    without a runtime or a log format."""
    return _relevant(runtime_lines(log, runtime), _forms(runtime), _log_of(runtime), 6)


@dataclass(frozen=True)
class Diagnosis:
    """A failed load, first call or export, as a user thinks of it."""

    status: str
    """incompatible (another release's file, or too new a format version), unsupported (an
    operator or graph shape this release cannot take, or export), or error (no known cause)."""
    phase: str
    """"load" (the runtime refused the file), "run" (it loaded it and the first call failed) or
    "export" (the train runtime could not write the file)."""
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
    """The highest version of its format the runtime reads, when it said so."""
    file_version: int | None = None
    log_lines: tuple[str, ...] = ()
    """The runtime's lines around the failure (the load's warnings too, for a first-call failure)."""
    facts: dict[str, Any] = field(default_factory=dict)
    teaches: bool = True
    """The form's name for the operator is the artifact's (``Form.learned``)."""

    @property
    def named_by_runtime(self) -> bool:
        """The runtime's own words named the cause (not only a measured table)."""
        return self.form is not None and self.form != TABLE_FORM

    @property
    def learnable(self) -> bool:
        """An operator this runtime release cannot run in any graph, to remember: the runtime
        named it, for a file of its own release, at a load or a first call."""
        return (
            self.status == UNSUPPORTED
            and self.kind == OPERATOR
            and self.operator is not None
            and self.teaches
            and self.phase in (LOAD, RUN)
        )

    def text(self) -> str:
        """The summary, the runtime's lines, and the remedy, for a person."""
        lines = [self.summary]
        if self.log_lines:
            lines.append("  the runtime's log:")
            lines += [f"    {line}" for line in self.log_lines]
        if self.remedy:
            lines.append(f"  remedy: {self.remedy}")
        return "\n".join(lines)


def diagnose(
    error: WorkerError,
    runtime: RuntimeSpec | None,
    runtime_version: str | None,
    file: Mapping[str, Any] | None = None,
    earlier_log: str = "",
    known: Mapping[str, str] | None = None,
    target: str = "cpu",
    package: str | None = None,
) -> Diagnosis:
    """What ``error`` (a failed "load", "run" or "export" request of a stack worker) means,
    read with the forms of the stack's ``runtime`` (its spec; None: the generic forms only).

    ``runtime_version``/``package``: the stack's runtime as its hello reported it (``package``
    defaults to the spec's); ``file``: the artifact's summary (``model_version``, the format's
    version, ``op_types``); ``earlier_log``: the log of the load that preceded a failed run (its
    warnings belong to the story); ``known``: operators of this file that a measured table says
    fail on this runtime (operator -> what was measured), used to name the operator when the
    runtime's words do not.
    """
    file = file or {}
    package = package or (runtime.package if runtime is not None else None) or None
    forms = _forms(runtime)
    fmt = runtime.loads if runtime is not None and runtime.can == "load" else MINDIR
    phase = error.op
    exported_by = fmt.producer(dict(file))
    ops = set(file.get("op_types") or ())
    name = f"{package or 'the runtime'} {runtime_version or ''}".strip()
    who = f"{error.stack} ({name}, {target})"
    text = f"{error.message}\n{error.log}\n{error.traceback}"
    log = _log_of(runtime)
    lines = _relevant(runtime_lines(earlier_log, runtime) + runtime_lines(error.log, runtime), forms, log)
    paired = runtime is not None and runtime.paired_release
    cross = paired and phase != EXPORT and other_release(runtime_version, exported_by)
    pair_remedy = (
        f"serve it with {package} {release_text(exported_by)} (the release that exported it), or export "
        f"it with {fmt.producer_name or 'the exporter'} {release_text(runtime_version)}"
    )
    base = dict(exported_by=exported_by, runtime_version=runtime_version, log_lines=lines)
    how = (
        "fails to load it"
        if phase == LOAD
        else "loads it, then fails on the first call"
        if phase == RUN
        else f"fails at {phase}"
    )
    producer = f" by {fmt.producer_name}" if fmt.producer_name else ""
    of_file = f"a {fmt.title} exported{producer} {exported_by}" if exported_by else f"the {fmt.title} file"

    if error.kind != "error":
        # No words from the runtime: it crashed or hung (killed at the deadline).
        verb = {"timeout": "hangs", "crash": "crashes"}.get(error.kind, "fails")
        at = "while loading it" if phase == LOAD else "on the first call" if phase == RUN else f"at {phase}"
        summary = f"{who} {verb} {at} ({of_file}): {error.message}"
        if cross:
            summary += f"; the file is of another release ({fmt.producer_name} {exported_by} on {name})"
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

    found = find(runtime.failures if runtime is not None else (), text, phase)
    if found is not None:
        form, m = found.form, found.match
        words = _line_of(text, m, log)
        if form.kind == VERSION:
            maximum, version = found.maximum, found.version
            if version is None:
                version = fmt.version(dict(file))
            has = f"the file has {fmt.title} version {version}" if version is not None else "the file"
            reads = (
                f"the runtime reads at most version {maximum}"
                if maximum is not None
                else f"the runtime does not read it ({words})"
            )
            summary = f"{who} cannot load {of_file}: {has}, {reads}"
            at_most = f" {maximum} or lower" if maximum is not None else " the runtime reads"
            exporter = f"a {fmt.producer_name} release" if fmt.producer_name else "an exporter"
            remedy = (
                f"export it with {fmt.producer_name} {release_text(runtime_version)} "
                f"(the release of {name}), or serve it with {package} {release_text(exported_by)}"
                if exported_by and paired
                else f"export it with {exporter} that writes {fmt.title} version{at_most}"
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
            summary = f"{who} cannot parse the file: it is damaged or not a {fmt.title} ({words})"
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
        operator = found.operator
        if form.kind == GRAPH and operator == "data":
            operator = None  # "the node Default/data-0 is not output node": a constant output
        # A first-call failure of MindSpore on a file of its own release: no kernel for it.
        kind = OPERATOR if form.kind == FIRST_CALL and not cross else form.kind
        on = f" at operator {operator}" if operator else ""
        if operator and ops and operator not in ops:
            on += " (a node the runtime made from the file's operators)"
        if words and words not in lines:
            on += f" ({words})"  # the runtime's exception: shown nowhere else
        status, teaches = UNSUPPORTED, form.learned
        if phase == EXPORT:
            kind, teaches = form.kind, False
            summary = f"{error.stack} ({name}) cannot export operator {operator}: {words}"
            remedy = (
                f"replace {operator} in the network by operators the exporter writes, or serve the model "
                "in a format it writes"
            )
        elif cross:
            status = INCOMPATIBLE
            summary, remedy = f"{who} {how}{on}: {of_file} on {name}, another release", pair_remedy
        elif kind == GRAPH:
            summary = f"{who} {how}{on}: the graph's shape is one the runtime cannot take"
            remedy = form.remedy
        else:
            verb = "load" if phase == LOAD else "run"
            summary = f"{who} {how}: it cannot {verb} operator {operator}" if operator else f"{who} {how}"
            more = _other_operators(text, forms, log, operator, known, ops) if operator else {}
            if more:
                summary += "; nor " + "; ".join(f"{o} ({why})" for o, why in more.items())
            named = ", ".join([operator, *more]) if operator else "the operator its log names"
            remedy = _operator_remedy(named, name)
        return Diagnosis(
            status, phase, summary, remedy, operator, kind, form.name, words, teaches=teaches, **base
        )

    # No form names a cause. The measured table may know which operator of the file fails here.
    first = (error.message.strip().splitlines() or [""])[0]
    suspects = sorted(o for o in (known or {}) if o in ops)
    if cross:
        summary = (
            f"{who} {how}: {of_file} on {name}, another release ({error.error_type or 'error'}: {first})"
        )
        if suspects:
            summary += "; the measured operator table says " + "; ".join(f"{o}: {known[o]}" for o in suspects)
        return Diagnosis(
            INCOMPATIBLE, phase, summary, pair_remedy, suspects[0] if len(suspects) == 1 else None, **base
        )
    if len(suspects) == 1 and phase != EXPORT:
        op = suspects[0]
        summary = f"{who} {how} ({first}); the measured operator table says {op}: {known[op]}"
        remedy = _operator_remedy(op, name)
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


def _other_operators(
    text: str,
    forms: Iterable[Form],
    log: LogFormat | None,
    operator: str,
    known: Mapping[str, str] | None,
    ops: set[str],
) -> dict[str, str]:
    """The file's other operators that fail here, besides the one the failure is read by: those
    the runtime's log names too (it logs every node it cannot create, then fails on the first),
    then those a measured table or an earlier load knows fail (operator -> what says so). One
    unsupported operator fixed must not reveal the next one only on the next deployment."""
    more: dict[str, str] = {}
    for _, op, _ in named_operators(text, forms, log):
        if op != operator and (not ops or op in ops):
            more.setdefault(op, "its log names it too")
    for op in sorted(o for o in (known or {}) if o in ops and o != operator):
        more.setdefault(op, f"known: {(known or {})[op]}")
    return more


def _operator_remedy(operator: str, runtime: str) -> str:
    return (
        f"replace {operator} in the network by operators {runtime} runs, or serve the model with a "
        f"runtime that runs {operator}"
    )


def _line_of(text: str, m: re.Match[str], log: LogFormat | None) -> str:
    """The whole line of a match, in the short form when it is a line of the runtime's log
    (``log``: its format; None: the line as it is)."""
    start = text.rfind("\n", 0, m.start()) + 1
    end = text.find("\n", m.end())
    line = text[start : end if end >= 0 else len(text)].strip()
    short = log.lines(line) if log is not None else []
    return (short[0] if short else line)[:400]


def unsupported_operator(error: WorkerError, runtime: RuntimeSpec | None) -> str | None:
    """The operator a runtime said it cannot load or run, if that is the failure (its forms and
    the generic ones; for callers that know nothing of the file)."""
    if error.kind != "error":
        return None
    text = f"{error.message}\n{error.log}"
    for form in _forms(runtime):
        if form.kind in (OPERATOR, FIRST_CALL) and form.operator:
            m = form.regex.search(text)
            if m:
                return node_operator(m.group(form.operator))
    return None


def named_operators(
    text: str, forms: Iterable[Form], log: LogFormat | None = None
) -> list[tuple[str, str, str]]:
    """Every (form, operator, line) that ``text`` names with ``forms`` (a runtime's), in order,
    each once; the line in its short form when ``log`` (the runtime's log format) reads it."""
    out: list[tuple[str, str, str]] = []
    for form in forms:
        if not form.operator or not form.names_a_cause:
            continue
        for m in form.regex.finditer(text):
            item = (form.name, node_operator(m.group(form.operator)), _line_of(text, m, log))
            if all(item[:2] != o[:2] for o in out):
                out.append(item)
    return out
