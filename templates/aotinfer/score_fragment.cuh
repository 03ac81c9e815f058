// Online softmax on the tensor-core score fragment of one warp's 16 query rows against a tile of
// 8 * kTiles keys. Both prefill kernels keep S in this layout (the mma.sync m16n8 accumulator,
// which wgmma's m64 accumulator repeats per warp): s[j][e] is row lane / 4 + 8 (e / 2), key
// 8 j + 2 (lane % 4) + e % 2 of the tile, so a row lives in the 4 lanes of a quad.
#pragma once
#include <limits.h>
#include <math.h>

#include "aotinfer/attention.cuh"
#include "aotinfer/mma.cuh"
#include "aotinfer/params/batch_prefill.h"

namespace aotinfer {

// Raw products s to capped products, out * tanh(s * in) with in = sm_scale / cap and out =
// cap / sm_scale (the params hold both, so the key loops keep no quotient in a register):
// scaled by sm_scale they are the capped scores, so the softmax takes the same scale
// (sm_scale * log2 e) with or without a cap. Before the mask, since a masked score must stay -inf.
template <int kTiles>
__device__ __forceinline__ void soft_cap_scores(float (&s)[kTiles][4], float in, float out) {
#pragma unroll
  for (int j = 0; j < kTiles; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) s[j][e] = out * tanhf(s[j][e] * in);
}

// ALiBi (params alibi_scale): a score gains slope(h) * (key - q_pos). The fragment holds raw products,
// which the softmax's scale multiplies by sm_scale, so per row half `slope` is slope(h) / sm_scale
// and `q_pos` the row's position; the tile starts at key `start`. After the soft cap, as decode's
// (and after the masks, whose -inf it keeps).
template <int kTiles>
__device__ __forceinline__ void alibi_scores(float (&s)[kTiles][4], int start, const float (&slope)[2],
                                             const int (&q_pos)[2]) {
  const int lane = threadIdx.x % 32;
  const float base[2] = {slope[0] * float(start + 2 * (lane % 4) - q_pos[0]),
                         slope[1] * float(start + 2 * (lane % 4) - q_pos[1])};
#pragma unroll
  for (int j = 0; j < kTiles; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) s[j][e] += fmaf(slope[e / 2], float(8 * j + e % 2), base[e / 2]);
}

// The ALiBi terms of packed row `packed` (token * group + head in the group) of KV head
// `kv_head`: alibi_scores' slope and q_pos for one row half. Worked out per tile, so with few
// instructions: the slope's power of two by the special-function unit (alibi_slope's exp2f adds
// range fix-ups the exponents here never need) and 1 / sm_scale from the params.
__device__ __forceinline__ void alibi_row(const aotinfer_batch_prefill_params& p, int kv_head, int group, int token,
                                          int packed, int q_offset, float& slope, int& q_pos) {
  const int head = kv_head * group + packed - token * group, n = 1 << (31 - __clz(p.num_qo_heads));
  const float exponent = head < n ? -8.f * float(head + 1) : -4.f * float(2 * (head - n) + 1);
  slope = fast_exp2(__fdividef(exponent, float(n))) * p.alibi_scale;
  q_pos = q_offset + token;
}

// -inf for the keys at or past `end` and, per row half h, outside [key_lo[h], key_hi[h]]; the tile
// starts at key `start`. Callers branch around it when no row of theirs sees an edge: interleaved
// with the softmax max, the compiler turned it into selects that every tile paid for.
template <int kTiles>
__device__ __forceinline__ void mask_scores(float (&s)[kTiles][4], int start, int end, const int (&key_lo)[2],
                                            const int (&key_hi)[2]) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int j = 0; j < kTiles; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int pos = start + 8 * j + 2 * (lane % 4) + e % 2, h = e / 2;
      if (pos >= end || pos > key_hi[h] || pos < key_lo[h]) s[j][e] = -INFINITY;
    }
}

// A custom mask's bits (params/batch_prefill.h) for a tile of 8 * kTiles keys from `start`: row
// half h's bit of key 0 is bit row_bit[h] of `mask`, and its keys end before `end`, past whose
// bit nothing is read. Each row's run of bits is a few aligned 32-bit words, loaded by load()
// (early, where the kernel can wait for them elsewhere) or staged in shared memory with the
// tile's keys (stage_word, load_staged), and funnel-shifted into place by apply();
// a thread's keys 8 j + 2 (lane % 4) + e % 2 never straddle a word.
template <int kTiles>
struct MaskWords {
  static constexpr int kWords = (8 * kTiles + 31) / 32;
  uint32_t raw[2][kWords + 1];
  uint32_t shift[2];

  __device__ __forceinline__ void load(const uint8_t* mask, int start, int end, const int64_t (&row_bit)[2]) {
    const uint32_t* words = reinterpret_cast<const uint32_t*>(mask);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t first = row_bit[h] + start, last_word = (row_bit[h] + end - 1) >> 5;
      shift[h] = uint32_t(first & 31);
#pragma unroll
      for (int i = 0; i <= kWords; ++i) raw[h][i] = __ldg(words + min((first >> 5) + i, last_word));
    }
  }

  // Word i of a tile's bits from the run of words that holds them, `shift` bits into its first.
  __device__ __forceinline__ static uint32_t tile_word(const uint32_t* run, int i, uint32_t shift) {
    return __funnelshift_r(run[i], run[i + 1], shift);
  }

  // The same words staged with a tile's keys instead: stage_word copies word i of the run of
  // row bit `bit` (cp.async, 4 bytes; past `end` the last word again), and load_staged takes row
  // half h's copied run from words[h] (bits row_bit[h] on, as load's).
  __device__ __forceinline__ static const uint32_t* run_word(const uint8_t* mask, int i, int start, int end,
                                                             int64_t bit) {
    const int64_t last_word = (bit + end - 1) >> 5;  // end > 0: a stage holds keys
    return reinterpret_cast<const uint32_t*>(mask) + min(((bit + start) >> 5) + i, last_word);
  }
  __device__ __forceinline__ static void stage_word(const uint8_t* mask, uint32_t* dst, int i, int start, int end,
                                                    int64_t bit) {
    cp_async_4(dst, run_word(mask, i, start, end, bit));
  }
  // A tile's bits of row bit `bit` into registers, key start + j at bit j % 32 of word j / 32,
  // and whether any is set (tile_any): a row's test whether it sees any key of the tile.
  __device__ __forceinline__ static void read_tile(const uint8_t* mask, uint32_t (&bits)[kWords], int start, int end,
                                                   int64_t bit) {
    uint32_t run[kWords + 1];
#pragma unroll
    for (int i = 0; i <= kWords; ++i) run[i] = __ldg(run_word(mask, i, start, end, bit));
    const uint32_t shift = uint32_t((bit + start) & 31);
#pragma unroll
    for (int i = 0; i < kWords; ++i) bits[i] = tile_word(run, i, shift);
  }
  __device__ __forceinline__ static bool tile_any(const uint32_t (&bits)[kWords]) {
    uint32_t seen = 0;
#pragma unroll
    for (int i = 0; i < kWords; ++i) seen |= bits[i];
    return seen != 0;
  }
  // Whether a row sees every key of the tile. Past the request's last key the words repeat, so
  // a clear bit there may count: the tile then only counts as cut (its scores go through the
  // mask, which is exact either way).
  __device__ __forceinline__ static bool tile_all(const uint32_t (&bits)[kWords]) {
    uint32_t all = ~0u;
#pragma unroll
    for (int i = 0; i < kWords; ++i) all &= bits[i];
    return all == ~0u;
  }
  __device__ __forceinline__ void load_staged(const uint32_t* const (&words)[2], int start, const int64_t (&row_bit)[2]) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      shift[h] = uint32_t((row_bit[h] + start) & 31);
#pragma unroll
      for (int i = 0; i <= kWords; ++i) raw[h][i] = words[h][i];
    }
  }
  // Staged runs kAlignedWords words apart, 16-byte aligned, read as whole 16-byte vectors; the
  // shifts worked out by the caller (a tile of whole words keeps a row's shift over its tiles).
  static constexpr int kAlignedWords = (kWords / 4 + 1) * 4;
  __device__ __forceinline__ void load_aligned(const uint32_t* const (&words)[2], const uint32_t (&row_shift)[2]) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      shift[h] = row_shift[h];
#pragma unroll
      for (int v = 0; v < kAlignedWords / 4; ++v) {
        const uint4 x = reinterpret_cast<const uint4*>(words[h])[v];
        const uint32_t w[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if (4 * v + e <= kWords) raw[h][4 * v + e] = w[e];
      }
    }
  }

  // Whether either row half sees any key of the tile. Past the request's last key the words
  // repeat, so a bit there may count too: the tile then only counts as seen.
  __device__ __forceinline__ bool any() const {
    uint32_t seen = 0;
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int i = 0; i < kWords; ++i) seen |= tile_word(raw[h], i, shift[h]);
    return seen != 0;
  }

  // -inf where a bit is clear. A row whose tile bits are all set (a tile it sees whole) skips
  // the per-element work. The words are shifted by the thread's key offset 2 (lane % 4) first,
  // so that each element tests a bit at a constant position.
  __device__ __forceinline__ void apply(float (&s)[kTiles][4]) const {
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      uint32_t bits[kWords], all = ~0u;
#pragma unroll
      for (int i = 0; i < kWords; ++i) all &= bits[i] = tile_word(raw[h], i, shift[h]);
      if (all == ~0u) continue;
#pragma unroll
      for (int i = 0; i < kWords; ++i) bits[i] >>= 2 * (lane % 4);
#pragma unroll
      for (int j = 0; j < kTiles; ++j)
#pragma unroll
        for (int e = 2 * h; e < 2 * h + 2; ++e)
          if (!((bits[8 * j / 32] >> (8 * j % 32 + e % 2)) & 1u)) s[j][e] = -INFINITY;
    }
  }
};

template <int kTiles>
__device__ __forceinline__ void custom_mask_scores(float (&s)[kTiles][4], const uint8_t* mask, int start, int end,
                                                   const int64_t (&row_bit)[2]) {
  MaskWords<kTiles> words;
  words.load(mask, start, end, row_bit);
  words.apply(s);
}

// One online-softmax step in log2 units with one FFMA per score: p = exp2(x * scale - m * scale),
// x the raw product or (soft cap) the capped score already in log2 units. Turns s into the
// tile's weights, updates the running max and the per-thread partial row sums (the quad sums
// them in the epilogue), and gives the factor alpha by which earlier output rows must shrink.
//
// kLazyMax: the running max moves only when the tile's exceeds it by more than 2^kLazyMaxLog2
// in weight (weights up to 256 are exact enough in 16 bits and far from overflow in the fp32
// sums), so after the first tiles alpha is usually exactly 1 and the caller can skip the rescale. The
// result is the same softmax: m is any reference both the weights and the sums share.
//
// `scale` is per row half: a kernel whose score product sees q scaled per row (the Hopper
// prefill's fp8 products) folds the inverse into it.
constexpr float kLazyMaxLog2 = 8.f;
template <bool kLazyMax = false, int kTiles>
__device__ __forceinline__ void softmax_step(float (&s)[kTiles][4], float (&row_m)[2], float (&row_l)[2],
                                             float (&alpha)[2], const float (&row_scale)[2]) {
  float tile_max[2] = {fmaxf(s[0][0], s[0][1]), fmaxf(s[0][2], s[0][3])};
#pragma unroll
  for (int j = 1; j < kTiles; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) tile_max[e / 2] = fmaxf(tile_max[e / 2], s[j][e]);
  float m_scaled[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    tile_max[h] = fmaxf(tile_max[h], __shfl_xor_sync(0xffffffffu, tile_max[h], 1));
    tile_max[h] = fmaxf(tile_max[h], __shfl_xor_sync(0xffffffffu, tile_max[h], 2));
    // (-inf - -inf is NaN: a row that has seen no key keeps m = -inf either way.)
    const float scale = row_scale[h];
    const bool moves = !kLazyMax || (tile_max[h] - row_m[h]) * scale > kLazyMaxLog2;
    const float new_m = moves ? fmaxf(row_m[h], tile_max[h]) : row_m[h];
    alpha[h] = !moves || new_m == -INFINITY ? 1.f : fast_exp2((row_m[h] - new_m) * scale);
    row_m[h] = new_m;
    m_scaled[h] = new_m == -INFINITY ? 0.f : new_m * scale;  // masked scores stay -inf: p = 0
  }
#pragma unroll
  for (int j = 0; j < kTiles; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) s[j][e] = fast_exp2(fmaf(s[j][e], row_scale[e / 2], -m_scaled[e / 2]));
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float sum = 0.f;
#pragma unroll
    for (int j = 0; j < kTiles; ++j) sum += s[j][2 * h] + s[j][2 * h + 1];
    row_l[h] = row_l[h] * alpha[h] + sum;
  }
}

// The same with one scale for both row halves.
template <bool kLazyMax = false, int kTiles>
__device__ __forceinline__ void softmax_step(float (&s)[kTiles][4], float (&row_m)[2], float (&row_l)[2],
                                             float (&alpha)[2], float scale) {
  const float both[2] = {scale, scale};
  softmax_step<kLazyMax>(s, row_m, row_l, alpha, both);
}

// Output rows o (kDimTiles n8 tiles of head dims) times alpha per row half.
template <int kDimTiles>
__device__ __forceinline__ void rescale_rows(float (&o)[kDimTiles][4], const float (&alpha)[2]) {
#pragma unroll
  for (int j = 0; j < kDimTiles; ++j) {
    o[j][0] *= alpha[0];
    o[j][1] *= alpha[0];
    o[j][2] *= alpha[1];
    o[j][3] *= alpha[1];
  }
}

// softmax_step, then the output rescaled at once (kernels whose O product is not in flight).
template <int kTiles, int kDimTiles>
__device__ __forceinline__ void online_softmax(float (&s)[kTiles][4], float (&row_m)[2], float (&row_l)[2],
                                               float (&o)[kDimTiles][4], float scale) {
  float alpha[2];
  softmax_step(s, row_m, row_l, alpha, scale);
  rescale_rows(o, alpha);
}

// Weights of keys 16 jj .. 16 jj + 15 as the A fragment of a 16x16 product: two n8 tiles of S are
// exactly the m16n8k16 A layout (mma.sync, and wgmma with A in registers).
template <typename T, int kTiles>
__device__ __forceinline__ void weights_fragment(uint32_t (&a)[4], const float (&s)[kTiles][4], int jj) {
  a[0] = pack2<T>(s[2 * jj][0], s[2 * jj][1]);
  a[1] = pack2<T>(s[2 * jj][2], s[2 * jj][3]);
  a[2] = pack2<T>(s[2 * jj + 1][0], s[2 * jj + 1][1]);
  a[3] = pack2<T>(s[2 * jj + 1][2], s[2 * jj + 1][3]);
}

// Normalisation of a finished row half: 1 / l (0 for a row that kept no key) and the natural-log
// lse (-inf then). Sums the quad's partial row sums.
struct RowResult {
  float inv, lse;
  RowResult() = default;
  __device__ __forceinline__ RowResult(float row_m, float partial_l, float scale) {
    float l = partial_l;
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    *this = of_sum(row_m, l, scale);
  }
  // From the row's whole sum l.
  static __device__ __forceinline__ RowResult of_sum(float row_m, float l, float scale) {
    RowResult r;
    r.inv = l > 0.f ? 1.f / l : 0.f;
    r.lse = l > 0.f ? (row_m * scale + log2f(l)) * kLn2 : -INFINITY;
    return r;
  }
  // The row's attention sink (attention.cuh), folded into inv and lse.
  __device__ __forceinline__ void add_sink(float sink) { inv *= fold_sink(lse, sink); }
};

}  // namespace aotinfer
