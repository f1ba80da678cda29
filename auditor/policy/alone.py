"""Each side of a policy judged on its own: what comparing two sides cannot see (both compute
the same impossible value, or one side cannot run at all).

For every side that ran the policy (the reference when it is a stack or a network, and each
serving stack), its outputs and hidden nodes on the policy's own inputs and on every input
class are held to the policy's invariants and NaN/Inf hazards (auditor.policy.invariants): a
probe's declared ones, judged by its float64 reference where it has one; a file's from its
graph (its outputs' and its bounded hidden nodes' operators), on the rows whose inputs are
finite. The same function judges both, once per stack and policy, however many pairs and
hosts share the stack.
"""

from __future__ import annotations

import threading
from dataclasses import replace

import numpy as np

from auditor.policy import invariants
from auditor.policy.side import Side
from auditor.policy.subject import Subject
from auditor.results import Finding


class Alone:
    """The side checks of one cycle: each (stack, policy) judged once, the float64 reference of
    each (policy, input class) evaluated once (the same for every stack judged). Safe to call
    from several hosts' parts at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._judged: set[tuple[str, str]] = set()
        self._references: dict[tuple[str, str], dict[str, np.ndarray] | None] = {}

    def findings(self, key: str, subject: Subject, stack: str, side: Side) -> list[Finding]:
        """The findings of ``side`` (stack ``stack``) of the policy known as ``key`` in this
        cycle, or [] when that stack was judged already."""
        if side.outputs is None:
            return []
        with self._lock:
            if (stack, key) in self._judged:
                return []
            self._judged.add((stack, key))
        try:
            return check(subject, stack, side, lambda cls, inputs: self._reference(key, subject, cls, inputs))
        except Exception as exc:  # a probe that contradicts itself, a reference that raised
            return [problem(subject, stack, f"{type(exc).__name__}: {exc}")]

    def _reference(
        self, key: str, subject: Subject, cls: str, inputs: list[np.ndarray]
    ) -> dict[str, np.ndarray] | None:
        if subject.reference64 is None:
            return None
        with self._lock:
            if (key, cls) in self._references:
                return self._references[(key, cls)]
        found = subject.reference64(inputs)
        with self._lock:
            return self._references.setdefault((key, cls), found)


def problem(subject: Subject, stack: str, why: str) -> Finding:
    return Finding(
        "probe-error",
        "error",
        stack,
        f"{stack}/{subject.name}/{subject.variant}/invariants",
        f"{subject.kind} {subject.name} [{subject.variant}]: its invariants cannot be checked: {why}",
        {"probe": subject.name, "variant": subject.variant},
    )


def check(subject: Subject, stack: str, side: Side, reference_of) -> list[Finding]:  # noqa: ANN001
    """One side's findings: its outputs (and hidden nodes, where it ran them) on the own inputs
    and every class. ``reference_of(class, inputs)``: the float64 reference, or None."""
    if subject.declared_problem is not None:
        return [problem(subject, stack, subject.declared_problem)]
    outputs = side.outputs or []
    names = subject.names(len(outputs))
    floats = tuple(n for n, y in zip(names, outputs, strict=False) if np.asarray(y).dtype.kind == "f")
    declared = subject.declared
    declared = replace(declared, propagates=tuple(n for n in declared.propagates if n in floats))
    if not declared.invariants and not declared.propagates:
        return []
    hidden = list(subject.hidden.names) if subject.hidden is not None else []
    own = side.inputs if side.inputs is not None else subject.inputs
    batches = [(subject.own_class, own, outputs)]
    by_class = {b.name: b for b in subject.classes}
    batches += [(c, by_class[c].inputs, out) for c, out in side.classes.items() if c in by_class]
    runs = []
    for cls, inputs, out in batches:
        if len(out) != len(names):
            continue  # the graph does not say which output is which
        layers = side.hidden.get(cls, [])
        values = [np.asarray(o) for o in out] + (
            [np.asarray(v) for v in layers] if len(layers) == len(hidden) else []
        )
        runs.append(invariants.SideRun(cls, list(inputs), values, reference_of(cls, list(inputs))))
    if not runs:
        return []
    found = invariants.check_side(
        stack,
        subject.name,
        subject.variant,
        declared,
        names + hidden,
        list(subject.input_names),
        subject.varied if subject.varied is not None else 0,
        runs,
        subject.max_hazard_share,
        invariants=subject.invariants_on,
        hazards=subject.nan_hazard,
        infinities=subject.infinities,
    )
    if subject.hazard_action:
        found = [
            replace(f, details={**f.details, "action": subject.hazard_action})
            if f.kind == "nan-hazard"
            else f
            for f in found
        ]
    return one_masking(found) if subject.one_masking_per_side else found


def one_masking(found: list[Finding]) -> list[Finding]:
    """One NaN-masking finding per side: without a graph of what each output is computed from,
    a file says which outputs a NaN input must reach, not where on the way it is lost, so the
    outputs that lose it are one cause, said in the first output's finding (its key and
    cause), the others named in it."""
    masked = [f for f in found if f.kind == "nan-hazard"]
    if len(masked) < 2:
        return found
    first, others = masked[0], masked[1:]
    also = [str(f.details.get("output")) for f in others]
    words = f"; the same input rows come out finite in {', '.join(also)} too"
    merged = replace(
        first,
        message=first.message + words,
        summary=first.summary + f" (and {', '.join(also)})",
        details={**first.details, "also": also},
    )
    return [merged if f is first else f for f in found if not any(f is o for o in others)]
