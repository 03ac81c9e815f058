// Checking described tensors (aotinfer/tensor.h) against a config and a plan, and turning them
// into the raw launch arguments. Pure host code: nothing here touches the driver, so a bad
// tensor is refused before anything is launched and the CUDA context stays usable. Internal.
#pragma once
#include <cstdint>

#include "aotinfer/append_paged_kv.hpp"
#include "aotinfer/batch_decode.hpp"
#include "aotinfer/batch_mla_decode.hpp"
#include "aotinfer/batch_prefill.hpp"
#include "aotinfer/merge_state.hpp"
#include "aotinfer/tensor.h"

namespace aotinfer::detail {

// Asked for the current device only when a GPU tensor's device must be compared with it.
using DeviceQuery = int (*)();

// What a run's tensors are checked against besides the config: the last plan and its device.
struct PlannedShape {
  std::int32_t batch = 0;       // requests
  std::int64_t q_rows = 0;      // query rows the kernels read: decode batch * q_len, prefill total_q
  std::int64_t kv_entries = 0;  // kv_indptr[batch]: pages (paged) or tokens (ragged)
  std::int32_t num_pages = 0;   // > 0: plan checked every page id against it
  std::int64_t mask_bytes = 0;  // with a custom mask: the packed masks' bytes (FlashInfer's
                                // layout: each request's qo_len * kv_len bits padded to whole bytes)
  int device = 0;               // ordinal of the plan's GPU
};

// Each throws Error(invalid_argument) "<op>: <argument>: expected ..., got ..." on the first
// tensor that does not fit.
DecodeRunArgs decode_run_args(const BatchDecodeConfig& config, const PlannedShape& plan,
                              const aotinfer_batch_decode_tensors& t, const aotinfer_attention_scalars& s);
// q_len: the plan's query tokens per request (plan.q_rows = batch * q_len).
MlaDecodeRunArgs mla_decode_run_args(const BatchMlaDecodeConfig& config, const PlannedShape& plan,
                                     const aotinfer_batch_mla_decode_tensors& t, const aotinfer_mla_scalars& scalars);
// q and k are head_dim wide, v and o head_dim_vo wide; kv_stride comes from k, v_stride from v
// (which must agree where the widths are equal: the kernels then step V with K's strides).
PrefillRunArgs prefill_run_args(const BatchPrefillConfig& config, const PlannedShape& plan,
                                const aotinfer_batch_prefill_tensors& t, const aotinfer_attention_scalars& s);

struct MergeStateCall {
  DType dtype;
  int head_dim;
  aotinfer_merge_state_params params;
};
MergeStateCall merge_state_call(const aotinfer_merge_state_tensors& t, DeviceQuery device);

struct AppendCall {
  DType dtype;
  int head_dim;
  aotinfer_append_paged_kv_params params;
};
AppendCall append_paged_kv_call(const aotinfer_append_paged_kv_tensors& t, KvLayout layout, DeviceQuery device);

}  // namespace aotinfer::detail
