#include "aotinfer/batch_decode.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "planning/decode_work_image.hpp"
#include "loading/driver.hpp"
#include "loading/family_axes.hpp"
#include "planning/plan_inputs.hpp"
#include "planning/plan_upload.hpp"
#include "checks/tensor_checks.hpp"

namespace aotinfer {

using detail::check;
using detail::driver;

namespace {

[[noreturn]] void invalid(const std::string& what) { throw Error(ErrorCode::invalid_argument, "batch_decode: " + what); }

// Query tokens per request: speculative verification's drafts; beyond them a prefill tile wins.
constexpr int kMaxQLen = 16;

using detail::align_up;

// The int workspace: the work partition (decode_work_image.hpp), then the merge counters (one
// per request and grid row), zero in every upload; the kernel leaves them at zero.
struct IntLayout : detail::DecodeWorkLayout {
  std::size_t merge_counters = 0;
  std::size_t bytes = 0;

  IntLayout(std::int32_t work_capacity, std::int32_t batch_capacity, std::int32_t grid_rows)
      : DecodeWorkLayout(work_capacity, batch_capacity) {
    merge_counters = end;
    bytes = merge_counters + align_up(std::size_t(batch_capacity) * grid_rows * 4);
  }
};

// Split plans: each item's state for its request's q_len * num_qo_heads rows.
std::size_t float_bytes(std::int32_t work_capacity, const BatchDecodeConfig& c) {
  const std::size_t rows = std::size_t(work_capacity) * c.q_len * c.num_qo_heads;
  return align_up(rows * c.head_dim * 4) + align_up(rows * 4);
}
}  // namespace

struct BatchDecode::Impl {
  BatchDecodeConfig config;
  Kernel decode;
  DecodePlanLimits limits;
  std::int32_t row_groups = 1;

  // The last plan.
  bool planned = false;
  std::int32_t batch = 0;
  DecodeWorkPlan work;
  IntLayout layout{0, 0, 0};
  Workspace workspace;
  detail::PlannedShape shape;  // what described tensors are checked against

  detail::PlanUpload upload;
};

void BatchDecode::check_config(const BatchDecodeConfig& c) {
  detail::check_head_counts("batch_decode", c.num_qo_heads, c.num_kv_heads);
  const int group = c.num_qo_heads / c.num_kv_heads;
  if (group > 64) invalid("the GQA group size num_qo_heads / num_kv_heads is " + std::to_string(group) + "; at most 64 is supported");
  if (c.page_size < 1) invalid("page_size must be >= 1, got " + std::to_string(c.page_size));
  if (c.q_len < 1 || c.q_len > kMaxQLen)
    invalid("q_len (query tokens per request) must be 1.." + std::to_string(kMaxQLen) + ", got " + std::to_string(c.q_len) +
            "; longer runs of new tokens are a paged prefill (BatchPrefill)");
  if (c.q_len > 1 && c.window_left >= 0)
    invalid("a sliding window (window_left " + std::to_string(c.window_left) + ") takes one query token per request, got q_len " +
            std::to_string(c.q_len) + "; run several tokens with a window as a paged prefill (BatchPrefill)");
  if (c.cuda_graph && c.max_batch < 1) invalid("CUDA-graph mode needs max_batch >= 1");
  detail::check_kv_split("batch_decode", c.kv_split, c.cuda_graph, c.max_kv_len);
}

VariantKey BatchDecode::variant_key(const BatchDecodeConfig& c) {
  return VariantKey{"batch_decode",
                    {{"dtype_q", std::string(dtype_name(c.dtype_q))},
                     {"dtype_kv", std::string(dtype_name(c.dtype_kv))},
                     {"head_dim", std::to_string(c.head_dim)},
                     {"dtype_o", std::string(dtype_name(c.dtype_o))},
                     {"pos_encoding", pos_encoding_name(c.pos_encoding)}}};
}

BatchDecode::BatchDecode(const Package& package, const BatchDecodeConfig& c) : impl_(std::make_unique<Impl>()) {
  check_config(c);
  impl_->config = c;
  detail::check_family_axes(package, variant_key(c));
  impl_->decode = package.kernel(variant_key(c), "decode");

  const aotinfer_launch_info& info = impl_->decode.launch_info();
  if (int(info.tile[2]) != c.head_dim)
    invalid("variant " + impl_->decode.uri() + " is built for head_dim " + std::to_string(info.tile[2]) + ", the config says " +
            std::to_string(c.head_dim));
  const int rows = c.q_len * (c.num_qo_heads / c.num_kv_heads);  // (token, head) rows of a KV head
  impl_->row_groups = (rows + int(info.tile[0]) - 1) / int(info.tile[0]);
  impl_->shape.device = detail::current_device_ordinal();
  impl_->limits.num_sms = detail::current_device_sm_count();
  impl_->limits.ctas_per_sm = impl_->decode.max_active_ctas_per_sm();
  if (const std::int32_t streaming = info.tile[3] & AOTINFER_DECODE_STREAMING_CTAS; streaming > 0)
    impl_->limits.ctas_per_sm = std::min(impl_->limits.ctas_per_sm, streaming);
  impl_->limits.ctas_per_item = c.num_kv_heads * impl_->row_groups;
  impl_->limits.tile_tokens = int(info.tile[1]);
  if (impl_->limits.ctas_per_sm < 1) invalid(impl_->decode.uri() + " cannot be resident on this GPU (occupancy 0)");
  impl_->limits.kv_split = c.kv_split;
  impl_->limits.window_left = c.window_left;
  if (c.cuda_graph) impl_->limits.graph_work = decode_max_work(c.max_batch, impl_->limits, c.max_kv_len);
}

BatchDecode::~BatchDecode() = default;
BatchDecode::BatchDecode(BatchDecode&&) noexcept = default;
BatchDecode& BatchDecode::operator=(BatchDecode&&) noexcept = default;

const DecodeWorkPlan& BatchDecode::work_plan() const { return impl_->work; }
const BatchDecodeConfig& BatchDecode::config() const { return impl_->config; }

WorkspaceSizes BatchDecode::workspace_sizes(std::int32_t max_batch, std::int64_t max_kv_len) const {
  if (impl_->config.cuda_graph) max_batch = impl_->config.max_batch, max_kv_len = impl_->config.max_kv_len;
  const std::int32_t work = decode_max_work(max_batch, impl_->limits, max_kv_len);
  return {float_bytes(work, impl_->config), IntLayout(work, max_batch, impl_->limits.ctas_per_item).bytes};
}

void BatchDecode::plan(std::span<const std::int32_t> kv_indptr, std::span<const std::int32_t> kv_last_page_len,
                       std::span<const std::int32_t> kv_indices, std::int32_t num_pages, const Workspace& ws,
                       Stream stream) {
  Impl& s = *impl_;
  const BatchDecodeConfig& c = s.config;
  s.planned = false;  // a failed plan leaves nothing runnable
  const std::vector<std::int32_t> lengths = decode_kv_lengths(kv_indptr, kv_last_page_len, c.page_size);
  const std::int32_t batch = std::int32_t(lengths.size());
  if (c.cuda_graph && batch > c.max_batch)
    invalid("batch " + std::to_string(batch) + " exceeds max_batch " + std::to_string(c.max_batch) + " of this CUDA-graph decode");
  detail::check_page_ids("batch_decode", kv_indptr, kv_indices, num_pages);
  if (c.q_len > 1 && c.causal && !c.custom_mask)
    for (std::size_t i = 0; i < lengths.size(); ++i)
      if (lengths[i] < c.q_len)
        invalid("request " + std::to_string(i) + " has " + std::to_string(lengths[i]) + " keys, fewer than its q_len " +
                std::to_string(c.q_len) + " causal query tokens (whose keys the cache must hold)");

  plan_decode_work(lengths, s.limits, s.work);
  const IntLayout layout = c.cuda_graph ? IntLayout(s.limits.graph_work, c.max_batch, s.limits.ctas_per_item)
                                        : IntLayout(s.work.padded_work, batch, s.limits.ctas_per_item);
  const std::size_t need_float = s.work.split ? float_bytes(s.work.padded_work, c) : 0;
  detail::check_workspace("batch_decode", ws, layout.bytes, need_float);

  // Fill the pinned image of the int workspace, then one async copy.
  char* image = s.upload.image(layout.bytes);
  detail::write_decode_work(image, layout, s.work, batch, kv_indptr, lengths);
  std::memset(image + layout.merge_counters, 0, layout.bytes - layout.merge_counters);
  s.upload.send(ws.int_buffer, layout.bytes, stream);

  s.batch = batch;
  s.layout = layout;
  s.workspace = ws;
  s.shape.batch = batch;
  s.shape.q_rows = std::int64_t(batch) * c.q_len;
  s.shape.kv_entries = kv_indptr.back();
  s.shape.num_pages = kv_indices.empty() ? 0 : num_pages;
  s.shape.mask_bytes = 0;
  if (c.custom_mask)
    for (const std::int32_t length : lengths) s.shape.mask_bytes += (std::int64_t(c.q_len) * length + 7) / 8;
  s.planned = true;
}

void BatchDecode::run(const aotinfer_batch_decode_tensors& t, const aotinfer_attention_scalars& s, Stream stream) const {
  if (!impl_->planned) invalid("run() needs a successful plan() first");
  run(detail::decode_run_args(impl_->config, impl_->shape, t, s), stream);
}

void BatchDecode::run(const DecodeRunArgs& a, Stream stream) const {
  const Impl& s = *impl_;
  const BatchDecodeConfig& c = s.config;
  if (!s.planned) invalid("run() needs a successful plan() first");
  if (a.batch != s.batch)
    invalid("run() got batch " + std::to_string(a.batch) + " but the plan was made for " + std::to_string(s.batch) + "; plan again");
  if (!a.q || !a.k_pages || !a.v_pages || !a.kv_indptr || !a.kv_indices || !a.kv_last_page_len || !a.o)
    invalid("q, k_pages, v_pages, kv_indptr, kv_indices, kv_last_page_len and o must not be null");
  for (auto [name, ptr] : {std::pair{"q", a.q}, {"k_pages", a.k_pages}, {"v_pages", a.v_pages}, {"o", a.o}})
    if (reinterpret_cast<std::uintptr_t>(ptr) % 16 != 0) invalid(std::string(name) + " must be 16-byte aligned (the kernel moves 16-byte vectors)");
  const std::int64_t q_row = std::int64_t(c.num_qo_heads) * c.head_dim;
  if (a.q_stride != 0 && (a.q_stride < q_row || a.q_stride * std::int64_t(dtype_size(c.dtype_q)) % 16 != 0))
    invalid("q_stride must be 0 (dense) or a multiple of 16 bytes of at least num_qo_heads * head_dim = " +
            std::to_string(q_row) + " elements, got " + std::to_string(a.q_stride));
  if (a.kv_stride_page < 0 || a.kv_stride_page * std::int64_t(dtype_size(c.dtype_kv)) % 16 != 0)
    invalid("kv_stride_page must be a non-negative multiple of 16 bytes, got " + std::to_string(a.kv_stride_page) + " elements");
  if (c.custom_mask && (!a.custom_mask || !a.mask_indptr))
    invalid("a custom mask (config.custom_mask) needs custom_mask and mask_indptr");
  if (!c.custom_mask && (a.custom_mask || a.mask_indptr))
    invalid("custom_mask and mask_indptr are given but config.custom_mask is false");
  if (reinterpret_cast<std::uintptr_t>(a.custom_mask) % 4 != 0)
    invalid("custom_mask must be 4-byte aligned (the kernel reads it in 4-byte words)");
  if (s.batch == 0) return;

  const char* ints = static_cast<const char*>(s.workspace.int_buffer);
  auto int_array = [&](std::size_t offset) { return reinterpret_cast<const std::int32_t*>(ints + offset); };
  const std::int64_t heads = c.num_kv_heads, dim = c.head_dim, page = c.page_size;

  aotinfer_batch_decode_params p{};
  p.q = a.q;
  p.q_stride_token = a.q_stride != 0 ? a.q_stride : q_row;
  p.kv.k_pages = a.k_pages;
  p.kv.v_pages = a.v_pages;
  p.kv.indptr = a.kv_indptr;
  p.kv.indices = a.kv_indices;
  p.kv.last_page_len = a.kv_last_page_len;
  p.kv.stride_page = a.kv_stride_page != 0 ? a.kv_stride_page : page * heads * dim;
  p.kv.stride_token = c.layout == KvLayout::nhd ? heads * dim : dim;
  p.kv.stride_head = c.layout == KvLayout::nhd ? dim : page * dim;
  p.kv.page_size = c.page_size;
  p.kv.num_kv_heads = c.num_kv_heads;
  p.o = a.o;
  p.lse = a.lse;
  p.q_positions = a.q_positions;
  p.sinks = a.sinks;
  p.custom_mask = a.custom_mask;
  p.mask_indptr = a.mask_indptr;
  detail::point_at_work(p, s.layout, s.workspace.int_buffer);
  const std::size_t partial_rows = std::size_t(s.work.padded_work) * c.q_len * c.num_qo_heads;
  if (s.work.split) {
    p.partial_o = static_cast<float*>(s.workspace.float_buffer);
    p.partial_lse = reinterpret_cast<float*>(static_cast<char*>(s.workspace.float_buffer) + align_up(partial_rows * dim * 4));
    p.merge_indptr = int_array(s.layout.merge_indptr);
    p.merge_counters = reinterpret_cast<std::int32_t*>(static_cast<char*>(s.workspace.int_buffer) + s.layout.merge_counters);
  }
  p.num_qo_heads = c.num_qo_heads;
  p.q_len = c.q_len;
  p.q_causal = c.causal && !c.custom_mask;
  p.sm_scale = a.sm_scale != 0 ? a.sm_scale : 1.f / std::sqrt(float(c.head_dim));
  p.logits_soft_cap = a.logits_soft_cap;
  p.rope_rcp_scale = 1.f / a.rope_scale;
  p.rope_rcp_theta = 1.f / a.rope_theta;
  p.k_scale = a.k_scale;
  p.v_scale = a.v_scale;
  const unsigned rows = unsigned(c.num_kv_heads * s.row_groups);  // CTAs per work item
  if (s.decode.launch_info().tile[3] & AOTINFER_DECODE_FLAT_GRID)
    s.decode.launch(Grid{unsigned(s.work.padded_work) * rows}, p, stream);
  else  // packages built before the flat grid
    s.decode.launch(Grid{unsigned(s.work.padded_work), rows}, p, stream);
}

}  // namespace aotinfer
