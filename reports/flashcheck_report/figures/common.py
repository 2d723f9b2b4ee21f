"""Reading the error records of the sweeps: which tensor, which metric, grouped for plotting."""

from collections import defaultdict

import numpy as np

from ..records import number
from ..style import HEADLINE_TENSOR


def x_of(r):
    return number(r["x"]["value"])


def headline(r):
    """The record's headline tensor (HEADLINE_TENSOR by op, else its first tensor), or None."""
    tensors = r.get("tensors") or {}
    name = HEADLINE_TENSOR.get(r["op"])
    if name in tensors:
        return name
    return next(iter(sorted(tensors)), None)


UNIT_ROUNDOFF = {"e4m3": 2.0**-4, "bf16": 2.0**-8, "fp16": 2.0**-11, "fp32": 2.0**-24, "fp64": 2.0**-53}
# Normwise errors in units of the tensor format's unit roundoff u: the size of the error relative to
# the size of the result, comparable across N, inputs and formats (an absolute error shrinks with N
# only because O's entries do: O averages N values).
NORMWISE = {"max_norm": ("max_abs", "reference_max_abs"), "rms_norm": ("rms", "reference_rms")}


def _metric(t, side, metric):
    m = t[side]
    if metric in NORMWISE:
        error, size = NORMWISE[metric]
        if size not in m or number(m[size]) == 0:
            return None
        return number(m[error]) / number(m[size]) / UNIT_ROUNDOFF[t["format"]]
    return number(m[metric])


def _tensor(r, tensor):
    """The record's metrics of `tensor` (default: the headline), or None for a record without them (a
    case the subject failed with an error has no tensors; the page lists it among the failures)."""
    tensors = r.get("tensors") or {}
    return tensors.get(tensor or headline(r))


def subject_metric(r, metric, tensor=None):
    t = _tensor(r, tensor)
    if t is None:
        return None
    if metric == "ratio":
        return number(t["ratio"])
    return _metric(t, "subject", metric)


def baseline_metric(r, metric, tensor=None):
    t = _tensor(r, tensor)
    if t is None or not t.get("baseline_usable", True):
        return None
    return _metric(t, "baseline", metric)


def series(records, key):
    """records grouped by key(r), each group sorted by x: {group: [(x, record), ...]}."""
    groups = defaultdict(list)
    for r in records:
        groups[key(r)].append((x_of(r), r))
    return {k: sorted(v, key=lambda p: p[0]) for k, v in groups.items()}


def baseline_curve(records, metric):
    """The same-format baseline along x: the median over the subjects measured on that case (they
    share case and seed, so the values agree; the median keeps one odd record from moving it)."""
    at = defaultdict(list)
    for r in records:
        b = baseline_metric(r, metric)
        if b is not None:
            at[x_of(r)].append(b)
    xs = sorted(at)
    return xs, [float(np.median(at[x])) for x in xs]
