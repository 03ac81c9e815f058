// batch_decode: the newest query tokens of each request (one, or a few to verify
// speculatively) against its paged KV cache. Contract: aotinfer/params/batch_decode.h.
//
// Decode is bandwidth-bound: every KV byte is read once and used by the `group` query heads
// that share its KV head, for each of the request's q_len tokens. A CTA handles one work item
// (request, KV range) for one KV head and up to 16 of its (token, head) rows (group and q_len
// are run-time values; more rows take several CTAs), on tensor cores for every head_dim and KV
// type (aotinfer/decode_mma.cuh).
#pragma once
#include "aotinfer/abi.h"
#include "aotinfer/annotate.h"
#include "aotinfer/attention.cuh"
#include "aotinfer/decode_mma.cuh"
#include "aotinfer/params/batch_decode.h"

namespace aotinfer {

template <typename dtype_q, typename dtype_kv, int head_dim, typename dtype_o = dtype_q,
          PosEncoding pos_encoding = PosEncoding::none>
struct AOTINFER_FAMILY("batch_decode")
    AOTINFER_VALUES("dtype_q", "f16", "bf16")
    AOTINFER_VALUES("dtype_kv", "f16", "bf16", "e4m3", "e5m2")
    AOTINFER_VALUES("head_dim", 64, 96, 128, 256, 512)
    AOTINFER_VALUES("dtype_o", "f16", "bf16") batch_decode {
  using Mma = DecodeMma<dtype_q, dtype_kv, head_dim, dtype_o, pos_encoding>;
  static constexpr aotinfer_launch_info decode_launch = Mma::launch;

  AOTINFER_ENTRY static __device__ void decode(const aotinfer_batch_decode_params& p) { Mma::run(p); }
};

}  // namespace aotinfer
