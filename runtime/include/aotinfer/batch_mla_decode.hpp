// Multi-head latent attention decode (DeepSeek-V3/R1, Kimi K2) over a paged latent cache,
// FlashInfer-style plan/run:
//
//   aotinfer::BatchMlaDecode mla(pkg, config);              // loads the variant and the merge
//   auto sizes = mla.workspace_sizes(max_batch);            // allocate once
//   mla.plan(kv_indptr, kv_last_page_len, kv_indices, num_pages, q_len, workspace, stream);
//   mla.run(args, stream);                                  // per layer: no host decisions
//
// The cache holds per token one latent row ckv (512 wide) and one RoPE key row kpe (64), shared
// by every head; the queries come absorbed (q_nope, 512 wide, and q_pe, 64 wide, per head). Every
// request has the same q_len (1..4) new tokens, causal among themselves: the decoded token and
// the speculative ones of multi-token prediction. The cache is 16-bit (the queries' type) or fp8
// e4m3 with per-tensor scales (config dtype_kv; run args ckv_scale and kpe_scale), as engines
// quantise DeepSeek's latent cache. Contract of the kernel:
// templates/aotinfer/params/batch_mla_decode.h.
//
// plan() partitions the keys with the decode planner (decode_plan.hpp: one KV head, the rows of
// a request in groups of the kernel's tile) and ships the partition with one async copy; run()
// launches the kernel (on Hopper, with 16-bit caches, the `decode_seesaw` entry where the rows
// fill the tile: num_heads x q_len >= 64) and, when the plan splits, merge_state's merge_varlen.
// In CUDA-graph mode (config cuda_graph, max_batch, q_len) the grids are fixed and every plan
// splits, so a graph captured once replays correctly after any later plan of up to max_batch
// requests of q_len tokens with the same workspace; the capture freezes the run arguments
// (pointers, sm_scale), so later plans' page ids go into the same kv_indices buffer.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <span>

#include "aotinfer/attention.hpp"
#include "aotinfer/decode_plan.hpp"
#include "aotinfer/dtype.hpp"
#include "aotinfer/package.hpp"
#include "aotinfer/tensor.h"

namespace aotinfer {

struct BatchMlaDecodeConfig {
  DType dtype = DType::bf16;  // q and o (and the cache, unless dtype_kv says otherwise)
  int num_heads = 16;         // query heads (1..128 in the models; any count >= 1 is served)
  int page_size = 64;
  bool cuda_graph = false;    // fixed grids for graph capture; needs max_batch and q_len
  std::int32_t max_batch = 0;  // CUDA-graph mode: the most requests a plan may have
  std::int32_t q_len = 0;      // CUDA-graph mode: the new tokens of every request of every plan (1..4)
  std::optional<DType> dtype_kv;  // the cache: unset or dtype, or e4m3 (fp8, with run-time scales)
};

struct MlaDecodeRunArgs {
  std::int32_t batch = 0;                     // must equal the planned batch
  const void* q_nope = nullptr;               // [batch * q_len, num_heads, 512]
  const void* q_pe = nullptr;                 // [batch * q_len, num_heads, 64]
  std::int64_t q_nope_stride = 0;             // elements between tokens' rows; 0: dense
  std::int64_t q_pe_stride = 0;
  const void* ckv = nullptr;                  // [pages, page_size, 512]
  const void* kpe = nullptr;                  // [pages, page_size, 64]
  std::int64_t ckv_stride_page = 0;           // elements between pages; 0: dense
  std::int64_t kpe_stride_page = 0;
  const std::int32_t* kv_indices = nullptr;   // device copy of what plan() saw
  void* o = nullptr;                          // [batch * q_len, num_heads, 512]
  float* lse = nullptr;                       // [batch * q_len, num_heads] or nullptr
  float sm_scale = 0;                         // required: MLA scales by the pre-absorption head_dim
  float ckv_scale = 1;                        // fp8 cache: real values are ckv_scale * ckv ...
  float kpe_scale = 1;                        // ... and kpe_scale * kpe (1 for a 16-bit cache)
};

// The cache's type of a config: dtype_kv, or dtype when unset.
inline DType mla_cache_dtype(const BatchMlaDecodeConfig& c) { return c.dtype_kv.value_or(c.dtype); }

class BatchMlaDecode {
 public:
  // Finds and loads the batch_mla_decode variant and merge_state (head_dim 512) of the package.
  // Throws Error(invalid_argument) for a bad config, Error(not_found) for a missing variant.
  BatchMlaDecode(const Package& package, const BatchMlaDecodeConfig& config);
  static void check_config(const BatchMlaDecodeConfig& config);
  static VariantKey variant_key(const BatchMlaDecodeConfig& config);
  ~BatchMlaDecode();
  BatchMlaDecode(BatchMlaDecode&&) noexcept;
  BatchMlaDecode& operator=(BatchMlaDecode&&) noexcept;

  // Workspace for plans of up to max_batch requests of up to max_q_len tokens (in CUDA-graph
  // mode the config's max_batch and q_len, whatever is asked).
  WorkspaceSizes workspace_sizes(std::int32_t max_batch, std::int32_t max_q_len = 4) const;

  // Host CSR metadata of the cache (kv_indices optional: checked against num_pages when given),
  // and the new tokens per request (1..4; the config's in CUDA-graph mode). Throws
  // Error(invalid_argument) before copying anything.
  void plan(std::span<const std::int32_t> kv_indptr, std::span<const std::int32_t> kv_last_page_len,
            std::span<const std::int32_t> kv_indices, std::int32_t num_pages, std::int32_t q_len,
            const Workspace& workspace, Stream stream);

  // Launches for the last plan. Throws Error(invalid_argument) without launching when no plan
  // was made, args.batch differs from it, a required pointer is null or not 16-byte aligned,
  // sm_scale is not positive, or a cache scale is not finite and positive (or not 1 with a
  // 16-bit cache).
  void run(const MlaDecodeRunArgs& args, Stream stream) const;

  // The same from described tensors (aotinfer/tensor.h): each is checked against the config and
  // the last plan (device, dtype, shape, strides, alignment) before anything is launched.
  void run(const aotinfer_batch_mla_decode_tensors& tensors, const aotinfer_mla_scalars& scalars, Stream stream) const;

  const DecodeWorkPlan& work_plan() const;
  const BatchMlaDecodeConfig& config() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace aotinfer
