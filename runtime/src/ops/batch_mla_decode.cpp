#include "aotinfer/batch_mla_decode.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>

#include "aotinfer/merge_state.hpp"
#include "aotinfer/params/batch_mla_decode.h"
#include "aotinfer/params/merge_varlen.h"
#include "planning/decode_work_image.hpp"
#include "loading/driver.hpp"
#include "loading/family_axes.hpp"
#include "planning/plan_inputs.hpp"
#include "planning/plan_upload.hpp"
#include "checks/tensor_checks.hpp"
#include "ops/tensor_map.hpp"

namespace aotinfer {

namespace {

[[noreturn]] void invalid(const std::string& what) { throw Error(ErrorCode::invalid_argument, "batch_mla_decode: " + what); }

using detail::align_up;

constexpr int kCkv = AOTINFER_MLA_CKV_DIM;

// Float states of a split plan: each item's rows (q_len * num_heads) of 512 values and an lse.
std::size_t float_bytes(std::int32_t work, std::int32_t rows) {
  const std::size_t states = std::size_t(work) * rows;
  return align_up(states * kCkv * 4) + align_up(states * 4);
}

// Whether run() gives the kernel the cache's TMA maps: the loaded kernel reads them (its launch
// info says so) and the cache suits its boxes: 16-bit, in pages that 64-key stages tile whole.
bool encodes_cache_maps(const Kernel& kernel, const BatchMlaDecodeConfig& c) {
  const int page = c.page_size;
  return (kernel.launch_info().tile[3] & AOTINFER_MLA_READS_CACHE_MAPS) && mla_cache_dtype(c) == c.dtype &&
         (page % 64 == 0 || page == 8 || page == 16 || page == 32);
}

}  // namespace

struct BatchMlaDecode::Impl {
  BatchMlaDecodeConfig config;
  Kernel decode, merge;
  std::optional<Kernel> seesaw;  // decode_seesaw, where the package's code has it
  DecodePlanLimits limits;
  int tile_rows = 0;

  // The last plan.
  bool planned = false;
  std::int32_t batch = 0, q_len = 0, row_groups = 0;
  DecodeWorkPlan work;
  detail::DecodeWorkLayout layout{0, 0};
  Workspace workspace;
  detail::PlanUpload upload;
  detail::PlannedShape shape;  // what described tensors are checked against

  int row_groups_for(std::int32_t q) const { return (q * config.num_heads + tile_rows - 1) / tile_rows; }
};

void BatchMlaDecode::check_config(const BatchMlaDecodeConfig& c) {
  if (c.dtype != DType::f16 && c.dtype != DType::bf16)
    invalid("dtype must be f16 or bf16, got " + std::string(dtype_name(c.dtype)));
  if (const DType kv = mla_cache_dtype(c); kv != c.dtype && kv != DType::e4m3)
    invalid("dtype_kv (the cache) must be dtype (" + std::string(dtype_name(c.dtype)) + ") or e4m3, got " +
            std::string(dtype_name(kv)));
  if (c.num_heads < 1) invalid("num_heads must be >= 1, got " + std::to_string(c.num_heads));
  if (c.page_size < 1) invalid("page_size must be >= 1, got " + std::to_string(c.page_size));
  if (c.cuda_graph && c.max_batch < 1) invalid("CUDA-graph mode needs max_batch >= 1, got " + std::to_string(c.max_batch));
  if (c.cuda_graph && (c.q_len < 1 || c.q_len > AOTINFER_MLA_MAX_Q_LEN))
    invalid("CUDA-graph mode needs the q_len of every plan, 1.." + std::to_string(AOTINFER_MLA_MAX_Q_LEN) + ", got " +
            std::to_string(c.q_len) + " (the grid's row groups are captured)");
}

VariantKey BatchMlaDecode::variant_key(const BatchMlaDecodeConfig& c) {
  return VariantKey{"batch_mla_decode",
                    {{"dtype", std::string(dtype_name(c.dtype))}, {"dtype_kv", std::string(dtype_name(mla_cache_dtype(c)))}}};
}

BatchMlaDecode::BatchMlaDecode(const Package& package, const BatchMlaDecodeConfig& c) : impl_(std::make_unique<Impl>()) {
  check_config(c);
  Impl& s = *impl_;
  s.config = c;
  detail::check_family_axes(package, variant_key(c));
  s.decode = package.kernel(variant_key(c), "decode");
  // The seesaw schedule: a second entry (packages built before it lack it), served where its
  // launch info says so (the Hopper code of 16-bit caches); same params, plans and geometry.
  const auto& entries = package.find(variant_key(c)).entries;
  if (std::any_of(entries.begin(), entries.end(), [](const auto& e) { return e.name == "decode_seesaw"; })) {
    Kernel k = package.kernel(variant_key(c), "decode_seesaw");
    if (k.launch_info().tile[3] & AOTINFER_MLA_SEESAW) s.seesaw = std::move(k);
  }
  s.merge = package.kernel(MergeState::variant_key(c.dtype, kCkv), "merge_varlen");
  const aotinfer_launch_info& info = s.decode.launch_info();
  if (int(info.tile[2]) != kCkv)
    invalid("variant " + s.decode.uri() + " is built for latent width " + std::to_string(info.tile[2]) + ", not " +
            std::to_string(kCkv));
  s.tile_rows = int(info.tile[0]);
  s.limits.num_sms = detail::current_device_sm_count();
  s.limits.ctas_per_sm = s.decode.max_active_ctas_per_sm();
  s.limits.tile_tokens = int(info.tile[1]);
  s.limits.ctas_per_item = s.row_groups_for(c.cuda_graph ? c.q_len : 1);
  if (s.limits.ctas_per_sm < 1) invalid(s.decode.uri() + " cannot be resident on this GPU (occupancy 0)");
  if (c.cuda_graph) s.limits.graph_work = decode_max_work(c.max_batch, s.limits);
}

BatchMlaDecode::~BatchMlaDecode() = default;
BatchMlaDecode::BatchMlaDecode(BatchMlaDecode&&) noexcept = default;
BatchMlaDecode& BatchMlaDecode::operator=(BatchMlaDecode&&) noexcept = default;

const DecodeWorkPlan& BatchMlaDecode::work_plan() const { return impl_->work; }
const BatchMlaDecodeConfig& BatchMlaDecode::config() const { return impl_->config; }

WorkspaceSizes BatchMlaDecode::workspace_sizes(std::int32_t max_batch, std::int32_t max_q_len) const {
  const Impl& s = *impl_;
  if (s.config.cuda_graph)
    return {float_bytes(s.limits.graph_work, s.config.q_len * s.config.num_heads),
            detail::DecodeWorkLayout(s.limits.graph_work, s.config.max_batch).end};
  if (max_batch < 1) invalid("max_batch must be >= 1, got " + std::to_string(max_batch));
  if (max_q_len < 1 || max_q_len > AOTINFER_MLA_MAX_Q_LEN)
    invalid("max_q_len must be 1.." + std::to_string(AOTINFER_MLA_MAX_Q_LEN) + ", got " + std::to_string(max_q_len));
  // Fewer tokens mean fewer CTAs per item and so more items a wave: the sizes are the largest
  // over every q_len up to max_q_len.
  std::int32_t work = 0;
  std::size_t floats = 0;
  for (std::int32_t q = 1; q <= max_q_len; ++q) {
    DecodePlanLimits limits = s.limits;
    limits.ctas_per_item = s.row_groups_for(q);
    const std::int32_t w = decode_max_work(max_batch, limits);
    work = std::max(work, w);
    floats = std::max(floats, float_bytes(w, q * s.config.num_heads));
  }
  return {floats, detail::DecodeWorkLayout(work, max_batch).end};
}

void BatchMlaDecode::plan(std::span<const std::int32_t> kv_indptr, std::span<const std::int32_t> kv_last_page_len,
                          std::span<const std::int32_t> kv_indices, std::int32_t num_pages, std::int32_t q_len,
                          const Workspace& ws, Stream stream) {
  Impl& s = *impl_;
  s.planned = false;  // a failed plan leaves nothing runnable
  if (q_len < 1 || q_len > AOTINFER_MLA_MAX_Q_LEN)
    invalid("q_len (new tokens per request) must be 1.." + std::to_string(AOTINFER_MLA_MAX_Q_LEN) + ", got " +
            std::to_string(q_len));
  const BatchMlaDecodeConfig& c = s.config;
  if (c.cuda_graph && q_len != c.q_len)
    invalid("q_len " + std::to_string(q_len) + " differs from this CUDA-graph decode's " + std::to_string(c.q_len) +
            " (the captured grid holds its row groups)");
  const std::vector<std::int32_t> lengths = decode_kv_lengths(kv_indptr, kv_last_page_len, c.page_size);
  const std::int32_t batch = std::int32_t(lengths.size());
  if (c.cuda_graph && batch > c.max_batch)
    invalid("batch " + std::to_string(batch) + " exceeds max_batch " + std::to_string(c.max_batch) +
            " of this CUDA-graph decode");
  for (std::int32_t i = 0; i < batch; ++i)
    if (lengths[i] > 0 && lengths[i] < q_len)
      invalid("request " + std::to_string(i) + " has " + std::to_string(lengths[i]) + " keys, fewer than its " +
              std::to_string(q_len) + " new tokens (whose keys are the last of the cache)");
  detail::check_page_ids("batch_mla_decode", kv_indptr, kv_indices, num_pages);

  s.limits.ctas_per_item = s.row_groups_for(q_len);
  plan_decode_work(lengths, s.limits, s.work);
  // In CUDA-graph mode the arrays sit where the capacities put them, so every plan uses the
  // addresses the captured launches read.
  const detail::DecodeWorkLayout layout = c.cuda_graph ? detail::DecodeWorkLayout(s.limits.graph_work, c.max_batch)
                                                       : detail::DecodeWorkLayout(s.work.padded_work, batch);
  const std::size_t need_float = s.work.split ? float_bytes(s.work.padded_work, q_len * c.num_heads) : 0;
  detail::check_workspace("batch_mla_decode", ws, layout.end, need_float);

  char* image = s.upload.image(layout.end);
  detail::write_decode_work(image, layout, s.work, batch, kv_indptr, lengths);
  s.upload.send(ws.int_buffer, layout.end, stream);

  s.batch = batch;
  s.q_len = q_len;
  s.row_groups = s.row_groups_for(q_len);
  s.layout = layout;
  s.workspace = ws;
  s.shape.device = detail::current_device_ordinal();
  s.shape.batch = batch;
  s.shape.q_rows = std::int64_t(batch) * q_len;
  s.shape.kv_entries = kv_indptr.back();
  s.shape.num_pages = kv_indices.empty() ? 0 : num_pages;
  s.planned = true;
}

void BatchMlaDecode::run(const aotinfer_batch_mla_decode_tensors& t, const aotinfer_mla_scalars& scalars,
                         Stream stream) const {
  if (!impl_->planned) invalid("run() needs a successful plan() first");
  run(detail::mla_decode_run_args(impl_->config, impl_->shape, t, scalars), stream);
}

void BatchMlaDecode::run(const MlaDecodeRunArgs& a, Stream stream) const {
  const Impl& s = *impl_;
  const BatchMlaDecodeConfig& c = s.config;
  if (!s.planned) invalid("run() needs a successful plan() first");
  if (a.batch != s.batch)
    invalid("run() got batch " + std::to_string(a.batch) + " but the plan was made for " + std::to_string(s.batch) + "; plan again");
  if (!a.q_nope || !a.q_pe || !a.ckv || !a.kpe || !a.kv_indices || !a.o)
    invalid("q_nope, q_pe, ckv, kpe, kv_indices and o must not be null");
  for (auto [name, ptr] : {std::pair{"q_nope", a.q_nope}, {"q_pe", a.q_pe}, {"ckv", a.ckv}, {"kpe", a.kpe}, {"o", static_cast<const void*>(a.o)}})
    if (reinterpret_cast<std::uintptr_t>(ptr) % 16 != 0) invalid(std::string(name) + " must be 16-byte aligned (the kernel moves 16-byte vectors)");
  if (!(a.sm_scale > 0)) invalid("sm_scale must be > 0 (MLA scales by the head_dim before absorption, e.g. 1 / sqrt(192))");
  const bool fp8 = mla_cache_dtype(c) == DType::e4m3;
  for (auto [name, scale] : {std::pair{"ckv_scale", a.ckv_scale}, {"kpe_scale", a.kpe_scale}}) {
    if (fp8 && !(std::isfinite(scale) && scale > 0))
      invalid(std::string(name) + " must be finite and > 0 (the fp8 cache's dequantisation scale), got " + std::to_string(scale));
    if (!fp8 && scale != 1)
      invalid(std::string(name) + " must be 1 for a 16-bit cache (scales dequantise an e4m3 cache), got " + std::to_string(scale));
  }
  const std::int64_t kv_align = 16 / std::int64_t(dtype_size(mla_cache_dtype(c)));  // elements a 16-byte vector
  const std::int64_t nope_row = std::int64_t(c.num_heads) * kCkv, pe_row = std::int64_t(c.num_heads) * AOTINFER_MLA_KPE_DIM;
  for (auto [name, stride, least] : {std::tuple{"q_nope_stride", a.q_nope_stride, nope_row}, {"q_pe_stride", a.q_pe_stride, pe_row}})
    if (stride != 0 && (stride < least || stride % 8 != 0))
      invalid(std::string(name) + " must be 0 (dense) or a multiple of 8 elements of at least " + std::to_string(least) +
              ", got " + std::to_string(stride));
  const std::int64_t ckv_page = std::int64_t(c.page_size) * kCkv, kpe_page = std::int64_t(c.page_size) * AOTINFER_MLA_KPE_DIM;
  for (auto [name, stride, least] : {std::tuple{"ckv_stride_page", a.ckv_stride_page, ckv_page}, {"kpe_stride_page", a.kpe_stride_page, kpe_page}})
    if (stride != 0 && (stride < least || stride % kv_align != 0))
      invalid(std::string(name) + " must be 0 (dense) or a multiple of " + std::to_string(kv_align) +
              " elements (16 bytes) of at least " + std::to_string(least) + ", got " + std::to_string(stride));
  if (s.batch == 0) return;

  const char* ints = static_cast<const char*>(s.workspace.int_buffer);
  auto int_array = [&](std::size_t offset) { return reinterpret_cast<const std::int32_t*>(ints + offset); };
  const std::int32_t rows = s.q_len * c.num_heads;

  aotinfer_batch_mla_decode_params p{};
  p.q_nope = a.q_nope;
  p.q_pe = a.q_pe;
  p.q_nope_stride_token = a.q_nope_stride != 0 ? a.q_nope_stride : nope_row;
  p.q_pe_stride_token = a.q_pe_stride != 0 ? a.q_pe_stride : pe_row;
  p.ckv = a.ckv;
  p.kpe = a.kpe;
  p.ckv_stride_page = a.ckv_stride_page != 0 ? a.ckv_stride_page : ckv_page;
  p.kpe_stride_page = a.kpe_stride_page != 0 ? a.kpe_stride_page : kpe_page;
  p.kv_indices = a.kv_indices;
  p.o = a.o;
  p.lse = a.lse;
  detail::point_at_work(p, s.layout, s.workspace.int_buffer);
  const std::size_t states = std::size_t(s.work.padded_work) * rows;
  if (s.work.split) {
    p.partial_o = static_cast<float*>(s.workspace.float_buffer);
    p.partial_lse = reinterpret_cast<float*>(static_cast<char*>(s.workspace.float_buffer) + align_up(states * kCkv * 4));
  }
  p.page_size = c.page_size;
  p.num_heads = c.num_heads;
  p.q_len = s.q_len;
  p.sm_scale = a.sm_scale;
  p.ckv_scale = a.ckv_scale;
  p.kpe_scale = a.kpe_scale;
  // Full row groups (128 heads, or 64 x 2 tokens...) are compute-bound: the seesaw's schedule
  // keeps the tensor cores busy through each softmax. Fewer rows are bound by the copies, which
  // decode's schedule keeps more of in flight (docs/PERF.md).
  const Kernel& kernel = s.seesaw && rows >= s.tile_rows ? *s.seesaw : s.decode;
  if (encodes_cache_maps(kernel, c)) {
    p.ckv_map = detail::paged_tensor_map(c.dtype, p.ckv, kCkv, c.page_size, p.ckv_stride_page);
    p.kpe_map = detail::paged_tensor_map(c.dtype, p.kpe, AOTINFER_MLA_KPE_DIM, c.page_size, p.kpe_stride_page);
    p.cache_maps_encoded = 1;
  }
  kernel.launch(Grid{unsigned(s.work.padded_work), unsigned(s.row_groups)}, p, stream);
  if (!s.work.split) return;

  // Every request's item states (rows of q_len * num_heads) into its rows of o. In CUDA-graph
  // mode the grid covers max_batch requests and the batch comes from the device.
  aotinfer_merge_varlen_params m{};
  m.v = p.partial_o;
  m.s = p.partial_lse;
  m.indptr = int_array(s.layout.merge_indptr);
  m.num_outputs_device = c.cuda_graph ? int_array(s.layout.counts) + 1 : nullptr;
  m.v_out = a.o;
  m.s_out = a.lse;
  m.num_outputs = c.cuda_graph ? c.max_batch : s.batch;
  m.num_heads = rows;
  const std::int64_t per_cta = s.merge.launch_info().tile[0];
  s.merge.launch(Grid{unsigned((std::int64_t(m.num_outputs) * rows + per_cta - 1) / per_cta)}, m, stream);
}

}  // namespace aotinfer
