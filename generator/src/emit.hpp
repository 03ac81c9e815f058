// Emitters: the text of everything the generator writes. Pure functions of their inputs, so
// the same spec and templates always give the same bytes.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

#include "aotinfer/manifest.hpp"
#include "schema.hpp"
#include "spec.hpp"

namespace aotinfer::gen {

std::string generator_id();  // "aotinfer-gen 0.1.0"

// The package as planned: every family's axes, every variant with its file and entry points,
// sizes and hashes unset (the seal step fills them from the built fatbins).
Manifest package_plan(const Spec& spec, const std::vector<FamilySchema>& families);

// One translation unit per variant: the template instantiation and its extern "C" entries.
std::string variant_source(const FamilySchema& family, const VariantKey& key);

struct NinjaOptions {
  std::filesystem::path nvcc;           // absolute
  std::filesystem::path templates_dir;  // absolute
  std::filesystem::path generator;      // absolute path of aotinfer-gen (runs the seal step)
  std::string launcher;                 // e.g. "ccache"; empty for none
};

std::string build_ninja(const Manifest& plan, const Spec& spec, const NinjaOptions& options);

// The flags the fatbins of the package compile with, or of one family where the spec gives it its
// own sass_from_ptx (nvcc-flags.txt holds them all and is an input of every compile, so that
// changing them rebuilds everything).
std::string nvcc_flags(const Spec& spec, const std::string& family = "");
// nvcc-flags.txt: the spec's flags, then each family's own ("family: flags") where it has any.
std::string nvcc_flags_text(const Spec& spec);

}  // namespace aotinfer::gen
