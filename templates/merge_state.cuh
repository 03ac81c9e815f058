// merge_state: merges two attention states (v, log-sum-exp) into one, row by row. Split-KV and
// cascade attention rest on it. Contract: aotinfer/params/merge_state.h.
#pragma once
#include <math.h>

#include "aotinfer/abi.h"
#include "aotinfer/annotate.h"
#include "aotinfer/dtype.cuh"
#include "aotinfer/params/merge_state.h"
#include "aotinfer/params/merge_varlen.h"

namespace aotinfer {

template <typename dtype, int head_dim>
struct AOTINFER_FAMILY("merge_state")
    AOTINFER_VALUES("dtype", "f16", "bf16")
    AOTINFER_VALUES("head_dim", 64, 128, 256) merge_state {
  // The kernel is memory-bound: each thread moves one 16-byte pack of each of v_a, v_b, v_out,
  // so a row takes head_dim / kVec threads and a CTA handles several rows.
  static constexpr int kVec = Pack16<dtype>::size;
  static constexpr int kThreadsPerRow = head_dim / kVec;
  static constexpr int kThreads = 128;
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
  static constexpr int kVarlenRowsPerCta = kThreads / kVarlenThreadsPerRow;
  static constexpr aotinfer_launch_info merge_varlen_launch =
      make_launch_info<aotinfer_merge_varlen_params>(kThreads, 0, kVarlenRowsPerCta);

  AOTINFER_ENTRY static __device__ void merge_varlen(const aotinfer_merge_varlen_params& p) {
    const int64_t row = int64_t(blockIdx.x) * kVarlenRowsPerCta + threadIdx.x / kVarlenThreadsPerRow;
    const int out = int(row / p.num_heads), head = int(row % p.num_heads);
    const int num_outputs = p.num_outputs_device ? min(p.num_outputs, *p.num_outputs_device) : p.num_outputs;
    if (out >= num_outputs) return;
    const int d = (threadIdx.x % kVarlenThreadsPerRow) * 4;

    // Online merge: m is the running max lse, den the sum of exp(s - m), acc the weighted sum.
    float m = -INFINITY, den = 0.f;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int state = p.indptr[out]; state < p.indptr[out + 1]; ++state) {
      const int64_t index = int64_t(state) * p.num_heads + head;
      const float s = p.s[index];
      if (s == -INFINITY) continue;
      const float4 v = *reinterpret_cast<const float4*>(p.v + index * head_dim + d);
      const float new_m = fmaxf(m, s);
      const float old_scale = expf(m - new_m), w = expf(s - new_m);
      acc.x = acc.x * old_scale + w * v.x;
      acc.y = acc.y * old_scale + w * v.y;
      acc.z = acc.z * old_scale + w * v.z;
      acc.w = acc.w * old_scale + w * v.w;
      den = den * old_scale + w;
      m = new_m;
    }
    const float inv = den > 0.f ? 1.f / den : 0.f;
    const int64_t out_row = (p.output_row ? int64_t(p.output_row[out]) : int64_t(out)) * p.num_heads + head;
    dtype out4[4] = {from_float<dtype>(acc.x * inv), from_float<dtype>(acc.y * inv), from_float<dtype>(acc.z * inv),
                     from_float<dtype>(acc.w * inv)};
    *reinterpret_cast<uint2*>(static_cast<dtype*>(p.v_out) + out_row * head_dim + d) = *reinterpret_cast<const uint2*>(out4);
    if (p.s_out != nullptr && d == 0) p.s_out[out_row] = den > 0.f ? m + logf(den) : -INFINITY;
  }
};

}  // namespace aotinfer
