// Prints the harness's power (issue 4 item 7): for each broken subject, in the fp32 and bf16
// policies, whether it was caught within N cases (each case checked under fwd, bwd and bwdbwd), after
// how many, and by what; and the false alarms of the correct control subject and of cpu.naive.
//
// Usage: harness-power [cases=200] [seed=1] [max_seq=64]
#include <cstdio>
#include <cstdlib>

#include "gradcheck/registry.hpp"
#include "gradcheck/tests/power.hpp"

using namespace fc;
using namespace fc::gradcheck;
using namespace fc::gradcheck::testing;

int main(int argc, char** argv) {
  const int cases = argc > 1 ? std::atoi(argv[1]) : 200;
  const std::uint64_t seed = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 1;
  GeneratorLimits limits;
  limits.max_seq = argc > 3 ? std::atoi(argv[3]) : 64;
  if (cases < 1 || limits.max_seq < 1) {
    std::fprintf(stderr, "usage: harness-power [cases >= 1] [seed] [max_seq >= 1]\n");
    return 2;
  }
  std::printf("harness power: each case checked under fwd, bwd, bwdbwd; at most %d cases; seed %llu; sequences up to %d\n", cases,
              static_cast<unsigned long long>(seed), limits.max_seq);
  std::printf("%-22s | %-5s %6s  %-40s | %-5s %6s  %s\n", "bug class", "fp32", "cases", "caught by", "bf16", "cases", "caught by");
  int detected32 = 0, detected16 = 0, total = 0;
  for (Bug bug : all_bugs()) {
    auto subject = make_broken_subject(bug);
    const Power a = measure_power(*subject, PrecisionPolicy::uniform(Format::fp32), cases, seed, limits);
    const Power b = measure_power(*subject, PrecisionPolicy::uniform(Format::bf16), cases, seed, limits);
    std::printf("%-22s | %-5s %6d  %-40s | %-5s %6d  %s\n", std::string(name(bug)).c_str(), a.detected ? "yes" : "NO", a.cases,
                a.caught_by.c_str(), b.detected ? "yes" : "NO", b.cases, b.caught_by.c_str());
    detected32 += a.detected, detected16 += b.detected, ++total;
  }
  std::printf("detection rate: fp32 %d/%d, bf16 %d/%d\n", detected32, total, detected16, total);
  auto control = make_broken_subject(Bug::none);
  const Registry registry = Registry::with_builtins();
  for (kernels::Subject* s : {control.get(), registry.find("cpu.naive")}) {
    for (Format f : {Format::fp32, Format::bf16, Format::fp16}) {
      const Power p = measure_power(*s, PrecisionPolicy::uniform(f), cases, seed + 1, limits);
      std::printf("false alarms, %s, %s: %s in %d cases %s\n", s->info().name.c_str(), std::string(fc::name(f)).c_str(),
                  p.detected ? "YES" : "none", p.cases, p.caught_by.c_str());
    }
  }
  return 0;
}
