// Variant keys and URIs: the naming contract (docs/URI.md).
//
// A key is a family plus its axis values in the family's template-parameter order. Values are
// kept in canonical text ("bf16", "128", "true", "rope_llama"), which maps one-to-one onto JSON
// (strings, integers, booleans) and onto the URI. The URI parses back into the key.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace aotinfer {

struct AxisValue {
  std::string name;
  std::string value;
  bool operator==(const AxisValue&) const = default;
};

struct VariantKey {
  std::string family;
  std::vector<AxisValue> axes;

  // "merge_state.dtype-bf16.head_dim-128"
  std::string uri() const;
  // Throws Error(invalid_argument) naming the offending part.
  static VariantKey from_uri(std::string_view uri);

  // The value of an axis, or nullptr.
  const std::string* find(std::string_view axis) const;
  // "merge_state{dtype=bf16, head_dim=128}", for messages.
  std::string describe() const;

  bool operator==(const VariantKey&) const = default;
};

// The C symbol of an entry point and of its launch-info global inside the variant's module.
std::string entry_symbol(const VariantKey& key, std::string_view entry);
std::string launch_symbol(const VariantKey& key, std::string_view entry);

// Lowercase snake_case, starting with a letter, no "__", no trailing '_': family, axis and
// entry names all obey this so that URIs and symbols stay unambiguous.
bool is_name(std::string_view s);
// An axis value in canonical text: a name (dtype, enumerator), true/false or a decimal integer.
bool is_value_text(std::string_view s);

}  // namespace aotinfer
