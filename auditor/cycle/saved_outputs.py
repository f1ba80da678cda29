"""``audit --save-outputs DIR``: each side's outputs of every probe variant (and model) a
cycle compared, written as golden-format ``.npz`` files (auditor.compare.golden: the inputs,
the outputs and a ``meta`` naming the probe, variant, pair, side and stack), so that
``auditor compare A.npz B.npz`` can compare them again later, alone, with the probe's metrics
and thresholds (Polygraphy's ``--save-outputs`` / ``--load-outputs``).

Layout: ``DIR/<pair>/<probe>.<variant>.<side>.npz`` with the pair's ``->`` written ``__``
(``DIR/ms20__lite20/ppo_policy.fp16.infer.npz``); a model's sides are ``reference`` (its
reference stack or golden) and ``infer``. Only sides that ran are written.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from auditor.compare.golden import write_golden

SAFE = re.compile(r"[^A-Za-z0-9_.:+=-]")


def side_path(root: Path, pair: str, probe: str, variant: str, side: str) -> Path:
    folder = SAFE.sub("_", pair.replace("->", "__"))
    return root / folder / SAFE.sub("_", f"{probe}.{variant}.{side}.npz")


def write_side(
    root: Path,
    *,
    pair: str,
    probe: str,
    variant: str,
    side: str,
    stack: str,
    inputs: Sequence[np.ndarray],
    input_names: Sequence[str],
    outputs: Sequence[np.ndarray],
    output_names: Sequence[str],
    **meta: Any,
) -> Path:
    """One side's outputs of one result (the inputs they were computed from with them)."""
    path = side_path(root, pair, probe, variant, side)
    path.parent.mkdir(parents=True, exist_ok=True)
    names = list(output_names)[: len(outputs)]
    names += [f"output{i}" for i in range(len(names), len(outputs))]
    in_names = list(input_names)[: len(inputs)]
    in_names += [f"input{i}" for i in range(len(in_names), len(inputs))]
    return write_golden(
        path,
        [np.asarray(x) for x in inputs],
        [np.asarray(y) for y in outputs],
        in_names,
        names,
        probe=probe,
        variant=variant,
        pair=pair,
        side=side,
        stack=stack,
        **meta,
    )
