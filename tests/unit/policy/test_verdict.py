"""The verdict's own rule for a reference that is not the served file's (#54): a golden
recorded for another file makes a difference no evidence about the stacks."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from auditor.compare.golden import Golden
from auditor.compare.outputs import compare_output
from auditor.compare.verdicts import Tolerance
from auditor.policy.verdict import judged
from auditor.results import CONSISTENT, DRIFT, ERROR

BASE = dict(pair="p", train="golden", infer="lite20", probe="policy", probe_version="v", variant="")
OLD, NEW = hashlib.sha256(b"before").hexdigest(), hashlib.sha256(b"after").hexdigest()


def comparison(served: float):
    return compare_output(
        "mean", np.zeros(4, np.float32), np.full(4, served, np.float32), Tolerance(1e-5, 1e-5)
    )


@pytest.mark.faults
def test_a_difference_against_a_golden_of_another_file_is_an_error_not_drift():
    unlike = Golden([], [], meta={"model_sha256": OLD, "stack": "ms210-graph"}).another_file("policy", NEW)
    assert unlike == (
        f"the golden was recorded for another file (sha256 {OLD[:12]}; this one is {NEW[:12]}): what is "
        "measured against it is the two files' difference, not the stacks'; if the model was retrained on "
        "purpose, record it again: auditor golden record policy --stack ms210-graph"
    )
    r = judged(dict(BASE), [comparison(0.5)], [], "", unlike)
    assert r.status == ERROR and r.message.startswith(
        unlike + "; measured: mean: 4/4 elements out of tolerance"
    )
    # the same difference with the golden of this file is the stacks' drift
    assert judged(dict(BASE), [comparison(0.5)], [], "", None).status == DRIFT
    # outputs that still agree pass, the golden's file said
    r = judged(dict(BASE), [comparison(0.0)], [], "", unlike)
    assert r.status == CONSISTENT and r.message == f"all outputs within tolerance ({unlike})"


def test_a_golden_of_this_file_or_of_no_named_file_is_not_another():
    assert Golden([], [], meta={"model_sha256": NEW}).another_file("policy", NEW) is None
    assert Golden([], [], meta={}).another_file("policy", NEW) is None
