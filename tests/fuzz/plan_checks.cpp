// See plan_checks.hpp. tests/fuzz/CMakeLists.txt compiles this file without coverage
// instrumentation (sanitizers stay on).
#include "fuzz/plan_checks.hpp"

#include "reference/plan_invariants.hpp"

namespace aotinfer::fuzz {

std::string decode_plan_problem(std::span<const std::int32_t> lens, const DecodePlanLimits& l, const DecodeWorkPlan& p) {
  return reference::decode_plan_problem(lens, l, p);
}
std::string decode_plans_differ(const DecodeWorkPlan& a, const DecodeWorkPlan& b) { return reference::decode_plans_differ(a, b); }
std::string prefill_plan_problem(std::span<const std::int32_t> qo_indptr, std::span<const std::int32_t> kv,
                                 const PrefillPlanLimits& l, const PrefillWorkPlan& p) {
  return reference::prefill_plan_problem(qo_indptr, kv, l, p);
}
std::string prefill_capacity_problem(const PrefillWorkPlan& p, const PrefillCapacity& cap) {
  return reference::prefill_capacity_problem(p, cap);
}
std::string prefill_plans_differ(const PrefillWorkPlan& a, const PrefillWorkPlan& b) {
  return reference::prefill_plans_differ(a, b);
}

bool paged_lengths_valid(const std::vector<std::int32_t>& indptr, const std::vector<std::int32_t>& last,
                         std::int32_t page_size, std::vector<std::int32_t>& lengths) {
  if (page_size < 1 || indptr.empty() || last.size() != indptr.size() - 1 || indptr[0] != 0) return false;
  lengths.clear();
  for (std::size_t i = 0; i + 1 < indptr.size(); ++i) {
    const std::int64_t pages = std::int64_t(indptr[i + 1]) - indptr[i];
    if (pages < 0 || (pages > 0 && (last[i] < 1 || last[i] > page_size))) return false;
    const std::int64_t len = pages == 0 ? 0 : (pages - 1) * page_size + last[i];
    if (len > INT32_MAX) return false;
    lengths.push_back(std::int32_t(len));
  }
  return true;
}

bool page_ids_valid(const std::vector<std::int32_t>& indptr, const std::vector<std::int32_t>& indices,
                    std::int32_t num_pages) {
  if (indices.empty() || indptr.empty()) return true;
  const std::int64_t used = indptr.back();
  if (std::int64_t(indices.size()) < used) return false;
  for (std::int64_t i = 0; i < used; ++i)
    if (indices[i] < 0 || indices[i] >= num_pages) return false;
  return true;
}

}  // namespace aotinfer::fuzz
