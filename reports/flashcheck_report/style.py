"""Shared look of every figure: one colour per subject across all figures, the baseline in black,
formats and ops in a fixed order, and the one place figures are written."""

import io
import zlib
from dataclasses import dataclass, field

import matplotlib

matplotlib.use("Agg")  # files only; never a display
import matplotlib.pyplot as plt  # noqa: E402
from PIL import Image  # noqa: E402

FORMATS = ("bf16", "fp16", "fp32", "fp64")
OPS = ("fwd", "bwd", "bwdbwd")
# The tensor each op is judged by in the figures: the one a user of that op consumes first and the
# one whose error grows fastest (dQ and dQ' carry the dS K products with the longest reductions).
HEADLINE_TENSOR = {"fwd": "O", "bwd": "dQ", "bwdbwd": "dQ'"}
BASELINE_COLOR = "black"
BASELINE_LABEL = "same-format baseline"

# Fixed colours for the subjects we ship, so that cpu.fa2 and cuda.fa2 share a hue across reports;
# other subjects (plugins) get a stable colour from their name.
_KNOWN = {
    "naive": "#7f7f7f",
    "fa1": "#1f77b4",
    "fa2": "#ff7f0e",
    "fa2.fast": "#ffbb78",
    "fa3": "#8c564b",
    "fa4": "#2ca02c",
    "fa4.emulated": "#98df8a",
    "hog": "#d62728",
    "hog.2pass": "#ff9896",
    # whole HVPs with cuda.fa3's first order (kernels/torch/hvp_bench.py's .fa3 modes)
    "fa3+cuda.hog": "#843c39",
    "fa3+cuda.hog.2pass": "#ad494a",
    "fa3+cuda.hog.2pass.unchecked": "#5254a3",
    "fa3.fused+cuda.hog.2pass": "#7b4173",
    "attnres": "#9467bd",
    "math": "#17becf",
    "sdpa.flash": "#e377c2",
    "sdpa.efficient": "#bcbd22",
    "sdpa.cudnn": "#393b79",
}
_PALETTE = plt.get_cmap("tab20").colors


def subject_color(subject):
    family = subject.split(".", 1)[1] if "." in subject else subject
    if family in _KNOWN:
        return _KNOWN[family]
    return _PALETTE[zlib.crc32(subject.encode()) % len(_PALETTE)]


def rank(value, order):
    """value's place in `order`; unknown values after all known ones."""
    return order.index(value) if value in order else len(order)


def ordered(values, order):
    """The distinct values sorted by their place in `order`, unknown ones after, alphabetically."""
    return sorted(set(values), key=lambda v: (rank(v, order), v))


@dataclass
class Figure:
    """A drawn figure and what the page and summary say about it."""

    name: str  # file stem under figures/
    experiment: str
    title: str
    caption: str  # how to read it
    path: str = ""  # relative to the report directory
    table: list = field(default_factory=list)  # summary rows: dicts with the same keys
    findings: list = field(default_factory=list)  # one-line readings computed from the records


def save(fig, out_dir, figure):
    """Writes `fig` as figures/<name>.png (dpi 110: sharp in a browser, small in git)."""
    target = out_dir / "figures"
    target.mkdir(parents=True, exist_ok=True)
    path = target / f"{figure.name}.png"
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    # a 256-colour palette: line plots lose nothing visible and the files shrink about 3x (the example
    # report lives in git)
    buffer.seek(0)
    Image.open(buffer).convert("RGB").quantize(colors=256).save(path, optimize=True)
    figure.path = f"figures/{figure.name}.png"
    return figure


def panel_grid(rows, cols, width=4.2, height=3.2, **kwargs):
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False, **kwargs)
    return fig, axes


def finish_panel(ax, legend_loc="best"):
    """The common last touches of a panel: a light grid, and a small translucent legend when there is
    anything to name."""
    ax.grid(True, which="both", alpha=0.25)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=6.5, loc=legend_loc, framealpha=0.6)


def plain_ticks(ax, xs=None):
    """Log axes labelled with plain numbers (0.5, 2, 1024) rather than powers of ten; when `xs` are
    given, the x ticks sit on the measured values."""
    from matplotlib import ticker

    plain = ticker.FuncFormatter(lambda v, _: f"{v:g}")
    if ax.get_yscale() == "log":
        lo, hi = ax.get_ylim()
        narrow = hi / lo < 10  # within a decade there may be no major tick: label every minor one
        ax.yaxis.set_major_formatter(plain)
        ax.yaxis.set_minor_formatter(ticker.FuncFormatter(lambda v, _: f"{v:.2g}" if narrow or f"{v:g}"[0] in "25" else ""))
        ax.tick_params(axis="y", which="minor", labelsize=7)
    if xs is not None and ax.get_xscale() in ("log", "symlog"):
        values = sorted(set(xs))
        if len(values) <= 12:
            ax.xaxis.set_major_locator(ticker.FixedLocator(values))
            ax.xaxis.set_minor_locator(ticker.NullLocator())
        ax.xaxis.set_major_formatter(plain)
