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
from collections.abc import Mapping
from dataclasses import replace

import numpy as np

from auditor.policy import invariants
from auditor.policy.side import Side
from auditor.policy.subject import Subject
from auditor.results import Finding


class Alone:
    """The side checks of one cycle: each (stack, policy) judged once, however many pairs and
    parts share the stack. The sides of one policy are judged together, one input class at a
    time: its float64 reference is evaluated once for all of them and dropped before the next
    class (at a batch of 32,768 a class's reference of two 64-unit layers is 34 MB). Safe to
    call from several hosts' parts at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._judged: set[tuple[str, str]] = set()

    def findings(self, key: str, subject: Subject, sides: Mapping[str, Side]) -> list[Finding]:
        """The findings of every side in ``sides`` (stack -> its side) of the policy known as
        ``key`` in this cycle that ran and was not judged yet; a judged side's hidden nodes are
        let go (they are its largest arrays)."""
        with self._lock:
            mine = {
                s: side
                for s, side in sides.items()
                if side.outputs is not None and (s, key) not in self._judged
            }
            self._judged.update((s, key) for s in mine)
        if not mine:
            return []
        try:
            return judge(subject, mine)
        except Exception as exc:  # a probe that contradicts itself, a reference that raised
            return [problem(subject, s, f"{type(exc).__name__}: {exc}") for s in mine]
        finally:
            for side in mine.values():
                side.hidden = {}


def problem(subject: Subject, stack: str, why: str) -> Finding:
    return Finding(
        "probe-error",
        "error",
        stack,
        f"{stack}/{subject.name}/{subject.variant}/invariants",
        f"{subject.kind} {subject.name} [{subject.variant}]: its invariants cannot be checked: {why}",
        {"probe": subject.name, "variant": subject.variant},
    )


def judge(subject: Subject, sides: Mapping[str, Side]) -> list[Finding]:
    """The findings of each side alone: its outputs (and hidden nodes, where it ran them) on the
    own inputs and every class, each class's float64 reference (where the policy has one)
    evaluated once for all the sides."""
    if subject.declared_problem is not None:
        return [problem(subject, s, subject.declared_problem) for s in sides]
    hidden = list(subject.hidden.names) if subject.hidden is not None else []
    judges: dict[str, tuple[invariants.SideJudge, list[str]]] = {}
    for stack, side in sides.items():
        outputs = side.outputs or []
        if subject.output_names and len(outputs) != len(subject.output_names):
            continue  # the graph does not say which output is which
        names = subject.names(len(outputs))
        floats = tuple(n for n, y in zip(names, outputs, strict=False) if np.asarray(y).dtype.kind == "f")
        declared = subject.declared
        declared = replace(declared, propagates=tuple(n for n in declared.propagates if n in floats))
        if not declared.invariants and not declared.propagates:
            continue
        judges[stack] = (
            invariants.SideJudge(
                declared,
                names + hidden,
                list(subject.input_names),
                subject.varied if subject.varied is not None else 0,
                subject.max_hazard_share,
                invariants=subject.invariants_on,
                hazards=subject.nan_hazard,
                infinities=subject.infinities,
            ),
            names,
        )
    if not judges:
        return []
    by_class = {b.name: b for b in subject.classes}
    classes = [subject.own_class] + [c for c in by_class if any(c in sides[s].classes for s in judges)]
    for cls in classes:
        reference: dict[str, np.ndarray] | None = None
        evaluated = False
        for stack, (side_judge, names) in judges.items():
            side = sides[stack]
            if cls == subject.own_class:
                inputs = side.inputs if side.inputs is not None else subject.inputs
                out = side.outputs or []
            elif cls in side.classes:
                inputs, out = by_class[cls].inputs, side.classes[cls]
            else:
                continue
            if len(out) != len(names):
                continue
            if not evaluated and subject.reference64 is not None:
                reference, evaluated = _reference(subject, judges, sides, cls, list(inputs)), True
            layers = side.hidden.get(cls, []) if len(side.hidden.get(cls, [])) == len(hidden) else []
            for run in _runs(cls, list(inputs), [np.asarray(o) for o in out], layers, reference):
                side_judge.add(run)
        del reference  # the next class's, not this one's, is held
    found: list[Finding] = []
    for stack, (side_judge, _) in judges.items():
        mine = side_judge.findings(stack, subject.name, subject.variant)
        if subject.hazard_action:
            mine = [
                replace(f, details={**f.details, "action": subject.hazard_action})
                if f.kind == "nan-hazard"
                else f
                for f in mine
            ]
        found += one_masking(mine) if subject.one_masking_per_side else mine
    return found


def _reference(
    subject: Subject,
    judges: Mapping[str, tuple[invariants.SideJudge, list[str]]],
    sides: Mapping[str, Side],
    cls: str,
    inputs: list[np.ndarray],
) -> dict[str, np.ndarray] | None:
    """The float64 reference of one class, evaluated on the rows where it decides something:
    those with a non-finite varied input (NaN/Inf hazards) and those where a side breaks an
    invariant (the mathematics says whether it is a finding). Elsewhere it is NaN, never read:
    nothing is broken there and no input is non-finite. At a large batch of ordinary inputs
    that is a few rows of many."""
    assert subject.reference64 is not None
    rows = int(np.asarray(inputs[0]).shape[0]) if inputs and np.ndim(inputs[0]) else 0
    varied = np.asarray(inputs[subject.varied or 0]) if inputs else np.zeros(0)
    if rows == 0 or varied.dtype.kind != "f" or varied.ndim == 0 or varied.shape[0] != rows:
        return subject.reference64(inputs)
    need = ~np.isfinite(varied.reshape(rows, -1)).all(axis=1)
    for stack, (side_judge, names) in judges.items():
        side = sides[stack]
        out = side.outputs if cls == subject.own_class else side.classes.get(cls, [])
        values = dict(zip(names, out or [], strict=False))
        values.update(
            zip(subject.hidden.names if subject.hidden else (), side.hidden.get(cls, []), strict=False)
        )
        for inv in side_judge.declared.invariants:
            y = values.get(inv.output)
            if y is None or np.ndim(y) == 0:
                continue
            y = np.asarray(y)
            broken = inv.broken(y.reshape(y.shape[0], -1)).any(axis=1)
            need[: len(broken)] |= broken[:rows]
    if need.all():
        return subject.reference64(inputs)
    if not need.any():
        return {}  # nothing broken, nothing non-finite: the reference would decide nothing
    picked = np.flatnonzero(need)
    part = subject.reference64([x[picked] if np.ndim(x) and np.shape(x)[0] == rows else x for x in inputs])
    if part is None:
        return None
    out: dict[str, np.ndarray] = {}
    for name, v in part.items():
        v = np.asarray(v, np.float64)
        if v.ndim and v.shape[0] == len(picked):
            full = np.full((rows, *v.shape[1:]), np.nan)
            full[picked] = v
            out[name] = full
        else:
            out[name] = v
    return out


def _runs(
    cls: str,
    inputs: list[np.ndarray],
    outputs: list[np.ndarray],
    layers: list[np.ndarray],
    reference: dict[str, np.ndarray] | None,
) -> list[invariants.SideRun]:
    """One class's run, its outputs followed by its hidden nodes; where only the first rows'
    hidden nodes came back (auditor.cycle.serving.HIDDEN_ROWS), two: those rows with their
    hidden nodes, and the rest of the rows with the outputs alone."""
    rows = int(np.asarray(inputs[0]).shape[0]) if inputs and np.ndim(inputs[0]) else 0
    kept = int(np.asarray(layers[0]).shape[0]) if layers and np.ndim(layers[0]) else rows
    if not layers or kept >= rows:
        return [invariants.SideRun(cls, inputs, outputs + [np.asarray(v) for v in layers], reference)]

    def cut(x: np.ndarray, part: slice) -> np.ndarray:
        return x[part] if np.ndim(x) and np.shape(x)[0] == rows else x

    head, tail = slice(0, kept), slice(kept, rows)
    ref_head = {k: cut(v, head) for k, v in reference.items()} if reference is not None else None
    ref_tail = {k: cut(v, tail) for k, v in reference.items()} if reference is not None else None
    return [
        invariants.SideRun(
            cls, [cut(x, head) for x in inputs], [cut(o, head) for o in outputs] + list(layers), ref_head
        ),
        invariants.SideRun(
            cls, [cut(x, tail) for x in inputs], [cut(o, tail) for o in outputs], ref_tail, first_row=kept
        ),
    ]


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
