#include "gradcheck/tests/power.hpp"

#include "gradcheck/checks.hpp"

namespace fc::gradcheck::testing {

Power measure_power(kernels::Subject& subject, const PrecisionPolicy& policy, int max_cases, std::uint64_t seed,
                    const GeneratorLimits& limits) {
  const rc::Gen<Case> gen = case_generator(subject.info(), policy, limits);
  rc::Random random(seed);
  Power p;
  for (int i = 0; i < max_cases; ++i) {
    const Case c = gen(random.split(), case_size(i, max_cases)).value();
    p.cases = i + 1;
    for (kernels::Op op : subject.info().ops) {
      const CaseReport r = check_case(subject, c, op, VerdictOptions{});
      if (r.pass || !r.discarded.empty()) continue;
      p.detected = true;
      p.caught_by = std::string(kernels::name(op)) + ": ";
      if (!r.error.empty()) p.caught_by += "subject error";
      for (const auto& t : r.tensors) {
        if (!t.pass) p.caught_by += t.tensor + " ";
      }
      for (const auto& prop : r.properties) {
        if (!prop.pass) p.caught_by += prop.name + " ";
      }
      return p;
    }
  }
  return p;
}

}  // namespace fc::gradcheck::testing
