"""rounding: round-to-nearest against stochastic rounding.

Top row, long accumulations (a running sum stored in the format after every addition): the relative
error of the sum in units of the format's unit roundoff u, against the number of terms n. RN's error
on a sum of equal terms is systematic (every addition rounds the same way), so it grows like n
(slope about 1), SR's errors are unbiased and independent, so they grow like sqrt(n) (slope about
1/2). Bottom row, a flash subject's stored outputs with RN and with SR: the error level and the bias
(mean signed error over RMS error)."""

import math
from collections import defaultdict

from ..fit import loglog_slope
from ..records import number
from ..style import FORMATS, Figure, finish_panel, ordered, panel_grid, plain_ticks, rank, save
from .common import series, subject_metric, x_of

FORMAT_COLOR = {"bf16": "#d62728", "fp16": "#1f77b4", "fp32": "#2ca02c", "fp64": "#7f7f7f"}
ROUNDING_STYLE = {"rn": "-", "sr": "--"}
ROUNDING_NAME = {"rn": "RN", "sr": "SR"}


def _rounding_of(r):
    if "rounding" in r:
        return r["rounding"]
    return "sr" if "round=sr" in r.get("policy", "") else "rn"


def _accumulation_panel(ax, records, terms, table):
    chosen = [r for r in records if r.get("terms") == terms]
    for (fmt, rnd), points in sorted(series(chosen, lambda r: (r["dtype"], _rounding_of(r))).items(),
                                     key=lambda kv: (rank(kv[0][0], FORMATS), kv[0][1])):
        u = number(points[0][1]["unit_roundoff"])
        xs = [x for x, _ in points]
        ys = [number(r["metrics"]["rms_rel"]) / u for _, r in points]
        slope = loglog_slope(xs, ys)
        label = f"{fmt} {ROUNDING_NAME[rnd]}" + (f"  slope {slope:.2f}" if slope is not None else "")
        ax.plot(xs, ys, ROUNDING_STYLE[rnd], marker="o", markersize=3, color=FORMAT_COLOR.get(fmt, "k"), label=label)
        table.append({"part": "accumulation", "terms": terms, "format": fmt, "rounding": ROUNDING_NAME[rnd],
                      "n max": xs[-1], "rms rel error / u at n max": ys[-1], "slope": slope})
    if chosen:
        ns = sorted({x_of(r) for r in chosen})
        ax.plot(ns, [n - 1 for n in ns], ":", color="#555555", lw=1.2, label="(n-1) u: the worst case, first order")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("number of terms n")
    ax.set_ylabel("RMS relative error of the sum / u")
    ax.set_title(f"running sum of {'n equal terms' if terms == 'constant' else 'n terms ~ U[0, 1)'}", fontsize=10)


def _bias_panel(ax, records, table):
    """Bias where RN has one: increments below half an ulp added to 1 are all lost (stagnation)."""
    chosen = [r for r in records if r.get("terms") == "increments"]
    for (fmt, rnd), points in sorted(series(chosen, lambda r: (r["dtype"], _rounding_of(r))).items(),
                                     key=lambda kv: (rank(kv[0][0], FORMATS), kv[0][1])):
        u = number(points[0][1]["unit_roundoff"])
        xs = [x for x, _ in points]
        ys = [number(r["metrics"]["mean_signed_rel"]) / u for _, r in points]
        ax.plot(xs, ys, ROUNDING_STYLE[rnd], marker="o", markersize=3, color=FORMAT_COLOR.get(fmt, "k"), label=f"{fmt} {ROUNDING_NAME[rnd]}")
        last = points[-1][1]
        # the standard error of that mean over the trials: a mean within ~2 of them is no evidence of bias
        stderr = number(last["metrics"]["rms_rel"]) / u / math.sqrt(number(last.get("trials", 1)))
        table.append({"part": "bias", "terms": "increments", "format": fmt, "rounding": ROUNDING_NAME[rnd],
                      "n max": xs[-1], "mean signed rel error / u at n max": ys[-1], "standard error / u": stderr})
    if chosen:
        ns = sorted({x_of(r) for r in chosen})
        ax.plot(ns, [-n / 2 for n in ns], ":", color="#555555", lw=1.2, label="-n/2: every increment lost")
    ax.axhline(0, color="black", lw=0.8)
    ax.set_xscale("log", base=2)
    ax.set_yscale("symlog", linthresh=1)
    ax.set_xlabel("number of increments n")
    ax.set_ylabel("mean signed relative error / u (symlog)")
    ax.set_title("bias: 1 + n increments ~ U[0, u)", fontsize=10)


def _outputs_panels(ax_err, ax_bias, records, op, table):
    chosen = [r for r in records if r["op"] == op and "tensors" in r]
    tensor = None
    for (subject, fmt, rnd), points in sorted(series(chosen, lambda r: (r["subject"], r["dtype"], _rounding_of(r))).items()):
        tensor = tensor or {"fwd": "O", "bwd": "dQ"}.get(op)
        xs = [x for x, _ in points]
        rms = [subject_metric(r, "rms_norm") for _, r in points]
        bias = [subject_metric(r, "mean_signed") / max(subject_metric(r, "rms"), 1e-300) for _, r in points]
        color = FORMAT_COLOR.get(fmt, "k")
        ax_err.plot(xs, rms, ROUNDING_STYLE[rnd], marker="o", markersize=3, color=color, label=f"{subject} {fmt} {ROUNDING_NAME[rnd]}")
        ax_bias.plot(xs, bias, ROUNDING_STYLE[rnd], marker="o" if op == "fwd" else "s", markersize=3, color=color,
                     label=f"{op} {tensor}, {fmt} {ROUNDING_NAME[rnd]}")
        table.append({"part": "outputs", "subject": subject, "op": op, "tensor": tensor, "format": fmt, "rounding": ROUNDING_NAME[rnd],
                      "N max": xs[-1], "rms / rms ref / u at N max": rms[-1], "mean signed / rms at N max": bias[-1]})
    ax_err.set_xscale("log", base=2)
    ax_err.set_yscale("log")
    plain_ticks(ax_err, [x_of(r) for r in chosen])
    ax_err.set_xlabel("sequence length N")
    ax_err.set_ylabel(f"RMS error / RMS {tensor or '?'} (units of u)")
    ax_err.set_title(f"stored outputs: {op} {tensor or ''}, RN vs SR", fontsize=10)


def draw(records, out_dir):
    accumulation = [r for r in records if r.get("part") == "accumulation"]
    outputs = [r for r in records if r.get("part") == "outputs"]
    fig, axes = panel_grid(2, 3)
    table = []
    _accumulation_panel(axes[0][0], accumulation, "constant", table)
    _accumulation_panel(axes[0][1], accumulation, "uniform", table)
    _bias_panel(axes[0][2], accumulation, table)
    _outputs_panels(axes[1][0], axes[1][2], outputs, "fwd", table)
    _outputs_panels(axes[1][1], axes[1][2], outputs, "bwd", table)
    ax = axes[1][2]
    ax.axhline(0, color="black", lw=0.8)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("sequence length N")
    ax.set_ylabel("mean signed error / RMS error")
    ax.set_title("bias of the stored outputs (o: fwd O, s: bwd dQ)", fontsize=10)
    for row in axes:
        for a in row:
            finish_panel(a)
    title = "Round-to-nearest vs stochastic rounding"
    fig.suptitle(title, fontsize=12)
    fig.tight_layout()
    figure = Figure(name="rounding", experiment="rounding", title=title, table=table,
                    caption="Top: a running sum stored in the format after each addition, error in units of u, log-log with "
                            "fitted slopes; the dotted line is the first-order worst case (n-1)u. RN's error on equal terms "
                            "grows like n (slope ~1), SR's like sqrt(n) (slope ~1/2). Right: increments below half an ulp are all "
                            "lost by RN (bias -n/2 u), while SR keeps their expected value (bias ~0). Bottom: a flash "
                            "subject's stored outputs (O, dQ) with RN and SR: the error level (SR's rounding error has the "
                            "larger variance) and the mean signed error over the RMS error, which is near 0 when the rounding "
                            "leaves no sign bias in the outputs.")
    figure.findings = _findings(table)
    return [save(fig, out_dir, figure)]


def _findings(table):
    lines = []
    slopes = defaultdict(dict)
    for row in table:
        if row.get("part") == "accumulation" and row["terms"] == "constant" and row["slope"] is not None:
            slopes[row["format"]][row["rounding"]] = row["slope"]
    for fmt in ordered(slopes, FORMATS):
        s = slopes[fmt]
        lines.append(f"{fmt}, n equal terms: RMS error grows as n^{s.get('RN', math.nan):.2f} with RN, n^{s.get('SR', math.nan):.2f} with SR")
    bias = defaultdict(dict)
    for row in table:
        if row.get("part") == "bias":
            bias[row["format"]][row["rounding"]] = (row["n max"], row["mean signed rel error / u at n max"], row["standard error / u"])
    for fmt in ordered(bias, FORMATS):
        b = bias[fmt]
        if "RN" in b and "SR" in b:
            lines.append(f"{fmt}, 1 + {b['RN'][0]:g} increments below half an ulp: bias {b['RN'][1]:.3g} u with RN, "
                         f"{b['SR'][1]:.3g} u with SR ({b['SR'][1] / b['SR'][2]:+.1f} standard errors of the mean)")
    return lines
