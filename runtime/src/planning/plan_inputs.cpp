#include "planning/plan_inputs.hpp"

#include "aotinfer/error.hpp"

namespace aotinfer::detail {

void check_head_counts(const std::string& who, int num_qo_heads, int num_kv_heads) {
  auto invalid = [&](const std::string& what) { throw Error(ErrorCode::invalid_argument, who + ": " + what); };
  if (num_kv_heads < 1 || num_qo_heads < 1)
    invalid("head counts must be positive (num_qo_heads " + std::to_string(num_qo_heads) + ", num_kv_heads " +
            std::to_string(num_kv_heads) + ")");
  if (num_qo_heads % num_kv_heads != 0)
    invalid("num_qo_heads (" + std::to_string(num_qo_heads) + ") must be a multiple of num_kv_heads (" +
            std::to_string(num_kv_heads) + ")");
}

void check_kv_split(const std::string& who, const KvSplit& split, bool cuda_graph, std::int64_t max_kv_len) {
  if (split.mode != KvSplit::Mode::fixed) return;
  if (split.tokens < 1)
    throw Error(ErrorCode::invalid_argument,
                who + ": a fixed KV split needs a chunk of >= 1 tokens, got " + std::to_string(split.tokens));
  if (cuda_graph && max_kv_len < 1)
    throw Error(ErrorCode::invalid_argument, who + ": CUDA-graph mode with a fixed KV split needs max_kv_len >= 1 (the longest "
                                                   "request's keys, which size the fixed grid), got " +
                                                   std::to_string(max_kv_len));
}

void check_workspace(const std::string& who, const Workspace& ws, std::size_t int_bytes, std::size_t float_bytes) {
  auto invalid = [&](const std::string& what) { throw Error(ErrorCode::invalid_argument, who + ": " + what); };
  if (!ws.int_buffer || ws.int_bytes < int_bytes)
    invalid("the int workspace has " + std::to_string(ws.int_bytes) + " bytes; this plan needs " + std::to_string(int_bytes) +
            " (size it with workspace_sizes)");
  if (float_bytes > 0 && (!ws.float_buffer || ws.float_bytes < float_bytes))
    invalid("the float workspace has " + std::to_string(ws.float_bytes) + " bytes; this plan needs " +
            std::to_string(float_bytes) + " (size it with workspace_sizes)");
}

void check_page_ids(const std::string& who, std::span<const std::int32_t> kv_indptr,
                    std::span<const std::int32_t> kv_indices, std::int32_t num_pages) {
  if (kv_indices.empty() || kv_indptr.empty()) return;
  auto invalid = [&](const std::string& what) { throw Error(ErrorCode::invalid_argument, who + ": " + what); };
  const std::int32_t used = kv_indptr.back();
  if (std::int64_t(kv_indices.size()) < used)
    invalid("kv_indices has " + std::to_string(kv_indices.size()) + " entries; kv_indptr needs " + std::to_string(used));
  for (std::int32_t i = 0; i < used; ++i)
    if (kv_indices[i] < 0 || kv_indices[i] >= num_pages)
      invalid("kv_indices[" + std::to_string(i) + "] = " + std::to_string(kv_indices[i]) +
              (num_pages > 0 ? " is not a page of the pool (0.." + std::to_string(num_pages - 1) + ")"
                             : " names a page, but num_pages is " + std::to_string(num_pages) + ": the pool has no pages"));
}

}  // namespace aotinfer::detail
