// A test's own AttnRes call (kernels/tests/attnres_test.cpp, kernels/cuda/tests/cuda_attnres_test.cpp):
// inputs drawn from N(0, sigma^2) (queries N(0, 1/D)) and stored in the policy's formats, outputs
// allocated per role, and the fwd and bwd calls of a subject on them.
#pragma once

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "kernels/attnres_call.hpp"
#include "kernels/tensor_io.hpp"

namespace fc::kernels::testing {

// A tensor the test owns, in any format.
struct Buffer {
  std::vector<std::byte> bytes;
  TensorView view_;
  Buffer() = default;
  Buffer(Format f, std::array<std::int64_t, 4> shape) {
    bytes.resize(static_cast<std::size_t>(shape[0] * shape[1] * shape[2] * shape[3]) * static_cast<std::size_t>(format_info(f).bits / 8));
    view_ = contiguous_view(bytes.data(), f, shape);
  }
  const TensorView& view() const { return view_; }
  void fill(const std::vector<double>& x) { write_from(view_, std::span<const double>(x), Rounding::nearest_even); }
};

struct AttnResRun {
  AttnResShape shape;
  PrecisionPolicy policy;
  std::vector<double> v, u, w, dh;
  Buffer bv, bu, bw, bdh, o, o_scale, lse, h, h_scale, dv, du, dw;

  AttnResRun(AttnResShape s, PrecisionPolicy p, unsigned seed, double sigma = 1.0) : shape(s), policy(p) {
    std::mt19937_64 gen(seed);
    std::normal_distribution<double> normal;
    const auto draw = [&](std::size_t n, double scale) {
      std::vector<double> x(n);
      for (double& e : x) e = scale * normal(gen);
      return x;
    };
    const std::int64_t N = s.sources, B = s.batch, T = s.tokens, D = s.dim, S = s.layers;
    v = draw(static_cast<std::size_t>(N * B * T * D), sigma), u = draw(static_cast<std::size_t>(S * B * T * D), sigma);
    w = draw(static_cast<std::size_t>(S * D), 1 / std::sqrt(static_cast<double>(D))), dh = draw(static_cast<std::size_t>(S * B * T * D), 1.0);
    bv = Buffer(p.format(Role::v), {N, B, T, D}), bu = Buffer(p.format(Role::v), {S, B, T, D});
    bw = Buffer(p.format(Role::q), {1, 1, S, D}), bdh = Buffer(p.format(Role::dout), {S, B, T, D});
    bv.fill(v), bu.fill(u), bw.fill(w), bdh.fill(dh);
    v = read_as_double(bv.view()), u = read_as_double(bu.view()), w = read_as_double(bw.view()), dh = read_as_double(bdh.view());
    o = Buffer(p.format(Role::o), {S, B, T, D}), h = Buffer(p.format(Role::o), {S, B, T, D});
    if (attnres_scaled_outputs(p)) o_scale = Buffer(Format::fp32, {S, B, T, 1}), h_scale = Buffer(Format::fp32, {S, B, T, 1});
    lse = Buffer(p.format(Role::stats), {S, B, T, 1});
    dv = Buffer(p.format(Role::grad), {N, B, T, D}), du = Buffer(p.format(Role::grad), {S, B, T, D});
    dw = Buffer(p.format(Role::grad), {1, 1, S, D});
  }
  AttnResCall call() const {
    AttnResCall c;
    c.shape = shape, c.policy = policy;
    c.values = bv.view(), c.partial = bu.view(), c.queries = bw.view();
    return c;
  }
  void forward(Subject& s) {
    AttnResCall c = call();
    c.out_o = o.view(), c.out_o_scale = o_scale.view(), c.out_lse = lse.view(), c.out_h = h.view(), c.out_h_scale = h_scale.view();
    s.run_attnres(Op::fwd, c);
  }
  void backward(Subject& s) {
    AttnResCall c = call();
    c.o = o.view(), c.o_scale = o_scale.view(), c.lse = lse.view(), c.dh = bdh.view();
    c.d_values = dv.view(), c.d_partial = du.view(), c.d_queries = dw.view();
    s.run_attnres(Op::bwd, c);
  }
  std::vector<double> values_of(const Buffer& b, const Buffer& scale) const { return read_rows_as_double(b.view(), scale.view()); }
};

}  // namespace fc::kernels::testing
