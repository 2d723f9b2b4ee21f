"""flashcheck's attention kernels as PyTorch ops, differentiable twice.

    import torch, flashcheck
    o = flashcheck.attention(q, k, v, causal=True)            # q, k, v: [B, H, N, D]
    (dq,) = torch.autograd.grad(o, q, do, create_graph=True)
    (hvp,) = torch.autograd.grad(dq, q, u)                     # runs the Flash Hog double backward

The ops live in the shared library beside this file (built by CMake into build/python/flashcheck/);
importing this module loads it with torch.ops.load_library, after which they are also reachable as
torch.ops.flashcheck.*. CPU tensors run flashcheck's CPU backends (the same algorithm and precision
policy as its CUDA kernels).
"""
import glob
import os

import torch

__all__ = ["attention", "attnres", "attnres_phase1", "attnres_phase2", "library_path"]


def _find_library():
    here = os.path.dirname(os.path.abspath(__file__))
    found = sorted(glob.glob(os.path.join(here, "*flashcheck_torch_ops*.so")))
    if not found:
        raise ImportError(f"flashcheck: the op library libflashcheck_torch_ops.so is not in {here}; build flashcheck "
                          "with libtorch (cmake --build build) and put build/python on PYTHONPATH")
    return found[0]


library_path = _find_library()
torch.ops.load_library(library_path)

_ALIGNMENTS = {"top_left": "causal_tl", "bottom_right": "causal_br"}


def attention(q, k, v, causal=False, scale=None, causal_alignment="top_left", kernel="fa2",
              double_backward_kernel="hog", policy=None):
    """Softmax attention of [B, H, N, D] tensors, with autograd to second order.

    causal_alignment: "top_left" (query i sees keys j <= i; PyTorch SDPA's is_causal) or
    "bottom_right" (j <= i + Nk - Nq; FlashAttention >= 2.1). scale defaults to 1/sqrt(D).
    kernel picks the forward/backward backend (fa2, fa3 or fa3.fused; on CPU tensors also fa1, fa4, naive;
    fa3 is cuda.fa3 with its deterministic two-pass backward, fa3.fused with FA3's one-pass backward, whose dQ
    is summed by fp32 reductions: faster, not the same bits from run to run; cpu.fa3 for both on the CPU),
    double_backward_kernel the second-order one (hog, hog.2pass; on CPU tensors also naive); policy is a flashcheck precision policy text
    ("bf16,round=sr,seed=7"), by default the uniform policy of q's dtype. GQA: q may have a multiple
    of k's and v's heads.
    """
    if causal:
        if causal_alignment not in _ALIGNMENTS:
            raise ValueError(f"causal_alignment must be one of {sorted(_ALIGNMENTS)}, got {causal_alignment!r}")
        mask = _ALIGNMENTS[causal_alignment]
    else:
        mask = "none"
    return torch.ops.flashcheck.attention(q, k, v, mask, scale, kernel, double_backward_kernel, policy)


def attnres_phase1(values, queries, eps=1e-6):
    """Attention Residuals phase 1: values [N, B, T, D], pseudo-queries [S, D] -> (o [S, B, T, D], lse [S, B, T])."""
    return torch.ops.flashcheck.attnres_phase1(values, queries, eps)


def attnres_phase2(o, lse, partial, queries, eps=1e-6):
    """Attention Residuals phase 2: merges each layer's partial sum [S, B, T, D] into phase 1's result -> h."""
    return torch.ops.flashcheck.attnres_phase2(o, lse, partial, queries, eps)


def attnres(values, partial, queries, eps=1e-6):
    """Block Attention Residuals: phase 1 over the N completed blocks, then phase 2 with each of the S
    layers' partial sums; differentiable twice with respect to values, partial and queries. One op: the
    composition of attnres_phase1 and attnres_phase2 to the bit, but on CUDA tensors the forward and a
    first-order backward each check their inputs for NaN/Inf with one wait for the device instead of two."""
    return torch.ops.flashcheck.attnres(values, partial, queries, eps)


class input_checks:
    """The CUDA ops' NaN/Inf checks of their inputs, on (the default) or off, process-wide.

    Each check makes an op wait for the device once (a few bytes copied back) so that NaN or Inf in an
    input raises an error naming it; off, the ops never wait, and NaN or Inf flows into the outputs
    unreported, as with PyTorch's own ops. Takes effect at once; as a context manager it restores the
    previous setting on exit:

        with flashcheck.input_checks(False):
            step()
    """

    def __init__(self, enabled):
        self.previous = torch.ops.flashcheck.set_input_checks(bool(enabled))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        torch.ops.flashcheck.set_input_checks(self.previous)
        return False
