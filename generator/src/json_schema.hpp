// A JSON Schema (draft 2020-12) for spec files, derived from the family schemas, so that
// editors validate and complete specs. `aotinfer-gen schema` writes it to specs/schema.json.
#pragma once
#include <nlohmann/json.hpp>
#include <vector>

#include "schema.hpp"

namespace aotinfer::gen {

nlohmann::ordered_json spec_json_schema(const std::vector<FamilySchema>& families);

}  // namespace aotinfer::gen
