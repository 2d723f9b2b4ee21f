"""hvp-bench: a full Hessian-vector product through attention (forward, backward, double backward) against
N: median time and peak memory beyond the inputs, log-log, one column per head dim x mask x format;
series per subject (eager PyTorch and torch.compile through plain attention from
kernels/torch/hvp_bench.py, dashed; flashcheck's kernels solid, with the TFLOP/s of the products their
passes perform in the table). The memory exponent is fitted per
series over N >= 4096 (where two such sizes exist): about 2 for plain attention's N x N matrices,
about 1 for Flash Hog. Sizes that ran out of
memory are listed in the table, not drawn."""

from ..fit import loglog_slope
from ..records import number
from ..style import Figure, finish_panel, panel_grid, plain_ticks, save, subject_color
from .common import series, x_of


def _ok(r):
    return r["metrics"].get("status", "ok") == "ok"


def draw(records, out_dir):
    cols = sorted({(r["shape"]["d"], r["mask"], r["dtype"]) for r in records})
    fig, axes = panel_grid(2, len(cols), width=4.4, height=3.3)
    table = []
    for j, (d, mask, dtype) in enumerate(cols):
        cell = [r for r in records if r["shape"]["d"] == d and r["mask"] == mask and r["dtype"] == dtype]
        for subject, points in sorted(series(cell, lambda r: r["subject"]).items()):
            style = dict(marker="o", markersize=3, color=subject_color(subject), linestyle="--" if subject.startswith("torch.") else "-")
            ok = [(x, r) for x, r in points if _ok(r)]
            xs = [x for x, _ in ok]
            ms = [number(r["metrics"]["median_ms"]) for _, r in ok]
            mem = [(x, number(r["metrics"]["peak_bytes"]) / 2**20) for x, r in ok if r["metrics"].get("peak_bytes") is not None]
            # fitted over N >= 4096 where two such sizes exist (below, fixed costs dominate), as hvp_bench.py does
            fit = [(x, y) for x, y in mem if x >= 4096]
            fit = fit if len(fit) >= 2 else mem
            slope = loglog_slope([x for x, _ in fit], [y for _, y in fit]) if len(fit) >= 2 else None
            axes[0][j].plot(xs, ms, label=subject, **style)
            if mem:
                axes[1][j].plot([x for x, _ in mem], [y for _, y in mem],
                                label=subject + (f"  exponent {slope:.2f}" if slope is not None else ""), **style)
            for x, r in points:
                m = r["metrics"]
                table.append({"d": d, "mask": mask, "dtype": dtype, "subject": subject, "N": x, "status": m.get("status", "ok"),
                              "median ms": number(m["median_ms"]) if _ok(r) else None,
                              "peak MiB": number(m["peak_bytes"]) / 2**20 if _ok(r) and m.get("peak_bytes") is not None else None,
                              "memory exponent": slope,
                              "TFLOP/s": number(m["tflops"]) if _ok(r) and "tflops" in m else None,
                              "double backward TFLOP/s": number(m["bwdbwd_tflops"]) if _ok(r) and "bwdbwd_tflops" in m else None})
        for i, label in enumerate(("HVP time (ms)", "peak memory beyond inputs (MiB)")):
            ax = axes[i][j]
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            plain_ticks(ax, [x_of(r) for r in cell])
            ax.tick_params(axis="x", labelrotation=45)  # (16384 and 32768 sit close on a panel this wide)
            ax.set_xlabel("sequence length N")
            ax.set_ylabel(label)
            ax.set_title(f"{dtype}, d = {d}, {mask}", fontsize=10)
            finish_panel(ax, legend_loc="upper left")
    device = next((r.get("device") for r in records), "")
    title = f"Hessian-vector product through attention: time and memory ({device})"
    fig.suptitle(title, fontsize=12)
    fig.tight_layout()
    method = "; ".join(sorted({r["method"] for r in records if r.get("method")}))  # it varies with N (long runs: fewer)
    figure = Figure(name="hvp-bench", experiment="hvp-bench", title=title, table=table,
                    caption="One full HVP (forward, backward, double backward) per point, " + method + ". Plain attention "
                            "through autograd (eager, torch.compile) dashed; sizes that ran out of memory are in the table.")
    exponents = {}
    for row in table:
        if row["memory exponent"] is not None:
            exponents[(row["subject"], row["d"], row["mask"], row["dtype"])] = row["memory exponent"]
    figure.findings = [f"{s}, d = {d}, {mask}, {dtype}: memory N^{e:.2f}" for (s, d, mask, dtype), e in sorted(exponents.items())]
    # each non-eager subject's speed against eager PyTorch at the sizes both ran
    ms_of = {(row["subject"], row["d"], row["mask"], row["dtype"], row["N"]): row["median ms"] for row in table if row["median ms"]}
    for (subject, d, mask, dtype, n), ms in sorted(ms_of.items()):
        eager = ms_of.get(("torch.eager", d, mask, dtype, n))
        if subject != "torch.eager" and eager:
            figure.findings.append(f"{subject}, d = {d}, {mask}, N = {n:.0f}: {ms:.3g} ms, {eager / ms:.1f}x eager")
    ooms = sorted({(row["subject"], row["d"], row["mask"], row["N"]) for row in table if row["status"] == "oom"})
    figure.findings += [f"{s}, d = {d}, {mask}: out of memory at N = {n}" for s, d, mask, n in ooms]
    return [save(fig, out_dir, figure)]
