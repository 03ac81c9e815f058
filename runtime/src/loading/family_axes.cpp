#include "loading/family_axes.hpp"

#include <string>

#include "aotinfer/error.hpp"

namespace aotinfer::detail {

void check_family_axes(const Package& package, const VariantKey& key) {
  for (const ManifestFamily& family : package.manifest().families) {
    if (family.name != key.family) continue;
    std::string extra;
    for (const ManifestAxis& axis : family.axes)
      if (!key.find(axis.name)) extra += (extra.empty() ? "" : ", ") + axis.name;
    if (!extra.empty())
      throw Error(ErrorCode::not_found, "package " + package.path().string() + " was built by another aotinfer version: its " +
                                            key.family + " variants have axes this runtime does not know (" + extra +
                                            "; sliding windows, soft caps and the prefill mask are run-time values now); rebuild the package "
                                            "with this version (aotinfer-gen build SPEC)");
  }
}

}  // namespace aotinfer::detail
