#!/usr/bin/env python3
"""The reference side of issue 9's Hessian-vector-product benchmark: a full HVP through plain attention
(forward, backward with create_graph, double backward) in eager PyTorch and under torch.compile, timed
and measured for peak memory over N, written as JSON Lines that the report draws beside cuda.hog.

What one HVP is (EQUATIONS.md section 3): with o = softmax(s Q K^T + mask) V and the first backward's
dQ, dK, dV for the cotangent dO, the gradient of <ddQ, dQ> + <ddK, dK> + <ddV, dV> with respect to
Q, K, V and dO (dQ', dK', dV', ddO). Plain attention materialises [N, N] matrices: its memory grows as
N^2, where Flash Hog's grows as N.

Times are medians of --repeats runs after --warmup untimed ones (CUDA events on a GPU, the wall clock
on the CPU), with no FLOP rate: autograd's own product count is not ours to state; peak memory is torch.cuda.max_memory_allocated during one HVP less what was allocated
before it (the inputs), on a GPU only. A size that runs out of memory is recorded as "oom" and ends
that mode's sweep (larger ones would too).

Usage: hvp_reference.py --out FILE.jsonl [--device cuda] [--n 1024,2048] [--heads 8] [--d 64,128]
                        [--mask none,causal] [--dtype bf16] [--modes eager,compile]
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


def plain_attention(q, k, v, scale, causal):
    s = torch.matmul(q, k.transpose(-1, -2)) * scale
    if causal:
        n_q, n_k = s.shape[-2], s.shape[-1]
        keep = torch.ones(n_q, n_k, dtype=torch.bool, device=s.device).tril()
        s = s.masked_fill(~keep, float("-inf"))
    return torch.matmul(torch.softmax(s, dim=-1), v)


def hvp(q, k, v, dout, ddq, ddk, ddv, scale, causal):
    """dQ', dK', dV', ddO of one full HVP (fresh leaves, so every call does all three passes)."""
    q, k, v, dout = (x.detach().requires_grad_() for x in (q, k, v, dout))
    o = plain_attention(q, k, v, scale, causal)
    dq, dk, dv = torch.autograd.grad(o, (q, k, v), dout, create_graph=True)
    return torch.autograd.grad((dq, dk, dv), (q, k, v, dout), (ddq, ddk, ddv))


def is_oom(error):
    return isinstance(error, torch.cuda.OutOfMemoryError) or "out of memory" in str(error).lower()


def measure(fn, args, device, warmup, repeats):
    """(median ms, all ms, peak bytes or None)."""
    for _ in range(warmup):
        fn(*args)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            out = fn(*args)
            stop.record()
            stop.synchronize()
            times.append(start.elapsed_time(stop))
        else:
            t0 = time.perf_counter()
            out = fn(*args)
            times.append(1e3 * (time.perf_counter() - t0))
        for x in out:  # results must be finite: a benchmark of NaNs measures nothing
            if not torch.isfinite(x).all():
                raise ValueError("non-finite HVP output")
        del out
    peak = torch.cuda.max_memory_allocated(device) - base if device.type == "cuda" else None
    return statistics.median(times), times, peak


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="JSON Lines file to append to (experiment records: `flashcheck report` draws them)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--n", default="1024,2048,4096,8192,16384,32768,65536,131072")
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--d", default="64,128")
    ap.add_argument("--mask", default="none,causal")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp16", "fp32"])
    ap.add_argument("--modes", default="eager,compile")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args(argv)

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
        if set(masks) - {"none", "causal"} or set(modes) - {"eager", "compile"}:
            raise ValueError("--mask: none, causal; --modes: eager, compile")
    except ValueError as e:
        print(f"hvp_reference: {e}", file=sys.stderr)
        return 2
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[a.dtype]
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"

    with open(a.out, "a") as out:
        for mode in modes:
            fn = hvp if mode == "eager" else torch.compile(hvp, dynamic=False)
            for d in dims:
                for mask in masks:
                    for n in lengths:
                        g = torch.Generator(device="cpu").manual_seed(a.seed + n)
                        shape = (1, a.heads, n, d)
                        x = [torch.randn(shape, generator=g, dtype=torch.float32).to(device=device, dtype=dtype) for _ in range(7)]
                        args = (*x, 1.0 / math.sqrt(d), mask == "causal")
                        # an experiment record of the report's schema (reports/flashcheck_report/records.py)
                        record = {"schema": 1, "kind": "experiment", "experiment": "hvp-bench", "subject": f"torch.{mode}",
                                  "device": device_name, "commit": os.environ.get("FLASHCHECK_COMMIT", "unknown"),
                                  "time": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                                  "verdict": "measured", "dtype": a.dtype, "mask": mask, "torch": torch.__version__,
                                  "shape": {"B": 1, "H": a.heads, "N": n, "d": d}, "x": {"name": "N", "value": n},
                                  "method": f"device-event median of {a.repeats} after {a.warmup} warm-ups; "
                                            "torch.cuda.max_memory_allocated beyond the inputs"}
                        try:
                            ms, times, peak = measure(fn, args, device, a.warmup, a.repeats)
                            record["metrics"] = {"status": "ok", "median_ms": ms, "ms": times, "peak_bytes": peak}
                        except (RuntimeError, ValueError) as e:
                            if not is_oom(e) and not isinstance(e, ValueError):
                                raise
                            record["metrics"] = {"status": "oom" if is_oom(e) else "non-finite", "reason": str(e).split("\n")[0][:200]}
                        del x, args
                        if device.type == "cuda":
                            torch.cuda.empty_cache()
                        out.write(json.dumps(record) + "\n")
                        out.flush()
                        m = record["metrics"]
                        print(f"{record['subject']:14s} d={d} {mask:6s} N={n:6d}: " +
                              (f"{m['median_ms']:9.3f} ms, peak " + (f"{m['peak_bytes']:.3e} B" if m["peak_bytes"] is not None else "n/a")
                               if m["status"] == "ok" else m["status"]))
                        if m["status"] == "oom":
                            break  # larger N would run out too
    return 0


if __name__ == "__main__":
    sys.exit(main())
