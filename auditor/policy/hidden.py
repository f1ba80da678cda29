"""A policy's hidden nodes, checked on each side alone as its outputs are: a tanh between two
layers that leaves [-1, 1] is wrong whatever the output layer makes of it.

Two ways expose them, one per way a policy reaches a stack:

- a network the auditor builds (a built-in or plugin probe) returns its layers after its
  outputs when built with ``expose_layers`` (``layer_names(params)``), and the probe declares
  their invariants, with its float64 reference to decide;
- a file (a user's ``[models.NAME]``) gets a copy that also returns the values of its
  bounded operators (auditor.worker.mindir_taps with ``ops``: tanh, sigmoid, softmax, exp,
  softplus, ReLU, ReLU6), each held to that operator's range (auditor.policy.invariants
  GRAPH_RANGES), on the rows whose inputs are finite, as the file's own outputs are.

Either way the side runs the exposing model on the policy's own inputs and every input class,
and ``Side.hidden`` holds the values in the order of ``Hidden.names``.
"""

from __future__ import annotations

from dataclasses import dataclass

from auditor.policy import taps
from auditor.policy.invariants import GRAPH_RANGES, Invariant
from auditor.worker.mindir_taps import TapError, tap

BOUNDED = frozenset(GRAPH_RANGES)
"""The operators whose value has a range whatever their inputs."""


@dataclass(frozen=True)
class Hidden:
    names: tuple[str, ...]
    """The hidden nodes, in the order a side returns them after the outputs."""
    copy: bytes | None = None
    """The file's copy that returns them (None: the network is built with its layers exposed)."""
    invariants: tuple[Invariant, ...] = ()
    """What the nodes' operators imply (a file's); a probe declares its layers' itself."""


def of_file(data: bytes) -> Hidden | str | None:
    """The file's bounded inner nodes and the copy that returns them; None when it has none;
    a string saying why the file cannot be tapped."""
    try:
        copy, found, _ = tap(data, ops=BOUNDED)
    except TapError as exc:
        if "no inner value" in str(exc):
            return None
        return f"the file's hidden nodes cannot be returned: {exc}"
    names = tuple(taps.names(found))
    checks = []
    for name, t in zip(names, found, strict=True):
        check, low, high = GRAPH_RANGES[t.op]
        checks.append(Invariant(name, check, low, high))
    return Hidden(names, copy, tuple(checks))
