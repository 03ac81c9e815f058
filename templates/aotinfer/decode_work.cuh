// What the decode kernel's CTAs share: which work item, KV head, query rows and KV range a CTA
// handles, how a finished (row, 8 dims) slice is written, and how the last item of a split
// request merges the request's states (aotinfer/params/batch_decode.h).
#pragma once
#include "aotinfer/attention.cuh"
#include "aotinfer/merge_partial.cuh"
#include "aotinfer/params/batch_decode.h"

namespace aotinfer {

struct DecodeWork {
  int work;        // work item
  int grid_row;    // this CTA's of the item's grid_rows (KV head, query rows)
  int grid_rows;
  int request;
  int kv_head;
  int group;       // query heads per KV head
  int first_row;   // this CTA's first of its KV head's q_len * group (token, head) rows, token-major
  int rows;        // query rows of this CTA (<= its kernel's rows per CTA)
  int page_begin;  // first entry of the request in kv.indices
  int kv_len;      // the request's keys
  int begin, end;  // KV tokens to attend, request-relative (the plan applied any window)
  bool takes_sink; // sinks given and this is the request's first item: its state holds the request's sink
  int first_item, items;  // the request's work items (split plans; else this one alone)
  __device__ bool split() const { return items > 1; }

  // CTA row r's query token (of the request's q_len) and query head. Rows past `rows` name
  // tokens past q_len: callers read nothing for them and write nothing.
  __device__ __forceinline__ int token_of(int r) const { return (first_row + r) / group; }
  __device__ __forceinline__ int head_of(int r) const { return kv_head * group + (first_row + r) % group; }
  // Row r among the request's q_len * num_qo_heads output rows (o, lse and partial states).
  __device__ __forceinline__ int slot_of(const aotinfer_batch_decode_params& p, int r) const {
    return token_of(r) * p.num_qo_heads + head_of(r);
  }
  // Row r's position (RoPE, ALiBi) and the end of the keys it sees (causal among the tokens).
  __device__ __forceinline__ int q_pos(const aotinfer_batch_decode_params& p, int r) const {
    const int t = token_of(r);
    return p.q_positions && t < p.q_len ? p.q_positions[int64_t(request) * p.q_len + t] : kv_len - p.q_len + t;
  }
  __device__ __forceinline__ int key_end(const aotinfer_batch_decode_params& p, int r) const {
    return p.q_causal ? min(end, kv_len - p.q_len + token_of(r) + 1) : end;
  }

  // CTAs per work item: KV heads times the query-row groups of kRows.
  template <int kRows>
  static __device__ __forceinline__ int row_groups(const aotinfer_batch_decode_params& p) {
    return (p.q_len * (p.num_qo_heads / p.kv.num_kv_heads) + kRows - 1) / kRows;
  }
  template <int kRows>
  static __device__ __forceinline__ int rows_per_item(const aotinfer_batch_decode_params& p) {
    return p.kv.num_kv_heads * row_groups<kRows>(p);
  }

  // The flat grid (AOTINFER_DECODE_FLAT_GRID): an item's CTAs are consecutive.
  template <int kRows>
  static __device__ __forceinline__ DecodeWork of_this_cta(const aotinfer_batch_decode_params& p) {
    DecodeWork w;
    w.group = p.num_qo_heads / p.kv.num_kv_heads;
    const int row_groups = DecodeWork::row_groups<kRows>(p);
    w.grid_rows = rows_per_item<kRows>(p);
    w.work = int(blockIdx.x) / w.grid_rows;
    w.grid_row = int(blockIdx.x) - w.work * w.grid_rows;
    w.kv_head = w.grid_row / row_groups;
    w.first_row = (w.grid_row % row_groups) * kRows;
    w.rows = min(kRows, p.q_len * w.group - w.first_row);
    w.request = p.work_request[w.work];
    w.first_item = w.work;
    w.items = 1;
    if (p.partial_o) {
      w.first_item = p.merge_indptr[w.request];
      w.items = p.merge_indptr[w.request + 1] - w.first_item;
    }
    w.page_begin = p.work_page_begin[w.work];
    w.kv_len = p.work_kv_len[w.work];
    w.begin = p.work_kv_begin[w.work];
    w.end = p.work_kv_end[w.work];
    w.takes_sink = p.sinks && w.work == w.first_item;
    return w;
  }

  // The normalised output of query row `row`, dims [d, d + 8): into o/lse, or into the partial
  // state of this work item when the plan splits KV. The row's sink is folded in here.
  template <typename dtype_o, int head_dim>
  __device__ __forceinline__ void write(const aotinfer_batch_decode_params& p, int row, int d, float (&out)[8],
                                        float lse) const {
    const int64_t rows_per_request = int64_t(p.q_len) * p.num_qo_heads, slot = slot_of(p, row);
    if (takes_sink) {
      const float factor = fold_sink(lse, p.sinks[head_of(row)]);
#pragma unroll
      for (int e = 0; e < 8; ++e) out[e] *= factor;
    }
    if (split()) {
      float* dst = p.partial_o + (work * rows_per_request + slot) * head_dim + d;
      *reinterpret_cast<float4*>(dst) = make_float4(out[0], out[1], out[2], out[3]);
      *reinterpret_cast<float4*>(dst + 4) = make_float4(out[4], out[5], out[6], out[7]);
      if (d == 0) p.partial_lse[work * rows_per_request + slot] = lse;
    } else {
      store8(static_cast<dtype_o*>(p.o) + (request * rows_per_request + slot) * head_dim + d, out);
      if (d == 0 && p.lse) p.lse[request * rows_per_request + slot] = lse;
    }
  }

  // Split requests: call after every thread's write() calls. Counts this item done; the CTA
  // that completes the request merges its items' states into o/lse, so the decode needs no
  // second launch. `flag` is a shared-memory word no thread still reads.
  template <typename dtype_o, int head_dim, int kThreads>
  __device__ __forceinline__ void merge_if_last(const aotinfer_batch_decode_params& p, int* flag) const {
    if (!split()) return;
    __syncthreads();  // every partial write of the CTA precedes thread 0's release below
    if (threadIdx.x == 0) {
      int* counter = p.merge_counters + int64_t(request) * grid_rows + grid_row;
      const bool last = atomic_add_acq_rel(counter, 1) == items - 1;
      if (last) *counter = 0;  // every other item has counted: ready for the next run
      *flag = last;
    }
    __syncthreads();  // ... and the acquire of the last count precedes every merge load
    if (!*flag) return;

    // Thread = (row, 4 dims). A small batch splits a request over up to a wave of items.
    const int64_t rows_per_request = int64_t(p.q_len) * p.num_qo_heads;
    for (int pair = threadIdx.x; pair < rows * (head_dim / 4); pair += kThreads) {
      const int slot = slot_of(p, pair / (head_dim / 4)), d = (pair % (head_dim / 4)) * 4;
      const MergedSlice merged =
          merge_partial_states<head_dim, 16>(p.partial_lse, p.partial_o, first_item, items, rows_per_request, slot, d);
      store4(static_cast<dtype_o*>(p.o) + (request * rows_per_request + slot) * head_dim + d, merged.o);
      if (d == 0 && p.lse) p.lse[request * rows_per_request + slot] = merged.lse;
    }
  }
};

}  // namespace aotinfer
