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

}  // namespace aotinfer::fuzz
