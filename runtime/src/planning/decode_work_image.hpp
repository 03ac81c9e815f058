// The decode planner's work partition (decode_plan.hpp) as the decode kernels read it from the
// int workspace: where each array lives, and the writing of a plan into the pinned upload image.
// batch_decode and batch_mla_decode share it. Internal.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>

#include "aotinfer/decode_plan.hpp"

namespace aotinfer::detail {

// Offsets of the arrays for up to work_capacity items and batch_capacity requests. The layout
// depends only on the capacities, so in CUDA-graph mode every plan uses the same addresses.
struct DecodeWorkLayout {
  std::size_t counts = 0;  // [num_work, batch]
  std::size_t request = 0, kv_begin = 0, kv_end = 0, page_begin = 0, kv_len = 0, merge_indptr = 0;
  std::size_t end = 0;  // past merge_indptr

  DecodeWorkLayout(std::int32_t work_capacity, std::int32_t batch_capacity);
};

// Writes the counts, the items (padding past num_work: request 0, no keys) and merge_indptr of
// `work` into `image`. kv_indptr gives each item's first page entry, kv_lengths its request's keys.
void write_decode_work(char* image, const DecodeWorkLayout& layout, const DecodeWorkPlan& work, std::int32_t batch,
                       std::span<const std::int32_t> kv_indptr, std::span<const std::int32_t> kv_lengths);

// Points the work arrays of a decode kernel's params (batch_decode's, batch_mla_decode's: the same
// fields) at a plan written there.
template <typename Params>
void point_at_work(Params& p, const DecodeWorkLayout& layout, const void* int_buffer) {
  auto array = [&](std::size_t offset) { return reinterpret_cast<const std::int32_t*>(static_cast<const char*>(int_buffer) + offset); };
  p.work_request = array(layout.request);
  p.work_kv_begin = array(layout.kv_begin);
  p.work_kv_end = array(layout.kv_end);
  p.work_page_begin = array(layout.page_begin);
  p.work_kv_len = array(layout.kv_len);
  p.num_work = array(layout.counts);
}

}  // namespace aotinfer::detail
