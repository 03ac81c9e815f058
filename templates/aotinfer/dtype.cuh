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

// Eight fp8 values (two 32-bit words, lowest byte first) widened to eight f16 values, exactly.
template <typename fp8>
__device__ __forceinline__ uint4 widen_fp8x8(uint32_t lo, uint32_t hi) {
  return {widen_fp8x2<fp8>(lo), widen_fp8x2<fp8>(lo >> 16), widen_fp8x2<fp8>(hi), widen_fp8x2<fp8>(hi >> 16)};
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
