// Fuzz target: the decode planner's input checks and work partition, along the path
// BatchDecode's constructor and plan() take (runtime/src/ops/batch_decode.cpp), without a GPU.
//
// From the input (fuzz_input.hpp's number code): the config (head counts, page size, CUDA-graph
// mode, max_batch), device limits within what GPUs have (SMs, occupancy, the kernel's tiles),
// and the plan's arguments: kv_indptr, kv_last_page_len, kv_indices and num_pages, arbitrary.
// Every call must either throw aotinfer::Error(invalid_argument), exactly when an independent
// recheck of the documented contract says the input is invalid, or produce a plan that passes
// reference::decode_plan_problem, fits decode_max_work and equals a fresh plan of the same
// input (the planner reuses one plan object across inputs, as BatchDecode does).
//
// Input layout (tests/fuzz/seeds.py decode_seed writes it): flags, then numbers: num_qo_heads,
// num_kv_heads, page_size, max_batch; num_sms, occupancy, query rows per CTA, KV tile; batch;
// kv_indptr (deltas, or raw values); kv_last_page_len; num_pages [, kv_indices].
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "aotinfer/decode_plan.hpp"
#include "aotinfer/error.hpp"
#include "fuzz/fuzz_input.hpp"
#include "planning/plan_inputs.hpp"
#include "fuzz/plan_checks.hpp"

using namespace aotinfer;
using fuzz::finding;
using fuzz::refused;
using fuzz::stop;

namespace {

constexpr std::int32_t kMaxBatch = 4096;            // requests per input
constexpr std::int32_t kMaxGraphBatch = 1 << 16;    // CUDA-graph max_batch (sizes the padded grid)
constexpr std::int64_t kMaxIndices = 1 << 16;

DecodeWorkPlan reused;  // one plan object across inputs, as BatchDecode keeps one

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fuzz::Input in(data, size);
  const std::uint8_t flags = in.byte();
  const bool graph = flags & 1, raw_indptr = flags & 2, give_indices = flags & 4, indices_count = flags & 8,
             last_count = flags & 16, empty_indptr = flags & 32;

  // The config and the device.
  const std::int32_t num_qo_heads = in.num(), num_kv_heads = in.num(), page_size = in.num(), max_batch = in.num();
  DecodePlanLimits limits;
  limits.num_sms = in.in_range(1, 512);
  limits.ctas_per_sm = in.in_range(1, 32);
  const std::int32_t tile_rows = in.in_range(1, 16);  // launch info tile[0]: query rows of a CTA
  // launch info tile[1]: a power of two as kernels have, or any size
  limits.tile_tokens = flags & 64 ? in.in_range(1, 65536) : 1 << in.in_range(0, 16);

  // The plan's arguments.
  const std::int32_t batch = in.in_range(0, kMaxBatch);
  std::vector<std::int32_t> indptr, last, indices;
  if (!empty_indptr) {
    std::int64_t at = 0;
    for (std::int32_t i = 0; i <= batch; ++i) {
      if (raw_indptr) {
        indptr.push_back(in.num());
      } else {
        at += i == 0 ? 0 : in.num();
        indptr.push_back(std::int32_t(std::uint32_t(std::uint64_t(at))));  // wraps: exercises the checks
      }
    }
  }
  const std::int32_t num_last = last_count ? in.in_range(0, kMaxBatch) : batch;
  for (std::int32_t i = 0; i < num_last; ++i) last.push_back(in.num());
  const std::int32_t num_pages = in.num();
  if (give_indices) {
    std::int64_t count = indices_count ? in.in_range(0, kMaxIndices) : (indptr.empty() ? 0 : indptr.back());
    if (count < 0 || count > kMaxIndices) count = kMaxIndices;
    for (std::int64_t i = 0; i < count; ++i) indices.push_back(in.num());
  }

  // BatchDecode's constructor.
  const bool heads_ok = num_qo_heads >= 1 && num_kv_heads >= 1 && num_qo_heads % num_kv_heads == 0;
  if (refused("check_head_counts", [&] { detail::check_head_counts("batch_decode", num_qo_heads, num_kv_heads); }) != !heads_ok)
    finding("check_head_counts(" + std::to_string(num_qo_heads) + ", " + std::to_string(num_kv_heads) + ") " +
            (heads_ok ? "refused valid" : "accepted invalid") + " head counts");

  // decode_kv_lengths stands alone: check it on every input, also page sizes the constructor refuses.
  std::vector<std::int32_t> expected;
  const bool lengths_ok = fuzz::paged_lengths_valid(indptr, last, page_size, expected);
  std::vector<std::int32_t> lengths;
  if (refused("decode_kv_lengths", [&] { lengths = decode_kv_lengths(indptr, last, page_size); }) != !lengths_ok)
    finding(std::string("decode_kv_lengths ") + (lengths_ok ? "refused valid" : "accepted invalid") + " CSR metadata");
  if (lengths_ok && lengths != expected) finding("decode_kv_lengths computed other lengths than pages * page_size + last");

  if (!heads_ok) return stop("head counts refused");
  const int group = num_qo_heads / num_kv_heads;
  if (group > 64 || page_size < 1) return stop("the constructor refuses the group or page size");
  if (graph && (max_batch < 1 || max_batch > kMaxGraphBatch)) return stop("CUDA-graph max_batch outside 1..65536");
  const std::int64_t ctas_per_item = std::int64_t(num_kv_heads) * ((group + tile_rows - 1) / tile_rows);
  if (ctas_per_item > INT32_MAX) return stop("KV heads x row groups beyond int32");
  limits.ctas_per_item = std::int32_t(ctas_per_item);
  if (graph) limits.graph_work = decode_max_work(max_batch, limits);

  // plan().
  if (!lengths_ok) return stop("CSR metadata refused");
  if (graph && batch > max_batch) return stop("plan() refuses a batch beyond max_batch");
  const bool ids_ok = fuzz::page_ids_valid(indptr, indices, num_pages);
  if (refused("check_page_ids", [&] { detail::check_page_ids("batch_decode", indptr, indices, num_pages); }) != !ids_ok)
    finding(std::string("check_page_ids ") + (ids_ok ? "refused valid" : "accepted invalid") + " page ids");
  if (!ids_ok) return stop("page ids refused");

  // A chunk is an int32 multiple of the tile that may span the longest request.
  const std::int64_t longest = lengths.empty() ? 0 : *std::max_element(lengths.begin(), lengths.end());
  const bool longest_ok = longest <= INT32_MAX / limits.tile_tokens * std::int64_t(limits.tile_tokens);
  try {
    plan_decode_work(lengths, limits, reused);
    if (!longest_ok) finding("plan_decode_work accepted a request of " + std::to_string(longest) + " KV tokens");
  } catch (const Error& e) {
    if (longest_ok) finding(std::string("plan_decode_work refused a valid batch: ") + e.what());
    return stop("a request beyond the largest int32 chunk refused");
  }
  if (std::string problem = fuzz::decode_plan_problem(lengths, limits, reused); !problem.empty()) finding(problem);
  // The workspace BatchDecode sizes for this batch (or the graph's max_batch) holds the plan.
  const std::int32_t capacity = decode_max_work(graph ? max_batch : std::max(batch, 1), limits);
  if (reused.num_work > capacity || (!graph && reused.padded_work > capacity))
    finding("the plan has " + std::to_string(reused.num_work) + " work items; decode_max_work promised " + std::to_string(capacity));
  DecodeWorkPlan fresh;
  plan_decode_work(lengths, limits, fresh);
  if (std::string problem = fuzz::decode_plans_differ(reused, fresh); !problem.empty())
    finding("a reused plan differs from a fresh one: " + problem);
  if (fuzz::verbose())
    std::fprintf(stderr, "planned: split %d, num_work %d, padded_work %d, chunk_tokens %d\n", int(reused.split), reused.num_work,
                 reused.padded_work, reused.chunk_tokens);
  return 0;
}
