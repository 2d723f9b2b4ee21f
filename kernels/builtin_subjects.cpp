#include "kernels/builtin_subjects.hpp"

#include "kernels/cpu/attnres.hpp"
#include "kernels/cpu/fa1.hpp"
#include "kernels/cpu/flash_attention.hpp"
#include "kernels/cpu/hog.hpp"
#include "kernels/cpu/naive_attention.hpp"
#if FLASHCHECK_HAVE_TORCH
#include "kernels/torch/subjects.hpp"
#endif

namespace fc::kernels {

std::vector<std::unique_ptr<Subject>> make_builtin_subjects() {
  std::vector<std::unique_ptr<Subject>> subjects;
  subjects.push_back(make_cpu_naive());
  subjects.push_back(cpu::make_cpu_fa1());
  subjects.push_back(cpu::make_cpu_fa2());
  subjects.push_back(cpu::make_cpu_fa4());
  subjects.push_back(cpu::make_cpu_fa4_emulated());
  subjects.push_back(cpu::make_cpu_hog());
  subjects.push_back(cpu::make_cpu_hog_two_pass());
  subjects.push_back(cpu::make_cpu_attnres());
#if FLASHCHECK_HAVE_TORCH
  subjects.push_back(pt::make_torch_math());
  for (auto& s : pt::make_torch_sdpa_subjects()) subjects.push_back(std::move(s));
#endif
  return subjects;
}

}  // namespace fc::kernels
