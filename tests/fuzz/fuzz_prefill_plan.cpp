// Fuzz target: the prefill planner's input checks, capacity and work partition, along the path
// BatchPrefill's constructor, plan_paged() / plan_ragged() and plan_lengths() take
// (runtime/src/ops/batch_prefill.cpp), without a GPU.
//
// From the input (fuzz_input.hpp's number code): the config (head counts, causal mask, paged or
// ragged KV, page size, CUDA-graph mode with max_batch and max_total_q), device limits within
// what GPUs have (SMs, the two query tiles and their occupancy, the KV tile), and the plan's
// arguments: qo_indptr, kv_indptr, kv_last_page_len, kv_indices and num_pages, arbitrary. Every
// call must either throw aotinfer::Error(invalid_argument), exactly when an independent recheck
// of the documented contract says the input is invalid, or produce a plan that passes
// reference::prefill_plan_problem, fits what prefill_capacity promised and equals a fresh plan
// of the same input and the same plan written into caller arrays (BatchPrefill's path).
//
// Input layout (tests/fuzz/seeds.py prefill_seed writes it): flags, flags2, then numbers:
// num_qo_heads, num_kv_heads, page_size, max_batch, max_total_q (64-bit); num_sms, large tile
// rows and occupancy, small tile rows and occupancy, KV tile; batch [, KV batch]; qo_indptr and
// kv_indptr (deltas, or raw values); paged: kv_last_page_len, num_pages [, kv_indices].
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "aotinfer/decode_plan.hpp"
#include "aotinfer/error.hpp"
#include "aotinfer/prefill_plan.hpp"
#include "fuzz/fuzz_input.hpp"
#include "planning/plan_inputs.hpp"
#include "fuzz/plan_checks.hpp"

using namespace aotinfer;
using fuzz::finding;
using fuzz::refused;
using fuzz::stop;

namespace {

constexpr std::int32_t kMaxBatch = 1024;       // requests per input
constexpr std::int64_t kMaxIndices = 1 << 16;
// Inputs whose plan would have more query tiles than this are skipped: the planner's cost is
// linear in the tiles (correct, but slow for a fuzzer), and the checker's too.
constexpr std::int64_t kMaxTiles = 1 << 13;
// Inputs whose longest KV spans more KV tiles than this are skipped: the planner's longest-first
// counting sort allocates and scans one bucket per KV tile of the longest request (4 bytes each:
// 134 MB for 2^31 keys in 64-key tiles). The KV tile ranges up to 65536 keys so that lengths
// near 2^31 stay reachable.
constexpr std::int64_t kMaxKvTiles = 1 << 16;
// CUDA-graph capacities beyond this many work items are skipped: the planner pads every plan to
// it (memory proportional to the configured capacity, by design).
constexpr std::int64_t kMaxGraphWork = 1 << 20;

// [batch + 1] entries, starting at 0, not decreasing (lengths_from_indptr's contract).
bool indptr_valid(const std::vector<std::int32_t>& indptr) {
  if (indptr.empty() || indptr[0] != 0) return false;
  for (std::size_t i = 0; i + 1 < indptr.size(); ++i)
    if (indptr[i + 1] < indptr[i]) return false;
  return true;
}

std::vector<std::int32_t> read_indptr(fuzz::Input& in, std::int32_t batch, bool raw) {
  std::vector<std::int32_t> indptr;
  std::int64_t at = 0;
  for (std::int32_t i = 0; i <= batch; ++i) {
    if (raw) {
      indptr.push_back(in.num());
    } else {
      at += i == 0 ? 0 : in.num();
      indptr.push_back(std::int32_t(std::uint32_t(std::uint64_t(at))));  // wraps: exercises the checks
    }
  }
  return indptr;
}

PrefillWorkPlan reused;  // one plan object across inputs, as BatchPrefill keeps one

// The plan written through plan_prefill_work's `place` into one buffer, as BatchPrefill writes
// its upload image; the buffer is filled first with a value no plan holds, so that an entry the
// planner skips shows. The arrays are then copied into the plan's vectors for the comparison.
PrefillWorkPlan placed;
std::vector<std::int32_t> buffer;

void plan_placed(const std::vector<std::int32_t>& qo_indptr, const std::vector<std::int32_t>& kv_lengths,
                 const PrefillPlanLimits& limits) {
  PrefillWorkArrays a;
  plan_prefill_work(qo_indptr, kv_lengths, limits, placed, [&](const PrefillWorkPlan& w) {
    const std::size_t work = std::size_t(w.padded_work), outputs = std::size_t(w.num_outputs());
    buffer.assign(6 * work + 2 * outputs + 1, -123456789);
    std::int32_t* b = buffer.data();
    a = {b, b + work, b + 2 * work, b + 3 * work, b + 4 * work, b + 5 * work, b + 6 * work, b + 6 * work + outputs + 1};
    return a;
  });
  if (!placed.request.empty() || !placed.merge_indptr.empty()) finding("plan_prefill_work with `place` filled the plan's vectors");
  copy_work_arrays(a, qo_indptr, kv_lengths, limits, placed);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fuzz::Input in(data, size);
  const std::uint8_t flags = in.byte(), flags2 = in.byte();
  const bool graph = flags & 1, causal = flags & 2, paged = flags & 4, raw_qo = flags & 8, raw_kv = flags & 16,
             give_indices = flags & 32, indices_count = flags & 64, last_count = flags & 128;
  const bool empty_qo = flags2 & 1, empty_kv = flags2 & 2, other_kv_batch = flags2 & 4, any_kv_tile = flags2 & 8;

  // The config and the device.
  const std::int32_t num_qo_heads = in.num(), num_kv_heads = in.num(), page_size = in.num(), max_batch = in.num();
  const std::int64_t max_total_q = in.num64();
  PrefillPlanLimits limits;
  limits.num_sms = in.in_range(1, 256);
  limits.large = {in.in_range(1, 256), in.in_range(1, 8)};  // launch info tile[0], occupancy
  limits.small = {in.in_range(1, 256), in.in_range(1, 8)};
  // launch info tile[1]: a power of two as kernels have, or any size
  limits.kv_tile_tokens = any_kv_tile ? in.in_range(1, 65536) : 1 << in.in_range(0, 16);
  limits.causal = causal;
  limits.num_qo_heads = num_qo_heads;
  limits.num_kv_heads = num_kv_heads;

  // The plan's arguments.
  const std::int32_t batch = in.in_range(0, kMaxBatch);
  const std::int32_t kv_batch = other_kv_batch ? in.in_range(0, kMaxBatch) : batch;
  std::vector<std::int32_t> qo_indptr, kv_indptr, last, indices;
  if (!empty_qo) qo_indptr = read_indptr(in, batch, raw_qo);
  if (!empty_kv) kv_indptr = read_indptr(in, kv_batch, raw_kv);
  std::int32_t num_pages = 0;
  if (paged) {
    const std::int32_t num_last = last_count ? in.in_range(0, kMaxBatch) : kv_batch;
    for (std::int32_t i = 0; i < num_last; ++i) last.push_back(in.num());
    num_pages = in.num();
    if (give_indices) {
      std::int64_t count = indices_count ? in.in_range(0, kMaxIndices) : (kv_indptr.empty() ? 0 : kv_indptr.back());
      if (count < 0 || count > kMaxIndices) count = kMaxIndices;
      for (std::int64_t i = 0; i < count; ++i) indices.push_back(in.num());
    }
  }

  // BatchPrefill's constructor.
  const bool heads_ok = num_qo_heads >= 1 && num_kv_heads >= 1 && num_qo_heads % num_kv_heads == 0;
  if (refused("check_head_counts", [&] { detail::check_head_counts("batch_prefill", num_qo_heads, num_kv_heads); }) != !heads_ok)
    finding(std::string("check_head_counts ") + (heads_ok ? "refused valid" : "accepted invalid") + " head counts");
  if (!heads_ok) return stop("head counts refused");
  if (paged && page_size < 1) return stop("the constructor refuses the page size");
  if (graph && (max_batch < 1 || max_total_q < 1)) return stop("the constructor refuses the CUDA-graph capacity");
  PrefillCapacity graph_capacity;
  if (graph) {
    limits.graph_work = 1;  // marks graph mode for prefill_capacity: the large tile only
    if (refused("prefill_capacity", [&] { graph_capacity = prefill_capacity(max_total_q, max_batch, limits); }))
      return stop("prefill_capacity refused the CUDA-graph capacity");
    if (graph_capacity.work > kMaxGraphWork) return stop("CUDA-graph capacity beyond 2^20 work items (skipped)");
    limits.graph_work = std::int32_t(graph_capacity.work);
  }

  // plan_paged / plan_ragged: the KV lengths.
  std::vector<std::int32_t> kv_lengths;
  if (paged) {
    std::vector<std::int32_t> expected;
    const bool ok = fuzz::paged_lengths_valid(kv_indptr, last, page_size, expected);
    if (refused("decode_kv_lengths", [&] { kv_lengths = decode_kv_lengths(kv_indptr, last, page_size); }) != !ok)
      finding(std::string("decode_kv_lengths ") + (ok ? "refused valid" : "accepted invalid") + " CSR metadata");
    if (!ok) return stop("paged CSR metadata refused");
    if (kv_lengths != expected) finding("decode_kv_lengths computed other lengths than pages * page_size + last");
    const bool ids_ok = fuzz::page_ids_valid(kv_indptr, indices, num_pages);
    if (refused("check_page_ids", [&] { detail::check_page_ids("batch_prefill", kv_indptr, indices, num_pages); }) != !ids_ok)
      finding(std::string("check_page_ids ") + (ids_ok ? "refused valid" : "accepted invalid") + " page ids");
    if (!ids_ok) return stop("page ids refused");
  } else {
    const bool ok = indptr_valid(kv_indptr);
    if (refused("lengths_from_indptr", [&] { kv_lengths = lengths_from_indptr(kv_indptr, "kv_indptr"); }) != !ok)
      finding(std::string("lengths_from_indptr ") + (ok ? "refused a valid" : "accepted an invalid") + " kv_indptr");
    if (!ok) return stop("kv_indptr refused");
    for (std::size_t i = 0; i < kv_lengths.size(); ++i)
      if (kv_lengths[i] != std::int64_t(kv_indptr[i + 1]) - kv_indptr[i]) finding("lengths_from_indptr computed a wrong length");
  }

  // plan_lengths: its own refusals, then the planner.
  if (qo_indptr.empty()) return stop("plan_lengths refuses an empty qo_indptr");
  const std::int64_t total_q = qo_indptr.back();
  if (total_q * num_qo_heads > INT32_MAX) return stop("plan_lengths refuses total_q * num_qo_heads >= 2^31");
  const std::int32_t qo_batch = std::int32_t(qo_indptr.size() - 1);
  if (graph && (qo_batch > max_batch || total_q > max_total_q)) return stop("plan_lengths refuses a batch beyond the CUDA-graph capacity");

  // The planner's contract: a valid qo_indptr, as many KV lengths as requests, fewer than 2^31
  // packed rows (a causal request may have more queries than keys).
  const std::int64_t group = num_qo_heads / num_kv_heads;
  bool valid = indptr_valid(qo_indptr) && kv_lengths.size() == std::size_t(qo_batch);
  std::int64_t tiles = 0, packed_total = 0;
  if (valid) {
    const std::int64_t rows = std::min(limits.large.rows, limits.small.rows);
    for (std::int32_t i = 0; i < qo_batch; ++i) {
      const std::int64_t qo = std::int64_t(qo_indptr[i + 1]) - qo_indptr[i];
      packed_total += qo * group;
      tiles += (qo * group + rows - 1) / rows;
    }
    if (packed_total > INT32_MAX) valid = false;
    if (tiles > kMaxTiles) return stop("more than 2^13 query tiles (skipped)");
    const std::int64_t longest = kv_lengths.empty() ? 0 : *std::max_element(kv_lengths.begin(), kv_lengths.end());
    if ((longest + limits.kv_tile_tokens - 1) / limits.kv_tile_tokens > kMaxKvTiles)
      return stop("the longest KV spans more than 2^16 KV tiles (skipped)");
  }

  std::string message;
  const bool planned = !refused("plan_prefill_work", [&] { plan_prefill_work(qo_indptr, kv_lengths, limits, reused); }, &message);
  if (planned != valid)
    finding(valid ? "plan_prefill_work refused a valid batch: " + message : "plan_prefill_work accepted an invalid batch");
  if (!planned) return stop("plan_prefill_work refused the batch");

  if (std::string problem = fuzz::prefill_plan_problem(qo_indptr, kv_lengths, limits, reused); !problem.empty())
    finding(problem);
  // The workspace: in CUDA-graph mode the config's capacity, else workspace_sizes(total_q, batch)
  // (the smallest a caller may pass for this batch).
  PrefillCapacity capacity = graph_capacity;
  if (!graph && refused("prefill_capacity", [&] { capacity = prefill_capacity(total_q, qo_batch, limits); }))
    finding("prefill_capacity refused the (total_q, batch) of a plan it made");
  if (std::string problem = fuzz::prefill_capacity_problem(reused, capacity); !problem.empty()) finding(problem);

  PrefillWorkPlan fresh;
  plan_prefill_work(qo_indptr, kv_lengths, limits, fresh);
  if (std::string problem = fuzz::prefill_plans_differ(reused, fresh); !problem.empty())
    finding("a reused plan differs from a fresh one: " + problem);
  plan_placed(qo_indptr, kv_lengths, limits);
  if (std::string problem = fuzz::prefill_plans_differ(reused, placed); !problem.empty())
    finding("a plan written into caller arrays differs from the plan's own: " + problem);
  if (fuzz::verbose())
    std::fprintf(stderr, "planned: large_tile %d, split %d, num_work %d, padded_work %d, chunk_tokens %d, states %d, outputs %d\n",
                 int(reused.large_tile), int(reused.split), reused.num_work, reused.padded_work, reused.chunk_tokens,
                 reused.num_states, reused.num_outputs());
  return 0;
}
