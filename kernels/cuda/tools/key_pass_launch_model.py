#!/usr/bin/env python3
"""A list-scheduling model of cuda.fa3's causal key-tiled backward pass and its launch order (bwd_tail).

One CTA per SM; CTAs start in launch order as SMs free; a key tile's time is the query tiles of 64 rows that see it
plus a fixed 1 (its K/V load and dK/dV stores in step units). Prints the makespan's excess over the ideal (all work
spread evenly) for each tail T: the last T (batch, kv head) pairs launched key tile slowest (key_tile_order.hpp).
This made the prediction in kernels/cuda/NOTES.md, "The causal backward's launch order"; the measurement there shows
what it leaves out (the overlapped dQ conversion on the last wave's idle SMs, and L2).

Usage: key_pass_launch_model.py [--sms 132] [--tails 0,2,4,8,16,32]
"""
import argparse
import heapq


def makespan(order, cost, sms):
    free_at = [0.0] * sms
    for tile in order:
        start = heapq.heappop(free_at)
        heapq.heappush(free_at, start + cost[tile])
    return max(free_at)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sms", type=int, default=132)
    ap.add_argument("--tails", default="0,2,4,8,16,32")
    args = ap.parse_args()
    tails = [int(t) for t in args.tails.split(",")]
    # the bench's shapes at d = 128: B H = 16384 tokens x 16 heads / N
    for n, pairs in ((4096, 64), (8192, 32), (16384, 16)):
        key_tiles = n // 128
        cost = {(p, k): (n - 128 * k) // 64 + 1 for p in range(pairs) for k in range(key_tiles)}
        ideal = sum(cost.values()) / args.sms
        cells = []
        for t in tails:
            t = min(t, pairs)
            head_by_head = [(p, k) for p in range(pairs - t) for k in range(key_tiles)]
            tail = [(p, k) for k in range(key_tiles) for p in range(pairs - t, pairs)]
            cells.append(f"T={t}: +{100 * (makespan(head_by_head + tail, cost, args.sms) / ideal - 1):.1f} %")
        print(f"N = {n} (pairs {pairs}, key tiles {key_tiles}): " + ", ".join(cells))


if __name__ == "__main__":
    main()
