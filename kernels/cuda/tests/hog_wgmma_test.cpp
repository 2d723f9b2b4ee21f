// Which form of Flash Hog's passes a problem gets (hog_wgmma.hpp): wgmma exactly where TMA can read every operand
// at head dim 64, mma.sync elsewhere. A silent fall-back would leave the wgmma passes untested by every suite that
// runs cuda.hog at d = 64, so the choice itself is tested. (Host code only: no device is needed; the passes'
// results are the harness's, the agreement test's and the small-shape sweep's, cuda_attention_test.cpp.)
#include <gtest/gtest.h>

#include <cstdint>

#include "kernels/cuda/hog_wgmma.hpp"

namespace fc::kernels::cuda {
namespace {

// [B = 2, H = 4, N = 300, d] contiguous (bhnd) operands at a 16-byte aligned base.
HogParams contiguous(int d) {
  HogParams p;
  p.shape.batch = 2, p.shape.heads_q = 4, p.shape.heads_kv = 2, p.shape.seq_q = 300, p.shape.seq_k = 300, p.shape.head_dim = d;
  alignas(16) static const unsigned char base[16] = {};
  const auto q_like = [&](std::int64_t heads) { return Strided{base, heads * 300 * d, 300 * d, d}; };
  p.q = p.dout = p.ddq = p.o = q_like(4);
  p.k = p.v = p.ddk = p.ddv = q_like(2);
  return p;
}

TEST(HogWgmma, TakesHeadDim64WithTmaReadableOperands) {
  EXPECT_TRUE(hog_wgmma_supports(contiguous(64)));
  HogParams bnhd = contiguous(64);  // [B, N, H, d]: rows H d apart, heads d
  bnhd.q = bnhd.dout = bnhd.ddq = Strided{bnhd.q.data, 300 * 4 * 64, 64, 4 * 64};
  EXPECT_TRUE(hog_wgmma_supports(bnhd));
}

TEST(HogWgmma, LeavesEverythingElseToTheMmaSyncPasses) {
  EXPECT_FALSE(hog_wgmma_supports(contiguous(128))) << "d = 128: the accumulators do not fit beside the four tiles";
  HogParams odd_base = contiguous(64);
  odd_base.ddk.data = static_cast<const unsigned char*>(odd_base.ddk.data) + 2;  // 2-byte aligned
  EXPECT_FALSE(hog_wgmma_supports(odd_base));
  HogParams odd_stride = contiguous(64);
  odd_stride.dout.row = 68;  // not a multiple of 8 elements (16 bytes)
  EXPECT_FALSE(hog_wgmma_supports(odd_stride));
  HogParams many_heads = contiguous(64);
  many_heads.shape.heads_q = 70000, many_heads.shape.heads_kv = 70000;
  EXPECT_FALSE(hog_wgmma_supports(many_heads));
}

}  // namespace
}  // namespace fc::kernels::cuda
