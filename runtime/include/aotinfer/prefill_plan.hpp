// The prefill work partition: plain C++, no CUDA. BatchPrefill::plan uses it; tests check it.
//
// A request's query tokens times the GQA group are its "packed rows" (params/batch_prefill.h);
// a CTA handles one tile of packed rows of one request against a range of its keys, for one KV
// head. The plan
//   1. picks the CTA query tile from the batch: the large tile when the average packed length
//      exceeds the small tile (less waste on short requests otherwise);
//   2. gives every tile its key extent (causal: only up to its last query's position; none for
//      the first queries of a request with more queries than keys; under a sliding window, only
//      from where its first query's window starts);
//   3. splits the extents into chunks only when the tiles alone cannot fill one wave of CTAs,
//      with the smallest KV-tile multiple for which the items fit in one wave (binary search:
//      the item count falls monotonically as the chunk grows);
//      batch-invariant plans (KvSplit fixed or none) take the large tile always and cut each
//      tile's keys by the fixed chunk or not at all, so a row's work depends on its request alone;
//   4. orders items by descending number of KV tiles, so the longest start first and the tail
//      is short;
//   5. lays out the float states of split tiles and the merge that combines them.
//
// The planner runs on the host for every plan(), and a large batch has thousands of items: in
// the unsplit plans such batches get, it sorts runs of a request's tiles rather than items,
// divides nothing per tile, allocates nothing once its buffers have grown, and writes the items
// in order, straight into the caller's arrays if asked (BatchPrefill: its pinned upload image).
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "aotinfer/attention.hpp"

namespace aotinfer {

struct PrefillTile {
  int rows = 0;         // packed query rows per CTA (launch info tile[0])
  int ctas_per_sm = 0;  // resident CTAs of that kernel per SM
};

struct PrefillPlanLimits {
  int num_sms = 0;
  int num_kv_heads = 0;  // CTAs per work item (grid.y)
  int num_qo_heads = 0;
  PrefillTile large, small;
  int kv_tile_tokens = 0;  // keys per pipeline stage: chunks are multiples of it
  bool causal = false;
  // Items are ordered longest first in units of this many keys: items whose keys round up to
  // as many units cost about the same. The KV tile, or its largest multiple up to 128 keys when
  // it is shorter, so that the 32- and 64-key tiles of the mma.sync kernels do not make each
  // causal tile its own run of equal cost (four times the sorting, for an order no better
  // balanced).
  int sort_unit_tokens() const { return kv_tile_tokens >= 128 ? kv_tile_tokens : 128 / kv_tile_tokens * kv_tile_tokens; }
  // CUDA-graph mode: the large tile always, and a fixed grid of graph_work items (see
  // prefill_capacity), so every plan within the capacity replays the same launches. 0 = off.
  std::int32_t graph_work = 0;
  KvSplit kv_split;  // adaptive, or a batch-invariant fixed split / none
  // A sliding window (BatchPrefillConfig::window_left): query token t of a request sees keys
  // from kv_len - qo_len + t - window_left on. < 0: no window.
  std::int32_t window_left = -1;
};

// Work items, split states and merge outputs any plan within (max_total_q, max_batch) can need:
// sizes the workspace and the CUDA-graph grids. A fixed split also needs the longest request's
// keys, max_kv_len (the other modes ignore it). Throws Error(invalid_argument) for unset limits,
// max_total_q outside 0 .. 2^31 - 1, a negative max_batch, or a fixed split without max_kv_len.
struct PrefillCapacity {
  std::int64_t work = 0;
  std::int64_t states = 0;
  std::int64_t outputs = 0;
};
PrefillCapacity prefill_capacity(std::int64_t max_total_q, std::int32_t max_batch, const PrefillPlanLimits& limits,
                                 std::int64_t max_kv_len = 0);

struct PrefillWorkPlan {
  bool large_tile = true;          // which kernel entry: prefill or prefill_small
  int tile_rows = 0;
  bool split = false;              // some tile's keys are split
  std::int32_t chunk_tokens = 0;   // keys per chunk when split
  std::int32_t num_work = 0;       // valid work items
  std::int32_t padded_work = 0;    // grid.x: num_work, or graph_work in CUDA-graph mode
  std::vector<std::int32_t> request, q_row, kv_begin, kv_end;  // [padded_work]
  std::vector<std::int32_t> state, state_stride;               // [padded_work]; state -1 = direct
  std::int32_t num_states = 0;
  // The merge: output i combines states merge_indptr[i] .. [i+1] into row merge_row[i] of o
  // viewed as [total_q * num_qo_heads, head_dim].
  std::vector<std::int32_t> merge_indptr;  // [num_outputs + 1]
  std::vector<std::int32_t> merge_row;     // [num_outputs]
  std::int32_t merge_outputs = 0;          // num_outputs()
  std::int32_t num_outputs() const { return merge_outputs; }
  std::vector<std::int32_t> scratch, runs;  // reused by the planner between calls
};

// Where a plan's arrays go: padded_work entries each for the six work arrays, num_outputs + 1
// for merge_indptr and num_outputs for merge_row (PrefillWorkPlan's vectors describe them).
struct PrefillWorkArrays {
  std::int32_t* request = nullptr;
  std::int32_t* q_row = nullptr;
  std::int32_t* kv_begin = nullptr;
  std::int32_t* kv_end = nullptr;
  std::int32_t* state = nullptr;
  std::int32_t* state_stride = nullptr;
  std::int32_t* merge_indptr = nullptr;
  std::int32_t* merge_row = nullptr;
};

// Lengths from an indptr array ([batch + 1], starting at 0, not decreasing); `what` names the
// array in errors (Error(invalid_argument)).
std::vector<std::int32_t> lengths_from_indptr(std::span<const std::int32_t> indptr, const char* what);

// The same into a reused vector (no allocation once it is large enough).
void lengths_from_indptr(std::span<const std::int32_t> indptr, const char* what, std::vector<std::int32_t>& lengths);

// Fills `plan` (its vectors are reused). Throws Error(invalid_argument) for unset limits, a
// batch whose sizes differ, a negative KV length, or a CUDA-graph plan beyond graph_work. A
// causal request may have more queries than keys: its first qo_len - kv_len queries see none.
void plan_prefill_work(std::span<const std::int32_t> qo_indptr, std::span<const std::int32_t> kv_lengths,
                       const PrefillPlanLimits& limits, PrefillWorkPlan& plan);

// The same plan with the arrays written where `place` says: the planner calls it once, after
// every check and with the plan's scalars set (padded_work, num_outputs(), num_states), and
// writes every entry of the arrays it returns that the kernels read: request and q_row always,
// the others only when the plan is split (otherwise every item covers its tile's keys and writes
// o directly, which the kernels know, and copy_work_arrays fills in). The plan's
// vectors are left empty. `place` may throw, which ends planning.
using PrefillArrayPlacer = std::function<PrefillWorkArrays(const PrefillWorkPlan&)>;
void plan_prefill_work(std::span<const std::int32_t> qo_indptr, std::span<const std::int32_t> kv_lengths,
                       const PrefillPlanLimits& limits, PrefillWorkPlan& plan, const PrefillArrayPlacer& place);

// Fills the plan's vectors from arrays a placed plan was written to (its padded_work and
// num_outputs() give the sizes), and from the plan's inputs what an unsplit plan leaves unwritten.
void copy_work_arrays(const PrefillWorkArrays& arrays, std::span<const std::int32_t> qo_indptr,
                      std::span<const std::int32_t> kv_lengths, const PrefillPlanLimits& limits, PrefillWorkPlan& plan);

}  // namespace aotinfer
