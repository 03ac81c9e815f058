// Device-side element types: the C++ type behind each dtype name, float conversion, and
// 16-byte packs for vectorised global-memory access.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>

#include <type_traits>

namespace aotinfer {

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_float(__nv_fp8_e4m3 x) { return float(x); }
__device__ __forceinline__ float to_float(__nv_fp8_e5m2 x) { return float(x); }

template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) { return x; }
template <>
__device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// Two fp8 values (the low 16 bits of `pair`) widened to an f16 pair, exactly: f16 holds every
// e4m3 and e5m2 value.
template <typename fp8>
__device__ __forceinline__ uint32_t widen_fp8x2(uint32_t pair) {
  static_assert(sizeof(fp8) == 1, "e4m3 or e5m2");
  constexpr __nv_fp8_interpretation_t kind = std::is_same_v<fp8, __nv_fp8_e4m3> ? __NV_E4M3 : __NV_E5M2;
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(pair & 0xffffu), kind);
  return uint32_t(h.x) | (uint32_t(h.y) << 16);
}

// Four fp8 values (one 32-bit word, lowest byte first) widened to two f16 pairs, exactly. From
// sm_89 one conversion per pair reads the word's halves in place: through widen_fp8x2 the
// compiler first shifted the high half down, an extra instruction in the Hopper producers'
// widening loops (docs/PERF.md, "fp8 widening on Hopper").
template <typename fp8>
__device__ __forceinline__ uint2 widen_fp8x4(uint32_t word) {
  static_assert(sizeof(fp8) == 1, "e4m3 or e5m2");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  uint2 r;
  if constexpr (std::is_same_v<fp8, __nv_fp8_e4m3>)
    asm("{ .reg .b16 lo, hi;\n mov.b32 {lo, hi}, %2;\n cvt.rn.f16x2.e4m3x2 %0, lo;\n cvt.rn.f16x2.e4m3x2 %1, hi; }"
        : "=r"(r.x), "=r"(r.y) : "r"(word));
  else
    asm("{ .reg .b16 lo, hi;\n mov.b32 {lo, hi}, %2;\n cvt.rn.f16x2.e5m2x2 %0, lo;\n cvt.rn.f16x2.e5m2x2 %1, hi; }"
        : "=r"(r.x), "=r"(r.y) : "r"(word));
  return r;
#else
  return {widen_fp8x2<fp8>(word), widen_fp8x2<fp8>(word >> 16)};
#endif
}

// Eight fp8 values (two 32-bit words, lowest byte first) widened to eight f16 values, exactly.
template <typename fp8>
__device__ __forceinline__ uint4 widen_fp8x8(uint32_t lo, uint32_t hi) {
  const uint2 a = widen_fp8x4<fp8>(lo), b = widen_fp8x4<fp8>(hi);
  return {a.x, a.y, b.x, b.y};
}

// Eight values split as x = hi + lo into two octets of e4m3 (lowest value first), so that fp8
// tensor-core products of both give x's product. Exact for every x of at most 8 significant bits
// (bf16 values, times a power of two) with |x| in [2^-2, 448]: hi keeps x's top 4 bits, and the
// rest, an integer multiple of x's last bit below hi's half step, needs at most 4 more. Smaller
// values lose bits below e4m3's least subnormal (2^-9) in lo.
struct SplitE4m3x8 {
  uint2 hi, lo;
};
__device__ __forceinline__ SplitE4m3x8 split_e4m3x8(const float (&x)[8]) {
  uint32_t hi[4], lo[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const __nv_fp8x2_storage_t h = __nv_cvt_float2_to_fp8x2(make_float2(x[2 * i], x[2 * i + 1]), __NV_SATFINITE, __NV_E4M3);
    const float2 back = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(h, __NV_E4M3)));
    const __nv_fp8x2_storage_t l =
        __nv_cvt_float2_to_fp8x2(make_float2(x[2 * i] - back.x, x[2 * i + 1] - back.y), __NV_SATFINITE, __NV_E4M3);
    hi[i] = h, lo[i] = l;
  }
  return {{hi[0] | hi[1] << 16, hi[2] | hi[3] << 16}, {lo[0] | lo[1] << 16, lo[2] | lo[3] << 16}};
}

// Sixteen bytes of T, moved with one 128-bit load or store.
template <typename T>
struct alignas(16) Pack16 {
  static constexpr int size = 16 / sizeof(T);
  T x[size];

  __device__ __forceinline__ void load(const T* p) { *reinterpret_cast<uint4*>(x) = *reinterpret_cast<const uint4*>(p); }
  __device__ __forceinline__ void store(T* p) const { *reinterpret_cast<uint4*>(p) = *reinterpret_cast<const uint4*>(x); }
};

}  // namespace aotinfer
