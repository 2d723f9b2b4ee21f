#include "kernels/torch/ops/op_support.hpp"

#include <atomic>
#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <vector>

#include "kernels/builtin_subjects.hpp"
#include "kernels/torch/tensor_bridge.hpp"

namespace fc::kernels::pt::ops {

Mask parse_mask(c10::string_view text) {
  const std::string t(text.data(), text.size());
  if (t == "none") return Mask::none;
  if (t == "causal_tl" || t == "top_left") return Mask::causal_top_left;
  if (t == "causal_br" || t == "bottom_right") return Mask::causal_bottom_right;
  TORCH_CHECK(false, "flashcheck: unknown mask '", t, "' (none, causal_tl, causal_br)");
}

PrecisionPolicy policy_for(const at::Tensor& q, const c10::optional<c10::string_view>& text) {
  const std::optional<Format> f = format_of(q.scalar_type());
  TORCH_CHECK(f, "flashcheck: q has dtype ", q.scalar_type(), ", which is not supported (float64, float32, float16, bfloat16)");
  if (!text) return PrecisionPolicy::uniform(*f);
  try {
    return PrecisionPolicy::parse(std::string(text->data(), text->size()));
  } catch (const std::invalid_argument& e) {
    TORCH_CHECK(false, "flashcheck: bad policy '", std::string(text->data(), text->size()), "': ", e.what());
  }
}

double scale_for(const at::Tensor& q, const c10::optional<double>& scale) {
  if (scale) {
    TORCH_CHECK(std::isfinite(*scale), "flashcheck: the softmax scale must be finite, got ", *scale);
    return *scale;
  }
  return 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
}

void check_tensor(const char* op, const char* what, const at::Tensor& t, int64_t dims, at::ScalarType dtype, const at::Device& device) {
  TORCH_CHECK(t.defined(), "flashcheck.", op, ": ", what, " is undefined");
  TORCH_CHECK(t.dim() == dims, "flashcheck.", op, ": ", what, " must have ", dims, " dimensions, got shape ", t.sizes());
  TORCH_CHECK(t.scalar_type() == dtype, "flashcheck.", op, ": ", what, " has dtype ", t.scalar_type(), ", expected ", dtype);
  TORCH_CHECK(t.device() == device, "flashcheck.", op, ": ", what, " is on ", t.device(), ", expected ", device,
              " (all tensors of a call on one device)");
  TORCH_CHECK(t.numel() > 0, "flashcheck.", op, ": ", what, " is empty (shape ", t.sizes(), "): every dimension must be >= 1");
}

void check_finite(const char* op, const char* what, const at::Tensor& t) {
  TORCH_CHECK(at::isfinite(t).all().item<bool>(), "flashcheck.", op, ": ", what, " contains NaN or Inf");
}

namespace {
std::atomic<bool> input_checks{true};
}
bool input_checks_enabled() { return input_checks.load(); }
bool set_input_checks(bool enabled) { return input_checks.exchange(enabled); }

void check_all_finite(const char* op, std::initializer_list<std::pair<const at::Tensor*, const char*>> tensors) {
  if (!input_checks_enabled()) return;
  std::vector<at::Tensor> finite;
  for (const auto& [t, what] : tensors) finite.push_back(at::isfinite(*t).all());
  const at::Tensor flags = at::stack(finite).cpu();
  const bool* ok = flags.data_ptr<bool>();
  std::size_t i = 0;
  for (const auto& [t, what] : tensors) TORCH_CHECK(ok[i++], "flashcheck.", op, ": ", what, " contains NaN or Inf");
}

void check_same_shape(const char* op, const char* what, const at::Tensor& t, at::IntArrayRef shape) {
  TORCH_CHECK(t.sizes() == shape, "flashcheck.", op, ": ", what, " has shape ", t.sizes(), ", expected ", shape);
}

namespace {

struct Slot {
  std::mutex mutex;
  std::unique_ptr<Subject> subject;
};

// One instance per built-in subject, made on first use.
Slot& slot_of(const std::string& name) {
  static std::mutex registry_mutex;
  static std::map<std::string, std::unique_ptr<Slot>> slots;
  const std::lock_guard lock(registry_mutex);
  auto& slot = slots[name];
  if (!slot) {
    for (auto& s : make_builtin_subjects()) {
      if (s->info().name == name) {
        slot = std::make_unique<Slot>();
        slot->subject = std::move(s);
        break;
      }
    }
    if (!slot) {
      slots.erase(name);
      TORCH_CHECK(false, "flashcheck: no subject named ", name);
    }
  }
  return *slot;
}

}  // namespace

void run_subject(const char* op, const std::string& subject_name, const std::function<void(Subject&)>& body) {
  Slot& slot = slot_of(subject_name);
  const std::lock_guard lock(slot.mutex);
  try {
    body(*slot.subject);
  } catch (const SubjectError& e) {
    TORCH_CHECK(false, "flashcheck.", op, ": ", e.what());
  } catch (const std::invalid_argument& e) {
    TORCH_CHECK(false, "flashcheck.", op, ": ", e.what());
  }
}

void no_cuda_kernel(const char* op, const std::string& subject_name) {
  TORCH_CHECK(false, "flashcheck.", op, ": this build has no CUDA kernel ", subject_name,
              " yet; call it on CPU tensors (the CPU backends follow the same algorithm and precision policy)");
}

}  // namespace fc::kernels::pt::ops
