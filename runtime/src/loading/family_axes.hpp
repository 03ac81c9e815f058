// Packages built for other templates: an op names every axis its family's template has today,
// and a package whose family has more (a flag that has since become a run-time value, such as
// sliding_window or soft_cap before kernel ABI 2) was built by another aotinfer version.
#pragma once
#include "aotinfer/package.hpp"
#include "aotinfer/variant.hpp"

namespace aotinfer::detail {

// Throws Error(not_found) naming the axes the package's family has beyond `key`'s and the
// rebuild that fixes it. Nothing when the package does not hold the family (find() says so).
void check_family_axes(const Package& package, const VariantKey& key);

}  // namespace aotinfer::detail
