/* Parameters of merge_state's merge_varlen entry: merges a variable number of float states
 * into each output row (split-KV reduction). Output i, head h merges states
 * v[indptr[i] .. indptr[i+1]), h (lse s likewise), with the merge rule of merge_state.h; an
 * output with no states gets v = 0, s = -inf.
 *   v [num_states, num_heads, head_dim] float     s [num_states, num_heads] float
 *   v_out [rows, num_heads, head_dim] (the variant's dtype)   s_out [rows, num_heads] may be NULL
 * Output i goes to row output_row[i] of v_out and s_out, or row i when output_row is NULL
 * (prefill merges only the rows whose KV was split, scattered over o).
 * Outputs i >= *num_outputs_device are skipped when num_outputs_device is set (CUDA graphs).
 * Launch info: tile[0] = (output, head) rows per CTA; grid.x = ceil(num_outputs * num_heads /
 * tile[0]). */
#ifndef AOTINFER_PARAMS_MERGE_VARLEN_H
#define AOTINFER_PARAMS_MERGE_VARLEN_H

#include <stdint.h>

typedef struct aotinfer_merge_varlen_params {
  const float* v;
  const float* s;
  const int32_t* indptr;
  const int32_t* num_outputs_device;
  const int32_t* output_row; /* [num_outputs] or NULL */
  void* v_out;
  float* s_out;
  int32_t num_outputs;
  int32_t num_heads;
} aotinfer_merge_varlen_params;

#endif
