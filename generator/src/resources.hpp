// Kernel resources: what each entry point of a sealed variant needs per CTA on each SASS arch,
// read from the fatbin's own cubins (registers and stack from the ELF metadata, static shared
// memory from its section, block size and dynamic shared memory from the launch info the
// template exported), and checked against every chip that code would run on.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "aotinfer/manifest.hpp"

namespace aotinfer::gen {

// One ArchResources per SASS arch in `fatbin`, kernels in `entries` order. Throws
// Error(corrupt_package) when a cubin cannot be read or lacks an entry or its launch info.
std::vector<ArchResources> read_resources(std::string_view fatbin, const std::vector<EntryPoint>& entries);

// For every known chip: the variant's code the driver would load there (its highest SASS arch
// that runs on the chip) must fit the chip's per-CTA limits. One message per violation, naming
// the variant, entry, code arch, chip and limit; empty when everything fits.
std::vector<std::string> resource_problems(const ManifestVariant& variant);

}  // namespace aotinfer::gen
