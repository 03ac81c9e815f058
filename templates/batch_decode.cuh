// batch_decode: one query token per request against its paged KV cache. Contract:
// aotinfer/params/batch_decode.h.
//
// Decode is bandwidth-bound: every KV byte is read once and used by the `group` query heads
// that share its KV head. A CTA handles one work item (request, KV range) for one KV head and
// up to kRows of its query heads (the GQA group is a run-time value: larger groups take several
// CTAs). KV tiles of kTile tokens stream through a kStages-deep cp.async pipeline in shared
// memory; per tile, lane t of each warp scores token t against the warp's query rows, the
// warp keeps the online softmax of its rows, and then every thread accumulates a row's slice
// of P·V in registers.
#pragma once
#include <math.h>

#include "aotinfer/abi.h"
#include "aotinfer/annotate.h"
#include "aotinfer/attention.cuh"
#include "aotinfer/params/batch_decode.h"

namespace aotinfer {

template <typename dtype_q, typename dtype_kv, int head_dim, typename dtype_o = dtype_q,
          PosEncoding pos_encoding = PosEncoding::none, bool sliding_window = false, bool soft_cap = false>
struct AOTINFER_FAMILY("batch_decode")
    AOTINFER_VALUES("dtype_q", "f16", "bf16")
    AOTINFER_VALUES("dtype_kv", "f16", "bf16", "e4m3", "e5m2")
    AOTINFER_VALUES("head_dim", 64, 128, 256)
    AOTINFER_VALUES("dtype_o", "f16", "bf16") batch_decode {
  static constexpr int kThreads = 128;
  static constexpr int kWarps = kThreads / 32;
  static constexpr int kRows = 2 * kWarps;  // query rows per CTA: warp w scores rows w and w + kWarps
  static constexpr int kTile = 32;          // KV tokens per stage: one per lane
  static constexpr int kStages = head_dim == 256 ? 2 : 3;

  // A KV row (one token, one head) in shared memory. K rows get 16 bytes of padding so that
  // the 32 lanes, each reading its own token's row at the same column, hit distinct banks.
  static constexpr int kRowBytes = head_dim * int(sizeof(dtype_kv));
  static constexpr int kChunksPerRow = kRowBytes / 16;
  static constexpr int kKRowStride = kRowBytes + 16;
  static constexpr int kKStageBytes = kTile * kKRowStride;
  static constexpr int kVStageBytes = kTile * kRowBytes;
  static constexpr int kLoadsPerThread = kTile * kChunksPerRow / kThreads;
  static_assert(kTile * kChunksPerRow % kThreads == 0, "a stage must split evenly over the CTA");

  // P·V: each thread owns (row, 8 output dims) pairs.
  static constexpr int kPairs = kRows * head_dim / 8;
  static constexpr int kPairsPerThread = (kPairs + kThreads - 1) / kThreads;

  // Shared memory: K stages | V stages | q rows (float) | rope freqs | p | row alpha, m, l.
  static constexpr int kKOffset = 0;
  static constexpr int kVOffset = kKOffset + kStages * kKStageBytes;
  static constexpr int kQOffset = kVOffset + kStages * kVStageBytes;
  static constexpr int kFreqOffset = kQOffset + kRows * head_dim * 4;
  static constexpr int kPOffset = kFreqOffset + head_dim / 2 * 4;
  static constexpr int kRowStateOffset = kPOffset + kRows * kTile * 4;
  static constexpr int kSmemBytes = kRowStateOffset + 3 * kRows * 4;

  static constexpr aotinfer_launch_info decode_launch =
      make_launch_info<aotinfer_batch_decode_params>(kThreads, kSmemBytes, kRows, kTile, head_dim);

  // Issues the cp.async copies of KV tokens [base, base + kTile) of `kv_head` into stage `stage`;
  // tokens outside [begin, end) are zero-filled.
  static __device__ __forceinline__ void load_tile(const aotinfer_batch_decode_params& p, char* smem, int stage,
                                                   int page_begin, int kv_head, int base, int begin, int end) {
    const auto& kv = p.kv;
#pragma unroll
    for (int i = 0; i < kLoadsPerThread; ++i) {
      const int chunk = threadIdx.x + i * kThreads;
      const int token = chunk / kChunksPerRow, column = chunk % kChunksPerRow;
      const int pos = base + token;
      const bool valid = pos >= begin && pos < end;
      int64_t offset = 0;
      if (valid) {
        const int page = kv.indices[page_begin + pos / kv.page_size];
        offset = int64_t(page) * kv.stride_page + int64_t(pos % kv.page_size) * kv.stride_token +
                 int64_t(kv_head) * kv.stride_head;
      }
      const char* k_src = reinterpret_cast<const char*>(static_cast<const dtype_kv*>(kv.k_pages) + offset) + column * 16;
      const char* v_src = reinterpret_cast<const char*>(static_cast<const dtype_kv*>(kv.v_pages) + offset) + column * 16;
      cp_async_16(smem + kKOffset + stage * kKStageBytes + token * kKRowStride + column * 16, k_src, valid);
      cp_async_16(smem + kVOffset + stage * kVStageBytes + token * kRowBytes + column * 16, v_src, valid);
    }
  }

  AOTINFER_ENTRY static __device__ void decode(const aotinfer_batch_decode_params& p) {
    const int work = blockIdx.x;
    if (work >= *p.num_work) return;
    extern __shared__ __align__(16) char smem[];
    float* q_s = reinterpret_cast<float*>(smem + kQOffset);
    float* freq_s = reinterpret_cast<float*>(smem + kFreqOffset);
    float* p_s = reinterpret_cast<float*>(smem + kPOffset);
    float* alpha_s = reinterpret_cast<float*>(smem + kRowStateOffset);
    float* m_s = alpha_s + kRows;
    float* l_s = m_s + kRows;

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int num_kv_heads = p.kv.num_kv_heads;
    const int group = p.num_qo_heads / num_kv_heads;
    const int row_groups = (group + kRows - 1) / kRows;
    const int kv_head = blockIdx.y / row_groups;
    const int first_row = (blockIdx.y % row_groups) * kRows;
    const int rows = min(kRows, group - first_row);
    const int first_head = kv_head * group + first_row;  // query head of row 0

    const int request = p.work_request[work];
    const int page_begin = p.kv.indptr[request];
    const int num_pages = p.kv.indptr[request + 1] - page_begin;
    const int kv_len = num_pages == 0 ? 0 : (num_pages - 1) * p.kv.page_size + p.kv.last_page_len[request];
    const int q_pos = p.q_positions ? p.q_positions[request] : kv_len - 1;
    int begin = p.work_kv_begin[work];
    const int end = min(p.work_kv_end[work], kv_len);
    if constexpr (sliding_window) begin = max(begin, q_pos - p.window_left);

    // Scores are kept in log2 units; with neither soft cap nor ALiBi the factor folds into q.
    constexpr bool kLog2InQ = !soft_cap && pos_encoding != PosEncoding::alibi;
    const float q_scale = p.sm_scale * p.k_scale * (kLog2InQ ? kLog2e : 1.f);

    // Prefetch the first stages while q is prepared.
    const int num_tiles = end > begin ? (end - begin + kTile - 1) / kTile : 0;
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
      if (s < num_tiles) load_tile(p, smem, s, page_begin, kv_head, begin + s * kTile, begin, end);
      cp_async_commit();
    }

    if constexpr (pos_encoding == PosEncoding::rope_llama) {
      for (int i = threadIdx.x; i < head_dim / 2; i += kThreads)
        freq_s[i] = p.rope_rcp_scale * powf(p.rope_rcp_theta, float(2 * i) / float(head_dim));
      __syncthreads();
    }
    // q rows (zero beyond `rows`, so idle rows score harmlessly), rotated and scaled.
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
          const float rlo = lo * cos - hi * sin, rhi = hi * cos + lo * sin;
          lo = rlo;
          hi = rhi;
        }
      }
      q_s[row * head_dim + d] = lo * q_scale;
      q_s[row * head_dim + d + head_dim / 2] = hi * q_scale;
    }
    // Running max and sum of this warp's rows (lane-replicated).
    const int row0 = warp, row1 = warp + kWarps;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;
    float slope0 = 0.f, slope1 = 0.f;
    if constexpr (pos_encoding == PosEncoding::alibi) {
      slope0 = alibi_slope(first_head + row0, p.num_qo_heads);
      slope1 = alibi_slope(first_head + row1, p.num_qo_heads);
    }
    float acc[kPairsPerThread][8];
#pragma unroll
    for (int k = 0; k < kPairsPerThread; ++k)
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[k][e] = 0.f;

    for (int tile = 0; tile < num_tiles; ++tile) {
      const int stage = tile % kStages;
      {
        const int next = tile + kStages - 1;
        // The stage `next` lands in was last read in iteration tile - 1, which ended in a barrier.
        if (next < num_tiles) load_tile(p, smem, next % kStages, page_begin, kv_head, begin + next * kTile, begin, end);
        cp_async_commit();
      }
      cp_async_wait<kStages - 1>();
      __syncthreads();

      // Scores: lane = token, two rows per warp.
      const int pos = begin + tile * kTile + lane;
      const char* k_row = smem + kKOffset + stage * kKStageBytes + lane * kKRowStride;
      float s0 = 0.f, s1 = 0.f;
      if constexpr (pos_encoding == PosEncoding::rope_llama) {
#pragma unroll 4
        for (int d = 0; d < head_dim / 2; d += 8) {
          float lo[8], hi[8];
          load8(reinterpret_cast<const dtype_kv*>(k_row) + d, lo);
          load8(reinterpret_cast<const dtype_kv*>(k_row) + d + head_dim / 2, hi);
#pragma unroll
          for (int e = 0; e < 8; ++e) {
            float sin, cos;
            sincosf(float(pos) * freq_s[d + e], &sin, &cos);
            const float rlo = lo[e] * cos - hi[e] * sin, rhi = hi[e] * cos + lo[e] * sin;
            s0 += q_s[row0 * head_dim + d + e] * rlo + q_s[row0 * head_dim + d + e + head_dim / 2] * rhi;
            s1 += q_s[row1 * head_dim + d + e] * rlo + q_s[row1 * head_dim + d + e + head_dim / 2] * rhi;
          }
        }
      } else {
#pragma unroll 4
        for (int d = 0; d < head_dim; d += 8) {
          float k[8];
          load8(reinterpret_cast<const dtype_kv*>(k_row) + d, k);
          const float4 qa0 = *reinterpret_cast<const float4*>(q_s + row0 * head_dim + d);
          const float4 qb0 = *reinterpret_cast<const float4*>(q_s + row0 * head_dim + d + 4);
          const float4 qa1 = *reinterpret_cast<const float4*>(q_s + row1 * head_dim + d);
          const float4 qb1 = *reinterpret_cast<const float4*>(q_s + row1 * head_dim + d + 4);
          s0 += qa0.x * k[0] + qa0.y * k[1] + qa0.z * k[2] + qa0.w * k[3] + qb0.x * k[4] + qb0.y * k[5] + qb0.z * k[6] + qb0.w * k[7];
          s1 += qa1.x * k[0] + qa1.y * k[1] + qa1.z * k[2] + qa1.w * k[3] + qb1.x * k[4] + qb1.y * k[5] + qb1.z * k[6] + qb1.w * k[7];
        }
      }
      if constexpr (soft_cap) {
        s0 = p.logits_soft_cap * tanhf(s0 / p.logits_soft_cap);
        s1 = p.logits_soft_cap * tanhf(s1 / p.logits_soft_cap);
      }
      if constexpr (pos_encoding == PosEncoding::alibi) {
        s0 += slope0 * float(pos - q_pos);
        s1 += slope1 * float(pos - q_pos);
      }
      if constexpr (!kLog2InQ) {
        s0 *= kLog2e;
        s1 *= kLog2e;
      }
      const bool valid = pos < end;  // pos >= begin by construction
      s0 = valid ? s0 : -INFINITY;
      s1 = valid ? s1 : -INFINITY;

      // Online softmax of the warp's two rows.
      const float new_m0 = fmaxf(m0, warp_max(s0)), new_m1 = fmaxf(m1, warp_max(s1));
      const float p0 = new_m0 == -INFINITY ? 0.f : exp2f(s0 - new_m0);
      const float p1 = new_m1 == -INFINITY ? 0.f : exp2f(s1 - new_m1);
      const float alpha0 = new_m0 == -INFINITY ? 1.f : exp2f(m0 - new_m0);
      const float alpha1 = new_m1 == -INFINITY ? 1.f : exp2f(m1 - new_m1);
      l0 = l0 * alpha0 + warp_sum(p0);
      l1 = l1 * alpha1 + warp_sum(p1);
      m0 = new_m0;
      m1 = new_m1;
      p_s[row0 * kTile + lane] = p0;
      p_s[row1 * kTile + lane] = p1;
      if (lane == 0) {
        alpha_s[row0] = alpha0;
        alpha_s[row1] = alpha1;
      }
      __syncthreads();

      // P·V for this thread's (row, 8 dims) pairs.
      const char* v_stage = smem + kVOffset + stage * kVStageBytes;
#pragma unroll
      for (int k = 0; k < kPairsPerThread; ++k) {
        const int pair = threadIdx.x + k * kThreads;
        const int row = pair / (head_dim / 8), d = (pair % (head_dim / 8)) * 8;
        if (pair >= kPairs || row >= rows) continue;
        const float alpha = alpha_s[row];
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[k][e] *= alpha;
        const float* prow = p_s + row * kTile;
#pragma unroll 8
        for (int t = 0; t < kTile; ++t) {
          float v[8];
          load8(reinterpret_cast<const dtype_kv*>(v_stage + t * kRowBytes) + d, v);
          const float pt = prow[t];
#pragma unroll
          for (int e = 0; e < 8; ++e) acc[k][e] += pt * v[e];
        }
      }
      __syncthreads();  // the stage and p_s are overwritten next iteration
    }
    cp_async_wait<0>();

    if (lane == 0) {
      m_s[row0] = m0;
      m_s[row1] = m1;
      l_s[row0] = l0;
      l_s[row1] = l1;
    }
    __syncthreads();

    // Epilogue: normalise; write o/lse (or the partial state of this work item).
#pragma unroll
    for (int k = 0; k < kPairsPerThread; ++k) {
      const int pair = threadIdx.x + k * kThreads;
      const int row = pair / (head_dim / 8), d = (pair % (head_dim / 8)) * 8;
      if (pair >= kPairs || row >= rows) continue;
      const float l = l_s[row];
      const float scale = l > 0.f ? p.v_scale / l : 0.f;
      float out[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) out[e] = acc[k][e] * scale;
      const float lse = l > 0.f ? (m_s[row] + log2f(l)) * kLn2 : -INFINITY;
      const int head = first_head + row;
      if (p.partial_o) {
        float* dst = p.partial_o + (int64_t(work) * p.num_qo_heads + head) * head_dim + d;
        *reinterpret_cast<float4*>(dst) = make_float4(out[0], out[1], out[2], out[3]);
        *reinterpret_cast<float4*>(dst + 4) = make_float4(out[4], out[5], out[6], out[7]);
        if (d == 0) p.partial_lse[int64_t(work) * p.num_qo_heads + head] = lse;
      } else {
        store8(static_cast<dtype_o*>(p.o) + (int64_t(request) * p.num_qo_heads + head) * head_dim + d, out);
        if (d == 0 && p.lse) p.lse[int64_t(request) * p.num_qo_heads + head] = lse;
      }
    }
  }
};

}  // namespace aotinfer
