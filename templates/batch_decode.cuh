// batch_decode: one query token per request against its paged KV cache. Contract:
// aotinfer/params/batch_decode.h.
//
// Two kernels stand behind the family: head_dim <= 128 runs on tensor cores
// (aotinfer/decode_mma.cuh), whatever the KV type; head_dim 256 runs the CUDA-core kernel below.
//
// Decode is bandwidth-bound: every KV byte is read once and used by the `group` query heads
// that share its KV head. A CTA handles one work item (request, KV range) for one KV head and
// up to kRows of its query heads (the GQA group is a run-time value; larger groups take
// several CTAs). KV tiles of kTile tokens stream through a kStages-deep cp.async pipeline.
// Each KV element is widened to float once and then used by every query row:
//   scores: lane = (token, part of head_dim); a few shuffles join the parts;
//   softmax: per-warp partial max and sum through shared memory, state replicated per thread;
//   P·V:    thread = (token group, 8 dims), all rows in registers; groups are summed at the end.
#pragma once
#include <math.h>

#include "aotinfer/abi.h"
#include "aotinfer/annotate.h"
#include <type_traits>

#include "aotinfer/attention.cuh"
#include "aotinfer/decode_mma.cuh"
#include "aotinfer/decode_work.cuh"
#include "aotinfer/params/batch_decode.h"
#include "aotinfer/smem_budget.cuh"

namespace aotinfer {

template <typename dtype_q, typename dtype_kv, int head_dim, typename dtype_o = dtype_q,
          PosEncoding pos_encoding = PosEncoding::none, bool sliding_window = false, bool soft_cap = false>
struct AOTINFER_FAMILY("batch_decode")
    AOTINFER_VALUES("dtype_q", "f16", "bf16")
    AOTINFER_VALUES("dtype_kv", "f16", "bf16", "e4m3", "e5m2")
    AOTINFER_VALUES("head_dim", 64, 96, 128, 256)
    AOTINFER_VALUES("dtype_o", "f16", "bf16") batch_decode {
  static constexpr bool kTensorCores = head_dim <= 128;
  using Mma = DecodeMma<dtype_q, dtype_kv, head_dim, dtype_o, pos_encoding, sliding_window, soft_cap>;

  // The CUDA-core kernel. 8 warps and 4 query rows per CTA: enough warps per SM to hide latency,
  // and few enough accumulator registers (rows x 8) for two CTAs per SM.
  static constexpr int kThreads = 256;
  static constexpr int kWarps = kThreads / 32;
  static constexpr int kRows = 4;                         // query rows per CTA
  static constexpr int kTile = head_dim == 256 ? 32 : 64;  // KV tokens per stage
  static constexpr int kChunks = head_dim / 8;  // 8-element chunks per row

  // Scores: each warp scores kTile / kWarps tokens; the lanes of a token split its chunks.
  static constexpr int kTokensPerWarp = kTile / kWarps;
  static constexpr int kParts = 32 / kTokensPerWarp;
  // P·V: thread = (token group, chunk).
  static constexpr int kGroups = kThreads / kChunks;
  static constexpr int kTokensPerGroup = kTile / kGroups;
  // (The shapes are checked where this kernel serves, head_dim 256; head_dim 96 does not tile it.)
  static_assert(kTensorCores || (kChunks % kParts == 0 && kThreads % kChunks == 0 && kTile % kGroups == 0),
                "tile shape");

  // Shared memory. K rows get 16 bytes of padding so lanes reading different tokens at the
  // same column hit different banks.
  static constexpr int kRowBytes = head_dim * int(sizeof(dtype_kv));
  static constexpr int kCopiesPerRow = kRowBytes / 16;
  static constexpr int kKRowStride = kRowBytes + 16;
  static constexpr int kKStageBytes = kTile * kKRowStride;
  static constexpr int kVStageBytes = kTile * kRowBytes;
  static constexpr int kCopiesPerThread = kTile * kCopiesPerRow / kThreads;
  static_assert(kTensorCores || kTile * kCopiesPerRow % kThreads == 0, "a stage must split evenly over the CTA");
  static constexpr int kReduceBytes = kGroups * kRows * head_dim * 4;  // reuses the stage area
  static constexpr int q_offset(int stages) {
    const int stage_area = stages * (kKStageBytes + kVStageBytes);
    return stage_area > kReduceBytes ? stage_area : kReduceBytes;
  }
  // Behind q: rotary frequencies, probabilities, then the per-warp max and sum of each row.
  static constexpr int smem_bytes(int stages) {
    return q_offset(stages) + kRows * head_dim * 4 + head_dim / 2 * 4 + kRows * kTile * 4 + 2 * kWarps * kRows * 4;
  }
  // Three stages where they fit the chip; two on the 99 KiB chips for head_dim 256 (105 KB).
  static constexpr int kStages = smem_bytes(3) <= kSmemPerCta ? 3 : 2;
  static constexpr int kKOffset = 0;
  static constexpr int kVOffset = kStages * kKStageBytes;
  static constexpr int kQOffset = q_offset(kStages);
  static constexpr int kFreqOffset = kQOffset + kRows * head_dim * 4;
  static constexpr int kPOffset = kFreqOffset + head_dim / 2 * 4;
  static constexpr int kWarpMaxOffset = kPOffset + kRows * kTile * 4;
  static constexpr int kWarpSumOffset = kWarpMaxOffset + kWarps * kRows * 4;
  static constexpr int kSmemBytes = kWarpSumOffset + kWarps * kRows * 4;
  static_assert(kSmemBytes == smem_bytes(kStages) && kSmemBytes <= kSmemPerCta, "the decode tile must fit the chip");

  static constexpr aotinfer_launch_info decode_launch =
      kTensorCores ? Mma::launch
                   : make_launch_info<aotinfer_batch_decode_params>(kThreads, kSmemBytes, kRows, kTile, head_dim);

  AOTINFER_ENTRY static __device__ void decode(const aotinfer_batch_decode_params& p) {
    if constexpr (kTensorCores) Mma::run(p);
    else decode_simt(p);
  }

  // Issues the copies of KV tokens [base, base + kTile) of `kv_head` into `stage`; tokens
  // outside [begin, end) are zero-filled so that they stay finite. Consecutive threads copy
  // consecutive 16-byte pieces of a token row, so each warp instruction reads whole rows.
  static __device__ __forceinline__ void load_tile(const aotinfer_batch_decode_params& p, char* smem, int stage,
                                                   int page_begin, int kv_head, int base, int begin, int end) {
    const auto& kv = p.kv;
#pragma unroll
    for (int i = 0; i < kCopiesPerThread; ++i) {
      const int copy = threadIdx.x + i * kThreads;
      const int token = copy / kCopiesPerRow, column = (copy % kCopiesPerRow) * 16;
      const int pos = base + token;
      const bool valid = pos >= begin && pos < end;
      int64_t offset = 0;
      if (valid) {
        const int page = kv.indices[page_begin + pos / kv.page_size];
        offset = int64_t(page) * kv.stride_page + int64_t(pos % kv.page_size) * kv.stride_token +
                 int64_t(kv_head) * kv.stride_head;
      }
      const char* k_src = reinterpret_cast<const char*>(static_cast<const dtype_kv*>(kv.k_pages) + offset);
      const char* v_src = reinterpret_cast<const char*>(static_cast<const dtype_kv*>(kv.v_pages) + offset);
      cp_async_16(smem + kKOffset + stage * kKStageBytes + token * kKRowStride + column, k_src + column, valid);
      cp_async_16(smem + kVOffset + stage * kVStageBytes + token * kRowBytes + column, v_src + column, valid);
    }
  }

  // q . k for every row, over this lane's chunks of head_dim (RoPE applied to k on the fly).
  static __device__ __forceinline__ void score_rows(const char* k_row, const float* q_s, const float* freq_s, int pos,
                                                    int part, int rows, float (&s)[kRows]) {
    if constexpr (pos_encoding == PosEncoding::rope_llama) {
      // Chunk c pairs with chunk c + kChunks / 2; both belong to this lane's part.
#pragma unroll
      for (int k = 0; k < kChunks / 2 / kParts; ++k) {
        const int d = (k * kParts + part) * 8;
        float lo[8], hi[8];
        load8(reinterpret_cast<const dtype_kv*>(k_row) + d, lo);
        load8(reinterpret_cast<const dtype_kv*>(k_row) + d + head_dim / 2, hi);
        rope_rotate8(lo, hi, freq_s, d, pos);
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          if (r >= rows) break;
          const float* q = q_s + r * head_dim + d;
#pragma unroll
          for (int e = 0; e < 8; ++e) s[r] += q[e] * lo[e] + q[e + head_dim / 2] * hi[e];
        }
      }
    } else {
#pragma unroll
      for (int k = 0; k < kChunks / kParts; ++k) {
        const int d = (k * kParts + part) * 8;
        float kf[8];
        load8(reinterpret_cast<const dtype_kv*>(k_row) + d, kf);
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          if (r >= rows) break;
          const float4 a = *reinterpret_cast<const float4*>(q_s + r * head_dim + d);
          const float4 b = *reinterpret_cast<const float4*>(q_s + r * head_dim + d + 4);
          s[r] += a.x * kf[0] + a.y * kf[1] + a.z * kf[2] + a.w * kf[3] + b.x * kf[4] + b.y * kf[5] + b.z * kf[6] + b.w * kf[7];
        }
      }
    }
  }

  static __device__ void decode_simt(const aotinfer_batch_decode_params& p) {
    if (int(blockIdx.x) >= *p.num_work) return;
    extern __shared__ __align__(16) char smem[];
    float* q_s = reinterpret_cast<float*>(smem + kQOffset);
    float* freq_s = reinterpret_cast<float*>(smem + kFreqOffset);
    float* p_s = reinterpret_cast<float*>(smem + kPOffset);
    float* warp_max_s = reinterpret_cast<float*>(smem + kWarpMaxOffset);
    float* warp_sum_s = reinterpret_cast<float*>(smem + kWarpSumOffset);

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const DecodeWork item = DecodeWork::of_this_cta<kRows, sliding_window>(p);
    const int kv_head = item.kv_head, rows = item.rows, first_head = item.first_head, request = item.request;
    const int page_begin = item.page_begin, q_pos = item.q_pos, begin = item.begin, end = item.end;
    const int num_tiles = end > begin ? (end - begin + kTile - 1) / kTile : 0;

    // Start streaming KV while q is prepared.
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
      if (s < num_tiles) load_tile(p, smem, s, page_begin, kv_head, begin + s * kTile, begin, end);
      cp_async_commit();
    }

    // Scores are kept in log2 units; with neither soft cap nor ALiBi the factor folds into q.
    constexpr bool kLog2InQ = !soft_cap && pos_encoding != PosEncoding::alibi;
    const float q_scale = p.sm_scale * p.k_scale * (kLog2InQ ? kLog2e : 1.f);
    if constexpr (pos_encoding == PosEncoding::rope_llama) {
      for (int i = threadIdx.x; i < head_dim / 2; i += kThreads)
        freq_s[i] = p.rope_rcp_scale * powf(p.rope_rcp_theta, float(2 * i) / float(head_dim));
      __syncthreads();
    }
    for (int i = threadIdx.x; i < kRows * head_dim / 2; i += kThreads) {
      const int row = i / (head_dim / 2), d = i % (head_dim / 2);
      float lo = 0.f, hi = 0.f;
      if (row < rows) {
        const dtype_q* q = static_cast<const dtype_q*>(p.q) + (int64_t(request) * p.num_qo_heads + first_head + row) * head_dim;
        lo = to_float(q[d]);
        hi = to_float(q[d + head_dim / 2]);
        if constexpr (pos_encoding == PosEncoding::rope_llama) {
          float sin, cos;
          sincosf(float(q_pos) * freq_s[d], &sin, &cos);
          const float rlo = lo * cos - hi * sin;
          hi = hi * cos + lo * sin;
          lo = rlo;
        }
      }
      q_s[row * head_dim + d] = lo * q_scale;
      q_s[row * head_dim + d + head_dim / 2] = hi * q_scale;
    }

    // Softmax state of every row, identical in every thread.
    float m[kRows], l[kRows], slope[kRows];
    float acc[kRows][8];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      m[r] = -INFINITY;
      l[r] = 0.f;
      slope[r] = pos_encoding == PosEncoding::alibi ? alibi_slope(first_head + r, p.num_qo_heads) : 0.f;
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[r][e] = 0.f;
    }
    const int token = warp * kTokensPerWarp + lane % kTokensPerWarp, part = lane / kTokensPerWarp;
    const int pv_chunk = threadIdx.x % kChunks, pv_group = threadIdx.x / kChunks;

    for (int tile = 0; tile < num_tiles; ++tile) {
      const int stage = tile % kStages;
      cp_async_wait<kStages - 2>();
      __syncthreads();  // this tile has landed; everyone is done with the previous one
      {
        const int next = tile + kStages - 1;
        if (next < num_tiles) load_tile(p, smem, next % kStages, page_begin, kv_head, begin + next * kTile, begin, end);
        cp_async_commit();
      }

      // Scores of this lane's token, joined over the parts of head_dim.
      const int pos = begin + tile * kTile + token;
      float s[kRows];
#pragma unroll
      for (int r = 0; r < kRows; ++r) s[r] = 0.f;
      score_rows(smem + kKOffset + stage * kKStageBytes + token * kKRowStride, q_s, freq_s, pos, part, rows, s);
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
#pragma unroll
        for (int offset = kTokensPerWarp; offset < 32; offset *= 2) s[r] += __shfl_xor_sync(0xffffffffu, s[r], offset);
        if constexpr (soft_cap) s[r] = p.logits_soft_cap * tanhf(s[r] / p.logits_soft_cap);
        if constexpr (pos_encoding == PosEncoding::alibi) s[r] += slope[r] * float(pos - q_pos);
        if constexpr (!kLog2InQ) s[r] *= kLog2e;
        if (pos >= end) s[r] = -INFINITY;  // pos >= begin by construction
      }
      // Tile max: per warp, then across warps.
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        if (r >= rows) break;
        float x = s[r];
#pragma unroll
        for (int offset = 1; offset < kTokensPerWarp; offset *= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
        if (lane == 0) warp_max_s[warp * kRows + r] = x;
      }
      __syncthreads();
      float alpha[kRows];
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        if (r >= rows) break;
        float tile_max = warp_max_s[r];
#pragma unroll
        for (int w = 1; w < kWarps; ++w) tile_max = fmaxf(tile_max, warp_max_s[w * kRows + r]);
        const float new_m = fmaxf(m[r], tile_max);
        alpha[r] = new_m == -INFINITY ? 1.f : exp2f(m[r] - new_m);
        m[r] = new_m;
        float prob = new_m == -INFINITY ? 0.f : exp2f(s[r] - new_m);
        if (part == 0) p_s[r * kTile + token] = prob;
#pragma unroll
        for (int offset = 1; offset < kTokensPerWarp; offset *= 2) prob += __shfl_xor_sync(0xffffffffu, prob, offset);
        if (lane == 0) warp_sum_s[warp * kRows + r] = prob;
      }
      __syncthreads();

      // P·V: this thread's token group and chunk, all rows.
      const char* v_stage = smem + kVOffset + stage * kVStageBytes;
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        if (r >= rows) break;
        float sum = 0.f;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) sum += warp_sum_s[w * kRows + r];
        l[r] = l[r] * alpha[r] + sum;
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[r][e] *= alpha[r];
      }
#pragma unroll
      for (int i = 0; i < kTokensPerGroup; ++i) {
        const int t = i * kGroups + pv_group;
        float v[8];
        load8(reinterpret_cast<const dtype_kv*>(v_stage + t * kRowBytes) + pv_chunk * 8, v);
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          if (r >= rows) break;
          const float pr = p_s[r * kTile + t];
#pragma unroll
          for (int e = 0; e < 8; ++e) acc[r][e] += pr * v[e];
        }
      }
    }
    cp_async_wait<0>();
    __syncthreads();  // the stage area becomes the reduction buffer

    // Sum the token groups' partial outputs.
    float* reduce_s = reinterpret_cast<float*>(smem);
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if (r >= rows) break;
      float* dst = reduce_s + (pv_group * kRows + r) * head_dim + pv_chunk * 8;
      *reinterpret_cast<float4*>(dst) = make_float4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]);
      *reinterpret_cast<float4*>(dst + 4) = make_float4(acc[r][4], acc[r][5], acc[r][6], acc[r][7]);
    }
    __syncthreads();

    // Epilogue: thread = (row, 8 dims); normalise and write o/lse or the partial state.
    for (int pair = threadIdx.x; pair < rows * kChunks; pair += kThreads) {
      const int r = pair / kChunks, d = (pair % kChunks) * 8;
      float out[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
#pragma unroll
      for (int g = 0; g < kGroups; ++g) {
        const float* src = reduce_s + (g * kRows + r) * head_dim + d;
#pragma unroll
        for (int e = 0; e < 8; ++e) out[e] += src[e];
      }
      // m and l are replicated, but r is a run-time index here: pick with a constant loop.
      float row_m = 0.f, row_l = 0.f;
#pragma unroll
      for (int k = 0; k < kRows; ++k)
        if (k == r) row_m = m[k], row_l = l[k];
      const float scale = row_l > 0.f ? p.v_scale / row_l : 0.f;
#pragma unroll
      for (int e = 0; e < 8; ++e) out[e] *= scale;
      const float lse = row_l > 0.f ? (row_m + log2f(row_l)) * kLn2 : -INFINITY;
      item.write<dtype_o, head_dim>(p, r, d, out, lse);
    }
    item.merge_if_last<dtype_o, head_dim, kThreads>(p, reinterpret_cast<int*>(smem));
  }
};

}  // namespace aotinfer
