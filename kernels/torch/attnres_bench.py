#!/usr/bin/env python3
"""Issue 10's Attention Residuals benchmark, all sides in one run: flashcheck's cuda.attnres (through the
PyTorch ops), a two-phase reference under torch.compile, and the same in eager PyTorch. Two measurements
per shape:
  phase1   the phase-1 forward alone (S pseudo-queries against N source blocks, batched): median ms and
           the bytes it must move (read N B T D values and S D queries, write S B T D o and S B T lse)
           per second, against the device's copy bandwidth measured in the same run (a large
           tensor's copy_: read + write bytes / time)
  (cuda.attnres twice: with its ops' NaN/Inf input checks, which wait for the device once per op, and
  without them, as the references run)
  step     a training step over a block of S layers: block AttnRes forward (phase 1 batched, phase 2 per
           layer) and the backward of <dh, h> to values, partial sums and pseudo-queries: median ms and
           peak memory beyond the inputs (torch.cuda.max_memory_allocated)
Times are CUDA-event medians of --repeats timings, each of --calls back-to-back calls (per call), after
--warmup. Records: JSON Lines (experiment
"attnres-bench"); a side-by-side table at the end.

Usage: attnres_bench.py --out FILE.jsonl [--n 4] [--s 8] [--b 32] [--t 1024] [--d 512] [--dtype bf16]
                        [--modes flashcheck,unchecked,compile,eager] [--warmup 5] [--repeats 20] [--calls 10]
"""
import argparse
import datetime
import json
import os
import statistics
import sys

import torch

# "unchecked": cuda.attnres with its ops' NaN/Inf input checks off (flashcheck.input_checks(False)): each
# checked op waits for the device once to read its flag back, which the references never do.
MODES = {"flashcheck": "cuda.attnres", "unchecked": "cuda.attnres.unchecked", "compile": "torch.compile", "eager": "torch.eager"}


def phase1_reference(values, queries, eps):
    """o [S, B, T, D], lse [S, B, T] (EQUATIONS.md section 4), computed in fp32, o in the inputs' dtype."""
    v = values.float()
    r = torch.rsqrt(v.pow(2).mean(-1) + eps)  # [N, B, T]
    logits = torch.einsum("sd,nbtd->sbtn", queries.float(), v) * r.permute(1, 2, 0).unsqueeze(0)
    p = torch.softmax(logits, -1)
    return torch.einsum("sbtn,nbtd->sbtd", p, v).to(values.dtype), torch.logsumexp(logits, -1)


def phase2_reference(o, lse, partial, queries, eps):
    u = partial.float()
    su = torch.rsqrt(u.pow(2).mean(-1) + eps) * torch.einsum("sd,sbtd->sbt", queries.float(), u)
    beta = torch.sigmoid(su - lse).unsqueeze(-1)
    of = o.float()
    return (of + beta * (u - of)).to(o.dtype)


def block_reference(values, partial, queries, eps=1e-6):
    o, lse = phase1_reference(values, queries, eps)
    return phase2_reference(o, lse, partial, queries, eps)


def timed(fn, warmup, repeats, calls=1):
    """(median ms per call, all of them, peak bytes beyond what was allocated before). Each timing spans
    `calls` back-to-back calls between two CUDA events, divided by `calls`: the host's launch latency
    (~10 us per call) then overlaps the device's work instead of adding to it, for every side alike (an
    op that waits for the device, as cuda.attnres's input checks do, still pays it each call)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(repeats):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) / calls)
    return statistics.median(times), times, torch.cuda.max_memory_allocated() - base


def copy_bandwidth(warmup, repeats, calls):
    """Bytes per second of a 1 GiB device-to-device copy_ (read + write)."""
    src = torch.empty(2**30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    ms, _, _ = timed(lambda: dst.copy_(src), warmup, repeats, calls)
    return 2 * src.numel() / (ms * 1e-3)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--n", type=int, default=4)
    ap.add_argument("--s", type=int, default=8)
    ap.add_argument("--b", type=int, default=32)
    ap.add_argument("--t", type=int, default=1024)
    ap.add_argument("--d", type=int, default=512)
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp16", "fp32"])
    ap.add_argument("--modes", default="flashcheck,unchecked,compile,eager")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--calls", type=int, default=10, help="back-to-back calls per timing (see timed)")
    a = ap.parse_args(argv)
    modes = a.modes.split(",")
    if not torch.cuda.is_available():
        print("attnres_bench: needs a CUDA device", file=sys.stderr)
        return 2
    if set(modes) - set(MODES) or min(a.n, a.s, a.b, a.t, a.d, a.repeats, a.calls) < 1 or a.warmup < 0:
        print(f"attnres_bench: --modes from {', '.join(MODES)}; sizes and repeats >= 1", file=sys.stderr)
        return 2
    if "flashcheck" in modes or "unchecked" in modes:
        import flashcheck  # noqa: F401  (the op library: build/python on PYTHONPATH)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[a.dtype]
    size = dtype.itemsize if hasattr(dtype, "itemsize") else torch.tensor([], dtype=dtype).element_size()
    g = torch.Generator(device="cpu").manual_seed(1)
    values = torch.randn(a.n, a.b, a.t, a.d, generator=g).to("cuda", dtype)
    partial = torch.randn(a.s, a.b, a.t, a.d, generator=g).to("cuda", dtype)
    queries = (torch.randn(a.s, a.d, generator=g) / a.d ** 0.5).to("cuda", dtype)
    dh = torch.randn(a.s, a.b, a.t, a.d, generator=g).to("cuda", dtype)
    bw = copy_bandwidth(a.warmup, a.repeats, a.calls)
    phase1_bytes = (a.n * a.b * a.t * a.d + a.s * a.d + a.s * a.b * a.t * a.d) * size + a.s * a.b * a.t * 4
    device = torch.cuda.get_device_name()
    print(f"attnres_bench: {device}, N={a.n} S={a.s} B={a.b} T={a.t} D={a.d} {a.dtype}; copy bandwidth {bw / 1e12:.2f} TB/s")

    records = []
    with open(a.out, "a") as out:
        for mode in modes:
            if mode in ("flashcheck", "unchecked"):
                import flashcheck
                p1 = lambda: torch.ops.flashcheck.attnres_phase1_forward(values, queries, 1e-6)  # noqa: E731
                block = flashcheck.attnres
            elif mode == "compile":
                p1c = torch.compile(phase1_reference, dynamic=False)
                p1 = lambda: p1c(values, queries, 1e-6)  # noqa: E731
                block = torch.compile(block_reference, dynamic=False)
            else:
                p1 = lambda: phase1_reference(values, queries, 1e-6)  # noqa: E731
                block = block_reference

            def step():
                xs = [x.detach().requires_grad_() for x in (values, partial, queries)]
                h = block(*xs)
                return torch.autograd.grad(h, xs, dh)

            for what, fn in (("phase1", p1), ("step", step)):
                if mode == "unchecked":
                    with flashcheck.input_checks(False):
                        ms, times, peak = timed(fn, a.warmup, a.repeats, a.calls)
                else:
                    ms, times, peak = timed(fn, a.warmup, a.repeats, a.calls)
                metrics = {"median_ms": ms, "ms": times, "peak_bytes": peak}
                if what == "phase1":
                    metrics.update({"bytes": phase1_bytes, "bytes_per_s": phase1_bytes / (ms * 1e-3), "copy_bytes_per_s": bw,
                                    "of_copy": phase1_bytes / (ms * 1e-3) / bw})
                record = {"schema": 1, "kind": "experiment", "experiment": "attnres-bench", "subject": MODES[mode], "item": what,
                          "device": device, "commit": os.environ.get("FLASHCHECK_COMMIT", "unknown"),
                          "time": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                          "verdict": "measured", "dtype": a.dtype, "torch": torch.__version__,
                          "shape": {"N": a.n, "S": a.s, "B": a.b, "T": a.t, "D": a.d},
                          "method": f"CUDA-event median of {a.repeats} timings of {a.calls} back-to-back calls each, after {a.warmup} warm-ups",
                          "metrics": metrics}
                out.write(json.dumps(record) + "\n")
                records.append(record)
                extra = f", {metrics['bytes_per_s'] / 1e12:.2f} TB/s = {100 * metrics['of_copy']:.0f} % of copy" if what == "phase1" else ""
                print(f"{MODES[mode]:14s} {what:6s}: {ms:8.3f} ms, peak {peak / 2**20:8.1f} MiB{extra}", flush=True)

    cell = {(r["subject"], r["item"]): r["metrics"] for r in records}
    print(f"\n{'':16s}" + "".join(f" | {MODES[m]:>26s}" for m in modes))
    for what in ("phase1", "step"):
        line = f"{what:16s}"
        for m in modes:
            x = cell[(MODES[m], what)]
            text = f"{x['median_ms']:.3f} ms"
            if what == "phase1":
                text += f" {100 * x['of_copy']:.0f}%copy"
            else:
                text += f" {x['peak_bytes'] / 2**20:.0f}MiB"
            ref = cell.get(("torch.compile", what))
            if ref and m != "compile":
                text += f" {ref['median_ms'] / x['median_ms']:.2f}x"
            line += f" | {text:>26s}"
        print(line)
    print("(x: speed against torch.compile in this run; %copy: phase 1's bytes per second against the copy bandwidth)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
