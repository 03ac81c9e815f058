// Multi-head latent attention decode on mma.sync (sm_80 and later; every arch's code for now):
// aotinfer/params/batch_mla_decode.h is the contract.
//
// Shape of the problem: every query row (a head of a query token) attends to the same latent
// cache, whose 576-wide rows are K ([ckv, kpe]) and whose first 512 columns are V. So the rows of
// a request, tokens x heads (16-512 of them), form the MMA's M dimension on their own, and each
// cache row is read once per CTA for both products.
//
// CTA: kRows packed rows (token-major: row n is token n / num_heads, head n % num_heads) of one
// work item, in kWarps warps = kRowGroups groups of 16 rows x kColGroups column groups. The
// output O (kRows x 512, fp32) is split by columns: warp (g, c) holds rows 16 g.. and the
// c-th slice of kOutDims columns, so no two warps hold the same accumulator. The score product
// is split by keys: warp (g, c) computes its rows' scores for the c-th kWarpKeys keys of the
// stage, over all 576 columns; the row group's warps then swap what the softmax needs through
// shared memory:
//   1. each warp's row maxima -> max_x[c][row]; row-group barrier; every warp takes the same
//      tile maximum, so the weights of both halves share one reference;
//   2. each warp's weights (16-bit) -> the P tile; row-group barrier; every warp reads all of its
//      rows' weights back as the A operand of O += P V over its own columns.
// Row sums stay per warp (over its keys) and are added up once, in the epilogue.
//
// Pipeline: kStages cache stages in flight by cp.async (kThreads / kKv threads per key, one page
// lookup each), one __syncthreads per stage: after it the stage has landed and every warp is done
// with the stage (and the P tile, and max_x) of the iteration before.
//
// Shared memory: Q (kRows rows), the stages, P, max_x and the epilogue's row sums. Rows are
// 1152 bytes (72 16-byte chunks, 9 whole 128-byte lines), a chunk XORed with row % 8 inside its
// line so that ldmatrix's 8 rows fall in 8 bank groups. Chips with 227 KiB per CTA take 64 rows,
// 8 warps and 3 stages; the 99 KiB ones (the sm_80 pass, which also serves 8.6 and 8.9) 16 rows,
// 4 warps and 2 stages.
//
// An fp8 (e4m3) cache: q is converted to f16 once (q_pe times kpe_scale / ckv_scale, so that
// ckv_scale alone scales the scores and the output); the stages hold raw rows (576 bytes), and
// after the iteration's barrier every thread widens a share of the tile's into one f16 stage,
// which a second barrier publishes.
#pragma once
#include <limits.h>
#include <math.h>
#include <stdint.h>

#include <type_traits>

#include "aotinfer/abi.h"
#include "aotinfer/attention.cuh"
#include "aotinfer/mla_work.cuh"
#include "aotinfer/mma.cuh"
#include "aotinfer/params/batch_mla_decode.h"
#include "aotinfer/score_fragment.cuh"
#include "aotinfer/smem_budget.cuh"

namespace aotinfer {

template <typename dtype, typename dtype_kv = dtype>
struct MlaDecodeMma {
  static constexpr bool kFp8 = sizeof(dtype_kv) == 1;
  using op = std::conditional_t<kFp8, __half, dtype>;  // the mma operand type
  static constexpr int kCkv = AOTINFER_MLA_CKV_DIM, kKpe = AOTINFER_MLA_KPE_DIM, kDim = kCkv + kKpe;
  static constexpr bool kLargeSmem = kSmemPerCta >= 160 * 1024;
  static constexpr int kRows = kLargeSmem ? 64 : 16;
  static constexpr int kWarps = kLargeSmem ? 8 : 4;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kKv = 32;
  static constexpr int kStages = kLargeSmem ? 3 : 2;
  static constexpr int kRowGroups = kRows / 16;
  static constexpr int kColGroups = kWarps / kRowGroups;
  static constexpr int kWarpKeys = kKv / kColGroups;  // scores a warp computes per stage
  static constexpr int kKeyTiles = kWarpKeys / 8;     // n8 tiles of them
  static constexpr int kOutDims = kCkv / kColGroups;  // output columns a warp holds
  static constexpr int kOutTiles = kOutDims / 8;
  static constexpr int kChunks = kDim / 8;  // 16-byte chunks of a row
  static constexpr int kRowBytes = kChunks * 16;
  static constexpr int kKSteps = kDim / 16;
  static constexpr int kQBytes = kRows * kRowBytes;
  static constexpr int kStageBytes = kKv * kRowBytes;
  // fp8: the stages hold raw rows (kDim bytes), widened into one f16 stage behind them.
  static constexpr int kRawRowBytes = kDim;
  static constexpr int kLandBytes = kFp8 ? kKv * kRawRowBytes : kStageBytes;
  static constexpr int kWideOffset = kQBytes + kStages * kLandBytes;
  static constexpr int kPRowBytes = kKv * 2;
  static constexpr int kStagesOffset = kQBytes;
  static constexpr int kPOffset = kWideOffset + (kFp8 ? kStageBytes : 0);
  static constexpr int kMaxOffset = kPOffset + kRows * kPRowBytes;
  static constexpr int kSumOffset = kMaxOffset + kColGroups * kRows * 4;
  static constexpr int kSmemBytes = kSumOffset + kColGroups * kRows * 4;
  static constexpr int kThreadsPerKey = kThreads / kKv;
  static constexpr int kChunksPerThread = kChunks / kThreadsPerKey;
  static constexpr int kCkvChunksPerThread = kCkv / 8 / kThreadsPerKey;
  static constexpr int kRawChunks = kDim / 16, kRawCkvChunks = kCkv / 16;  // 16-byte chunks of a raw row
  static constexpr int kRawChunksPerThread = (kRawChunks + kThreadsPerKey - 1) / kThreadsPerKey;
  static constexpr int kWideUnits = kKv * kChunks;  // 8 raw bytes -> one 16-byte f16 chunk
  static_assert(kWideUnits % kThreads == 0, "whole widening units a thread");
  static_assert(kSmemBytes <= kSmemPerCta, "shared memory budget");
  static_assert(kWarpKeys == 8 || kWarpKeys == 16, "8 or 16 keys a warp");
  static_assert(kChunks % kThreadsPerKey == 0 && (kCkv / 8) % kThreadsPerKey == 0, "whole chunks a thread");
  static_assert(kOutTiles % 2 == 0 && kKSteps % 2 == 0, "pairs of tiles");

  static constexpr aotinfer_launch_info launch =
      make_launch_info<aotinfer_batch_mla_decode_params>(kThreads, kSmemBytes, kRows, kKv, kCkv);

  static __device__ __forceinline__ int swizzle(int row, int chunk) { return row * kRowBytes + ((chunk ^ (row & 7)) << 4); }
  // The P tile: 64-byte rows of 4 chunks; rows 2 apart share banks, so the chunk is XORed with
  // (row / 2) % 4.
  static __device__ __forceinline__ int p_swizzle(int row, int chunk) {
    return row * kPRowBytes + ((chunk ^ ((row >> 1) & 3)) << 4);
  }
  // The warps of row group g meet at barrier 1 + g (0 is __syncthreads').
  static __device__ __forceinline__ void row_group_sync(int g) {
    if constexpr (kRowGroups == 1) {
      __syncthreads();
    } else {
      asm volatile("bar.sync %0, %1;\n" ::"r"(1 + g), "n"(32 * kColGroups) : "memory");
    }
  }

  // Keys [start, start + kKv) of the item's request into a stage (keys >= end: zeros): swizzled
  // 16-bit rows, or an fp8 cache's raw rows.
  static __device__ __forceinline__ void load_kv(const aotinfer_batch_mla_decode_params& p, char* stage,
                                                 const int32_t* pages, int start, int end) {
    const int key = int(threadIdx.x) / kThreadsPerKey, part = int(threadIdx.x) % kThreadsPerKey;
    const int pos = start + key;
    const bool valid = pos < end;
    const dtype_kv* ckv = static_cast<const dtype_kv*>(p.ckv);
    const dtype_kv* kpe = static_cast<const dtype_kv*>(p.kpe);
    if (valid) {
      const int page = pages[pos / p.page_size], slot = pos % p.page_size;
      ckv += int64_t(page) * p.ckv_stride_page + int64_t(slot) * kCkv;
      kpe += int64_t(page) * p.kpe_stride_page + int64_t(slot) * kKpe;
    }
    if constexpr (kFp8) {
      char* row = stage + key * kRawRowBytes;
#pragma unroll
      for (int i = 0; i < kRawChunksPerThread; ++i) {
        const int chunk = part + i * kThreadsPerKey;
        if (chunk >= kRawChunks) break;
        const dtype_kv* src = chunk < kRawCkvChunks ? ckv + chunk * 16 : kpe + (chunk - kRawCkvChunks) * 16;
        cp_async_16(row + chunk * 16, src, valid);
      }
    } else {
      char* row = stage + key * kRowBytes;
#pragma unroll
      for (int i = 0; i < kChunksPerThread; ++i) {
        const int chunk = part + i * kThreadsPerKey;
        const dtype* src = i < kCkvChunksPerThread ? ckv + chunk * 8 : kpe + (chunk - kCkv / 8) * 8;
        cp_async_16(row + ((chunk ^ (key & 7)) << 4), src, valid);
      }
    }
  }

  // fp8: a landed stage's raw rows widened into the f16 stage, 8 bytes into a chunk a unit
  // (consecutive threads take consecutive units, so a warp reads 256 contiguous bytes).
  static __device__ __forceinline__ void widen_kv(const char* raw, char* wide) {
#pragma unroll
    for (int i = 0; i < kWideUnits / kThreads; ++i) {
      const int u = i * kThreads + int(threadIdx.x), key = u / kChunks, chunk = u % kChunks;
      const uint2 r = *reinterpret_cast<const uint2*>(raw + u * 8);
      *reinterpret_cast<uint4*>(wide + swizzle(key, chunk)) = widen_fp8x8<dtype_kv>(r.x, r.y);
    }
  }

  // q rows (zeros past the request's rows): copied, or (fp8 cache) converted to f16 with q_pe
  // times kpe_scale / ckv_scale.
  static __device__ __forceinline__ void load_q(const aotinfer_batch_mla_decode_params& p, char* q_s, int row_base,
                                                int64_t first_token) {
    const int heads = p.num_heads, rows = p.q_len * heads;
    const float pe_factor = kFp8 ? p.kpe_scale / p.ckv_scale : 1.f;
    for (int u = threadIdx.x; u < kRows * kChunks; u += kThreads) {
      const int row = u / kChunks, chunk = u % kChunks, n = row_base + row;
      const bool valid = n < rows;
      const int t = valid ? n / heads : 0, h = valid ? n % heads : 0;
      const dtype* src = chunk < kCkv / 8
                             ? static_cast<const dtype*>(p.q_nope) + (first_token + t) * p.q_nope_stride_token +
                                   int64_t(h) * kCkv + chunk * 8
                             : static_cast<const dtype*>(p.q_pe) + (first_token + t) * p.q_pe_stride_token +
                                   int64_t(h) * kKpe + (chunk - kCkv / 8) * 8;
      if constexpr (kFp8) {
        float x[8];
        if (valid) {
          load8(src, x);
        } else {
#pragma unroll
          for (int e = 0; e < 8; ++e) x[e] = 0.f;
        }
        const float factor = chunk < kCkv / 8 ? 1.f : pe_factor;
#pragma unroll
        for (int e = 0; e < 8; ++e) x[e] *= factor;
        store8(reinterpret_cast<__half*>(q_s + swizzle(row, chunk)), x);
      } else {
        cp_async_16(q_s + swizzle(row, chunk), src, valid);
      }
    }
  }

  static __device__ void run(const aotinfer_batch_mla_decode_params& p) {
    const MlaCta cta;
    const int item = cta.item;
    if (item >= *p.num_work) return;
    extern __shared__ __align__(16) char smem[];
    char* q_s = smem;
    char* p_s = smem + kPOffset;
    float* max_x = reinterpret_cast<float*>(smem + kMaxOffset);
    float* sum_x = reinterpret_cast<float*>(smem + kSumOffset);
    const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
    const int g = warp % kRowGroups, c = warp / kRowGroups;

    const int request = p.work_request[item];
    const int begin = p.work_kv_begin[item], end = p.work_kv_end[item], kv_len = p.work_kv_len[item];
    const int32_t* pages = p.kv_indices + p.work_page_begin[item];
    const int q_len = p.q_len, heads = p.num_heads, rows = q_len * heads;
    const int row_base = cta.row_group * kRows;
    const int64_t first_token = int64_t(request) * q_len;
    const int num_tiles = (end - begin + kKv - 1) / kKv;

    // Q rows, then the first stages.
    load_q(p, q_s, row_base, first_token);
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
      if (s < num_tiles) load_kv(p, smem + kStagesOffset + s * kLandBytes, pages, begin + s * kKv, end);
      cp_async_commit();
    }

    // An fp8 cache's ckv_scale scales every score (and, in the epilogue, the output).
    const float scale = p.sm_scale * (kFp8 ? p.ckv_scale : 1.f) * kLog2e;
    float row_m[2] = {-INFINITY, -INFINITY}, row_l[2] = {0.f, 0.f};
    float o[kOutTiles][4];
#pragma unroll
    for (int j = 0; j < kOutTiles; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
    // This thread's rows (per half) and, for the causal edge, the last key each sees.
    int last_key[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int n = min(row_base + g * 16 + lane / 4 + 8 * h, rows - 1);
      last_key[h] = kv_len - q_len + n / heads;
    }
    const int q_row = g * 16 + lane % 16;
    const int key0 = c * kWarpKeys;

    for (int tile = 0; tile < num_tiles; ++tile) {
      cp_async_wait<kStages - 2>();
      __syncthreads();  // this stage (and q) landed; every warp is done with the iteration before
      {
        const int next = tile + kStages - 1;
        if (next < num_tiles) load_kv(p, smem + kStagesOffset + (next % kStages) * kLandBytes, pages, begin + next * kKv, end);
        cp_async_commit();
      }
      const char* kv_s = smem + kStagesOffset + (tile % kStages) * kLandBytes;
      if constexpr (kFp8) {
        widen_kv(kv_s, smem + kWideOffset);
        __syncthreads();  // the widened stage is whole (its readers of the tile before passed the first barrier)
        kv_s = smem + kWideOffset;
      }
      const int start = begin + tile * kKv;

      // S = Q K^T for this warp's rows and keys.
      float s[kKeyTiles][4];
#pragma unroll
      for (int j = 0; j < kKeyTiles; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
      if constexpr (kKeyTiles == 2) {
#pragma unroll 4
        for (int kk = 0; kk < kKSteps; ++kk) {
          uint32_t a[4], b[4];
          ldmatrix_x4(a, q_s + swizzle(q_row, 2 * kk + lane / 16));
          ldmatrix_x4(b, kv_s + swizzle(key0 + (lane / 16) * 8 + lane % 8, 2 * kk + (lane / 8) % 2));
          mma_16816<op>(s[0], a, b[0], b[1]);
          mma_16816<op>(s[1], a, b[2], b[3]);
        }
      } else {
#pragma unroll 4
        for (int kk = 0; kk < kKSteps; kk += 2) {
          uint32_t a0[4], a1[4], b[4];
          ldmatrix_x4(a0, q_s + swizzle(q_row, 2 * kk + lane / 16));
          ldmatrix_x4(a1, q_s + swizzle(q_row, 2 * kk + 2 + lane / 16));
          ldmatrix_x4(b, kv_s + swizzle(key0 + lane % 8, 2 * kk + lane / 8));
          mma_16816<op>(s[0], a0, b[0], b[1]);
          mma_16816<op>(s[0], a1, b[2], b[3]);
        }
      }

      // Keys past the item's end, and (several query tokens) those after a row's token.
      if (start + kKv > end || start + kKv - 1 > kv_len - q_len) {
#pragma unroll
        for (int j = 0; j < kKeyTiles; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int key = start + key0 + 8 * j + 2 * (lane % 4) + e % 2;
            if (key >= end || key > last_key[e / 2]) s[j][e] = -INFINITY;
          }
      }

      // The tile maximum of each row, shared by the row group's warps.
      float tile_max[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float m = fmaxf(s[0][2 * h], s[0][2 * h + 1]);
#pragma unroll
        for (int j = 1; j < kKeyTiles; ++j) m = fmaxf(m, fmaxf(s[j][2 * h], s[j][2 * h + 1]));
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
        tile_max[h] = m;
        if (lane % 4 == 0) max_x[c * kRows + g * 16 + lane / 4 + 8 * h] = m;
      }
      row_group_sync(g);
      float alpha[2], m_scaled[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float m = tile_max[h];
#pragma unroll
        for (int other = 0; other < kColGroups; ++other)
          if (other != c) m = fmaxf(m, max_x[other * kRows + g * 16 + lane / 4 + 8 * h]);
        const float new_m = fmaxf(row_m[h], m);
        // (-inf - -inf is NaN: a row that has seen no key keeps m = -inf and alpha 1.)
        alpha[h] = new_m == -INFINITY ? 1.f : fast_exp2((row_m[h] - new_m) * scale);
        row_m[h] = new_m;
        m_scaled[h] = new_m == -INFINITY ? 0.f : new_m * scale;
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float sum = 0.f;
#pragma unroll
        for (int j = 0; j < kKeyTiles; ++j) {
          s[j][2 * h] = fast_exp2(fmaf(s[j][2 * h], scale, -m_scaled[h]));
          s[j][2 * h + 1] = fast_exp2(fmaf(s[j][2 * h + 1], scale, -m_scaled[h]));
          sum += s[j][2 * h] + s[j][2 * h + 1];
        }
        row_l[h] = row_l[h] * alpha[h] + sum;
      }
      rescale_rows(o, alpha);

      // The weights into the P tile; the row group reads all of its rows' keys back.
#pragma unroll
      for (int j = 0; j < kKeyTiles; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int row = g * 16 + lane / 4 + 8 * h, key = key0 + 8 * j + 2 * (lane % 4);
          *reinterpret_cast<uint32_t*>(p_s + p_swizzle(row, key / 8) + (key % 8) * 2) =
              pack2<op>(s[j][2 * h], s[j][2 * h + 1]);
        }
      row_group_sync(g);

      // O += P V over this warp's columns: V is the stage's first 512 columns.
#pragma unroll
      for (int kk = 0; kk < kKv / 16; ++kk) {
        uint32_t a[4];
        ldmatrix_x4(a, p_s + p_swizzle(q_row, 2 * kk + lane / 16));
        const int v_key = 16 * kk + ((lane / 8) % 2) * 8 + lane % 8;
#pragma unroll
        for (int j = 0; j < kOutTiles; j += 2) {
          uint32_t b[4];
          ldmatrix_x4_trans(b, kv_s + swizzle(v_key, c * (kOutDims / 8) + j + lane / 16));
          mma_16816<op>(o[j], a, b[0], b[1]);
          mma_16816<op>(o[j + 1], a, b[2], b[3]);
        }
      }
    }
    cp_async_wait<0>();

    // Epilogue: the row sums over every column group's keys, then o/lse or the float state.
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float l = row_l[h];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      row_l[h] = l;
      if (lane % 4 == 0) sum_x[c * kRows + g * 16 + lane / 4 + 8 * h] = l;
    }
    row_group_sync(g);
    const bool split = p.partial_o != nullptr;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = g * 16 + lane / 4 + 8 * h, n = row_base + row;
      float l = 0.f;
#pragma unroll
      for (int other = 0; other < kColGroups; ++other) l += sum_x[other * kRows + row];
      const float inv = l > 0.f ? (kFp8 ? p.ckv_scale : 1.f) / l : 0.f;
      const float lse = l > 0.f ? (row_m[h] * scale + log2f(l)) * kLn2 : -INFINITY;
      if (n >= rows) continue;
      const int64_t out_row = split ? int64_t(item) * rows + n : first_token * heads + n;
      const int col = c * kOutDims + 2 * (lane % 4);
      if (split) {
        float* dst = p.partial_o + out_row * kCkv + col;
#pragma unroll
        for (int j = 0; j < kOutTiles; ++j)
          *reinterpret_cast<float2*>(dst + 8 * j) = make_float2(o[j][2 * h] * inv, o[j][2 * h + 1] * inv);
        if (c == 0 && lane % 4 == 0) p.partial_lse[out_row] = lse;
      } else {
        dtype* dst = static_cast<dtype*>(p.o) + out_row * kCkv + col;
#pragma unroll
        for (int j = 0; j < kOutTiles; ++j)
          *reinterpret_cast<uint32_t*>(dst + 8 * j) = pack2<dtype>(o[j][2 * h] * inv, o[j][2 * h + 1] * inv);
        if (p.lse && c == 0 && lane % 4 == 0) p.lse[out_row] = lse;
      }
    }
  }
};

}  // namespace aotinfer
