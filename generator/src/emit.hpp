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

std::string build_ninja(const Manifest& plan, const std::string& nvcc_flags, const NinjaOptions& options);

// The flags every fatbin of the package compiles with (also written to nvcc-flags.txt, an input
// of every compile, so that changing them rebuilds everything).
std::string nvcc_flags(const Spec& spec);

// The nvcc flags that select the code a package holds: SASS for each arch, compressed.
std::vector<std::string> gencode_flags(const std::vector<std::string>& archs);

}  // namespace aotinfer::gen
