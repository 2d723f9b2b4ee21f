"""Least-squares slopes on log-log axes."""

import math

import numpy as np


def loglog_slope(xs, ys):
    """The slope b of log y = a + b log x over the points with x, y > 0 and finite; None with fewer
    than two such points or a single x."""
    pts = [(x, y) for x, y in zip(xs, ys) if x > 0 and y > 0 and math.isfinite(x) and math.isfinite(y)]
    if len(pts) < 2 or len({x for x, _ in pts}) < 2:
        return None
    lx = np.log([x for x, _ in pts])
    ly = np.log([y for _, y in pts])
    slope, _ = np.polyfit(lx, ly, 1)
    return float(slope)
