// JSON forms of the naming and manifest contracts (nlohmann/json). The tools and tests use them;
// the runtime's public API does not, so its users need no JSON library.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "aotinfer/manifest.hpp"

namespace aotinfer {

// Canonical axis-value text <-> JSON: strings stay strings, integers and booleans keep their
// JSON type. value_text throws Error(invalid_argument) for anything else.
std::string value_text(const nlohmann::json& v);
nlohmann::json value_json(std::string_view text);

// An axis as `aotinfer-gen families --json` and the manifest's "families" write it: name, kind,
// allowed values, and default / follows when the template has them.
nlohmann::ordered_json axis_json(const ManifestAxis& axis);

// The spec `include` entry that adds `key` ({"dtype": "bf16", "head_dim": 128}), and the advice
// that places it: put <entry> in "families": {"<family>": {"include": [...]}} of <spec_file>
// (or extend its matrix) and rebuild the package. A spec without an entry for the family (its
// package holds none of the family's variants) needs a "matrix", which the advice then names.
nlohmann::ordered_json spec_include_entry(const VariantKey& key);
std::string spec_include_advice(const VariantKey& key, const std::string& spec_file, bool family_in_spec = true);

nlohmann::ordered_json manifest_to_json(const Manifest& m);
// `source` names the document in error messages. Throws Error(corrupt_package).
Manifest manifest_from_json(const nlohmann::ordered_json& j, const std::string& source);

}  // namespace aotinfer
