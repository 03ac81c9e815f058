// Batch prefill (and chunked prefill, mixed batches): many query tokens per request against the
// request's paged or ragged KV, FlashInfer-style plan/run:
//
//   aotinfer::BatchPrefill prefill(pkg, config);                  // picks + loads the variants
//   auto sizes = prefill.workspace_sizes(max_total_q, max_batch);  // allocate once
//   prefill.plan_paged(qo_indptr, kv_indptr, kv_last_page_len, kv_indices, num_pages, ws, stream);
//   prefill.run(args, stream);                                     // per layer: no host decisions
//
// plan_*() runs on the CPU from host copies of the indptr arrays, validates them, partitions the
// work (prefill_plan.hpp: query tile, split-KV, item order, merge) and ships it with one async
// copy into the int workspace. run() only launches: the prefill kernel, then (when some tile's
// KV was split) merge_state's merge_varlen; it is capturable in a CUDA graph. In CUDA-graph mode
// (config cuda_graph, max_batch, max_total_q) the grids are fixed and the large query tile is
// always used, so a graph captured once replays correctly after any later plan within those
// bounds with the same workspace; the capture freezes the run arguments (pointers and scalars).
//
// Query token t of a request with qo_len queries and kv_len keys sits at position
// kv_len - qo_len + t: a causal mask lets it see keys 0 .. kv_len - qo_len + t (none for the
// first qo_len - kv_len queries of a request with more queries than keys: o = 0, lse = -inf;
// templates/aotinfer/params/batch_prefill.h has the whole contract).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "aotinfer/attention.hpp"
#include "aotinfer/dtype.hpp"
#include "aotinfer/package.hpp"
#include "aotinfer/prefill_plan.hpp"
#include "aotinfer/tensor.h"

namespace aotinfer {

enum class KvStorage { paged, ragged };  // batch_prefill_paged / batch_prefill_ragged
// Which keys a query token sees besides the window: all; those up to its own position; or those
// whose bit its request's custom mask sets (PrefillRunArgs::custom_mask). A run-time value: every
// variant serves all three.
enum class MaskMode { none, causal, custom };

struct BatchPrefillConfig {
  DType dtype_q = DType::bf16;
  DType dtype_kv = DType::bf16;  // f16 or bf16: the operand type (q is rounded to it); e4m3 or e5m2:
                                 // widened exactly to f16, the operand type (and q rounded to f16)
  DType dtype_o = DType::bf16;
  int head_dim = 128;     // width of q and K rows
  int head_dim_vo = 0;    // width of V and o rows; 0: head_dim (they differ only for MLA models' prefill: 192 / 128)
  int num_qo_heads = 32;
  int num_kv_heads = 8;  // num_qo_heads / num_kv_heads is the GQA group size
  KvStorage kv_storage = KvStorage::paged;
  int page_size = 16;            // paged
  KvLayout layout = KvLayout::nhd;  // paged pools; ragged K is [total_kv, num_kv_heads, head_dim], V head_dim_vo wide
  MaskMode mask = MaskMode::causal;
  // none, rope_llama (a variant axis) or alibi (a run-time bias: the none variant serves it)
  PosEncoding pos_encoding = PosEncoding::none;
  // A sliding window: query token t of a request sees keys kv_len - qo_len + t - window_left
  // onwards (< 0: no window). The plan gives each query tile only the keys its window keeps.
  std::int32_t window_left = -1;
  bool cuda_graph = false;      // fixed grids for graph capture; needs max_batch and max_total_q
  int max_batch = 0;
  std::int64_t max_total_q = 0;
  KvSplit kv_split;             // adaptive, or batch-invariant: fixed chunks or none (attention.hpp)
  std::int64_t max_kv_len = 0;  // CUDA-graph mode with a fixed split: the longest request, which sizes the grids

  int vo_dim() const { return head_dim_vo != 0 ? head_dim_vo : head_dim; }  // head_dim_vo, 0 resolved
};

struct PrefillRunArgs {
  std::int32_t batch = 0;     // must equal the planned batch
  std::int64_t total_q = 0;   // must equal qo_indptr[batch] of the plan
  const void* q = nullptr;    // [total_q, num_qo_heads, head_dim]
  std::int64_t q_stride = 0;  // elements between q's tokens (a slice of a fused qkv tensor); 0: dense
  const std::int32_t* qo_indptr = nullptr;  // device copies of what plan saw
  const void* k = nullptr;    // paged: the page pools in config.layout; ragged: [total_kv, heads, head_dim]
  const void* v = nullptr;    // the same, head_dim_vo wide
  std::int64_t kv_stride = 0;  // elements between pages (paged) or tokens (ragged) of k (and of v where the
                               // widths are equal); 0: packed
  const std::int32_t* kv_indptr = nullptr;         // paged: pages; ragged: tokens
  const std::int32_t* kv_indices = nullptr;        // paged only
  const std::int32_t* kv_last_page_len = nullptr;  // paged only
  void* o = nullptr;           // [total_q, num_qo_heads, head_dim_vo]
  float* lse = nullptr;        // [total_q, num_qo_heads] or nullptr
  const float* sinks = nullptr;  // [num_qo_heads] attention-sink logits, or nullptr
  float sm_scale = 0;          // 0 = 1/sqrt(head_dim)
  float logits_soft_cap = 0;   // > 0: scores are soft-capped; <= 0: no cap
  float rope_scale = 1;
  float rope_theta = 1e4f;
  float k_scale = 1;           // K/V dequantisation (fp8 caches): scores use k * k_scale, values v * v_scale
  float v_scale = 1;
  // MaskMode::custom only: request i's [qo_len, kv_len] mask as row-major bits packed
  // little-endian (numpy.packbits(bitorder="little"), FlashInfer's packed_custom_mask) from byte
  // mask_indptr[i] on (mask_indptr [batch + 1] on the device). custom_mask is 4-byte aligned and
  // read in aligned 4-byte words: its buffer must be readable up to a multiple of 4 bytes.
  const std::uint8_t* custom_mask = nullptr;
  const std::int32_t* mask_indptr = nullptr;
  // Elements between V's pages (paged) or tokens (ragged); 0: kv_stride when the widths are
  // equal (the kernels then step V with K's strides, so another value is refused), else packed V.
  std::int64_t v_stride = 0;
};

class BatchPrefill {
 public:
  // Finds and loads the prefill variant and merge_state(merge_varlen) for the config. Throws
  // Error(invalid_argument) for bad head counts or options, Error(not_found) for a missing variant.
  BatchPrefill(const Package& package, const BatchPrefillConfig& config);
  // What the constructor does before it looks at the package: refuse a config (the
  // Error(invalid_argument) it throws: head counts, page size, layout, position encoding,
  // head_dim_vo (unequal widths take 16-bit K/V without RoPE), CUDA-graph bounds) and name the
  // prefill variant it loads (merge_state's comes from MergeState::variant_key at head_dim_vo).
  static void check_config(const BatchPrefillConfig& config);
  static VariantKey variant_key(const BatchPrefillConfig& config);
  ~BatchPrefill();
  BatchPrefill(BatchPrefill&&) noexcept;
  BatchPrefill& operator=(BatchPrefill&&) noexcept;

  // Workspace for plans of up to max_total_q query tokens in max_batch requests (the config's
  // bounds in CUDA-graph mode). A fixed KV split also needs the longest request's keys.
  WorkspaceSizes workspace_sizes(std::int64_t max_total_q, std::int32_t max_batch, std::int64_t max_kv_len = 0) const;

  // Host metadata (kv_indices optional: when given, page ids are checked against num_pages).
  // Throw Error(invalid_argument) before copying anything, also when called for the other
  // KV storage than the config's.
  void plan_paged(std::span<const std::int32_t> qo_indptr, std::span<const std::int32_t> kv_indptr,
                  std::span<const std::int32_t> kv_last_page_len, std::span<const std::int32_t> kv_indices,
                  std::int32_t num_pages, const Workspace& workspace, Stream stream);
  void plan_ragged(std::span<const std::int32_t> qo_indptr, std::span<const std::int32_t> kv_indptr,
                   const Workspace& workspace, Stream stream);

  // Launches for the last plan. Throws Error(invalid_argument) without launching when no plan
  // was made, batch or total_q differ from it, or a required pointer is null or misaligned.
  // What pointers cannot tell (device, dtype, sizes of the arrays) is the caller's contract.
  void run(const PrefillRunArgs& args, Stream stream) const;

  // The same from described tensors (aotinfer/tensor.h): each is checked against the config
  // and the last plan (device, dtype, shape, strides, alignment) before anything is launched.
  void run(const aotinfer_batch_prefill_tensors& tensors, const aotinfer_attention_scalars& scalars, Stream stream) const;

  // The last plan. plan() writes the arrays straight into its pinned upload image; the first
  // call after a plan copies them into the returned plan's vectors (the scalars are set at once).
  const PrefillWorkPlan& work_plan() const;
  const PrefillPlanLimits& limits() const;
  const BatchPrefillConfig& config() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  void plan_lengths(std::span<const std::int32_t> qo_indptr, std::span<const std::int32_t> kv_lengths,
                    const Workspace& workspace, Stream stream);
};

}  // namespace aotinfer
