// batch_prefill_paged and batch_prefill_ragged: every query token of a batch of requests
// attends to its request's KV (paged cache or ragged tensors). Contract:
// aotinfer/params/batch_prefill.h. Both families run the same kernels and differ only in where K
// and V rows live (the KvRows policy, aotinfer/prefill_work.cuh).
//
// Two entries per variant, one per CTA query tile, so that the planner can match the tile to the
// batch: `prefill` (128 packed rows) and `prefill_small` (64 rows), which wastes fewer rows on
// short or decode-like requests. The large tile comes twice: `prefill` for masks none and causal,
// and `prefill_general`, which adds windows, soft caps, ALiBi and custom masks (KeyLoop,
// aotinfer/prefill_work.cuh); the runtime picks by the config. `prefill_small` serves every
// feature in one entry: a third kernel of the mma.sync code on every arch would cost a fifth of
// the default package's build time, for the tile that runs the fewest keys. Behind `prefill`, the sm_90a compile pass puts the Hopper
// kernel (aotinfer/prefill_sm90.cuh: wgmma, warp-specialized); every other pass the mma.sync
// kernel (aotinfer/prefill_mma.cuh: 2 m-tiles per warp; 64 rows for head_dim 256, whose output
// accumulators leave no registers for a second m-tile), which also serves `prefill_small`.
// Each cubin exports its own launch info, so the runtime takes whichever geometry it loaded.
//
// head_dim is the width of q and K rows, head_dim_vo that of V and o rows: equal, but for the
// prefill of MLA models (DeepSeek-V3, Kimi K2), which is ordinary attention at head_dim 192 and
// head_dim_vo 128 (PrefillDims says which pairs the kernels serve). head_dim 192 exists for that
// pair only, so its variants name head_dim_vo explicitly.
#pragma once
#include "aotinfer/abi.h"
#include "aotinfer/annotate.h"
#include "aotinfer/attention.cuh"
#include "aotinfer/prefill_mma.cuh"
#include "aotinfer/prefill_sm90.cuh"

namespace aotinfer {

// The entries of a prefill family over the KV source `KvRows`: the two query tiles.
#define AOTINFER_PREFILL_ENTRIES(KvRows)                                                                        \
  using Dims = PrefillDims<head_dim, head_dim_vo>;                                                              \
  template <int kMmaQ, bool kGeneral>                                                                          \
  using Kernel = PrefillMma<dtype_q, dtype_kv, Dims, dtype_o, pos_encoding, KvRows, kMmaQ, kGeneral>;           \
  template <bool kGeneral>                                                                                      \
  using Large = std::conditional_t<kSm90Pass && prefill_sm90_serves<dtype_q, dtype_kv, Dims, dtype_o,            \
                                                                    pos_encoding>(),                            \
                                   PrefillSm90<dtype_q, dtype_kv, Dims, dtype_o, pos_encoding, KvRows,            \
                                               kGeneral>,                                                       \
                                   Kernel<head_dim_vo <= 128 ? 2 : 1, kGeneral>>;                                 \
                                                                                                                \
  static constexpr aotinfer_launch_info prefill_launch = Large<false>::launch;                                  \
  AOTINFER_ENTRY static __device__ void prefill(const aotinfer_batch_prefill_params& p) { Large<false>::run(p); } \
                                                                                                                \
  static constexpr aotinfer_launch_info prefill_general_launch = Large<true>::launch;                           \
  AOTINFER_ENTRY static __device__ void prefill_general(const aotinfer_batch_prefill_params& p) {               \
    Large<true>::run(p);                                                                                        \
  }                                                                                                             \
                                                                                                                \
  static constexpr aotinfer_launch_info prefill_small_launch = Kernel<1, true>::launch;                         \
  AOTINFER_ENTRY static __device__ void prefill_small(const aotinfer_batch_prefill_params& p) {                 \
    Kernel<1, true>::run(p);                                                                                    \
  }

template <typename dtype_q, int head_dim, typename dtype_kv = dtype_q, typename dtype_o = dtype_q,
          PosEncoding pos_encoding = PosEncoding::none, int head_dim_vo = head_dim>
struct AOTINFER_FAMILY("batch_prefill_paged")
    AOTINFER_VALUES("dtype_q", "f16", "bf16")
    AOTINFER_VALUES("head_dim", 64, 96, 128, 192, 256)
    AOTINFER_VALUES("dtype_kv", "f16", "bf16", "e4m3", "e5m2")
    AOTINFER_VALUES("dtype_o", "f16", "bf16")
    AOTINFER_VALUES("pos_encoding", "none", "rope_llama")
    AOTINFER_VALUES("head_dim_vo", 64, 96, 128, 256) batch_prefill_paged {
  AOTINFER_PREFILL_ENTRIES(PagedKvRows)
};

template <typename dtype_q, int head_dim, typename dtype_kv = dtype_q, typename dtype_o = dtype_q,
          PosEncoding pos_encoding = PosEncoding::none, int head_dim_vo = head_dim>
struct AOTINFER_FAMILY("batch_prefill_ragged")
    AOTINFER_VALUES("dtype_q", "f16", "bf16")
    AOTINFER_VALUES("head_dim", 64, 96, 128, 192, 256)
    AOTINFER_VALUES("dtype_kv", "f16", "bf16", "e4m3", "e5m2")
    AOTINFER_VALUES("dtype_o", "f16", "bf16")
    AOTINFER_VALUES("pos_encoding", "none", "rope_llama")
    AOTINFER_VALUES("head_dim_vo", 64, 96, 128, 256) batch_prefill_ragged {
  AOTINFER_PREFILL_ENTRIES(RaggedKvRows)
};

#undef AOTINFER_PREFILL_ENTRIES

}  // namespace aotinfer
