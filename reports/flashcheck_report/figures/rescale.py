"""rescale: FA4's selective rescaling threshold tau swept. Left: rescales per query row (a rescale
is counted when a key tile raises the running max by at least tau); the dotted line is one rescale
at every key tile after the first, the most there can be. Right: the forward's O error against the
oracle per storage format, with the same-format baseline."""

from ..records import number
from ..style import BASELINE_COLOR, BASELINE_LABEL, FORMATS, Figure, finish_panel, ordered, panel_grid, plain_ticks, save, subject_color
from .common import baseline_curve, series, subject_metric

INPUT_STYLE = ("-", "--", ":", "-.")


def draw(records, out_dir):
    records = [r for r in records if "tensors" in r]
    formats = ordered((r["dtype"] for r in records), FORMATS)
    inputs = sorted({r["inputs"] for r in records})
    style = {name: INPUT_STYLE[i % len(INPUT_STYLE)] for i, name in enumerate(inputs)}
    fig, axes = panel_grid(1, 1 + len(formats))
    table = []
    ax = axes[0][0]
    count_format = formats[0] if formats else None
    tiles = set()
    for (subject, inp), points in sorted(series([r for r in records if r["dtype"] == count_format],
                                                lambda r: (r["subject"], r["inputs"])).items()):
        xs = [x for x, _ in points]
        ys = [number(r["rescales_per_row"]) for _, r in points]
        tiles.update(number(r["key_tiles"]) for _, r in points)
        ax.plot(xs, ys, style[inp], marker="o", markersize=3, color=subject_color(subject), label=f"{subject}, inputs {inp}")
        table.append({"subject": subject, "inputs": inp, "format": count_format,
                      "rescales/row at tau=0": ys[0], "rescales/row at largest tau": ys[-1], "largest tau": xs[-1]})
    for t in sorted(tiles):
        ax.axhline(t - 1, ls=":", color="#555555", lw=1.0, label=f"every tile after the first ({t:g} tiles)")
    ax.set_xlabel("threshold tau (log2 units)")
    ax.set_ylabel("rescales per query row")
    ax.set_title(f"rescale count ({count_format})", fontsize=10)
    for k, fmt in enumerate(formats, start=1):
        ax = axes[0][k]
        cell = [r for r in records if r["dtype"] == fmt]
        for (subject, inp), points in sorted(series(cell, lambda r: (r["subject"], r["inputs"])).items()):
            xs = [x for x, _ in points]
            ys = [subject_metric(r, "max_norm", "O") for _, r in points]
            ax.plot(xs, ys, style[inp], marker="o", markersize=3, color=subject_color(subject), label=f"{subject}, {inp}")
        for inp in inputs:
            bx, by = baseline_curve([r for r in cell if r["inputs"] == inp], "max_norm")
            if bx:
                ax.plot(bx, by, style[inp], lw=1.6, color=BASELINE_COLOR, alpha=0.7, label=f"{BASELINE_LABEL}, {inp}")
        ax.set_yscale("log")
        plain_ticks(ax)
        ax.set_xlabel("threshold tau (log2 units)")
        ax.set_ylabel("max |error| / max |O| (units of u)")
        ax.set_title(f"fwd O error, {fmt}", fontsize=10)
    for a in axes[0]:
        finish_panel(a)
    title = "FA4 selective rescaling: threshold tau vs rescale count and error"
    fig.suptitle(title, fontsize=12)
    fig.tight_layout()
    figure = Figure(name="rescale", experiment="rescale", title=title, table=table,
                    caption="tau = 0 is FA2 (rescale whenever the running max grows). Raising tau skips rescales while the "
                            "exponentials stay below 2^tau; the error should stay at the tau = 0 level, since the skipped "
                            "rescale only changes which power of two the sums are kept against. fp16 stops at tau = 15 "
                            "(P up to 2^tau must fit below 65504).")
    figure.findings = [f"{row['subject']} ({row['inputs']}): {row['rescales/row at tau=0']:.2f} rescales per row at tau = 0, "
                       f"{row['rescales/row at largest tau']:.2f} at tau = {row['largest tau']:g}" for row in table]
    return [save(fig, out_dir, figure)]
