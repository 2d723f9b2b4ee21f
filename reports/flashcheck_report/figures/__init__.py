"""One module per experiment; each `draw(records, out_dir)` returns the Figures it wrote."""

from . import attnres, error_sweeps, fa3_accuracy, gradcheck_matrix, hvp, memory, rescale, rounding, throughput

# experiment name -> drawer; the page shows them in this order.
DRAWERS = {
    "error-vs-seqlen": error_sweeps.draw_seqlen,
    "error-vs-flatness": error_sweeps.draw_flatness,
    "error-vs-outliers": error_sweeps.draw_outliers,
    "rounding": rounding.draw,
    "rescale": rescale.draw,
    "memory-scaling": memory.draw,
    "gradcheck-matrix": gradcheck_matrix.draw,
    "bench": throughput.draw,
    "hvp-bench": hvp.draw,
    "attnres-error": attnres.draw,
    "fa3-accuracy": fa3_accuracy.draw,
}
