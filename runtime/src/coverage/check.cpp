#include "coverage/check.hpp"

#include <algorithm>

#include "aotinfer/package.hpp"

namespace aotinfer::coverage {

namespace {

std::string join(const std::vector<std::string>& items) {
  std::string s;
  for (std::size_t i = 0; i < items.size(); ++i) s += (i ? ", " : "") + items[i];
  return s;
}

bool contains(const std::vector<std::string>& items, const std::string& item) {
  return std::find(items.begin(), items.end(), item) != items.end();
}

// The needs name only axes of this release's templates, so a package without one was built from
// older templates (its kernels are then refused at load too, by their kernel ABI).
std::string missing_axis(const std::string& family, const std::string& axis) {
  return "the " + family + " template has no " + axis + " axis: the package was built from older templates; rebuild it from its spec";
}

// Why the recorded templates cannot build `key`; empty when they can.
std::vector<std::string> template_refusals(const Manifest& m, const VariantKey& key) {
  const ManifestFamily* family = m.family(key.family);
  if (!family) {
    std::vector<std::string> names;
    for (const auto& f : m.families) names.push_back(f.name);
    return {"no template defines a " + key.family + " family (the templates define " + join(names) + ")"};
  }
  std::vector<std::string> why;
  for (const auto& a : key.axes) {
    const ManifestAxis* axis = family->axis(a.name);
    if (!axis) why.push_back(missing_axis(key.family, a.name));
    else if (!contains(axis->allowed, a.value))
      why.push_back(a.name + " " + a.value + ": the " + key.family + " template takes " + join(axis->allowed));
  }
  return why;
}

// A manifest without families still shows a family's axes through its variants (every variant
// names all of them): an axis none has is one the template lacks.
std::vector<std::string> axis_refusals(const Manifest& m, const VariantKey& key) {
  std::vector<std::string> axes;
  for (const auto& v : m.variants)
    if (v.key.family == key.family)
      for (const auto& a : v.key.axes)
        if (!contains(axes, a.name)) axes.push_back(a.name);
  std::vector<std::string> why;
  if (axes.empty()) return why;
  for (const auto& a : key.axes)
    if (!contains(axes, a.name)) why.push_back(missing_axis(key.family, a.name));
  return why;
}

const ManifestVariant* find_variant(const Manifest& m, const VariantKey& key) {
  for (const auto& v : m.variants)
    if (v.key == key) return &v;
  return nullptr;
}

Finding check_need(const Manifest& m, const Need& need, const Arch& arch) {
  Finding f{need, Status::missing, need.refusals, {}, {}};
  // What the template lacks matters only when the model itself is served: beside "multi-head
  // latent attention", "head_dim 192" would send a reader to add a variant that cannot help.
  if (f.reasons.empty()) f.reasons = m.families.empty() ? axis_refusals(m, need.key) : template_refusals(m, need.key);
  if (!f.reasons.empty()) {
    f.status = Status::unsupported;
  } else if (const ManifestVariant* v = find_variant(m, need.key)) {
    f.archs = v->archs;
    const DeviceCode code = device_code(*v, arch.major, arch.minor);
    f.status = code != DeviceCode::none ? Status::present : Status::wrong_arch;
    if (code == DeviceCode::ptx) f.ptx = v->ptx;
  } else if (m.families.empty()) {
    f.status = Status::unknown;
  }
  return f;
}

}  // namespace

std::string_view status_name(Status status) {
  switch (status) {
    case Status::present: return "present";
    case Status::wrong_arch: return "wrong-arch";
    case Status::missing: return "missing";
    case Status::unsupported: return "unsupported";
    case Status::unknown: return "unknown";
  }
  return "?";
}

std::vector<Finding> check_needs(const Manifest& manifest, const std::vector<Need>& needs, const Arch& arch) {
  std::vector<Finding> findings;
  for (const auto& need : needs) findings.push_back(check_need(manifest, need, arch));
  return findings;
}

}  // namespace aotinfer::coverage
