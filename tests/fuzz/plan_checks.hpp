// The planner targets' view of tests/reference/plan_invariants.hpp: the same checks, compiled in
// plan_checks.cpp without coverage instrumentation, so that libFuzzer steers by the planners'
// branches, not the checker's, and the checker costs what it costs in a normal build.
#pragma once
#include <cstdint>
#include <span>
#include <string>

#include "aotinfer/decode_plan.hpp"
#include "aotinfer/prefill_plan.hpp"

namespace aotinfer::fuzz {

std::string decode_plan_problem(std::span<const std::int32_t> lens, const DecodePlanLimits& l, const DecodeWorkPlan& p);
std::string decode_plans_differ(const DecodeWorkPlan& a, const DecodeWorkPlan& b);
std::string prefill_plan_problem(std::span<const std::int32_t> qo_indptr, std::span<const std::int32_t> kv,
                                 const PrefillPlanLimits& l, const PrefillWorkPlan& p);
std::string prefill_capacity_problem(const PrefillWorkPlan& p, const PrefillCapacity& cap);
std::string prefill_plans_differ(const PrefillWorkPlan& a, const PrefillWorkPlan& b);

}  // namespace aotinfer::fuzz
