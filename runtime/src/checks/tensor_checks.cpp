#include "checks/tensor_checks.hpp"

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <string>
#include <tuple>

#include "aotinfer/params/batch_mla_decode.h"

namespace aotinfer::detail {

namespace {

// One expected dimension: its size (or a lower bound) and what it is, for messages.
struct Dim {
  std::int64_t size;
  const char* meaning;
  bool at_least = false;
};

// From which dimension on a tensor must be row-major contiguous: all of it, or all but the
// first (rows or pages may be further apart, e.g. views of a fused tensor).
enum class Packing { contiguous, rows_strided };

std::string shape_text(const aotinfer_tensor& t) {
  std::string s = "[";
  for (int i = 0; i < t.ndim; ++i) s += (i ? ", " : "") + std::to_string(t.shape[i]);
  return s + "]";
}

std::string strides_text(const aotinfer_tensor& t) {
  std::string s = "(";
  for (int i = 0; i < t.ndim; ++i) s += (i ? ", " : "") + std::to_string(t.strides[i]);
  return s + ")";
}

std::string dtype_text(const aotinfer_tensor& t) {
  if (t.dtype >= 0 && t.dtype <= int(DType::u8)) return std::string(dtype_name(DType(t.dtype)));
  const std::string named(t.dtype_name, strnlen(t.dtype_name, sizeof t.dtype_name));
  return named.empty() ? "an unsupported dtype" : named;
}

std::string device_text(std::int32_t type, std::int32_t id) {
  switch (type) {
    case AOTINFER_DEVICE_CPU: return "the CPU";
    case AOTINFER_DEVICE_CUDA: return "cuda:" + std::to_string(id);
    case AOTINFER_DEVICE_CUDA_HOST: return "pinned host memory";
    case AOTINFER_DEVICE_CUDA_MANAGED: return "managed memory";
  }
  return "device type " + std::to_string(type);
}

class Checker {
 public:
  Checker(const char* op, int device) : op_(op), device_(device) {}
  // The device asked of `resolve` when a GPU tensor first needs it: a CPU tensor is refused
  // even where no driver can be loaded.
  Checker(const char* op, DeviceQuery resolve) : op_(op), resolve_(resolve) {}

  [[noreturn]] void fail(const char* name, const std::string& what) const {
    throw Error(ErrorCode::invalid_argument, std::string(op_) + ": " + name + ": " + what);
  }

  bool present(const aotinfer_tensor& t) const { return t.data != nullptr; }

  // A required tensor on the plan's GPU with the dtype, shape and packing asked for, whose
  // data and row strides are `align`-byte aligned.
  void tensor(const aotinfer_tensor& t, const char* name, DType dtype, std::initializer_list<Dim> dims,
              Packing packing = Packing::contiguous, int align = 16) const {
    if (!present(t)) fail(name, "is required (got null / None)");
    if (t.device_type == AOTINFER_DEVICE_CPU || t.device_type == AOTINFER_DEVICE_CUDA_HOST)
      fail(name, "is in " + device_text(t.device_type, t.device_id) + "; aotinfer kernels read GPU memory: move it to the GPU");
    if (t.device_type == AOTINFER_DEVICE_CUDA && t.device_id != device())
      fail(name, "is on cuda:" + std::to_string(t.device_id) + " but the kernels run on cuda:" + std::to_string(device()) +
                     " (the plan's / current device)");
    if (t.device_type != AOTINFER_DEVICE_CUDA && t.device_type != AOTINFER_DEVICE_CUDA_MANAGED)
      fail(name, "is in " + device_text(t.device_type, t.device_id) + ", not GPU memory");
    if (t.dtype != int(dtype))
      fail(name, "expected dtype " + std::string(dtype_name(dtype)) + ", got " + dtype_text(t));
    shape(t, name, dims);
    layout(t, name, packing, std::int64_t(dtype_size(dtype)), align);
  }

  // An optional tensor: absent is fine, present is checked as required.
  void optional(const aotinfer_tensor& t, const char* name, DType dtype, std::initializer_list<Dim> dims, int align = 4) const {
    if (present(t)) tensor(t, name, dtype, dims, Packing::contiguous, align);
  }

 private:
  void shape(const aotinfer_tensor& t, const char* name, std::initializer_list<Dim> dims) const {
    bool fits = t.ndim == int(dims.size());
    for (int i = 0; fits && i < t.ndim; ++i) {
      const Dim& d = dims.begin()[i];
      fits = d.at_least ? t.shape[i] >= d.size : t.shape[i] == d.size;
    }
    if (fits) return;  // the message is built only for a refusal: this runs on every call
    std::string expected = "[", meanings = "(";
    int i = 0;
    for (const Dim& d : dims) {
      expected += (i ? ", " : "") + std::string(d.at_least ? ">= " : "") + std::to_string(d.size);
      meanings += (i++ ? ", " : "") + std::string(d.meaning);
    }
    fail(name, "expected shape " + expected + "] " + meanings + "), got " + shape_text(t));
  }

  void layout(const aotinfer_tensor& t, const char* name, Packing packing, std::int64_t elem, int align) const {
    if (reinterpret_cast<std::uintptr_t>(t.data) % unsigned(align) != 0)
      fail(name, "data must be " + std::to_string(align) + "-byte aligned (the kernels move " + std::to_string(align) +
                     "-byte vectors)");
    std::int64_t step = 1;
    const int first_packed = packing == Packing::contiguous ? 0 : 1;
    for (int i = t.ndim - 1; i >= first_packed; --i) {
      if (t.shape[i] != 1 && t.strides[i] != step)
        fail(name, std::string(packing == Packing::contiguous ? "must be contiguous" : "must be contiguous past its first dimension") +
                       " (call .contiguous()); strides " + strides_text(t) + " for shape " + shape_text(t));
      step *= t.shape[i];
    }
    if (packing == Packing::rows_strided && t.ndim > 0 && t.shape[0] > 1) {
      if (t.strides[0] < step)
        fail(name, "rows overlap: stride " + std::to_string(t.strides[0]) + " of the first dimension is below its " +
                       std::to_string(step) + " elements");
      if (t.strides[0] * elem % align != 0)
        fail(name, "the first dimension's stride must be a multiple of " + std::to_string(align) + " bytes, got " +
                       std::to_string(t.strides[0]) + " elements");
    }
  }

  int device() const {
    if (device_ < 0) device_ = resolve_();
    return device_;
  }

  const char* op_;
  mutable int device_ = -1;
  DeviceQuery resolve_ = nullptr;
};

// The stride between pages (elements) of a pool, the same for K and V.
std::int64_t page_stride(const Checker& check, const aotinfer_tensor& k, const aotinfer_tensor& v, const char* v_name) {
  const std::int64_t stride = k.shape[0] > 1 ? k.strides[0] : 0, v_stride = v.shape[0] > 1 ? v.strides[0] : 0;
  if (stride != v_stride && k.shape[0] > 1)
    check.fail(v_name, "its page stride " + std::to_string(v_stride) + " differs from K's " + std::to_string(stride) +
                           " (the kernels take one page stride for both)");
  return stride;
}

float or_default(float value, float fallback) { return value != 0 ? value : fallback; }

// A run's scalars into decode's or prefill's run arguments, 0 meaning each one's default.
template <typename RunArgs>
void take_scalars(RunArgs& a, const aotinfer_attention_scalars& s) {
  a.sm_scale = s.sm_scale;
  a.logits_soft_cap = s.logits_soft_cap;
  a.rope_scale = or_default(s.rope_scale, 1.f);
  a.rope_theta = or_default(s.rope_theta, 1e4f);
  a.k_scale = or_default(s.k_scale, 1.f);
  a.v_scale = or_default(s.v_scale, 1.f);
}

// The first dimension's stride of a checked rows_strided tensor, 0 (dense) when it has one row.
std::int64_t row_stride(const aotinfer_tensor& t) { return t.ndim > 0 && t.shape[0] > 1 ? t.strides[0] : 0; }

// A custom mask's packed bits and byte offsets (params/batch_prefill.h), required where the
// config asks for one (`custom`, named `setting` in the message otherwise) and refused elsewhere.
struct CustomMask {
  const std::uint8_t* bits = nullptr;
  const std::int32_t* indptr = nullptr;
};
CustomMask custom_mask_args(const Checker& check, const aotinfer_tensor& bits, const aotinfer_tensor& indptr, bool custom,
                            const PlannedShape& plan, const char* setting) {
  if (!custom) {
    if (check.present(bits) || check.present(indptr))
      check.fail(check.present(bits) ? "custom_mask" : "mask_indptr", std::string("is given but ") + setting);
    return {};
  }
  // The kernels read the bits in aligned 4-byte words, so the last mask's word must exist.
  check.tensor(bits, "custom_mask", DType::u8, {{(plan.mask_bytes + 3) / 4 * 4, "the packed masks' bytes rounded up to 4", true}},
               Packing::contiguous, 4);
  check.tensor(indptr, "mask_indptr", DType::i32, {{plan.batch + 1, "batch + 1"}}, Packing::contiguous, 4);
  return {static_cast<const std::uint8_t*>(bits.data), static_cast<const std::int32_t*>(indptr.data)};
}

}  // namespace

DecodeRunArgs decode_run_args(const BatchDecodeConfig& c, const PlannedShape& plan, const aotinfer_batch_decode_tensors& t,
                              const aotinfer_attention_scalars& s) {
  const Checker check("batch_decode.run", plan.device);
  const std::int64_t batch = plan.batch, hq = c.num_qo_heads, hk = c.num_kv_heads, dim = c.head_dim, page = c.page_size;
  // One row per query token: batch, or batch * q_len when each request verifies q_len tokens.
  const Dim tokens = c.q_len == 1 ? Dim{batch, "batch"} : Dim{plan.q_rows, "batch * q_len"};
  // q may be a token-strided view (a slice of a fused qkv tensor); o is written densely.
  check.tensor(t.q, "q", c.dtype_q, {tokens, {hq, "num_qo_heads"}, {dim, "head_dim"}}, Packing::rows_strided);
  check.tensor(t.o, "o", c.dtype_o, {tokens, {hq, "num_qo_heads"}, {dim, "head_dim"}});
  check.optional(t.lse, "lse", DType::f32, {tokens, {hq, "num_qo_heads"}});
  const Dim pages{std::max<std::int64_t>(plan.num_pages, 1), "pages", true};
  const bool nhd = c.layout == KvLayout::nhd;
  for (auto [pool, name] : {std::pair{&t.k_pages, "k_pages"}, {&t.v_pages, "v_pages"}}) {
    if (nhd) check.tensor(*pool, name, c.dtype_kv, {pages, {page, "page_size"}, {hk, "num_kv_heads"}, {dim, "head_dim"}}, Packing::rows_strided);
    else check.tensor(*pool, name, c.dtype_kv, {pages, {hk, "num_kv_heads"}, {page, "page_size"}, {dim, "head_dim"}}, Packing::rows_strided);
  }
  check.tensor(t.kv_indptr, "kv_indptr", DType::i32, {{batch + 1, "batch + 1"}}, Packing::contiguous, 4);
  check.tensor(t.kv_indices, "kv_indices", DType::i32, {{plan.kv_entries, "kv_indptr[batch]", true}}, Packing::contiguous, 4);
  check.tensor(t.kv_last_page_len, "kv_last_page_len", DType::i32, {{batch, "batch"}}, Packing::contiguous, 4);
  check.optional(t.q_positions, "q_positions", DType::i32, {tokens});
  check.optional(t.sinks, "sinks", DType::f32, {{hq, "num_qo_heads"}});

  DecodeRunArgs a;
  a.batch = plan.batch;
  a.q = t.q.data;
  a.q_stride = row_stride(t.q);
  a.k_pages = t.k_pages.data;
  a.v_pages = t.v_pages.data;
  a.kv_stride_page = page_stride(check, t.k_pages, t.v_pages, "v_pages");
  a.kv_indptr = static_cast<const std::int32_t*>(t.kv_indptr.data);
  a.kv_indices = static_cast<const std::int32_t*>(t.kv_indices.data);
  a.kv_last_page_len = static_cast<const std::int32_t*>(t.kv_last_page_len.data);
  a.o = t.o.data;
  a.lse = static_cast<float*>(t.lse.data);
  a.q_positions = static_cast<const std::int32_t*>(t.q_positions.data);
  a.sinks = static_cast<const float*>(t.sinks.data);
  const CustomMask mask = custom_mask_args(check, t.custom_mask, t.mask_indptr, c.custom_mask, plan,
                                           "the decode's config.custom_mask is false");
  a.custom_mask = mask.bits;
  a.mask_indptr = mask.indptr;
  take_scalars(a, s);
  return a;
}

MlaDecodeRunArgs mla_decode_run_args(const BatchMlaDecodeConfig& c, const PlannedShape& plan,
                                     const aotinfer_batch_mla_decode_tensors& t, const aotinfer_mla_scalars& s) {
  const Checker check("batch_mla_decode.run", plan.device);
  const Dim tokens{plan.q_rows, "batch * q_len"}, heads{c.num_heads, "num_heads"};
  const Dim ckv{AOTINFER_MLA_CKV_DIM, "kv_lora_rank 512"}, kpe{AOTINFER_MLA_KPE_DIM, "qk_rope_head_dim 64"};
  // q_nope and q_pe may be token-strided views (slices of one projection); o is written densely.
  check.tensor(t.q_nope, "q_nope", c.dtype, {tokens, heads, ckv}, Packing::rows_strided);
  check.tensor(t.q_pe, "q_pe", c.dtype, {tokens, heads, kpe}, Packing::rows_strided);
  check.tensor(t.o, "o", c.dtype, {tokens, heads, ckv});
  check.optional(t.lse, "lse", DType::f32, {tokens, heads});
  // The pools may be page-strided views (of one [pages, page_size, 576] tensor).
  const Dim pages{std::max<std::int64_t>(plan.num_pages, 1), "pages", true}, page{c.page_size, "page_size"};
  check.tensor(t.ckv, "ckv", mla_cache_dtype(c), {pages, page, ckv}, Packing::rows_strided);
  check.tensor(t.kpe, "kpe", mla_cache_dtype(c), {pages, page, kpe}, Packing::rows_strided);
  check.tensor(t.kv_indices, "kv_indices", DType::i32, {{plan.kv_entries, "kv_indptr[batch]", true}}, Packing::contiguous, 4);

  MlaDecodeRunArgs a;
  a.batch = plan.batch;
  a.q_nope = t.q_nope.data;
  a.q_pe = t.q_pe.data;
  a.q_nope_stride = row_stride(t.q_nope);
  a.q_pe_stride = row_stride(t.q_pe);
  a.ckv = t.ckv.data;
  a.kpe = t.kpe.data;
  a.ckv_stride_page = row_stride(t.ckv);
  a.kpe_stride_page = row_stride(t.kpe);
  a.kv_indices = static_cast<const std::int32_t*>(t.kv_indices.data);
  a.o = t.o.data;
  a.lse = static_cast<float*>(t.lse.data);
  a.sm_scale = s.sm_scale;
  a.ckv_scale = s.ckv_scale != 0 ? s.ckv_scale : 1.f;
  a.kpe_scale = s.kpe_scale != 0 ? s.kpe_scale : 1.f;
  return a;
}

PrefillRunArgs prefill_run_args(const BatchPrefillConfig& c, const PlannedShape& plan, const aotinfer_batch_prefill_tensors& t,
                                const aotinfer_attention_scalars& s) {
  const Checker check("batch_prefill.run", plan.device);
  const std::int64_t batch = plan.batch, rows = plan.q_rows, hq = c.num_qo_heads, hk = c.num_kv_heads;
  const bool paged = c.kv_storage == KvStorage::paged;
  // q and K rows are head_dim wide, V and o rows head_dim_vo wide.
  const Dim dim{c.head_dim, "head_dim"}, vo{c.vo_dim(), "head_dim_vo"};
  // q may be a token-strided view (a slice of a fused qkv tensor); o is written densely.
  check.tensor(t.q, "q", c.dtype_q, {{rows, "total_q", true}, {hq, "num_qo_heads"}, dim}, Packing::rows_strided);
  check.tensor(t.o, "o", c.dtype_o, {{rows, "total_q", true}, {hq, "num_qo_heads"}, vo});
  // lse rows follow o's: a caller with spare rows in o has them in lse too.
  check.optional(t.lse, "lse", DType::f32, {{t.o.shape[0], "o's rows"}, {hq, "num_qo_heads"}});
  check.optional(t.sinks, "sinks", DType::f32, {{hq, "num_qo_heads"}});
  check.tensor(t.qo_indptr, "qo_indptr", DType::i32, {{batch + 1, "batch + 1"}}, Packing::contiguous, 4);
  check.tensor(t.kv_indptr, "kv_indptr", DType::i32, {{batch + 1, "batch + 1"}}, Packing::contiguous, 4);

  PrefillRunArgs a;
  if (paged) {
    const Dim page{c.page_size, "page_size"}, heads{hk, "num_kv_heads"};
    const Dim pages{std::max<std::int64_t>(plan.num_pages, 1), "pages", true};
    for (auto [pool, name, width] : {std::tuple{&t.k, "k", dim}, {&t.v, "v", vo}}) {
      if (c.layout == KvLayout::nhd) check.tensor(*pool, name, c.dtype_kv, {pages, page, heads, width}, Packing::rows_strided);
      else check.tensor(*pool, name, c.dtype_kv, {pages, heads, page, width}, Packing::rows_strided);
    }
    check.tensor(t.kv_indices, "kv_indices", DType::i32, {{plan.kv_entries, "kv_indptr[batch]", true}}, Packing::contiguous, 4);
    check.tensor(t.kv_last_page_len, "kv_last_page_len", DType::i32, {{batch, "batch"}}, Packing::contiguous, 4);
    a.kv_indices = static_cast<const std::int32_t*>(t.kv_indices.data);
    a.kv_last_page_len = static_cast<const std::int32_t*>(t.kv_last_page_len.data);
  } else {
    const Dim tokens{plan.kv_entries, "total_kv", true};
    check.tensor(t.k, "k", c.dtype_kv, {tokens, {hk, "num_kv_heads"}, dim}, Packing::rows_strided);
    check.tensor(t.v, "v", c.dtype_kv, {tokens, {hk, "num_kv_heads"}, vo}, Packing::rows_strided);
  }
  // Each tensor's own page (paged) or token (ragged) stride. Where the widths are equal the
  // kernels step V with K's stride, so the two must agree.
  if (c.vo_dim() == c.head_dim) {
    a.kv_stride = a.v_stride = page_stride(check, t.k, t.v, "v");
  } else {
    a.kv_stride = row_stride(t.k);
    a.v_stride = row_stride(t.v);
  }
  const CustomMask mask = custom_mask_args(check, t.custom_mask, t.mask_indptr, c.mask == MaskMode::custom, plan,
                                           "the prefill's mask is not \"custom\"");
  a.custom_mask = mask.bits;
  a.mask_indptr = mask.indptr;

  a.batch = plan.batch;
  a.total_q = plan.q_rows;
  a.q = t.q.data;
  a.q_stride = row_stride(t.q);
  a.qo_indptr = static_cast<const std::int32_t*>(t.qo_indptr.data);
  a.k = t.k.data;
  a.v = t.v.data;
  a.kv_indptr = static_cast<const std::int32_t*>(t.kv_indptr.data);
  a.o = t.o.data;
  a.lse = static_cast<float*>(t.lse.data);
  a.sinks = static_cast<const float*>(t.sinks.data);
  take_scalars(a, s);
  return a;
}

MergeStateCall merge_state_call(const aotinfer_merge_state_tensors& t, DeviceQuery device) {
  const Checker check("merge_state", device);
  const aotinfer_tensor& va = t.v_a;
  if (!check.present(va)) check.fail("v_a", "is required (got null / None)");
  if (va.ndim < 2 || va.ndim > 3) check.fail("v_a", "expected [rows, head_dim] or [tokens, heads, head_dim], got " + shape_text(va));
  if (va.dtype != AOTINFER_F16 && va.dtype != AOTINFER_BF16) check.fail("v_a", "expected dtype f16 or bf16, got " + dtype_text(va));
  const DType dtype = DType(va.dtype);
  std::int64_t rows = 1;
  for (int i = 0; i + 1 < va.ndim; ++i) rows *= va.shape[i];
  const std::int64_t dim = va.shape[va.ndim - 1];
  for (auto [v, name] : {std::pair{&t.v_a, "v_a"}, {&t.v_b, "v_b"}, {&t.v_out, "v_out"}}) {
    if (va.ndim == 2) check.tensor(*v, name, dtype, {{va.shape[0], "rows"}, {dim, "head_dim"}});
    else check.tensor(*v, name, dtype, {{va.shape[0], "tokens"}, {va.shape[1], "heads"}, {dim, "head_dim"}});
  }
  for (auto [s, name] : {std::pair{&t.s_a, "s_a"}, {&t.s_b, "s_b"}, {&t.s_out, "s_out"}}) {
    if (name == std::string("s_out") && !check.present(*s)) continue;
    if (va.ndim == 2) check.tensor(*s, name, DType::f32, {{va.shape[0], "rows"}}, Packing::contiguous, 4);
    else check.tensor(*s, name, DType::f32, {{va.shape[0], "tokens"}, {va.shape[1], "heads"}}, Packing::contiguous, 4);
  }
  MergeStateCall call{dtype, int(dim), {}};
  call.params = {va.data, static_cast<const float*>(t.s_a.data), t.v_b.data, static_cast<const float*>(t.s_b.data),
                 t.v_out.data, static_cast<float*>(t.s_out.data), rows};
  return call;
}

AppendCall append_paged_kv_call(const aotinfer_append_paged_kv_tensors& t, KvLayout layout, DeviceQuery device) {
  const Checker check("append_paged_kv", device);
  const aotinfer_tensor& pool = t.k_pages;
  if (!check.present(pool)) check.fail("k_pages", "is required (got null / None)");
  if (pool.ndim != 4)
    check.fail("k_pages", std::string("expected a page pool ") +
                              (layout == KvLayout::nhd ? "[pages, page_size, num_kv_heads, head_dim]" : "[pages, num_kv_heads, page_size, head_dim]") +
                              ", got " + shape_text(pool));
  if (pool.dtype < AOTINFER_F16 || pool.dtype > AOTINFER_E5M2)
    check.fail("k_pages", "expected dtype f16, bf16, e4m3 or e5m2, got " + dtype_text(pool));
  const DType dtype = DType(pool.dtype);
  const std::int64_t pages = pool.shape[0], dim = pool.shape[3];
  const std::int64_t page = layout == KvLayout::nhd ? pool.shape[1] : pool.shape[2];
  const std::int64_t heads = layout == KvLayout::nhd ? pool.shape[2] : pool.shape[1];
  for (auto [p, name] : {std::pair{&t.k_pages, "k_pages"}, {&t.v_pages, "v_pages"}}) {
    if (layout == KvLayout::nhd) check.tensor(*p, name, dtype, {{pages, "pages"}, {page, "page_size"}, {heads, "num_kv_heads"}, {dim, "head_dim"}}, Packing::rows_strided);
    else check.tensor(*p, name, dtype, {{pages, "pages"}, {heads, "num_kv_heads"}, {page, "page_size"}, {dim, "head_dim"}}, Packing::rows_strided);
  }
  const std::int64_t nnz = t.k.data ? t.k.shape[0] : 0;
  check.tensor(t.k, "k", dtype, {{nnz, "nnz"}, {heads, "num_kv_heads"}, {dim, "head_dim"}}, Packing::rows_strided);
  check.tensor(t.v, "v", dtype, {{nnz, "nnz"}, {heads, "num_kv_heads"}, {dim, "head_dim"}}, Packing::rows_strided);
  check.tensor(t.batch_indices, "batch_indices", DType::i32, {{nnz, "nnz"}}, Packing::contiguous, 4);
  check.tensor(t.positions, "positions", DType::i32, {{nnz, "nnz"}}, Packing::contiguous, 4);
  const aotinfer_tensor& indptr = t.kv_indptr;
  check.tensor(indptr, "kv_indptr", DType::i32, {{std::max<std::int64_t>(indptr.ndim == 1 ? indptr.shape[0] : 0, 1), "batch + 1"}},
               Packing::contiguous, 4);
  check.tensor(t.kv_indices, "kv_indices", DType::i32, {{0, "pages of the batch", true}}, Packing::contiguous, 4);
  check.tensor(t.kv_last_page_len, "kv_last_page_len", DType::i32, {{indptr.shape[0] - 1, "batch"}}, Packing::contiguous, 4);

  AppendCall call{dtype, int(dim), {}};
  aotinfer_append_paged_kv_params& p = call.params;
  p.k = t.k.data;
  p.v = t.v.data;
  // A single token's stride is meaningless (and may be anything): use the packed one.
  p.k_stride_token = nnz > 1 ? t.k.strides[0] : heads * dim;
  p.v_stride_token = nnz > 1 ? t.v.strides[0] : heads * dim;
  p.batch_indices = static_cast<const std::int32_t*>(t.batch_indices.data);
  p.positions = static_cast<const std::int32_t*>(t.positions.data);
  p.kv.k_pages = t.k_pages.data;
  p.kv.v_pages = t.v_pages.data;
  p.kv.indptr = static_cast<const std::int32_t*>(indptr.data);
  p.kv.indices = static_cast<const std::int32_t*>(t.kv_indices.data);
  p.kv.last_page_len = static_cast<const std::int32_t*>(t.kv_last_page_len.data);
  p.kv.stride_page = page_stride(check, t.k_pages, t.v_pages, "v_pages");
  if (p.kv.stride_page == 0) p.kv.stride_page = page * heads * dim;
  p.kv.stride_token = layout == KvLayout::nhd ? heads * dim : dim;
  p.kv.stride_head = layout == KvLayout::nhd ? dim : page * dim;
  p.kv.page_size = std::int32_t(page);
  p.kv.num_kv_heads = std::int32_t(heads);
  p.nnz = nnz;
  return call;
}

}  // namespace aotinfer::detail
