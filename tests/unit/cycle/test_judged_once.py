"""A fleet's identical serving sides are judged once per cycle (auditor.cycle.serving): the key
a verdict is shared under holds everything the verdict reads, and nothing that names a host."""

from __future__ import annotations

import numpy as np

from auditor.cycle.serving import _judge_key
from auditor.policy.side import Behaviour, Side
from auditor.policy.verdict import Settings
from auditor.stacks.worker import WorkerError


class FakeAudit:
    key = "ms20/ppo_policy/fp32"

    def __init__(self, trainers: dict[str, str]):
        self.trainers = trainers

    def settings(self, target: str) -> Settings:
        return Settings({}, {"importance_ratios": {"trainer": self.trainers.get(target, "ppo")}})


def side(scale: float = 1.0, **extra) -> Side:
    outputs = [np.arange(6, dtype=np.float32).reshape(3, 2) * scale, np.ones(3, np.float32)]
    classes = {"sweep": [np.linspace(-1, 1, 4, dtype=np.float32) * scale]}
    return Side(outputs=outputs, classes=classes, **extra)


def test_identical_sides_share_a_key_and_any_difference_splits_it():
    audit = FakeAudit({})
    a, b = _judge_key(audit, "lite20@infer-01", side()), _judge_key(audit, "lite20@infer-02", side())
    assert a is not None and a == b  # no host's name in it
    assert _judge_key(audit, "lite20@infer-02", side(scale=1.0000001)) != a  # one output's bits
    moved = side()
    moved.classes["sweep"][0][1] = np.nextafter(moved.classes["sweep"][0][1], np.float32(9))
    assert _judge_key(audit, "x", moved) != a  # one class output's bits
    drawn = side(behaviour=Behaviour("logp@behaviour", [], np.zeros((4, 3)), np.zeros((4, 3))))
    other = side(behaviour=Behaviour("logp@behaviour", [], np.zeros((4, 3)), np.full((4, 3), 1e-9)))
    assert _judge_key(audit, "x", drawn) not in (a, _judge_key(audit, "x", other))
    rerun = side(rerun=[np.zeros(3, np.float32)], rerun_words="a cold process")
    assert _judge_key(audit, "x", rerun) != a


def test_a_pairs_own_trainer_splits_the_key():
    audit = FakeAudit({"lite20@infer-02": "verl_geo_rs"})
    assert _judge_key(audit, "lite20@infer-01", side()) != _judge_key(audit, "lite20@infer-02", side())


def test_a_side_whose_verdict_names_it_is_judged_on_its_own():
    audit = FakeAudit({})
    failed = WorkerError("lite20", "run", "crash", "the process died")
    assert _judge_key(audit, "x", Side()) is None  # it did not run
    assert _judge_key(audit, "x", side(error=failed)) is None
    assert _judge_key(audit, "x", side(class_errors={"nan-inf": "the runtime failed on NaN"})) is None
    assert _judge_key(audit, "x", side(rerun=failed)) is None
