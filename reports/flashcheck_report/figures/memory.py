"""memory-scaling: peak memory of fwd, fwd+bwd and the full Hessian-vector product (fwd, bwd and the
double backward) against N, inputs excluded, log-log with the fitted exponent per subject; grey guides
of slope 1 (linear, what flash algorithms promise) and 2 (quadratic, plain attention's N x N)."""

from ..fit import loglog_slope
from ..records import number
from ..style import Figure, finish_panel, ordered, panel_grid, plain_ticks, save, subject_color
from .common import series, x_of

OP_ORDER = ("fwd", "fwd+bwd", "hvp")
OP_TITLE = {"fwd": "forward", "fwd+bwd": "forward + backward", "hvp": "Hessian-vector product (fwd, bwd, bwdbwd)"}


def draw(records, out_dir):
    ops = ordered((r["op"] for r in records), OP_ORDER)
    fig, axes = panel_grid(1, len(ops), width=4.6, height=3.6)
    table = []
    for k, op in enumerate(ops):
        ax = axes[0][k]
        cell = [r for r in records if r["op"] == op]
        lowest = None
        for subject, points in sorted(series(cell, lambda r: r["subject"]).items()):
            xs = [x for x, _ in points]
            ys = [number(r["metrics"]["peak_bytes"]) / 2**20 for _, r in points]
            slope = loglog_slope(xs, ys)
            ax.plot(xs, ys, marker="o", markersize=3, color=subject_color(subject),
                    label=subject + (f"  exponent {slope:.2f}" if slope is not None else ""))
            # the local exponent of the two largest N: plain attention's N^2 term dominates only at large N
            local = loglog_slope(xs[-2:], ys[-2:]) if len(xs) >= 2 else None
            table.append({"op": op, "subject": subject, "N max": xs[-1], "peak MiB at N max": ys[-1], "exponent": slope,
                          "exponent, two largest N": local})
            if lowest is None or ys[0] < lowest[1]:
                lowest = (xs[0], ys[0])
        if lowest:
            x0, y0 = lowest
            xs = sorted({x_of(r) for r in cell})
            ax.plot(xs, [y0 * (x / x0) for x in xs], ":", color="#888888", lw=1.0, label="slope 1 (linear)")
            ax.plot(xs, [y0 * (x / x0) ** 2 for x in xs], "--", color="#888888", lw=1.0, label="slope 2 (quadratic)")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        plain_ticks(ax, [x_of(r) for r in cell])
        ax.set_xlabel("sequence length N (= Nq = Nk)")
        ax.set_ylabel("peak memory beyond inputs (MiB)")
        ax.set_title(OP_TITLE.get(op, op), fontsize=10)
        finish_panel(ax, legend_loc="upper left")
    method = next((r.get("method") for r in records if r.get("method")), "")
    title = "Peak memory vs sequence length"
    fig.suptitle(title, fontsize=12)
    fig.tight_layout()
    figure = Figure(name="memory-scaling", experiment="memory-scaling", title=title, table=table,
                    caption="Peak bytes allocated during the operation, inputs excluded (" + method + "), log-log with the "
                            "fitted exponent: about 1 for the flash subjects (O(N) statistics and outputs), about 2 for "
                            "plain attention, which materialises the N x N scores and probabilities.")
    figure.findings = [f"{op}: " + ", ".join(f"{row['subject']} N^{row['exponent']:.2f} (N^{row['exponent, two largest N']:.2f} "
                                            f"between the two largest N)" for row in table
                                            if row["op"] == op and row["exponent"] is not None and row["exponent, two largest N"] is not None)
                       for op in ops]
    return [save(fig, out_dir, figure)]
