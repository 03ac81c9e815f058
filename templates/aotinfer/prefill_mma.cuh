// Batch prefill on tensor cores (sm_80+), FlashAttention-2 style: a CTA of 4 warps owns a tile
// of packed query rows (aotinfer/params/batch_prefill.h) and streams the KV of one KV head
// through a cp.async pipeline of swizzled shared-memory tiles; each warp owns 16 * kMmaQ rows and
// keeps their softmax state and output in registers.
//   S = Q K^T: A = Q rows (ldmatrix), B = K rows (ldmatrix);
//   O += P V:  A = P (the S accumulators, repacked in registers), B = V (ldmatrix.trans).
// Where the KV rows live is the KvRows policy (paged pages or ragged rows), so both prefill
// families share this kernel. fp8 K/V land raw (half the bytes of a 16-bit stage) and, once a
// stage has landed, the CTA widens it into one pair of f16 operand tiles that both products
// read (f16 holds every e4m3 and e5m2 value, so the products see the cache exactly).
#pragma once
#include <limits.h>
#include <math.h>

#include <type_traits>

#include "aotinfer/abi.h"
#include "aotinfer/attention.cuh"
#include "aotinfer/mma.cuh"
#include "aotinfer/params/batch_prefill.h"
#include "aotinfer/prefill_work.cuh"
#include "aotinfer/score_fragment.cuh"

namespace aotinfer {

template <typename dtype_q, typename dtype_kv, typename Dims, typename dtype_o, PosEncoding pos_encoding,
          template <typename> class KvRows, int kMmaQ, bool kGeneral>
struct PrefillMma {
  static_assert(sizeof(dtype_q) == 2 && sizeof(dtype_o) == 2, "16-bit queries and output");
  static constexpr int head_dim = Dims::qk;       // of q and K rows
  static constexpr int head_dim_vo = Dims::vo;    // of V and o rows
  static constexpr bool kSplitVo = Dims::kSplit;  // V has its own strides and tile geometry
  static constexpr bool kFp8 = sizeof(dtype_kv) == 1;
  static_assert(!kSplitVo || (!kFp8 && pos_encoding == PosEncoding::none),
                "V narrower than K (MLA prefill) with 16-bit K/V and no RoPE");
  using dtype = std::conditional_t<kFp8, __half, dtype_kv>;  // the mma operand type
  static constexpr bool kRope = pos_encoding == PosEncoding::rope_llama;
  static constexpr int kWarps = 4;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kWarpRows = 16 * kMmaQ;
  static constexpr int kRows = kWarps * kWarpRows;    // packed query rows per CTA
  // Keys per stage: 32 from head_dim 128 on, where a 64-key S tile would not fit the registers
  // beside O in the 128-row tile (and measured faster in the 64-row tile too, docs/PERF.md).
  static constexpr int kKv = head_dim <= 64 ? 64 : 32;
  static constexpr int kChunks = head_dim / 8;  // 16-byte chunks per q or K row
  static constexpr int kVChunks = head_dim_vo / 8;  // per V or o row
  static constexpr int kRowBytes = swizzled_row_bytes(head_dim);  // of a shared-memory q or K row
  static constexpr int kVRowBytes = swizzled_row_bytes(head_dim_vo);
  static constexpr int kTileBytes = kKv * kRowBytes;  // K operand tile
  static constexpr int kStageBytes = kTileBytes + kKv * kVRowBytes;  // K and V operand tiles
  // What a pipeline stage holds: the operand tiles, or for fp8 K then V rows as they are
  // (kRawChunks 16-byte chunks a row, unswizzled), plus the one pair of widened operand tiles.
  // V's tile starts kRawTileBytes into the stage.
  static constexpr int kRawChunks = head_dim * int(sizeof(dtype_kv)) / 16;
  static constexpr int kRawTileBytes = kFp8 ? kKv * head_dim : kTileBytes;
  static constexpr int kLandBytes = kFp8 ? 2 * kRawTileBytes : kStageBytes;
  static constexpr int kWideBytes = kFp8 ? kStageBytes : 0;
  static constexpr int kQBytes = kRows * kRowBytes;
  // Three stages where they fit beside q in the shared memory of two CTAs per SM, else two.
  static constexpr int kStages = kQBytes + kWideBytes + 3 * kLandBytes <= 96 * 1024 ? 3 : 2;
  static constexpr int kWideOffset = kQBytes + kStages * kLandBytes;
  static constexpr int kFreqOffset = kWideOffset + kWideBytes;
  static constexpr int kSmemBytes = kFreqOffset + (kRope ? head_dim / 2 * 4 : 0);
  static constexpr int kKSteps = head_dim / 16;  // of Q K^T
  static constexpr int kKvTiles = kKv / 8;       // n-tiles of S
  static constexpr int kDimTiles = head_dim_vo / 8;  // n-tiles of O
  // q rows land by cp.async unless they must be rotated or converted on the way.
  static constexpr bool kQCopied = std::is_same_v<dtype_q, dtype> && !kRope;
  // KV loads: kThreadsPerKey threads share a key; an instruction of theirs covers consecutive
  // chunks (whole 32-byte sectors), and a thread looks up one page per stage.
  static constexpr int kThreadsPerKey = kThreads / kKv;
  static constexpr int kChunksPerThread = (kRawChunks + kThreadsPerKey - 1) / kThreadsPerKey;
  static constexpr int kVChunksPerThread = kVChunks / kThreadsPerKey;  // kSplitVo: V's own loop
  static_assert(head_dim % 32 == 0 && kThreads % kKv == 0 && kChunks % kThreadsPerKey == 0 &&
                    kVChunks % kThreadsPerKey == 0 &&
                    kRows * kChunks % kThreads == 0 && 2 * kKv * kRawChunks % kThreads == 0,
                "tile shape");

  static constexpr aotinfer_launch_info launch =
      make_launch_info<aotinfer_batch_prefill_params>(kThreads, kSmemBytes, kRows, kKv, head_dim);

  // Byte offset of (row, chunk) in a tile of kBytes-long rows (q and K: kRowBytes, V: kVRowBytes):
  // chunks are XORed with row % 8 so that the 8 rows one ldmatrix phase reads at a column fall in
  // 8 different banks (rows are whole 128-byte lines, so the XOR stays inside the row).
  template <int kBytes = kRowBytes>
  static __device__ __forceinline__ int swizzle(int row, int chunk) {
    return row * kBytes + ((chunk ^ (row & 7)) << 4);
  }

  // The offsets one lane reads with ldmatrix: chunk chunk0 + 2 i + 8 b of row + 16 a is
  // at(i) + a * 16 rows + b * 128 bytes, because the XOR of swizzle() touches the low three chunk
  // bits only and row % 8 is the same for all a. Resolving the XOR once per thread keeps four
  // offsets in registers instead of one per (row block, chunk) pair of the unrolled loops.
  template <int kBytes = kRowBytes>
  struct LaneOffsets {
    int off[4];
    __device__ __forceinline__ LaneOffsets(int row, int chunk0) {
#pragma unroll
      for (int i = 0; i < 4; ++i) off[i] = swizzle<kBytes>(row, chunk0 + 2 * i);
    }
    // Chunk 2 pair + chunk0 of row + 16 row_block.
    __device__ __forceinline__ int at(int row_block, int pair) const {
      return off[pair % 4] + row_block * 16 * kBytes + (pair / 4) * 128;
    }
  };

  // Element offsets of this thread's key of the stage starting at `start` (0 beyond `end`) in K
  // and V (the same but where V's strides are its own). Its page lookup is a global load;
  // callers compute it a stage ahead so that it never stalls.
  struct KeyOffset {
    int64_t k, v;
  };
  static __device__ __forceinline__ KeyOffset key_offset(const aotinfer_batch_prefill_params& p,
                                                         const KvRows<dtype_kv>& rows, int start, int end) {
    const int pos = start + int(threadIdx.x) / kThreadsPerKey;
    if (pos >= end) return {0, 0};
    const int64_t k = rows.offset(pos);
    return {k, kSplitVo ? rows.v_offset(p, pos) : k};
  }

  // Keys [start, start + kKv) into a stage; keys >= end are zero-filled.
  static __device__ __forceinline__ void load_kv(const KvRows<dtype_kv>& rows, char* stage, int start, int end,
                                                 const KeyOffset& offset) {
    constexpr int kPerChunk = 16 / int(sizeof(dtype_kv));  // elements of a 16-byte chunk
    const int key = threadIdx.x / kThreadsPerKey, lane_of_key = threadIdx.x % kThreadsPerKey;
    const bool valid = start + key < end;
    // One base address per tensor; the chunks are constant offsets from it.
    const dtype_kv* k_src = rows.k + offset.k + lane_of_key * kPerChunk;
    const dtype_kv* v_src = rows.v + offset.v + lane_of_key * kPerChunk;
    char* k_dst = stage + key * (kFp8 ? head_dim : kRowBytes);
#pragma unroll
    for (int i = 0; i < kChunksPerThread; ++i) {
      const int chunk = i * kThreadsPerKey + lane_of_key;
      if (kRawChunks % kThreadsPerKey != 0 && chunk >= kRawChunks) break;  // fp8 head_dim 96: 6 chunks, 4 threads
      const int at = (kFp8 ? chunk : chunk ^ (key & 7)) << 4;
      cp_async_16(k_dst + at, k_src + i * kThreadsPerKey * kPerChunk, valid);
      if constexpr (!kSplitVo) cp_async_16(k_dst + kRawTileBytes + at, v_src + i * kThreadsPerKey * kPerChunk, valid);
    }
    if constexpr (kSplitVo) {  // V rows of their own width
      char* v_dst = stage + kRawTileBytes + key * kVRowBytes;
#pragma unroll
      for (int i = 0; i < kVChunksPerThread; ++i) {
        const int chunk = i * kThreadsPerKey + lane_of_key;
        cp_async_16(v_dst + ((chunk ^ (key & 7)) << 4), v_src + i * kThreadsPerKey * kPerChunk, valid);
      }
    }
  }

  // fp8: a landed stage (K rows, then V rows) widened into the operand tiles at `wide`. Lanes
  // take consecutive raw chunks, so a quarter-warp reads 128 contiguous bytes.
  static __device__ __forceinline__ void widen_kv(const char* land, char* wide) {
    constexpr int kUnits = 2 * kKv * kRawChunks;  // raw chunks of K and V
#pragma unroll
    for (int i = 0; i < kUnits / kThreads; ++i) {
      const int u = i * kThreads + int(threadIdx.x);
      const int tensor = u / (kKv * kRawChunks), key = u / kRawChunks % kKv, chunk = u % kRawChunks;
      const uint4 raw = *reinterpret_cast<const uint4*>(land + tensor * kRawTileBytes + key * head_dim + chunk * 16);
      const uint4 lo = widen_fp8x8<dtype_kv>(raw.x, raw.y), hi = widen_fp8x8<dtype_kv>(raw.z, raw.w);
      char* tile = wide + tensor * kTileBytes;
      *reinterpret_cast<uint4*>(tile + swizzle(key, 2 * chunk)) = lo;
      *reinterpret_cast<uint4*>(tile + swizzle(key, 2 * chunk + 1)) = hi;
    }
  }

  // RoPE on the landed K tile, in place (keys >= end are zeros and stay zeros).
  static __device__ __forceinline__ void rotate_k(char* k_s, const float* freq_s, int start) {
    for (int u = threadIdx.x; u < kKv * kChunks / 2; u += kThreads) {
      const int token = u / (kChunks / 2), chunk = u % (kChunks / 2);
      dtype* lo_p = reinterpret_cast<dtype*>(k_s + swizzle(token, chunk));
      dtype* hi_p = reinterpret_cast<dtype*>(k_s + swizzle(token, chunk + kChunks / 2));
      float lo[8], hi[8];
      load8(lo_p, lo);
      load8(hi_p, hi);
      rope_rotate8(lo, hi, freq_s, chunk * 8, start + token);
      store8(lo_p, lo);
      store8(hi_p, hi);
    }
  }

  static __device__ void run(const aotinfer_batch_prefill_params& p) {
    const int item = blockIdx.x;
    if (item >= *p.num_work) return;
    extern __shared__ __align__(16) char smem[];
    char* q_s = smem;
    char* stages = smem + kQBytes;
    float* freq_s = reinterpret_cast<float*>(smem + kFreqOffset);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

    const int group_size = p.num_qo_heads / int(gridDim.y);
    const FastDiv by_group{uint32_t(group_size)};
    const PrefillCta<KvRows, dtype_kv> cta(p, item, blockIdx.y, group_size, by_group, kRows, kKv);
    const KvRows<dtype_kv>& rows = cta.rows;
    const int kv_head = cta.kv_head, q_row = cta.q_row, group = cta.group, valid_rows = cta.valid_rows;
    const int q_offset = cta.q_offset, t_first = cta.t_first;
    const int begin = cta.begin, end = cta.end, num_tiles = cta.num_tiles;

    if constexpr (kRope) {
      for (int i = threadIdx.x; i < head_dim / 2; i += kThreads)
        freq_s[i] = p.rope_rcp_scale * powf(p.rope_rcp_theta, float(2 * i) / float(head_dim));
      __syncthreads();
    }

    // q rows (zeros beyond packed_len), then the first stages of KV.
    auto q_source = [&](int row) { return cta.template q_source<dtype_q>(p, row, head_dim); };
    if constexpr (kQCopied && kThreads % kChunks == 0) {
      // This thread's chunks are column `chunk` of rows kStep apart, whose tokens and heads step
      // (PackedRow) instead of being divided out of each packed row.
      constexpr int kStep = kThreads / kChunks;
      const int chunk = int(threadIdx.x) % kChunks;
      int row = int(threadIdx.x) / kChunks;
      PackedRow at(q_row + row, group, by_group);
      const PackedRow step(kStep, group, by_group);
#pragma unroll
      for (int i = 0; i < kRows / kStep; ++i) {
        const bool valid = row < valid_rows;
        cp_async_16(q_s + swizzle(row, chunk),
                    valid ? static_cast<const dtype_q*>(p.q) + cta.q_offset_of(p, at, head_dim) + chunk * 8
                          : static_cast<const dtype_q*>(p.q),
                    valid);
        row += kStep;
        at.advance(step, group);
      }
    } else if constexpr (kQCopied) {
#pragma unroll
      for (int i = 0; i < kRows * kChunks / kThreads; ++i) {
        const int flat = i * kThreads + threadIdx.x, row = flat / kChunks, chunk = flat % kChunks;
        const bool valid = row < valid_rows;
        cp_async_16(q_s + swizzle(row, chunk), valid ? q_source(row) + chunk * 8 : static_cast<const dtype_q*>(p.q), valid);
      }
    } else {
      // Pairs of chunks (c, c + kChunks / 2) so that RoPE sees both halves of a pair.
      for (int u = threadIdx.x; u < kRows * kChunks / 2; u += kThreads) {
        const int row = u / (kChunks / 2), chunk = u % (kChunks / 2);
        float lo[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f}, hi[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
        if (row < valid_rows) {
          const dtype_q* src = q_source(row);
          load8(src + chunk * 8, lo);
          load8(src + chunk * 8 + head_dim / 2, hi);
          if constexpr (kRope) rope_rotate8(lo, hi, freq_s, chunk * 8, q_offset + (q_row + row) / group);
        }
        store8(reinterpret_cast<dtype*>(q_s + swizzle(row, chunk)), lo);
        store8(reinterpret_cast<dtype*>(q_s + swizzle(row, chunk + kChunks / 2)), hi);
      }
    }
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
      if (s < num_tiles) load_kv(rows, stages + s * kLandBytes, begin + s * kKv, end, key_offset(p, rows, begin + s * kKv, end));
      cp_async_commit();
    }
    KeyOffset ahead = key_offset(p, rows, begin + (kStages - 1) * kKv, end);  // of the next stage to load

    // Softmax in log2 units with one FFMA per score: p = exp2(x * scale - m * scale), where x is
    // the raw product, or (soft cap) the capped product (score_fragment.cuh).
    const bool capped = kGeneral && p.soft_cap_out > 0.f;  // the same for every thread: a uniform branch
    const float scale = p.sm_scale * kLog2e;
    float row_m[kMmaQ][2], row_l[kMmaQ][2];
    float o[kMmaQ][kDimTiles][4];
#pragma unroll
    for (int m = 0; m < kMmaQ; ++m) {
      row_m[m][0] = row_m[m][1] = -INFINITY;
      row_l[m][0] = row_l[m][1] = 0.f;
#pragma unroll
      for (int j = 0; j < kDimTiles; ++j) o[m][j][0] = o[m][j][1] = o[m][j][2] = o[m][j][3] = 0.f;
    }
    const LaneOffsets<> q_lane(warp * kWarpRows + lane % 16, lane / 16);
    const LaneOffsets<> k_lane((lane / 16) * 8 + lane % 8, (lane / 8) % 2);
    const LaneOffsets<kVRowBytes> v_lane(((lane / 8) % 2) * 8 + lane % 8, lane / 16);
    for (int tile = 0; tile < num_tiles; ++tile) {
      cp_async_wait<kStages - 2>();
      __syncthreads();  // this tile (and q) landed; everyone is done with the tile before it
      {
        const int next = tile + kStages - 1;
        if (next < num_tiles) load_kv(rows, stages + (next % kStages) * kLandBytes, begin + next * kKv, end, ahead);
        cp_async_commit();
        ahead = key_offset(p, rows, begin + (next + 1) * kKv, end);
      }
      char* k_s = stages + (tile % kStages) * kLandBytes;
      if constexpr (kFp8) {
        widen_kv(k_s, smem + kWideOffset);
        __syncthreads();
        k_s = smem + kWideOffset;
      }
      const char* v_s = k_s + kTileBytes;  // (fp8: the widened pair; else kRawTileBytes == kTileBytes)
      const int start = begin + tile * kKv;
      if constexpr (kRope) {
        rotate_k(k_s, freq_s, start);
        __syncthreads();
      }

      float s[kMmaQ][kKvTiles][4];
#pragma unroll
      for (int m = 0; m < kMmaQ; ++m)
#pragma unroll
        for (int j = 0; j < kKvTiles; ++j) s[m][j][0] = s[m][j][1] = s[m][j][2] = s[m][j][3] = 0.f;
#pragma unroll
      for (int kk = 0; kk < kKSteps; ++kk) {
        uint32_t a[kMmaQ][4];
#pragma unroll
        for (int m = 0; m < kMmaQ; ++m) ldmatrix_x4(a[m], q_s + q_lane.at(m, kk));
#pragma unroll
        for (int jj = 0; jj < kKv / 16; ++jj) {
          uint32_t b[4];
          ldmatrix_x4(b, k_s + k_lane.at(jj, kk));
#pragma unroll
          for (int m = 0; m < kMmaQ; ++m) {
            mma_16816<dtype>(s[m][2 * jj], a[m], b[0], b[1]);
            mma_16816<dtype>(s[m][2 * jj + 1], a[m], b[2], b[3]);
          }
        }
      }

      // Masks only where the tile crosses an edge some row of the CTA can see (every tile under a
      // custom mask). A window's edges lie within kRows keys of `begin` (begin is at least where
      // the first row's window starts, the last row's starts at most kRows - 1 tokens later):
      // tested on the tile index, which keeps no register live across the loop for it.
      const bool causal = p.mask_mode == AOTINFER_MASK_CAUSAL, custom = kGeneral && p.mask_mode == AOTINFER_MASK_CUSTOM;
      const bool edge = custom || start + kKv > end || (causal && start + kKv - 1 > q_offset + t_first) ||
                        (kGeneral && p.window_left != AOTINFER_NO_WINDOW && tile * kKv < kRows);
      // Element (m, j, e) is row (m, e / 2), key start + 8 j + 2 (lane % 4) + e % 2. The mask is a
      // loop of its own behind a warp-uniform branch: interleaved with the max below, the
      // compiler turned it into selects that every stage paid for.
      if (capped)
#pragma unroll
        for (int m = 0; m < kMmaQ; ++m) soft_cap_scores(s[m], p.soft_cap_in, p.soft_cap_out);
      if (edge) {
#pragma unroll
        for (int m = 0; m < kMmaQ; ++m) {
          int key_lo[2] = {INT_MIN, INT_MIN}, key_hi[2] = {INT_MAX, INT_MAX};  // keys rows (m, h) see
          int64_t row_bit[2];  // custom: the bit of key 0 (rows past the tile read its last row's)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int t = (q_row + min(warp * kWarpRows + m * 16 + lane / 4 + 8 * h, valid_rows - 1)) / group;
            if (causal) key_hi[h] = q_offset + t;
            if (kGeneral) key_lo[h] = q_offset + t - p.window_left;
            row_bit[h] = int64_t(t) * rows.length;
          }
          mask_scores(s[m], start, end, key_lo, key_hi);
          if (custom) {
            const int64_t base = int64_t(p.mask_indptr[cta.request]) * 8;
            row_bit[0] += base, row_bit[1] += base;
            custom_mask_scores(s[m], p.custom_mask, start, end, row_bit);
          }
        }
      }
      // ALiBi after the masks (a masked -inf stays -inf): the rows' slopes and positions worked
      // out per tile, which keeps no register live across the loop for them.
      if (kGeneral && p.alibi_scale != 0.f)
#pragma unroll
        for (int m = 0; m < kMmaQ; ++m) {
          float slope[2];
          int q_pos[2];
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int packed = q_row + warp * kWarpRows + m * 16 + lane / 4 + 8 * h;
            alibi_row(p, kv_head, group, packed / group, packed, q_offset, slope[h], q_pos[h]);
          }
          alibi_scores(s[m], start, slope, q_pos);
        }
#pragma unroll
      for (int m = 0; m < kMmaQ; ++m) online_softmax(s[m], row_m[m], row_l[m], o[m], scale);

      // O += P V, 16 keys at a time: two S n-tiles are exactly the A fragment of a 16x16 P.
#pragma unroll
      for (int jj = 0; jj < kKv / 16; ++jj) {
        uint32_t a[kMmaQ][4];
#pragma unroll
        for (int m = 0; m < kMmaQ; ++m) weights_fragment<dtype>(a[m], s[m], jj);
#pragma unroll
        for (int j = 0; j < kDimTiles; j += 2) {
          uint32_t b[4];
          ldmatrix_x4_trans(b, v_s + v_lane.at(jj, j / 2));
#pragma unroll
          for (int m = 0; m < kMmaQ; ++m) {
            mma_16816<dtype>(o[m][j], a[m], b[0], b[1]);
            mma_16816<dtype>(o[m][j + 1], a[m], b[2], b[3]);
          }
        }
      }
    }
    cp_async_wait<0>();
    __syncthreads();  // q rows written by other threads are complete before a warp reuses its own

    // Epilogue: normalise; write o/lse (through this warp's q rows, for 16-byte stores) or the
    // float state of a split tile.
    const int state_base = cta.state, state_stride = cta.state_stride;
#pragma unroll
    for (int m = 0; m < kMmaQ; ++m)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        RowResult r(row_m[m][h], row_l[m][h], scale);
        const int row = warp * kWarpRows + m * 16 + lane / 4 + 8 * h;
        if (cta.takes_sink(p)) cta.add_sink(p, row, r);
        r.inv *= p.v_scale;
        if (state_base < 0) {
#pragma unroll
          for (int j = 0; j < kDimTiles; ++j) {
            const uint32_t pair = pack2<dtype_o>(o[m][j][2 * h] * r.inv, o[m][j][2 * h + 1] * r.inv);
            *reinterpret_cast<uint32_t*>(q_s + swizzle(row, j) + (lane % 4) * 4) = pair;
          }
          if (p.lse && lane % 4 == 0 && row < valid_rows) p.lse[cta.out_row(p, row)] = r.lse;
        } else if (row < valid_rows) {
          const int64_t state = state_base + int64_t(kv_head * valid_rows + row) * state_stride;
#pragma unroll
          for (int j = 0; j < kDimTiles; ++j)
            *reinterpret_cast<float2*>(p.partial_o + state * head_dim_vo + j * 8 + 2 * (lane % 4)) =
                make_float2(o[m][j][2 * h] * r.inv, o[m][j][2 * h + 1] * r.inv);
          if (lane % 4 == 0) p.partial_lse[state] = r.lse;
        }
      }
    if (state_base < 0) {
      __syncwarp();
      // o rows (head_dim_vo wide) staged in q's rows (head_dim wide, at least as long).
      if constexpr (32 % kVChunks == 0) {  // rows kStep apart, stepped as q's
        constexpr int kStep = 32 / kVChunks;
        const int chunk = lane % kVChunks;
        int row = warp * kWarpRows + lane / kVChunks;
        PackedRow at(q_row + row, group);
        const PackedRow step(kStep, group);
#pragma unroll
        for (int i = 0; i < kWarpRows / kStep; ++i) {
          if (row < valid_rows)
            *reinterpret_cast<uint4*>(static_cast<dtype_o*>(p.o) + cta.row_offset(p, at, head_dim_vo) + chunk * 8) =
                *reinterpret_cast<const uint4*>(q_s + swizzle(row, chunk));
          row += kStep;
          at.advance(step, group);
        }
      } else {
        for (int i = lane; i < kWarpRows * kVChunks; i += 32) {
          const int row = warp * kWarpRows + i / kVChunks, chunk = i % kVChunks;
          if (row >= valid_rows) continue;
          dtype_o* dst = static_cast<dtype_o*>(p.o) + cta.out_row(p, row) * head_dim_vo;
          *reinterpret_cast<uint4*>(dst + chunk * 8) = *reinterpret_cast<const uint4*>(q_s + swizzle(row, chunk));
        }
      }
    }
  }
};

}  // namespace aotinfer
