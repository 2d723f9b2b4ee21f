"""The log-log slope the figures annotate."""

import math

import pytest

from flashcheck_report.fit import loglog_slope


def test_power_laws_give_their_exponent():
    xs = [64, 100, 256, 400, 1024]
    assert loglog_slope(xs, [3 * x**2 for x in xs]) == pytest.approx(2.0, abs=1e-12)
    assert loglog_slope(xs, [0.1 * x**0.5 for x in xs]) == pytest.approx(0.5, abs=1e-12)
    assert loglog_slope(xs, [7.0] * len(xs)) == pytest.approx(0.0, abs=1e-12)


def test_points_that_cannot_sit_on_log_axes_are_left_out():
    xs = [1, 2, 4, 8, 16]
    ys = [0.0, 2.0, 4.0, math.inf, 16.0]  # zero and Inf dropped; the rest is y = x
    assert loglog_slope(xs, ys) == pytest.approx(1.0, abs=1e-12)


def test_too_few_points_give_no_slope():
    assert loglog_slope([4], [1.0]) is None
    assert loglog_slope([4, 4], [1.0, 2.0]) is None
    assert loglog_slope([1, 2], [0.0, 0.0]) is None
