/* Parameters of the append_paged_kv family: writes new tokens' K and V into their pages.
 * Token j (0 <= j < nnz) of request batch_indices[j] at KV position positions[j] goes to page
 * indices[indptr[r] + positions[j] / page_size], slot positions[j] % page_size (paged_kv.h).
 *   k, v [nnz, num_kv_heads, head_dim] of the cache dtype, token stride k_stride_token /
 *   v_stride_token elements, head stride head_dim.
 * Launch info: tile[0] = (token, head) rows per CTA; grid.x = ceil(nnz * num_kv_heads / tile[0]). */
#ifndef AOTINFER_PARAMS_APPEND_PAGED_KV_H
#define AOTINFER_PARAMS_APPEND_PAGED_KV_H

#include <stdint.h>

#include "aotinfer/params/paged_kv.h"

typedef struct aotinfer_append_paged_kv_params {
  const void* k;
  const void* v;
  int64_t k_stride_token;
  int64_t v_stride_token;
  const int32_t* batch_indices;
  const int32_t* positions;
  aotinfer_paged_kv kv;
  int64_t nnz;
} aotinfer_append_paged_kv_params;

#endif
