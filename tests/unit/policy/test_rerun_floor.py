"""A serving side's rerun lifts the importance-ratio checks' noise floor only where it repeats
itself within the policy's tolerances (auditor.policy.verdict.rerun_floor): Lite 2.0 reading
freed memory gave other probabilities in another process, and its rerun floor excused the
drift it caused (a flaky stacks test, 2026-12-08)."""

from __future__ import annotations

import numpy as np
from auditor.plugins import default_comparators as dc

from auditor.compare.floor import RERUN
from auditor.compare.outputs import Tolerance
from auditor.policy.verdict import rerun_floor

TOL = {"mean": Tolerance(1e-3, 1e-3), "std": Tolerance(1e-3, 1e-3)}
GAUSS = {"kind": "gaussian", "mean": "mean", "std": "std"}


def policy(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.RandomState(seed)
    return {
        "mean": rng.uniform(-1, 1, (64, 2)).astype(np.float32),
        "std": rng.uniform(0.1, 0.3, (64, 2)).astype(np.float32),
    }


def test_a_rerun_within_tolerance_is_the_floor_and_one_beyond_it_is_not() -> None:
    first = policy(0)
    names = ["mean", "std"]
    close = [first["mean"] * np.float32(1 + 1e-5), first["std"]]
    got = rerun_floor(names, [first["mean"], first["std"]], close, TOL)
    assert set(got) == {f"mean{RERUN}", f"std{RERUN}"} and np.array_equal(got[f"mean{RERUN}"], close[0])
    other = [policy(1)["mean"], first["std"]]  # another process, other numbers: wrong, not noisy
    assert rerun_floor(names, [first["mean"], first["std"]], other, TOL) == {}
    assert rerun_floor(names, [first["mean"], first["std"]], None, TOL) == {}  # not rerun
    assert rerun_floor(names, [first["mean"]], other, TOL) == {}  # a side without all its outputs


def test_without_its_floor_a_wrong_rerun_leaves_the_drift_failing() -> None:
    """The oracle of the failure: a serving side whose probabilities moved, with a rerun that
    moved them elsewhere, passes PPO's clip check when that rerun is its floor, and fails it
    without (what rerun_floor now gives the comparator)."""
    train = policy(0)
    served = {"mean": train["mean"] + np.float32(0.5), "std": train["std"]}
    wrong = {f"{k}{RERUN}": v for k, v in policy(1).items()}
    excused = {c.metric: c for c in dc.importance_ratios(train, {**served, **wrong}, dict(GAUSS))}
    assert excused["ppo_clip_share"].passed  # the hole: a large rerun floor lifts the limit
    floor = rerun_floor(["mean", "std"], [served["mean"], served["std"]], list(policy(1).values()), TOL)
    judged = {c.metric: c for c in dc.importance_ratios(train, {**served, **floor}, dict(GAUSS))}
    assert judged["ppo_clip_share"].value > 0 and not judged["ppo_clip_share"].passed
