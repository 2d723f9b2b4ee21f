"""gradcheck-matrix: every subject x op (rows) x storage format (columns) with K generated cases. A
cell's colour is its worst error ratio (subject error over the same-format baseline's, floored) on a
log scale; its text is passed/cases and the worst ratio. Failing cells are outlined in red."""

import math

import matplotlib.colors as mcolors
from matplotlib.patches import Rectangle
import numpy as np

from ..records import number
from ..style import FORMATS, OPS, Figure, ordered, panel_grid, rank, save


def draw(records, out_dir):
    formats = ordered((r["dtype"] for r in records), FORMATS)
    rows = sorted({(r["subject"], r["op"]) for r in records}, key=lambda so: (so[0], rank(so[1], OPS)))
    cell = {(r["subject"], r["op"], r["dtype"]): r for r in records}
    rho = next((number(r["rho"]) for r in records if "rho" in r), 2.0)
    ratio = np.full((len(rows), len(formats)), np.nan)
    for i, (subject, op) in enumerate(rows):
        for j, fmt in enumerate(formats):
            r = cell.get((subject, op, fmt))
            if r is not None:
                ratio[i, j] = min(max(number(r["metrics"]["worst_ratio"]), 0.03), rho * 2)
    fig, axes = panel_grid(1, 1, width=1.6 * len(formats) + 3.2, height=0.36 * len(rows) + 1.6)
    ax = axes[0][0]
    # green well below the baseline's error, yellow at it, red from the pass limit rho on
    low, high = 0.03, rho * 2
    norm = mcolors.LogNorm(vmin=low, vmax=high)
    at = lambda x: math.log(x / low) / math.log(high / low)  # noqa: E731
    cmap = mcolors.LinearSegmentedColormap.from_list(
        "ratio", [(0.0, "#1a9850"), (at(0.3), "#a6d96a"), (at(1.0), "#fee08b"), (at(rho), "#f46d43"), (1.0, "#a50026")])
    cmap = cmap.with_extremes(bad="#dddddd")
    image = ax.imshow(np.ma.masked_invalid(ratio), aspect="auto", cmap=cmap, norm=norm)
    table = []
    failed = []
    for i, (subject, op) in enumerate(rows):
        for j, fmt in enumerate(formats):
            r = cell.get((subject, op, fmt))
            if r is None:
                ax.text(j, i, "n/a", ha="center", va="center", fontsize=7, color="#777777")
                continue
            m = r["metrics"]
            cases, passed = int(m["cases"]), int(m["passed"])
            worst = number(m["worst_ratio"])
            ok = r["verdict"] == "pass"
            discarded = int(m.get("discarded", 0))
            text = f"{passed}/{cases - discarded}  {worst:.2g}" + (f"\n(+{discarded} out of range)" if discarded else "")
            ax.text(j, i, text, ha="center", va="center", fontsize=7,
                    color="black" if ok else "#7f0000", fontweight="normal" if ok else "bold")
            if not ok:
                ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, ec="red", lw=2))
                failed.append(f"{subject} {op} {fmt}: {passed}/{cases} passed" + (f"; minimal failing case: {r['failure'].get('minimal')}" if r.get("failure") else ""))
            table.append({"subject": subject, "op": op, "format": fmt, "cases": cases, "passed": passed,
                          "discarded": int(m.get("discarded", 0)), "weak": int(m.get("weak", 0)),
                          "worst ratio": worst, "worst ULP": number(m["worst_ulp"]) if "worst_ulp" in m else math.nan,
                          "verdict": r["verdict"]})
    ax.set_xticks(range(len(formats)), formats)
    ax.set_yticks(range(len(rows)), [f"{s}  {o}" for s, o in rows], fontsize=8)
    ax.xaxis.tick_top()
    cbar = fig.colorbar(image, ax=ax, fraction=0.05, pad=0.02)
    cbar.set_label(f"worst error / baseline error (pass <= rho = {rho:g})")
    cases = sorted({int(r["metrics"]["cases"]) for r in records})
    title = f"Gradcheck matrix: subject x op x format, {'/'.join(map(str, cases))} generated cases per cell"
    ax.set_title(title, fontsize=11, pad=24)
    fig.tight_layout()
    figure = Figure(name="gradcheck-matrix", experiment="gradcheck-matrix", title=title, table=table,
                    caption="Each cell ran the property-based harness on generated shapes, masks and inputs: "
                            "text = cases passed / cases judged and the worst error ratio (cases whose exact values leave the "
                            "format's range are discarded and counted apart); colour = that ratio (green: well below plain "
                            "attention's error in the same format, yellow: equal to it, red: at or past the limit rho). "
                            "fp64 cells are judged against the quad oracle.")
    total = sum(row["cases"] for row in table)
    passed = sum(row["passed"] for row in table)
    figure.findings = [f"{passed}/{total} cases passed over {len(table)} cells"] + failed
    return [save(fig, out_dir, figure)]
