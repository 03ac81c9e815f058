#include "aotinfer/batch_prefill.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "aotinfer/decode_plan.hpp"
#include "aotinfer/merge_state.hpp"
#include "aotinfer/params/batch_prefill.h"
#include "aotinfer/params/merge_varlen.h"
#include "loading/driver.hpp"
#include "loading/family_axes.hpp"
#include "planning/plan_inputs.hpp"
#include "planning/plan_upload.hpp"
#include "planning/prefill_layout.hpp"
#include "checks/tensor_checks.hpp"
#include "ops/tensor_map.hpp"

namespace aotinfer {

namespace {

[[noreturn]] void invalid(const std::string& what) { throw Error(ErrorCode::invalid_argument, "batch_prefill: " + what); }

using detail::align_up;
using detail::PrefillIntLayout;

// The split-KV states: partial o rows (head_dim_vo wide), then their LSEs.
std::size_t float_bytes(std::int64_t states, int head_dim_vo) {
  return align_up(std::size_t(states) * head_dim_vo * 4) + align_up(std::size_t(states) * 4);
}

// The TMA maps of q and ragged K/V for a kernel that reads through them (paged kernels read
// q's only). A map stops at the tensor's end, not a request's: a tile's last box may read the
// next request's rows (which the kernel masks), and the maps end at the plan's total_q and
// kv_indptr[batch] rows, so that rows past the batch (perhaps never written, NaN) land as zeros
// and weigh nothing in P V. Not in CUDA-graph mode, where later plans replay this launch with
// other ends; nor where the group size does not divide the tile (q's box is a whole tile of
// packed rows).
void encode_tensor_maps(aotinfer_batch_prefill_params& p, const aotinfer_launch_info& info, const BatchPrefillConfig& c,
                        std::int64_t total_q, std::int64_t total_kv) {
  const int tile_rows = int(info.tile[0]), kv_tile = int(info.tile[1]), group = c.num_qo_heads / c.num_kv_heads;
  const bool ragged = c.kv_storage == KvStorage::ragged;
  if (!(info.tile[3] & AOTINFER_PREFILL_READS_TENSOR_MAPS) || c.cuda_graph || tile_rows % group != 0 ||
      total_q == 0 || (ragged && total_kv == 0))
    return;
  p.q_map = detail::rows_tensor_map(c.dtype_q, p.q, total_q, c.num_qo_heads, c.head_dim, p.q_stride_token, group,
                                    tile_rows / group);
  if (ragged && dtype_size(c.dtype_kv) == 2) {  // fp8 rows are widened by the kernel, never read by TMA
    p.k_map = detail::rows_tensor_map(c.dtype_kv, p.ragged.k, total_kv, c.num_kv_heads, c.head_dim,
                                      p.ragged.stride_token, 1, kv_tile);
    p.v_map = detail::rows_tensor_map(c.dtype_kv, p.ragged.v, total_kv, c.num_kv_heads, c.vo_dim(), p.v_stride_token,
                                      1, kv_tile);
  }
  p.tensor_maps_encoded = 1;
}

}  // namespace

struct BatchPrefill::Impl {
  BatchPrefillConfig config;
  // The large tile's plain entry (masks none and causal) and its general one (windows, soft caps
  // and custom masks too); the small tile's one entry serves every feature
  // (templates/batch_prefill.cuh).
  Kernel large, large_general, small, merge;
  PrefillPlanLimits limits;
  PrefillCapacity graph_capacity;  // CUDA-graph mode

  // The last plan.
  bool planned = false;
  std::int32_t batch = 0;
  std::int64_t total_q = 0;
  PrefillWorkPlan work;  // the scalars; the arrays are in `image` (work_plan() copies them out)
  bool work_arrays = false;  // whether work's vectors hold the arrays of the last plan
  PrefillIntLayout layout{0, 0};
  char* image = nullptr;  // the pinned image of the int workspace, valid until the next plan
  std::int64_t state_capacity = 0;
  Workspace workspace;
  detail::PlannedShape shape;  // what described tensors are checked against
  detail::PlanUpload upload;
  // The last plan's inputs, for work_plan() (an unsplit plan uploads no key ranges).
  std::vector<std::int32_t> qo_indptr, kv_lengths;
};

void BatchPrefill::check_config(const BatchPrefillConfig& c) {
  detail::check_head_counts("batch_prefill", c.num_qo_heads, c.num_kv_heads);
  if (c.kv_storage == KvStorage::paged && c.page_size < 1) invalid("page_size must be >= 1, got " + std::to_string(c.page_size));
  if (c.kv_storage == KvStorage::ragged && c.layout != KvLayout::nhd)
    invalid("ragged K/V are [total_kv, num_kv_heads, head_dim] (layout nhd); hnd applies to page pools only");
  if (c.cuda_graph && (c.max_batch < 1 || c.max_total_q < 1))
    invalid("CUDA-graph mode needs max_batch >= 1 and max_total_q >= 1");
  detail::check_kv_split("batch_prefill", c.kv_split, c.cuda_graph, c.max_kv_len);
  if (c.head_dim_vo < 0) invalid("head_dim_vo must be 0 (head_dim) or >= 1, got " + std::to_string(c.head_dim_vo));
  // The kernels of unequal widths keep the plain 16-bit path: no fp8 widening, no RoPE (MLA
  // models rotate a 64-wide part of q and k before attention).
  if (c.vo_dim() != c.head_dim && (c.pos_encoding == PosEncoding::rope_llama || dtype_size(c.dtype_kv) == 1))
    invalid("head_dim_vo != head_dim (MLA prefill, 192/128) is served with 16-bit K/V and pos_encoding none, got dtype_kv " +
            std::string(dtype_name(c.dtype_kv)) + " and pos_encoding " + pos_encoding_name(c.pos_encoding) +
            " at head_dim " + std::to_string(c.head_dim) + " / head_dim_vo " + std::to_string(c.vo_dim()));
}

VariantKey BatchPrefill::variant_key(const BatchPrefillConfig& c) {
  return VariantKey{c.kv_storage == KvStorage::paged ? "batch_prefill_paged" : "batch_prefill_ragged",
                    {{"dtype_q", std::string(dtype_name(c.dtype_q))},
                     {"head_dim", std::to_string(c.head_dim)},
                     {"dtype_kv", std::string(dtype_name(c.dtype_kv))},
                     {"dtype_o", std::string(dtype_name(c.dtype_o))},
                     // ALiBi is a run-time bias of the general entries: the none variant serves it.
                     {"pos_encoding", pos_encoding_name(c.pos_encoding == PosEncoding::alibi ? PosEncoding::none
                                                                                              : c.pos_encoding)},
                     {"head_dim_vo", std::to_string(c.vo_dim())}}};
}

BatchPrefill::BatchPrefill(const Package& package, const BatchPrefillConfig& c) : impl_(std::make_unique<Impl>()) {
  check_config(c);
  Impl& s = *impl_;
  s.config = c;
  const VariantKey key = variant_key(c);
  detail::check_family_axes(package, key);
  s.large = package.kernel(key, "prefill");
  s.small = package.kernel(key, "prefill_small");
  // Packages built before the general entry serve every feature through their plain one.
  const auto& entries = package.find(key).entries;
  const bool has_general = std::any_of(entries.begin(), entries.end(), [](const auto& e) { return e.name == "prefill_general"; });
  s.large_general = has_general ? package.kernel(key, "prefill_general") : s.large;
  if (std::memcmp(s.large.launch_info().tile, s.large_general.launch_info().tile, sizeof s.large.launch_info().tile) != 0)
    invalid("variant " + s.large.uri() + ": entries prefill and prefill_general have different tiles (a package built "
            "from mismatched templates); rebuild it");
  s.merge = package.kernel(MergeState::variant_key(c.dtype_o, c.vo_dim()), "merge_varlen");  // merges o rows

  const aotinfer_launch_info& info = s.large.launch_info();
  if (int(info.tile[2]) != c.head_dim)
    invalid("variant " + s.large.uri() + " is built for head_dim " + std::to_string(info.tile[2]) + ", the config says " +
            std::to_string(c.head_dim));
  s.shape.device = detail::current_device_ordinal();
  s.limits.num_sms = detail::current_device_sm_count();
  s.limits.num_kv_heads = c.num_kv_heads;
  s.limits.num_qo_heads = c.num_qo_heads;
  // Plans hold for both large entries: a soft cap, a run argument, picks the entry per run.
  s.limits.large = {int(info.tile[0]), std::min(s.large.max_active_ctas_per_sm(), s.large_general.max_active_ctas_per_sm())};
  s.limits.small = {int(s.small.launch_info().tile[0]), s.small.max_active_ctas_per_sm()};
  s.limits.kv_tile_tokens = int(info.tile[1]);
  s.limits.causal = c.mask == MaskMode::causal;
  if (s.limits.large.ctas_per_sm < 1 || s.limits.small.ctas_per_sm < 1)
    invalid(s.large.uri() + " cannot be resident on this GPU (occupancy 0)");
  s.limits.kv_split = c.kv_split;
  s.limits.window_left = c.window_left;
  if (c.cuda_graph) {
    s.limits.graph_work = 1;  // marks graph mode for prefill_capacity: large tile only
    s.graph_capacity = prefill_capacity(c.max_total_q, c.max_batch, s.limits, c.max_kv_len);
    s.limits.graph_work = std::int32_t(s.graph_capacity.work);
  }
}

BatchPrefill::~BatchPrefill() = default;
BatchPrefill::BatchPrefill(BatchPrefill&&) noexcept = default;
BatchPrefill& BatchPrefill::operator=(BatchPrefill&&) noexcept = default;

const PrefillWorkPlan& BatchPrefill::work_plan() const {
  // plan() writes the arrays straight into the upload image, which stays until the next plan;
  // they are copied out only for callers that look at them.
  Impl& s = *impl_;
  if (s.planned && !s.work_arrays) {
    copy_work_arrays(s.layout.arrays(s.image), s.qo_indptr, s.kv_lengths, s.limits, s.work);
    s.work_arrays = true;
  }
  return s.work;
}
const PrefillPlanLimits& BatchPrefill::limits() const { return impl_->limits; }
const BatchPrefillConfig& BatchPrefill::config() const { return impl_->config; }

WorkspaceSizes BatchPrefill::workspace_sizes(std::int64_t max_total_q, std::int32_t max_batch, std::int64_t max_kv_len) const {
  const Impl& s = *impl_;
  const PrefillCapacity cap =
      s.config.cuda_graph ? s.graph_capacity : prefill_capacity(max_total_q, max_batch, s.limits, max_kv_len);
  return {float_bytes(cap.states, s.config.vo_dim()), PrefillIntLayout(cap.work, cap.outputs).bytes};
}

void BatchPrefill::plan_paged(std::span<const std::int32_t> qo_indptr, std::span<const std::int32_t> kv_indptr,
                              std::span<const std::int32_t> kv_last_page_len, std::span<const std::int32_t> kv_indices,
                              std::int32_t num_pages, const Workspace& ws, Stream stream) {
  const BatchPrefillConfig& c = impl_->config;
  impl_->planned = false;
  if (c.kv_storage != KvStorage::paged) invalid("plan_paged() on a prefill configured for ragged KV (use plan_ragged)");
  impl_->kv_lengths = decode_kv_lengths(kv_indptr, kv_last_page_len, c.page_size);
  detail::check_page_ids("batch_prefill", kv_indptr, kv_indices, num_pages);
  plan_lengths(qo_indptr, impl_->kv_lengths, ws, stream);
  impl_->shape.kv_entries = kv_indptr.back();
  impl_->shape.num_pages = kv_indices.empty() ? 0 : num_pages;
}

void BatchPrefill::plan_ragged(std::span<const std::int32_t> qo_indptr, std::span<const std::int32_t> kv_indptr,
                               const Workspace& ws, Stream stream) {
  impl_->planned = false;
  if (impl_->config.kv_storage != KvStorage::ragged)
    invalid("plan_ragged() on a prefill configured for paged KV (use plan_paged)");
  lengths_from_indptr(kv_indptr, "kv_indptr", impl_->kv_lengths);
  plan_lengths(qo_indptr, impl_->kv_lengths, ws, stream);
  impl_->shape.kv_entries = kv_indptr.back();
  impl_->shape.num_pages = 0;
}

void BatchPrefill::plan_lengths(std::span<const std::int32_t> qo_indptr, std::span<const std::int32_t> kv_lengths,
                                const Workspace& ws, Stream stream) {
  Impl& s = *impl_;
  const BatchPrefillConfig& c = s.config;
  s.planned = false;  // a failed plan leaves nothing runnable
  if (qo_indptr.empty()) invalid("qo_indptr must have batch + 1 entries, got an empty array");
  const std::int32_t batch = std::int32_t(qo_indptr.size() - 1);
  const std::int64_t total_q = qo_indptr.back();
  if (total_q * c.num_qo_heads > INT32_MAX) invalid("total_q * num_qo_heads must stay below 2^31");
  if (c.cuda_graph && (batch > c.max_batch || total_q > c.max_total_q))
    invalid("batch " + std::to_string(batch) + " with " + std::to_string(total_q) + " query tokens exceeds this CUDA-graph prefill's max_batch " +
            std::to_string(c.max_batch) + " / max_total_q " + std::to_string(c.max_total_q));

  // The planner writes the arrays straight into the pinned image of the int workspace, which it
  // asks for once the sizes are known; the checks come first, so a refusal copies nothing.
  PrefillIntLayout layout{0, 0};
  std::int64_t states = 0;
  char* image = nullptr;
  s.work_arrays = false;
  plan_prefill_work(qo_indptr, kv_lengths, s.limits, s.work, [&](const PrefillWorkPlan& w) {
    layout = c.cuda_graph ? PrefillIntLayout(s.graph_capacity.work, s.graph_capacity.outputs)
                          : PrefillIntLayout(w.padded_work, w.num_outputs());
    states = c.cuda_graph ? s.graph_capacity.states : w.num_states;
    if (w.num_states > states || (c.cuda_graph && w.num_outputs() > s.graph_capacity.outputs))
      invalid("this batch's split states exceed the CUDA-graph capacity (a request is longer than max_kv_len)");
    const std::size_t need_float = states > 0 ? float_bytes(states, c.vo_dim()) : 0;
    detail::check_workspace("batch_prefill", ws, layout.bytes, need_float);
    // Not cleared: the planner writes every array entry the kernels read, and they read no
    // other byte (not the gaps between the 256-byte aligned arrays, nor the split-only arrays of
    // an unsplit plan, which uploads only the arrays before them, nor in CUDA-graph mode the
    // merge entries past num_outputs, which the merge skips).
    image = s.upload.raw_image(layout.bytes);
    return layout.arrays(image);
  });
  layout.write_counts(image, s.work);
  s.qo_indptr.assign(qo_indptr.begin(), qo_indptr.end());
  s.upload.send(ws.int_buffer, s.work.split ? layout.bytes : layout.unsplit_bytes, stream);

  s.batch = batch;
  s.total_q = total_q;
  s.shape.mask_bytes = 0;
  if (c.mask == MaskMode::custom)
    for (std::int32_t i = 0; i < batch; ++i)
      s.shape.mask_bytes += (std::int64_t(qo_indptr[i + 1] - qo_indptr[i]) * s.kv_lengths[i] + 7) / 8;
  s.shape.batch = batch;
  s.shape.q_rows = total_q;
  s.layout = layout;
  s.image = image;
  s.state_capacity = states;
  s.workspace = ws;
  s.planned = true;
}

void BatchPrefill::run(const aotinfer_batch_prefill_tensors& t, const aotinfer_attention_scalars& s, Stream stream) const {
  if (!impl_->planned) invalid("run() needs a successful plan first");
  run(detail::prefill_run_args(impl_->config, impl_->shape, t, s), stream);
}

void BatchPrefill::run(const PrefillRunArgs& a, Stream stream) const {
  const Impl& s = *impl_;
  const BatchPrefillConfig& c = s.config;
  const bool paged = c.kv_storage == KvStorage::paged;
  if (!s.planned) invalid("run() needs a successful plan first");
  if (a.batch != s.batch || a.total_q != s.total_q)
    invalid("run() got batch " + std::to_string(a.batch) + " with " + std::to_string(a.total_q) +
            " query tokens but the plan was made for " + std::to_string(s.batch) + " with " + std::to_string(s.total_q) +
            "; plan again");
  if (!a.q || !a.qo_indptr || !a.k || !a.v || !a.kv_indptr || !a.o)
    invalid("q, qo_indptr, k, v, kv_indptr and o must not be null");
  if (paged && (!a.kv_indices || !a.kv_last_page_len)) invalid("paged KV needs kv_indices and kv_last_page_len");
  for (auto [name, ptr] : {std::pair{"q", a.q}, {"k", a.k}, {"v", a.v}, {"o", static_cast<const void*>(a.o)}})
    if (reinterpret_cast<std::uintptr_t>(ptr) % 16 != 0)
      invalid(std::string(name) + " must be 16-byte aligned (the kernel moves 16-byte vectors)");
  if (c.mask == MaskMode::custom && (!a.custom_mask || !a.mask_indptr))
    invalid("a custom mask needs custom_mask and mask_indptr");
  if (c.mask == MaskMode::custom && reinterpret_cast<std::uintptr_t>(a.custom_mask) % 4 != 0)
    invalid("custom_mask must be 4-byte aligned (the kernels read it in 4-byte words)");
  for (auto [name, stride] : {std::pair{"kv_stride", a.kv_stride}, {"v_stride", a.v_stride}})
    if (stride < 0 || stride * std::int64_t(dtype_size(c.dtype_kv)) % 16 != 0)
      invalid(std::string(name) + " must be a non-negative multiple of 16 bytes, got " + std::to_string(stride) + " elements");
  // Where the widths are equal the kernels step V's keys with K's strides (only V's base is its own).
  const std::int64_t packed_k = std::int64_t(paged ? c.page_size : 1) * c.num_kv_heads * c.head_dim;
  if (c.vo_dim() == c.head_dim && a.v_stride != 0 && a.v_stride != (a.kv_stride != 0 ? a.kv_stride : packed_k))
    invalid("v_stride " + std::to_string(a.v_stride) + " differs from K's " +
            std::to_string(a.kv_stride != 0 ? a.kv_stride : packed_k) +
            " where head_dim_vo == head_dim: the kernels step V with K's strides there (pass 0)");
  const std::int64_t q_row = std::int64_t(c.num_qo_heads) * c.head_dim;
  if (a.q_stride != 0 && (a.q_stride < q_row || a.q_stride * std::int64_t(dtype_size(c.dtype_q)) % 16 != 0))
    invalid("q_stride must be 0 (dense) or a multiple of 16 bytes of at least num_qo_heads * head_dim = " +
            std::to_string(q_row) + " elements, got " + std::to_string(a.q_stride));
  if (s.work.padded_work == 0) return;  // no query tokens

  const char* ints = static_cast<const char*>(s.workspace.int_buffer);
  auto int_array = [&](std::size_t offset) { return reinterpret_cast<const std::int32_t*>(ints + offset); };
  const std::int64_t heads = c.num_kv_heads, dim = c.head_dim, vo = c.vo_dim();
  const bool same_width = vo == dim;

  aotinfer_batch_prefill_params p{};
  p.q = a.q;
  p.q_stride_token = a.q_stride != 0 ? a.q_stride : q_row;
  p.qo_indptr = a.qo_indptr;
  if (paged) {
    const std::int64_t page = c.page_size;
    p.paged.k_pages = const_cast<void*>(a.k);
    p.paged.v_pages = const_cast<void*>(a.v);
    p.paged.indptr = a.kv_indptr;
    p.paged.indices = a.kv_indices;
    p.paged.last_page_len = a.kv_last_page_len;
    p.paged.stride_page = a.kv_stride != 0 ? a.kv_stride : page * heads * dim;
    p.paged.stride_token = c.layout == KvLayout::nhd ? heads * dim : dim;
    p.paged.stride_head = c.layout == KvLayout::nhd ? dim : page * dim;
    p.paged.page_size = c.page_size;
    p.paged.num_kv_heads = c.num_kv_heads;
    // V's pool in the same layout, rows head_dim_vo wide.
    p.v_stride_page = a.v_stride != 0 ? a.v_stride : same_width ? p.paged.stride_page : page * heads * vo;
    p.v_stride_token = c.layout == KvLayout::nhd ? heads * vo : vo;
    p.v_stride_head = c.layout == KvLayout::nhd ? vo : page * vo;
  } else {
    p.ragged.k = a.k;
    p.ragged.v = a.v;
    p.ragged.indptr = a.kv_indptr;
    p.ragged.stride_token = a.kv_stride != 0 ? a.kv_stride : heads * dim;
    p.ragged.stride_head = dim;
    p.ragged.num_kv_heads = c.num_kv_heads;
    p.v_stride_token = a.v_stride != 0 ? a.v_stride : same_width ? p.ragged.stride_token : heads * vo;
    p.v_stride_head = vo;
  }
  p.o = a.o;
  p.lse = a.lse;
  p.sinks = a.sinks;
  p.work_request = int_array(s.layout.request);
  p.work_q_row = int_array(s.layout.q_row);
  p.work_kv_begin = int_array(s.layout.kv_begin);
  p.work_kv_end = int_array(s.layout.kv_end);
  p.work_state = int_array(s.layout.state);
  p.work_state_stride = int_array(s.layout.state_stride);
  p.num_work = int_array(s.layout.counts);
  p.num_merge_rows = int_array(s.layout.counts) + 1;
  p.pair_counter = reinterpret_cast<std::int32_t*>(static_cast<char*>(s.workspace.int_buffer) + s.layout.counts) + 2;
  if (s.state_capacity > 0) {
    p.partial_o = static_cast<float*>(s.workspace.float_buffer);
    p.partial_lse = reinterpret_cast<float*>(static_cast<char*>(s.workspace.float_buffer) +
                                             align_up(std::size_t(s.state_capacity) * vo * 4));
  }
  p.num_qo_heads = c.num_qo_heads;
  p.mask_mode = c.mask == MaskMode::causal   ? AOTINFER_MASK_CAUSAL
                : c.mask == MaskMode::custom ? AOTINFER_MASK_CUSTOM
                                             : AOTINFER_MASK_NONE;
  if (c.mask == MaskMode::custom) p.custom_mask = a.custom_mask, p.mask_indptr = a.mask_indptr;
  p.window_left = c.window_left < 0 ? AOTINFER_NO_WINDOW : c.window_left;
  // k_scale scales every score, so it is part of sm_scale (and of the soft cap's quotients).
  p.sm_scale = (a.sm_scale != 0 ? a.sm_scale : 1.f / std::sqrt(float(c.head_dim))) * a.k_scale;
  p.v_scale = a.v_scale;
  if (a.logits_soft_cap > 0) p.soft_cap_in = p.sm_scale / a.logits_soft_cap, p.soft_cap_out = a.logits_soft_cap / p.sm_scale;
  p.rope_rcp_scale = 1.f / a.rope_scale;
  p.rope_rcp_theta = 1.f / a.rope_theta;
  if (c.pos_encoding == PosEncoding::alibi) p.alibi_scale = 1.f / p.sm_scale;
  const bool general = c.mask == MaskMode::custom || c.window_left >= 0 || a.logits_soft_cap > 0 || p.alibi_scale != 0.f;
  const Kernel& kernel = s.work.large_tile ? (general ? s.large_general : s.large) : s.small;
  const PrefillTile& tile = s.work.large_tile ? s.limits.large : s.limits.small;
  encode_tensor_maps(p, kernel.launch_info(), c, a.total_q, s.shape.kv_entries);
  if (kernel.launch_info().tile[3] & AOTINFER_PREFILL_PERSISTENT) {  // one wave takes the (item, KV head) pairs
    const std::int64_t pairs = std::int64_t(s.work.padded_work) * c.num_kv_heads;
    const std::int64_t wave = std::int64_t(s.limits.num_sms) * tile.ctas_per_sm;
    kernel.launch(Grid{unsigned(std::min(pairs, wave))}, p, stream);
  } else {
    kernel.launch(Grid{unsigned(s.work.padded_work), unsigned(c.num_kv_heads)}, p, stream);
  }

  // The merge of split tiles: always launched in CUDA-graph mode (the device count may be 0).
  const std::int64_t outputs = c.cuda_graph ? s.graph_capacity.outputs : s.work.num_outputs();
  if (outputs == 0) return;
  aotinfer_merge_varlen_params m{};
  m.v = p.partial_o;
  m.s = p.partial_lse;
  m.indptr = int_array(s.layout.merge_indptr);
  m.num_outputs_device = c.cuda_graph ? int_array(s.layout.counts) + 1 : nullptr;
  m.output_row = int_array(s.layout.merge_row);
  m.v_out = a.o;
  m.s_out = a.lse;
  m.num_outputs = std::int32_t(outputs);
  m.num_heads = 1;  // outputs are (token, head) rows of o
  const std::int64_t per_cta = s.merge.launch_info().tile[0];
  s.merge.launch(Grid{unsigned((outputs + per_cta - 1) / per_cta)}, m, stream);
}

}  // namespace aotinfer
