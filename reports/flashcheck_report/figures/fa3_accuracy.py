"""fa3-accuracy: the FA3 paper's accuracy experiment. One bar per implementation and quantization: the
RMSE of O against an fp64 reference for inputs with outliers (N(0, 1) + N(0, 100) x Bernoulli(0.001)),
fp16 rows (plain attention, FA2, FA3) and FP8 rows (per-tensor or per-block power-of-two scales, with or
without incoherent processing). Findings: what each FP8 technique buys, as ratios of RMSE."""

from ..records import number
from ..style import Figure, finish_panel, panel_grid, save


def _label(r):
    if r["format"] != "e4m3":
        return f"{r['subject']} {r['format']}"
    ip = " + incoherent" if r.get("incoherent") else ""
    return f"{r['subject']} FP8, {r['scaling']} scales{ip}"


def _rmse(r):
    return number(r["metrics"]["rmse"])


def draw(records, out_dir):
    recs = [r for r in records if "metrics" in r and "format" in r]
    if not recs:
        return []
    fig, axes = panel_grid(1, 1, width=7.5, height=0.45 * len(recs) + 1.2)
    ax = axes[0][0]
    labels = [_label(r) for r in recs]
    values = [_rmse(r) for r in recs]
    colors = ["#1f77b4" if r["format"] != "e4m3" else ("#2ca02c" if r.get("incoherent") else "#d62728") for r in recs]
    ax.barh(range(len(recs)), [v if v is not None and v > 0 else float("nan") for v in values], color=colors)
    ax.set_yticks(range(len(recs)))
    ax.set_yticklabels(labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("RMSE of O against fp64")
    shape = recs[0].get("shape", {})
    ax.set_title(f"outlier inputs, B = {shape.get('B')}, H = {shape.get('H')}, N = {shape.get('N')}, d = {shape.get('d')}", fontsize=10)
    finish_panel(ax, legend_loc=None)
    fig.tight_layout()
    table = [{"subject": r["subject"], "format": r["format"], "scaling": r["scaling"], "incoherent": r.get("incoherent"),
              "rmse": _rmse(r), "max error": number(r["metrics"]["max_abs"]), "rmse / rms(ref)": number(r["metrics"]["rel_rmse"])}
             for r in recs]
    findings = []
    fp8 = {(r["subject"], r["scaling"], bool(r.get("incoherent"))): _rmse(r) for r in recs if r["format"] == "e4m3"}
    for subject in sorted({k[0] for k in fp8}):
        worst, best = fp8.get((subject, "tensor", False)), fp8.get((subject, "block", True))
        ip, blk = fp8.get((subject, "tensor", True)), fp8.get((subject, "block", False))
        if worst and best:
            findings.append(f"{subject}: per-tensor scales {worst:.3g} -> block scales + incoherent processing {best:.3g} ({worst / best:.2f}x lower)")
        if worst and ip:
            findings.append(f"{subject}: incoherent processing alone {worst / ip:.2f}x lower RMSE")
        if worst and blk:
            findings.append(f"{subject}: block scales alone {worst / blk:.2f}x lower RMSE")
    fp16 = [(r["subject"], _rmse(r)) for r in recs if r["format"] == "fp16" and _rmse(r) is not None]
    if fp16:
        findings.append("fp16: " + ", ".join(f"{s} {v:.3g}" for s, v in fp16))
    figure = Figure(name="fa3-accuracy", experiment="fa3-accuracy", title="FA3 accuracy: fp16 and FP8 against fp64",
                    caption="RMSE of O against fp64 attention on the same inputs, Q, K, V ~ N(0, 1) + N(0, 100) x Bernoulli(0.001) "
                            "(the FA3 paper's experiment). Blue: fp16. FP8 (e4m3 operands, P in e4m3, O in bf16) with power-of-two "
                            "scales per head ('tensor') or per block of 128 rows ('block'); red without, green with incoherent "
                            "processing (Q and K times a random-sign Walsh-Hadamard matrix).", table=table)
    figure.findings = findings
    return [save(fig, out_dir, figure)]
