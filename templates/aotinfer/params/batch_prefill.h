/* Parameters of the batch prefill families (templates/batch_prefill.cuh): every query token of a
 * request attends to the request's KV, paged (batch_prefill_paged, paged_kv.h) or ragged
 * (batch_prefill_ragged, ragged below). Requests are ragged along tokens:
 *
 *   q   [total_q, num_qo_heads, head_dim]     dtype_q, request i owns rows qo_indptr[i] .. [i+1];
 *                                             token t at q + t * q_stride_token (a slice of a fused
 *                                             qkv tensor; num_qo_heads * head_dim when dense)
 *   o   [total_q, num_qo_heads, head_dim_vo]  dtype_o
 *   lse [total_q, num_qo_heads]               float, natural log; may be NULL
 * K rows are head_dim wide and V rows head_dim_vo wide (the variant's axes; equal but for MLA
 * models' prefill, head_dim 192 and head_dim_vo 128). Where they differ, V has its own strides
 * (v_strides below); where they are equal, V shares K's (the paged or ragged strides).
 * Query head h reads KV head h / group, group = num_qo_heads / num_kv_heads (GQA, run time).
 *
 * Request i has qo_len query tokens and kv_len keys; query token t sits at position
 * kv_len - qo_len + t (its queries are the last tokens of the KV). Scores:
 *   s = (q . k) * sm_scale, then with a soft cap (soft_cap_out > 0) s = cap * tanh(s / cap);
 *   mask_mode (run time): AOTINFER_MASK_NONE keeps every key; AOTINFER_MASK_CAUSAL keeps key j
 *   when j <= kv_len - qo_len + t; AOTINFER_MASK_CUSTOM keeps key j when bit t * kv_len + j of
 *   the request's custom mask is set (below);
 *   window: key j is kept when j >= kv_len - qo_len + t - window_left (window_left
 *   AOTINFER_NO_WINDOW: every key);
 *   alibi_scale != 0 (run time, after the cap): s += slope(h) * (j - (kv_len - qo_len + t)),
 *   slope(h) the ALiBi slope of query head h among num_qo_heads (attention.cuh's alibi_slope, as
 *   decode's);
 *   rope_llama: q and k are rotated at their positions (non-interleaved "rotate half", frequency
 *   rope_rcp_scale * rope_rcp_theta^(2i/d)) in fp32 and rounded to the operand type.
 * The operand type of both products is dtype_kv (q is rounded to it when the types differ), f16
 * for fp8 K/V (e4m3, e5m2), which are widened to it exactly; accumulation and softmax are fp32.
 * K and V are dequantised as k * k_scale and v * v_scale, k_scale being part of sm_scale. With sinks given, each row's softmax also holds the logit
 * sinks[h] of its query head (units of s, no soft cap) with a zero value row: it adds
 * e^sinks[h] to the denominator (and to e^lse); of a split tile, the chunk at key 0 holds it.
 * A row that keeps no key gets o = 0, lse = -inf (with sinks, sinks[h]): under a causal mask,
 * the first qo_len - kv_len queries of a request with more queries than keys.
 *
 * GQA rows are packed: the CTA for KV head kh works on "packed rows" R = t * group + g of a
 * request (query token t, query head kh * group + g), so the group shares every K/V tile.
 *
 * The work partition comes from the planner (runtime/include/aotinfer/prefill_plan.hpp): CTA
 * (x, kh) (or a persistent CTA, see tile[3]) handles work item x = (request, packed rows [q_row, q_row + tile[0]), keys
 * [kv_begin, kv_end)). With work_state[x] = -1 it writes o/lse; otherwise the tile's KV is split
 * into work_state_stride[x] chunks and the item writes float states: row r of KV head kh goes to
 * state work_state[x] + (kh * rows + r) * work_state_stride[x] (rows = valid rows of the tile) of
 * partial_o [states, head_dim_vo] / partial_lse [states], which merge_state's merge_varlen combines.
 * When *num_merge_rows is 0 no tile is split: every item covers its request's keys (cut by the
 * mask) and writes o/lse, and work_kv_begin, work_kv_end, work_state and work_state_stride are
 * not read (the planner leaves them unwritten).
 * Items x >= *num_work exit at once (CUDA-graph padding).
 *
 * Launch info: tile[0] = packed query rows per CTA, tile[1] = KV tokens per pipeline stage,
 * tile[2] = head_dim (of q and K; head_dim_vo is the variant's), tile[3] = flags:
 *   AOTINFER_PREFILL_PERSISTENT clear: grid (padded work, num_kv_heads) as above; set:
 *     persistent, grid.x = at most one wave of CTAs (SMs x resident CTAs per SM), which take the
 *     (item, KV head) pairs w = kv_head * *num_work + item below *num_work * num_kv_heads: first
 *     w = blockIdx.x, then the next untaken one from *pair_counter (which the launch leaves at 0
 *     again);
 *   AOTINFER_PREFILL_READS_TENSOR_MAPS: the kernel reads q (and ragged k and v) through the
 *     tensor maps of the params when tensor_maps_encoded says the host encoded them, and copies
 *     their rows itself when not. Paged kernels read q_map only. */
#define AOTINFER_PREFILL_PERSISTENT 1u
#define AOTINFER_PREFILL_READS_TENSOR_MAPS 2u
#ifndef AOTINFER_PARAMS_BATCH_PREFILL_H
#define AOTINFER_PARAMS_BATCH_PREFILL_H

#include <stdint.h>

#include "aotinfer/abi.h"
#include "aotinfer/params/paged_kv.h"

/* window_left of a prefill without a sliding window: longer than any request (2^30 keys), and
 * far enough from INT32_MIN that kv_len - qo_len + t - window_left cannot wrap. */
#define AOTINFER_NO_WINDOW (1 << 30)

/* mask_mode values. */
#define AOTINFER_MASK_NONE 0
#define AOTINFER_MASK_CAUSAL 1
#define AOTINFER_MASK_CUSTOM 2

/* Ragged KV: request i owns tokens indptr[i] .. indptr[i+1] of k and v, token t of KV head h at
 * element t * stride_token + h * stride_head (its head_dim values contiguous). */
typedef struct aotinfer_ragged_kv {
  const void* k;
  const void* v;
  const int32_t* indptr; /* [batch + 1] */
  int64_t stride_token;  /* elements */
  int64_t stride_head;
  int32_t num_kv_heads;
} aotinfer_ragged_kv;

typedef struct aotinfer_batch_prefill_params {
  const void* q;
  int64_t q_stride_token;    /* elements between q's tokens, a multiple of 8 */
  const int32_t* qo_indptr;  /* [batch + 1] */
  aotinfer_paged_kv paged;   /* batch_prefill_paged reads this */
  aotinfer_ragged_kv ragged; /* batch_prefill_ragged reads this */
  /* V's element strides: between pages (paged), tokens and heads, as the paged or ragged strides
   * are for K. Every variant finds V's base (its KV head, a ragged request's first token) by them;
   * only variants with head_dim_vo != head_dim step V's keys by them too (the others step V with
   * K's strides). The runtime always fills them, with K's strides when the widths are equal. */
  int64_t v_stride_page;
  int64_t v_stride_token;
  int64_t v_stride_head;
  void* o;
  float* lse;
  const float* sinks; /* [num_qo_heads] attention-sink logits, or NULL */

  const int32_t* work_request;      /* [padded work] */
  const int32_t* work_q_row;        /* [padded work] first packed row of the tile */
  const int32_t* work_kv_begin;     /* [padded work] request-relative key index; split plans only */
  const int32_t* work_kv_end;       /* [padded work] split plans only */
  const int32_t* work_state;        /* [padded work] -1: write o directly; split plans only */
  const int32_t* work_state_stride; /* [padded work] split plans only */
  const int32_t* num_work;          /* device scalar */
  const int32_t* num_merge_rows;    /* device scalar: rows merge_varlen combines; 0: no tile is split */
  int32_t* pair_counter;            /* device scalar, 0 between launches: persistent CTAs take pairs from it */
  float* partial_o;
  float* partial_lse;

  /* AOTINFER_MASK_CUSTOM: request i's [qo_len, kv_len] mask, row-major bits packed little-endian
   * (bit b is bit b % 8 of byte b / 8, as numpy.packbits(bitorder="little") and FlashInfer's
   * packed_custom_mask), starts at byte mask_indptr[i] of custom_mask. custom_mask is 4-byte
   * aligned and read in aligned 4-byte words, so its buffer is readable up to the next multiple
   * of 4 bytes past its last mask. Not read in the other modes. */
  const uint8_t* custom_mask;
  const int32_t* mask_indptr; /* [batch + 1] */

  int32_t num_qo_heads;
  int32_t mask_mode;     /* AOTINFER_MASK_* */
  float alibi_scale;     /* ALiBi biases (above): 1 / sm_scale (the kernels add them to raw products); 0: none */
  int32_t window_left;   /* >= 0; no window is one longer than any request (the runtime passes
                          * AOTINFER_NO_WINDOW), so the kernels need no branch for it */
  float sm_scale;
  float soft_cap_in;     /* sm_scale / logits_soft_cap; 0: no cap */
  float soft_cap_out;    /* logits_soft_cap / sm_scale; 0: no cap */
  float rope_rcp_scale;
  float rope_rcp_theta;
  float v_scale;         /* o is scaled by it (fp8 V's dequantisation; 1 for none); k_scale is
                          * folded into sm_scale by the runtime */

  /* TMA maps (launch info flags above), all three-dimensional and 128-byte swizzled, boxes of 64
   * head_dim columns (a head_dim 96 row's second box reads 32 columns past the tensor: zeros):
   *   q_map: q as (head_dim, num_qo_heads, total_q), box 64 x group x (tile[0] / group), so that
   *     a box is one tile's packed rows in order;
   *   k_map, v_map: ragged k and v as (head_dim or head_dim_vo, num_kv_heads, indptr[batch]), box 64 x 1 x tile[1]
 *     (not encoded for page pools).
   * A tile's box may reach into the next request's rows, which the kernel masks or discards;
   * rows past the batch land as zeros. The runtime encodes them outside CUDA-graph mode (later
   * plans move the ends) where group divides tile[0]. */
  int32_t tensor_maps_encoded;
  aotinfer_tensor_map q_map;
  aotinfer_tensor_map k_map;
  aotinfer_tensor_map v_map;
} aotinfer_batch_prefill_params;

#endif
