// aotinfer coverage's output: a table for people, JSON for programs.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "aotinfer/arch.hpp"
#include "aotinfer/manifest.hpp"
#include "coverage/check.hpp"
#include "coverage/model_config.hpp"
#include "coverage/needs.hpp"

namespace aotinfer::coverage {

struct Report {
  const ModelConfig& model;
  const Needs& needs;
  const Manifest& manifest;
  std::string package;  // the package folder
  Arch arch;
  std::vector<Finding> findings;
};

// Every needed variant is present with code for the arch.
bool serves(const std::vector<Finding>& findings);

// {"families": {"<family>": {"include": [<entry>, ...]}, ...}}: the spec entries that add the
// missing variants (and the unknown ones, should the templates build them) to the spec of
// `manifest`; {} when none. A family the package holds no variant of has no entry in that spec
// yet, so it gets {"matrix": <entry>, "include": [<the others>]}.
nlohmann::ordered_json spec_patch(const std::vector<Finding>& findings, const Manifest& manifest);

std::string report_text(const Report& report);
nlohmann::ordered_json report_json(const Report& report);

}  // namespace aotinfer::coverage
