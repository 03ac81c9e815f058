// Fuzz target: variant URIs and axis values (runtime/src/core/variant.cpp). Each line of the
// input is parsed with VariantKey::from_uri, which must either throw Error(invalid_argument) or
// return a key that writes back into the same URI (docs/URI.md: the URI parses back into the key
// and the key into the URI), whose names are is_name, whose values are is_value_text and survive
// value_json / value_text, and whose entry and launch symbols are C identifiers. is_name and
// is_value_text are also checked against a plain reimplementation of docs/URI.md's rules.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>
#include <string_view>
#include <typeinfo>

#include "aotinfer/error.hpp"
#include "aotinfer/json.hpp"
#include "aotinfer/variant.hpp"
#include "fuzz/fuzz_input.hpp"

using namespace aotinfer;
using fuzz::finding;

namespace {

// docs/URI.md: a letter first, then lowercase letters, digits and single underscores, no
// trailing underscore.
bool name_rule(std::string_view s) {
  if (s.empty() || s.front() < 'a' || s.front() > 'z' || s.back() == '_') return false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '_' ? i + 1 < s.size() && s[i + 1] == '_' : !((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'))) return false;
  }
  return true;
}

// A canonical decimal int64: optional '-', no leading zeros, no "-0", within range.
bool integer_rule(std::string_view s) {
  std::string_view d = s;
  const bool negative = !d.empty() && d.front() == '-';
  if (negative) d.remove_prefix(1);
  if (d.empty() || d.size() > 19 || !std::all_of(d.begin(), d.end(), [](char c) { return c >= '0' && c <= '9'; })) return false;
  if (d.size() > 1 && d.front() == '0') return false;
  if (negative && d == "0") return false;
  if (d.size() == 19) {
    const std::string_view limit = negative ? "9223372036854775808" : "9223372036854775807";
    if (d > limit) return false;
  }
  return true;
}

bool c_identifier(const std::string& s) {
  if (s.empty() || (s.front() >= '0' && s.front() <= '9')) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  });
}

void check_uri(std::string_view uri) {
  if (is_name(uri) != name_rule(uri)) finding("is_name('" + std::string(uri) + "') disagrees with docs/URI.md");
  if (is_value_text(uri) != (name_rule(uri) || integer_rule(uri)))
    finding("is_value_text('" + std::string(uri) + "') disagrees with docs/URI.md");
  VariantKey key;
  try {
    key = VariantKey::from_uri(uri);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::invalid_argument) finding(std::string("from_uri threw ") + e.what());
    // (what() is a C string: a URI holding a NUL byte cuts the message short)
    if (uri.find('\0') == std::string_view::npos && std::string_view(e.what()).find("docs/URI.md") == std::string_view::npos)
      finding("from_uri's error does not point at docs/URI.md");
    return;
  } catch (const std::exception& e) {
    finding(std::string("from_uri threw ") + typeid(e).name() + ", not aotinfer::Error: " + e.what());
  }
  if (key.uri() != uri) finding("'" + std::string(uri) + "' parses into a key whose URI is '" + key.uri() + "'");
  if (!is_name(key.family)) finding("family '" + key.family + "' is not a name");
  for (std::size_t i = 0; i < key.axes.size(); ++i) {
    const auto& a = key.axes[i];
    if (!is_name(a.name) || !is_value_text(a.value)) finding("axis '" + a.name + "-" + a.value + "' is not name-value");
    if (key.find(a.name) != &a.value) finding("axis '" + a.name + "' is not unique");
    try {
      if (value_text(value_json(a.value)) != a.value) finding("value '" + a.value + "' changes through value_json");
    } catch (const Error& e) {
      finding("value '" + a.value + "' does not survive value_json: " + e.what());
    }
  }
  if (VariantKey::from_uri(key.uri()) != key) finding("the key does not survive uri() and from_uri");
  for (const char* entry : {"run", "merge_varlen"}) {
    const std::string symbol = entry_symbol(key, entry), launch = launch_symbol(key, entry);
    if (!c_identifier(symbol) || !c_identifier(launch)) finding("symbol '" + symbol + "' is not a C identifier");
    if (launch != symbol + "__launch") finding("launch symbol '" + launch + "' is not the entry symbol + __launch");
  }
  (void)key.describe();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  while (true) {
    const std::size_t nl = input.find('\n');
    check_uri(input.substr(0, nl));
    if (nl == std::string_view::npos) break;
    input.remove_prefix(nl + 1);
  }
  return 0;
}
