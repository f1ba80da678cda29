"""The precision search's bisection against an oracle that knows the answer: a policy that
passes exactly when the cells kept in float32 include one contiguous run (no stack runs)."""

from __future__ import annotations

import itertools
import math

import pytest

from auditor.fix.search import Trial, max_candidates, search


def oracle(cells: tuple[str, ...], lo: int, hi: int, calls: list[tuple[str, ...]]):  # noqa: ANN201
    needed = set(cells[lo:hi])

    def judge(keep: tuple[str, ...]) -> Trial:
        calls.append(keep)
        return Trial(keep, needed <= set(keep), score=len(needed - set(keep)))

    return judge


@pytest.mark.parametrize("n", range(1, 10))
def test_finds_the_run_that_must_stay_in_float32_within_the_bound(n: int) -> None:
    cells = tuple(f"c{i}" for i in range(n))
    for lo, hi in itertools.combinations(range(n + 1), 2):
        for start in range(n):
            calls: list[tuple[str, ...]] = []
            got = search(cells, start, oracle(cells, lo, hi, calls))
            assert got.found == cells[lo:hi], (lo, hi, start, calls)
            assert len(calls) == len(set(calls)) == len(got.trials)  # each candidate exported once
            assert len(calls) <= 2 * math.ceil(math.log2(n)) + 2 if n > 1 else len(calls) <= 2
            assert calls[0] == ()  # nothing kept comes first: the cast alone may be the fix


def test_a_policy_that_passes_cast_whole_costs_one_export() -> None:
    calls: list[tuple[str, ...]] = []
    got = search(("a", "b", "c"), 2, lambda keep: calls.append(keep) or Trial(keep, True))
    assert got.found == () and calls == [()]


def test_no_subset_passes_and_the_closest_candidate_is_named() -> None:
    cells = ("fc0", "fc1", "head", "")

    def judge(keep: tuple[str, ...]) -> Trial:
        return Trial(keep, False, score=10 - len(keep) + (5 if keep == cells else 0))

    got = search(cells, 2, judge)
    assert got.found is None
    assert len(got.trials) <= max_candidates(4) == 6
    assert cells in [t.keep for t in got.trials]  # every cell kept was tried before giving up
    assert got.closest is not None and got.closest.score == min(t.score for t in got.trials)
    assert got.closest.keep != cells


def test_start_out_of_range_is_clamped() -> None:
    cells = ("a", "b")
    calls: list[tuple[str, ...]] = []
    assert search(cells, 7, oracle(cells, 0, 1, calls)).found == ("a",)
