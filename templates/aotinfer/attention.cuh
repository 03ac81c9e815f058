// Device building blocks shared by the attention families: position encodings, asynchronous
// global->shared copies, warp reductions, and 8-element loads that widen to float.
#pragma once
#include <math.h>
#include <stdint.h>

#include "aotinfer/dtype.cuh"

namespace aotinfer {

// Spelled as specs spell them (the scanner reads the enumerators).
enum class PosEncoding { none, rope_llama, alibi };

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// ALiBi slope of query head `head` among `num_heads` (the geometric series of the ALiBi paper,
// interleaved for head counts that are not powers of two).
__device__ __forceinline__ float alibi_slope(int head, int num_heads) {
  const int n = 1 << (31 - __clz(num_heads));  // largest power of two <= num_heads
  return head < n ? exp2f(-8.f * float(head + 1) / float(n)) : exp2f(-4.f * float(2 * (head - n) + 1) / float(n));
}

// 2^x by the special-function unit alone (ex2.approx.ftz: ~2^-22 relative error, results below
// 2^-126 flush to 0, which softmax weights can afford); exp2f adds range fix-ups around it.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Attention sinks (gpt-oss): one more logit `sink` in a row's softmax, in the units of the scores
// s = q.k * sm_scale, whose value row is zero. It only adds e^sink to the denominator: the row's
// natural-log lse becomes log(e^lse + e^sink), and its normalised output shrinks by
// e^(lse - new lse), the factor returned. A row that kept no key (lse -inf) gets o = 0, lse = sink;
// a NaN sink makes the row NaN.
__device__ __forceinline__ float fold_sink(float& lse, float sink) {
  const bool sink_wins = !(lse > sink);
  const float hi = sink_wins ? sink : lse, lo = sink_wins ? lse : sink;
  if (hi == -INFINITY) return 1.f;  // no key and a -inf sink: the row stays empty
  // By the special-function unit, as the softmax: 1 + e^(lo - hi) lies in (1, 2], where lg2.approx
  // errs by ~2^-22; the precise expf/log1pf would add ~3 KB of code to every kernel.
  const float folded = hi + __log2f(1.f + fast_exp2((lo - hi) * kLog2e)) * kLn2;
  const float factor = fast_exp2((lse - folded) * kLog2e);
  lse = folded;
  return factor;
}

// Loads that skip L1 (ld.global.cg): for data other CTAs of this launch wrote, which an SM's
// L1 does not keep coherent.
__device__ __forceinline__ float load_l2(const float* p) {
  float x;
  asm volatile("ld.global.cg.f32 %0, [%1];" : "=f"(x) : "l"(p));
  return x;
}
__device__ __forceinline__ float4 load_l2(const float4* p) {
  float4 x;
  asm volatile("ld.global.cg.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(x.x), "=f"(x.y), "=f"(x.z), "=f"(x.w) : "l"(p));
  return x;
}

// *p += x at GPU scope, releasing this thread's earlier writes (and, after a CTA barrier, its
// CTA's) and acquiring those of the threads whose additions it reads; returns the old value.
__device__ __forceinline__ int atomic_add_acq_rel(int* p, int x) {
  int old;
  asm volatile("atom.acq_rel.gpu.global.add.s32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(x) : "memory");
  return old;
}

// n / d for 0 <= n < 2^31 and a divisor fixed at run time, by one wide multiply and a shift
// (Granlund-Montgomery): with l = ceil(log2 d), s = 31 + l and m = ceil(2^s / d), (n m) >> s is
// exact because 2^s >= 2^31 d. Cheaper than the ~20-instruction integer division per use.
struct FastDiv {
  uint32_t m, s;
  __device__ __forceinline__ explicit FastDiv(uint32_t d) {
    s = 31 + (d > 1 ? 32 - __clz(d - 1) : 0);
    m = uint32_t(((uint64_t(1) << s) + d - 1) / d);
  }
  __device__ __forceinline__ uint32_t operator()(uint32_t n) const { return uint32_t((uint64_t(n) * m) >> s); }
};

// sin and cos of a RoPE angle pos * freq (up to about 2^17 rad at 128k positions): reduced to
// [-pi, pi] by Cody-Waite with a two-part 2 pi (the first product is exact under FMA; the part
// left out is below 1e-9 rad at that range), then the SFU's sine and cosine, whose error is under
// 2^-21 there. The angle itself is already rounded to float, so precise sincosf buys nothing here;
// it also inlines a Payne-Hanek path at every call site, which cost each RoPE variant about 0.8 s
// of compile per arch.
__device__ __forceinline__ void rope_sincos(float angle, float* sin, float* cos) {
  constexpr float kTwoPiHi = 6.28318548202514648f;     // float(2 pi)
  constexpr float kTwoPiLo = -1.74845553e-07f;          // float(2 pi - kTwoPiHi)
  const float turns = rintf(angle * 0.159154943091895336f);
  float reduced = fmaf(-turns, kTwoPiHi, angle);
  reduced = fmaf(-turns, kTwoPiLo, reduced);
  __sincosf(reduced, sin, cos);
}

// Llama RoPE ("rotate half") on 8 dimension pairs: lo[e] is dimension dim + e, hi[e] its partner
// dim + e + head_dim / 2; both rotate by pos * freq[dim + e].
__device__ __forceinline__ void rope_rotate8(float (&lo)[8], float (&hi)[8], const float* freq, int dim, int pos) {
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    float sin, cos;
    rope_sincos(float(pos) * freq[dim + e], &sin, &cos);
    const float rotated_lo = lo[e] * cos - hi[e] * sin;
    hi[e] = hi[e] * cos + lo[e] * sin;
    lo[e] = rotated_lo;
  }
}

// 16 bytes global -> shared without passing through registers; `valid == false` writes zeros
// (the source is not read), which keeps masked tokens finite.
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, bool valid) {
  const unsigned dst = unsigned(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(valid ? 16 : 0));
}
// 4 bytes global -> shared (both 4-byte aligned), through L1: small reads that several warps repeat.
__device__ __forceinline__ void cp_async_4(void* smem, const void* gmem) {
  const unsigned dst = unsigned(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst), "l"(gmem));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int pending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(pending));
}

__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
  return x;
}
__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

// Eight consecutive elements of T (16 or 8 bytes, aligned) widened to float.
template <typename T>
__device__ __forceinline__ void load8(const T* p, float (&out)[8]) {
  static_assert(sizeof(T) == 2 || sizeof(T) == 1, "16-bit and 8-bit element types");
  if constexpr (sizeof(T) == 2) {
    uint4 raw = *reinterpret_cast<const uint4*>(p);
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int i = 0; i < 8; ++i) out[i] = to_float(e[i]);
  } else {
    uint2 raw = *reinterpret_cast<const uint2*>(p);
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int i = 0; i < 8; ++i) out[i] = to_float(e[i]);
  }
}

// Eight floats narrowed to T and stored (16 bytes for 16-bit T).
template <typename T>
__device__ __forceinline__ void store8(T* p, const float (&in)[8]) {
  static_assert(sizeof(T) == 2, "16-bit output types");
  uint4 raw;
  T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
  for (int i = 0; i < 8; ++i) e[i] = from_float<T>(in[i]);
  *reinterpret_cast<uint4*>(p) = raw;
}

// Four floats narrowed to T and stored (8 bytes for 16-bit T).
template <typename T>
__device__ __forceinline__ void store4(T* p, float4 in) {
  static_assert(sizeof(T) == 2, "16-bit output types");
  uint2 raw;
  T* e = reinterpret_cast<T*>(&raw);
  e[0] = from_float<T>(in.x), e[1] = from_float<T>(in.y), e[2] = from_float<T>(in.z), e[3] = from_float<T>(in.w);
  *reinterpret_cast<uint2*>(p) = raw;
}

}  // namespace aotinfer
