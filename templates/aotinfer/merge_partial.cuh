// The merge of split-KV partial states, shared by decode's in-kernel merge (decode_work.cuh) and
// merge_state's merge_varlen: float states (normalised o rows, natural-log lse) of one query row,
// combined into that row's attention over all their keys (the rule of params/merge_state.h).
#pragma once
#include <math.h>
#include <stdint.h>

#include "aotinfer/attention.cuh"

namespace aotinfer {

struct MergedSlice {
  float4 o;   // 4 dims of the row, normalised (0 without keys)
  float lse;  // -inf without keys
};

// Dims [d, d + 4) of a row whose `count` states are rows first, first + 1, ... of
// lse[state * stride + head] and v[(state * stride + head) * head_dim]. An online merge taking
// kBatch states' loads at a time, so they are in flight together rather than one dependent load
// after another; through L2, since the states may come from CTAs of the same launch. A batch
// costs kBatch exponentials however few states are left: callers size it to their usual count.
template <int head_dim, int kBatch>
__device__ __forceinline__ MergedSlice merge_partial_states(const float* lse, const float* v, int64_t first, int count,
                                                            int64_t stride, int head, int d) {
  float m = -INFINITY, sum = 0.f;
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  for (int base = 0; base < count; base += kBatch) {
    float s[kBatch];
    float4 x[kBatch];
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      const int64_t row = (first + base + i) * stride + head;
      const bool valid = base + i < count;
      s[i] = valid ? load_l2(lse + row) : -INFINITY;
      x[i] = valid ? load_l2(reinterpret_cast<const float4*>(v + row * head_dim + d)) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
    float new_m = m;
#pragma unroll
    for (int i = 0; i < kBatch; ++i) new_m = fmaxf(new_m, s[i]);
    if (new_m == -INFINITY) continue;  // no state so far saw a key
    const float old_scale = expf(m - new_m);  // 0 while m is -inf
    sum *= old_scale;
    acc.x *= old_scale, acc.y *= old_scale, acc.z *= old_scale, acc.w *= old_scale;
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      const float w = expf(s[i] - new_m);
      sum += w;
      acc.x += w * x[i].x, acc.y += w * x[i].y, acc.z += w * x[i].z, acc.w += w * x[i].w;
    }
    m = new_m;
  }
  const float rcp = sum > 0.f ? 1.f / sum : 0.f;
  return {make_float4(acc.x * rcp, acc.y * rcp, acc.z * rcp, acc.w * rcp), sum > 0.f ? m + logf(sum) : -INFINITY};
}

}  // namespace aotinfer
