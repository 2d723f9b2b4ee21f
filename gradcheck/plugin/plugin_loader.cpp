#include "gradcheck/plugin/plugin_loader.hpp"

#include <dlfcn.h>

#include <cctype>
#include <cstring>
#include <filesystem>

#include "gradcheck/plugin/flashcheck_plugin.h"

namespace fc::gradcheck {
namespace {

// The C ABI's enums are the C++ enums' values: casts between them are safe only while these hold.
static_assert(FC_FORMAT_FP64 == static_cast<int>(Format::fp64) && FC_FORMAT_FP32 == static_cast<int>(Format::fp32) &&
              FC_FORMAT_FP16 == static_cast<int>(Format::fp16) && FC_FORMAT_BF16 == static_cast<int>(Format::bf16));
static_assert(FC_OP_FWD == static_cast<int>(kernels::Op::fwd) && FC_OP_BWD == static_cast<int>(kernels::Op::bwd) &&
              FC_OP_BWDBWD == static_cast<int>(kernels::Op::bwdbwd));
static_assert(FC_MASK_NONE == static_cast<int>(kernels::Mask::none) &&
              FC_MASK_CAUSAL_TOP_LEFT == static_cast<int>(kernels::Mask::causal_top_left) &&
              FC_MASK_CAUSAL_BOTTOM_RIGHT == static_cast<int>(kernels::Mask::causal_bottom_right));
static_assert(FC_ROUNDING_NEAREST_EVEN == static_cast<int>(Rounding::nearest_even) &&
              FC_ROUNDING_TOWARD_ZERO == static_cast<int>(Rounding::toward_zero) &&
              FC_ROUNDING_STOCHASTIC == static_cast<int>(Rounding::stochastic));
static_assert(FC_ROLE_Q == static_cast<int>(Role::q) && FC_ROLE_K == static_cast<int>(Role::k) && FC_ROLE_V == static_cast<int>(Role::v) &&
              FC_ROLE_O == static_cast<int>(Role::o) && FC_ROLE_DOUT == static_cast<int>(Role::dout) &&
              FC_ROLE_GRAD == static_cast<int>(Role::grad) && FC_ROLE_STATS == static_cast<int>(Role::stats));

constexpr int32_t kMaxSubjects = 256;  // a sanity bound: a garbage count must not allocate the world

fc_tensor to_c(const kernels::TensorView& t) {
  fc_tensor c{};
  c.data = t.data;
  c.format = static_cast<int32_t>(t.format);
  for (int i = 0; i < 4; ++i) c.shape[i] = t.shape[i], c.strides[i] = t.strides[i];
  return c;
}

fc_attention_call to_c(const kernels::AttentionCall& a) {
  fc_attention_call c{};
  c.batch = a.shape.batch, c.heads_q = a.shape.heads_q, c.heads_kv = a.shape.heads_kv;
  c.seq_q = a.shape.seq_q, c.seq_k = a.shape.seq_k, c.head_dim = a.shape.head_dim, c.head_dim_v = a.shape.head_dim_v;
  c.mask = static_cast<int32_t>(a.mask);
  c.scale = a.scale;
  for (Role r : kAllRoles) c.formats[static_cast<int>(r)] = static_cast<int32_t>(a.policy.format(r));
  c.accumulate = static_cast<int32_t>(a.policy.accumulate);
  c.rounding = static_cast<int32_t>(a.policy.rounding);
  c.seed = a.policy.seed;
  c.q = to_c(a.q), c.k = to_c(a.k), c.v = to_c(a.v), c.o = to_c(a.o), c.lse = to_c(a.lse), c.dout = to_c(a.dout);
  c.ddq = to_c(a.ddq), c.ddk = to_c(a.ddk), c.ddv = to_c(a.ddv);
  c.out_o = to_c(a.out_o), c.out_lse = to_c(a.out_lse), c.dq = to_c(a.dq), c.dk = to_c(a.dk), c.dv = to_c(a.dv);
  c.dq2 = to_c(a.dq2), c.dk2 = to_c(a.dk2), c.dv2 = to_c(a.dv2), c.ddo = to_c(a.ddo);
  return c;
}

class PluginSubject final : public kernels::Subject {
 public:
  PluginSubject(const fc_subject& s, kernels::SubjectInfo info) : s_(s), info_(std::move(info)) {}
  const kernels::SubjectInfo& info() const override { return info_; }
  void run(kernels::Op op, const kernels::AttentionCall& call) override {
    kernels::validate_call(info_, op, call);
    const fc_attention_call c = to_c(call);
    char message[1024] = {0};
    const int32_t code = s_.run(s_.context, static_cast<int32_t>(op), &c, message, sizeof message);
    message[sizeof message - 1] = '\0';
    if (code != 0) {
      throw kernels::SubjectError(info_.name + ": " + (message[0] ? message : "failed") + " (error code " + std::to_string(code) + ")");
    }
  }

 private:
  fc_subject s_;
  kernels::SubjectInfo info_;
};

bool valid_name(const char* n) {
  if (n == nullptr || *n == '\0') return false;
  for (const char* p = n; *p; ++p) {
    if (!std::isalnum(static_cast<unsigned char>(*p)) && *p != '_' && *p != '-' && *p != '.') return false;
  }
  return true;
}

kernels::SubjectInfo info_of(const fc_subject& s, const std::string& path) {
  const auto bad = [&](const std::string& why) {
    return PluginError("plugin " + path + ": subject '" + (s.name ? s.name : "(null)") + "': " + why);
  };
  if (!valid_name(s.name)) throw bad("name must be letters, digits, '_', '-', '.'");
  if (s.run == nullptr) throw bad("run is NULL");
  if (s.head_dim_count < 0 || s.head_dim_count > 16) throw bad("head_dim_count must be 0..16");
  kernels::SubjectInfo info;
  info.name = std::string("plugin.") + s.name;
  info.description = s.description ? s.description : "";
  info.family = kernels::Family::attention;
  for (kernels::Op op : {kernels::Op::fwd, kernels::Op::bwd, kernels::Op::bwdbwd}) {
    if (s.ops & (1u << static_cast<int>(op))) info.ops.push_back(op);
  }
  for (Format f : kAllFormats) {
    if (s.formats & (1u << static_cast<int>(f))) info.formats.push_back(f);
  }
  for (kernels::Mask m : {kernels::Mask::none, kernels::Mask::causal_top_left, kernels::Mask::causal_bottom_right}) {
    if (s.masks & (1u << static_cast<int>(m))) info.masks.push_back(m);
  }
  if (info.ops.empty()) throw bad("declares no ops");
  if (info.formats.empty()) throw bad("declares no formats");
  if (info.masks.empty()) throw bad("declares no masks");
  const bool has_fwd = s.ops & (1u << FC_OP_FWD);
  if (!has_fwd) throw bad("declares bwd or bwdbwd without fwd (the harness needs its own O and L to call bwd)");
  if (s.ops >> 3 != 0 || s.formats >> 4 != 0 || s.masks >> 3 != 0) throw bad("sets bits of ops, formats or masks that name nothing");
  if (s.max_head_dim < 0 || s.max_head_dim > 1024) throw bad("max_head_dim must be 0 (default 256) to 1024");
  info.max_head_dim = s.max_head_dim > 0 ? s.max_head_dim : 256;
  for (int i = 0; i < s.head_dim_count; ++i) {
    if (s.head_dims[i] < 1 || s.head_dims[i] > info.max_head_dim) {
      throw bad("head_dims[" + std::to_string(i) + "] = " + std::to_string(s.head_dims[i]) + " is outside [1, max_head_dim = " +
                std::to_string(info.max_head_dim) + "]");
    }
    info.head_dims.push_back(s.head_dims[i]);
  }
  if (s.max_seq < 0) throw bad("max_seq must be >= 0 (0: no limit)");
  info.max_seq = s.max_seq;
  info.gqa = s.flags & FC_SUBJECT_GQA;
  info.separate_dv = s.flags & FC_SUBJECT_SEPARATE_DV;
  info.returns_lse = s.flags & FC_SUBJECT_RETURNS_LSE;
  info.deterministic = s.flags & FC_SUBJECT_DETERMINISTIC;
  info.stochastic_rounding = s.flags & FC_SUBJECT_STOCHASTIC_ROUNDING;
  return info;
}

}  // namespace

LoadedPlugin load_plugin_file(const std::string& path) {
  if (!std::filesystem::exists(path)) throw PluginError("plugin " + path + ": no such file");
  // A relative path without a slash would make dlopen search the library path instead.
  const std::string where = path.find('/') == std::string::npos ? "./" + path : path;
  void* handle = dlopen(where.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* e = dlerror();
    throw PluginError("plugin " + path + ": cannot load: " + (e ? e : "unknown error"));
  }
  LoadedPlugin loaded;
  loaded.library = std::shared_ptr<void>(handle, [](void* h) { dlclose(h); });
  using VersionFn = int32_t (*)();
  using SubjectsFn = int32_t (*)(const fc_subject**, int32_t*, char*, size_t);
  const auto version = reinterpret_cast<VersionFn>(dlsym(handle, "flashcheck_plugin_abi_version"));
  const auto subjects = reinterpret_cast<SubjectsFn>(dlsym(handle, "flashcheck_plugin_subjects"));
  if (version == nullptr || subjects == nullptr) {
    throw PluginError("plugin " + path + ": not a flashcheck plugin: missing symbol " +
                      (version == nullptr ? "flashcheck_plugin_abi_version" : "flashcheck_plugin_subjects") +
                      " (see gradcheck/plugin/flashcheck_plugin.h)");
  }
  const int32_t v = version();
  if (v != FLASHCHECK_PLUGIN_ABI_VERSION) {
    throw PluginError("plugin " + path + ": built for plugin ABI version " + std::to_string(v) + ", this flashcheck speaks version " +
                      std::to_string(FLASHCHECK_PLUGIN_ABI_VERSION) + "; rebuild it against this flashcheck_plugin.h");
  }
  const fc_subject* list = nullptr;
  int32_t count = 0;
  char message[1024] = {0};
  const int32_t code = subjects(&list, &count, message, sizeof message);
  message[sizeof message - 1] = '\0';
  if (code != 0) {
    throw PluginError("plugin " + path + ": flashcheck_plugin_subjects failed with code " + std::to_string(code) + ": " +
                      (message[0] ? message : "no message"));
  }
  if (count < 0 || (count > 0 && list == nullptr)) throw PluginError("plugin " + path + ": flashcheck_plugin_subjects returned no array");
  if (count == 0) throw PluginError("plugin " + path + ": declares no subjects");
  if (count > kMaxSubjects) {
    throw PluginError("plugin " + path + ": declares " + std::to_string(count) + " subjects (at most " + std::to_string(kMaxSubjects) + ")");
  }
  for (int32_t i = 0; i < count; ++i) loaded.subjects.push_back(std::make_unique<PluginSubject>(list[i], info_of(list[i], path)));
  return loaded;
}

}  // namespace fc::gradcheck
