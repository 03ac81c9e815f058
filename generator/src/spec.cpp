#include "spec.hpp"

#include <algorithm>
#include <map>
#include <set>

#include "aotinfer/json.hpp"
#include "aotinfer/arch.hpp"
#include "aotinfer/error.hpp"
#include "aotinfer/files.hpp"
#include "aotinfer/sha256.hpp"

namespace aotinfer::gen {
namespace {

using nlohmann::json;

std::string join(const std::vector<std::string>& items, const char* sep = ", ") {
  std::string s;
  for (std::size_t i = 0; i < items.size(); ++i) s += (i ? sep : "") + items[i];
  return s;
}

std::string pointer_token(const std::string& key) {
  std::string s;
  for (char c : key) s += c == '~' ? "~0" : c == '/' ? "~1" : std::string(1, c);
  return s;
}

// One place that knows where in the document we are, so every message carries file + pointer.
class Reader {
 public:
  explicit Reader(std::string file) : file_(std::move(file)) {}

  [[noreturn]] void fail(const std::string& pointer, const std::string& what) const {
    throw SpecError(file_ + ": " + (pointer.empty() ? "/" : pointer) + ": " + what);
  }

  const json& object(const json& j, const std::string& pointer) const {
    if (!j.is_object()) fail(pointer, std::string("expected an object, got ") + j.type_name());
    return j;
  }

  void only_keys(const json& obj, const std::string& pointer, const std::vector<std::string>& allowed) const {
    for (const auto& [key, _] : obj.items())
      if (std::find(allowed.begin(), allowed.end(), key) == allowed.end())
        fail(pointer + "/" + pointer_token(key), "unknown key '" + key + "'; allowed: " + join(allowed));
  }

  const json& required(const json& obj, const std::string& pointer, const std::string& key) const {
    if (!obj.contains(key)) fail(pointer, "missing required key '" + key + "'");
    return obj.at(key);
  }

  std::string string(const json& j, const std::string& pointer) const {
    if (!j.is_string()) fail(pointer, std::string("expected a string, got ") + j.type_name());
    return j.get<std::string>();
  }

 private:
  std::string file_;
};

std::string allowed_list(const Axis& axis) {
  return "allowed: " + join(axis.allowed) + " (" + axis.where.str() + ")";
}

// Checks one spec value against an axis and returns its canonical text.
std::string axis_value(const Reader& r, const json& v, const std::string& pointer, const Axis& axis) {
  bool type_ok = false;
  switch (axis.kind) {
    case AxisKind::dtype:
    case AxisKind::enumeration: type_ok = v.is_string(); break;
    case AxisKind::boolean: type_ok = v.is_boolean(); break;
    case AxisKind::integer: type_ok = v.is_number_integer(); break;
  }
  if (!type_ok) {
    const char* expected = axis.kind == AxisKind::boolean ? "a boolean" : axis.kind == AxisKind::integer ? "an integer" : "a string";
    r.fail(pointer, "axis '" + axis.name + "' takes " + expected + ", got " + v.type_name() + " " + v.dump() + "; " +
                        allowed_list(axis));
  }
  std::string text;
  try {
    text = v.is_string() ? v.get<std::string>() : value_text(v);
  } catch (const Error& e) {  // an integer beyond int64 (value_text's only refusal here)
    r.fail(pointer, "axis '" + axis.name + "': " + e.what() + "; " + allowed_list(axis));
  }
  if (!axis.allows(text))
    r.fail(pointer, "value " + v.dump() + " is not allowed for axis '" + axis.name + "'; " + allowed_list(axis));
  return text;
}

// A JSON value or list of values -> canonical texts, each checked; duplicates refused.
std::vector<std::string> axis_values(const Reader& r, const json& j, const std::string& pointer, const Axis& axis) {
  if (j.is_array() && j.empty()) r.fail(pointer, "empty list: give at least one value; " + allowed_list(axis));
  std::vector<std::string> values;
  if (!j.is_array()) return {axis_value(r, j, pointer, axis)};
  for (std::size_t i = 0; i < j.size(); ++i) {
    std::string p = pointer + "/" + std::to_string(i);
    std::string text = axis_value(r, j[i], p, axis);
    if (std::find(values.begin(), values.end(), text) != values.end())
      r.fail(p, "duplicate value " + j[i].dump() + " for axis '" + axis.name + "'");
    values.push_back(std::move(text));
  }
  return values;
}

const Axis& known_axis(const Reader& r, const FamilySchema& family, const std::string& name, const std::string& pointer) {
  if (const Axis* a = family.axis(name)) return *a;
  std::vector<std::string> names;
  for (const auto& a : family.axes) names.push_back(a.name);
  r.fail(pointer, "family '" + family.name + "' has no axis '" + name + "'; its axes: " + join(names) + " (" +
                      family.where.str() + ")");
}

// Axis name -> chosen values, for a matrix, an exclusion or an inclusion.
using Assignment = std::map<std::string, std::vector<std::string>>;

Assignment read_assignment(const Reader& r, const json& j, const std::string& pointer, const FamilySchema& family) {
  r.object(j, pointer);
  Assignment a;
  for (const auto& [name, values] : j.items()) {
    std::string p = pointer + "/" + pointer_token(name);
    a[name] = axis_values(r, values, p, known_axis(r, family, name, p));
  }
  return a;
}

// Fills the axes an assignment leaves out (defaults, then followers) and checks followers.
VariantKey complete(const Reader& r, const FamilySchema& family, const std::map<std::string, std::string>& chosen,
                    const std::string& pointer) {
  VariantKey key{family.name, {}};
  for (const auto& axis : family.axes) {
    std::string value;
    if (auto it = chosen.find(axis.name); it != chosen.end()) {
      value = it->second;
    } else if (axis.default_value) {
      value = *axis.default_value;
    } else if (axis.follows) {
      const std::string* leader = key.find(*axis.follows);
      value = leader ? *leader : "";
      if (!axis.allows(value))
        r.fail(pointer, "axis '" + axis.name + "' follows '" + *axis.follows + "' = " + value + ", which '" +
                            axis.name + "' does not allow; set '" + axis.name + "' explicitly; " + allowed_list(axis));
    } else {
      r.fail(pointer, "missing required axis '" + axis.name + "' (the template gives no default); " + allowed_list(axis));
    }
    key.axes.push_back({axis.name, value});
  }
  return key;
}

bool matches(const VariantKey& key, const Assignment& pattern) {
  for (const auto& [name, values] : pattern) {
    const std::string* v = key.find(name);
    if (!v || std::find(values.begin(), values.end(), *v) == values.end()) return false;
  }
  return true;
}

// Cartesian product of a matrix, template-parameter order, last axis fastest.
void expand(const Reader& r, const FamilySchema& family, const Assignment& matrix, const std::string& pointer,
            std::vector<VariantKey>& out) {
  std::vector<const Axis*> axes;
  for (const auto& a : family.axes)
    if (matrix.count(a.name)) axes.push_back(&a);
  std::map<std::string, std::string> chosen;
  auto recurse = [&](auto&& self, std::size_t i) -> void {
    if (i == axes.size()) {
      out.push_back(complete(r, family, chosen, pointer));
      return;
    }
    for (const auto& v : matrix.at(axes[i]->name)) {
      chosen[axes[i]->name] = v;
      self(self, i + 1);
    }
  };
  recurse(recurse, 0);
}

// Archs of spec.archs whose SASS compiles from spec.ptx (the spec's or a family's list). Whether
// the templates compile the same code from that PTX as from the arch's own virtual arch is the
// spec's claim (docs/SPEC.md); what is checked is that ptxas can do it.
std::vector<std::string> read_sass_from_ptx(const Reader& r, const json& from, const std::string& pointer, const Spec& spec) {
  if (!from.is_array()) r.fail(pointer, "expected a list of archs from \"archs\"");
  if (spec.ptx.empty()) r.fail(pointer, "needs \"ptx\": these archs' SASS is compiled from that PTX");
  const Arch ptx = *Arch::parse_ptx(spec.ptx);
  std::vector<std::string> archs;
  for (std::size_t i = 0; i < from.size(); ++i) {
    const std::string p = pointer + "/" + std::to_string(i);
    const std::string name = r.string(from[i], p);
    if (std::find(spec.archs.begin(), spec.archs.end(), name) == spec.archs.end())
      r.fail(p, "'" + name + "' is not among \"archs\" (" + join(spec.archs) + ")");
    if (ptx.specific || ptx.family || Arch::parse(name)->number() < ptx.number())
      r.fail(p, "'" + name + "' cannot be compiled from " + spec.ptx + ": that needs plain PTX of an arch no newer than it");
    if (std::find(archs.begin(), archs.end(), name) != archs.end()) r.fail(p, "duplicate arch '" + name + "'");
    archs.push_back(name);
  }
  return archs;
}

std::vector<VariantKey> read_family(const Reader& r, const json& j, const std::string& pointer, const FamilySchema& family) {
  r.object(j, pointer);
  r.only_keys(j, pointer, {"matrix", "exclude", "include", "sass_from_ptx"});

  std::string matrix_ptr = pointer + "/matrix";
  const json& matrix_json = r.required(j, pointer, "matrix");
  Assignment matrix = read_assignment(r, matrix_json, matrix_ptr, family);
  std::vector<VariantKey> variants;
  expand(r, family, matrix, matrix_ptr, variants);

  if (j.contains("exclude")) {
    const json& ex = j.at("exclude");
    if (!ex.is_array()) r.fail(pointer + "/exclude", "expected a list of exclusions (objects of axis: value or [values])");
    for (std::size_t i = 0; i < ex.size(); ++i) {
      std::string p = pointer + "/exclude/" + std::to_string(i);
      Assignment pattern = read_assignment(r, ex[i], p, family);
      if (pattern.empty()) r.fail(p, "an empty exclusion would remove every variant; name at least one axis");
      auto removed = std::remove_if(variants.begin(), variants.end(), [&](const auto& k) { return matches(k, pattern); });
      if (removed == variants.end()) r.fail(p, "this exclusion matches no variant of the matrix; remove it or fix its values");
      variants.erase(removed, variants.end());
    }
  }
  if (variants.empty()) r.fail(pointer, "the exclusions remove every variant of the matrix");

  std::map<std::string, std::string> origin;  // uri -> pointer that produced it
  for (const auto& k : variants) origin[k.uri()] = matrix_ptr;

  if (j.contains("include")) {
    const json& inc = j.at("include");
    if (!inc.is_array()) r.fail(pointer + "/include", "expected a list of extra variants (objects of axis: value)");
    for (std::size_t i = 0; i < inc.size(); ++i) {
      std::string p = pointer + "/include/" + std::to_string(i);
      Assignment a = read_assignment(r, inc[i], p, family);
      std::map<std::string, std::string> chosen;
      for (const auto& [name, values] : a) {
        if (values.size() != 1 || inc[i].at(name).is_array())
          r.fail(p + "/" + pointer_token(name), "an included variant takes one value per axis, not a list");
        chosen[name] = values.front();
      }
      VariantKey key = complete(r, family, chosen, p);
      if (auto it = origin.find(key.uri()); it != origin.end())
        r.fail(p, "duplicate variant " + key.uri() + ": " + it->second + " already produces it");
      origin[key.uri()] = p;
      variants.push_back(std::move(key));
    }
  }
  return variants;
}

std::string line_and_column(std::string_view text, std::size_t byte) {
  std::size_t line = 1, column = 1;
  for (std::size_t i = 0; i + 1 < byte && i < text.size(); ++i) {
    if (text[i] == '\n') { ++line; column = 1; } else { ++column; }
  }
  return std::to_string(line) + ":" + std::to_string(column);
}

bool is_package_name(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
         }) && s.front() != '-';
}

}  // namespace

Spec parse_spec(std::string_view text, const std::string& file, const std::vector<FamilySchema>& families) {
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::parse_error& e) {
    std::string what = e.what();
    // nlohmann prefixes "[json.exception.parse_error.101] parse error at line L, column C: "
    if (auto colon = what.find(": "); colon != std::string::npos) what = what.substr(colon + 2);
    throw SpecError(file + ":" + line_and_column(text, e.byte) + ": malformed JSON: " + what);
  } catch (const json::out_of_range& e) {
    // A number beyond double's range ("1e400"): "[json.exception.out_of_range.406] number
    // overflow parsing '1e400'" has no position, so point at the number's first occurrence.
    std::string what = e.what(), where = file;
    if (auto bracket = what.find("] "); bracket != std::string::npos) what = what.substr(bracket + 2);
    const std::size_t open = what.find('\''), close = what.rfind('\'');
    if (open != std::string::npos && close > open)
      if (auto at = text.find(what.substr(open + 1, close - open - 1)); at != std::string_view::npos)
        where += ":" + line_and_column(text, at + 1);
    throw SpecError(where + ": malformed JSON: " + what);
  }

  Reader r(file);
  r.object(doc, "");
  r.only_keys(doc, "", {"$schema", "format", "package", "archs", "ptx", "sass_from_ptx", "families"});

  Spec spec;
  spec.file = file;
  const json& format = r.required(doc, "", "format");
  if (format != kSpecFormat) r.fail("/format", "spec format " + format.dump() + " is not supported; this generator reads format " + std::to_string(kSpecFormat));

  const json& package = r.object(r.required(doc, "", "package"), "/package");
  r.only_keys(package, "/package", {"name", "version"});
  spec.package_name = r.string(r.required(package, "/package", "name"), "/package/name");
  if (!is_package_name(spec.package_name))
    r.fail("/package/name", "'" + spec.package_name + "' is not a package name: use lowercase letters, digits, '-' and '_'");
  spec.package_version = r.string(r.required(package, "/package", "version"), "/package/version");
  if (spec.package_version.empty()) r.fail("/package/version", "the version must not be empty");

  const json& archs = r.required(doc, "", "archs");
  if (!archs.is_array() || archs.empty()) r.fail("/archs", "expected a non-empty list of archs; allowed: " + join(known_arch_names()));
  for (std::size_t i = 0; i < archs.size(); ++i) {
    std::string p = "/archs/" + std::to_string(i);
    std::string name = r.string(archs[i], p);
    if (!Arch::parse(name)) r.fail(p, "unknown arch '" + name + "'; allowed: " + join(known_arch_names()));
    if (std::find(spec.archs.begin(), spec.archs.end(), name) != spec.archs.end()) r.fail(p, "duplicate arch '" + name + "'");
    spec.archs.push_back(name);
  }
  if (doc.contains("ptx")) {
    spec.ptx = r.string(doc.at("ptx"), "/ptx");
    if (!Arch::parse_ptx(spec.ptx))
      r.fail("/ptx", "unknown PTX arch '" + spec.ptx + "'; allowed: " + join(known_ptx_names()) +
                         " (e.g. \"compute_80\": the driver compiles it for any newer GPU)");
  }
  if (doc.contains("sass_from_ptx")) spec.sass_from_ptx = read_sass_from_ptx(r, doc.at("sass_from_ptx"), "/sass_from_ptx", spec);

  const json& fams = r.object(r.required(doc, "", "families"), "/families");
  if (fams.empty()) r.fail("/families", "no families: a package needs at least one");
  std::vector<std::string> known;
  for (const auto& f : families) known.push_back(f.name + " (" + f.where.str() + ")");
  for (const auto& [name, body] : fams.items()) {
    std::string p = "/families/" + pointer_token(name);
    // (an init-capture: Clang 14, which builds the fuzz targets, cannot capture structured bindings)
    auto it = std::find_if(families.begin(), families.end(), [&wanted = name](const auto& f) { return f.name == wanted; });
    if (it == families.end()) r.fail(p, "unknown family '" + name + "'; known families: " + join(known));
    for (auto& key : read_family(r, body, p, *it)) spec.variants.push_back(std::move(key));
    if (body.contains("sass_from_ptx"))
      spec.family_sass_from_ptx[name] = read_sass_from_ptx(r, body.at("sass_from_ptx"), p + "/sass_from_ptx", spec);
  }

  spec.sha256 = sha256_hex(doc.dump());
  return spec;
}

Spec load_spec(const std::filesystem::path& file, const std::vector<FamilySchema>& families) {
  std::string text;
  try {
    text = read_file(file);
  } catch (const Error& e) {
    throw SpecError(e.what());
  }
  return parse_spec(text, file.string(), families);
}

}  // namespace aotinfer::gen
