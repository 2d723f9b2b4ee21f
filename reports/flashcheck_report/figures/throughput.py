"""bench: attention throughput on the GPU (`flashcheck bench`), TFLOP/s against N per subject, one
panel per op (rows) and head dim x mask (columns); PyTorch's SDPA backends dashed. The findings give
each of our subjects' speed relative to a baseline measured in the same run: torch.sdpa.cudnn where it was
measured (the reference of `flashcheck bench`'s table and of the issues' goals), else torch.sdpa.flash. A row in an
8-bit format (e4m3), which no baseline runs, is read against the same problem in a 16-bit format instead: against our
fastest 16-bit forward there (the issue's FP8 goal is stated against our bf16) and against the baseline's."""

import math

from ..records import number
from ..style import Figure, finish_panel, ordered, panel_grid, plain_ticks, save, subject_color
from .common import series, x_of

OPS = ("fwd", "bwd")
BASELINES = ("torch.sdpa.cudnn", "torch.sdpa.flash")  # the first one measured for a problem divides its row
EIGHT_BIT = ("e4m3", "e5m2")
SIXTEEN_BIT = ("bf16", "fp16")  # an 8-bit row's reference format: the first one measured for the problem


def _tflops(r):
    return number(r["metrics"]["tflops"])


def _whole(r, name):
    """A metric older records lack (the SM clock, the power), rounded to a whole number (MHz and W: the summary's three
    significant digits would hide the 15 MHz steps the clocks move in); NaN where absent."""
    x = number(r["metrics"].get(name, "nan"))
    return x if math.isnan(x) else int(round(x))


def draw(records, out_dir):
    ops = ordered((r["op"] for r in records), OPS)
    cols = sorted({(r["shape"]["d"], r["mask"], r["dtype"]) for r in records})
    fig, axes = panel_grid(len(ops), len(cols), width=4.2, height=3.3)
    table = []
    for i, op in enumerate(ops):
        for j, (d, mask, dtype) in enumerate(cols):
            ax = axes[i][j]
            cell = [r for r in records if r["op"] == op and r["shape"]["d"] == d and r["mask"] == mask and r["dtype"] == dtype]
            for subject, points in sorted(series(cell, lambda r: r["subject"]).items()):
                xs = [x for x, _ in points]
                ys = [_tflops(r) for _, r in points]
                ax.plot(xs, ys, marker="o", markersize=3, color=subject_color(subject),
                        linestyle="--" if subject.startswith("torch.") else "-", label=subject)
                for x, r in points:
                    table.append({"op": op, "dtype": dtype, "d": d, "mask": mask, "N": x, "subject": subject,
                                  "TFLOP/s": _tflops(r), "median ms": number(r["metrics"]["median_ms"]),
                                  "SM MHz": _whole(r, "sm_clock_mhz"), "W": _whole(r, "power_w")})
            ax.set_xscale("log", base=2)
            plain_ticks(ax, [x_of(r) for r in cell])
            ax.set_xlabel("sequence length N")
            ax.set_ylabel(f"{op} TFLOP/s")
            ax.set_title(f"{op}, {dtype}, d = {d}, {mask}", fontsize=10)
            ax.set_ylim(bottom=0)
            finish_panel(ax, legend_loc="best")
    device = next((r.get("device") for r in records), "")
    title = f"Attention throughput ({device})"
    fig.suptitle(title, fontsize=12)
    fig.tight_layout()
    method = next((r.get("method") for r in records if r.get("method")), "")
    figure = Figure(name="bench", experiment="bench", title=title, table=table,
                    caption="TFLOP/s from EQUATIONS.md's counts (forward 4 N^2 d per head, backward 10, halved for causal), "
                            f"{method}; batch x heads sized to fill the GPU. Our kernels solid, PyTorch's SDPA backends dashed.")
    findings = []
    by_key = {}
    for row in table:
        by_key.setdefault((row["op"], row["dtype"], row["d"], row["mask"], row["N"]), {})[row["subject"]] = (row["TFLOP/s"], row["SM MHz"])
    for (op, dtype, d, mask, n), points in sorted(by_key.items()):
        baseline = next((b for b in BASELINES if points.get(b) and points[b][0]), None)
        if baseline is None:
            continue
        base, base_mhz = points[baseline]

        ours = ", ".join(f"{s} {v / base:.2f}x{_per_clock(v, mhz, base, base_mhz, clocks=True)}"
                         for s, (v, mhz) in sorted(points.items()) if s.startswith("cuda."))
        if ours:
            findings.append(f"{op} {dtype} d={d} {mask} N={n:g}: {baseline} {base:.0f} TFLOP/s; {ours}")
    findings += _eight_bit_findings(by_key)
    figure.findings = findings
    return [save(fig, out_dir, figure)]


def _per_clock(rate, mhz, ref, ref_mhz, clocks=False):
    """With both SM clocks read (NaN where one was not), the ratio per clock, and with `clocks` the two clocks: at a power
    limit the clock differs from kernel to kernel, and the work a clock does is the kernel's own part
    (kernels/cuda/device_monitor.hpp)."""
    if not (mhz == mhz and ref_mhz == ref_mhz and mhz > 0 and ref_mhz > 0):
        return ""
    return f" ({rate / mhz / (ref / ref_mhz):.2f}x per clock" + (f", {mhz:.0f} against {ref_mhz:.0f} MHz)" if clocks else ")")


def _eight_bit_findings(by_key):
    """Each of our subjects in an 8-bit format against the same op and problem in 16 bits (bf16, else fp16): our fastest
    cuda.* subject there and the baseline's time there (the bench table's `*` rows read against the baseline only)."""
    findings = []
    for (op, dtype, d, mask, n), points in sorted(by_key.items()):
        if dtype not in EIGHT_BIT:
            continue
        reference = next((by_key[(op, f, d, mask, n)] for f in SIXTEEN_BIT if (op, f, d, mask, n) in by_key), None)
        ref_format = next((f for f in SIXTEEN_BIT if (op, f, d, mask, n) in by_key), None)
        if reference is None:
            continue
        ours16 = [(v, mhz, s) for s, (v, mhz) in reference.items() if s.startswith("cuda.") and v]
        baseline = next((b for b in BASELINES if reference.get(b) and reference[b][0]), None)
        for subject, (rate, mhz) in sorted(points.items()):
            if not subject.startswith("cuda.") or not rate:
                continue
            parts = []
            if ours16:
                best, best_mhz, best_subject = max(ours16)
                parts.append(f"{rate / best:.2f}x our fastest {ref_format} ({best_subject} {best:.0f} TFLOP/s)" + _per_clock(rate, mhz, best, best_mhz))
            if baseline is not None:
                base, base_mhz = reference[baseline]
                parts.append(f"{rate / base:.2f}x {baseline}'s {ref_format}" + _per_clock(rate, mhz, base, base_mhz))
            if parts:
                findings.append(f"{op} {dtype} d={d} {mask} N={n:g}: {subject} {rate:.0f} TFLOP/s; " + ", ".join(parts))
    return findings
