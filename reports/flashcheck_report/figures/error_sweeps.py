"""error-vs-seqlen, error-vs-flatness, error-vs-outliers: the headline tensor's error against the
oracle along the swept parameter, one panel per op (rows) and storage format (columns), every
subject in its colour and the same-format baseline (plain attention computed in the storage format)
in black dashes beside them."""

from ..fit import loglog_slope
from ..style import BASELINE_COLOR, BASELINE_LABEL, FORMATS, OPS, Figure, finish_panel, ordered, panel_grid, plain_ticks, save, subject_color
from .common import baseline_curve, headline, series, subject_metric, x_of

METRIC_LABEL = {
    "max_norm": "max |error| / max |ref|",
    "rms_norm": "RMS error / RMS ref",
    "ratio": "error / baseline error",
}


def _panels(records):
    ops = ordered((r["op"] for r in records), OPS)
    formats = ordered((r["dtype"] for r in records), FORMATS)
    return ops, formats


def _sweep_figure(records, out_dir, *, experiment, name, metric, xlabel, xscale, title, caption, fit_slopes, baseline=True):
    ops, formats = _panels(records)
    fig, axes = panel_grid(len(ops), len(formats), sharex=True)
    table = []
    for i, op in enumerate(ops):
        for j, fmt in enumerate(formats):
            ax = axes[i][j]
            cell = [r for r in records if r["op"] == op and r["dtype"] == fmt]
            tensor = headline(cell[0]) if cell else "?"
            for subject, points in sorted(series(cell, lambda r: r["subject"]).items()):
                xs = [x for x, _ in points]
                points = [(x, r) for x, r in points if subject_metric(r, metric) is not None]
                if not points:
                    continue
                ys = [subject_metric(r, metric) for _, r in points]
                label = subject
                slope = loglog_slope(xs, ys) if fit_slopes else None
                if slope is not None:
                    label += f"  slope {slope:.2f}"
                ax.plot(xs, ys, marker="o", markersize=3, lw=1.3, color=subject_color(subject), label=label)
                table.append({"op": op, "format": fmt, "tensor": tensor, "subject": subject,
                              f"{metric} at largest x": ys[-1], "slope": slope})
            if baseline and metric != "ratio":
                bx, by = baseline_curve(cell, metric)
                if bx:
                    slope = loglog_slope(bx, by) if fit_slopes else None
                    label = BASELINE_LABEL + (f"  slope {slope:.2f}" if slope is not None else "")
                    ax.plot(bx, by, ls="--", lw=1.6, color=BASELINE_COLOR, label=label)
                    table.append({"op": op, "format": fmt, "tensor": tensor, "subject": BASELINE_LABEL,
                                  f"{metric} at largest x": by[-1], "slope": slope})
            if metric == "ratio":
                ax.axhline(1.0, ls="--", lw=1.2, color=BASELINE_COLOR, label="= baseline")
                rho = next((r.get("rho") for r in cell if "rho" in r), None)
                if rho:
                    ax.axhline(rho, ls=":", lw=1.2, color="#c00000", label=f"pass limit rho = {rho:g}")
            if xscale == "symlog":
                ax.set_xscale("symlog", linthresh=1e-4)  # the smallest nonzero outlier rate swept
            else:
                ax.set_xscale(xscale)
            ax.set_yscale("log")
            plain_ticks(ax, [x_of(r) for r in cell])
            ax.set_title(f"{op} {tensor}, {fmt}", fontsize=10)
            finish_panel(ax)
            if j == 0:
                ax.set_ylabel(f"{METRIC_LABEL[metric]} (units of u)" if metric != "ratio" else METRIC_LABEL[metric])
            if i == len(ops) - 1:
                ax.set_xlabel(xlabel)
    fig.suptitle(title, fontsize=12)
    fig.tight_layout()
    figure = Figure(name=name, experiment=experiment, title=title, caption=caption, table=table)
    return save(fig, out_dir, figure)


def _worst_ratio_finding(records, what):
    worst = max(records, key=lambda r: subject_metric(r, "ratio"), default=None)
    if worst is None:
        return []
    t = headline(worst)
    return [f"{what}: largest {t} error / baseline error {subject_metric(worst, 'ratio'):.3g} "
            f"({worst['subject']} {worst['op']} {worst['dtype']} {worst['x']['name']}={worst['x']['value']:g})"]


def _slope_findings(figure, metric):
    """The spread of fitted slopes per format for subjects and baseline."""
    lines = []
    for fmt in FORMATS:
        rows = [r for r in figure.table if r["format"] == fmt and r["slope"] is not None]
        if not rows:
            continue
        subj = [r["slope"] for r in rows if r["subject"] != BASELINE_LABEL]
        base = [r["slope"] for r in rows if r["subject"] == BASELINE_LABEL]
        text = f"{fmt}: {METRIC_LABEL[metric]} grows as N^{min(subj):.2f}..N^{max(subj):.2f} for the subjects"
        if base:
            text += f", N^{min(base):.2f}..N^{max(base):.2f} for the baseline"
        lines.append(text)
    return lines


def draw_seqlen(records, out_dir):
    common = dict(experiment="error-vs-seqlen", xlabel="sequence length N (= Nq = Nk)", xscale="log")
    recs = [r for r in records if "tensors" in r]
    max_fig = _sweep_figure(recs, out_dir, name="error-vs-seqlen-max", metric="max_norm", fit_slopes=True,
                            title="Max error against the oracle vs sequence length",
                            caption="Largest error of the headline tensor (fwd O, bwd dQ, bwdbwd dQ') against the high-precision "
                                    "oracle, divided by the tensor's largest entry, in units of the storage format's unit roundoff "
                                    "u; log-log with least-squares slopes (growth as N^slope). The black dashed "
                                    "line is plain attention computed in the same storage format: a flash subject below it "
                                    "is more accurate than the textbook algorithm in that format.", **common)
    max_fig.findings = _slope_findings(max_fig, "max_norm") + _worst_ratio_finding(recs, "over all N")
    rms_fig = _sweep_figure(recs, out_dir, name="error-vs-seqlen-rms", metric="rms_norm", fit_slopes=True,
                            title="RMS error against the oracle vs sequence length",
                            caption="Root-mean-square error of the headline tensor against the oracle over the tensor's RMS, in "
                                    "units of u: the typical element, where the max shows the worst one.", **common)
    rms_fig.findings = _slope_findings(rms_fig, "rms_norm")
    ratio_fig = _sweep_figure(recs, out_dir, name="error-vs-seqlen-ratio", metric="ratio", fit_slopes=False,
                              title="Error relative to the same-format baseline vs sequence length",
                              caption="The verdict's ratio: the subject's error over the same-format baseline's error (floored), "
                                      "for the headline tensor. Below 1: more accurate than plain attention in that format; "
                                      "the dotted red line is the pass limit rho.", **common)
    return [max_fig, rms_fig, ratio_fig]


def draw_flatness(records, out_dir):
    recs = [r for r in records if "tensors" in r]
    fig = _sweep_figure(recs, out_dir, experiment="error-vs-flatness", name="error-vs-flatness", metric="max_norm",
                        xlabel="logit std T (small: flat, large: one-hot)", xscale="log",
                        fit_slopes=False, title="Max error vs softmax flatness",
                        caption="Inputs drawn so that the scaled logits have standard deviation T: at small T every key gets "
                                "weight about 1/N (sums of many comparable terms); at large T one key dominates (the max "
                                "subtraction and exp carry the error). Errors normwise, in units of u.")
    fig.findings = _worst_ratio_finding(recs, "over all T")
    return [fig]


def draw_outliers(records, out_dir):
    recs = [r for r in records if "tensors" in r]
    fig = _sweep_figure(recs, out_dir, experiment="error-vs-outliers", name="error-vs-outliers", metric="max_norm",
                        xlabel="outlier rate (symlog; 0 at left)", xscale="symlog",
                        fit_slopes=False, title="Max error vs the share of outliers in Q, K, V",
                        caption="The harness's outlier mix (as in the FA3 paper's accuracy test): a share of the input entries "
                                "drawn with a much larger standard deviation (outlier rate: their share; x axis linear near 0). Errors are normwise (over the tensor's largest "
                                "entry) in units of u, so a growth here is lost accuracy, not larger values.")
    fig.findings = _worst_ratio_finding(recs, "over all rates")
    return [fig]
