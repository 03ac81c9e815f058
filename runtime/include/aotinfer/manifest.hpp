// The package manifest (manifest.json): what a kernel package holds. Written by the generator,
// read by the runtime and the CLI. docs/ARCHITECTURE.md describes the format; aotinfer/json.hpp
// has its JSON form.
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "aotinfer/variant.hpp"

namespace aotinfer {

inline constexpr int kManifestFormat = 1;

struct EntryPoint {
  std::string name;           // "merge", as declared in the template
  std::string symbol;         // extern "C" kernel name in the module
  std::string launch_symbol;  // __device__ aotinfer_launch_info global in the module
  bool operator==(const EntryPoint&) const = default;
};

// What one entry point needs per CTA on one SASS arch, read from its cubin when the package is
// sealed (so a kernel that cannot launch on a chip its code runs on is refused at build time).
struct KernelResources {
  std::string entry;               // EntryPoint::name
  std::uint32_t registers = 0;     // per thread
  std::uint32_t threads = 0;       // per CTA (the launch info's block)
  std::uint32_t static_smem = 0;   // bytes of __shared__ variables
  std::uint32_t dynamic_smem = 0;  // bytes the launch info requests
  std::uint32_t stack_bytes = 0;   // local memory per thread: the stack frame (local arrays, spills)
  bool operator==(const KernelResources&) const = default;
};

struct ArchResources {
  std::string arch;  // "sm_90a"
  std::vector<KernelResources> kernels;  // in entry order
  bool operator==(const ArchResources&) const = default;
};

struct ManifestVariant {
  VariantKey key;
  std::vector<EntryPoint> entries;
  std::string file;                          // relative to the package directory
  std::uint64_t size = 0;                    // bytes of `file`
  std::string sha256;                        // of `file`
  std::vector<std::string> archs;            // SASS archs present in `file`
  std::vector<std::string> ptx;              // PTX archs present in `file` ("compute_80")
  std::vector<ArchResources> resources;      // per SASS arch, in `archs` order (empty: not recorded)
  bool operator==(const ManifestVariant&) const = default;
};

// One axis of a family as its template declares it (what `aotinfer-gen families` prints): the
// values a spec may give it. Recorded so that a package alone tells a value its templates cannot
// build from one its spec left out.
struct ManifestAxis {
  std::string name;
  std::string kind;                          // "dtype", "enum", "bool" or "int"
  std::vector<std::string> allowed;          // canonical value text, in declaration order
  std::optional<std::string> default_value;  // the template's default argument
  std::optional<std::string> follows;        // an earlier axis whose value it copies by default
  bool operator==(const ManifestAxis&) const = default;
};

struct ManifestFamily {
  std::string name;
  std::vector<ManifestAxis> axes;  // template-parameter order

  const ManifestAxis* axis(std::string_view axis_name) const;  // nullptr when it has none of that name
  bool operator==(const ManifestFamily&) const = default;
};

struct Manifest {
  int format = kManifestFormat;
  std::string generator;  // "aotinfer-gen 0.1.0"
  std::string package_name;
  std::string package_version;
  std::string spec_file;    // the spec's file name, for messages that suggest spec edits
  std::string spec_sha256;  // of the canonical spec
  std::vector<std::string> archs;  // SASS archs of the spec
  std::string ptx;                 // PTX arch of the spec ("compute_80"), empty for none
  // Every family the generator's templates define, used by the spec or not. Empty in manifests
  // written before the generator recorded them; those load unchanged.
  std::vector<ManifestFamily> families;
  std::vector<ManifestVariant> variants;

  const ManifestFamily* family(std::string_view name) const;  // nullptr when not recorded

  // Reads a manifest file. Throws Error(not_found / corrupt_package) naming the file.
  static Manifest load(const std::filesystem::path& path);
  std::string dump() const;  // stable text: the same manifest always gives the same bytes

  bool operator==(const Manifest&) const = default;
};

}  // namespace aotinfer
