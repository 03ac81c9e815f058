/* The aotinfer C API: open a kernel package, query it, run kernels. Every call returns a
 * status; on failure aotinfer_last_error() holds the message (per thread). Streams are CUstream
 * or cudaStream_t values passed as void*.
 *
 * No call throws, aborts or crashes on a bad argument: a NULL or foreign handle (or one already
 * closed/destroyed, as far as can be told), a NULL or misaligned pointer, an empty string, a
 * negative count or a zero size is AOTINFER_INVALID_ARGUMENT with a message
 * "<function>: <argument> ..." naming it. These checks come before any handle is used and
 * before the CUDA driver is touched, so they hold on a machine without a GPU; calls that pass
 * them and need the driver then return AOTINFER_NO_DRIVER / AOTINFER_NO_DEVICE there. Calls
 * without a status (count, uri, close, destroy) record a refusal in aotinfer_last_error() and
 * return 0 / NULL / nothing; on success they leave the last error as it was. */
#ifndef AOTINFER_H
#define AOTINFER_H

#include <stddef.h>
#include <stdint.h>

#include "aotinfer/params/append_paged_kv.h"
#include "aotinfer/params/merge_state.h"
#include "aotinfer/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum aotinfer_status {
  AOTINFER_OK = 0,
  AOTINFER_INVALID_ARGUMENT = 1,
  AOTINFER_NOT_FOUND = 2,
  AOTINFER_CORRUPT_PACKAGE = 3,
  AOTINFER_NO_DRIVER = 4,
  AOTINFER_NO_DEVICE = 5,
  AOTINFER_UNSUPPORTED_ARCH = 6,
  AOTINFER_CUDA_ERROR = 7,
  AOTINFER_IO_ERROR = 8,
  AOTINFER_INTERNAL_ERROR = 99
} aotinfer_status;

typedef struct aotinfer_package aotinfer_package;

/* The message of the calling thread's last failed call ("" if none). */
const char* aotinfer_last_error(void);

/* Messages for a person, not for control flow (e.g. that a kernel runs from PTX the driver
 * compiles on first use). Silent by default; AOTINFER_LOG=1 prints them to stderr; a handler set
 * here receives them instead (for the whole process; NULL restores the default). */
typedef void (*aotinfer_log_handler)(const char* message, void* user);
void aotinfer_set_log_handler(aotinfer_log_handler handler, void* user);

/* *out is set to NULL first, then to the package on success. */
aotinfer_status aotinfer_package_open(const char* dir, aotinfer_package** out);
/* NULL is allowed (does nothing), as for every destroy function below. */
void aotinfer_package_close(aotinfer_package* package);

/* 0 for a NULL or foreign handle (see aotinfer_last_error()). */
size_t aotinfer_package_variant_count(const aotinfer_package* package);
/* The URI of variant i (0 <= i < count), valid while the package is open; NULL if out of range
 * or for a NULL or foreign handle. */
const char* aotinfer_package_variant_uri(const aotinfer_package* package, size_t i);
/* AOTINFER_OK when the package holds the variant, AOTINFER_NOT_FOUND (with a message naming
 * the nearest variants) otherwise. */
aotinfer_status aotinfer_package_find(const aotinfer_package* package, const char* uri);

/* Launches entry `entry` of variant `uri` with the given grid and params struct. */
aotinfer_status aotinfer_launch(const aotinfer_package* package, const char* uri, const char* entry,
                                const uint32_t grid[3], const void* params, size_t params_size,
                                void* stream);

/* merge_state for dtype "f16" or "bf16" and the given head_dim (see params/merge_state.h). */
aotinfer_status aotinfer_merge_state(const aotinfer_package* package, const char* dtype, int head_dim,
                                     const aotinfer_merge_state_params* params, void* stream);

/* append_paged_kv for the cache dtype ("f16", "bf16", "e4m3", "e5m2") and head_dim. */
aotinfer_status aotinfer_append_paged_kv(const aotinfer_package* package, const char* dtype, int head_dim,
                                         const aotinfer_append_paged_kv_params* params, void* stream);

/* The same two ops from described tensors (aotinfer/tensor.h), each checked before anything is
 * launched; the variant is chosen by the tensors' dtype and head_dim. layout: "nhd" | "hnd"
 * (NULL: "nhd"). */
aotinfer_status aotinfer_merge_state_tensors_run(const aotinfer_package* package, const aotinfer_merge_state_tensors* tensors,
                                                 void* stream);
aotinfer_status aotinfer_append_paged_kv_tensors_run(const aotinfer_package* package,
                                                     const aotinfer_append_paged_kv_tensors* tensors, const char* layout,
                                                     void* stream);

/* Batch decode over a paged KV cache (see aotinfer/batch_decode.hpp for the plan/run contract). */
typedef struct aotinfer_batch_decode aotinfer_batch_decode;

typedef struct aotinfer_batch_decode_config {
  const char* dtype_q;      /* "f16" | "bf16" */
  const char* dtype_kv;     /* "f16" | "bf16" | "e4m3" | "e5m2" */
  const char* dtype_o;      /* NULL: dtype_q */
  int32_t head_dim;
  int32_t num_qo_heads;
  int32_t num_kv_heads;
  int32_t page_size;
  const char* layout;       /* "nhd" | "hnd"; NULL: "nhd" */
  const char* pos_encoding; /* "none" | "rope_llama" | "alibi"; NULL: "none" */
  int32_t sliding_window;   /* bool: each query sees its own key and the window_left keys before it */
  int32_t window_left;      /* with sliding_window: >= 0 */
  int32_t cuda_graph;       /* bool */
  int32_t max_batch;        /* CUDA-graph mode */
  const char* kv_split;     /* "adaptive" | "fixed" | "none" (fixed, none: batch-invariant; aotinfer/attention.hpp); NULL: "adaptive" */
  int32_t kv_split_tokens;  /* "fixed": keys per chunk */
  int64_t max_kv_len;       /* CUDA-graph mode with kv_split "fixed": the longest request's keys */
  int32_t q_len;            /* query tokens per request, 1..16 (speculative verification); 0: 1 */
  int32_t non_causal;       /* bool, q_len > 1: every token sees every key; 0: causal among the tokens */
  int32_t custom_mask;      /* bool: the run args' custom_mask says which keys each token sees (non_causal is not read) */
} aotinfer_batch_decode_config;

typedef struct aotinfer_batch_decode_run_args {
  int32_t batch;
  const void* q;
  void* k_pages;
  void* v_pages;
  const int32_t* kv_indptr;
  const int32_t* kv_indices;
  const int32_t* kv_last_page_len;
  void* o;
  float* lse;                 /* may be NULL */
  const int32_t* q_positions; /* may be NULL */
  const float* sinks;         /* [num_qo_heads] attention-sink logits; may be NULL */
  float sm_scale;             /* 0: 1/sqrt(head_dim) */
  float logits_soft_cap;      /* > 0: scores are soft-capped; 0: no cap */
  float rope_scale;           /* 0: 1 */
  float rope_theta;           /* 0: 1e4 */
  float k_scale;              /* 0: 1 */
  float v_scale;              /* 0: 1 */
  int64_t q_stride_token;     /* elements between requests' q rows (a fused qkv slice); 0: dense */
  const uint8_t* custom_mask; /* config custom_mask: packed bits, 4-byte aligned (aotinfer/params/batch_decode.h) */
  const int32_t* mask_indptr; /* config custom_mask: [batch + 1] byte offsets of the requests' masks */
} aotinfer_batch_decode_run_args;

aotinfer_status aotinfer_batch_decode_create(const aotinfer_package* package, const aotinfer_batch_decode_config* config,
                                             aotinfer_batch_decode** out);
void aotinfer_batch_decode_destroy(aotinfer_batch_decode* decode);
/* max_kv_len: the longest request's keys, needed by kv_split "fixed" (0 otherwise). */
aotinfer_status aotinfer_batch_decode_workspace_sizes(const aotinfer_batch_decode* decode, int32_t max_batch,
                                                      int64_t max_kv_len, size_t* float_bytes, size_t* int_bytes);
/* Host arrays: kv_indptr [batch + 1], kv_last_page_len [batch], kv_indices [num_indices] (may be
 * NULL with num_indices 0: page ids are then not checked). Workspaces are device memory. */
aotinfer_status aotinfer_batch_decode_plan(aotinfer_batch_decode* decode, const int32_t* kv_indptr, int32_t batch,
                                           const int32_t* kv_last_page_len, const int32_t* kv_indices,
                                           int32_t num_indices, int32_t num_pages, void* float_workspace,
                                           size_t float_bytes, void* int_workspace, size_t int_bytes, void* stream);
/* Raw pointers: checks nulls and alignment only; device, dtype and sizes are the caller's contract. */
aotinfer_status aotinfer_batch_decode_run(const aotinfer_batch_decode* decode,
                                          const aotinfer_batch_decode_run_args* args, void* stream);
/* Described tensors, each checked against the config and the last plan before any launch. */
aotinfer_status aotinfer_batch_decode_tensors_run(const aotinfer_batch_decode* decode,
                                                  const aotinfer_batch_decode_tensors* tensors,
                                                  const aotinfer_attention_scalars* scalars, void* stream);

/* Multi-head latent attention decode (DeepSeek-V3/R1, Kimi K2) over a paged latent cache (see
 * aotinfer/batch_mla_decode.hpp for the plan/run contract, aotinfer/params/batch_mla_decode.h for
 * the semantics). */
typedef struct aotinfer_batch_mla_decode aotinfer_batch_mla_decode;

typedef struct aotinfer_batch_mla_decode_config {
  const char* dtype;  /* "f16" | "bf16": q and o */
  int32_t num_heads;
  int32_t page_size;
  int32_t cuda_graph; /* bool */
  int32_t max_batch;  /* CUDA-graph mode */
  int32_t q_len;      /* CUDA-graph mode: every plan's new tokens per request (1..4) */
  const char* dtype_kv; /* the cache: NULL or dtype, or "e4m3" (fp8, scaled at run time) */
} aotinfer_batch_mla_decode_config;

typedef struct aotinfer_batch_mla_decode_run_args {
  int32_t batch;
  const void* q_nope;          /* [batch * q_len, num_heads, 512] */
  const void* q_pe;            /* [batch * q_len, num_heads, 64] */
  int64_t q_nope_stride;       /* elements between tokens' rows; 0: dense */
  int64_t q_pe_stride;
  const void* ckv;             /* [pages, page_size, 512] */
  const void* kpe;             /* [pages, page_size, 64] */
  int64_t ckv_stride_page;     /* elements between pages; 0: dense */
  int64_t kpe_stride_page;
  const int32_t* kv_indices;
  void* o;                     /* [batch * q_len, num_heads, 512] */
  float* lse;                  /* may be NULL */
  float sm_scale;              /* > 0 (MLA scales by the head_dim before absorption) */
  float ckv_scale;             /* e4m3 cache: real values are ckv_scale * ckv; 0: 1 */
  float kpe_scale;             /* and kpe_scale * kpe; 0: 1 */
} aotinfer_batch_mla_decode_run_args;

aotinfer_status aotinfer_batch_mla_decode_create(const aotinfer_package* package,
                                                 const aotinfer_batch_mla_decode_config* config,
                                                 aotinfer_batch_mla_decode** out);
void aotinfer_batch_mla_decode_destroy(aotinfer_batch_mla_decode* mla);
aotinfer_status aotinfer_batch_mla_decode_workspace_sizes(const aotinfer_batch_mla_decode* mla, int32_t max_batch,
                                                          int32_t max_q_len, size_t* float_bytes, size_t* int_bytes);
/* Host arrays as aotinfer_batch_decode_plan's; q_len: the new tokens of every request (1..4). */
aotinfer_status aotinfer_batch_mla_decode_plan(aotinfer_batch_mla_decode* mla, const int32_t* kv_indptr, int32_t batch,
                                               const int32_t* kv_last_page_len, const int32_t* kv_indices,
                                               int32_t num_indices, int32_t num_pages, int32_t q_len,
                                               void* float_workspace, size_t float_bytes, void* int_workspace,
                                               size_t int_bytes, void* stream);
aotinfer_status aotinfer_batch_mla_decode_run(const aotinfer_batch_mla_decode* mla,
                                              const aotinfer_batch_mla_decode_run_args* args, void* stream);
/* Described tensors, each checked against the config and the last plan before any launch. */
aotinfer_status aotinfer_batch_mla_decode_tensors_run(const aotinfer_batch_mla_decode* mla,
                                                      const aotinfer_batch_mla_decode_tensors* tensors,
                                                      const aotinfer_mla_scalars* scalars, void* stream);

/* Batch prefill over a paged or ragged KV cache (see aotinfer/batch_prefill.hpp for the plan/run
 * contract, aotinfer/params/batch_prefill.h for the semantics: query token t of a request sits at
 * position kv_len - qo_len + t). */
typedef struct aotinfer_batch_prefill aotinfer_batch_prefill;

typedef struct aotinfer_batch_prefill_config {
  const char* dtype_q;      /* "f16" | "bf16" */
  const char* dtype_kv;     /* "f16" | "bf16"; NULL: dtype_q */
  const char* dtype_o;      /* NULL: dtype_q */
  int32_t head_dim;
  int32_t num_qo_heads;
  int32_t num_kv_heads;
  const char* kv_storage;   /* "paged" | "ragged"; NULL: "paged" */
  int32_t page_size;        /* paged */
  const char* layout;       /* "nhd" | "hnd" (hnd: paged only); NULL: "nhd" */
  const char* mask;         /* "none" | "causal" | "custom" (run args' custom_mask); NULL: "causal" */
  const char* pos_encoding; /* "none" | "rope_llama" | "alibi" (the none variant, a run-time bias); NULL: "none" */
  int32_t sliding_window;   /* bool: each query sees its own key and the window_left keys before it */
  int32_t window_left;      /* with sliding_window: >= 0 */
  int32_t cuda_graph;       /* bool */
  int32_t max_batch;        /* CUDA-graph mode */
  int64_t max_total_q;      /* CUDA-graph mode */
  const char* kv_split;     /* "adaptive" | "fixed" | "none" (fixed, none: batch-invariant; aotinfer/attention.hpp); NULL: "adaptive" */
  int32_t kv_split_tokens;  /* "fixed": keys per chunk */
  int64_t max_kv_len;       /* CUDA-graph mode with kv_split "fixed": the longest request's keys */
  int32_t head_dim_vo;      /* width of V and o rows; 0: head_dim (they differ only for MLA models' prefill: 192 / 128,
                             * with 16-bit K/V and pos_encoding "none") */
} aotinfer_batch_prefill_config;

typedef struct aotinfer_batch_prefill_run_args {
  int32_t batch;                   /* must equal the planned batch */
  int64_t total_q;                 /* must equal qo_indptr[batch] of the plan */
  const void* q;                   /* [total_q, num_qo_heads, head_dim] */
  const int32_t* qo_indptr;        /* device copies of what plan saw */
  const void* k;                   /* paged: the page pools in config.layout; ragged: [total_kv, heads, head_dim] */
  const void* v;                   /* the same, head_dim_vo wide */
  const int32_t* kv_indptr;        /* paged: pages; ragged: tokens */
  const int32_t* kv_indices;       /* paged only */
  const int32_t* kv_last_page_len; /* paged only */
  void* o;                         /* [total_q, num_qo_heads, head_dim_vo] */
  float* lse;                      /* [total_q, num_qo_heads]; may be NULL */
  const float* sinks;              /* [num_qo_heads] attention-sink logits; may be NULL */
  float sm_scale;                  /* 0: 1/sqrt(head_dim) */
  float logits_soft_cap;           /* > 0: scores are soft-capped; 0: no cap */
  float rope_scale;                /* 0: 1 */
  float rope_theta;                /* 0: 1e4 */
  int64_t q_stride_token;          /* elements between q's tokens (a fused qkv slice); 0: dense */
  float k_scale;                   /* K/V dequantisation (fp8 caches); 0: 1 */
  float v_scale;                   /* 0: 1 */
  const uint8_t* custom_mask;      /* mask "custom": packed bits, 4-byte aligned (aotinfer/params/batch_prefill.h) */
  const int32_t* mask_indptr;      /* mask "custom": [batch + 1] byte offsets of the requests' masks */
  int64_t v_stride;                /* elements between V's pages (paged) or tokens (ragged); 0: packed. Where the
                                    * widths are equal V is stepped as K (packed here): 0 or that stride */
} aotinfer_batch_prefill_run_args;

aotinfer_status aotinfer_batch_prefill_create(const aotinfer_package* package,
                                              const aotinfer_batch_prefill_config* config,
                                              aotinfer_batch_prefill** out);
void aotinfer_batch_prefill_destroy(aotinfer_batch_prefill* prefill);
/* max_kv_len: the longest request's keys, needed by kv_split "fixed" (0 otherwise). */
aotinfer_status aotinfer_batch_prefill_workspace_sizes(const aotinfer_batch_prefill* prefill, int64_t max_total_q,
                                                       int32_t max_batch, int64_t max_kv_len, size_t* float_bytes,
                                                       size_t* int_bytes);
/* Host arrays: qo_indptr [batch + 1] (tokens), kv_indptr [batch + 1] (pages), kv_last_page_len
 * [batch], kv_indices [num_indices] (may be NULL with num_indices 0: page ids are then not
 * checked). Workspaces are device memory. Fails on a prefill configured for ragged KV. */
aotinfer_status aotinfer_batch_prefill_plan_paged(aotinfer_batch_prefill* prefill, const int32_t* qo_indptr,
                                                  const int32_t* kv_indptr, int32_t batch,
                                                  const int32_t* kv_last_page_len, const int32_t* kv_indices,
                                                  int32_t num_indices, int32_t num_pages, void* float_workspace,
                                                  size_t float_bytes, void* int_workspace, size_t int_bytes,
                                                  void* stream);
/* Host arrays: qo_indptr and kv_indptr [batch + 1] (tokens). Fails on a prefill configured for
 * paged KV. */
aotinfer_status aotinfer_batch_prefill_plan_ragged(aotinfer_batch_prefill* prefill, const int32_t* qo_indptr,
                                                   const int32_t* kv_indptr, int32_t batch, void* float_workspace,
                                                   size_t float_bytes, void* int_workspace, size_t int_bytes,
                                                   void* stream);
/* Raw pointers: checks nulls and alignment only; device, dtype and sizes are the caller's contract. */
aotinfer_status aotinfer_batch_prefill_run(const aotinfer_batch_prefill* prefill,
                                           const aotinfer_batch_prefill_run_args* args, void* stream);
/* Described tensors, each checked against the config and the last plan before any launch. */
aotinfer_status aotinfer_batch_prefill_tensors_run(const aotinfer_batch_prefill* prefill,
                                                   const aotinfer_batch_prefill_tensors* tensors,
                                                   const aotinfer_attention_scalars* scalars, void* stream);

/* The layout of every struct of this header as JSON, {"struct": {"size": n, "fields":
 * {"field": offset, ...}}, ...}: bindings in other languages compare their mirrors with it.
 * One string for the process; NULL only when memory ran out building it. */
const char* aotinfer_abi_layout(void);

/* ---- Cascade attention over shared KV prefixes (see aotinfer/cascade.hpp) --------------------
 * num_levels paged batch prefills over one page pool, level 0 the most shared; level l groups
 * the same total_q query tokens by its own qo_indptr, and each row's states are merged over the
 * levels. The config's mask applies to the last level only (the others see their keys whole);
 * sinks join the last level only. */
typedef struct aotinfer_cascade aotinfer_cascade;

typedef struct aotinfer_cascade_config {
  aotinfer_batch_prefill_config level; /* every level's: kv_storage "paged" (or NULL), pos_encoding "none" (or
                                        * NULL), sliding_window 0, head_dim_vo 0 (or head_dim); CUDA-graph
                                        * mode: max_batch bounds each level's groups, max_total_q the query
                                        * tokens */
  int32_t num_levels;                  /* >= 1 */
} aotinfer_cascade_config;

typedef struct aotinfer_cascade_run_args {
  int64_t total_q;                         /* must equal the plan's */
  const void* q;                           /* [total_q, num_qo_heads, head_dim] */
  const void* k_pages;                     /* the shared pools in the config's layout */
  const void* v_pages;
  const int32_t* const* qo_indptr;         /* host arrays of num_levels pointers: level l's device */
  const int32_t* const* kv_indptr;         /* copies of what plan saw */
  const int32_t* const* kv_indices;
  const int32_t* const* kv_last_page_len;
  void* o;                                 /* [total_q, num_qo_heads, head_dim]; CUDA-graph mode: max_total_q rows */
  float* lse;                              /* [rows of o, num_qo_heads]; may be NULL */
  const float* sinks;                      /* [num_qo_heads] attention-sink logits; may be NULL */
  float sm_scale;                          /* 0: 1/sqrt(head_dim) */
  float logits_soft_cap;                   /* > 0: scores are soft-capped; 0: no cap */
} aotinfer_cascade_run_args;

aotinfer_status aotinfer_cascade_create(const aotinfer_package* package, const aotinfer_cascade_config* config,
                                        aotinfer_cascade** out);
void aotinfer_cascade_destroy(aotinfer_cascade* cascade);
/* Workspace for plans of up to max_total_q query tokens and max_groups groups per level;
 * max_kv_len: the longest group's keys, needed by kv_split "fixed" (0 otherwise). */
aotinfer_status aotinfer_cascade_workspace_sizes(const aotinfer_cascade* cascade, int64_t max_total_q, int32_t max_groups,
                                                 int64_t max_kv_len, size_t* float_bytes, size_t* int_bytes);
/* Host arrays of num_levels entries (as many as the config's levels): level l has num_groups[l]
 * groups, qo_indptr[l] and kv_indptr[l] of num_groups[l] + 1 entries (tokens; pages),
 * kv_last_page_len[l] of num_groups[l]. kv_indices may be NULL (page ids are then not checked),
 * else kv_indices[l] holds num_indices[l] page ids of a pool of num_pages pages. Workspaces are
 * device memory. */
aotinfer_status aotinfer_cascade_plan(aotinfer_cascade* cascade, int32_t num_levels, const int32_t* num_groups,
                                      const int32_t* const* qo_indptr, const int32_t* const* kv_indptr,
                                      const int32_t* const* kv_last_page_len, const int32_t* const* kv_indices,
                                      const int32_t* num_indices, int32_t num_pages, void* float_workspace,
                                      size_t float_bytes, void* int_workspace, size_t int_bytes, void* stream);
/* Raw pointers: checks nulls and alignment only; device, dtype and sizes are the caller's contract. */
aotinfer_status aotinfer_cascade_run(const aotinfer_cascade* cascade, const aotinfer_cascade_run_args* args, void* stream);
/* Described tensors (aotinfer/tensor.h), each checked against the config and the last plan
 * before any launch. */
aotinfer_status aotinfer_cascade_tensors_run(const aotinfer_cascade* cascade, const aotinfer_cascade_tensors* tensors,
                                             const aotinfer_attention_scalars* scalars, void* stream);

#ifdef __cplusplus
}
#endif

#endif /* AOTINFER_H */
