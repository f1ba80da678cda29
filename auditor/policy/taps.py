"""Where a user's model goes wrong: the first divergent layer of a drifting model probe.

A served MindIR returns its outputs only. So the file is copied with its inner values returned
too (auditor.worker.mindir_taps: every computing node, named by the cell it belongs to), the
serving stack loads the copy (unconverted) and runs the inputs that drifted (the model's own,
else the first input class that did), and the inner values are compared in the order they
compute with the reference's:

- a reference stack runs the same copy: every inner value is compared, then the outputs;
- the training network (PyNative on its train stack) gives each leaf cell's output by a
  forward hook (auditor.worker.train_network.layers): each is compared with the copy's value
  of the same cell (the last computing node of that cell's run, a Dense's BiasAdd), the k-th
  call of a cell with its k-th run; a cell the copy cannot place (no parameter, no scope, or
  another shape) is left out;
- a golden holds outputs only: not localized, and said.

The result is a ``Localization`` like a probe's (``localized: first divergent: layer norm
(LayerNorm), ...``), or one that says why it was not done. A copy can differ from the served
file in the last bits (a runtime fuses fewer operators when inner values are returned), which
is why the copy runs on both sides of a reference stack.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from auditor.compare.verdicts import Tolerance
from auditor.policy.localize import Localization, locate
from auditor.worker.mindir_taps import Tap, TapError, tap

NOT_RUN = "localization not run: "


@dataclass(frozen=True)
class Tapped:
    """The copy of a model that returns its inner values, and what they are."""

    data: bytes
    taps: list[Tap]
    """The inner values, in the order the copy returns them after the file's outputs."""
    cells: list[Tap]
    """Every returned value (outputs included) in the file's node order, with its index."""


def tapped(data: bytes) -> Tapped | str:
    """The copy, or why the file cannot be tapped."""
    try:
        copy, taps, cells = tap(data)
    except TapError as exc:
        return f"{NOT_RUN}the file's inner values cannot be returned: {exc}"
    return Tapped(copy, taps, cells)


def names(taps: Sequence[Tap]) -> list[str]:
    """Each tap's name, a cell run again numbered (``act (ELU) #2``)."""
    seen: dict[str, int] = {}
    out = []
    for t in taps:
        base = t.describe()
        seen[base] = seen.get(base, 0) + 1
        out.append(base if seen[base] == 1 else f"{base} #{seen[base]}")
    return out


def against_stack(
    copy: Tapped,
    output_names: Sequence[str],
    reference: list[np.ndarray],
    served: list[np.ndarray],
    tolerance_for: Callable[[str], Tolerance],
) -> Localization:
    """The copy's values on a reference stack and on the serving stack, inner values first."""
    return locate(names(copy.taps), list(output_names), reference, served, tolerance_for)


def cell_outputs(cells: Sequence[Tap]) -> list[Tap]:
    """Each cell run's last value (in node order): that cell's output."""
    out = []
    for i, t in enumerate(cells):
        last = i + 1 == len(cells) or cells[i + 1].cell != t.cell
        if t.cell and last:
            out.append(t)
    return out


def against_network(
    copy: Tapped,
    layers: list[dict[str, Any]],
    served: list[np.ndarray],
    tolerance_for: Callable[[str], Tolerance],
) -> Localization:
    """The training network's leaf cells (in the order they ran) against the copy's values of
    the same cells on the serving stack (``served``: what the copy returned)."""
    runs: dict[str, list[Tap]] = {}
    for t in cell_outputs(copy.cells):
        runs.setdefault(t.cell, []).append(t)
    calls: dict[str, int] = {}
    shown, ref, got = [], [], []
    for layer in layers:
        path = str(layer["path"])
        k = calls.get(path, 0)
        calls[path] = k + 1
        if k >= len(runs.get(path, ())):
            continue  # the copy cannot place this cell (fused away, or another scope)
        value = np.asarray(served[runs[path][k].index])
        expected = np.asarray(layer["output"])
        if value.shape != expected.shape:
            continue
        name = f"{path} ({layer['type']})" + (f" #{k + 1}" if k else "")
        shown.append(name)
        ref.append(expected)
        got.append(value)
    if not shown:
        return Localization(
            None, f"{NOT_RUN}no cell of the training network could be placed in the file's graph"
        )
    return locate(shown, [], ref, got, tolerance_for)


def stage(copy: Tapped, tmp: Path) -> Path:
    """The copy as a file for the workers to load (sent to a remote one by its worker)."""
    path = Path(tmp) / f"taps-{hashlib.sha256(copy.data).hexdigest()[:16]}.mindir"
    if not path.exists():
        path.write_bytes(copy.data)
    return path
