// Batch decode over a paged KV cache (one or a few query tokens per request), FlashInfer-style
// plan/run:
//
//   aotinfer::BatchDecode decode(pkg, config);               // picks + loads the variants
//   auto sizes = decode.workspace_sizes(max_batch);          // allocate once
//   decode.plan(indptr, last_page_len, indices, num_pages, workspace, stream);  // per batch shape
//   decode.run(args, stream);                                // per layer: no host decisions
//
// plan() runs on the CPU from host copies of the CSR metadata, validates them, partitions the
// work (decode_plan.hpp), and ships the partition with one async copy from pinned memory into
// the caller's int workspace. run() only launches the decode kernel, one launch whether or not
// the plan splits KV (the last item of a split request merges its partial states); it is
// capturable in a CUDA graph. In CUDA-graph mode (config
// cuda_graph, max_batch) the grid is fixed, so a graph captured once replays correctly after
// any later plan of up to max_batch requests with the same workspace. What a capture freezes is
// the run arguments: later plans may change the metadata and the data behind the pointers, not
// the pointers or the scalars (scales, cap, window, RoPE).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "aotinfer/attention.hpp"
#include "aotinfer/decode_plan.hpp"
#include "aotinfer/dtype.hpp"
#include "aotinfer/package.hpp"
#include "aotinfer/params/batch_decode.h"
#include "aotinfer/tensor.h"

namespace aotinfer {


struct BatchDecodeConfig {
  DType dtype_q = DType::bf16;
  DType dtype_kv = DType::bf16;
  DType dtype_o = DType::bf16;
  int head_dim = 128;
  int num_qo_heads = 32;
  int num_kv_heads = 8;  // num_qo_heads / num_kv_heads (1..64) is the GQA group size
  int page_size = 16;
  KvLayout layout = KvLayout::nhd;
  PosEncoding pos_encoding = PosEncoding::none;
  // Query tokens per request (1..16): the newest q_len tokens, whose keys the cache already
  // holds. More than one verifies speculative tokens: each KV byte is read once for all of them.
  // causal: token t of a request of n keys sees keys 0 .. n - q_len + t (each request then needs
  // at least q_len keys); false: every key.
  int q_len = 1;
  bool causal = true;
  // custom_mask: the run's custom_mask says which keys each token sees instead (causal is then
  // not read): a speculative tree, or any mask FlashInfer's prefill takes.
  bool custom_mask = false;
  // A sliding window (q_len 1): the query sees its own key and the window_left keys before it
  // (< 0: every key). The plan gives each request's work only those keys.
  std::int32_t window_left = -1;
  bool cuda_graph = false;      // fixed grid for graph capture; needs max_batch
  int max_batch = 0;
  KvSplit kv_split;             // adaptive, or batch-invariant: fixed chunks or none (attention.hpp)
  std::int64_t max_kv_len = 0;  // CUDA-graph mode with a fixed split: the longest request, which sizes the grid
};

struct DecodeRunArgs {
  std::int32_t batch = 0;  // must equal the planned batch
  const void* q = nullptr;                       // [batch * q_len, num_qo_heads, head_dim]
  std::int64_t q_stride = 0;                     // elements between q's token rows (a fused qkv slice); 0: dense
  void* k_pages = nullptr;                       // page pools in config.layout
  void* v_pages = nullptr;
  std::int64_t kv_stride_page = 0;               // elements between pages of both pools; 0: one page
  const std::int32_t* kv_indptr = nullptr;       // device copies of what plan() saw
  const std::int32_t* kv_indices = nullptr;
  const std::int32_t* kv_last_page_len = nullptr;
  void* o = nullptr;                             // [batch * q_len, num_qo_heads, head_dim]
  float* lse = nullptr;                          // [batch * q_len, num_qo_heads] or nullptr
  const std::int32_t* q_positions = nullptr;     // [batch * q_len] or nullptr (= kv_len - q_len + t)
  const float* sinks = nullptr;                  // [num_qo_heads] attention-sink logits, or nullptr
  // config.custom_mask only: request i's [q_len, kv_len] mask as row-major bits packed
  // little-endian (FlashInfer's packed_custom_mask) from byte mask_indptr[i] on, as
  // PrefillRunArgs::custom_mask (4-byte aligned, readable to the next multiple of 4 bytes).
  const std::uint8_t* custom_mask = nullptr;
  const std::int32_t* mask_indptr = nullptr;
  float sm_scale = 0;                            // 0 = 1/sqrt(head_dim)
  float logits_soft_cap = 0;                     // > 0: scores are soft-capped; <= 0: no cap
  float rope_scale = 1;
  float rope_theta = 1e4f;
  float k_scale = 1;                             // fp8 KV dequantisation
  float v_scale = 1;
};

class BatchDecode {
 public:
  // Finds and loads the batch_decode variant for the config. Throws
  // Error(invalid_argument) for bad head counts, Error(not_found) for a missing variant.
  BatchDecode(const Package& package, const BatchDecodeConfig& config);
  // What the constructor does before it looks at the package: refuse a config (the
  // Error(invalid_argument) it throws: head counts, GQA group, page size, CUDA-graph bounds) and
  // name the batch_decode variant it loads.
  static void check_config(const BatchDecodeConfig& config);
  static VariantKey variant_key(const BatchDecodeConfig& config);
  ~BatchDecode();
  BatchDecode(BatchDecode&&) noexcept;
  BatchDecode& operator=(BatchDecode&&) noexcept;

  // Workspace for plans of up to max_batch requests (config.max_batch in graph mode). A fixed
  // KV split also needs the longest request's keys (config.max_kv_len in graph mode).
  WorkspaceSizes workspace_sizes(std::int32_t max_batch, std::int64_t max_kv_len = 0) const;

  // Host CSR metadata; kv_indices (optional, may be empty) lets plan check page ids against
  // num_pages. Throws Error(invalid_argument) before copying anything.
  void plan(std::span<const std::int32_t> kv_indptr, std::span<const std::int32_t> kv_last_page_len,
            std::span<const std::int32_t> kv_indices, std::int32_t num_pages, const Workspace& workspace,
            Stream stream);

  // Launches for the last plan. Throws Error(invalid_argument) without launching when no plan
  // was made, args.batch differs from it, or a required pointer is null or not 16-byte aligned.
  // What pointers cannot tell (device, dtype, sizes of the arrays) is the caller's contract.
  void run(const DecodeRunArgs& args, Stream stream) const;

  // The same from described tensors (aotinfer/tensor.h): each is checked against the config
  // and the last plan (device, dtype, shape, strides, alignment) before anything is launched.
  void run(const aotinfer_batch_decode_tensors& tensors, const aotinfer_attention_scalars& scalars, Stream stream) const;

  const DecodeWorkPlan& work_plan() const;
  const BatchDecodeConfig& config() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace aotinfer
