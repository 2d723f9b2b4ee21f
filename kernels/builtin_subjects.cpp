#include "kernels/builtin_subjects.hpp"

#include "kernels/cpu/attnres.hpp"
#include "kernels/cpu/fa1.hpp"
#include "kernels/cpu/flash_attention.hpp"
#include "kernels/cpu/hog.hpp"
#include "kernels/cpu/naive_attention.hpp"
#if FLASHCHECK_HAVE_CUDA
#include "kernels/cuda/cuda_subjects.hpp"
#endif
#if FLASHCHECK_HAVE_TORCH
#include "kernels/torch/subjects.hpp"
#endif

namespace fc::kernels {

std::vector<std::unique_ptr<Subject>> make_builtin_subjects() {
  std::vector<std::unique_ptr<Subject>> subjects;
  subjects.push_back(make_cpu_naive());
  subjects.push_back(cpu::make_cpu_fa1());
  subjects.push_back(cpu::make_cpu_fa2());
  subjects.push_back(cpu::make_cpu_fa3());
  subjects.push_back(cpu::make_cpu_fa3_fp8());
  subjects.push_back(cpu::make_cpu_fa4());
  subjects.push_back(cpu::make_cpu_fa4_emulated());
  subjects.push_back(cpu::make_cpu_hog());
  subjects.push_back(cpu::make_cpu_hog_two_pass());
  subjects.push_back(cpu::make_cpu_attnres());
#if FLASHCHECK_HAVE_CUDA
  for (auto& s : cuda::make_cuda_subjects()) subjects.push_back(std::move(s));
#endif
#if FLASHCHECK_HAVE_TORCH
  subjects.push_back(pt::make_torch_math());
  for (auto& s : pt::make_torch_sdpa_subjects()) subjects.push_back(std::move(s));
#endif
  return subjects;
}

std::vector<std::string> unavailable_builtin_subjects() {
  std::vector<std::string> notes;
#if FLASHCHECK_HAVE_CUDA
  if (const std::string why = cuda::device_unavailable_reason(); !why.empty()) notes.push_back("cuda.*: " + why);
#else
  notes.push_back("cuda.*: this build has no CUDA kernels (configure found no nvcc >= 12)");
#endif
#if FLASHCHECK_HAVE_TORCH
  if (pt::make_torch_sdpa_subjects().empty()) notes.push_back("torch.sdpa.*: need libtorch >= 2 with a CUDA device");
#else
  notes.push_back("torch.*: this build has no libtorch adapters (configure found no libtorch)");
#endif
  return notes;
}

}  // namespace fc::kernels
