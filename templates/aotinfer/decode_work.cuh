// What both decode kernels share: which work item, KV head, query rows and KV range a CTA
// handles, and how a finished (row, 8 dims) slice is written (aotinfer/params/batch_decode.h).
#pragma once
#include "aotinfer/attention.cuh"
#include "aotinfer/params/batch_decode.h"

namespace aotinfer {

struct DecodeWork {
  int work;        // work item (blockIdx.x)
  int request;
  int kv_head;
  int first_head;  // query head of row 0
  int rows;        // query rows of this CTA (<= its kernel's rows per CTA)
  int page_begin;  // first entry of the request in kv.indices
  int q_pos;       // the query's position (RoPE, ALiBi, window)
  int begin, end;  // KV tokens to attend, request-relative, window applied

  template <int kRows, bool sliding_window>
  static __device__ __forceinline__ DecodeWork of_this_cta(const aotinfer_batch_decode_params& p) {
    DecodeWork w;
    w.work = blockIdx.x;
    const int group = p.num_qo_heads / p.kv.num_kv_heads;
    const int row_groups = (group + kRows - 1) / kRows;
    w.kv_head = blockIdx.y / row_groups;
    const int first_row = (blockIdx.y % row_groups) * kRows;
    w.rows = min(kRows, group - first_row);
    w.first_head = w.kv_head * group + first_row;
    w.request = p.work_request[w.work];
    w.page_begin = p.kv.indptr[w.request];
    const int num_pages = p.kv.indptr[w.request + 1] - w.page_begin;
    const int kv_len = num_pages == 0 ? 0 : (num_pages - 1) * p.kv.page_size + p.kv.last_page_len[w.request];
    w.q_pos = p.q_positions ? p.q_positions[w.request] : kv_len - 1;
    w.begin = p.work_kv_begin[w.work];
    w.end = min(p.work_kv_end[w.work], kv_len);
    if constexpr (sliding_window) w.begin = max(w.begin, w.q_pos - p.window_left);
    return w;
  }

  // The normalised output of query row `row`, dims [d, d + 8): into o/lse, or into the partial
  // state of this work item when the plan splits KV.
  template <typename dtype_o, int head_dim>
  __device__ __forceinline__ void write(const aotinfer_batch_decode_params& p, int row, int d, const float (&out)[8],
                                        float lse) const {
    const int head = first_head + row;
    if (p.partial_o) {
      float* dst = p.partial_o + (int64_t(work) * p.num_qo_heads + head) * head_dim + d;
      *reinterpret_cast<float4*>(dst) = make_float4(out[0], out[1], out[2], out[3]);
      *reinterpret_cast<float4*>(dst + 4) = make_float4(out[4], out[5], out[6], out[7]);
      if (d == 0) p.partial_lse[int64_t(work) * p.num_qo_heads + head] = lse;
    } else {
      store8(static_cast<dtype_o*>(p.o) + (int64_t(request) * p.num_qo_heads + head) * head_dim + d, out);
      if (d == 0 && p.lse) p.lse[int64_t(request) * p.num_qo_heads + head] = lse;
    }
  }
};

}  // namespace aotinfer
