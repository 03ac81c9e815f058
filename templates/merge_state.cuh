// merge_state: merges two attention states (v, log-sum-exp) into one, row by row. Split-KV and
// cascade attention rest on it. Contract: aotinfer/params/merge_state.h.
#pragma once
#include <math.h>

#include "aotinfer/abi.h"
#include "aotinfer/annotate.h"
#include "aotinfer/dtype.cuh"
#include "aotinfer/merge_partial.cuh"
#include "aotinfer/params/merge_state.h"
#include "aotinfer/params/merge_varlen.h"

namespace aotinfer {

template <typename dtype, int head_dim>
struct AOTINFER_FAMILY("merge_state")
    AOTINFER_VALUES("dtype", "f16", "bf16")
    AOTINFER_VALUES("head_dim", 64, 96, 128, 256, 512) merge_state {
  // The kernel is memory-bound: each thread moves one 16-byte pack of each of v_a, v_b, v_out,
  // so a row takes head_dim / kVec threads and a CTA handles several rows.
  static constexpr int kVec = Pack16<dtype>::size;
  static constexpr int kThreadsPerRow = head_dim / kVec;
  static constexpr int kThreads = whole_rows_threads(kThreadsPerRow, 128);
  static constexpr int kRowsPerCta = kThreads / kThreadsPerRow;
  static_assert(head_dim % kVec == 0 && kThreads % kThreadsPerRow == 0, "head_dim must tile the CTA");

  static constexpr aotinfer_launch_info merge_launch =
      make_launch_info<aotinfer_merge_state_params>(kThreads, 0, kRowsPerCta);

  AOTINFER_ENTRY static __device__ void merge(const aotinfer_merge_state_params& p) {
    const int64_t row = int64_t(blockIdx.x) * kRowsPerCta + threadIdx.x / kThreadsPerRow;
    if (row >= p.rows) return;
    const int64_t offset = row * head_dim + (threadIdx.x % kThreadsPerRow) * kVec;

    const float s_a = p.s_a[row], s_b = p.s_b[row];
    const float m = fmaxf(s_a, s_b);
    // Two empty states (-inf, -inf) merge to an empty state with zero output.
    float w_a = 0.f, w_b = 0.f, s_out = -INFINITY;
    if (m != -INFINITY) {
      w_a = expf(s_a - m);
      w_b = expf(s_b - m);
      const float sum = w_a + w_b;
      s_out = m + logf(sum);
      w_a /= sum;
      w_b /= sum;
    }

    Pack16<dtype> a, b, out;
    a.load(static_cast<const dtype*>(p.v_a) + offset);
    b.load(static_cast<const dtype*>(p.v_b) + offset);
#pragma unroll
    for (int i = 0; i < kVec; ++i) out.x[i] = from_float<dtype>(w_a * to_float(a.x[i]) + w_b * to_float(b.x[i]));
    out.store(static_cast<dtype*>(p.v_out) + offset);
    if (p.s_out != nullptr && threadIdx.x % kThreadsPerRow == 0) p.s_out[row] = s_out;
  }

  // merge_varlen: float partial states (split-KV) -> one output row each; 4 dims per thread.
  static constexpr int kVarlenThreadsPerRow = head_dim / 4;
  static constexpr int kVarlenThreads = whole_rows_threads(kVarlenThreadsPerRow, 128);
  static constexpr int kVarlenRowsPerCta = kVarlenThreads / kVarlenThreadsPerRow;
  static constexpr aotinfer_launch_info merge_varlen_launch =
      make_launch_info<aotinfer_merge_varlen_params>(kVarlenThreads, 0, kVarlenRowsPerCta);

  AOTINFER_ENTRY static __device__ void merge_varlen(const aotinfer_merge_varlen_params& p) {
    const int64_t row = int64_t(blockIdx.x) * kVarlenRowsPerCta + threadIdx.x / kVarlenThreadsPerRow;
    const int out = int(row / p.num_heads), head = int(row % p.num_heads);
    const int num_outputs = p.num_outputs_device ? min(p.num_outputs, *p.num_outputs_device) : p.num_outputs;
    if (out >= num_outputs) return;
    const int d = (threadIdx.x % kVarlenThreadsPerRow) * 4;

    // Prefill splits a tile into few chunks (as many as fill a wave with the other tiles).
    const int first = p.indptr[out];
    const MergedSlice merged = merge_partial_states<head_dim, 4>(p.s, p.v, first, p.indptr[out + 1] - first, p.num_heads, head, d);
    const int64_t out_row = (p.output_row ? int64_t(p.output_row[out]) : int64_t(out)) * p.num_heads + head;
    store4(static_cast<dtype*>(p.v_out) + out_row * head_dim + d, merged.o);
    if (p.s_out != nullptr && d == 0) p.s_out[out_row] = merged.lse;
  }
};

}  // namespace aotinfer
