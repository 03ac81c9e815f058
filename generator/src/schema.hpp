// Family schemas: what a kernel family can be specialised on, read from its annotated entry
// template (templates/*.cuh) by the scanner. The single source of truth for axes: the spec
// validator and the source emitter read these and nothing else.
#pragma once
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "aotinfer/manifest.hpp"

namespace aotinfer::gen {

struct SourceLocation {
  std::string file;  // as given to the scanner (relative to the templates dir when possible)
  unsigned line = 0;
  std::string str() const { return file + ":" + std::to_string(line); }
  bool operator==(const SourceLocation&) const = default;
};

enum class AxisKind { dtype, enumeration, boolean, integer };
const char* to_string(AxisKind kind);

struct Axis {
  std::string name;  // the template parameter's name, as specs spell it
  AxisKind kind = AxisKind::integer;
  std::vector<std::string> allowed;       // canonical value text, in declaration order
  std::optional<std::string> default_value;  // from a default template argument
  std::optional<std::string> follows;     // `typename dtype_o = dtype_q`: the axis it copies
  std::string cpp_type;                   // enums: the qualified enum ("aotinfer::PosEncoding");
                                          // integers: the parameter type ("int")
  SourceLocation where;
  bool required() const { return !default_value && !follows; }
  bool allows(const std::string& value) const;
  bool operator==(const Axis&) const = default;
};

struct EntrySchema {
  std::string name;         // the static member function; its geometry is `<name>_launch`
  std::string params_type;  // the parameter's type without const/& ("aotinfer_merge_state_params")
  SourceLocation where;
  bool operator==(const EntrySchema&) const = default;
};

struct FamilySchema {
  std::string name;      // from AOTINFER_FAMILY
  std::string cpp_name;  // qualified template name ("aotinfer::merge_state")
  std::string header;    // path to #include, relative to the templates dir
  SourceLocation where;
  std::vector<Axis> axes;  // template-parameter order
  std::vector<EntrySchema> entries;

  const Axis* axis(const std::string& name) const;
  bool operator==(const FamilySchema&) const = default;
};

// The fixed dtype vocabulary: spec name -> C++ device type.
struct DType {
  const char* name;
  const char* cpp_type;
};
const std::vector<DType>& dtypes();
const DType* find_dtype(const std::string& name);

// The family as a package's manifest records it (its axes without source locations, so a
// comment added to a template changes no package).
ManifestFamily manifest_family(const FamilySchema& family);

nlohmann::ordered_json to_json(const FamilySchema& family);
nlohmann::ordered_json to_json(const std::vector<FamilySchema>& families);

}  // namespace aotinfer::gen
