#include "aotinfer/aotinfer.h"

#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "aotinfer/append_paged_kv.hpp"
#include "aotinfer/batch_decode.hpp"
#include "aotinfer/batch_prefill.hpp"
#include "aotinfer/merge_state.hpp"
#include "aotinfer/package.hpp"
#include "driver.hpp"
#include "tensor_checks.hpp"

// The merge_state / append_paged_kv front-ends of one (context, dtype, head_dim), made on first
// use: a call then costs a map lookup instead of a variant search.
template <typename FrontEnd>
class FrontEnds {
 public:
  const FrontEnd& get(const aotinfer::Package& package, aotinfer::DType dtype, int head_dim) {
    const Key key{aotinfer::detail::current_context(), dtype, head_dim};
    std::lock_guard lock(mutex_);
    auto it = made_.find(key);
    if (it == made_.end()) it = made_.emplace(key, FrontEnd(package, dtype, head_dim)).first;
    return it->second;  // map nodes stay put
  }

 private:
  using Key = std::tuple<CUcontext, aotinfer::DType, int>;
  std::mutex mutex_;
  std::map<Key, FrontEnd> made_;
};

struct aotinfer_package {
  aotinfer::Package package;
  std::vector<std::string> uris;
  mutable FrontEnds<aotinfer::MergeState> merges{};  // a cache: the package stays logically const
  mutable FrontEnds<aotinfer::AppendPagedKv> appends{};
};

struct aotinfer_batch_decode {
  aotinfer::BatchDecode decode;
};

struct aotinfer_batch_prefill {
  aotinfer::BatchPrefill prefill;
};

namespace {

// The C statuses are the C++ error codes.
static_assert(int(aotinfer::ErrorCode::io_error) == AOTINFER_IO_ERROR);
static_assert(int(aotinfer::ErrorCode::invalid_argument) == AOTINFER_INVALID_ARGUMENT);

thread_local std::string last_error;

// Runs `body`, turning exceptions into a status and the thread's last error.
template <typename Body>
aotinfer_status guarded(Body&& body) {
  try {
    body();
    last_error.clear();
    return AOTINFER_OK;
  } catch (const aotinfer::Error& e) {
    last_error = e.what();
    return aotinfer_status(int(e.code()));
  } catch (const std::exception& e) {
    last_error = e.what();
    return AOTINFER_INTERNAL_ERROR;
  }
}

aotinfer::DType dtype_arg(const char* name, const char* what) {
  auto type = name ? aotinfer::parse_dtype(name) : std::nullopt;
  if (!type)
    throw aotinfer::Error(aotinfer::ErrorCode::invalid_argument,
                          std::string(what) + ": unknown dtype '" + (name ? name : "(null)") + "' (f16, bf16, e4m3, e5m2, f32, i32)");
  return *type;
}

aotinfer::KvLayout layout_arg(const char* name) {
  const std::string layout = name ? name : "nhd";
  if (layout != "nhd" && layout != "hnd")
    throw aotinfer::Error(aotinfer::ErrorCode::invalid_argument, "layout must be \"nhd\" or \"hnd\", got \"" + layout + "\"");
  return layout == "nhd" ? aotinfer::KvLayout::nhd : aotinfer::KvLayout::hnd;
}

aotinfer_status null_argument(const char* what) {
  last_error = std::string(what) + " must not be NULL";
  return AOTINFER_INVALID_ARGUMENT;
}

}  // namespace

extern "C" {

const char* aotinfer_last_error(void) { return last_error.c_str(); }

aotinfer_status aotinfer_package_open(const char* dir, aotinfer_package** out) {
  if (!dir) return null_argument("dir");
  if (!out) return null_argument("out");
  *out = nullptr;
  return guarded([&] {
    auto package = aotinfer::Package::open(dir);
    std::vector<std::string> uris;
    for (const auto& v : package.manifest().variants) uris.push_back(v.key.uri());
    *out = new aotinfer_package{std::move(package), std::move(uris)};
  });
}

void aotinfer_package_close(aotinfer_package* package) { delete package; }

size_t aotinfer_package_variant_count(const aotinfer_package* package) { return package ? package->uris.size() : 0; }

const char* aotinfer_package_variant_uri(const aotinfer_package* package, size_t i) {
  return package && i < package->uris.size() ? package->uris[i].c_str() : nullptr;
}

aotinfer_status aotinfer_package_find(const aotinfer_package* package, const char* uri) {
  if (!package) return null_argument("package");
  if (!uri) return null_argument("uri");
  return guarded([&] { package->package.find(uri); });
}

aotinfer_status aotinfer_launch(const aotinfer_package* package, const char* uri, const char* entry,
                                const uint32_t grid[3], const void* params, size_t params_size, void* stream) {
  if (!package) return null_argument("package");
  if (!uri || !entry || !grid || !params) return null_argument("uri, entry, grid and params");
  return guarded([&] {
    package->package.kernel(uri, entry).launch(aotinfer::Grid{grid[0], grid[1], grid[2]}, params, params_size,
                                               static_cast<aotinfer::Stream>(stream));
  });
}

aotinfer_status aotinfer_merge_state(const aotinfer_package* package, const char* dtype, int head_dim,
                                     const aotinfer_merge_state_params* params, void* stream) {
  if (!package) return null_argument("package");
  if (!dtype || !params) return null_argument("dtype and params");
  return guarded([&] {
    aotinfer::MergeState(package->package, dtype_arg(dtype, "merge_state"), head_dim)
        .run(*params, static_cast<aotinfer::Stream>(stream));
  });
}

aotinfer_status aotinfer_append_paged_kv(const aotinfer_package* package, const char* dtype, int head_dim,
                                         const aotinfer_append_paged_kv_params* params, void* stream) {
  if (!package) return null_argument("package");
  if (!dtype || !params) return null_argument("dtype and params");
  return guarded([&] {
    aotinfer::AppendPagedKv(package->package, dtype_arg(dtype, "append_paged_kv"), head_dim)
        .run(*params, static_cast<aotinfer::Stream>(stream));
  });
}

aotinfer_status aotinfer_merge_state_tensors_run(const aotinfer_package* package, const aotinfer_merge_state_tensors* t,
                                                 void* stream) {
  if (!package) return null_argument("package");
  if (!t) return null_argument("tensors");
  return guarded([&] {
    const auto call = aotinfer::detail::merge_state_call(*t, aotinfer::detail::current_device_ordinal);
    package->merges.get(package->package, call.dtype, call.head_dim).run(call.params, static_cast<aotinfer::Stream>(stream));
  });
}

aotinfer_status aotinfer_append_paged_kv_tensors_run(const aotinfer_package* package,
                                                     const aotinfer_append_paged_kv_tensors* t, const char* layout,
                                                     void* stream) {
  if (!package) return null_argument("package");
  if (!t) return null_argument("tensors");
  return guarded([&] {
    const auto call = aotinfer::detail::append_paged_kv_call(*t, layout_arg(layout), aotinfer::detail::current_device_ordinal);
    package->appends.get(package->package, call.dtype, call.head_dim).run(call.params, static_cast<aotinfer::Stream>(stream));
  });
}

aotinfer_status aotinfer_batch_decode_create(const aotinfer_package* package, const aotinfer_batch_decode_config* c,
                                             aotinfer_batch_decode** out) {
  if (!package || !c || !out) return null_argument("package, config and out");
  *out = nullptr;
  return guarded([&] {
    auto invalid = [](const std::string& what) { throw aotinfer::Error(aotinfer::ErrorCode::invalid_argument, what); };
    aotinfer::BatchDecodeConfig config;
    config.dtype_q = dtype_arg(c->dtype_q, "dtype_q");
    config.dtype_kv = dtype_arg(c->dtype_kv, "dtype_kv");
    config.dtype_o = c->dtype_o ? dtype_arg(c->dtype_o, "dtype_o") : config.dtype_q;
    config.head_dim = c->head_dim;
    config.num_qo_heads = c->num_qo_heads;
    config.num_kv_heads = c->num_kv_heads;
    config.page_size = c->page_size;
    config.layout = layout_arg(c->layout);
    const std::string pos = c->pos_encoding ? c->pos_encoding : "none";
    if (pos == "none") config.pos_encoding = aotinfer::PosEncoding::none;
    else if (pos == "rope_llama") config.pos_encoding = aotinfer::PosEncoding::rope_llama;
    else if (pos == "alibi") config.pos_encoding = aotinfer::PosEncoding::alibi;
    else invalid("pos_encoding must be none, rope_llama or alibi, got \"" + pos + "\"");
    config.sliding_window = c->sliding_window != 0;
    config.soft_cap = c->soft_cap != 0;
    config.cuda_graph = c->cuda_graph != 0;
    config.max_batch = c->max_batch;
    *out = new aotinfer_batch_decode{aotinfer::BatchDecode(package->package, config)};
  });
}

void aotinfer_batch_decode_destroy(aotinfer_batch_decode* decode) { delete decode; }

aotinfer_status aotinfer_batch_decode_workspace_sizes(const aotinfer_batch_decode* decode, int32_t max_batch,
                                                      size_t* float_bytes, size_t* int_bytes) {
  if (!decode || !float_bytes || !int_bytes) return null_argument("decode, float_bytes and int_bytes");
  return guarded([&] {
    auto sizes = decode->decode.workspace_sizes(max_batch);
    *float_bytes = sizes.float_bytes;
    *int_bytes = sizes.int_bytes;
  });
}

aotinfer_status aotinfer_batch_decode_plan(aotinfer_batch_decode* decode, const int32_t* kv_indptr, int32_t batch,
                                           const int32_t* kv_last_page_len, const int32_t* kv_indices,
                                           int32_t num_indices, int32_t num_pages, void* float_workspace,
                                           size_t float_bytes, void* int_workspace, size_t int_bytes, void* stream) {
  if (!decode || !kv_indptr || (batch > 0 && !kv_last_page_len)) return null_argument("decode, kv_indptr and kv_last_page_len");
  if (batch < 0 || num_indices < 0) {
    last_error = "batch and num_indices must be >= 0";
    return AOTINFER_INVALID_ARGUMENT;
  }
  return guarded([&] {
    decode->decode.plan({kv_indptr, std::size_t(batch) + 1}, {kv_last_page_len, std::size_t(batch)},
                        {kv_indices, kv_indices ? std::size_t(num_indices) : 0}, num_pages,
                        {float_workspace, float_bytes, int_workspace, int_bytes}, static_cast<aotinfer::Stream>(stream));
  });
}

aotinfer_status aotinfer_batch_decode_run(const aotinfer_batch_decode* decode, const aotinfer_batch_decode_run_args* a,
                                          void* stream) {
  if (!decode || !a) return null_argument("decode and args");
  return guarded([&] {
    aotinfer::DecodeRunArgs args;
    args.batch = a->batch;
    args.q = a->q;
    args.k_pages = a->k_pages;
    args.v_pages = a->v_pages;
    args.kv_indptr = a->kv_indptr;
    args.kv_indices = a->kv_indices;
    args.kv_last_page_len = a->kv_last_page_len;
    args.o = a->o;
    args.lse = a->lse;
    args.q_positions = a->q_positions;
    args.sm_scale = a->sm_scale;
    args.logits_soft_cap = a->logits_soft_cap;
    args.rope_scale = a->rope_scale != 0 ? a->rope_scale : 1.f;
    args.rope_theta = a->rope_theta != 0 ? a->rope_theta : 1e4f;
    args.k_scale = a->k_scale != 0 ? a->k_scale : 1.f;
    args.v_scale = a->v_scale != 0 ? a->v_scale : 1.f;
    args.window_left = a->window_left;
    decode->decode.run(args, static_cast<aotinfer::Stream>(stream));
  });
}

aotinfer_status aotinfer_batch_decode_tensors_run(const aotinfer_batch_decode* decode,
                                                  const aotinfer_batch_decode_tensors* tensors,
                                                  const aotinfer_attention_scalars* scalars, void* stream) {
  if (!decode || !tensors || !scalars) return null_argument("decode, tensors and scalars");
  return guarded([&] { decode->decode.run(*tensors, *scalars, static_cast<aotinfer::Stream>(stream)); });
}

aotinfer_status aotinfer_batch_prefill_create(const aotinfer_package* package, const aotinfer_batch_prefill_config* c,
                                              aotinfer_batch_prefill** out) {
  if (!package || !c || !out) return null_argument("package, config and out");
  *out = nullptr;
  return guarded([&] {
    auto invalid = [](const std::string& what) { throw aotinfer::Error(aotinfer::ErrorCode::invalid_argument, what); };
    aotinfer::BatchPrefillConfig config;
    config.dtype_q = dtype_arg(c->dtype_q, "dtype_q");
    config.dtype_kv = c->dtype_kv ? dtype_arg(c->dtype_kv, "dtype_kv") : config.dtype_q;
    config.dtype_o = c->dtype_o ? dtype_arg(c->dtype_o, "dtype_o") : config.dtype_q;
    config.head_dim = c->head_dim;
    config.num_qo_heads = c->num_qo_heads;
    config.num_kv_heads = c->num_kv_heads;
    const std::string storage = c->kv_storage ? c->kv_storage : "paged";
    if (storage != "paged" && storage != "ragged")
      invalid("kv_storage must be \"paged\" or \"ragged\", got \"" + storage + "\"");
    config.kv_storage = storage == "paged" ? aotinfer::KvStorage::paged : aotinfer::KvStorage::ragged;
    config.page_size = c->page_size;
    config.layout = layout_arg(c->layout);
    const std::string mask = c->mask ? c->mask : "causal";
    if (mask != "none" && mask != "causal") invalid("mask must be \"none\" or \"causal\", got \"" + mask + "\"");
    config.mask = mask == "causal" ? aotinfer::MaskMode::causal : aotinfer::MaskMode::none;
    const std::string pos = c->pos_encoding ? c->pos_encoding : "none";
    if (pos == "none") config.pos_encoding = aotinfer::PosEncoding::none;
    else if (pos == "rope_llama") config.pos_encoding = aotinfer::PosEncoding::rope_llama;
    else if (pos == "alibi") config.pos_encoding = aotinfer::PosEncoding::alibi;  // BatchPrefill says why not
    else invalid("pos_encoding must be none or rope_llama, got \"" + pos + "\"");
    config.sliding_window = c->sliding_window != 0;
    config.soft_cap = c->soft_cap != 0;
    config.cuda_graph = c->cuda_graph != 0;
    config.max_batch = c->max_batch;
    config.max_total_q = c->max_total_q;
    *out = new aotinfer_batch_prefill{aotinfer::BatchPrefill(package->package, config)};
  });
}

void aotinfer_batch_prefill_destroy(aotinfer_batch_prefill* prefill) { delete prefill; }

aotinfer_status aotinfer_batch_prefill_workspace_sizes(const aotinfer_batch_prefill* prefill, int64_t max_total_q,
                                                       int32_t max_batch, size_t* float_bytes, size_t* int_bytes) {
  if (!prefill || !float_bytes || !int_bytes) return null_argument("prefill, float_bytes and int_bytes");
  return guarded([&] {
    auto sizes = prefill->prefill.workspace_sizes(max_total_q, max_batch);
    *float_bytes = sizes.float_bytes;
    *int_bytes = sizes.int_bytes;
  });
}

aotinfer_status aotinfer_batch_prefill_plan_paged(aotinfer_batch_prefill* prefill, const int32_t* qo_indptr,
                                                  const int32_t* kv_indptr, int32_t batch,
                                                  const int32_t* kv_last_page_len, const int32_t* kv_indices,
                                                  int32_t num_indices, int32_t num_pages, void* float_workspace,
                                                  size_t float_bytes, void* int_workspace, size_t int_bytes,
                                                  void* stream) {
  if (!prefill || !qo_indptr || !kv_indptr || (batch > 0 && !kv_last_page_len))
    return null_argument("prefill, qo_indptr, kv_indptr and kv_last_page_len");
  if (batch < 0 || num_indices < 0) {
    last_error = "batch and num_indices must be >= 0";
    return AOTINFER_INVALID_ARGUMENT;
  }
  return guarded([&] {
    prefill->prefill.plan_paged({qo_indptr, std::size_t(batch) + 1}, {kv_indptr, std::size_t(batch) + 1},
                                {kv_last_page_len, std::size_t(batch)},
                                {kv_indices, kv_indices ? std::size_t(num_indices) : 0}, num_pages,
                                {float_workspace, float_bytes, int_workspace, int_bytes},
                                static_cast<aotinfer::Stream>(stream));
  });
}

aotinfer_status aotinfer_batch_prefill_plan_ragged(aotinfer_batch_prefill* prefill, const int32_t* qo_indptr,
                                                   const int32_t* kv_indptr, int32_t batch, void* float_workspace,
                                                   size_t float_bytes, void* int_workspace, size_t int_bytes,
                                                   void* stream) {
  if (!prefill || !qo_indptr || !kv_indptr) return null_argument("prefill, qo_indptr and kv_indptr");
  if (batch < 0) {
    last_error = "batch must be >= 0";
    return AOTINFER_INVALID_ARGUMENT;
  }
  return guarded([&] {
    prefill->prefill.plan_ragged({qo_indptr, std::size_t(batch) + 1}, {kv_indptr, std::size_t(batch) + 1},
                                 {float_workspace, float_bytes, int_workspace, int_bytes},
                                 static_cast<aotinfer::Stream>(stream));
  });
}

aotinfer_status aotinfer_batch_prefill_run(const aotinfer_batch_prefill* prefill,
                                           const aotinfer_batch_prefill_run_args* a, void* stream) {
  if (!prefill || !a) return null_argument("prefill and args");
  return guarded([&] {
    aotinfer::PrefillRunArgs args;
    args.batch = a->batch;
    args.total_q = a->total_q;
    args.q = a->q;
    args.qo_indptr = a->qo_indptr;
    args.k = a->k;
    args.v = a->v;
    args.kv_indptr = a->kv_indptr;
    args.kv_indices = a->kv_indices;
    args.kv_last_page_len = a->kv_last_page_len;
    args.o = a->o;
    args.lse = a->lse;
    args.sm_scale = a->sm_scale;
    args.logits_soft_cap = a->logits_soft_cap;
    args.rope_scale = a->rope_scale != 0 ? a->rope_scale : 1.f;
    args.rope_theta = a->rope_theta != 0 ? a->rope_theta : 1e4f;
    args.window_left = a->window_left;
    prefill->prefill.run(args, static_cast<aotinfer::Stream>(stream));
  });
}

aotinfer_status aotinfer_batch_prefill_tensors_run(const aotinfer_batch_prefill* prefill,
                                                   const aotinfer_batch_prefill_tensors* tensors,
                                                   const aotinfer_attention_scalars* scalars, void* stream) {
  if (!prefill || !tensors || !scalars) return null_argument("prefill, tensors and scalars");
  return guarded([&] { prefill->prefill.run(*tensors, *scalars, static_cast<aotinfer::Stream>(stream)); });
}

}  // extern "C"
