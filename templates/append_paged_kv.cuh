// append_paged_kv: writes new tokens' K and V into their pages. Contract:
// aotinfer/params/append_paged_kv.h. One thread moves one 16-byte chunk of K and of V.
#pragma once
#include "aotinfer/abi.h"
#include "aotinfer/annotate.h"
#include "aotinfer/dtype.cuh"
#include "aotinfer/params/append_paged_kv.h"

namespace aotinfer {

template <typename dtype, int head_dim>
struct AOTINFER_FAMILY("append_paged_kv")
    AOTINFER_VALUES("dtype", "f16", "bf16", "e4m3", "e5m2")
    AOTINFER_VALUES("head_dim", 64, 96, 128, 256) append_paged_kv {
  static constexpr int kChunksPerRow = head_dim * int(sizeof(dtype)) / 16;
  static constexpr int kThreads = whole_rows_threads(kChunksPerRow, 128);
  static constexpr int kRowsPerCta = kThreads / kChunksPerRow;
  static_assert(kThreads % kChunksPerRow == 0, "a row's chunks must tile the CTA");

  static constexpr aotinfer_launch_info append_launch =
      make_launch_info<aotinfer_append_paged_kv_params>(kThreads, 0, kRowsPerCta);

  AOTINFER_ENTRY static __device__ void append(const aotinfer_append_paged_kv_params& p) {
    const int64_t row = int64_t(blockIdx.x) * kRowsPerCta + threadIdx.x / kChunksPerRow;  // (token, head)
    const int num_heads = p.kv.num_kv_heads;
    if (row >= p.nnz * num_heads) return;
    const int64_t token = row / num_heads;
    const int head = int(row % num_heads), chunk = threadIdx.x % kChunksPerRow;
    const int request = p.batch_indices[token], pos = p.positions[token];
    const int page = p.kv.indices[p.kv.indptr[request] + pos / p.kv.page_size];
    const int64_t dst = int64_t(page) * p.kv.stride_page + int64_t(pos % p.kv.page_size) * p.kv.stride_token +
                        int64_t(head) * p.kv.stride_head;
    const int64_t column = int64_t(chunk) * (16 / int(sizeof(dtype)));
    const uint4 k = *reinterpret_cast<const uint4*>(static_cast<const dtype*>(p.k) + token * p.k_stride_token + head * head_dim + column);
    const uint4 v = *reinterpret_cast<const uint4*>(static_cast<const dtype*>(p.v) + token * p.v_stride_token + head * head_dim + column);
    *reinterpret_cast<uint4*>(static_cast<dtype*>(p.kv.k_pages) + dst + column) = k;
    *reinterpret_cast<uint4*>(static_cast<dtype*>(p.kv.v_pages) + dst + column) = v;
  }
};

}  // namespace aotinfer
