// What both decode kernels share: which work item, KV head, query rows and KV range a CTA
// handles, how a finished (row, 8 dims) slice is written, and how the last item of a split
// request merges the request's states (aotinfer/params/batch_decode.h).
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
  int first_item, items;  // the request's work items (split plans; else this one alone)
  __device__ bool split() const { return items > 1; }

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
    w.first_item = w.work;
    w.items = 1;
    if (p.partial_o) {
      w.first_item = p.merge_indptr[w.request];
      w.items = p.merge_indptr[w.request + 1] - w.first_item;
    }
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
    if (split()) {
      float* dst = p.partial_o + (int64_t(work) * p.num_qo_heads + head) * head_dim + d;
      *reinterpret_cast<float4*>(dst) = make_float4(out[0], out[1], out[2], out[3]);
      *reinterpret_cast<float4*>(dst + 4) = make_float4(out[4], out[5], out[6], out[7]);
      if (d == 0) p.partial_lse[int64_t(work) * p.num_qo_heads + head] = lse;
    } else {
      store8(static_cast<dtype_o*>(p.o) + (int64_t(request) * p.num_qo_heads + head) * head_dim + d, out);
      if (d == 0 && p.lse) p.lse[int64_t(request) * p.num_qo_heads + head] = lse;
    }
  }

  // Split requests: call after every thread's write() calls. Counts this item done; the CTA
  // that completes the request merges its items' states into o/lse, so the decode needs no
  // second launch. `flag` is a shared-memory word no thread still reads.
  template <typename dtype_o, int head_dim, int kThreads>
  __device__ __forceinline__ void merge_if_last(const aotinfer_batch_decode_params& p, int* flag) const {
    if (!split()) return;
    __threadfence();  // this thread's partial state is visible to the GPU before the count
    __syncthreads();
    if (threadIdx.x == 0) {
      int* counter = p.merge_counters + int64_t(request) * gridDim.y + blockIdx.y;
      const bool last = atomicAdd(counter, 1) == items - 1;
      if (last) *counter = 0;  // every other item has counted: ready for the next run
      *flag = last;
    }
    __syncthreads();
    if (!*flag) return;
    __threadfence();  // the other items' states, counted before ours, are visible now

    // Per row: the largest lse and the sum of exp(lse - max) over the items (a warp per row).
    constexpr int kWarps = kThreads / 32;
    float* row_max = reinterpret_cast<float*>(flag + 1);
    float* row_sum = row_max + rows;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (int r = warp; r < rows; r += kWarps) {
      const float* lse = p.partial_lse + int64_t(first_item) * p.num_qo_heads + first_head + r;
      float m = -INFINITY;
      for (int i = lane; i < items; i += 32) m = fmaxf(m, load_l2(lse + int64_t(i) * p.num_qo_heads));
#pragma unroll
      for (int offset = 16; offset > 0; offset /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, offset));
      float sum = 0.f;
      if (m != -INFINITY)
        for (int i = lane; i < items; i += 32) sum += expf(load_l2(lse + int64_t(i) * p.num_qo_heads) - m);
#pragma unroll
      for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
      if (lane == 0) row_max[r] = m, row_sum[r] = sum;
    }
    __syncthreads();

    // Thread = (row, 8 dims): the weighted sum of the items' outputs.
    for (int pair = threadIdx.x; pair < rows * (head_dim / 8); pair += kThreads) {
      const int r = pair / (head_dim / 8), d = (pair % (head_dim / 8)) * 8;
      const int head = first_head + r;
      const float m = row_max[r], rcp = m != -INFINITY ? 1.f / row_sum[r] : 0.f;
      float out[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
      if (m != -INFINITY) {
#pragma unroll 4
        for (int i = 0; i < items; ++i) {
          const int64_t row = int64_t(first_item + i) * p.num_qo_heads + head;
          const float w = expf(load_l2(p.partial_lse + row) - m) * rcp;
          const float4* v = reinterpret_cast<const float4*>(p.partial_o + row * head_dim + d);
          const float4 a = load_l2(v), b = load_l2(v + 1);
          out[0] += w * a.x, out[1] += w * a.y, out[2] += w * a.z, out[3] += w * a.w;
          out[4] += w * b.x, out[5] += w * b.y, out[6] += w * b.z, out[7] += w * b.w;
        }
      }
      store8(static_cast<dtype_o*>(p.o) + (int64_t(request) * p.num_qo_heads + head) * head_dim + d, out);
      if (d == 0 && p.lse) p.lse[int64_t(request) * p.num_qo_heads + head] = m != -INFINITY ? m + logf(row_sum[r]) : -INFINITY;
    }
  }
};

}  // namespace aotinfer
