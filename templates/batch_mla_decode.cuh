// batch_mla_decode: multi-head latent attention (DeepSeek-V3/R1, Kimi K2) decode against a
// paged latent cache, 1-4 query tokens per request (multi-token prediction). Contract:
// aotinfer/params/batch_mla_decode.h.
//
// Every head of every new token attends to the same 576-wide cache rows, so a request's
// tokens x heads fill the MMA's rows by themselves and each cache row is read once per CTA for
// both products. The sm_90a compile pass puts the Hopper kernel behind `decode`
// (aotinfer/mla_decode_sm90.cuh: wgmma, warp-specialized); every other pass the mma.sync kernel
// (aotinfer/mla_decode_mma.cuh). Each cubin exports its own launch info (rows and keys a CTA
// tile), which the runtime plans with. Long requests split over several work items, as decode's
// do; merge_state's merge_varlen (head_dim 512) combines their states.
//
// dtype is the queries' and the output's type; dtype_kv the cache's: dtype itself, or e4m3 with
// per-tensor scales (both kernels then widen the cache to f16 in shared memory).
#pragma once
#include <type_traits>

#include "aotinfer/abi.h"
#include "aotinfer/annotate.h"
#include "aotinfer/mla_decode_mma.cuh"
#include "aotinfer/mla_decode_sm90.cuh"
#include "aotinfer/params/batch_mla_decode.h"

namespace aotinfer {

template <typename dtype, typename dtype_kv = dtype>
struct AOTINFER_FAMILY("batch_mla_decode")
    AOTINFER_VALUES("dtype", "f16", "bf16")
    AOTINFER_VALUES("dtype_kv", "f16", "bf16", "e4m3") batch_mla_decode {
  static_assert(std::is_same_v<dtype_kv, dtype> || sizeof(dtype_kv) == 1,
                "a 16-bit cache has the queries' type (exclude the other pairs in the spec)");
  using Kernel = std::conditional_t<kSm90Pass, MlaDecodeSm90<dtype, dtype_kv>, MlaDecodeMma<dtype, dtype_kv>>;
  static constexpr aotinfer_launch_info decode_launch = Kernel::launch;

  AOTINFER_ENTRY static __device__ void decode(const aotinfer_batch_mla_decode_params& p) { Kernel::run(p); }

  // The Hopper kernel's seesaw schedule for full row groups, a separate entry so that `decode`'s
  // code stays as it is (the two in one kernel cost the memory-bound rows 2-3 %, docs/PERF.md).
  // Elsewhere (other passes, fp8 caches) the entry is empty and its launch info says so.
  static constexpr bool kSeesaw = kSm90Pass && sizeof(dtype_kv) == 2;
  static constexpr aotinfer_launch_info decode_seesaw_launch = kSeesaw ? MlaDecodeSm90<dtype, dtype_kv>::seesaw_launch
                                                                       : Kernel::launch;
  AOTINFER_ENTRY static __device__ void decode_seesaw(const aotinfer_batch_mla_decode_params& p) {
    if constexpr (kSeesaw) MlaDecodeSm90<dtype, dtype_kv>::run_seesaw(p);
  }
};

}  // namespace aotinfer
