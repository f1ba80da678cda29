"""Localizing a drifting model without stacks: the training network's leaf cells placed in the
tapped file's graph, a cell run twice, a cell the file cannot place. The real stacks:
tests/stacks/test_model_probe_stacks.py (LayerNorm on lite20, the tanh head on the sweep)."""

from __future__ import annotations

import numpy as np

from auditor.compare.verdicts import Tolerance
from auditor.policy import taps as model_localize
from auditor.worker.mindir_taps import Tap


def cells() -> model_localize.Tapped:
    """A file returning (head, value); its nodes: l1 (MatMul, BiasAdd), act, l2 (MatMul,
    BiasAdd), act again, head (an output), a top-level Exp, value (an output)."""
    order = [
        Tap("a", "MatMul", "l1", "Dense", 2),
        Tap("b", "BiasAdd", "l1", "Dense", 3),
        Tap("c", "Elu", "act", "ELU", 4),
        Tap("d", "MatMul", "l2", "Dense", 5),
        Tap("e", "BiasAdd", "l2", "Dense", 6),
        Tap("f", "Elu", "act", "ELU", 7),
        Tap("g", "Tanh", "head", "Tanh", 0),
        Tap("h", "Exp", "", "", 8),
        Tap("i", "BiasAdd", "value", "Dense", 1),
    ]
    inner = sorted((t for t in order if t.index >= 2), key=lambda t: t.index)
    return model_localize.Tapped(b"", inner, order)


def test_each_leaf_cell_is_compared_with_its_runs_last_value() -> None:
    x = {n: np.full((2, 3), float(i)) for i, n in enumerate("abcdefghi")}
    served = [x["g"], x["i"], x["a"], x["b"], x["c"], x["d"], x["e"], x["f"], x["h"]]
    layers = [
        {"path": "l1", "type": "Dense", "output": x["b"]},
        {"path": "act", "type": "ELU", "output": x["c"]},
        {"path": "l2", "type": "Dense", "output": x["e"]},
        {"path": "act", "type": "ELU", "output": x["f"] + 1e-3},  # the second ELU call drifts
        {"path": "head", "type": "Tanh", "output": x["g"] + 1.0},
        {"path": "value", "type": "Dense", "output": x["i"]},
        {"path": "unplaced", "type": "Dropout", "output": x["a"]},
    ]
    loc = model_localize.against_network(cells(), layers, served, lambda _: Tolerance(1e-5, 1e-5))
    assert loc.layer == "act (ELU) #2"
    assert [r.layer for r in loc.layers] == [
        "l1 (Dense)",
        "act (ELU)",
        "l2 (Dense)",
        "act (ELU) #2",
        "head (Tanh)",
        "value (Dense)",
    ]
    assert loc.message.startswith("first divergent: layer act (ELU) #2, 6/6 elements out of tolerance")
    assert "l1 (Dense), act (ELU), l2 (Dense) within tolerance" in loc.message


def test_nothing_placed_is_said() -> None:
    layers = [{"path": "other", "type": "Dense", "output": np.zeros(2)}]
    loc = model_localize.against_network(cells(), layers, [np.zeros(2)] * 9, lambda _: Tolerance())
    assert loc.layer is None and loc.message.startswith("localization not run: no cell of the training")


def test_names_number_a_cell_run_again() -> None:
    taps = [Tap("a", "Elu", "act", "ELU"), Tap("b", "Elu", "act", "ELU"), Tap("c", "Exp", "", "")]
    assert model_localize.names(taps) == [
        "act (Elu)" if False else "act (ELU: Elu)",
        "act (ELU: Elu) #2",
        "(top level) (Exp)",
    ]
