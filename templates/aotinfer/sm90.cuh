// Hopper building blocks (sm_90a): shared-memory matrix descriptors and warpgroup MMA (wgmma),
// mbarriers, cp.async arrivals, TMA copies, the async-proxy fence, named barriers and register
// reallocation.
// Only the sm_90a compile pass may instantiate code that calls them (templates/batch_prefill.cuh
// selects on __CUDA_ARCH_FEAT_SM90_ALL).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>

#include <type_traits>

namespace aotinfer {
// The sm_90a compile pass, where wgmma and setmaxnreg exist (the host pass and the scanner see
// false): families pick their Hopper kernels by it.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
constexpr bool kSm90Pass = true;
#else
constexpr bool kSm90Pass = false;
#endif
}  // namespace aotinfer

namespace aotinfer::sm90 {

__device__ __forceinline__ uint32_t smem_u32(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }

// 128-byte swizzle: a tile is stored as rows of 128 bytes (64 16-bit values); 16-byte chunk c of
// row r sits at chunk c ^ (r % 8), so 8 rows form a 1024-byte atom (1024-aligned) in which the
// rows a tensor-core read touches fall in distinct banks. A matrix wider than 64 values is split
// into 64-wide column blocks stored one after the other.
//
// Byte offset of 16-byte chunk `chunk` (of the full row) of row `row` in a tile of `rows` rows.
__device__ __forceinline__ int sw128_offset(int rows, int row, int chunk) {
  return (chunk / 8) * rows * 128 + row * 128 + (((chunk % 8) ^ (row % 8)) << 4);
}

// The wgmma descriptor of a 128-byte-swizzled operand starting at shared address `addr`:
// 8-row groups 1024 bytes apart (stride byte offset); `lbo` is the leading byte offset, which
// only MN-major operands use (bytes between their 64-wide column blocks).
__device__ __forceinline__ uint64_t sw128_desc(uint32_t addr, uint32_t lbo = 16) {
  return uint64_t((addr & 0x3FFFF) >> 4) | uint64_t(lbo >> 4) << 16 | uint64_t(1024 >> 4) << 32 | uint64_t(1) << 62;
}
// The descriptor `desc` moved `bytes` (a multiple of 16) further on. The start address is the
// low field, in 16-byte units; shared addresses stay below 256 KB, so the sum never carries out
// of it, and a step costs one add instead of rebuilding the descriptor.
__device__ __forceinline__ uint64_t desc_advance(uint64_t desc, uint32_t bytes) { return desc + (bytes >> 4); }

// Ordering of wgmma against the registers it reads and writes: `fence` before the first wgmma
// of a batch whose accumulators or A registers ordinary code wrote; `commit` closes a batch;
// `wait<N>` returns when at most N batches are pending.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int pending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(pending) : "memory");
}
// Keeps the compiler from moving ordinary reads or writes of accumulator registers across a
// wgmma_wait or wgmma_fence (the asm statements of wgmma name the registers only at issue), and
// keeps the A registers of a wgmma in flight from being reused before its wait.
template <int N>
__device__ __forceinline__ void pin(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}

template <int N, int M>
__device__ __forceinline__ void pin(uint32_t (&r)[N][M]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
#pragma unroll
    for (int j = 0; j < M; ++j) asm volatile("" : "+r"(r[i][j])::"memory");
}

// wgmma for m64nNk16 with fp32 accumulators, N = 64, 128 or 256 (chosen by the accumulator
// array, N / 2 registers per thread), bf16 or f16 operands:
//   wgmma_ss: d (64 x N) = a (64 x 16) * b (16 x N) + (accumulate ? d : 0), a and b in shared
//             memory, a K-major, b K-major or (kBMnMajor) MN-major;
//   wgmma_rs: d += a (64 x 16, registers) * b (16 x N, shared memory, MN-major: b's rows are K);
//             a holds the mma.sync m16n8k16 A fragment of the warp's 16 rows: {(r, c), (r + 8, c),
//             (r, c + 8), (r + 8, c + 8)} for r = lane / 4, c = 2 (lane % 4), two values each.
// Accumulator layout: warp w of the group owns rows 16 w .. 16 w + 15; d[4 j + e] is row
// 16 w + lane / 4 + 8 (e / 2), column 8 j + 2 (lane % 4) + e % 2.
#define AOTINFER_F8(d, i) \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])
#define AOTINFER_F32(d, i) AOTINFER_F8(d, i), AOTINFER_F8(d, i + 8), AOTINFER_F8(d, i + 16), AOTINFER_F8(d, i + 24)
#define AOTINFER_F64(d, i) AOTINFER_F32(d, i), AOTINFER_F32(d, i + 32)
#define AOTINFER_F128(d, i) AOTINFER_F64(d, i), AOTINFER_F64(d, i + 64)

#define AOTINFER_D32 \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"

#define AOTINFER_D64 \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, " \
  "%39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, " \
  "%58, %59, %60, %61, %62, %63}"

#define AOTINFER_D128 \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, " \
  "%39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, " \
  "%58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, " \
  "%77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, " \
  "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
  "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}"


template <typename T>
constexpr bool is_bf16 = std::is_same_v<T, __nv_bfloat16>;

template <typename T, bool kBMnMajor = false>
__device__ __forceinline__ void wgmma_ss(float (&d)[32], uint64_t a, uint64_t b, bool accumulate) {
  if constexpr (is_bf16<T>) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " AOTINFER_D32 ", %32, %33, p, 1, 1, 0, %35;\n}\n"
        : AOTINFER_F32(d, 0)
        : "l"(a), "l"(b), "r"(int(accumulate)), "n"(int(kBMnMajor)));
  } else {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 " AOTINFER_D32 ", %32, %33, p, 1, 1, 0, %35;\n}\n"
        : AOTINFER_F32(d, 0)
        : "l"(a), "l"(b), "r"(int(accumulate)), "n"(int(kBMnMajor)));
  }
}

template <typename T>
__device__ __forceinline__ void wgmma_rs(float (&d)[32], const uint32_t (&a)[4], uint64_t b) {
  if constexpr (is_bf16<T>) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " AOTINFER_D32 ", {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
        : AOTINFER_F32(d, 0)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
  } else {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 " AOTINFER_D32 ", {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
        : AOTINFER_F32(d, 0)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
  }
}

template <typename T, bool kBMnMajor = false>
__device__ __forceinline__ void wgmma_ss(float (&d)[64], uint64_t a, uint64_t b, bool accumulate) {
  if constexpr (is_bf16<T>) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " AOTINFER_D64 ", %64, %65, p, 1, 1, 0, %67;\n}\n"
        : AOTINFER_F64(d, 0)
        : "l"(a), "l"(b), "r"(int(accumulate)), "n"(int(kBMnMajor)));
  } else {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 " AOTINFER_D64 ", %64, %65, p, 1, 1, 0, %67;\n}\n"
        : AOTINFER_F64(d, 0)
        : "l"(a), "l"(b), "r"(int(accumulate)), "n"(int(kBMnMajor)));
  }
}

template <typename T>
__device__ __forceinline__ void wgmma_rs(float (&d)[64], const uint32_t (&a)[4], uint64_t b) {
  if constexpr (is_bf16<T>) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " AOTINFER_D64 ", {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
        : AOTINFER_F64(d, 0)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
  } else {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 " AOTINFER_D64 ", {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
        : AOTINFER_F64(d, 0)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
  }
}

template <typename T, bool kBMnMajor = false>
__device__ __forceinline__ void wgmma_ss(float (&d)[128], uint64_t a, uint64_t b, bool accumulate) {
  if constexpr (is_bf16<T>) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 " AOTINFER_D128 ", %128, %129, p, 1, 1, 0, %131;\n}\n"
        : AOTINFER_F128(d, 0)
        : "l"(a), "l"(b), "r"(int(accumulate)), "n"(int(kBMnMajor)));
  } else {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 " AOTINFER_D128 ", %128, %129, p, 1, 1, 0, %131;\n}\n"
        : AOTINFER_F128(d, 0)
        : "l"(a), "l"(b), "r"(int(accumulate)), "n"(int(kBMnMajor)));
  }
}

template <typename T>
__device__ __forceinline__ void wgmma_rs(float (&d)[128], const uint32_t (&a)[4], uint64_t b) {
  if constexpr (is_bf16<T>) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 " AOTINFER_D128 ", {%128, %129, %130, %131}, %132, p, 1, 1, 1;\n}\n"
        : AOTINFER_F128(d, 0)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
  } else {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 " AOTINFER_D128 ", {%128, %129, %130, %131}, %132, p, 1, 1, 1;\n}\n"
        : AOTINFER_F128(d, 0)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
  }
}


// wgmma for m64nNk32 over fp8 operands with fp32 accumulators, N = 64 or 128: d (64 x N) =
// a (64 x 32, e4m3) * b (32 x N, TB: e4m3 or e5m2) + (accumulate ? d : 0), both in shared memory
// and K-major (fp8 operands have no transposed form); d's layout is wgmma_ss's.
template <typename TB>
__device__ __forceinline__ void wgmma_ss_fp8(float (&d)[32], uint64_t a, uint64_t b, bool accumulate) {
  static_assert(sizeof(TB) == 1, "e4m3 or e5m2");
  if constexpr (std::is_same_v<TB, __nv_fp8_e4m3>) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 " AOTINFER_D32 ", %32, %33, p, 1, 1;\n}\n"
        : AOTINFER_F32(d, 0)
        : "l"(a), "l"(b), "r"(int(accumulate)));
  } else {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e5m2 " AOTINFER_D32 ", %32, %33, p, 1, 1;\n}\n"
        : AOTINFER_F32(d, 0)
        : "l"(a), "l"(b), "r"(int(accumulate)));
  }
}

template <typename TB>
__device__ __forceinline__ void wgmma_ss_fp8(float (&d)[64], uint64_t a, uint64_t b, bool accumulate) {
  static_assert(sizeof(TB) == 1, "e4m3 or e5m2");
  if constexpr (std::is_same_v<TB, __nv_fp8_e4m3>) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 " AOTINFER_D64 ", %64, %65, p, 1, 1;\n}\n"
        : AOTINFER_F64(d, 0)
        : "l"(a), "l"(b), "r"(int(accumulate)));
  } else {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e5m2 " AOTINFER_D64 ", %64, %65, p, 1, 1;\n}\n"
        : AOTINFER_F64(d, 0)
        : "l"(a), "l"(b), "r"(int(accumulate)));
  }
}


#undef AOTINFER_D128
#undef AOTINFER_D64
#undef AOTINFER_D32
#undef AOTINFER_F128
#undef AOTINFER_F64
#undef AOTINFER_F32
#undef AOTINFER_F8

// mbarriers in shared memory (8 bytes each), tracked by phase parity.
__device__ __forceinline__ void mbar_init(uint64_t* bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_u32(bar)) : "memory");
}
// Returns once the phase with parity `parity` has completed.
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  uint32_t done;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(smem_u32(bar)), "r"(parity)
        : "memory");
  } while (!done);
}

// An arrive on `bar` once every cp.async this thread issued before has landed (the barrier's
// count includes it: noinc).
__device__ __forceinline__ void cp_async_arrive(uint64_t* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(smem_u32(bar)) : "memory");
}

// Arms `bar` for `bytes` more bytes of bulk copies (complete_tx) and arrives on it: its phase
// completes once every arrival and every armed byte is in.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(bytes) : "memory");
}

// TMA: the box at coordinates (c0, c1, c2) of the tensor that `map` describes (a tensor map the
// host encoded, in the kernel's __grid_constant__ params or in global memory), copied to `dst`
// in shared memory in the map's swizzle; its bytes count towards `bar`'s armed bytes. Elements
// outside the tensor land as zeros.
__device__ __forceinline__ void tma_load_3d(void* dst, const void* map, uint64_t* bar, int c0, int c1, int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(
          smem_u32(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(smem_u32(bar))
      : "memory");
}
// L2 policy for data read once: its lines are the first L2 evicts, so that what later reads
// need (other CTAs' shares, split states) stays.
__device__ __forceinline__ uint64_t l2_evict_first() {
  uint64_t policy;
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
  return policy;
}
// tma_load_3d under an L2 policy (l2_evict_first).
__device__ __forceinline__ void tma_load_3d(void* dst, const void* map, uint64_t* bar, int c0, int c1, int c2,
                                            uint64_t policy) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1, {%2, "
      "%3, %4}], [%5], %6;\n" ::"r"(smem_u32(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(smem_u32(bar)), "l"(policy)
      : "memory");
}
// Fetches a tensor map into the TMA unit's cache ahead of its first use.
__device__ __forceinline__ void tma_prefetch_map(const void* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

// Makes this thread's completed shared-memory writes (stores, landed cp.async) visible to the
// async proxy, which wgmma reads through.
__device__ __forceinline__ void fence_async_shared() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// Named barrier `id` (1..15; 0 is __syncthreads) among `threads` threads of the CTA: sync waits
// for all of them, arrive counts this thread without waiting.
template <int threads>
__device__ __forceinline__ void named_barrier_sync(int id) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "n"(threads) : "memory");
}
template <int threads>
__device__ __forceinline__ void named_barrier_arrive(int id) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "n"(threads) : "memory");
}
// A sync on named barrier `id` that also tells every thread whether `pred` held for any of them.
template <int threads>
__device__ __forceinline__ bool named_barrier_any(int id, bool pred) {
  uint32_t any;
  asm volatile(
      "{\n.reg .pred p, q;\nsetp.ne.u32 p, %1, 0;\nbar.red.or.pred q, %2, %3, p;\nselp.u32 %0, 1, 0, q;\n}\n"
      : "=r"(any)
      : "r"(uint32_t(pred)), "r"(id), "n"(threads)
      : "memory");
  // Read back through lane 0, so that the compiler knows the answer is the same in every lane: a
  // branch on it around wgmma is then not divergent (otherwise ptxas serializes every wgmma of
  // the kernel, C7518).
  return __shfl_sync(0xffffffffu, any, 0) != 0;
}

// Register reallocation between warpgroups (the kernel needs a register cap at entry:
// __launch_bounds__(threads, 1)).
template <int regs>
__device__ __forceinline__ void grow_registers() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(regs));
}
template <int regs>
__device__ __forceinline__ void shrink_registers() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(regs));
}

}  // namespace aotinfer::sm90
