// Decode on tensor cores, for every head_dim and KV either 16-bit (q converted to the KV's type
// where the two differ) or fp8 (q converted to f16, fp8 scales applied in fp32), with or without
// RoPE (q rotated once, each landed K block rotated in shared memory, fp8 widened on the way):
// the query rows of a KV head (its GQA group's heads for each of a request's q_len tokens,
// token-major, padded to 16) are the M of mma.sync m16n8k16, so a group of 4 costs the same
// instructions as one of 16, and 4 speculative tokens of that group read each KV byte once. The kernel of batch_decode
// (templates/batch_decode.cuh), whose contract it implements (aotinfer/params/batch_decode.h).
//
// Each team of warps streams its own 16-token blocks of the work item (blocks team, team +
// kTeams, ...) through private cp.async pipelines and keeps its own online-softmax state; the
// team states are merged once at the end. A team is one warp up to head_dim 128, and then the
// main loop needs no CTA barrier. head_dim 256 splits each row between the two warps of a team
// (a warp's accumulators and q fragments for 256 dimensions would take 192 registers), head_dim
// 512 between the four warps of the CTA's one team: each warp copies, multiplies and
// accumulates its 128 dimensions, and the team adds its partial scores through shared memory
// once per block (behind a CTA barrier: the teams take equal step counts), after which its warps
// run the same softmax on the same scores.
//   S = Q K^T: A = Q (registers, loaded once), B = K rows via ldmatrix;
//   O += P V:  A = P (the S accumulators, repacked), B = V via ldmatrix.trans.
// fp8 converts byte pairs straight into the B fragments instead (no ldmatrix); with RoPE, K is
// widened to f16 rows as it is rotated, while V is still read straight from its bytes.
// A custom mask (a speculative tree) travels with the keys: each stage also receives, for each
// of the CTA's rows, the two aligned 32-bit words of the mask that hold the block's 16 bits, so
// the bits wait in shared memory like the keys they belong to and cost no register across the
// loop; the key loop is compiled with and without them.
#pragma once
#include <cuda_fp8.h>
#include <math.h>

#include <type_traits>

#include "aotinfer/abi.h"
#include "aotinfer/attention.cuh"
#include "aotinfer/mma.cuh"
#include "aotinfer/smem_budget.cuh"
#include "aotinfer/decode_work.cuh"
#include "aotinfer/params/batch_decode.h"
#include "aotinfer/score_fragment.cuh"

namespace aotinfer {

template <typename dtype_q, typename dtype_kv, int head_dim, typename dtype_o, PosEncoding pos_encoding>
struct DecodeMma {
  static constexpr bool kFp8 = sizeof(dtype_kv) == 1;
  static constexpr bool kRope = pos_encoding == PosEncoding::rope_llama;
  // fp8 converts its operands straight from the landed bytes into mma fragments, except K
  // with RoPE: the rotation widens each K block into f16 rows.
  static constexpr bool kDirect = kFp8 && !kRope;  // K (and V) straight from the bytes
  static constexpr bool kDirectV = kFp8;
  using dtype = std::conditional_t<kFp8, __half, dtype_kv>;  // the mma operand type
  static constexpr int kWarps = 4;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kSplit = head_dim > 256 ? 4 : head_dim > 128 ? 2 : 1;  // warps sharing a row: a team
  static constexpr int kTeams = kWarps / kSplit;
  static constexpr int kWarpDim = head_dim / kSplit;     // the dimensions of one warp
  static constexpr int kRows = 16;   // query rows per CTA: the mma's M
  static constexpr int kBlock = 16;  // KV tokens per team step: the P V mma's K
  // Everything below counts a warp's dimensions: the mma operands it holds, the rows it copies.
  static constexpr int kChunks = kWarpDim / 8;  // 16-byte chunks of 16-bit values per row
  static constexpr int kKSteps = kWarpDim / 16;
  static constexpr int kNTiles = kWarpDim / 8;
  static constexpr int kRowBytes = swizzled_row_bytes(kWarpDim);  // a row of mma operands in a block
  // What cp.async fills: 16-bit KV lands in mma layout; fp8 lands raw and unpadded (read
  // directly, or widened per block into the warp's converted block).
  static constexpr int kRawChunks = kWarpDim * int(sizeof(dtype_kv)) / 16;  // copied per row
  static constexpr int kRawRowBytes = kFp8 ? kRawChunks * 16 : kRowBytes;
  using Mask = MaskWords<kBlock / 8>;  // a custom mask's bits of a block: the S tile's layout
  static constexpr int kMaskRowBytes = (Mask::kWords + 1) * 4;  // a row's mask words of a block
  static constexpr int kMaskOffset = 2 * kBlock * kRawRowBytes;  // within a stage
  static constexpr int kStageBytes = kMaskOffset + kRows * kMaskRowBytes;  // K block, V block, mask words
  static constexpr int kConvertedBytes = kFp8 && !kDirect ? kBlock * kRowBytes : 0;  // a widened K block
  static constexpr int kMergeBytes = kTeams * kRows * head_dim * 4;  // reuses the stage area
  static constexpr int kQRowBytes = head_dim * 2 + 16;              // padded: conflict-free ldmatrix
  // Split rows: each warp's partial scores of a block (8 floats a lane), in two slots that
  // alternate by block, so one barrier per block orders both the writes and the reuse. They
  // reuse the q rows, which every warp has in registers before the first block.
  static constexpr int kExchangeBytes = kSplit > 1 ? 2 * kWarps * 32 * 8 * 4 : 0;
  static constexpr int q_offset(int stages) {
    const int stage_area = kWarps * (stages * kStageBytes + kConvertedBytes);
    return stage_area > kMergeBytes ? stage_area : kMergeBytes;
  }
  static constexpr int smem_bytes(int stages) {
    return q_offset(stages) + kRows * kQRowBytes + 2 * kTeams * kRows * 4 + kRows * 8;
  }
  // Three stages; six for direct fp8, whose stages hold half the bytes: 104 KB per CTA at hd128,
  // two CTAs per SM like 16-bit KV, each warp with 20 KB in flight; five for fp8 with RoPE
  // (103 KB with the widened block), also two per SM as the planner assumes
  // (kStreamingCtasPerSm): with three (69 KB) three fit, and bs64 x 4k's 512 items ran as 1.3
  // waves. Fewer where those do not fit the chip (hd128 16-bit KV needs 103 KB with three, over
  // the 99 KiB of sm_86/89/120).
  static constexpr int kStages = kDirect && smem_bytes(6) <= kSmemPerCta   ? 6
                                 : kDirect && smem_bytes(4) <= kSmemPerCta ? 4
                                 : kFp8 && smem_bytes(5) <= kSmemPerCta    ? 5
                                 : smem_bytes(3) <= kSmemPerCta            ? 3
                                                                           : 2;
  static constexpr int kWarpBytes = kStages * kStageBytes + kConvertedBytes;
  static constexpr int kQOffset = q_offset(kStages);
  static constexpr int kStateOffset = kQOffset + kRows * kQRowBytes;  // m, l per team and row
  static constexpr int kMaskBitOffset = kStateOffset + 2 * kTeams * kRows * 4;  // custom masks: a row's bit of key 0
  static constexpr int kSmemBytes = smem_bytes(kStages);
  static constexpr int kCopiesPerLane = kBlock * kRawChunks / 32;  // of K, and as many of V
  static_assert(head_dim % 16 == 0 && kChunks >= 8 && kBlock * kRawChunks % 32 == 0, "tile shape");
  static_assert(kExchangeBytes <= kRows * kQRowBytes, "the score exchange fits the q rows");

  // One resident CTA per SM streams 16-bit KV at full rate; fp8 converts every byte pair on the
  // way (more work per byte, half the bytes per CTA) and needs two (measured, docs/PERF.md).
  static constexpr int kStreamingCtasPerSm = kFp8 ? 2 : 1;
  static constexpr aotinfer_launch_info launch = make_launch_info<aotinfer_batch_decode_params>(
      kThreads, kSmemBytes, kRows, kTeams * kBlock, head_dim, AOTINFER_DECODE_FLAT_GRID | kStreamingCtasPerSm);

  // The head dimension of a warp's dimension `local`, for the warp `part` of its team. A warp
  // holds whole 8-dimension chunks from both halves of the row, matched so that RoPE's pairs
  // (d, d + head_dim / 2) stay in one warp: part h has [h w, (h + 1) w) and the same range
  // shifted by head_dim / 2, w = kWarpDim / 2. Unsplit rows: local itself.
  static __device__ __forceinline__ int head_dim_of(int part, int local) {
    if constexpr (kSplit == 1) return local;
    constexpr int kHalf = kWarpDim / 2;
    return local / kHalf * (head_dim / 2) + part * kHalf + local % kHalf;
  }

  // Byte offset of (token, chunk) in a K or V block. Chunks are XORed with token % 8 so that the
  // 8 rows one ldmatrix reads at a column fall in 8 different banks (rows are whole 128-byte
  // lines, so the XOR stays inside the row).
  static __device__ __forceinline__ int swizzle(int token, int chunk) {
    return token * kRowBytes + ((chunk ^ (token & 7)) << 4);
  }

  // Direct fp8: byte offset of (token, 16-byte chunk) in a raw K or V block. A lane reads a
  // quarter of a K row (tokens g, g + 8) and an eighth of four V rows (tokens 2c, 2c + 1, 2c + 8,
  // 2c + 9); the XORs spread each quarter-warp's 16-byte reads of 128-byte rows over all banks.
  static __device__ __forceinline__ int raw_k_offset(int token, int chunk) {
    return token * kRawRowBytes + ((kDirect && kRawChunks == 8 ? chunk ^ (token & 1) : chunk) << 4);
  }
  static __device__ __forceinline__ int raw_v_offset(int token, int chunk) {
    return token * kRawRowBytes + ((kDirectV && kRawChunks == 8 ? chunk ^ (((token >> 1) & 3) << 1) : chunk) << 4);
  }
  // Direct fp8 reads each lane's fragment values from consecutive bytes, so a warp's dimensions
  // are permuted: S sums over them in the order k_dim gives (q is stored in that order), and
  // the P V tile j, column n holds dimension n * kWarpDim / 8 + j (undone when the teams merge).
  static __device__ __forceinline__ int k_dim(int logical) {
    if constexpr (!kDirect) return logical;
    const int kk = logical / 16, h = logical % 16 / 8, e = logical % 8;
    return e / 2 * (kWarpDim / 4) + kk * 4 + h * 2 + e % 2;
  }
  static __device__ __forceinline__ int o_column(int dim) {  // where a warp's dimension sits in its P V tiles
    if constexpr (!kDirectV) return dim;
    return dim % (kWarpDim / 8) * 8 + dim / (kWarpDim / 8);
  }
  // Where head dimension `dim` sits in a team's merge row: its warp's part, then o_column.
  static __device__ __forceinline__ int merge_column(int dim) {
    if constexpr (kSplit == 1) return o_column(dim);
    constexpr int kHalf = kWarpDim / 2;
    const int r = dim % (head_dim / 2);
    return r / kHalf * kWarpDim + o_column(dim / (head_dim / 2) * kHalf + r % kHalf);
  }
  static __device__ __forceinline__ uint32_t fp8x2_to_f16x2(uint32_t pair) { return widen_fp8x2<dtype_kv>(pair); }

  // Where lane l < kBlock's token of a block lives: its page (a page-table read) and slot; slot
  // -1 past the end. The main loop looks a block's pages up one block before its copies, so
  // that the read's latency passes behind a block's products instead of stalling the copies
  // (the most sampled stall of the fp8 kernel, ncu).
  struct KeyPage {
    int page, slot;
  };
  static __device__ __forceinline__ KeyPage key_page(const aotinfer_batch_decode_params& p, int start, int end,
                                                     int page_begin, int lane) {
    const int pos = start + lane % kBlock;
    if (pos >= end) return {0, -1};
    const int index = pos / p.kv.page_size;
    return {p.kv.indices[page_begin + index], pos - index * p.kv.page_size};
  }

  // Copies this warp's dimensions of a block's KV tokens (lane l < kBlock's at `key`) into a
  // stage; tokens past the end are zero-filled. Lanes share the offsets by shuffle.
  static __device__ __forceinline__ void load_block(const aotinfer_batch_decode_params& p, char* stage, KeyPage key,
                                                    int kv_head, int part, int lane) {
    const auto& kv = p.kv;
    const bool my_valid = key.slot >= 0;
    const int64_t my_offset = my_valid ? int64_t(key.page) * kv.stride_page + int64_t(key.slot) * kv.stride_token +
                                             int64_t(kv_head) * kv.stride_head
                                       : int64_t(0);
    const dtype_kv* k = static_cast<const dtype_kv*>(kv.k_pages);
    const dtype_kv* v = static_cast<const dtype_kv*>(kv.v_pages);
#pragma unroll
    for (int i = 0; i < kCopiesPerLane; ++i) {
      const int flat = i * 32 + lane, token = flat / kRawChunks, chunk = flat % kRawChunks;
      const int64_t offset = __shfl_sync(0xffffffffu, my_offset, token) + head_dim_of(part, chunk * (16 / int(sizeof(dtype_kv))));
      const bool valid = __shfl_sync(0xffffffffu, my_valid, token);
      const int k_dst = kFp8 ? raw_k_offset(token, chunk) : swizzle(token, chunk);
      const int v_dst = kFp8 ? raw_v_offset(token, chunk) : swizzle(token, chunk);
      cp_async_16(stage + k_dst, k + offset, valid);
      cp_async_16(stage + kBlock * kRawRowBytes + v_dst, v + offset, valid);
    }
  }

  // Custom masks: copies row lane / 2's mask word lane % 2 of the block of keys from `start` into
  // the stage (the aligned pair that holds the row's bits of those keys; bit_of_key0: where its
  // key 0 is).
  static __device__ __forceinline__ void load_mask_words(const aotinfer_batch_decode_params& p, char* stage,
                                                         const int64_t* bit_of_key0, int start, int end, int lane) {
    static_assert(kRows * (Mask::kWords + 1) == 32, "a word a lane");
    Mask::stage_word(p.custom_mask, reinterpret_cast<uint32_t*>(stage + kMaskOffset) + lane, lane % 2, start, end,
                     bit_of_key0[lane / 2]);
  }

  // RoPE: rotates a landed K block (keys at positions start, start + 1, ...) into k_s, the mma
  // operand rows: in place for 16-bit KV; fp8 widens its raw bytes to f16 on the way, into the
  // warp's converted block. Lane = (kRopeDims adjacent low-half dimensions: a 32-bit word of
  // the landed row, a token phase); it starts from angles computed afresh at its first token and steps by
  // its token stride with one complex multiply per dimension, so a block costs kRopeDims
  // rope_sincos per lane. Zero-filled keys past the end stay zero.
  static constexpr int kRopeDims = 4 / int(sizeof(dtype_kv));  // dimensions in a landed 32-bit word
  static constexpr int kRopeWords = kWarpDim / 2 / kRopeDims;  // such words in the low half of a row
  static constexpr int kRopeTokenStride = 32 / kRopeWords;
  static constexpr int kRopeLanes = kRopeWords * kRopeTokenStride;  // head_dim 96: 24 of the 32
  struct RopeLane {
    float freq[kRopeDims], step_cos[kRopeDims], step_sin[kRopeDims];
  };
  static __device__ __forceinline__ RopeLane rope_lane(const aotinfer_batch_decode_params& p, int part, int lane) {
    RopeLane r;
    const int dim = head_dim_of(part, kRopeDims * (lane % kRopeWords));
#pragma unroll
    for (int e = 0; e < kRopeDims; ++e) {
      r.freq[e] = p.rope_rcp_scale * powf(p.rope_rcp_theta, float(2 * (dim + e)) / float(head_dim));
      rope_sincos(float(kRopeTokenStride) * r.freq[e], &r.step_sin[e], &r.step_cos[e]);
    }
    return r;
  }
  // A lane's word of `token` (low half, or the high half's partner `hi`) as floats.
  static __device__ __forceinline__ void load_rope_word(const char* landed, int token, int dim, bool hi,
                                                        float (&x)[kRopeDims]) {
    if constexpr (kFp8) {
      const uint32_t word =
          *reinterpret_cast<const uint32_t*>(landed + token * kRawRowBytes + dim + (hi ? kWarpDim / 2 : 0));
      const uint32_t pairs[2] = {fp8x2_to_f16x2(word), fp8x2_to_f16x2(word >> 16)};
      const __half* h = reinterpret_cast<const __half*>(pairs);
#pragma unroll
      for (int e = 0; e < 4; ++e) x[e] = __half2float(h[e]);
    } else {
      const uint32_t bits = *reinterpret_cast<const uint32_t*>(landed + rope_word(token, dim, hi));
      const dtype* h = reinterpret_cast<const dtype*>(&bits);
      x[0] = to_float(h[0]);
      x[1] = to_float(h[1]);
    }
  }
  // Byte offset of a lane's kRopeDims dimensions of `token` in the mma operand rows.
  static __device__ __forceinline__ int rope_word(int token, int dim, bool hi) {
    return swizzle(token, dim / 8 + (hi ? kChunks / 2 : 0)) + dim % 8 * 2;
  }
  static __device__ __forceinline__ void rotate_block(const char* landed, char* k_s, int start, const RopeLane& r,
                                                      int lane) {
    if (kRopeLanes < 32 && lane >= kRopeLanes) return;
    const int dim = kRopeDims * (lane % kRopeWords), first = lane / kRopeWords;
    float cos[kRopeDims], sin[kRopeDims];
#pragma unroll
    for (int e = 0; e < kRopeDims; ++e) rope_sincos(float(start + first) * r.freq[e], &sin[e], &cos[e]);
#pragma unroll
    for (int token = first; token < kBlock; token += kRopeTokenStride) {
      float lo[kRopeDims], hi[kRopeDims];
      load_rope_word(landed, token, dim, false, lo);
      load_rope_word(landed, token, dim, true, hi);
#pragma unroll
      for (int e = 0; e < kRopeDims; ++e) {
        const float l = lo[e], h = hi[e];
        lo[e] = l * cos[e] - h * sin[e];
        hi[e] = h * cos[e] + l * sin[e];
        const float next_cos = cos[e] * r.step_cos[e] - sin[e] * r.step_sin[e];
        sin[e] = sin[e] * r.step_cos[e] + cos[e] * r.step_sin[e];
        cos[e] = next_cos;
      }
      if constexpr (kFp8) {
        *reinterpret_cast<uint2*>(k_s + rope_word(token, dim, false)) =
            make_uint2(pack2<dtype>(lo[0], lo[1]), pack2<dtype>(lo[2], lo[3]));
        *reinterpret_cast<uint2*>(k_s + rope_word(token, dim, true)) =
            make_uint2(pack2<dtype>(hi[0], hi[1]), pack2<dtype>(hi[2], hi[3]));
      } else {
        *reinterpret_cast<uint32_t*>(k_s + rope_word(token, dim, false)) = pack2<dtype>(lo[0], lo[1]);
        *reinterpret_cast<uint32_t*>(k_s + rope_word(token, dim, true)) = pack2<dtype>(hi[0], hi[1]);
      }
    }
  }

  static __device__ void run(const aotinfer_batch_decode_params& p) {
    static_assert(kSmemBytes <= kSmemPerCta, "the decode tile must fit the chip's shared memory");
    if (int(blockIdx.x) >= *p.num_work * DecodeWork::rows_per_item<kRows>(p)) return;
    extern __shared__ __align__(16) char smem[];
    char* q_s = smem + kQOffset;
    float* m_s = reinterpret_cast<float*>(smem + kStateOffset);
    float* l_s = m_s + kTeams * kRows;

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int team = warp / kSplit, part = warp % kSplit;
    const DecodeWork item = DecodeWork::of_this_cta<kRows>(p);
    const int kv_head = item.kv_head, rows = item.rows, request = item.request;
    const int page_begin = item.page_begin, begin = item.begin, end = item.end;
    const int num_blocks = end > begin ? (end - begin + kBlock - 1) / kBlock : 0;
    // Split rows: every team takes the same number of steps (one past the end runs a block whose
    // keys are all masked), so that the score exchange can use the CTA barrier.
    const int my_blocks = kSplit > 1                ? (num_blocks + kTeams - 1) / kTeams
                          : num_blocks > team ? (num_blocks - team + kTeams - 1) / kTeams
                                              : 0;
    auto block_start = [&](int i) { return begin + (team + i * kTeams) * kBlock; };

    // Custom masks: where each CTA row's bits of its request's keys begin (rows past the CTA's,
    // which write nothing, repeat its last).
    const bool custom = p.custom_mask != nullptr;  // the same for every thread: a uniform branch
    int64_t* bit_of_key0 = reinterpret_cast<int64_t*>(smem + kMaskBitOffset);
    if (custom) {
      if (threadIdx.x < kRows)
        bit_of_key0[threadIdx.x] =
            int64_t(p.mask_indptr[request]) * 8 + int64_t(item.token_of(min(int(threadIdx.x), rows - 1))) * item.kv_len;
      __syncthreads();
    }

    char* my_stages = smem + warp * kWarpBytes;
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
      if (s < my_blocks) {
        const KeyPage key = key_page(p, block_start(s), end, page_begin, lane);
        load_block(p, my_stages + s * kStageBytes, key, kv_head, part, lane);
        if (custom) load_mask_words(p, my_stages + s * kStageBytes, bit_of_key0, block_start(s), end, lane);
      }
      cp_async_commit();
    }
    KeyPage ahead = key_page(p, block_start(kStages - 1), end, page_begin, lane);  // the loop's first copies

    // q rows as mma operands (zero beyond `rows`), rotated at their q_pos for RoPE; scaling happens
    // on the fp32 scores. A row holds each part's dimensions in its warp's order, one part after
    // the other.
    constexpr int kPartChunks = kRope ? kChunks / 2 : kChunks;  // RoPE: a thread takes a chunk and its partner
    constexpr int kQChunks = kSplit * kPartChunks;
    for (int i = threadIdx.x; i < kRows * kQChunks; i += kThreads) {
      const int row = i / kQChunks, q_part = kSplit == 1 ? 0 : i % kQChunks / kPartChunks, chunk = i % kPartChunks;
      const int dim = head_dim_of(q_part, chunk * 8);
      float lo[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f}, hi[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
      if (row < rows) {
        const int64_t token = int64_t(request) * p.q_len + item.token_of(row);
        const dtype_q* q = static_cast<const dtype_q*>(p.q) + token * p.q_stride_token + item.head_of(row) * head_dim;
        if constexpr (kDirect) {
#pragma unroll
          for (int e = 0; e < 8; ++e) lo[e] = to_float(q[head_dim_of(q_part, k_dim(chunk * 8 + e))]);
        } else {
          load8(q + dim, lo);
        }
        if constexpr (kRope) {
          load8(q + dim + head_dim / 2, hi);
          float freq[8];
#pragma unroll
          for (int e = 0; e < 8; ++e) freq[e] = p.rope_rcp_scale * powf(p.rope_rcp_theta, float(2 * (dim + e)) / float(head_dim));
          rope_rotate8(lo, hi, freq, 0, item.q_pos(p, row));
        }
      }
      char* q_row = q_s + row * kQRowBytes + q_part * kChunks * 16;
      store8(reinterpret_cast<dtype*>(q_row + chunk * 16), lo);
      if constexpr (kRope) store8(reinterpret_cast<dtype*>(q_row + (chunk + kChunks / 2) * 16), hi);
    }
    __syncthreads();
    uint32_t q_frag[kKSteps][4];
#pragma unroll
    for (int kk = 0; kk < kKSteps; ++kk)
      ldmatrix_x4(q_frag[kk], q_s + (lane % 16) * kQRowBytes + (part * kChunks + kk * 2 + lane / 16) * 16);
    if constexpr (kSplit > 1) __syncthreads();  // every warp has its q before the exchange reuses the rows

    // Scores in log2 units; soft cap and ALiBi act on the natural-unit score first.
    const bool capped = p.logits_soft_cap > 0.f;  // the same for every thread: a uniform branch
    const bool log2_in_scale = !capped && pos_encoding != PosEncoding::alibi;
    const float score_scale = p.sm_scale * p.k_scale * (log2_in_scale ? kLog2e : 1.f);
    const int row_of[2] = {lane / 4, lane / 4 + 8};
    // Each row's keys end at its token's own (causal among a request's tokens): end - cut, the
    // cut of row_of[r] in byte r (at most 15 keys: q_len <= 16), one register in a loop at the
    // register limit. One token per request cuts nothing.
    const uint32_t cut = uint32_t(end - item.key_end(p, row_of[0])) | uint32_t(end - item.key_end(p, row_of[1])) << 8;
    float slope[2] = {0.f, 0.f};
    int q_pos[2] = {0, 0};
    if constexpr (pos_encoding == PosEncoding::alibi) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        slope[r] = alibi_slope(item.head_of(row_of[r]), p.num_qo_heads);
        q_pos[r] = item.q_pos(p, row_of[r]);
      }
    }
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
    float o[kNTiles][4];
#pragma unroll
    for (int j = 0; j < kNTiles; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;

    RopeLane rope{};
    if constexpr (kRope) rope = rope_lane(p, part, lane);
    // The key loop, compiled twice: with the custom mask's words, and without a trace of them.
    auto key_loop = [&](auto custom_mask) {
      constexpr bool kCustom = decltype(custom_mask)::value;
      for (int i = 0; i < my_blocks; ++i) {
        {
          const int next = i + kStages - 1;  // its stage was last read in iteration i - 1
          if (next < my_blocks) {
            load_block(p, my_stages + (next % kStages) * kStageBytes, ahead, kv_head, part, lane);
            if constexpr (kCustom)
              load_mask_words(p, my_stages + (next % kStages) * kStageBytes, bit_of_key0, block_start(next), end, lane);
          }
          cp_async_commit();
          ahead = key_page(p, block_start(next + 1), end, page_begin, lane);
        }
        cp_async_wait<kStages - 1>();
        __syncwarp();
        char* stage = my_stages + (i % kStages) * kStageBytes;
        char* k_s = stage;
        if constexpr (kRope) {
          if constexpr (kFp8) k_s = my_stages + kStages * kStageBytes;
          rotate_block(stage, k_s, block_start(i), rope, lane);
          __syncwarp();
        }
        const char* v_s = stage + kBlock * kRawRowBytes;

        // S (16 rows x 16 tokens) = Q K^T, as two 8-token halves.
        float s[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
        if constexpr (kDirect) {
          // Token 8 h + lane / 4, bytes [c hd/4, (c + 1) hd/4) of its row: one 32-bit word per k step.
          const int c = lane % 4;
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int token = 8 * h + lane / 4;
            uint32_t words[kKSteps];
            if constexpr (kKSteps % 4 == 0) {
#pragma unroll
              for (int q = 0; q < kKSteps / 4; ++q)
                *reinterpret_cast<uint4*>(words + 4 * q) =
                    *reinterpret_cast<const uint4*>(k_s + raw_k_offset(token, c * (kKSteps / 4) + q));
            } else {  // head_dim 96: 24 bytes, 8-byte aligned
#pragma unroll
              for (int q = 0; q < kKSteps / 2; ++q)
                *reinterpret_cast<uint2*>(words + 2 * q) =
                    *reinterpret_cast<const uint2*>(k_s + token * kRawRowBytes + c * kKSteps * 4 + 8 * q);
            }
#pragma unroll
            for (int kk = 0; kk < kKSteps; ++kk)
              mma_16816<dtype>(s[h], q_frag[kk], fp8x2_to_f16x2(words[kk]), fp8x2_to_f16x2(words[kk] >> 16));
          }
        } else {
#pragma unroll
          for (int kk = 0; kk < kKSteps; ++kk) {
            uint32_t b[4];
            ldmatrix_x4(b, k_s + swizzle((lane / 16) * 8 + lane % 8, kk * 2 + (lane / 8) % 2));
            mma_16816<dtype>(s[0], q_frag[kk], b[0], b[1]);
            mma_16816<dtype>(s[1], q_frag[kk], b[2], b[3]);
          }
        }
        if constexpr (kSplit > 1) {  // the team's partial scores, summed to the same bits in every warp
          float* slot = reinterpret_cast<float*>(q_s) + (i % 2) * kWarps * 256;
          *reinterpret_cast<float4*>(slot + warp * 256 + lane * 4) = make_float4(s[0][0], s[0][1], s[0][2], s[0][3]);
          *reinterpret_cast<float4*>(slot + warp * 256 + 128 + lane * 4) = make_float4(s[1][0], s[1][1], s[1][2], s[1][3]);
          __syncthreads();
          if constexpr (kSplit == 2) {  // own + partner's: a + b == b + a, so both warps agree
            const float* theirs = slot + (warp ^ 1) * 256 + lane * 4;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const float4 t = *reinterpret_cast<const float4*>(theirs + 128 * h);
              s[h][0] += t.x, s[h][1] += t.y, s[h][2] += t.z, s[h][3] += t.w;
            }
          } else {  // every warp adds the team's partials in part order
            const float* team_slot = slot + team * kSplit * 256 + lane * 4;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              float4 sum = *reinterpret_cast<const float4*>(team_slot + 128 * h);
#pragma unroll
              for (int p = 1; p < kSplit; ++p) {
                const float4 t = *reinterpret_cast<const float4*>(team_slot + p * 256 + 128 * h);
                sum.x += t.x, sum.y += t.y, sum.z += t.z, sum.w += t.w;
              }
              s[h][0] = sum.x, s[h][1] = sum.y, s[h][2] = sum.z, s[h][3] = sum.w;
            }
          }
        }

        // Element (half h, e) is row row_of[e / 2], token 8 h + 2 (lane % 4) + e % 2.
        const int start = block_start(i);
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int e = 0; e < 4; ++e) s[h][e] *= score_scale;
        if (capped)
#pragma unroll
          for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int e = 0; e < 4; ++e) s[h][e] = p.logits_soft_cap * tanhf(s[h][e] / p.logits_soft_cap);
        if constexpr (kCustom) {  // -inf where a row's bit is clear
          const char* words = stage + kMaskOffset;
          const uint32_t* const row_words[2] = {reinterpret_cast<const uint32_t*>(words + row_of[0] * kMaskRowBytes),
                                                reinterpret_cast<const uint32_t*>(words + row_of[1] * kMaskRowBytes)};
          const int64_t row_bit[2] = {bit_of_key0[row_of[0]], bit_of_key0[row_of[1]]};
          Mask mask;
          mask.load_staged(row_words, start, row_bit);
          mask.apply(s);
        }
        float row_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int pos = start + 8 * h + 2 * (lane % 4) + e % 2;
            float x = s[h][e];
            if constexpr (pos_encoding == PosEncoding::alibi) x += slope[e / 2] * float(pos - q_pos[e / 2]);
            if (!log2_in_scale) x *= kLog2e;
            s[h][e] = pos < end - int(cut >> (8 * (e / 2)) & 0xffu) ? x : -INFINITY;
            row_max[e / 2] = fmaxf(row_max[e / 2], s[h][e]);
          }
        float alpha[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          row_max[r] = fmaxf(row_max[r], __shfl_xor_sync(0xffffffffu, row_max[r], 1));
          row_max[r] = fmaxf(row_max[r], __shfl_xor_sync(0xffffffffu, row_max[r], 2));
          const float new_m = fmaxf(m[r], row_max[r]);
          alpha[r] = new_m == -INFINITY ? 1.f : exp2f(m[r] - new_m);
          m[r] = new_m;
        }
        float row_sum[2] = {0.f, 0.f};
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            s[h][e] = m[e / 2] == -INFINITY ? 0.f : exp2f(s[h][e] - m[e / 2]);
            row_sum[e / 2] += s[h][e];
          }
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 1);
          row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 2);
          l[r] = l[r] * alpha[r] + row_sum[r];
        }
        // A row whose maximum held has alpha exactly 1. Past the first blocks the maxima rarely
        // move, and the warp skips the rescale: 4 kNTiles multiplies a lane, the most frequent
        // instruction of the fp8 kernels (ncu).
        if (__any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f)) rescale_rows(o, alpha);

        // O += P V: the S accumulators are exactly the A fragment of a 16x16 P.
        const uint32_t a[4] = {pack2<dtype>(s[0][0], s[0][1]), pack2<dtype>(s[0][2], s[0][3]),
                               pack2<dtype>(s[1][0], s[1][1]), pack2<dtype>(s[1][2], s[1][3])};
        if constexpr (kDirectV) {
          // Rows 2c, 2c + 1, 2c + 8, 2c + 9, bytes [g hd/8, (g + 1) hd/8): byte j of a row is tile j's
          // column g; byte pairs of rows (2c, 2c + 1) and (2c + 8, 2c + 9) make the b0 and b1 words.
          constexpr int kVWords = kNTiles / 4;
          const int g = lane / 4, c = lane % 4;
          uint32_t rows_v[4][kVWords];
#pragma unroll
          for (int r = 0; r < 4; ++r) {
            const int token = 2 * c + r % 2 + 8 * (r / 2);
            const char* src = v_s + raw_v_offset(token, g * kVWords / 4) + g * kVWords * 4 % 16;
            if constexpr (kVWords == 4) {
              *reinterpret_cast<uint4*>(rows_v[r]) = *reinterpret_cast<const uint4*>(src);
            } else if constexpr (kVWords == 3) {  // head_dim 96: 12 bytes, 4-byte aligned
#pragma unroll
              for (int w = 0; w < 3; ++w) rows_v[r][w] = reinterpret_cast<const uint32_t*>(src)[w];
            } else {
              *reinterpret_cast<uint2*>(rows_v[r]) = *reinterpret_cast<const uint2*>(src);
            }
          }
#pragma unroll
          for (int w = 0; w < kVWords; ++w) {
            const uint32_t b0_lo = __byte_perm(rows_v[0][w], rows_v[1][w], 0x5140), b0_hi = __byte_perm(rows_v[0][w], rows_v[1][w], 0x7362);
            const uint32_t b1_lo = __byte_perm(rows_v[2][w], rows_v[3][w], 0x5140), b1_hi = __byte_perm(rows_v[2][w], rows_v[3][w], 0x7362);
            mma_16816<dtype>(o[4 * w], a, fp8x2_to_f16x2(b0_lo), fp8x2_to_f16x2(b1_lo));
            mma_16816<dtype>(o[4 * w + 1], a, fp8x2_to_f16x2(b0_lo >> 16), fp8x2_to_f16x2(b1_lo >> 16));
            mma_16816<dtype>(o[4 * w + 2], a, fp8x2_to_f16x2(b0_hi), fp8x2_to_f16x2(b1_hi));
            mma_16816<dtype>(o[4 * w + 3], a, fp8x2_to_f16x2(b0_hi >> 16), fp8x2_to_f16x2(b1_hi >> 16));
          }
        } else {
#pragma unroll
          for (int j = 0; j < kNTiles; j += 2) {
            uint32_t b[4];
            ldmatrix_x4_trans(b, v_s + swizzle(((lane / 8) % 2) * 8 + lane % 8, j + lane / 16));
            mma_16816<dtype>(o[j], a, b[0], b[1]);
            mma_16816<dtype>(o[j + 1], a, b[2], b[3]);
          }
        }
        __syncwarp();
      }
    };
    if (custom) key_loop(std::true_type{});
    else key_loop(std::false_type{});
    cp_async_wait<0>();
    __syncthreads();  // the stage area becomes the merge buffer

    // Merge the teams' states: each writes its (m, l, O) rows (a warp its part of O; the warps
    // of a team share m and l), then threads combine.
    float* merge_o = reinterpret_cast<float*>(smem);
#pragma unroll
    for (int j = 0; j < kNTiles; ++j)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float* dst = merge_o + (team * kRows + row_of[r]) * head_dim + part * kWarpDim + j * 8 + 2 * (lane % 4);
        *reinterpret_cast<float2*>(dst) = make_float2(o[j][2 * r], o[j][2 * r + 1]);
      }
    if (part == 0 && lane % 4 == 0) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        m_s[team * kRows + row_of[r]] = m[r];
        l_s[team * kRows + row_of[r]] = l[r];
      }
    }
    __syncthreads();

    for (int pair = threadIdx.x; pair < rows * (head_dim / 8); pair += kThreads) {
      const int r = pair / (head_dim / 8), d = (pair % (head_dim / 8)) * 8;
      float row_m = -INFINITY;
#pragma unroll
      for (int t = 0; t < kTeams; ++t) row_m = fmaxf(row_m, m_s[t * kRows + r]);
      float row_l = 0.f, out[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
#pragma unroll
      for (int t = 0; t < kTeams; ++t) {
        const float tm = m_s[t * kRows + r];
        if (tm == -INFINITY) continue;  // this team saw no key
        const float scale = exp2f(tm - row_m);
        row_l += l_s[t * kRows + r] * scale;
        const float* src = merge_o + (t * kRows + r) * head_dim;
#pragma unroll
        for (int e = 0; e < 8; ++e) out[e] += src[merge_column(d + e)] * scale;
      }
      const float norm = row_l > 0.f ? p.v_scale / row_l : 0.f;
#pragma unroll
      for (int e = 0; e < 8; ++e) out[e] *= norm;
      const float lse = row_l > 0.f ? (row_m + log2f(row_l)) * kLn2 : -INFINITY;
      item.write<dtype_o, head_dim>(p, r, d, out, lse);
    }
    item.merge_if_last<dtype_o, head_dim, kThreads>(p, reinterpret_cast<int*>(smem));
  }
};

}  // namespace aotinfer
