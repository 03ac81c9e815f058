// Whether a package serves a model's needs on a GPU arch, and what to do where it does not.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "aotinfer/arch.hpp"
#include "aotinfer/manifest.hpp"
#include "coverage/needs.hpp"

namespace aotinfer::coverage {

enum class Status {
  present,      // the variant is in the package with code that runs on the arch
  wrong_arch,   // the variant is in the package, without code for the arch
  missing,      // the templates can build it; the spec did not ask for it
  unsupported,  // no spec can add it: the model needs what no template does
  unknown,      // not in the package, whose manifest does not record what the templates can build
};
std::string_view status_name(Status status);  // "present", "wrong-arch", ...

struct Finding {
  Need need;
  Status status = Status::missing;
  std::vector<std::string> reasons;  // unsupported: why
  std::vector<std::string> archs;    // present, wrong_arch: the archs the variant's code is for
  std::vector<std::string> ptx;      // present from PTX only: the PTX the driver compiles for the arch
};

// One finding per need. Arch availability is kernel()'s rule (device_code: SASS, else PTX); what the templates can
// build comes from the manifest's families, or, in a manifest without them, from the axes its
// variants have.
std::vector<Finding> check_needs(const Manifest& manifest, const std::vector<Need>& needs, const Arch& arch);

}  // namespace aotinfer::coverage
