#!/usr/bin/env python3
"""Issue 9's Hessian-vector-product benchmark, all sides in one run: a full HVP through attention (forward,
backward with create_graph, double backward) by flashcheck's CUDA kernels (cuda.fa2's or cuda.fa3's forward
and backward, then cuda.hog or cuda.hog.2pass, through the PyTorch op flashcheck.attention), by eager PyTorch through
plain attention, and by torch.compile of it; median time and peak memory per N, written as JSON Lines
(experiment records "hvp-bench") that `flashcheck report` draws; a side-by-side table at the end.

What one HVP is (EQUATIONS.md section 3): with o = softmax(s Q K^T + mask) V and the first backward's
dQ, dK, dV for the cotangent dO, the gradient of <ddQ, dQ> + <ddK, dK> + <ddV, dV> with respect to
Q, K, V and dO (dQ', dK', dV', ddO). Plain attention materialises [N, N] matrices: its memory grows as
N^2, where Flash Hog's grows as N.

Modes (subjects in the records):
  eager    torch.eager     torch.autograd.grad twice through plain attention (reverse over reverse)
  compile  torch.compile   the same reverse-over-reverse HVP written with torch.func.vjp, compiled whole
                           (fullgraph): torch.compile cannot compile the autograd.grad form, its
                           aot_autograd "does not currently support double backward"
  hog      cuda.hog        flashcheck.attention, torch.autograd.grad twice: cuda.fa2 forward, cuda.fa2
  hog.2pass cuda.hog.2pass deterministic backward, then Flash Hog's double backward (3 or 2 statistics passes)
  hog.fa3, hog.2pass.fa3   the same with cuda.fa3's forward and deterministic (two-pass) backward (kernel="fa3"),
           cuda.fa3+cuda.hog, cuda.fa3+cuda.hog.2pass
  hog.2pass.fa3.fused      cuda.fa3.fused+cuda.hog.2pass: cuda.fa3's fused one-pass backward instead (kernel="fa3.fused":
           dQ summed by fp32 reductions, not the same bits from run to run)
  hog.2pass.fa3.unchecked  cuda.fa3+cuda.hog.2pass.unchecked: the same with the ops' NaN/Inf input checks off
           (flashcheck.input_checks(False)), as PyTorch's own ops run: each checked op reads its inputs once more
           and waits for the device to read the flags
Setting FLASHCHECK_HOG_MMA_SYNC (to anything) makes the double backward run its mma.sync passes at every head dim
(cuda.hog's passes=mma_sync): the baseline of a same-run comparison with the wgmma passes, which head dim 64 runs.

Times are medians of --repeats runs after --warmup untimed ones (CUDA events on a GPU, the wall clock
on the CPU); a size whose first run takes more than --long-ms runs 3 timed times and no more warm-ups.
Peak memory is torch.cuda.max_memory_allocated during the HVPs less what was allocated before them (the
inputs), on a GPU only. For the hog modes the records also hold the FLOPs the kernels' passes perform
(matrix products counted, see PRODUCTS) and the TFLOP/s of the whole HVP and of the double backward
alone (timed by itself from the same inputs). A size that runs out of memory is recorded as "oom" and
ends that mode's sweep for the head dim and mask (larger ones would too); any other failure is recorded
as "error" with its message.

Usage: hvp_bench.py --out FILE.jsonl [--device cuda] [--n 1024,...,131072] [--heads 8] [--d 64,128]
                    [--mask none,causal] [--dtype bf16] [--modes eager,compile,hog,hog.2pass,hog.2pass.fa3]
       hvp_bench.py --out FILE.jsonl --table     (the side-by-side table of records already written)
"""
import argparse
import datetime
import json
import math
import os
import statistics
import sys
import time

import torch

MODES = {"eager": "torch.eager", "compile": "torch.compile", "hog": "cuda.hog", "hog.2pass": "cuda.hog.2pass",
         "hog.fa3": "cuda.fa3+cuda.hog", "hog.2pass.fa3": "cuda.fa3+cuda.hog.2pass",
         "hog.2pass.fa3.fused": "cuda.fa3.fused+cuda.hog.2pass", "hog.2pass.fa3.unchecked": "cuda.fa3+cuda.hog.2pass.unchecked"}
# The flashcheck modes: (double_backward_kernel, kernel) of flashcheck.attention, and whether the input checks run.
HOG_MODES = {"hog": ("hog", "fa2", True), "hog.2pass": ("hog.2pass", "fa2", True), "hog.fa3": ("hog", "fa3", True),
             "hog.2pass.fa3": ("hog.2pass", "fa3", True), "hog.2pass.fa3.fused": ("hog.2pass", "fa3.fused", True),
             "hog.2pass.fa3.unchecked": ("hog.2pass", "fa3", False)}

# Matrix products of N x N x d (2 N^2 d FLOPs each per head, half under a causal mask) that flashcheck's
# kernels perform: forward S and PV (2); cuda.fa2's (and cuda.fa3's two-pass) deterministic backward, dK/dV
# pass S, dP, dV, dK and dQ pass S, dP, dQ (7); Flash Hog (kernels/cuda/hog_kernels.cuh): a statistics pass computes S, dP,
# ddS (two products) and X = dO ddV^T (5), the dd-only pass S and ddS (3), the query output pass those 5
# and dQ' (2) and ddO (2), the key pass those 5 and dK' (2) and dV' (1).
FWD_PRODUCTS, BWD_PRODUCTS = 2, 7
BWD_PRODUCTS_OF = {"fa3.fused": 5}  # cuda.fa3's fused backward: S, dP, dV, dK and dQ once each
HOG_PRODUCTS = {"hog": 3 + 5 + 9 + 8, "hog.2pass": 5 + 9 + 8}


def products_of(mode):
    """(products of the whole HVP, products of the double backward) that a flashcheck mode's kernels perform."""
    double_backward, first_order, _ = HOG_MODES[mode]
    db = HOG_PRODUCTS[double_backward]
    return FWD_PRODUCTS + BWD_PRODUCTS_OF.get(first_order, BWD_PRODUCTS) + db, db


def plain_attention(q, k, v, scale, causal):
    s = torch.matmul(q, k.transpose(-1, -2)) * scale
    if causal:
        n_q, n_k = s.shape[-2], s.shape[-1]
        keep = torch.ones(n_q, n_k, dtype=torch.bool, device=s.device).tril()
        s = s.masked_fill(~keep, float("-inf"))
    return torch.matmul(torch.softmax(s, dim=-1), v)


def hvp(q, k, v, dout, ddq, ddk, ddv, scale, causal, attention=None):
    """dQ', dK', dV', ddO of one full HVP by autograd (fresh leaves, so every call does all three passes);
    attention(q, k, v) defaults to plain attention."""
    q, k, v, dout = (x.detach().requires_grad_() for x in (q, k, v, dout))
    o = attention(q, k, v) if attention else plain_attention(q, k, v, scale, causal)
    dq, dk, dv = torch.autograd.grad(o, (q, k, v), dout, create_graph=True)
    return torch.autograd.grad((dq, dk, dv), (q, k, v, dout), (ddq, ddk, ddv))


def hvp_functional(q, k, v, dout, ddq, ddk, ddv, scale, causal):
    """The same HVP with torch.func (a vjp of the first backward's vjp): what torch.compile can trace."""
    def first_backward(q, k, v, dout):
        _, vjp = torch.func.vjp(lambda q, k, v: plain_attention(q, k, v, scale, causal), q, k, v)
        return vjp(dout)

    _, vjp = torch.func.vjp(first_backward, q, k, v, dout)
    return vjp((ddq, ddk, ddv))


def subject_of(mode):
    """The records' subject: the mode's, with ".mma_sync" for the flashcheck modes when FLASHCHECK_HOG_MMA_SYNC is set
    (their double backward then runs its mma.sync passes: the baseline of a same-run comparison)."""
    if mode in HOG_MODES and os.environ.get("FLASHCHECK_HOG_MMA_SYNC") is not None:
        return MODES[mode] + ".mma_sync"
    return MODES[mode]


def hog_functions(kernel, first_order, checked, causal):
    """(full HVP, double backward alone) through flashcheck's op with double_backward_kernel=kernel and
    kernel=first_order (the forward and backward), with the ops' input checks on or off."""
    import flashcheck  # the op library, built by CMake (build/python on PYTHONPATH)

    def attention(q, k, v):
        return flashcheck.attention(q, k, v, causal=causal, kernel=first_order, double_backward_kernel=kernel)

    def full(q, k, v, dout, ddq, ddk, ddv, scale, causal_):
        with flashcheck.input_checks(checked):
            return hvp(q, k, v, dout, ddq, ddk, ddv, scale, causal_, attention)

    mask = "causal_tl" if causal else "none"
    saved = {}

    def double_backward(q, k, v, dout, ddq, ddk, ddv, scale, causal_):
        key = (q.data_ptr(), k.data_ptr(), v.data_ptr(), q.shape)
        if saved.get("key") != key:  # o and lse of these inputs, once
            saved["key"], saved["o_lse"] = key, torch.ops.flashcheck.attention_forward(q, k, v, mask, scale, first_order, None)
        o, lse = saved["o_lse"]
        with flashcheck.input_checks(checked):
            return torch.ops.flashcheck.attention_double_backward(q, k, v, o, lse, dout, ddq, ddk, ddv, mask, scale, kernel, None)

    return full, double_backward


def is_oom(error):
    return isinstance(error, torch.cuda.OutOfMemoryError) or "out of memory" in str(error).lower()


def run_once(fn, args, device):
    """(ms, outputs)."""
    if device.type == "cuda":
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        out = fn(*args)
        stop.record()
        stop.synchronize()
        return start.elapsed_time(stop), out
    t0 = time.perf_counter()
    out = fn(*args)
    return 1e3 * (time.perf_counter() - t0), out


def measure(fn, args, device, warmup, repeats, long_ms, compiles=False):
    """(median ms, all ms, peak bytes or None, timed runs); compiles: the first run compiles (never "long")."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
    for i in range(warmup):
        ms, out = run_once(fn, args, device)
        del out
        if ms > long_ms and (i > 0 or not compiles):  # a long run: its warm-up is done (compilation, allocator); 3 timed runs suffice
            repeats = min(repeats, 3)
            break
    times = []
    for _ in range(repeats):
        ms, out = run_once(fn, args, device)
        times.append(ms)
        for x in out:  # results must be finite: a benchmark of NaNs measures nothing
            if not torch.isfinite(x).all():
                raise ValueError("non-finite HVP output")
        del out
    peak = torch.cuda.max_memory_allocated(device) - base if device.type == "cuda" else None
    return statistics.median(times), times, peak, repeats


def memory_exponent(points):
    """Least-squares slope of log(peak) against log(N) over the sizes from 4096 up (smaller ones are
    dominated by fixed costs), or over all when fewer than two are that large."""
    pts = [(n, b) for n, b in points if b and b > 0]
    big = [(n, b) for n, b in pts if n >= 4096]
    pts = big if len(big) >= 2 else pts
    if len(pts) < 2:
        return None
    xs, ys = [math.log(n) for n, _ in pts], [math.log(b) for _, b in pts]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx > 0 else None


def print_table(records):
    """Side by side: per (d, mask, N), each mode's median ms and peak MiB, and its speed against eager."""
    subjects = list(dict.fromkeys(r["subject"] for r in records))  # (in the order they ran)
    cells = {}
    for r in records:
        cells[(r["shape"]["d"], r["mask"], r["shape"]["N"], r["subject"])] = r["metrics"]
    rows = sorted({(d, mask, n) for d, mask, n, _ in cells}, key=lambda x: (x[0], x[1] != "none", x[2]))
    print("\nfull HVP: median ms / peak MiB beyond the inputs (x eager)" + "".join(f" | {s:>34s}" for s in subjects))
    for d, mask, n in rows:
        line = f"d={d:<3d} {mask:6s} N={n:<6d}"
        eager = cells.get((d, mask, n, "torch.eager"))
        for s in subjects:
            m = cells.get((d, mask, n, s))
            if m is None:
                text = "-"
            elif m["status"] != "ok":
                text = m["status"]
            else:
                text = f"{m['median_ms']:.3f} / {m['peak_bytes'] / 2**20:.0f}" if m["peak_bytes"] is not None else f"{m['median_ms']:.3f}"
                if eager and eager["status"] == "ok" and s != "torch.eager":
                    text += f" ({eager['median_ms'] / m['median_ms']:.1f}x)"
                if "tflops" in m:
                    text += f" {m['tflops']:.0f}TF"
            line += f" | {text:>34s}"
        print(line)
    print("(TF: TFLOP/s of the passes the kernels perform; hog modes' double backward alone in the records)")
    for s in subjects:
        for d in sorted({k[0] for k in cells}):
            for mask in ("none", "causal"):
                pts = [(n, m.get("peak_bytes")) for (dd, mk, n, ss), m in cells.items() if (dd, mk, ss) == (d, mask, s) and m["status"] == "ok"]
                e = memory_exponent(sorted(pts))
                if e is not None:
                    print(f"memory exponent {s:34s} d={d:<3d} {mask:6s}: N^{e:.2f}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="JSON Lines file to append to (experiment records: `flashcheck report` draws them)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--n", default="1024,2048,4096,8192,16384,32768,65536,131072")
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--d", default="64,128")
    ap.add_argument("--mask", default="none,causal")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp16", "fp32"])
    ap.add_argument("--modes", default="eager,compile,hog,hog.2pass,hog.2pass.fa3")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--long-ms", type=float, default=1000.0, help="a first run longer than this ends the warm-up; 3 timed runs")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--table", action="store_true", help="measure nothing: print the side-by-side table of the records in --out")
    a = ap.parse_args(argv)
    if a.table:
        try:
            with open(a.out) as f:
                print_table([r for r in map(json.loads, f) if r.get("experiment") == "hvp-bench"])
        except (OSError, ValueError) as e:
            print(f"hvp_bench: cannot read the records in {a.out}: {e}", file=sys.stderr)
            return 2
        return 0

    try:
        device = torch.device(a.device)
        if device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError("no CUDA device")
        lengths = [int(x) for x in a.n.split(",")]
        dims = [int(x) for x in a.d.split(",")]
        masks = a.mask.split(",")
        modes = a.modes.split(",")
        if any(n < 1 for n in lengths) or any(d < 1 for d in dims) or a.heads < 1 or a.repeats < 1 or a.warmup < 0:
            raise ValueError("N, d, heads and repeats must be >= 1, warmup >= 0")
        if set(masks) - {"none", "causal"} or set(modes) - set(MODES):
            raise ValueError(f"--mask: none, causal; --modes: {', '.join(MODES)}")
        if device.type != "cuda" and set(modes) & set(HOG_MODES):
            raise ValueError("the hog modes time flashcheck's CUDA kernels: --device cuda")
        if "compile" in modes and not hasattr(torch, "func"):
            raise ValueError(f"--modes compile needs torch.func (torch >= 2.0), this is torch {torch.__version__}")
    except ValueError as e:
        print(f"hvp_bench: {e}", file=sys.stderr)
        return 2
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[a.dtype]
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"

    records = []
    with open(a.out, "a") as out:
        for mode in modes:
            for d in dims:
                for mask in masks:
                    causal = mask == "causal"
                    double_backward = None
                    if mode in HOG_MODES:
                        fn, double_backward = hog_functions(*HOG_MODES[mode], causal)
                    for n in lengths:
                        if mode == "compile":  # a fresh compilation per shape: never the recompile limit's silent eager fallback
                            torch._dynamo.reset()
                            fn = torch.compile(hvp_functional, dynamic=False, fullgraph=True)
                        elif mode == "eager":
                            fn = hvp
                        g = torch.Generator(device="cpu").manual_seed(a.seed + n)
                        shape = (1, a.heads, n, d)
                        x = [torch.randn(shape, generator=g, dtype=torch.float32).to(device=device, dtype=dtype) for _ in range(7)]
                        args = (*x, 1.0 / math.sqrt(d), causal)
                        # an experiment record of the report's schema (reports/flashcheck_report/records.py)
                        record = {"schema": 1, "kind": "experiment", "experiment": "hvp-bench", "subject": subject_of(mode),
                                  "device": device_name, "commit": os.environ.get("FLASHCHECK_COMMIT", "unknown"),
                                  "time": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                                  "verdict": "measured", "dtype": a.dtype, "mask": mask, "torch": torch.__version__,
                                  "shape": {"B": 1, "H": a.heads, "N": n, "d": d}, "x": {"name": "N", "value": n}}
                        try:
                            ms, times, peak, timed = measure(fn, args, device, a.warmup, a.repeats, a.long_ms, mode == "compile")
                            record["metrics"] = {"status": "ok", "median_ms": ms, "ms": times, "peak_bytes": peak}
                            record["method"] = (f"device-event median of {timed} after up to {a.warmup} warm-ups; "
                                                "torch.cuda.max_memory_allocated beyond the inputs")
                            if double_backward is not None:
                                per_product = 2.0 * n * n * d * a.heads * (0.5 if causal else 1.0)
                                db_ms, db_times, _, _ = measure(double_backward, args, device, a.warmup, a.repeats, a.long_ms)
                                products, db_products = products_of(mode)
                                record["metrics"].update({
                                    "products": products, "flops": products * per_product,
                                    "tflops": products * per_product / (ms * 1e-3) / 1e12,
                                    "bwdbwd_products": db_products, "bwdbwd_flops": db_products * per_product,
                                    "bwdbwd_median_ms": db_ms, "bwdbwd_ms": db_times,
                                    "bwdbwd_tflops": db_products * per_product / (db_ms * 1e-3) / 1e12})
                        except (RuntimeError, ValueError) as e:
                            status = "oom" if is_oom(e) else "non-finite" if isinstance(e, ValueError) else "error"
                            record["metrics"] = {"status": status, "reason": str(e).split("\n")[0][:300]}
                        del x, args
                        if device.type == "cuda":
                            torch.cuda.empty_cache()
                        out.write(json.dumps(record) + "\n")
                        out.flush()
                        records.append(record)
                        m = record["metrics"]
                        if m["status"] == "ok":
                            text = f"{m['median_ms']:9.3f} ms, peak " + (f"{m['peak_bytes']:.3e} B" if m["peak_bytes"] is not None else "n/a")
                            if "tflops" in m:
                                text += (f", {m['tflops']:.0f} TFLOP/s ({m['products']} products); double backward "
                                         f"{m['bwdbwd_median_ms']:.3f} ms, {m['bwdbwd_tflops']:.0f} TFLOP/s ({m['bwdbwd_products']} products)")
                        else:
                            text = f"{m['status']}: {m['reason']}"
                        print(f"{record['subject']:14s} d={d} {mask:6s} N={n:6d}: {text}", flush=True)
                        if m["status"] == "oom":
                            break  # larger N would run out too
    print_table(records)
    return 0


if __name__ == "__main__":
    sys.exit(main())
