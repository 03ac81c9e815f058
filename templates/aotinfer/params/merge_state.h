/* Parameters of the merge_state family (templates/merge_state.cuh).
 *
 * Merges two attention states row by row. A row is one (token, head) pair: head_dim values v
 * and the log-sum-exp s (natural log) of the scores that produced them:
 *     s_out = log(exp(s_a) + exp(s_b))
 *     v_out = (exp(s_a - s_out) * v_a + exp(s_b - s_out) * v_b)
 * A row whose s_a and s_b are both -inf (two empty states) merges to v_out = 0, s_out = -inf.
 * Tensors are contiguous: v_* [rows, head_dim] of the variant's dtype, s_* [rows] float.
 * v_out may alias v_a or v_b (in-place merge); s_out may be NULL.
 *
 * Launch info: tile[0] = rows per CTA; grid.x = ceil(rows / tile[0]). */
#ifndef AOTINFER_PARAMS_MERGE_STATE_H
#define AOTINFER_PARAMS_MERGE_STATE_H

#include <stdint.h>

typedef struct aotinfer_merge_state_params {
  const void* v_a;
  const float* s_a;
  const void* v_b;
  const float* s_b;
  void* v_out;
  float* s_out;
  int64_t rows;
} aotinfer_merge_state_params;

#endif
