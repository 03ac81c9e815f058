/* Parameters of the batch_decode family (templates/batch_decode.cuh): the q_len newest tokens of
 * each request (1: plain decode; more: speculative verification) attend to the request's paged
 * KV cache (paged_kv.h), which already holds their keys.
 *
 *   q   [batch * q_len, num_qo_heads, head_dim]  dtype_q, token j at q + j * q_stride_token (a slice
 *                                                of a fused qkv tensor; num_qo_heads * head_dim when dense)
 *   o   [batch * q_len, num_qo_heads, head_dim]  dtype_o
 *   lse [batch * q_len, num_qo_heads]            float, natural log; may be NULL
 * Request i's tokens are rows i * q_len ... i * q_len + q_len - 1. Query head h reads KV head
 * h / (num_qo_heads / num_kv_heads) (GQA; any group size 1..64). With q_causal, token t of a
 * request of kv_len keys sees keys 0 .. kv_len - q_len + t (its own and those before it);
 * without, every key. With custom_mask set (then q_causal is 0), token t sees key j when bit
 * t * kv_len + j of its request's mask is set: a speculative tree, for one. A CTA's query rows are the (token, head) pairs of one KV head, token-major,
 * so the tokens of a request share each KV byte the way its GQA heads do.
 *
 * Scores: s = (q . k) * sm_scale, then, when logits_soft_cap > 0, s = logits_soft_cap *
 * tanh(s / cap), then (pos_encoding alibi) s += slope(h) * (kv_pos - q_pos). A sliding window is
 * the plan's: it gives each request's items only the keys the window keeps (runtime
 * BatchDecodeConfig::window_left, q_len 1 only), so the kernels need no mask for it. rope_llama rotates q (at q_pos) and k (at kv_pos) by the
 * non-interleaved ("rotate half") RoPE with frequencies rope_rcp_scale * rope_rcp_theta^(2i/d).
 * q_pos = q_positions[token row] when given, else kv_len - q_len + t. fp8 KV is dequantised as k * k_scale,
 * v * v_scale (1.0 for 16-bit KV). With sinks given, each row's softmax also holds the logit
 * sinks[h] (units of s, no soft cap) with a zero value row: it adds e^sinks[h] to the
 * denominator (and to e^lse). A request with kv_len 0 gets o = 0, lse = -inf (with sinks, sinks[h]).
 *
 * The work partition comes from the planner (runtime/include/aotinfer/decode_plan.hpp): each
 * work item x = (request, [kv_begin, kv_end)) has rows = num_kv_heads * row_groups CTAs, CTA
 * row y of them for KV head y / row_groups and query rows (y % row_groups) * tile[0] ... of its
 * q_len * group (token, head) rows. With AOTINFER_DECODE_FLAT_GRID (tile[3]) the grid is one-dimensional and CTA b is row
 * y = b % rows of item x = b / rows: the CTAs of an item's KV heads run together, and read each
 * token's heads out of the same DRAM rows (docs/PERF.md, v6.3); without it CTA (x, y). The plan
 * also gives each item its request's first page entry and KV length, so a CTA's first loads
 * depend on nothing but x. Items x >= *num_work exit at once (CUDA-graph padding). With
 * partial_o set (a split plan), an item of a request that has more than one writes its state to
 * partial_o/partial_lse row x and counts itself done in merge_counters; the CTA that completes a
 * request's count merges the request's states into o/lse and sets its counter back to 0, so one
 * launch does the whole decode and the counters are ready for the next run. Without partial_o,
 * or for a request of one item, items write o/lse.
 *
 * Launch info: tile[0] = query rows per CTA, tile[1] = KV tokens per pipeline stage,
 * tile[2] = head_dim, tile[3] = flags | resident CTAs per SM the kernel needs to stream at its
 * full rate (AOTINFER_DECODE_STREAMING_CTAS bits; 0: as many as fit). The planner sizes a wave of
 * split work by it: fewer, longer items where one CTA per SM already streams at full rate mean
 * fewer partial states to merge. */
#ifndef AOTINFER_PARAMS_BATCH_DECODE_H
#define AOTINFER_PARAMS_BATCH_DECODE_H

#include <stdint.h>

#include "aotinfer/params/paged_kv.h"

#define AOTINFER_DECODE_STREAMING_CTAS 0xffffu
#define AOTINFER_DECODE_FLAT_GRID 0x10000u

typedef struct aotinfer_batch_decode_params {
  const void* q;
  int64_t q_stride_token; /* elements between requests' q rows, a multiple of 8 */
  aotinfer_paged_kv kv;
  void* o;
  float* lse;
  const int32_t* q_positions; /* [batch * q_len] or NULL */
  const float* sinks;         /* [num_qo_heads] attention-sink logits, or NULL */
  /* NULL, or each request's [q_len, kv_len] mask as row-major bits packed little-endian
   * (FlashInfer's packed_custom_mask) from byte mask_indptr[i] on: the layout, alignment and
   * padding of aotinfer/params/batch_prefill.h's custom_mask. */
  const uint8_t* custom_mask;
  const int32_t* mask_indptr; /* [batch + 1] */

  const int32_t* work_request;  /* [padded work] */
  const int32_t* work_kv_begin; /* [padded work] request-relative token index */
  const int32_t* work_kv_end;   /* [padded work] */
  const int32_t* work_page_begin; /* [padded work] kv.indptr[request]: the kernels read no kv.indptr */
  const int32_t* work_kv_len;     /* [padded work] the request's KV length: nor kv.last_page_len */
  const int32_t* num_work;      /* device scalar */
  float* partial_o;             /* [padded work, q_len * num_qo_heads, head_dim] or NULL */
  float* partial_lse;           /* [padded work, q_len * num_qo_heads] */
  const int32_t* merge_indptr;  /* [batch + 1] split plans: request i's items are [indptr[i], indptr[i + 1]) */
  int32_t* merge_counters;      /* [batch, gridDim.y] split plans: finished items, 0 between runs */

  int32_t num_qo_heads;
  int32_t q_len;    /* query tokens per request, >= 1 */
  int32_t q_causal; /* bool: token t sees keys up to its own; else every key (q_len 1: the same) */
  float sm_scale;
  float logits_soft_cap; /* > 0: scores are soft-capped; otherwise not */
  float rope_rcp_scale;
  float rope_rcp_theta;
  float k_scale;
  float v_scale;
} aotinfer_batch_decode_params;

#endif
