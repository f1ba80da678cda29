"""The benches' summary of per-round ratios (bench/bench_stats.py)."""

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))

from bench_stats import geomean_interval  # noqa: E402


def test_a_steady_shift_is_found_and_pinned():
    mean, lo, hi = geomean_interval([1.2, 1.2, 1.2, 1.2])
    assert mean == pytest.approx(1.2) and lo == pytest.approx(1.2) and hi == pytest.approx(1.2)


def test_the_mean_is_geometric_so_halving_and_doubling_cancel():
    mean, lo, hi = geomean_interval([0.5, 2.0, 0.5, 2.0])
    assert mean == pytest.approx(1.0)
    # two standard errors of the mean of the logs: stdev ln2*2/sqrt(3), over sqrt(4)
    half = 2 * (math.log(2) * 2 / math.sqrt(3)) / 2
    assert lo == pytest.approx(math.exp(-half)) and hi == pytest.approx(math.exp(half))


def test_one_round_has_no_interval():
    assert geomean_interval([1.3]) == pytest.approx((1.3, 1.3, 1.3))
