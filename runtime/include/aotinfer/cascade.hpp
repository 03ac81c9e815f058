// Cascade attention for requests that share KV prefixes (system prompts, parallel sampling, beam
// search). The KV lies in levels of one paged pool, level 0 the most shared. Each level groups
// the batch's query tokens its own way: level l's group g owns query rows qo_indptr[l][g] ..
// [g+1] (every level covers the same total_q rows) and has its own pages (a paged CSR). A query
// row attends to the union of its groups' keys over all levels:
//
//   aotinfer::Cascade cascade(pkg, {level_config, 2});               // one BatchPrefill per level
//   auto sizes = cascade.workspace_sizes(max_total_q, max_groups);    // allocate once
//   cascade.plan(levels, num_pages, workspace, stream);               // per batch composition
//   cascade.run(args, stream);                                        // per layer; graph-capturable
//
// Each level is a paged batch prefill of its groups, planned into its own region of the int
// workspace (run() reads every level's plan). run() launches level 0 straight into o/lse, then
// each further level into scratch of the float workspace and merges it into o/lse
// (merge_state): the levels run one after another on the stream, so they share the float
// workspace for their split-KV states. As in FlashInfer's MultiLevelCascadeAttentionWrapper the
// config's mask applies to the last level only (the requests' own KV); earlier levels are
// unmasked, so every query sees its whole shared prefix. Within a level, query token t of a group
// with qo_len queries and kv_len keys sits at position kv_len - qo_len + t (batch_prefill.hpp).
// Attention sinks join the last level's softmax only, so each row holds its sink once.
//
// CUDA-graph mode (config.level.cuda_graph, max_batch = the most groups of any level,
// max_total_q): every level has fixed grids and the workspace layout depends only on the
// bounds, so a graph captured once replays any later plan within them, with the same workspace
// and buffers (the capture freezes the run arguments). The merges then cover max_total_q rows:
// o and lse must have max_total_q rows, and those past the plan's total_q hold unspecified
// values after a run.
#pragma once
#include <cstdint>
#include <memory>
#include <span>

#include "aotinfer/batch_prefill.hpp"
#include "aotinfer/tensor.h"

namespace aotinfer {

struct CascadeConfig {
  // Every level's prefill: paged KV; the mask is the last level's (the others take none). No
  // RoPE or sliding window: both count positions, which restart in each level (rotate q and K
  // before caching them instead). head_dim_vo 0 (or head_dim): the levels merge head_dim wide.
  BatchPrefillConfig level;
  int num_levels = 1;
};

// One level's host metadata, as BatchPrefill::plan_paged takes it.
struct CascadeLevel {
  std::span<const std::int32_t> qo_indptr;         // [groups + 1] tokens, from 0 to total_q
  std::span<const std::int32_t> kv_indptr;         // [groups + 1] pages
  std::span<const std::int32_t> kv_last_page_len;  // [groups]
  std::span<const std::int32_t> kv_indices;        // optional: page ids, then checked against num_pages
};

// One level's device copies of what plan() saw.
struct CascadeLevelArrays {
  const std::int32_t* qo_indptr = nullptr;
  const std::int32_t* kv_indptr = nullptr;
  const std::int32_t* kv_indices = nullptr;
  const std::int32_t* kv_last_page_len = nullptr;
};

struct CascadeRunArgs {
  std::int64_t total_q = 0;        // must equal the plan's
  const void* q = nullptr;         // [total_q, num_qo_heads, head_dim]
  const void* k_pages = nullptr;   // the shared pools in config.level.layout
  const void* v_pages = nullptr;
  std::int64_t kv_stride = 0;      // elements between pages of k and v; 0: packed
  std::span<const CascadeLevelArrays> levels;  // [num_levels]
  void* o = nullptr;               // [total_q, num_qo_heads, head_dim] (CUDA-graph mode: max_total_q rows)
  float* lse = nullptr;            // [rows of o, num_qo_heads] or nullptr
  const float* sinks = nullptr;    // [num_qo_heads] attention-sink logits, or nullptr
  float sm_scale = 0;              // 0 = 1/sqrt(head_dim)
  float logits_soft_cap = 0;       // > 0: scores are soft-capped; <= 0: no cap
};

class Cascade {
 public:
  // Loads one BatchPrefill per level and merge_state for dtype_o. Throws Error(invalid_argument)
  // for a config check_config refuses, Error(not_found) for a missing variant.
  Cascade(const Package& package, const CascadeConfig& config);
  static void check_config(const CascadeConfig& config);
  // plan()'s checks of the levels' shapes, which need no GPU: num_levels levels, each with
  // groups + 1 qo_indptr and kv_indptr entries and groups kv_last_page_len entries, every
  // qo_indptr from 0 to the same total_q. Returns total_q. (Each level's plan checks the rest.)
  static std::int64_t check_levels(const CascadeConfig& config, std::span<const CascadeLevel> levels);
  ~Cascade();
  Cascade(Cascade&&) noexcept;
  Cascade& operator=(Cascade&&) noexcept;

  // Workspace for plans of up to max_total_q query tokens and max_groups groups in every level
  // (the config's bounds in CUDA-graph mode); a fixed KV split also needs the longest group's
  // keys. int: the levels' plans side by side; float: the largest level's split states and the
  // scratch of one level's o and lse.
  WorkspaceSizes workspace_sizes(std::int64_t max_total_q, std::int32_t max_groups, std::int64_t max_kv_len = 0) const;

  // Plans every level (levels.size() == num_levels) against one pool of num_pages pages.
  // Throws Error(invalid_argument) naming the level and argument; a failed plan leaves nothing
  // runnable.
  void plan(std::span<const CascadeLevel> levels, std::int32_t num_pages, const Workspace& workspace, Stream stream);

  // Launches the last plan: num_levels prefills and num_levels - 1 merges. Every check comes
  // before the first launch (nulls, alignment, total_q, the levels' count); what pointers cannot
  // tell (device, dtype, sizes) is the caller's contract.
  void run(const CascadeRunArgs& args, Stream stream) const;
  // The same from described tensors, each checked against the config and the plan first.
  void run(const aotinfer_cascade_tensors& tensors, const aotinfer_attention_scalars& scalars, Stream stream) const;

  const CascadeConfig& config() const;
  const BatchPrefill& level(int l) const;  // its plan: level(l).work_plan()

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace aotinfer
