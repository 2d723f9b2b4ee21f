// cuda.fa3's key-tiled backward, its launch order (key_tile_order.hpp): host code, so this runs without a GPU (in CI).
#include <gtest/gtest.h>

#include <iostream>
#include <string>
#include <vector>

#include "kernels/cuda/key_tile_order.hpp"

namespace fc::kernels::cuda {
namespace {

// Every tail length on a range of shapes (key tiles 1 to 10, one to twelve head pairs): the order names every key
// tile of every head pair exactly once; the pairs before the tail go head by head, key tile fastest, as a grid of one
// CTA per tile always did; the tail holds the last tail_heads pairs, its key tiles in ascending order (under a causal
// mask, longest first), and within a key tile its pairs in ascending order.
TEST(KeyTileOrder, IsABijectionHeadByHeadThenKeyTileSlowest) {
  int shapes = 0;
  for (int batch : {1, 2, 3}) {
    for (int heads_kv : {1, 2, 4}) {
      for (int seq_k : {1, 127, 128, 129, 300, 1280}) {
        AttentionShapeParams s;
        s.batch = batch, s.heads_kv = heads_kv, s.heads_q = 2 * heads_kv, s.seq_q = seq_k, s.seq_k = seq_k, s.head_dim = 128;
        const int key_tiles = (seq_k + 127) / 128, pairs = batch * heads_kv, tiles = key_tiles * pairs;
        for (int tail = 0; tail <= pairs; ++tail) {
          const KeyTileOrder o = key_tile_order(s, 128, tail);
          const std::string what = "B " + std::to_string(batch) + ", Hkv " + std::to_string(heads_kv) + ", Nk " + std::to_string(seq_k) + ", tail " + std::to_string(tail);
          ASSERT_EQ(o.tail_first, (pairs - tail) * key_tiles) << what;
          std::vector<int> seen(static_cast<std::size_t>(tiles), 0);
          int last_key_tile = -1, last_pair = -1;
          for (int tile = 0; tile < tiles; ++tile) {
            const KeyTile at = key_tile_at(tile, o);
            ASSERT_TRUE(at.k0 % 128 == 0 && at.k0 >= 0 && at.k0 < seq_k) << what << ", tile " << tile << ": k0 " << at.k0;
            ASSERT_TRUE(at.hk >= 0 && at.hk < heads_kv && at.b >= 0 && at.b < batch) << what << ", tile " << tile;
            const int key_tile = at.k0 / 128, pair = at.b * heads_kv + at.hk;
            ++seen[static_cast<std::size_t>(pair * key_tiles + key_tile)];
            if (tile < o.tail_first) {
              EXPECT_EQ(pair * key_tiles + key_tile, tile) << what << ": head by head before the tail";
            } else {
              EXPECT_GE(pair, pairs - tail) << what << ", tile " << tile << ": the tail holds the last pairs";
              const bool later = key_tile > last_key_tile || (key_tile == last_key_tile && pair > last_pair);
              EXPECT_TRUE(tile == o.tail_first || later) << what << ", tile " << tile << ": key tile slowest in the tail";
              last_key_tile = key_tile, last_pair = pair;
            }
          }
          for (int i = 0; i < tiles; ++i) EXPECT_EQ(seen[static_cast<std::size_t>(i)], 1) << what << ": key tile " << i % key_tiles << " of pair " << i / key_tiles;
          ++shapes;
        }
      }
    }
  }
  std::cout << shapes << " shapes and tails: a bijection, head by head, then key tile slowest\n";
}

}  // namespace
}  // namespace fc::kernels::cuda
