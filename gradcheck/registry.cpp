#include "gradcheck/registry.hpp"

#include <algorithm>
#include <sstream>
#include <stdexcept>

#include "gradcheck/plugin/plugin_loader.hpp"
#include "kernels/builtin_subjects.hpp"

namespace fc::gradcheck {

Registry Registry::with_builtins() {
  Registry r;
  for (auto& s : kernels::make_builtin_subjects()) {
    r.builtin_names_.push_back(s->info().name);
    r.add(std::move(s));
  }
  return r;
}

void Registry::add(std::unique_ptr<kernels::Subject> subject) {
  if (find(subject->info().name)) throw std::invalid_argument("a subject named " + subject->info().name + " is registered already");
  subjects_.push_back(std::move(subject));
}

void Registry::load_plugin(const std::string& path) {
  LoadedPlugin p = load_plugin_file(path);
  libraries_.push_back(p.library);
  for (auto& s : p.subjects) add(std::move(s));
}

kernels::Subject* Registry::find(std::string_view name) const {
  for (const auto& s : subjects_) {
    if (s->info().name == name) return s.get();
  }
  return nullptr;
}

std::vector<kernels::Subject*> Registry::subjects() const {
  std::vector<kernels::Subject*> out;
  for (const auto& s : subjects_) out.push_back(s.get());
  return out;
}

bool Registry::is_builtin(std::string_view name) const {
  return std::find(builtin_names_.begin(), builtin_names_.end(), name) != builtin_names_.end();
}

std::string format_subject_table(const Registry& registry) {
  std::ostringstream out;
  const auto join = [](const auto& items, auto&& name_of) {
    std::string s;
    for (const auto& x : items) s += (s.empty() ? "" : ",") + std::string(name_of(x));
    return s.empty() ? std::string("-") : s;
  };
  const auto row = [&](const std::string& subject, const std::string& family, const std::string& ops, const std::string& formats,
                       const std::string& dims, const std::string& masks, const std::string& gqa, const std::string& determ,
                       const std::string& description) {
    char fixed[256];
    std::snprintf(fixed, sizeof fixed, "%-22s %-9s %-15s %-19s %-12s %-27s %-4s %-6s ", subject.c_str(), family.c_str(), ops.c_str(),
                  formats.c_str(), dims.c_str(), masks.c_str(), gqa.c_str(), determ.c_str());
    out << fixed << description << "\n";  // the description in full, however long
  };
  row("subject", "family", "ops", "formats", "head dims", "masks", "GQA", "determ", "description");
  for (const kernels::Subject* s : registry.subjects()) {
    const kernels::SubjectInfo& i = s->info();
    const std::string dims = i.head_dims.empty() ? "1.." + std::to_string(i.max_head_dim)
                                                 : join(i.head_dims, [](int d) { return std::to_string(d); });
    std::string limits;  // the limits beyond the columns
    if (i.min_seq > 1) limits += "N >= " + std::to_string(i.min_seq);
    if (i.max_seq > 0) limits += std::string(limits.empty() ? "" : "; ") + "N <= " + std::to_string(i.max_seq);
    if (i.causal_equal_lengths) limits += std::string(limits.empty() ? "" : "; ") + "causal only with Nq = Nk";
    row(i.name, std::string(kernels::name(i.family)), join(i.ops, [](kernels::Op o) { return kernels::name(o); }),
        join(i.formats, [](Format f) { return fc::name(f); }), dims, join(i.masks, [](kernels::Mask m) { return kernels::name(m); }),
        i.gqa ? "yes" : "no", i.deterministic ? "yes" : "no", i.description + (limits.empty() ? "" : " [" + limits + "]"));
  }
  return out.str();
}

}  // namespace fc::gradcheck
