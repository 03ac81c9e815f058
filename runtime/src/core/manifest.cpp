#include "aotinfer/manifest.hpp"

#include "aotinfer/json.hpp"

#include <nlohmann/json.hpp>

#include "aotinfer/error.hpp"
#include "aotinfer/files.hpp"

namespace aotinfer {

using nlohmann::json;
using nlohmann::ordered_json;

ordered_json manifest_to_json(const Manifest& m) {
  ordered_json j;
  j["format"] = m.format;
  j["generator"] = m.generator;
  j["package"] = {{"name", m.package_name}, {"version", m.package_version}};
  j["spec"] = {{"file", m.spec_file}, {"sha256", m.spec_sha256}};
  j["archs"] = m.archs;
  j["variants"] = ordered_json::array();
  for (const auto& v : m.variants) {
    ordered_json axes = ordered_json::object();
    for (const auto& a : v.key.axes) axes[a.name] = value_json(a.value);
    ordered_json entries = ordered_json::array();
    for (const auto& e : v.entries)
      entries.push_back({{"name", e.name}, {"symbol", e.symbol}, {"launch_symbol", e.launch_symbol}});
    j["variants"].push_back({{"uri", v.key.uri()},
                             {"family", v.key.family},
                             {"axes", axes},
                             {"entries", entries},
                             {"file", v.file},
                             {"size", v.size},
                             {"sha256", v.sha256},
                             {"archs", v.archs}});
  }
  return j;
}

std::string Manifest::dump() const { return manifest_to_json(*this).dump(2) + "\n"; }

namespace {

// Reads a required member with a message that names the document and the JSON pointer.
template <typename T>
T member(const ordered_json& obj, const std::string& key, const std::string& where, const std::string& source) {
  if (!obj.is_object() || !obj.contains(key))
    throw Error(ErrorCode::corrupt_package, source + ": " + where + "/" + key + " is missing");
  try {
    return obj.at(key).get<T>();
  } catch (const json::exception&) {
    throw Error(ErrorCode::corrupt_package,
                source + ": " + where + "/" + key + " has the wrong type (" + obj.at(key).type_name() + ")");
  }
}

Manifest from_json_unchecked(const ordered_json& j, const std::string& source) {
  if (!j.is_object()) throw Error(ErrorCode::corrupt_package, source + ": a manifest is a JSON object");
  Manifest m;
  m.format = member<int>(j, "format", "", source);
  if (m.format != kManifestFormat)
    throw Error(ErrorCode::corrupt_package, source + ": manifest format " + std::to_string(m.format) +
                                                " is not supported by this runtime (it reads format " +
                                                std::to_string(kManifestFormat) + "); rebuild the package");
  m.generator = member<std::string>(j, "generator", "", source);
  auto package = member<ordered_json>(j, "package", "", source);
  m.package_name = member<std::string>(package, "name", "/package", source);
  m.package_version = member<std::string>(package, "version", "/package", source);
  auto spec = member<ordered_json>(j, "spec", "", source);
  m.spec_file = member<std::string>(spec, "file", "/spec", source);
  m.spec_sha256 = member<std::string>(spec, "sha256", "/spec", source);
  m.archs = member<std::vector<std::string>>(j, "archs", "", source);
  auto variants = member<ordered_json>(j, "variants", "", source);
  for (std::size_t i = 0; i < variants.size(); ++i) {
    const ordered_json& v = variants[i];
    std::string where = "/variants/" + std::to_string(i);
    ManifestVariant mv;
    auto uri = member<std::string>(v, "uri", where, source);
    try {
      mv.key = VariantKey::from_uri(uri);
      auto family = member<std::string>(v, "family", where, source);
      auto axes = member<ordered_json>(v, "axes", where, source);
      VariantKey declared{family, {}};
      for (const auto& [name, value] : axes.items()) declared.axes.push_back({name, value_text(value)});
      if (declared != mv.key)
        throw Error(ErrorCode::corrupt_package, "uri '" + uri + "' disagrees with family/axes " + declared.describe());
    } catch (const Error& e) {
      throw Error(ErrorCode::corrupt_package, source + ": " + where + ": " + e.what());
    }
    auto entries = member<ordered_json>(v, "entries", where, source);
    for (std::size_t k = 0; k < entries.size(); ++k) {
      const std::string at = where + "/entries/" + std::to_string(k);
      mv.entries.push_back({member<std::string>(entries[k], "name", at, source),
                            member<std::string>(entries[k], "symbol", at, source),
                            member<std::string>(entries[k], "launch_symbol", at, source)});
    }
    mv.file = member<std::string>(v, "file", where, source);
    mv.size = member<std::uint64_t>(v, "size", where, source);
    mv.sha256 = member<std::string>(v, "sha256", where, source);
    mv.archs = member<std::vector<std::string>>(v, "archs", where, source);
    m.variants.push_back(std::move(mv));
  }
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
  } catch (const json::parse_error& e) {
    throw Error(ErrorCode::corrupt_package, path.string() + ": not valid JSON: " + e.what());
  }
  return manifest_from_json(j, path.string());
}

}  // namespace aotinfer
