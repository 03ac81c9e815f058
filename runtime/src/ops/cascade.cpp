#include "aotinfer/cascade.hpp"

#include <algorithm>
#include <string>
#include <vector>

#include "aotinfer/decode_plan.hpp"
#include "aotinfer/merge_state.hpp"
#include "loading/driver.hpp"
#include "planning/plan_inputs.hpp"
#include "checks/tensor_checks.hpp"

namespace aotinfer {

namespace {

using detail::align_up;

[[noreturn]] void invalid(const std::string& what) { throw Error(ErrorCode::invalid_argument, "cascade: " + what); }

std::string str(std::int64_t n) { return std::to_string(n); }

// A refusal of a level's BatchPrefill, or of the checks it shares, restated as the cascade's:
// "<prefix><message without its batch_prefill prefix>".
template <typename F>
auto restated(const std::string& prefix, F&& f) {
  try {
    return f();
  } catch (const Error& e) {
    if (e.code() != ErrorCode::invalid_argument) throw;
    std::string what = e.what();
    for (const std::string head : {"batch_prefill.run: ", "batch_prefill: "})
      if (what.rfind(head, 0) == 0) what.erase(0, head.size());
    throw Error(ErrorCode::invalid_argument, prefix + what);
  }
}

// The float scratch of the merges: one level's o and lse, and two running lse arrays (merge_state
// may not write the lse it reads). None for a single level.
struct Scratch {
  std::size_t o = 0, lse = 0, lse_a = 0, lse_b = 0, bytes = 0;
  Scratch(const BatchPrefillConfig& c, int levels, std::int64_t rows) {
    if (levels < 2) return;
    const std::size_t states = std::size_t(rows) * c.num_qo_heads;
    lse = align_up(states * c.head_dim * dtype_size(c.dtype_o));
    lse_a = lse + align_up(states * 4);
    lse_b = lse_a + align_up(states * 4);
    bytes = lse_b + align_up(states * 4);
  }
};

// A level's tensors checked as its BatchPrefill checks them. A refusal names the cascade's
// argument: the level for its own metadata; the tensors every level shares (refused at level
// 0 already) by their names alone.
PrefillRunArgs checked_level(const BatchPrefillConfig& c, const detail::PlannedShape& shape,
                             const aotinfer_batch_prefill_tensors& t, const aotinfer_attention_scalars& scalars, int l) {
  try {
    return detail::prefill_run_args(c, shape, t, scalars);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::invalid_argument) throw;
    std::string what = e.what();
    const std::string op = "batch_prefill.run: ";
    if (what.rfind(op, 0) == 0) what.erase(0, op.size());
    for (const char* pool : {"k", "v"})
      if (what.rfind(std::string(pool) + ": ", 0) == 0) what.insert(1, "_pages");
    std::string level;
    for (const char* name : {"qo_indptr", "kv_indptr", "kv_indices", "kv_last_page_len"})
      if (what.rfind(std::string(name) + ": ", 0) == 0) level = "level " + str(l) + " ";
    throw Error(ErrorCode::invalid_argument, "cascade.run: " + level + what);
  }
}

// The longest group's keys of a level (the workspace of a fixed KV split depends on it).
std::int64_t longest_kv(const CascadeLevel& level, int page_size) {
  const std::vector<std::int32_t> lengths = decode_kv_lengths(level.kv_indptr, level.kv_last_page_len, page_size);
  return std::max<std::int64_t>(1, lengths.empty() ? 1 : *std::max_element(lengths.begin(), lengths.end()));
}

}  // namespace

struct Cascade::Impl {
  CascadeConfig config;
  std::vector<BatchPrefill> levels;
  MergeState merge;
  int device = 0;

  // The last plan.
  bool planned = false;
  std::int64_t total_q = 0;
  std::vector<detail::PlannedShape> shapes;  // per level, what described tensors are checked against
  char* scratch = nullptr;
  Scratch layout{{}, 1, 0};

  Impl(const Package& package, const CascadeConfig& c) : config(c), merge(package, c.level.dtype_o, c.level.head_dim) {}
};

void Cascade::check_config(const CascadeConfig& c) {
  if (c.num_levels < 1) invalid("num_levels must be >= 1, got " + str(c.num_levels));
  if (c.level.kv_storage != KvStorage::paged) invalid("the levels share one page pool: kv_storage must be paged");
  if (c.level.pos_encoding != PosEncoding::none)
    invalid("pos_encoding must be none: positions restart in each level (rotate q and K before caching them)");
  if (c.level.window_left >= 0)
    invalid("window_left must be < 0 (no window): a window counts positions, which restart in each level");
  if (c.level.mask == MaskMode::custom) invalid("mask must be none or causal (a cascade takes no custom mask)");
  if (c.level.vo_dim() != c.level.head_dim)
    invalid("head_dim_vo must be 0 or head_dim (the levels' states are merged head_dim wide)");
  restated("cascade: ", [&] { BatchPrefill::check_config(c.level); });
}

std::int64_t Cascade::check_levels(const CascadeConfig& c, std::span<const CascadeLevel> levels) {
  if (std::int64_t(levels.size()) != c.num_levels)
    invalid("plan() got " + str(std::int64_t(levels.size())) + " levels, the config has " + str(c.num_levels));
  std::int64_t total_q = 0;
  for (std::size_t l = 0; l < levels.size(); ++l) {
    const CascadeLevel& level = levels[l];
    const std::string name = "level " + str(std::int64_t(l)) + " ";
    if (level.qo_indptr.empty()) invalid(name + "qo_indptr must have groups + 1 entries, got an empty array");
    if (level.qo_indptr[0] != 0) invalid(name + "qo_indptr[0] must be 0, got " + str(level.qo_indptr[0]));
    const std::int64_t groups = std::int64_t(level.qo_indptr.size()) - 1, last = level.qo_indptr.back();
    if (l == 0) total_q = last;
    if (last != total_q)
      invalid(name + "qo_indptr[-1] = " + str(last) + " but total_q is " + str(total_q) +
              " (level 0's): every level groups the same query tokens");
    if (std::int64_t(level.kv_indptr.size()) != groups + 1)
      invalid(name + "kv_indptr has " + str(std::int64_t(level.kv_indptr.size())) + " entries; qo_indptr describes " +
              str(groups) + " groups (groups + 1 entries)");
    if (std::int64_t(level.kv_last_page_len.size()) != groups)
      invalid(name + "kv_last_page_len has " + str(std::int64_t(level.kv_last_page_len.size())) + " entries; qo_indptr describes " +
              str(groups) + " groups");
  }
  return total_q;
}

Cascade::Cascade(const Package& package, const CascadeConfig& c) {
  check_config(c);
  impl_ = std::make_unique<Impl>(package, c);
  for (int l = 0; l < c.num_levels; ++l) {
    BatchPrefillConfig level = c.level;
    if (l + 1 < c.num_levels) level.mask = MaskMode::none;  // shared prefixes are seen whole
    impl_->levels.emplace_back(package, level);
  }
  impl_->device = detail::current_device_ordinal();
}

Cascade::~Cascade() = default;
Cascade::Cascade(Cascade&&) noexcept = default;
Cascade& Cascade::operator=(Cascade&&) noexcept = default;

const CascadeConfig& Cascade::config() const { return impl_->config; }

const BatchPrefill& Cascade::level(int l) const {
  if (l < 0 || l >= impl_->config.num_levels)
    invalid("level(" + str(l) + "): expected 0.." + str(impl_->config.num_levels - 1));
  return impl_->levels[std::size_t(l)];
}

WorkspaceSizes Cascade::workspace_sizes(std::int64_t max_total_q, std::int32_t max_groups, std::int64_t max_kv_len) const {
  const Impl& s = *impl_;
  const BatchPrefillConfig& c = s.config.level;
  WorkspaceSizes out;
  for (const BatchPrefill& level : s.levels) {
    const WorkspaceSizes w = level.workspace_sizes(max_total_q, max_groups, max_kv_len);
    out.int_bytes += align_up(w.int_bytes);
    out.float_bytes = std::max(out.float_bytes, w.float_bytes);
  }
  out.float_bytes += Scratch(c, s.config.num_levels, c.cuda_graph ? c.max_total_q : max_total_q).bytes;
  return out;
}

void Cascade::plan(std::span<const CascadeLevel> levels, std::int32_t num_pages, const Workspace& ws, Stream stream) {
  Impl& s = *impl_;
  const BatchPrefillConfig& c = s.config.level;
  const int num_levels = s.config.num_levels;
  s.planned = false;
  const std::int64_t total_q = check_levels(s.config, levels);
  if (c.cuda_graph && total_q > c.max_total_q)
    invalid(str(total_q) + " query tokens exceed this CUDA-graph cascade's max_total_q " + str(c.max_total_q));

  // Every level's plan is read at run time, so each gets its own int region; its size is the
  // level's workspace for this plan's shape (the bounds' in CUDA-graph mode, so that the regions
  // keep their addresses from plan to plan). The scratch leads the float workspace, the levels
  // share the rest.
  const bool fixed = c.kv_split.mode == KvSplit::Mode::fixed && !c.cuda_graph;
  std::vector<std::size_t> offset(std::size_t(num_levels) + 1, 0);
  for (int l = 0; l < num_levels; ++l) {
    const CascadeLevel& level = levels[std::size_t(l)];
    const std::int32_t groups = std::int32_t(level.qo_indptr.size() - 1);
    const WorkspaceSizes need = restated("cascade: level " + str(l) + ": ", [&] {
      return s.levels[std::size_t(l)].workspace_sizes(total_q, groups, fixed ? longest_kv(level, c.page_size) : 0);
    });
    offset[std::size_t(l) + 1] = offset[std::size_t(l)] + align_up(need.int_bytes);
  }
  const Scratch scratch(c, num_levels, c.cuda_graph ? c.max_total_q : total_q);
  if (!ws.int_buffer || ws.int_bytes < offset.back() || ws.float_bytes < scratch.bytes || (scratch.bytes > 0 && !ws.float_buffer))
    invalid("the workspace (" + str(std::int64_t(ws.float_bytes)) + " float, " + str(std::int64_t(ws.int_bytes)) +
            " int bytes) is smaller than this plan needs (at least " + str(std::int64_t(scratch.bytes)) + " float, " +
            str(std::int64_t(offset.back())) + " int bytes; workspace_sizes gives the sizes for the bounds)");

  char* floats = static_cast<char*>(ws.float_buffer);
  char* ints = static_cast<char*>(ws.int_buffer);
  s.shapes.assign(std::size_t(num_levels), {});
  for (int l = 0; l < num_levels; ++l) {
    const CascadeLevel& level = levels[std::size_t(l)];
    const std::size_t at = offset[std::size_t(l)], bytes = offset[std::size_t(l) + 1] - at;
    const Workspace region{floats ? floats + scratch.bytes : nullptr, ws.float_bytes - scratch.bytes, ints + at, bytes};
    restated("cascade: level " + str(l) + ": ", [&] {
      s.levels[std::size_t(l)].plan_paged(level.qo_indptr, level.kv_indptr, level.kv_last_page_len, level.kv_indices,
                                          num_pages, region, stream);
    });
    detail::PlannedShape& shape = s.shapes[std::size_t(l)];
    shape.batch = std::int32_t(level.qo_indptr.size() - 1);
    shape.q_rows = total_q;
    shape.kv_entries = level.kv_indptr.back();
    shape.num_pages = level.kv_indices.empty() ? 0 : num_pages;
    shape.device = s.device;
  }
  s.total_q = total_q;
  s.scratch = floats;
  s.layout = scratch;
  s.planned = true;
}

void Cascade::run(const CascadeRunArgs& a, Stream stream) const {
  const Impl& s = *impl_;
  const BatchPrefillConfig& c = s.config.level;
  const int num_levels = s.config.num_levels;
  if (!s.planned) invalid("run() needs a successful plan first");
  if (std::int64_t(a.levels.size()) != num_levels)
    invalid("run() got device metadata of " + str(std::int64_t(a.levels.size())) + " levels, the config has " + str(num_levels));
  if (a.total_q != s.total_q)
    invalid("run() got total_q " + str(a.total_q) + " but the plan was made for " + str(s.total_q) + "; plan again");
  // The levels' own run() checks the same, but level 0 would have launched before level 1's
  // refusal: everything is checked here first.
  if (!a.q || !a.k_pages || !a.v_pages || !a.o) invalid("q, k_pages, v_pages and o must not be null");
  for (int l = 0; l < num_levels; ++l) {
    const CascadeLevelArrays& m = a.levels[std::size_t(l)];
    if (!m.qo_indptr || !m.kv_indptr || !m.kv_indices || !m.kv_last_page_len)
      invalid("level " + str(l) + " qo_indptr, kv_indptr, kv_indices and kv_last_page_len must not be null");
  }
  for (auto [name, ptr] : {std::pair{"q", a.q}, {"k_pages", a.k_pages}, {"v_pages", a.v_pages}, {"o", static_cast<const void*>(a.o)}})
    if (reinterpret_cast<std::uintptr_t>(ptr) % 16 != 0)
      invalid(std::string(name) + " must be 16-byte aligned (the kernels move 16-byte vectors)");
  if (a.kv_stride < 0 || a.kv_stride * std::int64_t(dtype_size(c.dtype_kv)) % 16 != 0)
    invalid("kv_stride must be a non-negative multiple of 16 bytes, got " + str(a.kv_stride) + " elements");

  // The running lse of the merges alternates between two scratch arrays (merge_state may not
  // write the lse it reads), timed so that the last merge writes the caller's lse (or none).
  float* const lse_a = reinterpret_cast<float*>(s.scratch + s.layout.lse_a);
  float* const lse_b = reinterpret_cast<float*>(s.scratch + s.layout.lse_b);
  auto running = [&](int l) -> float* {
    if (l == num_levels - 1) return a.lse;
    return (num_levels - 1 - l) % 2 == 1 ? lse_a : (a.lse ? a.lse : lse_b);
  };
  void* const level_o = s.scratch + s.layout.o;
  float* const level_lse = reinterpret_cast<float*>(s.scratch + s.layout.lse);
  // In CUDA-graph mode the merges cover the bound: the replayed plan's total_q is not known here.
  const std::int64_t rows = (c.cuda_graph ? c.max_total_q : s.total_q) * c.num_qo_heads;
  for (int l = 0; l < num_levels; ++l) {
    const CascadeLevelArrays& m = a.levels[std::size_t(l)];
    PrefillRunArgs p;
    p.batch = s.shapes[std::size_t(l)].batch;
    p.total_q = s.total_q;
    p.q = a.q;
    p.qo_indptr = m.qo_indptr;
    p.k = a.k_pages;
    p.v = a.v_pages;
    p.kv_stride = a.kv_stride;
    p.kv_indptr = m.kv_indptr;
    p.kv_indices = m.kv_indices;
    p.kv_last_page_len = m.kv_last_page_len;
    p.o = l == 0 ? a.o : level_o;
    p.lse = l == 0 ? running(0) : level_lse;
    p.sinks = l == num_levels - 1 ? a.sinks : nullptr;
    p.sm_scale = a.sm_scale;
    p.logits_soft_cap = a.logits_soft_cap;
    s.levels[std::size_t(l)].run(p, stream);
    if (l > 0) s.merge.run({a.o, running(l - 1), level_o, level_lse, a.o, running(l), rows}, stream);
  }
}

void Cascade::run(const aotinfer_cascade_tensors& t, const aotinfer_attention_scalars& scalars, Stream stream) const {
  const Impl& s = *impl_;
  const BatchPrefillConfig& c = s.config.level;
  auto refuse = [](const std::string& what) { throw Error(ErrorCode::invalid_argument, "cascade.run: " + what); };
  if (!s.planned) refuse("run() needs a successful plan first");
  if (!t.qo_indptr || !t.kv_indptr || !t.kv_indices || !t.kv_last_page_len)
    refuse("qo_indptr, kv_indptr, kv_indices and kv_last_page_len must each point to num_levels tensors (got a null pointer)");
  std::vector<CascadeLevelArrays> arrays(std::size_t(s.config.num_levels));
  CascadeRunArgs a;
  for (int l = 0; l < s.config.num_levels; ++l) {
    const aotinfer_batch_prefill_tensors level{t.q, t.k_pages, t.v_pages, t.qo_indptr[l], t.kv_indptr[l], t.kv_indices[l],
                                               t.kv_last_page_len[l], t.o, t.lse, t.sinks,
                                               /*custom_mask=*/{}, /*mask_indptr=*/{}};  // the cascade takes no custom mask
    const PrefillRunArgs p = checked_level(s.levels[std::size_t(l)].config(), s.shapes[std::size_t(l)], level, scalars, l);
    arrays[std::size_t(l)] = {p.qo_indptr, p.kv_indptr, p.kv_indices, p.kv_last_page_len};
    if (l == 0) {
      a.total_q = p.total_q;
      a.q = p.q, a.k_pages = p.k, a.v_pages = p.v, a.kv_stride = p.kv_stride;
      a.o = p.o, a.lse = p.lse, a.sinks = p.sinks;
      a.sm_scale = p.sm_scale, a.logits_soft_cap = p.logits_soft_cap;
    }
  }
  if (c.cuda_graph && t.o.shape[0] < c.max_total_q)
    refuse("o: CUDA-graph mode merges max_total_q rows: expected at least " + str(c.max_total_q) + " rows, got " +
           str(t.o.shape[0]));
  a.levels = arrays;
  run(a, stream);
}

}  // namespace aotinfer
