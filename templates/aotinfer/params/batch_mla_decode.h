/* Parameters of the batch_mla_decode family (templates/batch_mla_decode.cuh): multi-head latent
 * attention (DeepSeek-V2/V3, Kimi K2) in its absorbed decode form. Each request caches, per
 * token, one latent vector ckv (AOTINFER_MLA_CKV_DIM = 512 wide) and one RoPE key kpe
 * (AOTINFER_MLA_KPE_DIM = 64), shared by every head. Every query head attends to that cache, which is
 * both K ([ckv, kpe], 576 wide) and V (ckv, 512 wide):
 *
 *   q_nope [tokens, num_heads, 512]  dtype, token row stride q_nope_stride_token, head stride 512
 *   q_pe   [tokens, num_heads, 64]   dtype, likewise q_pe_stride_token
 *   ckv    [pages, page_size, 512]   dtype_kv, page stride ckv_stride_page, token stride 512
 *   kpe    [pages, page_size, 64]    dtype_kv, page stride kpe_stride_page, token stride 64
 *   o      [tokens, num_heads, 512]  dtype (dense)
 *   lse    [tokens, num_heads]       float, natural log; may be NULL
 *
 * Every request has q_len query tokens (1..4: the token being decoded and the speculative ones
 * of multi-token prediction), its tokens i * q_len ... in q and o. Token t of a request with
 * kv_len keys sees keys 0 .. kv_len - q_len + t (causal among the new tokens, whose keys are the
 * last q_len of the cache). Scores s = (q_nope . ckv + q_pe . kpe) * sm_scale.
 *
 * dtype_kv is dtype (16-bit cache) or e4m3 (an fp8 cache, per-tensor scales): the cache's real
 * values are ckv_scale * ckv and kpe_scale * kpe, so s = (ckv_scale q_nope . ckv + kpe_scale
 * q_pe . kpe) * sm_scale and o = ckv_scale * sum p ckv. 16-bit caches ignore the scales.
 *
 * Pages: request i owns kv_indices[kv_indptr[i] .. kv_indptr[i + 1]), the last page holding
 * kv_last_page_len[i] tokens; a request with no page has no keys (o = 0, lse = -inf).
 *
 * Work (the decode planner, runtime/include/aotinfer/decode_plan.hpp): item x covers keys
 * [work_kv_begin[x], work_kv_end[x]) of request work_request[x] for all its rows (q_len *
 * num_heads, token-major: row r is token r / num_heads, head r % num_heads); grid
 * (padded work, row groups of tile[0] rows), whose CTA l = blockIdx.x + blockIdx.y * gridDim.x
 * takes item l / row_groups and row group l % row_groups (aotinfer/mla_work.cuh). Items x >=
 * *num_work exit at once. With
 * partial_o set (a split plan), every item writes its rows' float state to row x of
 * partial_o [padded work, q_len * num_heads, 512] and partial_lse, which merge_state's
 * merge_varlen entry then combines per request; otherwise items write o and lse.
 *
 * Launch info: tile[0] = rows per CTA, tile[1] = keys per pipeline stage, tile[2] = 512,
 * tile[3] = flags: AOTINFER_MLA_READS_CACHE_MAPS: where cache_maps_encoded is 1 the kernel copies
 *   the cache's full tiles through ckv_map and kpe_map (TMA) rather than row by row. The host
 *   encodes them for a 16-bit cache whose page_size is a multiple of 64 or one of 8, 16, 32:
 *   ckv as the 3-d tensor (512, page_size, pages) with strides 512 and ckv_stride_page elements,
 *   kpe as (64, page_size, pages) with kpe_stride_page, both in boxes of 64 x min(page_size, 64)
 *   x 1 with the 128-byte swizzle; their page count is 2^31 - 1 (pages come from kv_indices,
 *   which plan() checked against the pool).
 *   AOTINFER_MLA_SEESAW (in the launch info of the entry `decode_seesaw`): that entry serves the
 *   same params and plans with a schedule for full row groups (num_heads * q_len >= tile[0]),
 *   where the tensor cores, not the copies, set the pace; the host launches it for those. Where
 *   the flag is clear the entry is empty and `decode` serves every batch. */
#define AOTINFER_MLA_READS_CACHE_MAPS 1u
#define AOTINFER_MLA_SEESAW 2u
#ifndef AOTINFER_PARAMS_BATCH_MLA_DECODE_H
#define AOTINFER_PARAMS_BATCH_MLA_DECODE_H

#include <stdint.h>

#include "aotinfer/abi.h"

#define AOTINFER_MLA_CKV_DIM 512
#define AOTINFER_MLA_KPE_DIM 64
#define AOTINFER_MLA_MAX_Q_LEN 4

typedef struct aotinfer_batch_mla_decode_params {
  const void* q_nope;
  const void* q_pe;
  int64_t q_nope_stride_token; /* elements, a multiple of 8 */
  int64_t q_pe_stride_token;
  const void* ckv;
  const void* kpe;
  int64_t ckv_stride_page; /* elements, multiples of 8 */
  int64_t kpe_stride_page;
  const int32_t* kv_indices;
  void* o;
  float* lse;

  const int32_t* work_request;    /* [padded work] */
  const int32_t* work_kv_begin;   /* [padded work] request-relative key index */
  const int32_t* work_kv_end;     /* [padded work] */
  const int32_t* work_page_begin; /* [padded work] kv_indptr[request] */
  const int32_t* work_kv_len;     /* [padded work] the request's key count */
  const int32_t* num_work;        /* device scalar */
  float* partial_o;               /* [padded work, q_len * num_heads, 512] or NULL */
  float* partial_lse;             /* [padded work, q_len * num_heads] */

  int32_t page_size;
  int32_t num_heads;
  int32_t q_len;
  float sm_scale;
  float ckv_scale; /* fp8 caches: the dequantisation scales */
  float kpe_scale;
  int32_t cache_maps_encoded; /* 1: ckv_map and kpe_map hold the cache's maps (tile[3]) */
  aotinfer_tensor_map ckv_map;
  aotinfer_tensor_map kpe_map;
} aotinfer_batch_mla_decode_params;

#endif
