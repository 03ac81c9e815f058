#include "aotinfer/manifest.hpp"

#include "aotinfer/json.hpp"

#include <algorithm>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>

#include "aotinfer/error.hpp"
#include "aotinfer/files.hpp"

namespace aotinfer {

using nlohmann::json;
using nlohmann::ordered_json;

const ManifestAxis* ManifestFamily::axis(std::string_view axis_name) const {
  for (const auto& a : axes)
    if (a.name == axis_name) return &a;
  return nullptr;
}

const ManifestFamily* Manifest::family(std::string_view name) const {
  for (const auto& f : families)
    if (f.name == name) return &f;
  return nullptr;
}

ordered_json axis_json(const ManifestAxis& a) {
  ordered_json j = {{"name", a.name}, {"kind", a.kind}, {"allowed", ordered_json::array()}};
  for (const auto& v : a.allowed) j["allowed"].push_back(ordered_json(value_json(v)));
  if (a.default_value) j["default"] = value_json(*a.default_value);
  if (a.follows) j["follows"] = *a.follows;
  return j;
}

ordered_json manifest_to_json(const Manifest& m) {
  ordered_json j;
  j["format"] = m.format;
  j["generator"] = m.generator;
  j["package"] = {{"name", m.package_name}, {"version", m.package_version}};
  j["spec"] = {{"file", m.spec_file}, {"sha256", m.spec_sha256}};
  j["archs"] = m.archs;
  if (!m.ptx.empty()) j["ptx"] = m.ptx;
  // Left out when not recorded, so an older manifest dumps to the same bytes.
  if (!m.families.empty()) {
    j["families"] = ordered_json::array();
    for (const auto& f : m.families) {
      ordered_json axes = ordered_json::array();
      for (const auto& a : f.axes) axes.push_back(axis_json(a));
      j["families"].push_back({{"family", f.name}, {"axes", axes}});
    }
  }
  j["variants"] = ordered_json::array();
  for (const auto& v : m.variants) {
    ordered_json axes = ordered_json::object();
    for (const auto& a : v.key.axes) axes[a.name] = value_json(a.value);
    ordered_json entries = ordered_json::array();
    for (const auto& e : v.entries)
      entries.push_back({{"name", e.name}, {"symbol", e.symbol}, {"launch_symbol", e.launch_symbol}});
    ordered_json variant = {{"uri", v.key.uri()},   {"family", v.key.family}, {"axes", axes},
                            {"entries", entries},   {"file", v.file},         {"size", v.size},
                            {"sha256", v.sha256},   {"archs", v.archs}};
    if (!v.ptx.empty()) variant["ptx"] = v.ptx;
    if (!v.resources.empty()) {
      ordered_json resources = ordered_json::object();
      for (const auto& per_arch : v.resources) {
        ordered_json kernels = ordered_json::object();
        for (const auto& k : per_arch.kernels)
          kernels[k.entry] = {{"registers", k.registers},       {"threads", k.threads},
                              {"static_smem", k.static_smem},   {"dynamic_smem", k.dynamic_smem},
                              {"stack_bytes", k.stack_bytes}};
        resources[per_arch.arch] = kernels;
      }
      variant["resources"] = resources;
    }
    j["variants"].push_back(variant);
  }
  return j;
}

std::string Manifest::dump() const { return manifest_to_json(*this).dump(2) + "\n"; }

namespace {

[[noreturn]] void corrupt(const std::string& source, const std::string& what) {
  throw Error(ErrorCode::corrupt_package, source + ": " + what);
}

// Reads a required member with a message that names the document and the JSON pointer.
template <typename T>
T member(const ordered_json& obj, const std::string& key, const std::string& where, const std::string& source) {
  if (!obj.is_object() || !obj.contains(key)) corrupt(source, where + "/" + key + " is missing");
  try {
    return obj.at(key).get<T>();
  } catch (const json::exception&) {
    corrupt(source, where + "/" + key + " has the wrong type (" + obj.at(key).type_name() + ")");
  }
}

// A short rendering of a JSON value for messages.
std::string shown(const ordered_json& v) {
  std::string s = v.dump();
  return s.size() > 80 ? s.substr(0, 77) + "..." : s;
}

// A required member that must be a JSON array (variants, entries).
const ordered_json& array_member(const ordered_json& obj, const std::string& key, const std::string& where,
                                 const std::string& source) {
  if (!obj.is_object() || !obj.contains(key)) corrupt(source, where + "/" + key + " is missing");
  const ordered_json& v = obj.at(key);
  if (!v.is_array()) corrupt(source, where + "/" + key + ": expected an array, got " + v.type_name() + " " + shown(v));
  return v;
}

// A required non-negative integer (nlohmann would turn -1 into 2^64 - 1 and 1e30 into anything).
std::uint64_t count_member(const ordered_json& obj, const std::string& key, const std::string& where,
                           const std::string& source, const char* what) {
  if (!obj.is_object() || !obj.contains(key)) corrupt(source, where + "/" + key + " is missing");
  const ordered_json& v = obj.at(key);
  if (!v.is_number_unsigned())
    corrupt(source, where + "/" + key + (v.is_number() ? "" : " has the wrong type (" + std::string(v.type_name()) + ")") +
                        ": expected " + what + " (an integer >= 0), got " + shown(v));
  return v.get<std::uint64_t>();
}

// A variant's file: a plain relative path inside the package folder ("kernels/<uri>.fatbin"),
// never absolute, never climbing out with "..", never hiding a NUL or a control character.
void check_file_path(const std::string& file, const std::string& where, const std::string& source) {
  auto refuse = [&](const std::string& why) {
    corrupt(source, where + "/file: expected a relative path inside the package, got " + nlohmann::json(file).dump() +
                        " (" + why + ")");
  };
  if (file.empty()) refuse("empty");
  for (unsigned char c : file)
    if (c < 0x20 || c == 0x7f) refuse("a control character");
  const std::filesystem::path p(file);
  if (p.is_absolute() || p.has_root_name() || p.has_root_directory()) refuse("an absolute path");
  for (const auto& part : p)
    if (part == "..") refuse("'..' leaves the package");
  if (p.filename().empty() || p.filename() == ".") refuse("not a file name");
}

// A variant's optional "resources": {"sm_80": {"<entry>": {"registers": 40, ...}}}.
std::vector<ArchResources> resources_member(const ordered_json& v, const std::string& where, const std::string& source) {
  const ordered_json& all = v.at("resources");
  const std::string at = where + "/resources";
  if (!all.is_object()) corrupt(source, at + ": expected an object of archs, got " + std::string(all.type_name()) + " " + shown(all));
  std::vector<ArchResources> out;
  for (const auto& [arch, kernels] : all.items()) {
    const std::string here = at + "/" + arch;
    if (!kernels.is_object()) corrupt(source, here + ": expected an object of entries, got " + std::string(kernels.type_name()));
    ArchResources per_arch{arch, {}};
    for (const auto& item : kernels.items()) {
      const std::string& entry = item.key();
      const ordered_json& r = item.value();  // (not a structured binding: Clang 14 cannot capture one)
      const std::string in = here + "/" + entry;
      auto field = [&](const char* key) {
        const std::uint64_t n = count_member(r, key, in, source, "a count");
        if (n > UINT32_MAX) corrupt(source, in + "/" + key + ": expected at most 2^32 - 1, got " + std::to_string(n));
        return std::uint32_t(n);
      };
      per_arch.kernels.push_back({entry, field("registers"), field("threads"), field("static_smem"), field("dynamic_smem"),
                                  field("stack_bytes")});
    }
    out.push_back(std::move(per_arch));
  }
  return out;
}

std::string join(const std::vector<std::string>& items) {
  std::string s;
  for (std::size_t i = 0; i < items.size(); ++i) s += (i ? ", " : "") + items[i];
  return s;
}

// An axis value in canonical text (a name, true/false or an integer).
std::string axis_value(const ordered_json& v, const std::string& where, const std::string& source) {
  try {
    return value_text(v);
  } catch (const Error& e) {
    corrupt(source, where + ": " + e.what());
  }
}

// A name (family, axis) as URIs and symbols need it.
std::string name_member(const ordered_json& obj, const std::string& key, const std::string& where, const std::string& source) {
  auto name = member<std::string>(obj, key, where, source);
  if (!is_name(name))
    corrupt(source, where + "/" + key + ": expected a lowercase snake_case name, got " + nlohmann::json(name).dump());
  return name;
}

ManifestAxis read_axis(const ordered_json& a, const std::string& where, const ManifestFamily& family, const std::string& source) {
  if (!a.is_object()) corrupt(source, where + ": expected an axis (a JSON object), got " + std::string(a.type_name()) + " " + shown(a));
  ManifestAxis axis;
  axis.name = name_member(a, "name", where, source);
  if (family.axis(axis.name))
    corrupt(source, where + "/name: axis '" + axis.name + "' is listed twice in family '" + family.name + "': expected each axis once");
  axis.kind = member<std::string>(a, "kind", where, source);
  if (axis.kind != "dtype" && axis.kind != "enum" && axis.kind != "bool" && axis.kind != "int")
    corrupt(source, where + "/kind: expected one of dtype, enum, bool, int, got " + nlohmann::json(axis.kind).dump());
  const ordered_json& allowed = array_member(a, "allowed", where, source);
  if (allowed.empty()) corrupt(source, where + "/allowed: expected at least one value, got []");
  for (std::size_t i = 0; i < allowed.size(); ++i)
    axis.allowed.push_back(axis_value(allowed[i], where + "/allowed/" + std::to_string(i), source));
  if (a.contains("default")) {
    axis.default_value = axis_value(a.at("default"), where + "/default", source);
    if (std::find(axis.allowed.begin(), axis.allowed.end(), *axis.default_value) == axis.allowed.end())
      corrupt(source, where + "/default: expected one of the allowed values (" + join(axis.allowed) + "), got " + *axis.default_value);
  }
  if (a.contains("follows")) {
    axis.follows = member<std::string>(a, "follows", where, source);
    if (!family.axis(*axis.follows)) {
      std::vector<std::string> earlier;
      for (const auto& e : family.axes) earlier.push_back(e.name);
      corrupt(source, where + "/follows: expected an earlier axis of family '" + family.name + "' (" + join(earlier) + "), got " +
                          nlohmann::json(*axis.follows).dump());
    }
  }
  return axis;
}

std::vector<ManifestFamily> read_families(const ordered_json& j, const std::string& source) {
  if (!j.contains("families")) return {};  // written before the generator recorded them
  const ordered_json& families = array_member(j, "families", "", source);
  std::vector<ManifestFamily> out;
  for (std::size_t i = 0; i < families.size(); ++i) {
    const std::string where = "/families/" + std::to_string(i);
    const ordered_json& f = families[i];
    if (!f.is_object()) corrupt(source, where + ": expected a family (a JSON object), got " + std::string(f.type_name()) + " " + shown(f));
    ManifestFamily family;
    family.name = name_member(f, "family", where, source);
    for (const auto& other : out)
      if (other.name == family.name) corrupt(source, where + "/family: family '" + family.name + "' is listed twice: expected each family once");
    const ordered_json& axes = array_member(f, "axes", where, source);
    for (std::size_t k = 0; k < axes.size(); ++k)
      family.axes.push_back(read_axis(axes[k], where + "/axes/" + std::to_string(k), family, source));
    out.push_back(std::move(family));
  }
  return out;
}

// With families recorded, every variant names one of them and has its axes, in template order,
// each with a value the template allows: what spec validation guarantees for a generated package.
void check_against_families(const Manifest& m, const std::string& source) {
  if (m.families.empty()) return;
  std::vector<std::string> names;
  for (const auto& f : m.families) names.push_back(f.name);
  for (std::size_t i = 0; i < m.variants.size(); ++i) {
    const VariantKey& key = m.variants[i].key;
    const std::string where = "/variants/" + std::to_string(i);
    const ManifestFamily* f = m.family(key.family);
    if (!f) corrupt(source, where + "/family: expected one of the families in /families (" + join(names) + "), got '" + key.family + "'");
    std::vector<std::string> expected, got;
    for (const auto& a : f->axes) expected.push_back(a.name);
    for (const auto& a : key.axes) got.push_back(a.name);
    if (got != expected)
      corrupt(source, where + "/axes: expected the axes of family '" + f->name + "' in template order (" + join(expected) +
                          "), got (" + join(got) + ")");
    for (std::size_t k = 0; k < key.axes.size(); ++k)
      if (const auto& allowed = f->axes[k].allowed; std::find(allowed.begin(), allowed.end(), key.axes[k].value) == allowed.end())
        corrupt(source, where + "/axes/" + key.axes[k].name + ": expected a value family '" + f->name + "' allows (" + join(allowed) +
                            "), got " + key.axes[k].value);
  }
}

Manifest from_json_unchecked(const ordered_json& j, const std::string& source) {
  if (!j.is_object()) corrupt(source, "a manifest is a JSON object: expected an object, got " + std::string(j.type_name()) + " " + shown(j));
  Manifest m;
  if (!j.contains("format")) corrupt(source, "/format is missing");
  if (const ordered_json& value = j.at("format"); !value.is_number_integer())
    corrupt(source, "/format" + (value.is_number() ? "" : " has the wrong type (" + std::string(value.type_name()) + ")") +
                        ": expected an integer manifest format (this runtime reads " + std::to_string(kManifestFormat) +
                        "), got " + shown(value));
  const auto format = j.at("format").get<std::int64_t>();
  if (format != kManifestFormat)
    corrupt(source, "manifest format " + std::to_string(format) + " is not supported by this runtime (it reads format " +
                        std::to_string(kManifestFormat) + "); rebuild the package");
  m.format = int(format);
  m.generator = member<std::string>(j, "generator", "", source);
  auto package = member<ordered_json>(j, "package", "", source);
  m.package_name = member<std::string>(package, "name", "/package", source);
  m.package_version = member<std::string>(package, "version", "/package", source);
  auto spec = member<ordered_json>(j, "spec", "", source);
  m.spec_file = member<std::string>(spec, "file", "/spec", source);
  m.spec_sha256 = member<std::string>(spec, "sha256", "/spec", source);
  m.archs = member<std::vector<std::string>>(j, "archs", "", source);
  if (j.contains("ptx")) m.ptx = member<std::string>(j, "ptx", "", source);
  m.families = read_families(j, source);
  const ordered_json& variants = array_member(j, "variants", "", source);
  std::map<std::string, std::size_t> uri_at, file_at;  // first position of each URI and file
  for (std::size_t i = 0; i < variants.size(); ++i) {
    const ordered_json& v = variants[i];
    std::string where = "/variants/" + std::to_string(i);
    if (!v.is_object()) corrupt(source, where + ": expected a variant (a JSON object), got " + std::string(v.type_name()) + " " + shown(v));
    ManifestVariant mv;
    auto uri = member<std::string>(v, "uri", where, source);
    auto family = member<std::string>(v, "family", where, source);
    auto axes = member<ordered_json>(v, "axes", where, source);
    if (!axes.is_object()) corrupt(source, where + "/axes: expected an object, got " + std::string(axes.type_name()) + " " + shown(axes));
    try {
      mv.key = VariantKey::from_uri(uri);
      VariantKey declared{family, {}};
      for (const auto& [name, value] : axes.items()) declared.axes.push_back({name, value_text(value)});
      if (declared != mv.key)
        throw Error(ErrorCode::corrupt_package, "uri '" + uri + "' disagrees with family/axes " + declared.describe());
    } catch (const Error& e) {
      corrupt(source, where + ": " + e.what());
    }
    // One variant per URI: a second entry would make find() ambiguous and hide which file is meant.
    if (auto [it, fresh] = uri_at.emplace(mv.key.uri(), i); !fresh)
      corrupt(source, where + "/uri: variant '" + mv.key.uri() + "' is listed twice, at /variants/" + std::to_string(it->second) +
                          " and " + where + ": expected each URI once");
    const ordered_json& entries = array_member(v, "entries", where, source);
    for (std::size_t k = 0; k < entries.size(); ++k) {
      const std::string at = where + "/entries/" + std::to_string(k);
      mv.entries.push_back({member<std::string>(entries[k], "name", at, source),
                            member<std::string>(entries[k], "symbol", at, source),
                            member<std::string>(entries[k], "launch_symbol", at, source)});
    }
    mv.file = member<std::string>(v, "file", where, source);
    check_file_path(mv.file, where, source);
    if (auto [it, fresh] = file_at.emplace(std::filesystem::path(mv.file).lexically_normal().string(), i); !fresh)
      corrupt(source, where + "/file: '" + mv.file + "' is also the file of /variants/" + std::to_string(it->second) +
                          ": expected one file per variant");
    mv.size = count_member(v, "size", where, source, "a byte count");
    mv.sha256 = member<std::string>(v, "sha256", where, source);
    mv.archs = member<std::vector<std::string>>(v, "archs", where, source);
    if (v.contains("ptx")) mv.ptx = member<std::vector<std::string>>(v, "ptx", where, source);
    if (v.contains("resources")) mv.resources = resources_member(v, where, source);
    m.variants.push_back(std::move(mv));
  }
  check_against_families(m, source);
  return m;
}

}  // namespace

Manifest manifest_from_json(const ordered_json& j, const std::string& source) {
  try {
    return from_json_unchecked(j, source);
  } catch (const json::exception& e) {
    throw Error(ErrorCode::corrupt_package, source + ": malformed manifest: " + e.what());
  }
}

Manifest Manifest::load(const std::filesystem::path& path) {
  std::string text = read_file(path);
  ordered_json j;
  try {
    // ordered parsing keeps the axes in template-parameter order
    j = nlohmann::ordered_json::parse(text);
  } catch (const json::exception& e) {  // parse errors, and numbers beyond double ("1e400")
    throw Error(ErrorCode::corrupt_package, path.string() + ": not valid JSON: " + e.what());
  }
  return manifest_from_json(j, path.string());
}

}  // namespace aotinfer
