// BatchPrefill's int workspace: where each array of a plan lives. The layout depends only on
// capacities, so in CUDA-graph mode every plan uses the same addresses. Internal; plain C++ (the
// CPU benchmark bench/bench_prefill_plan_cpu.cpp builds the same image).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "aotinfer/prefill_plan.hpp"
#include "planning/plan_inputs.hpp"

namespace aotinfer::detail {

struct PrefillIntLayout {
  std::size_t counts = 0;  // [num_work, num_outputs, pair counter]
  std::size_t request = 0, q_row = 0, kv_end = 0, kv_begin = 0, state = 0, state_stride = 0;
  std::size_t merge_indptr = 0, merge_row = 0;
  std::size_t bytes = 0;
  // What a plan without split tiles uploads: request and q_row (the kernels read no other array).
  std::size_t unsplit_bytes = 0;

  PrefillIntLayout(std::int64_t work, std::int64_t outputs) {
    const std::size_t per_work = align_up(std::size_t(work) * 4);
    request = align_up(3 * 4);
    q_row = request + per_work;
    unsplit_bytes = q_row + per_work;
    kv_end = unsplit_bytes;
    kv_begin = kv_end + per_work;
    state = kv_begin + per_work;
    state_stride = state + per_work;
    merge_indptr = state_stride + per_work;
    merge_row = merge_indptr + align_up(std::size_t(outputs + 1) * 4);
    bytes = merge_row + align_up(std::size_t(outputs) * 4);
  }

  // The plan's arrays inside an image of the workspace.
  PrefillWorkArrays arrays(char* image) const {
    auto at = [image](std::size_t offset) { return reinterpret_cast<std::int32_t*>(image + offset); };
    return {at(request), at(q_row), at(kv_begin), at(kv_end), at(state), at(state_stride), at(merge_indptr), at(merge_row)};
  }

  // The device counts the kernels read (the grids are fixed in CUDA-graph mode), and the
  // persistent kernel's pair counter at 0.
  void write_counts(char* image, const PrefillWorkPlan& plan) const {
    const std::int32_t values[3] = {plan.num_work, plan.num_outputs(), 0};
    std::memcpy(image + counts, values, sizeof values);
  }
};

}  // namespace aotinfer::detail
