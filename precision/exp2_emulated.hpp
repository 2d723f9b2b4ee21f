// FA4's 2^x on the FMA pipes: 2^n p(f) with n = round(x), f = x - n in [-1/2, 1/2], p the minimax cubic
// for 2^f there in relative error (Remez exchange in double on p(f) / 2^f - 1, equioscillating at 7.478e-5,
// then each coefficient rounded to float; the float Horner sequence has max relative error 7.484e-5 =
// 2^-13.7 over every float of the domain: 0.02 u of bf16, 0.15 u of fp16, 2^10 u of fp32).
//
// One source for cpu.fa4.emulated (g++) and cuda.fa4's exp2_fraction (nvcc), so that exp2_emulated gives the
// same bits on both (the kernels' outputs still differ by their accumulation orders). Every step is an
// FMA-pipe or ALU instruction: none uses the special-function unit (XU), whose MUFU.EX2 this replaces. (A
// first version took floor(x) by floorf and n by a float-to-int conversion: FRND and F2I both issue to the XU
// on sm_90, so each emulated exponential cost the XU two instructions instead of one; ncu counted the XU's
// instructions rising by half at exp2_fraction 0.5, kernels/cuda/NOTES.md.) Here n comes from the rounding of
// x + 1.5 * 2^23, whose low mantissa bits then hold n in two's complement, and 2^n is added to p's exponent
// field by an integer shift-and-add. (Ties of that rounding do not matter: p(1/2) = 2 p(-1/2) in float.)
//
// Domain: x is clamped to [-125, 126], where 2^n p(f) is a normal float. The softmax passes arguments <= 0
// (up to rounding), or <= tau with FA4's selective rescaling (tau <= 30). Below -125 the value is
// 2^-125 p(0), about 2.35e-38, where 2^x is smaller still: a P weight below 2^-100 of the row's largest, or
// in P V an absolute change of at most Nk 2^-125 max|V|. A NaN argument gives NaN.
#pragma once

#include <cmath>
#include <cstdint>

#include "precision/host_device.hpp"

#if defined(__FAST_MATH__)
#error "exp2_emulated needs (x + 1.5 * 2^23) - 1.5 * 2^23 evaluated as written: -ffast-math folds it to x"
#endif

namespace fc {

FC_HD inline float exp2_emulated(float x) {
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: y + kRound rounds y to an integer
  const float y = fminf(fmaxf(x, -125.0f), 126.0f);
  const float t = y + kRound;  // (t's mantissa holds 2^22 + n; its bits are 0x4B400000 + n)
  const float n = t - kRound;  // exact
  const float f = y - n;       // exact, in [-1/2, 1/2]
  float p = fmaf(0.0551716685295105f, f, 0.2426111251115799f);
  p = fmaf(p, f, 0.6932609677314758f);
  p = fmaf(p, f, 0.9999280571937561f);
  // (bits(t) << 23 keeps n's low 9 bits, as 0x4B400000's low 9 bits are 0: n << 23 modulo 2^32)
  const float r = float_from_bits(bits_of(p) + (bits_of(t) << 23));
  return x == x ? r : x;  // (fmaxf took a NaN to -125)
}

}  // namespace fc
