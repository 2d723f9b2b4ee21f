// FA4's 2^x on the FMA pipes: 2^n p(f) with n = round(x), f = x - n in [-1/2, 1/2], p the minimax cubic
// for 2^f there in relative error (fitted by Remez exchange; the float coefficients' Horner sequence has
// max relative error 7.49e-5 = 2^-13.7: 0.02 u of bf16, 0.15 u of fp16, 2^10 u of fp32).
//
// One source for cpu.fa4.emulated (g++) and cuda.fa4 / cuda.fa3.fp8 (nvcc), so both give the same bits.
// Every step is an FMA-pipe or ALU instruction: none uses the special-function unit (XU), whose
// MUFU.EX2 this replaces. (A first version took floor(x) by floorf and n by a float-to-int conversion:
// FRND and F2I both issue to the XU on sm_90, so each emulated exponential cost the XU two instructions
// instead of one; ncu counted the XU's instructions rising by half at exp2_fraction 0.5, kernels/cuda/
// NOTES.md.) Here n comes from the rounding of x + 1.5 * 2^23, whose low mantissa bits then hold n in
// two's complement, and 2^n is added to p's exponent field by an integer shift-and-add.
//
// Domain: x <= 126 (callers pass softmax arguments, <= 0 up to rounding). Below -125 x is clamped to -125:
// 2^-125 p(0) (~2.35e-38) is returned where 2^x is smaller still, because the exponent add cannot build a
// subnormal. Every caller adds the value to a row sum >= 1 or weights a V row by it, a change below
// 2^-100 of the largest term; the CPU twin returns the same value, so the twins agree bit for bit.
#pragma once

#include <cmath>
#include <cstdint>

#include "precision/host_device.hpp"

namespace fc {

FC_HD inline float exp2_emulated(float x) {
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: x + kRound rounds x to an integer (ties to even)
  x = fmaxf(x, -125.0f);
  const float t = x + kRound;  // (t's mantissa holds 2^22 + n; its bits are 0x4B400000 + n)
  const float n = t - kRound;  // exact
  const float f = x - n;       // exact, in [-1/2, 1/2]
  float p = fmaf(0.0551716685295105f, f, 0.2426111251115799f);
  p = fmaf(p, f, 0.6932609677314758f);
  p = fmaf(p, f, 0.9999280571937561f);
  // (bits(t) << 23 keeps n's low 9 bits, as 0x4B400000's low 9 bits are 0: n << 23 modulo 2^32)
  return float_from_bits(bits_of(p) + (bits_of(t) << 23));
}

}  // namespace fc
