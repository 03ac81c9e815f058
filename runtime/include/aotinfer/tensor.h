/* Tensors as the checked entry points see them: a pointer plus what it points to. A caller that
 * describes its tensors (the Python layer does this for every call) gets each one checked before
 * anything is launched: device, dtype, shape against the config and the plan, strides,
 * alignment. The raw-pointer entry points check only what they can know (nulls, alignment). */
#ifndef AOTINFER_TENSOR_H
#define AOTINFER_TENSOR_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Element types, numbered as aotinfer::DType. */
typedef enum aotinfer_dtype {
  AOTINFER_F16 = 0,
  AOTINFER_BF16 = 1,
  AOTINFER_E4M3 = 2,
  AOTINFER_E5M2 = 3,
  AOTINFER_F32 = 4,
  AOTINFER_I32 = 5,
  AOTINFER_U8 = 6,
  AOTINFER_DTYPE_OTHER = 255 /* anything else: always refused, named by dtype_name */
} aotinfer_dtype;

/* Where the memory lives, numbered as DLPack's DLDeviceType. */
typedef enum aotinfer_device_type {
  AOTINFER_DEVICE_CPU = 1,
  AOTINFER_DEVICE_CUDA = 2,
  AOTINFER_DEVICE_CUDA_HOST = 3,
  AOTINFER_DEVICE_CUDA_MANAGED = 13
} aotinfer_device_type;

#define AOTINFER_TENSOR_MAX_DIMS 4

typedef struct aotinfer_tensor {
  void* data;                                 /* NULL: the argument is absent */
  int64_t shape[AOTINFER_TENSOR_MAX_DIMS];
  int64_t strides[AOTINFER_TENSOR_MAX_DIMS];  /* in elements */
  int32_t ndim;                               /* 0 .. AOTINFER_TENSOR_MAX_DIMS */
  int32_t dtype;                              /* aotinfer_dtype */
  int32_t device_type;                        /* aotinfer_device_type */
  int32_t device_id;
  char dtype_name[16];                        /* the caller's name for an OTHER dtype, for messages */
} aotinfer_tensor;

/* The tensors of one batch_decode run (shapes in aotinfer/params/batch_decode.h). k_pages and
 * v_pages are the pools in the config's layout; their page stride may exceed one page (K and V
 * interleaved in one [pages, 2, ...] tensor) but must be equal. lse, q_positions and sinks
 * (float32 [num_qo_heads], attention-sink logits) may be absent. With the config's custom_mask,
 * custom_mask and mask_indptr are required (as batch_prefill's below), and absent otherwise. */
typedef struct aotinfer_batch_decode_tensors {
  aotinfer_tensor q, k_pages, v_pages, kv_indptr, kv_indices, kv_last_page_len, o, lse, q_positions, sinks;
  aotinfer_tensor custom_mask, mask_indptr;
} aotinfer_batch_decode_tensors;

/* The tensors of one batch_mla_decode run (aotinfer/params/batch_mla_decode.h), in the config's
 * dtype but the cache (ckv and kpe: its dtype_kv), kv_indices (int32 [kv_indptr[batch]]) and
 * lse (float32 [batch * q_len, num_heads], may be absent): q_nope [batch * q_len, num_heads,
 * 512] and q_pe [batch * q_len, num_heads, 64], whose token rows may be strided (slices of one
 * projection); the paged cache's ckv [pages, page_size, 512] and kpe [pages, page_size, 64],
 * whose pages may be strided (views of one [pages, page_size, 576] tensor); o [batch * q_len,
 * num_heads, 512], dense. */
typedef struct aotinfer_batch_mla_decode_tensors {
  aotinfer_tensor q_nope, q_pe, ckv, kpe, kv_indices, o, lse;
} aotinfer_batch_mla_decode_tensors;

/* Scalars of a run; 0 means the default (sm_scale 1/sqrt(head_dim), rope_scale 1, rope_theta
 * 1e4, k_scale and v_scale 1; logits_soft_cap 0: no cap). */
typedef struct aotinfer_attention_scalars {
  float sm_scale;
  float logits_soft_cap;
  float rope_scale;
  float rope_theta;
  float k_scale;
  float v_scale;
} aotinfer_attention_scalars;

/* Scalars of a batch_mla_decode run: sm_scale (required, > 0) and an fp8 cache's dequantisation
 * scales (0 means 1; a 16-bit cache takes 1). */
typedef struct aotinfer_mla_scalars {
  float sm_scale;
  float ckv_scale;
  float kpe_scale;
} aotinfer_mla_scalars;

/* The tensors of one batch_prefill run (aotinfer/params/batch_prefill.h). Paged: k and v are
 * the pools (as for decode) and kv_indices, kv_last_page_len are given; ragged: k and v are
 * [total_kv, num_kv_heads, head_dim] with any 16-byte-aligned token stride (views of a fused
 * QKV tensor are fine) and head_dim contiguous. q, o (and lse) have at least the planned
 * number of query rows. lse and sinks (float32 [num_qo_heads], attention-sink logits) may be
 * absent. With the mask "custom", custom_mask (u8, the packed bits, at least their byte count
 * rounded up to 4) and mask_indptr (i32 [batch + 1], byte offsets) are required, and absent
 * otherwise (aotinfer/params/batch_prefill.h). */
typedef struct aotinfer_batch_prefill_tensors {
  aotinfer_tensor q, k, v, qo_indptr, kv_indptr, kv_indices, kv_last_page_len, o, lse, sinks;
  aotinfer_tensor custom_mask, mask_indptr;
} aotinfer_batch_prefill_tensors;

/* merge_state: v_* [..., head_dim] f16/bf16 of one shape, s_* float32 with one value per row;
 * s_out may be absent. The variant is chosen by v_a's dtype and last dimension. */
typedef struct aotinfer_merge_state_tensors {
  aotinfer_tensor v_a, s_a, v_b, s_b, v_out, s_out;
} aotinfer_merge_state_tensors;

/* append_paged_kv: k, v [nnz, num_kv_heads, head_dim] (any 16-byte-aligned token stride) of
 * the pools' dtype, batch_indices and positions int32 [nnz], the pools in `layout`, and the
 * cache's int32 kv_indptr, kv_indices, kv_last_page_len. */
typedef struct aotinfer_append_paged_kv_tensors {
  aotinfer_tensor k, v, batch_indices, positions, k_pages, v_pages, kv_indptr, kv_indices, kv_last_page_len;
} aotinfer_append_paged_kv_tensors;

/* cascade (aotinfer/cascade.hpp): q, o, lse, sinks and the shared pools as for a paged
 * batch_prefill; the four metadata pointers each point to num_levels tensors, level l's int32
 * device copies of what plan saw. In CUDA-graph mode o (and lse) have max_total_q rows. */
typedef struct aotinfer_cascade_tensors {
  aotinfer_tensor q, k_pages, v_pages, o, lse, sinks;
  const aotinfer_tensor* qo_indptr;
  const aotinfer_tensor* kv_indptr;
  const aotinfer_tensor* kv_indices;
  const aotinfer_tensor* kv_last_page_len;
} aotinfer_cascade_tensors;

#ifdef __cplusplus
}
#endif

#endif /* AOTINFER_TENSOR_H */
