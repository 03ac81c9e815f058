// The planner targets' view of tests/reference/plan_invariants.hpp: the same checks, compiled in
// plan_checks.cpp without coverage instrumentation, so that libFuzzer steers by the planners'
// branches, not the checker's, and the checker costs what it costs in a normal build.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "aotinfer/decode_plan.hpp"
#include "aotinfer/prefill_plan.hpp"

namespace aotinfer::fuzz {

std::string decode_plan_problem(std::span<const std::int32_t> lens, const DecodePlanLimits& l, const DecodeWorkPlan& p);
std::string decode_plans_differ(const DecodeWorkPlan& a, const DecodeWorkPlan& b);
std::string prefill_plan_problem(std::span<const std::int32_t> qo_indptr, std::span<const std::int32_t> kv,
                                 const PrefillPlanLimits& l, const PrefillWorkPlan& p);
std::string prefill_capacity_problem(const PrefillWorkPlan& p, const PrefillCapacity& cap);
std::string prefill_plans_differ(const PrefillWorkPlan& a, const PrefillWorkPlan& b);

// The input contracts the planners' checks must enforce, restated independently: a paged CSR
// view (indptr from 0, non-decreasing, last_page_len in 1..page_size for non-empty requests,
// lengths within int32; fills `lengths` when valid) and page ids inside the pool.
bool paged_lengths_valid(const std::vector<std::int32_t>& indptr, const std::vector<std::int32_t>& last,
                         std::int32_t page_size, std::vector<std::int32_t>& lengths);
bool page_ids_valid(const std::vector<std::int32_t>& indptr, const std::vector<std::int32_t>& indices,
                    std::int32_t num_pages);

}  // namespace aotinfer::fuzz
