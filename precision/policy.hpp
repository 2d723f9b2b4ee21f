// A mixed-precision policy: how a subject stores each tensor, what it accumulates in, and how it
// rounds what it stores. Subjects receive one; every record prints it.
//
// Text form (CLI --dtype, records): a base format, then overrides, comma-separated:
//   "bf16"                          all tensors bf16, statistics fp32, accumulate fp32, RN
//   "bf16,o=fp32,round=sr,seed=7"   the same, O stored in fp32, stochastic rounding with seed 7
// Keys (any case): q k v o do grad stats acc round seed, each at most once. to_string() writes the
// shortest such form, and parse(to_string(p)) == p.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "precision/format.hpp"
#include "precision/philox.hpp"
#include "precision/rounding.hpp"

namespace fc {

// Tensor roles. `dout` covers every incoming cotangent (dO, and ddQ/ddK/ddV of the double backward);
// `grad` every computed gradient (dQ, dK, dV and the second-order outputs); `stats` the saved
// softmax statistics (log-sum-exp L, D = rowsum(dO o O), AttnRes lse).
enum class Role : std::uint8_t { q, k, v, o, dout, grad, stats };
inline constexpr std::size_t kRoleCount = 7;
inline constexpr std::array<Role, kRoleCount> kAllRoles = {Role::q,    Role::k,    Role::v,
                                                           Role::o,    Role::dout, Role::grad,
                                                           Role::stats};

std::string_view name(Role r);  // "q" "k" "v" "o" "do" "grad" "stats"

struct PrecisionPolicy {
  // Default: everything fp32 (uniform(fp32)).
  std::array<Format, kRoleCount> storage = {Format::fp32, Format::fp32, Format::fp32, Format::fp32,
                                            Format::fp32, Format::fp32, Format::fp32};
  Format accumulate = Format::fp32;
  Rounding rounding = Rounding::nearest_even;  // how outputs are rounded when stored
  std::uint64_t seed = 0;                      // stochastic rounding seed

  // Every tensor in `storage`, statistics and accumulation in fp32 (fp64 when storage is fp64). e4m3
  // (FP8) is an operand format: uniform(e4m3) has Q, K and V in e4m3 and O, dO and the gradients in
  // bf16, as FA3's FP8 forward writes a 16-bit O; the text "e4m3" parses to it.
  static PrecisionPolicy uniform(Format storage);
  // Throws std::invalid_argument naming the offending token.
  static PrecisionPolicy parse(std::string_view text);

  Format format(Role r) const { return storage[static_cast<std::size_t>(r)]; }
  void set(Role r, Format f) { storage[static_cast<std::size_t>(r)] = f; }
  std::string to_string() const;

  // The random words for stochastic rounding of tensor role r. Stream ids 1..kRoleCount belong to
  // the roles; ids from 256 up are free for other uses (e.g. sampling inputs).
  RandomStream stream(Role r) const {
    return RandomStream{seed, static_cast<std::uint32_t>(r) + 1};
  }

  // The seed matters only under stochastic rounding, so only then does it take part in equality.
  friend bool operator==(const PrecisionPolicy& a, const PrecisionPolicy& b) {
    return a.storage == b.storage && a.accumulate == b.accumulate && a.rounding == b.rounding &&
           (a.rounding != Rounding::stochastic || a.seed == b.seed);
  }
};

}  // namespace fc
