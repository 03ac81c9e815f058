/* A paged KV cache in the CSR view (as FlashInfer's): request i owns pages
 * indices[indptr[i] .. indptr[i+1]), all full but the last, which holds last_page_len[i] tokens,
 * so its KV length is (indptr[i+1] - indptr[i] - 1) * page_size + last_page_len[i] (0 when it
 * has no pages). K and V pools share one layout, given by element strides:
 *   NHD [pages, page_size, heads, head_dim]: stride_token = heads*head_dim, stride_head = head_dim
 *   HND [pages, heads, page_size, head_dim]: stride_head = page_size*head_dim, stride_token = head_dim
 * and stride_page = page_size*heads*head_dim for both. A token's head_dim values are contiguous. */
#ifndef AOTINFER_PARAMS_PAGED_KV_H
#define AOTINFER_PARAMS_PAGED_KV_H

#include <stdint.h>

typedef struct aotinfer_paged_kv {
  void* k_pages;
  void* v_pages;
  const int32_t* indptr;        /* [batch + 1] */
  const int32_t* indices;       /* [indptr[batch]] physical page ids */
  const int32_t* last_page_len; /* [batch] */
  int64_t stride_page;          /* elements */
  int64_t stride_token;
  int64_t stride_head;
  int32_t page_size;
  int32_t num_kv_heads;
} aotinfer_paged_kv;

#endif
