// What the attention front-ends share in checking their inputs and laying out workspaces.
// Internal.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "aotinfer/attention.hpp"

namespace aotinfer::detail {

// Arrays in the workspaces start at multiples of 256 bytes.
constexpr std::size_t kWorkspaceAlign = 256;
constexpr std::size_t align_up(std::size_t n) { return (n + kWorkspaceAlign - 1) / kWorkspaceAlign * kWorkspaceAlign; }

// Throws Error(invalid_argument), prefixed with `who`, unless both counts are positive and
// num_qo_heads is a multiple of num_kv_heads (the GQA group).
void check_head_counts(const std::string& who, int num_qo_heads, int num_kv_heads);

// Throws Error(invalid_argument), prefixed with `who`, when the workspace lacks the int bytes
// or (when float_bytes > 0) the float bytes a plan needs.
void check_workspace(const std::string& who, const Workspace& ws, std::size_t int_bytes, std::size_t float_bytes);

// Throws Error(invalid_argument), prefixed with `who`, when kv_indices (if given) is shorter than
// kv_indptr needs or names a page outside 0 .. num_pages - 1.
void check_page_ids(const std::string& who, std::span<const std::int32_t> kv_indptr,
                    std::span<const std::int32_t> kv_indices, std::int32_t num_pages);

// Throws Error(invalid_argument), prefixed with `who`, for a fixed KV split without a chunk of
// >= 1 tokens, or in CUDA-graph mode without max_kv_len >= 1 (the longest request sizes the grid).
void check_kv_split(const std::string& who, const KvSplit& split, bool cuda_graph, std::int64_t max_kv_len);

}  // namespace aotinfer::detail
