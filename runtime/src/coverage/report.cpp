#include "coverage/report.hpp"

#include <algorithm>

#include "aotinfer/json.hpp"

namespace aotinfer::coverage {

namespace {

using nlohmann::ordered_json;

std::string join(const std::vector<std::string>& items) {
  std::string s;
  for (std::size_t i = 0; i < items.size(); ++i) s += (i ? ", " : "") + items[i];
  return s;
}

bool wants_spec_entry(Status s) { return s == Status::missing || s == Status::unknown; }

// The spec has an entry for the family exactly when the package holds some variant of it.
bool holds_family(const Manifest& m, const std::string& family) {
  return std::any_of(m.variants.begin(), m.variants.end(), [&](const ManifestVariant& v) { return v.key.family == family; });
}

std::string op_label(const Need& need) { return std::string(op_name(need.op)); }

std::string layers_text(const ModelConfig& m) {
  std::vector<std::string> kinds;
  if (m.full_layers) kinds.push_back("full attention");
  if (m.sliding_layers) kinds.push_back("sliding window " + std::to_string(m.sliding_window.value_or(0)));
  kinds.insert(kinds.end(), m.other_layer_types.begin(), m.other_layer_types.end());
  return join(kinds);
}

// What the model's attention has beyond its heads and layer kinds.
std::string features_text(const ModelConfig& m) {
  std::string s;
  if (!m.latent_attention.empty()) s += ", " + m.latent_attention;
  if (m.no_rope_layers) s += ", no RoPE on " + std::to_string(m.no_rope_layers) + " layers";
  return s;
}

std::string model_line(const Report& r) {
  const ModelConfig& m = r.model;
  const std::string group = m.num_kv_heads > 0 && m.num_qo_heads % m.num_kv_heads == 0
                                ? " (GQA group " + std::to_string(m.num_qo_heads / m.num_kv_heads) + ")"
                                : "";
  return "model    " + m.source + ": " + (m.model_type.empty() ? "" : m.model_type + ", ") + std::to_string(m.num_qo_heads) +
         " query / " + std::to_string(m.num_kv_heads) + " KV heads" + group + ", head_dim " + std::to_string(m.head_dim) + ", " +
         layers_text(m) + features_text(m) + "; activations " + std::string(dtype_name(r.needs.activation)) + ", KV cache " +
         std::string(dtype_name(r.needs.kv_cache)) + "\n";
}

// The needs' notes, and the run-time values only config.json tells (needs.cpp notes the others).
std::vector<std::string> notes_of(const Report& r) {
  std::vector<std::string> notes = r.needs.notes;
  if (r.model.sm_scale) {
    const std::string scale = ordered_json(*r.model.sm_scale).dump();
    notes.push_back("attention_multiplier " + scale + ": pass sm_scale = " + scale + " at run time, not 1/sqrt(head_dim)");
  }
  return notes;
}

// The lines under a finding's row: what to do about it.
std::vector<std::string> advice(const Report& r, const Finding& f) {
  switch (f.status) {
    case Status::present:
      if (f.ptx.empty()) return {};
      return {"from PTX " + join(f.ptx) + ": the driver compiles it on first use (seconds); add \"" + r.arch.name() +
              "\" to \"archs\" of " + r.manifest.spec_file + " to skip that"};
    case Status::wrong_arch:
      return {"its code is for " + join(f.archs) + ": add \"" + r.arch.name() + "\" to \"archs\" of " + r.manifest.spec_file +
              " and rebuild the package"};
    case Status::missing:
      return {"to add it, " + spec_include_advice(f.need.key, r.manifest.spec_file, holds_family(r.manifest, f.need.key.family))};
    case Status::unsupported: return f.reasons;
    case Status::unknown:
      return {"the manifest does not say whether the templates can build it; if they can, " +
              spec_include_advice(f.need.key, r.manifest.spec_file, holds_family(r.manifest, f.need.key.family))};
  }
  return {};
}

std::string summary(const Report& r) {
  std::string counts;
  for (Status s : {Status::present, Status::wrong_arch, Status::missing, Status::unsupported, Status::unknown}) {
    const auto n = std::count_if(r.findings.begin(), r.findings.end(), [&](const Finding& f) { return f.status == s; });
    if (n) counts += (counts.empty() ? "" : ", ") + std::to_string(n) + " " + std::string(status_name(s));
  }
  return std::to_string(r.findings.size()) + " variants needed: " + counts + ". " + r.manifest.package_name +
         (serves(r.findings) ? " serves" : " does not serve") + " this model on " + r.arch.name() + "\n";
}

// The patch with one line per family, so that it reads as the spec's own "families" does.
std::string patch_text(const ordered_json& patch) {
  std::string s = "{\"families\": {\n";
  std::size_t i = 0;
  for (const auto& [family, entry] : patch["families"].items())
    s += "  " + ordered_json(family).dump() + ": " + entry.dump() + (++i < patch["families"].size() ? ",\n" : "\n");
  return s + "}}\n";
}

}  // namespace

bool serves(const std::vector<Finding>& findings) {
  return std::all_of(findings.begin(), findings.end(), [](const Finding& f) { return f.status == Status::present; });
}

ordered_json spec_patch(const std::vector<Finding>& findings, const Manifest& manifest) {
  ordered_json families = ordered_json::object();
  for (const auto& f : findings) {
    if (!wants_spec_entry(f.status)) continue;
    const std::string& name = f.need.key.family;
    const ordered_json entry = spec_include_entry(f.need.key);
    if (!holds_family(manifest, name) && !families.contains(name)) {
      families[name]["matrix"] = entry;  // a one-variant matrix: each axis takes one value
      continue;
    }
    ordered_json& family = families[name];
    if (family.contains("matrix") && family["matrix"] == entry) continue;
    ordered_json& include = family["include"];
    if (include.is_null()) include = ordered_json::array();
    if (std::find(include.begin(), include.end(), entry) == include.end()) include.push_back(entry);
  }
  return families.empty() ? ordered_json::object() : ordered_json{{"families", families}};
}

std::string report_text(const Report& r) {
  std::string s = model_line(r);
  s += "package  " + r.manifest.package_name + " " + r.manifest.package_version + " (" + r.package + ", spec " +
       r.manifest.spec_file + "), checked for " + r.arch.name() + "\n";
  std::vector<std::string> notes = notes_of(r);
  if (r.manifest.families.empty())
    notes.push_back("this package's manifest does not record what its templates can build (an older aotinfer-gen wrote it), "
                    "so a variant it lacks cannot be told missing or unsupported (\"unknown\")");
  for (const auto& n : notes) s += "note     " + n + "\n";

  std::size_t width = 2;
  for (const auto& f : r.findings) width = std::max(width, op_label(f.need).size());
  auto row = [&](const std::string& op, const std::string& status, const std::string& text) {
    return op + std::string(width + 2 - op.size(), ' ') + status + std::string(13 - status.size(), ' ') + text + "\n";
  };
  s += "\n" + row("OP", "STATUS", "VARIANT");
  for (const auto& f : r.findings) {
    s += row(op_label(f.need), std::string(status_name(f.status)), f.need.key.uri());
    for (const auto& line : advice(r, f)) s += row("", "", line);
  }
  s += "\n" + summary(r);
  if (const ordered_json patch = spec_patch(r.findings, r.manifest); !patch.empty())
    s += "spec entries that add the missing variants (merge into " + r.manifest.spec_file + "):\n" + patch_text(patch);
  return s;
}

ordered_json report_json(const Report& r) {
  const ModelConfig& m = r.model;
  ordered_json layers = ordered_json::array();
  if (m.full_layers) layers.push_back("full");
  if (m.sliding_layers) layers.push_back("window");
  for (const auto& t : m.other_layer_types) layers.push_back(t);
  ordered_json j = {
      {"model", {{"config", m.source}, {"model_type", m.model_type}, {"num_qo_heads", m.num_qo_heads},
                 {"num_kv_heads", m.num_kv_heads}, {"head_dim", m.head_dim}, {"dtype", std::string(dtype_name(r.needs.activation))},
                 {"kv_dtype", std::string(dtype_name(r.needs.kv_cache))}, {"layers", layers}}},
      {"package", {{"path", r.package}, {"name", r.manifest.package_name}, {"version", r.manifest.package_version},
                   {"spec", r.manifest.spec_file}, {"archs", r.manifest.archs},
                   {"records_templates", !r.manifest.families.empty()}}},
      {"arch", r.arch.name()},
      {"serves", serves(r.findings)},
      {"notes", notes_of(r)},
      {"needs", ordered_json::array()}};
  if (!m.latent_attention.empty()) j["model"]["latent_attention"] = m.latent_attention;
  for (const auto& f : r.findings) {
    std::string op(op_name(f.need.op));
    std::replace(op.begin(), op.end(), ' ', '_');  // "prefill_paged": one token for programs
    ordered_json n = {{"op", op}, {"family", f.need.key.family},
                      {"uri", f.need.key.uri()}, {"status", std::string(status_name(f.status))}};
    if (!f.archs.empty()) n["archs"] = f.archs;
    if (!f.ptx.empty()) n["ptx"] = f.ptx;
    if (!f.reasons.empty()) n["reasons"] = f.reasons;
    if (wants_spec_entry(f.status)) n["spec_entry"] = spec_include_entry(f.need.key);
    j["needs"].push_back(std::move(n));
  }
  if (const ordered_json patch = spec_patch(r.findings, r.manifest); !patch.empty()) j["spec_patch"] = patch;
  return j;
}

}  // namespace aotinfer::coverage
