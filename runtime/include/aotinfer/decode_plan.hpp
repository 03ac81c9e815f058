// The decode work partition: plain C++, no CUDA. BatchDecode::plan uses it; tests check it.
//
// Decode reads each request's KV once; a CTA handles one work item (a request's KV range) for
// one KV head. When the batch alone cannot fill the GPU, long requests are split into chunks
// (split-KV) whose partial states a merge kernel combines. The chunk size is the smallest
// multiple of the KV tile for which the work items fit in one wave of CTAs, found by binary
// search (the item count falls monotonically as the chunk grows). A batch that fills a wave
// runs whole requests, longest first, unless one request is longer than twice a wave slot's
// share of the batch's keys: then chunks of that share even the waves out. Batch-invariant plans
// (KvSplit fixed or none) instead cut every request by its own length alone. Under a sliding
// window a request's items cover only the keys the window keeps, and chunks count from the
// window's first key.
#pragma once
#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "aotinfer/attention.hpp"

namespace aotinfer {

struct DecodePlanLimits {
  int num_sms = 0;        // multiprocessors of the device
  int ctas_per_sm = 0;    // resident CTAs per SM: occupancy, capped at what the kernel needs to stream (launch info)
  int ctas_per_item = 0;  // CTAs launched per work item (KV heads x query-row groups)
  int tile_tokens = 0;    // KV tokens per pipeline stage: chunk sizes are multiples of it
  // CUDA-graph mode: a fixed grid of this many work items (>= decode_max_work), always split,
  // so every plan of up to max_batch requests replays the same captured launches. 0 = off.
  std::int32_t graph_work = 0;
  KvSplit kv_split;  // adaptive, or a batch-invariant fixed split / none
  // A sliding window (BatchDecodeConfig::window_left): a request of n keys attends to keys
  // n - 1 - window_left .. n - 1 only. < 0: to every key.
  std::int32_t window_left = -1;
  // The first key a request of `len` keys attends to.
  std::int32_t first_key(std::int32_t len) const { return window_left < 0 ? 0 : std::max(0, len - 1 - window_left); }
};

struct DecodeWorkPlan {
  bool split = false;              // partial states + merge, or direct output
  std::int32_t num_work = 0;       // valid work items
  std::int32_t padded_work = 0;    // grid.x: num_work, or graph_work in CUDA-graph mode
  std::int32_t chunk_tokens = 0;   // KV tokens per item when split (0 = whole requests)
  std::vector<std::int32_t> request;       // [padded_work]; padding: request 0, empty range
  std::vector<std::int32_t> kv_begin;      // [padded_work]
  std::vector<std::int32_t> kv_end;        // [padded_work]
  std::vector<std::int32_t> merge_indptr;  // [batch + 1] when split: items of request i
};

// Work items that fill the GPU once: num_sms * ctas_per_sm / ctas_per_item (at least 1).
std::int32_t decode_wave_items(const DecodePlanLimits& limits);

// The most work items any plan of up to max_batch requests can have: sizes the workspace and
// the CUDA-graph grid. A fixed split needs the longest request, max_kv_len (Error(invalid_argument)
// without it); the other modes ignore it.
std::int32_t decode_max_work(std::int32_t max_batch, const DecodePlanLimits& limits, std::int64_t max_kv_len = 0);

// KV lengths from the CSR view; throws Error(invalid_argument) naming the first bad entry
// (indptr not starting at 0 or decreasing, last_page_len outside 1..page_size).
std::vector<std::int32_t> decode_kv_lengths(std::span<const std::int32_t> indptr,
                                            std::span<const std::int32_t> last_page_len, std::int32_t page_size);

// Fills `plan` (its vectors are reused to avoid allocation). Throws Error(invalid_argument)
// when limits are unset or a CUDA-graph plan would exceed graph_work.
void plan_decode_work(std::span<const std::int32_t> kv_lengths, const DecodePlanLimits& limits, DecodeWorkPlan& plan);

}  // namespace aotinfer
