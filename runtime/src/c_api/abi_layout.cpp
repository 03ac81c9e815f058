// aotinfer_abi_layout(): the compiler's view of the C API's structs, for bindings that mirror
// them (the Python layer checks its ctypes mirrors against this on import). A field added,
// removed or moved in a header changes the offsets or sizes reported here.
#include <cstddef>
#include <string>

#include "aotinfer/aotinfer.h"

namespace {

#define AOTINFER_FIELD(type, field) "\"" #field "\": " + std::to_string(offsetof(type, field))
#define AOTINFER_STRUCT(type, ...) \
  "\"" #type "\": {\"size\": " + std::to_string(sizeof(type)) + ", \"fields\": {" + join({__VA_ARGS__}) + "}}"

std::string join(std::initializer_list<std::string> parts) {
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : ", ") + p;
  return out;
}

#define F(field) AOTINFER_FIELD(T, field)

std::string tensor() {
  using T = aotinfer_tensor;
  return AOTINFER_STRUCT(aotinfer_tensor, F(data), F(shape), F(strides), F(ndim), F(dtype), F(device_type), F(device_id),
                         F(dtype_name));
}

std::string scalars() {
  using T = aotinfer_attention_scalars;
  return AOTINFER_STRUCT(aotinfer_attention_scalars, F(sm_scale), F(logits_soft_cap), F(rope_scale), F(rope_theta),
                         F(k_scale), F(v_scale));
}

std::string decode_tensors() {
  using T = aotinfer_batch_decode_tensors;
  return AOTINFER_STRUCT(aotinfer_batch_decode_tensors, F(q), F(k_pages), F(v_pages), F(kv_indptr), F(kv_indices),
                         F(kv_last_page_len), F(o), F(lse), F(q_positions), F(sinks), F(custom_mask), F(mask_indptr));
}

std::string prefill_tensors() {
  using T = aotinfer_batch_prefill_tensors;
  return AOTINFER_STRUCT(aotinfer_batch_prefill_tensors, F(q), F(k), F(v), F(qo_indptr), F(kv_indptr), F(kv_indices),
                         F(kv_last_page_len), F(o), F(lse), F(sinks), F(custom_mask), F(mask_indptr));
}

std::string mla_decode_tensors() {
  using T = aotinfer_batch_mla_decode_tensors;
  return AOTINFER_STRUCT(aotinfer_batch_mla_decode_tensors, F(q_nope), F(q_pe), F(ckv), F(kpe), F(kv_indices), F(o),
                         F(lse));
}

std::string mla_decode_config() {
  using T = aotinfer_batch_mla_decode_config;
  return AOTINFER_STRUCT(aotinfer_batch_mla_decode_config, F(dtype), F(num_heads), F(page_size), F(cuda_graph),
                         F(max_batch), F(q_len), F(dtype_kv));
}

std::string mla_scalars() {
  using T = aotinfer_mla_scalars;
  return AOTINFER_STRUCT(aotinfer_mla_scalars, F(sm_scale), F(ckv_scale), F(kpe_scale));
}

std::string merge_tensors() {
  using T = aotinfer_merge_state_tensors;
  return AOTINFER_STRUCT(aotinfer_merge_state_tensors, F(v_a), F(s_a), F(v_b), F(s_b), F(v_out), F(s_out));
}

std::string append_tensors() {
  using T = aotinfer_append_paged_kv_tensors;
  return AOTINFER_STRUCT(aotinfer_append_paged_kv_tensors, F(k), F(v), F(batch_indices), F(positions), F(k_pages),
                         F(v_pages), F(kv_indptr), F(kv_indices), F(kv_last_page_len));
}

std::string decode_config() {
  using T = aotinfer_batch_decode_config;
  return AOTINFER_STRUCT(aotinfer_batch_decode_config, F(dtype_q), F(dtype_kv), F(dtype_o), F(head_dim), F(num_qo_heads),
                         F(num_kv_heads), F(page_size), F(layout), F(pos_encoding), F(sliding_window), F(window_left),
                         F(cuda_graph), F(max_batch), F(kv_split), F(kv_split_tokens), F(max_kv_len), F(q_len),
                         F(non_causal), F(custom_mask));
}

std::string prefill_config() {
  using T = aotinfer_batch_prefill_config;
  return AOTINFER_STRUCT(aotinfer_batch_prefill_config, F(dtype_q), F(dtype_kv), F(dtype_o), F(head_dim), F(num_qo_heads),
                         F(num_kv_heads), F(kv_storage), F(page_size), F(layout), F(mask), F(pos_encoding),
                         F(sliding_window), F(window_left), F(cuda_graph), F(max_batch), F(max_total_q), F(kv_split),
                         F(kv_split_tokens), F(max_kv_len), F(head_dim_vo));
}

std::string decode_run_args() {
  using T = aotinfer_batch_decode_run_args;
  return AOTINFER_STRUCT(aotinfer_batch_decode_run_args, F(batch), F(q), F(k_pages), F(v_pages), F(kv_indptr),
                         F(kv_indices), F(kv_last_page_len), F(o), F(lse), F(q_positions), F(sinks), F(sm_scale),
                         F(logits_soft_cap), F(rope_scale), F(rope_theta), F(k_scale), F(v_scale),
                         F(q_stride_token), F(custom_mask), F(mask_indptr));
}

std::string prefill_run_args() {
  using T = aotinfer_batch_prefill_run_args;
  return AOTINFER_STRUCT(aotinfer_batch_prefill_run_args, F(batch), F(total_q), F(q), F(qo_indptr), F(k), F(v),
                         F(kv_indptr), F(kv_indices), F(kv_last_page_len), F(o), F(lse), F(sinks), F(sm_scale),
                         F(logits_soft_cap), F(rope_scale), F(rope_theta), F(q_stride_token), F(k_scale), F(v_scale),
                         F(custom_mask), F(mask_indptr), F(v_stride));
}

std::string merge_params() {
  using T = aotinfer_merge_state_params;
  return AOTINFER_STRUCT(aotinfer_merge_state_params, F(v_a), F(s_a), F(v_b), F(s_b), F(v_out), F(s_out), F(rows));
}

std::string paged_kv() {
  using T = aotinfer_paged_kv;
  return AOTINFER_STRUCT(aotinfer_paged_kv, F(k_pages), F(v_pages), F(indptr), F(indices), F(last_page_len),
                         F(stride_page), F(stride_token), F(stride_head), F(page_size), F(num_kv_heads));
}

std::string append_params() {
  using T = aotinfer_append_paged_kv_params;
  return AOTINFER_STRUCT(aotinfer_append_paged_kv_params, F(k), F(v), F(k_stride_token), F(v_stride_token),
                         F(batch_indices), F(positions), F(kv), F(nnz));
}

// Cascade: the config (its level is aotinfer_batch_prefill_config, reported above), the raw run
// arguments and the described tensors.
std::string cascade_config() {
  using T = aotinfer_cascade_config;
  return AOTINFER_STRUCT(aotinfer_cascade_config, F(level), F(num_levels));
}

std::string cascade_run_args() {
  using T = aotinfer_cascade_run_args;
  return AOTINFER_STRUCT(aotinfer_cascade_run_args, F(total_q), F(q), F(k_pages), F(v_pages), F(qo_indptr), F(kv_indptr),
                         F(kv_indices), F(kv_last_page_len), F(o), F(lse), F(sinks), F(sm_scale), F(logits_soft_cap));
}

std::string cascade_tensors() {
  using T = aotinfer_cascade_tensors;
  return AOTINFER_STRUCT(aotinfer_cascade_tensors, F(q), F(k_pages), F(v_pages), F(o), F(lse), F(sinks), F(qo_indptr),
                         F(kv_indptr), F(kv_indices), F(kv_last_page_len));
}

#undef F

}  // namespace

extern "C" const char* aotinfer_abi_layout(void) {
  // Nothing may cross the C boundary: out of memory on the first call gives NULL (a later call
  // tries again) instead of terminating the process.
  try {
    static const std::string layout =
        "{" + join({tensor(), scalars(), decode_tensors(), prefill_tensors(), merge_tensors(), append_tensors(),
                    decode_config(), prefill_config(), decode_run_args(), prefill_run_args(), merge_params(), paged_kv(),
                    append_params(), cascade_config(), cascade_run_args(), cascade_tensors(), mla_decode_tensors(),
                    mla_decode_config(), mla_scalars()}) +
        "}";
    return layout.c_str();
  } catch (...) {
    return nullptr;
  }
}
