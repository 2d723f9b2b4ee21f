"""attnres-error: Attention Residuals' error against the oracle per precision policy. Top row: the
largest error of the headline output (fwd h, bwd d_values) over its largest entry, in units of the
output format's u, against the softmax's flatness (logit standard deviation) and against the number
of sources N; one line per subject and policy, stochastic rounding dashed. Bottom row: the bias of
the same outputs, mean signed error over RMS error (0 for unbiased errors, +-1 when every error has
one sign), RN against SR."""

from ..records import number
from ..style import Figure, finish_panel, panel_grid, plain_ticks, save
from .common import series, subject_metric, x_of

HEADLINE = {"fwd": "h", "bwd": "d_values"}
SWEEPS = (("flatness", "logit std T (small: flat, large: one-hot)"), ("sources", "sources N"))
POLICY_COLOR = {"fp32": "#2ca02c", "bf16": "#d62728", "fp16": "#1f77b4", "bf16,o=fp16": "#9467bd"}


def _base_policy(policy):
    return ",".join(p for p in policy.split(",") if not p.startswith(("round=", "seed=")))


def _is_sr(policy):
    return "round=sr" in policy


def _bias(r, tensor):
    t = (r.get("tensors") or {}).get(tensor)
    if t is None:
        return None
    m = t["subject"]
    rms = number(m["rms"])
    return number(m["mean_signed"]) / rms if rms else None


def draw(records, out_dir):
    recs = [r for r in records if "tensors" in r and r.get("sweep")]
    ops = [op for op in ("fwd", "bwd") if any(r["op"] == op for r in recs)]
    fig, axes = panel_grid(2, 2 * len(ops), width=4.2, height=3.2)
    table, findings = [], []
    for j, (op, (sweep, xlabel)) in enumerate((op, s) for op in ops for s in SWEEPS):
        cell = [r for r in recs if r["op"] == op and r["sweep"] == sweep]
        tensor = HEADLINE[op]
        for (subject, policy), points in sorted(series(cell, lambda r: (r["subject"], r["policy"])).items()):
            style = dict(marker="o", markersize=3, lw=1.2, color=POLICY_COLOR.get(_base_policy(policy), "k"),
                         linestyle="--" if _is_sr(policy) else "-")
            label = f"{subject} {_base_policy(policy)}" + (" SR" if _is_sr(policy) else "")
            err = [(x, subject_metric(r, "max_norm", tensor)) for x, r in points]
            err = [(x, y) for x, y in err if y is not None]
            bias = [(x, _bias(r, tensor)) for x, r in points]
            bias = [(x, y) for x, y in bias if y is not None]
            if err:
                axes[0][j].plot([x for x, _ in err], [y for _, y in err], label=label, **style)
            if bias:
                axes[1][j].plot([x for x, _ in bias], [y for _, y in bias], label=label, **style)
            for x, r in points:
                table.append({"op": op, "sweep": sweep, "x": x, "subject": subject, "policy": policy, "tensor": tensor,
                              "max error / max |ref| (u)": subject_metric(r, "max_norm", tensor),
                              "ratio to baseline": subject_metric(r, "ratio", tensor), "bias": _bias(r, tensor),
                              "verdict": r.get("verdict")})
        for i, ylabel in enumerate((f"{tensor}: max error / max |ref| (u)", f"{tensor}: mean signed / RMS error")):
            ax = axes[i][j]
            ax.set_xscale("log")
            if i == 0:
                ax.set_yscale("log")
            else:
                ax.axhline(0.0, color="k", lw=0.8)
            plain_ticks(ax, [x_of(r) for r in cell])
            ax.set_xlabel(xlabel)
            ax.set_ylabel(ylabel)
            ax.set_title(f"{op}, {sweep}", fontsize=10)
            finish_panel(ax)
    fig.suptitle("Attention Residuals: error against the oracle per policy", fontsize=12)
    fig.tight_layout()
    # findings: the largest error per policy, and RN vs SR mean |bias|
    by_policy = {}
    for row in table:
        e = row["max error / max |ref| (u)"]
        if e is not None:
            key = (row["subject"], row["policy"], row["op"])
            by_policy[key] = max(by_policy.get(key, 0.0), e)
    for (subject, policy, op), e in sorted(by_policy.items()):
        findings.append(f"{subject} {policy} {op}: largest {HEADLINE[op]} error {e:.3g} u")
    for op in ops:
        for rounding, test in (("RN", lambda p: not _is_sr(p)), ("SR", _is_sr)):
            b = [abs(row["bias"]) for row in table if row["op"] == op and row["bias"] is not None and test(row["policy"])
                 and _base_policy(row["policy"]) != "fp32"]
            if b:
                findings.append(f"{op} {rounding} (16-bit policies): mean |bias| {sum(b) / len(b):.3f} over {len(b)} points")
    failed = [row for row in table if row["verdict"] == "fail"]
    if failed:
        findings.append(f"{len(failed)} points failed the verdict")
    figure = Figure(name="attnres-error", experiment="attnres-error", title="Attention Residuals: error per policy",
                    caption="Per policy and subject, the headline output's normwise error against the oracle (top) and its "
                            "bias, mean signed over RMS error (bottom), against the softmax's flatness and the number of source "
                            "blocks N. Dashed: stochastic rounding. B = 1, T = 64, D = 64, S = 2.", table=table)
    figure.findings = findings
    return [save(fig, out_dir, figure)]
