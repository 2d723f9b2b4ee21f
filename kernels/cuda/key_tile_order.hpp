// The launch order of cuda.fa3's key-tiled backward pass (fa3_backward.cu): which key tile of which head a tile
// index names. Host and device: the pass computes it per tile, and a CPU test (tests/key_tile_order_test.cpp) checks
// that it is a bijection and that its tail goes longest first.
#pragma once

#include "kernels/cuda/attention_params.hpp"

#ifdef __CUDACC__
#define FC_KEY_TILE_ORDER_FN __host__ __device__ inline
#else
#define FC_KEY_TILE_ORDER_FN inline
#endif

namespace fc::kernels::cuda {

// A key tile of the pass: its first key, kv head and batch.
struct KeyTile {
  int k0, hk, b;
};

// Tiles are numbered key tile fastest, then kv head, then batch (a head pair: (batch, kv head)): the launch order of
// a grid of one CTA per tile, so that the tiles in work at once share their heads' Q and dO in L2. The last
// tail_heads head pairs are numbered the other way, key tile slowest. Under a causal mask key tile kt sees about
// (Nq - 128 kt) / 64 query tiles, so head by head the grid's last wave would start with the last heads' longest tiles
// and leave most SMs idle behind them; key tile slowest starts all of those heads' long tiles first (NOTES: "The
// causal backward's launch order").
struct KeyTileOrder {
  int key_tiles = 0, heads_kv = 0, rows_per_tile = 0;
  int tail_first = 0, tail_heads = 0;  // the tail's first tile, (pairs - tail_heads) key_tiles, and its head pairs
};

// (tail_heads in [0, batch heads_kv]; the caller clamps)
FC_KEY_TILE_ORDER_FN KeyTileOrder key_tile_order(const AttentionShapeParams& s, int rows_per_tile, int tail_heads) {
  KeyTileOrder o;
  o.key_tiles = (s.seq_k + rows_per_tile - 1) / rows_per_tile, o.heads_kv = s.heads_kv, o.rows_per_tile = rows_per_tile;
  o.tail_heads = tail_heads, o.tail_first = (s.batch * s.heads_kv - tail_heads) * o.key_tiles;
  return o;
}

FC_KEY_TILE_ORDER_FN KeyTile key_tile_at(int tile, const KeyTileOrder& o) {
  int head_pair = 0, key_tile = 0;
  if (tile >= o.tail_first) {
    const int j = tile - o.tail_first;
    key_tile = j / o.tail_heads;
    head_pair = o.tail_first / o.key_tiles + (j - key_tile * o.tail_heads);
  } else {
    head_pair = tile / o.key_tiles;
    key_tile = tile - head_pair * o.key_tiles;
  }
  return {key_tile * o.rows_per_tile, head_pair % o.heads_kv, head_pair / o.heads_kv};
}

}  // namespace fc::kernels::cuda

#undef FC_KEY_TILE_ORDER_FN
