#include "schema.hpp"

#include <algorithm>

#include "aotinfer/json.hpp"
#include "aotinfer/dtype.hpp"
#include "aotinfer/variant.hpp"

namespace aotinfer::gen {

const char* to_string(AxisKind kind) {
  switch (kind) {
    case AxisKind::dtype: return "dtype";
    case AxisKind::enumeration: return "enum";
    case AxisKind::boolean: return "bool";
    case AxisKind::integer: return "int";
  }
  return "?";
}

bool Axis::allows(const std::string& value) const {
  return std::find(allowed.begin(), allowed.end(), value) != allowed.end();
}

const Axis* FamilySchema::axis(const std::string& axis_name) const {
  for (const auto& a : axes)
    if (a.name == axis_name) return &a;
  return nullptr;
}

const std::vector<DType>& dtypes() {
  // Names come from the runtime's dtype list; only the device spelling is added here.
  using T = ::aotinfer::DType;
  auto row = [](T t, const char* cpp) { return DType{dtype_name(t).data(), cpp}; };
  static const std::vector<DType> table = {
      row(T::f16, "__half"),         row(T::bf16, "__nv_bfloat16"), row(T::e4m3, "__nv_fp8_e4m3"),
      row(T::e5m2, "__nv_fp8_e5m2"), row(T::f32, "float"),          row(T::i32, "int32_t")};
  return table;
}

const DType* find_dtype(const std::string& name) {
  for (const auto& d : dtypes())
    if (name == d.name) return &d;
  return nullptr;
}

ManifestFamily manifest_family(const FamilySchema& f) {
  ManifestFamily family{f.name, {}};
  for (const auto& a : f.axes) family.axes.push_back({a.name, to_string(a.kind), a.allowed, a.default_value, a.follows});
  return family;
}

nlohmann::ordered_json to_json(const FamilySchema& f) {
  // The manifest's form of each axis, plus where the template declares it.
  const ManifestFamily recorded = manifest_family(f);
  nlohmann::ordered_json axes = nlohmann::ordered_json::array();
  for (std::size_t i = 0; i < f.axes.size(); ++i) {
    nlohmann::ordered_json j = axis_json(recorded.axes[i]);
    j["where"] = f.axes[i].where.str();
    axes.push_back(std::move(j));
  }
  nlohmann::ordered_json entries = nlohmann::ordered_json::array();
  for (const auto& e : f.entries) entries.push_back({{"name", e.name}, {"params", e.params_type}});
  return {{"family", f.name}, {"template", f.cpp_name}, {"header", f.header},
          {"where", f.where.str()}, {"axes", axes}, {"entries", entries}};
}

nlohmann::ordered_json to_json(const std::vector<FamilySchema>& families) {
  nlohmann::ordered_json j = nlohmann::ordered_json::array();
  for (const auto& f : families) j.push_back(to_json(f));
  return j;
}

}  // namespace aotinfer::gen
