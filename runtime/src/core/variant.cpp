#include "aotinfer/variant.hpp"

#include "aotinfer/json.hpp"

#include <charconv>
#include <cstdint>
#include <system_error>
#include <nlohmann/json.hpp>

#include "aotinfer/error.hpp"

namespace aotinfer {
namespace {

bool is_lower_or_digit(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

// Canonical decimal that fits an int64: no leading zeros, no "-0" (so that text -> JSON -> text
// is the identity).
bool is_integer_text(std::string_view s) {
  std::string_view digits = s;
  bool negative = !digits.empty() && digits.front() == '-';
  if (negative) digits.remove_prefix(1);
  if (digits.empty() || (digits.size() > 1 && digits.front() == '0') || (negative && digits == "0")) return false;
  for (char c : digits)
    if (c < '0' || c > '9') return false;
  std::int64_t n = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
  return ec == std::errc() && end == s.data() + s.size();
}

// Segments of a URI or symbol never contain "__", so "__" separates them unambiguously.
bool is_snake(std::string_view s) {
  if (s.empty() || s.back() == '_' || s.front() == '_') return false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_') {
      if (s[i + 1] == '_') return false;
    } else if (!is_lower_or_digit(s[i])) {
      return false;
    }
  }
  return true;
}

std::string symbol_base(const VariantKey& key) {
  std::string s = "aotinfer_" + key.family;
  for (const auto& a : key.axes) {
    std::string v = a.value;
    if (!v.empty() && v.front() == '-') v.front() = 'm';  // "-1" -> "m1": C identifiers have no '-'
    s += "__" + a.name + "_" + v;
  }
  return s;
}

}  // namespace

bool is_name(std::string_view s) { return !s.empty() && s.front() >= 'a' && s.front() <= 'z' && is_snake(s); }

bool is_value_text(std::string_view s) { return is_integer_text(s) || is_name(s); }

std::string VariantKey::uri() const {
  std::string s = family;
  for (const auto& a : axes) s += "." + a.name + "-" + a.value;
  return s;
}

VariantKey VariantKey::from_uri(std::string_view uri) {
  auto fail = [&](const std::string& why) -> VariantKey {
    throw Error(ErrorCode::invalid_argument,
                "invalid variant URI '" + std::string(uri) + "': " + why +
                    " (expected family.axis-value.axis-value..., see docs/URI.md)");
  };
  VariantKey key;
  std::size_t start = 0;
  bool first = true;
  while (start <= uri.size()) {
    std::size_t dot = uri.find('.', start);
    std::string_view part = uri.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start);
    if (first) {
      if (!is_name(part)) return fail("family '" + std::string(part) + "' is not a lowercase snake_case name");
      key.family = std::string(part);
      first = false;
    } else {
      std::size_t dash = part.find('-');
      if (dash == std::string_view::npos) return fail("axis segment '" + std::string(part) + "' has no '-'");
      std::string_view name = part.substr(0, dash), value = part.substr(dash + 1);
      if (!is_name(name)) return fail("axis name '" + std::string(name) + "' is not a lowercase snake_case name");
      if (!is_value_text(value)) return fail("value '" + std::string(value) + "' of axis '" + std::string(name) + "' is not a name or an integer");
      if (key.find(name)) return fail("axis '" + std::string(name) + "' appears twice");
      key.axes.push_back({std::string(name), std::string(value)});
    }
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  return key;
}

const std::string* VariantKey::find(std::string_view axis) const {
  for (const auto& a : axes)
    if (a.name == axis) return &a.value;
  return nullptr;
}

std::string VariantKey::describe() const {
  std::string s = family + "{";
  for (std::size_t i = 0; i < axes.size(); ++i) s += (i ? ", " : "") + axes[i].name + "=" + axes[i].value;
  return s + "}";
}

std::string entry_symbol(const VariantKey& key, std::string_view entry) {
  return symbol_base(key) + "__" + std::string(entry);
}

std::string launch_symbol(const VariantKey& key, std::string_view entry) {
  return entry_symbol(key, entry) + "__launch";
}

std::string value_text(const nlohmann::json& v) {
  if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
  if (v.is_number_unsigned() && v.get<std::uint64_t>() > std::uint64_t(INT64_MAX))
    throw Error(ErrorCode::invalid_argument, v.dump() + " is out of range for an integer axis value (int64)");
  if (v.is_number_integer()) return std::to_string(v.get<std::int64_t>());
  if (v.is_string()) {
    auto s = v.get<std::string>();
    if (is_name(s) && s != "true" && s != "false") return s;
    throw Error(ErrorCode::invalid_argument, "'" + s + "' is not a valid axis value (lowercase snake_case)");
  }
  throw Error(ErrorCode::invalid_argument, "axis values are strings, integers or booleans, not " + std::string(v.type_name()));
}

nlohmann::ordered_json spec_include_entry(const VariantKey& key) {
  nlohmann::ordered_json entry = nlohmann::ordered_json::object();
  for (const auto& a : key.axes) entry[a.name] = value_json(a.value);
  return entry;
}

std::string spec_include_advice(const VariantKey& key, const std::string& spec_file, bool family_in_spec) {
  const std::string entry = spec_include_entry(key).dump();
  if (!family_in_spec)
    return "put \"" + key.family + "\": {\"matrix\": " + entry + "} in \"families\" of " + spec_file + " and rebuild the package";
  return "put " + entry + " in \"families\": {\"" + key.family + "\": {\"include\": [...]}} of " + spec_file +
         " (or extend its matrix) and rebuild the package";
}

nlohmann::json value_json(std::string_view text) {
  if (text == "true") return true;
  if (text == "false") return false;
  if (is_integer_text(text)) {
    std::int64_t n = 0;
    std::from_chars(text.data(), text.data() + text.size(), n);
    return n;
  }
  return std::string(text);
}

}  // namespace aotinfer
