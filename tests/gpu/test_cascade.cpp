// Cascade (shared-prefix) attention on the GPU through aotinfer::Cascade, from the package under
// test, against an fp64 reference that attends to the union of each query row's keys over all
// its levels directly (one softmax over every kept key; the causal mask on the last level only).
// Shapes and values are drawn afresh; the seed is printed with every failure and
// AOTINFER_TEST_SEED replays it.
//
// Requests are consecutive runs of query tokens; the last level gives each request its own KV,
// each earlier level groups consecutive groups of the level after it (a prefix shared by them),
// with uneven group sizes, groups without keys and requests without queries. All levels' pages
// lie in one pool in a random order among spare NaN pages, o and lse start as NaN bytes, and
// every o element of the batch must come out finite. A logits soft cap (a run-time argument every
// variant serves) is drawn for some cases; sliding windows are refused (positions restart in
// each level).
#include <algorithm>
#include <cstring>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "aotinfer/aotinfer.h"
#include "aotinfer/cascade.hpp"
#include "gpu_test_util.hpp"
#include "random_values.hpp"
#include "reference/attention_reference.hpp"

using namespace gpu_test;
using aotinfer::BatchPrefillConfig;
using aotinfer::Cascade;
using aotinfer::CascadeConfig;
using aotinfer::KvLayout;
using aotinfer::MaskMode;
using aotinfer_test::Contains;

namespace {

// The plain paged bf16 config (every variant serves both masks): head_dim 128 where the package
// holds it, else the smallest such head_dim (or 128, which make_cascade then reports missing).
CascadeConfig base_config(int num_levels, MaskMode mask, int qo_heads, int kv_heads) {
  CascadeConfig c;
  c.num_levels = num_levels;
  c.level.mask = mask;
  c.level.num_qo_heads = qo_heads;
  c.level.num_kv_heads = kv_heads;
  std::set<int> dims;
  for (const auto* v : package().variants("batch_prefill_paged")) {
    auto axis = [&](const char* name) { return *v->key.find(name); };
    if (axis("dtype_q") == "bf16" && axis("dtype_kv") == "bf16" && axis("dtype_o") == "bf16" && axis("pos_encoding") == "none")
      dims.insert(std::stoi(axis("head_dim")));
  }
  if (!dims.empty() && !dims.count(c.level.head_dim)) c.level.head_dim = *dims.begin();
  return c;
}

std::string describe(const CascadeConfig& c) {
  std::ostringstream s;
  s << "cascade of " << c.num_levels << " levels {head_dim=" << c.level.head_dim
    << ", mask=" << (c.level.mask == MaskMode::causal ? "causal" : "none") << "} heads " << c.level.num_qo_heads << "/"
    << c.level.num_kv_heads << " page " << c.level.page_size << (c.level.layout == KvLayout::nhd ? " nhd" : " hnd");
  if (c.level.cuda_graph) s << ", CUDA graph (max_batch " << c.level.max_batch << ", max_total_q " << c.level.max_total_q << ")";
  return s.str();
}

std::optional<Cascade> make_cascade(const CascadeConfig& c) {
  try {
    return Cascade(package(), c);
  } catch (const aotinfer::Error& e) {
    if (e.code() != aotinfer::ErrorCode::not_found) throw;
    WARN("skipped, not in the package: " << describe(c) << ": " << e.what());
    return std::nullopt;
  }
}

// A cascade needs non-causal prefill variants for its upper levels, which small packages (the
// CI spec's) leave out: a package without any is skipped with a warning rather than failed.
#define REQUIRE_SOME_RAN(n)                                                                           \
  if ((n) == 0) {                                                                                     \
    WARN("skipped: the package holds none of the variants this test needs (see the WARN lines)"); \
    return;                                                                                           \
  }

enum class Path { cpp, tensors, c_api };  // raw C++ run, checked C++ run, the C API's raw calls

struct Case {
  CascadeConfig config;
  std::vector<std::int32_t> qo_lens;                 // per request
  std::vector<std::vector<std::int32_t>> groups;     // per level: requests per group
  std::vector<std::vector<std::int32_t>> kv_lens;    // per level, per group
  std::vector<float> sinks{};                        // [num_qo_heads] or empty
  Path path = Path::cpp;
  float soft_cap = 0;                                // > 0: every level's scores are capped
};

// Requests and their levels: the last level one group per request, each earlier level merging
// runs of the next one's groups (uneven, sometimes all of them).
Case random_case(std::mt19937_64& rng, const CascadeConfig& config, int requests) {
  Case c{config, {}, {}, {}};
  const bool causal = config.level.mask == MaskMode::causal;
  for (int r = 0; r < requests; ++r) c.qo_lens.push_back(uniform(rng, 0, 9) == 0 ? 0 : uniform(rng, 1, 60));
  const int L = config.num_levels;
  c.groups.assign(L, {});
  c.kv_lens.assign(L, {});
  c.groups[L - 1].assign(requests, 1);
  for (int l = L - 2; l >= 0; --l) {
    const std::vector<std::int32_t>& below = c.groups[l + 1];
    const bool one = uniform(rng, 0, 2) == 0;
    for (std::size_t g = 0; g < below.size(); ++g)
      if (g == 0 || (!one && uniform(rng, 0, 1) == 0)) c.groups[l].push_back(below[g]);
      else c.groups[l].back() += below[g];
  }
  for (int l = 0; l < L; ++l) {
    std::size_t first = 0;
    for (std::int32_t members : c.groups[l]) {
      std::int32_t qo = 0;
      for (std::int32_t r = 0; r < members; ++r) qo += c.qo_lens[first + r];
      first += members;
      std::int32_t kv = l + 1 < L ? (uniform(rng, 0, 7) == 0 ? 0 : uniform(rng, 1, 700)) : uniform(rng, 0, 250);
      if (l + 1 == L && causal) kv += qo;  // a request's own KV ends with its queries
      c.kv_lens[l].push_back(kv);
    }
  }
  return c;
}

struct Level {
  std::vector<std::int32_t> qo_indptr, kv_indptr, last_page_len, indices;
  std::vector<std::vector<double>> k, v;  // per group [kv_len][KVH][d]
};

struct Problem {
  Case c;
  std::int64_t total_q = 0;
  std::int32_t num_pages = 0;
  std::vector<Level> levels;
  std::vector<double> q;  // [total_q][H][d]
  std::vector<std::uint8_t> q_bytes, k_pool, v_pool;
};

Problem make_problem(std::mt19937_64& rng, const Case& c) {
  const BatchPrefillConfig& cfg = c.config.level;
  const int H = cfg.num_qo_heads, KVH = cfg.num_kv_heads, d = cfg.head_dim, page = cfg.page_size;
  Problem p;
  p.c = c;
  for (auto len : c.qo_lens) p.total_q += len;
  Values qv(rng, cfg.dtype_q), kvv(rng, cfg.dtype_kv);
  p.q.resize(p.total_q * H * d);
  p.q_bytes.resize(p.q.size() * 2);
  qv.fill(p.q_bytes.data(), p.q.data(), std::int64_t(p.q.size()));

  // Page counts first: the pool is one permutation over every level's pages and a few spares.
  const int L = c.config.num_levels;
  p.levels.resize(L);
  std::int32_t used = 0;
  for (int l = 0; l < L; ++l) {
    Level& level = p.levels[l];
    level.qo_indptr = {0};
    level.kv_indptr = {0};
    std::size_t first = 0;
    for (std::size_t g = 0; g < c.groups[l].size(); ++g) {
      std::int32_t qo = 0;
      for (std::int32_t r = 0; r < c.groups[l][g]; ++r) qo += c.qo_lens[first + r];
      first += c.groups[l][g];
      level.qo_indptr.push_back(level.qo_indptr.back() + qo);
      const std::int32_t kv = c.kv_lens[l][g], pages = (kv + page - 1) / page;
      level.kv_indptr.push_back(level.kv_indptr.back() + pages);
      level.last_page_len.push_back(pages == 0 ? 0 : kv - (pages - 1) * page);
    }
    used += level.kv_indptr.back();
  }
  p.num_pages = used + 3;
  std::vector<std::int32_t> perm(p.num_pages);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  const std::int64_t page_elems = std::int64_t(page) * KVH * d;
  p.k_pool.assign(p.num_pages * page_elems * 2, 0xff);
  p.v_pool.assign(p.num_pages * page_elems * 2, 0xff);
  std::int32_t next = 0;
  for (int l = 0; l < L; ++l) {
    Level& level = p.levels[l];
    level.indices.assign(perm.begin() + next, perm.begin() + next + level.kv_indptr.back());
    next += level.kv_indptr.back();
    const std::size_t groups = level.qo_indptr.size() - 1;
    level.k.resize(groups), level.v.resize(groups);
    for (std::size_t g = 0; g < groups; ++g) {
      const std::int32_t kv = c.kv_lens[l][g];
      const std::int64_t n = std::int64_t(kv) * KVH * d;
      std::vector<std::uint8_t> kb(n * 2), vb(n * 2);
      level.k[g].resize(n), level.v[g].resize(n);
      kvv.fill(kb.data(), level.k[g].data(), n);
      kvv.fill(vb.data(), level.v[g].data(), n);
      for (std::int32_t t = 0; t < kv; ++t)
        for (int h = 0; h < KVH; ++h) {
          const std::int64_t pg = level.indices[level.kv_indptr[g] + t / page], slot = t % page;
          const std::int64_t at = pg * page_elems +
                                  (cfg.layout == KvLayout::nhd ? (slot * KVH + h) * d : (std::int64_t(h) * page + slot) * d);
          std::memcpy(&p.k_pool[at * 2], &kb[(std::int64_t(t) * KVH + h) * d * 2], d * 2);
          std::memcpy(&p.v_pool[at * 2], &vb[(std::int64_t(t) * KVH + h) * d * 2], d * 2);
        }
    }
  }
  return p;
}

// Attention of query row `token`, head h, over the union of its groups' keys in every level:
// one softmax over all kept (soft-capped) scores and the sink, a score with a zero value row.
aotinfer::reference::State union_row(const Problem& p, std::int64_t token, int h) {
  const BatchPrefillConfig& cfg = p.c.config.level;
  const int d = cfg.head_dim, KVH = cfg.num_kv_heads, kvh = h / (cfg.num_qo_heads / KVH), L = p.c.config.num_levels;
  const double scale = 1.0 / std::sqrt(double(d));
  const double* q = &p.q[(token * cfg.num_qo_heads + h) * d];
  std::vector<double> scores;
  std::vector<const double*> values;
  for (int l = 0; l < L; ++l) {
    const Level& level = p.levels[l];
    const std::size_t g = std::upper_bound(level.qo_indptr.begin(), level.qo_indptr.end(), std::int32_t(token)) -
                          level.qo_indptr.begin() - 1;
    const std::int64_t t = token - level.qo_indptr[g], qo = level.qo_indptr[g + 1] - level.qo_indptr[g];
    const std::int64_t kv = p.c.kv_lens[l][g], pos = kv - qo + t;
    const bool causal = cfg.mask == MaskMode::causal && l == L - 1;
    for (std::int64_t j = 0; j < kv && !(causal && j > pos); ++j) {
      const double* key = &level.k[g][(j * KVH + kvh) * d];
      double s = 0;
      for (int e = 0; e < d; ++e) s += q[e] * round_to(key[e], cfg.dtype_kv);
      s *= scale;
      if (p.c.soft_cap > 0) s = p.c.soft_cap * std::tanh(s / p.c.soft_cap);
      scores.push_back(s);
      values.push_back(&level.v[g][(j * KVH + kvh) * d]);
    }
  }
  const bool sink = !p.c.sinks.empty();
  aotinfer::reference::State out{std::vector<double>(d, 0.0), -std::numeric_limits<double>::infinity()};
  if (scores.empty() && !sink) return out;
  double max = sink ? double(p.c.sinks[h]) : -std::numeric_limits<double>::infinity();
  for (double s : scores) max = std::max(max, s);
  double sum = sink ? std::exp(double(p.c.sinks[h]) - max) : 0.0;
  for (std::size_t i = 0; i < scores.size(); ++i) {
    const double w = std::exp(scores[i] - max);
    sum += w;
    for (int e = 0; e < d; ++e) out.v[e] += w * values[i][e];
  }
  for (double& x : out.v) x /= sum;
  out.lse = max + std::log(sum);
  return out;
}

// Compares o/lse of sampled rows (every row of small batches) with the reference; every o
// element of the batch's rows must be finite.
void check(std::mt19937_64& rng, const Problem& p, const std::vector<std::uint16_t>& o, const std::vector<float>& lse) {
  const BatchPrefillConfig& cfg = p.c.config.level;
  const int H = cfg.num_qo_heads, d = cfg.head_dim;
  std::int64_t non_finite = 0;
  for (std::int64_t i = 0; i < p.total_q * H * d; ++i) non_finite += !std::isfinite(from_bits(o[i], cfg.dtype_o));
  REQUIRE(non_finite == 0);
  std::vector<std::int64_t> rows(p.total_q);
  std::iota(rows.begin(), rows.end(), 0);
  if (rows.size() > 96) {
    std::shuffle(rows.begin(), rows.end(), rng);
    rows.resize(96);
  }
  std::vector<double> got(rows.size() * H * d), want(got.size()), got_lse(rows.size() * H), want_lse(got_lse.size());
  std::vector<std::thread> threads;
  const unsigned n = std::max(1u, std::thread::hardware_concurrency());
  for (unsigned w = 0; w < n; ++w)
    threads.emplace_back([&, w] {
      for (std::size_t r = w; r < rows.size(); r += n)
        for (int h = 0; h < H; ++h) {
          const aotinfer::reference::State s = union_row(p, rows[r], h);
          const std::int64_t at = rows[r] * H + h;
          for (int e = 0; e < d; ++e) {
            want[(r * H + h) * d + e] = s.v[e];
            got[(r * H + h) * d + e] = from_bits(o[at * d + e], cfg.dtype_o);
          }
          want_lse[r * H + h] = s.lse;
          got_lse[r * H + h] = lse[at];
        }
    });
  for (auto& t : threads) t.join();
  const double error = relative_error(got, want), tol = tolerance(cfg.dtype_o);
  INFO("relative error of o over " << rows.size() << " rows x " << H << " heads: " << error << " (tolerance " << tol << ")");
  CHECK(error < tol);
  double lse_error = 0;
  std::int64_t lse_mismatch = 0;
  for (std::size_t i = 0; i < want_lse.size(); ++i) {
    if (std::isinf(want_lse[i]) || std::isinf(got_lse[i])) lse_mismatch += want_lse[i] != got_lse[i];
    else lse_error = std::max(lse_error, std::abs(got_lse[i] - want_lse[i]));
  }
  INFO("lse: max abs error " << lse_error << ", empty-row mismatches " << lse_mismatch);
  CHECK(lse_mismatch == 0);
  CHECK(lse_error < 2e-2);
}

// The device copies of every level's metadata.
struct LevelBuffers {
  std::vector<DeviceBuffer<std::int32_t>> qo, kv, indices, last;
  std::vector<aotinfer::CascadeLevelArrays> arrays;
  explicit LevelBuffers(const Problem& p) {
    for (const Level& l : p.levels) {
      qo.push_back(on_device(l.qo_indptr)), kv.push_back(on_device(l.kv_indptr));
      indices.push_back(on_device(l.indices)), last.push_back(on_device(l.last_page_len));
      arrays.push_back({qo.back().ptr, kv.back().ptr, indices.back().ptr, last.back().ptr});
    }
  }
};

aotinfer_tensor described(void* data, aotinfer_dtype dtype, std::initializer_list<std::int64_t> shape) {
  aotinfer_tensor t{};
  t.data = data;
  t.ndim = std::int32_t(shape.size());
  int i = 0;
  for (std::int64_t s : shape) t.shape[i++] = s;
  for (std::int64_t k = t.ndim - 1, step = 1; k >= 0; step *= t.shape[k--]) t.strides[k] = step;
  t.dtype = dtype;
  t.device_type = AOTINFER_DEVICE_CUDA;
  CUDA_CHECK(cudaGetDevice(&t.device_id));
  return t;
}

// Plans and runs through the C API's raw calls, twice with the outputs poisoned in between.
void run_through_c_api(const Problem& p, const aotinfer::CascadeRunArgs& a, DeviceBuffer<std::uint16_t>& o,
                       DeviceBuffer<float>& lse) {
  const BatchPrefillConfig& cfg = p.c.config.level;
  const int L = p.c.config.num_levels;
  aotinfer_cascade_config cc{};
  const std::string dtype(aotinfer::dtype_name(cfg.dtype_q));
  cc.level.dtype_q = dtype.c_str();
  cc.level.head_dim = cfg.head_dim;
  cc.level.num_qo_heads = cfg.num_qo_heads;
  cc.level.num_kv_heads = cfg.num_kv_heads;
  cc.level.page_size = cfg.page_size;
  cc.level.layout = cfg.layout == KvLayout::hnd ? "hnd" : "nhd";
  cc.level.mask = cfg.mask == MaskMode::causal ? "causal" : "none";
  cc.num_levels = L;
  aotinfer_package* pkg = nullptr;
  REQUIRE(aotinfer_package_open(package().path().c_str(), &pkg) == AOTINFER_OK);
  aotinfer_cascade* cascade = nullptr;
  REQUIRE(aotinfer_cascade_create(pkg, &cc, &cascade) == AOTINFER_OK);
  std::vector<std::int32_t> groups, counts;
  std::vector<const std::int32_t*> qo, kv, last, ids, dqo, dkv, dids, dlast;
  for (int l = 0; l < L; ++l) {
    const Level& level = p.levels[l];
    groups.push_back(std::int32_t(level.qo_indptr.size() - 1));
    counts.push_back(std::int32_t(level.indices.size()));
    qo.push_back(level.qo_indptr.data()), kv.push_back(level.kv_indptr.data());
    last.push_back(level.last_page_len.data()), ids.push_back(level.indices.data());
    dqo.push_back(a.levels[l].qo_indptr), dkv.push_back(a.levels[l].kv_indptr);
    dids.push_back(a.levels[l].kv_indices), dlast.push_back(a.levels[l].kv_last_page_len);
  }
  std::size_t float_bytes = 0, int_bytes = 0;
  REQUIRE(aotinfer_cascade_workspace_sizes(cascade, p.total_q, *std::max_element(groups.begin(), groups.end()), 0,
                                           &float_bytes, &int_bytes) == AOTINFER_OK);
  DeviceBuffer<std::uint8_t> floats(float_bytes), ints(int_bytes);
  const aotinfer_status planned = aotinfer_cascade_plan(cascade, L, groups.data(), qo.data(), kv.data(), last.data(), ids.data(),
                                                        counts.data(), p.num_pages, floats.ptr, float_bytes, ints.ptr,
                                                        int_bytes, nullptr);
  INFO(aotinfer_last_error());
  REQUIRE(planned == AOTINFER_OK);
  aotinfer_cascade_run_args args{};
  args.total_q = a.total_q;
  args.q = a.q, args.k_pages = a.k_pages, args.v_pages = a.v_pages;
  args.qo_indptr = dqo.data(), args.kv_indptr = dkv.data(), args.kv_indices = dids.data(), args.kv_last_page_len = dlast.data();
  args.o = a.o, args.lse = a.lse, args.sinks = a.sinks;
  args.logits_soft_cap = a.logits_soft_cap;
  for (int launch = 0; launch < 2; ++launch) {
    o.poison();
    lse.poison();
    REQUIRE(aotinfer_cascade_run(cascade, &args, nullptr) == AOTINFER_OK);
  }
  aotinfer_cascade_destroy(cascade);
  aotinfer_package_close(pkg);
}

struct Outcome {
  bool ran = false;
  bool prefix_split = false;  // level 0's plan split KV (C++ paths only)
};

// Runs one case end to end; ran = false when the package lacks a variant.
Outcome run_case(std::mt19937_64& rng, const Case& c) {
  std::optional<Cascade> cascade = make_cascade(c.config);
  if (!cascade) return {};
  const Problem p = make_problem(rng, c);
  const BatchPrefillConfig& cfg = c.config.level;
  const int H = cfg.num_qo_heads, d = cfg.head_dim, L = c.config.num_levels;
  std::ostringstream shape;
  for (int l = 0; l < L; ++l) {
    shape << " level " << l << ": qo_indptr";
    for (auto x : p.levels[l].qo_indptr) shape << " " << x;
    shape << ", kv_len";
    for (auto x : c.kv_lens[l]) shape << " " << x;
    shape << ";";
  }
  INFO(describe(c.config) << ", sinks " << !c.sinks.empty() << ", cap " << c.soft_cap << ";" << shape.str());
  auto q = on_device(p.q_bytes), k = on_device(p.k_pool), v = on_device(p.v_pool);
  LevelBuffers meta(p);
  DeviceBuffer<std::uint16_t> o(p.total_q * H * d);
  DeviceBuffer<float> lse(p.total_q * H);
  DeviceBuffer<float> sinks(c.sinks.size());
  if (!c.sinks.empty()) sinks.upload(c.sinks);

  aotinfer::CascadeRunArgs a;
  a.total_q = p.total_q;
  a.q = q.ptr, a.k_pages = k.ptr, a.v_pages = v.ptr;
  a.levels = meta.arrays;
  a.o = o.ptr, a.lse = lse.ptr;
  a.sinks = c.sinks.empty() ? nullptr : sinks.ptr;
  a.logits_soft_cap = c.soft_cap;
  std::ostringstream plans;  // how each level's plan cut its work (not known on the C API path)
  if (c.path == Path::c_api) {
    run_through_c_api(p, a, o, lse);
  } else {
    std::int32_t max_groups = 0;
    std::vector<aotinfer::CascadeLevel> levels;
    for (const Level& l : p.levels) {
      max_groups = std::max(max_groups, std::int32_t(l.qo_indptr.size() - 1));
      levels.push_back({l.qo_indptr, l.kv_indptr, l.last_page_len, l.indices});
    }
    Workspace ws(cascade->workspace_sizes(p.total_q, max_groups));
    cascade->plan(levels, p.num_pages, ws.ws, nullptr);
    for (int l = 0; l < L; ++l)
      plans << " level " << l << ": split " << cascade->level(l).work_plan().split << ", items " << cascade->level(l).work_plan().num_work;
    // Described tensors for the checked run: the pools as [pages, page, heads, dim] (or hnd).
    const std::int64_t page = cfg.page_size, KVH = cfg.num_kv_heads;
    aotinfer_cascade_tensors t{};
    std::vector<aotinfer_tensor> tqo, tkv, tids, tlast;
    if (c.path == Path::tensors) {
      t.q = described(q.ptr, AOTINFER_BF16, {p.total_q, H, d});
      t.k_pages = described(k.ptr, AOTINFER_BF16, {p.num_pages, cfg.layout == KvLayout::nhd ? page : KVH, cfg.layout == KvLayout::nhd ? KVH : page, d});
      t.v_pages = t.k_pages, t.v_pages.data = v.ptr;
      t.o = described(o.ptr, AOTINFER_BF16, {p.total_q, H, d});
      t.lse = described(lse.ptr, AOTINFER_F32, {p.total_q, H});
      if (!c.sinks.empty()) t.sinks = described(sinks.ptr, AOTINFER_F32, {H});
      for (int l = 0; l < L; ++l) {
        const Level& level = p.levels[l];
        tqo.push_back(described(meta.qo[l].ptr, AOTINFER_I32, {std::int64_t(level.qo_indptr.size())}));
        tkv.push_back(described(meta.kv[l].ptr, AOTINFER_I32, {std::int64_t(level.kv_indptr.size())}));
        tids.push_back(described(meta.indices[l].ptr, AOTINFER_I32, {std::int64_t(level.indices.size())}));
        tlast.push_back(described(meta.last[l].ptr, AOTINFER_I32, {std::int64_t(level.last_page_len.size())}));
      }
      t.qo_indptr = tqo.data(), t.kv_indptr = tkv.data(), t.kv_indices = tids.data(), t.kv_last_page_len = tlast.data();
    }
    // Twice, outputs poisoned in between: the second run must find the workspace as the plan
    // left it, and it is the one checked.
    for (int launch = 0; launch < 2; ++launch) {
      o.poison();
      lse.poison();
      aotinfer_attention_scalars scalars{};
      scalars.logits_soft_cap = c.soft_cap;
      if (c.path == Path::tensors) cascade->run(t, scalars, nullptr);
      else cascade->run(a, nullptr);
    }
  }
  INFO("plans:" << plans.str());
  CUDA_CHECK(cudaDeviceSynchronize());
  CUDA_CHECK(cudaGetLastError());
  check(rng, p, o.download(), lse.download());
  return {true, c.path != Path::c_api && cascade->level(0).work_plan().split};
}

std::vector<float> random_sinks(std::mt19937_64& rng, int num_qo_heads) {
  std::vector<float> sinks(num_qo_heads);
  for (float& s : sinks) s = float(uniform(rng, -2.0, 8.0));
  return sinks;
}

}  // namespace

TEST_CASE("cascade of 1-3 levels, causal and not, matches attention over the union of each row's keys", "[gpu][cascade]") {
  SEEDED_RNG(rng);
  int ran = 0;
  for (int levels : {1, 2, 3})
    for (MaskMode mask : {MaskMode::causal, MaskMode::none}) {
      const int group = pick<int>(rng, {1, 2, 4, 8});
      CascadeConfig config = base_config(levels, mask, 2 * group, 2);
      config.level.page_size = pick<int>(rng, {1, 16, 24, 64});
      config.level.layout = pick<KvLayout>(rng, {KvLayout::nhd, KvLayout::hnd});
      Case c = random_case(rng, config, uniform(rng, 1, 7));
      if (uniform(rng, 0, 1)) c.soft_cap = random_soft_cap(rng);
      ran += run_case(rng, c).ran;
    }
  REQUIRE_SOME_RAN(ran);
}

TEST_CASE("cascade: a long shared prefix that splits, sinks, and the checked and C API paths", "[gpu][cascade]") {
  SEEDED_RNG(rng);
  int ran = 0;
  // Parallel sampling: one prompt of 8000 keys shared by 4 samples of a few tokens each; the
  // prefix level has one group with long keys, so its plan splits KV.
  CascadeConfig config = base_config(2, MaskMode::causal, 8, 2);
  Case sampling = random_case(rng, config, 4);
  sampling.groups[0] = {4};
  sampling.kv_lens[0] = {8000};
  sampling.sinks = random_sinks(rng, 8);
  sampling.soft_cap = random_soft_cap(rng);  // in every level, the split prefix's chunks too
  const Outcome shared = run_case(rng, sampling);
  ran += shared.ran;
  if (shared.ran) CHECK(shared.prefix_split);
  for (Path path : {Path::tensors, Path::c_api}) {
    Case c = random_case(rng, base_config(3, MaskMode::causal, 8, 2), 5);
    c.path = path;
    if (path == Path::c_api) c.sinks = random_sinks(rng, 8);
    c.soft_cap = random_soft_cap(rng);  // through the described scalars and the C API's run args
    ran += run_case(rng, c).ran;
  }
  REQUIRE_SOME_RAN(ran);
}

TEST_CASE("Cascade in CUDA-graph mode: one captured graph replays later plans", "[gpu][cascade]") {
  SEEDED_RNG(rng);
  CascadeConfig config = base_config(3, MaskMode::causal, 8, 2);
  config.level.cuda_graph = true;
  config.level.max_batch = 6;
  config.level.max_total_q = 512;
  std::optional<Cascade> cascade = make_cascade(config);
  REQUIRE_SOME_RAN(cascade ? 1 : 0);
  const float cap = uniform(rng, 0, 1) ? random_soft_cap(rng) : 0;  // captured with the launches
  INFO(describe(config) << ", cap " << cap);
  const BatchPrefillConfig& cfg = config.level;
  const int H = cfg.num_qo_heads, d = cfg.head_dim, L = config.num_levels;
  constexpr std::int32_t kPoolPages = 1200;
  const std::int64_t page_bytes = std::int64_t(cfg.page_size) * cfg.num_kv_heads * d * 2;
  DeviceBuffer<std::uint16_t> q(cfg.max_total_q * H * d), o(cfg.max_total_q * H * d);
  DeviceBuffer<std::uint8_t> k(kPoolPages * page_bytes), v(kPoolPages * page_bytes);
  DeviceBuffer<float> lse(cfg.max_total_q * H);
  std::vector<DeviceBuffer<std::int32_t>> qo, kv, ids, last;
  std::vector<aotinfer::CascadeLevelArrays> arrays;
  for (int l = 0; l < L; ++l) {
    qo.emplace_back(cfg.max_batch + 1), kv.emplace_back(cfg.max_batch + 1), ids.emplace_back(kPoolPages),
        last.emplace_back(cfg.max_batch);
    arrays.push_back({qo.back().ptr, kv.back().ptr, ids.back().ptr, last.back().ptr});
  }
  Workspace ws(cascade->workspace_sizes(cfg.max_total_q, cfg.max_batch));
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  for (int i = 0; i < 4; ++i) {
    Case c = random_case(rng, config, i == 0 ? 6 : uniform(rng, 1, 6));
    if (i == 1) c.groups[0] = {std::int32_t(c.qo_lens.size())}, c.kv_lens[0] = {9000};  // one long prefix: split
    c.soft_cap = cap;
    const Problem p = make_problem(rng, c);
    REQUIRE(p.total_q <= cfg.max_total_q);
    REQUIRE(p.num_pages <= kPoolPages);
    k.poison(), v.poison();
    CUDA_CHECK(cudaMemcpy(q.ptr, p.q_bytes.data(), p.q_bytes.size(), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(k.ptr, p.k_pool.data(), p.k_pool.size(), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(v.ptr, p.v_pool.data(), p.v_pool.size(), cudaMemcpyHostToDevice));
    std::vector<aotinfer::CascadeLevel> levels;
    for (int l = 0; l < L; ++l) {
      const Level& level = p.levels[l];
      CUDA_CHECK(cudaMemcpy(qo[l].ptr, level.qo_indptr.data(), level.qo_indptr.size() * 4, cudaMemcpyHostToDevice));
      CUDA_CHECK(cudaMemcpy(kv[l].ptr, level.kv_indptr.data(), level.kv_indptr.size() * 4, cudaMemcpyHostToDevice));
      if (!level.indices.empty())
        CUDA_CHECK(cudaMemcpy(ids[l].ptr, level.indices.data(), level.indices.size() * 4, cudaMemcpyHostToDevice));
      if (!level.last_page_len.empty())
        CUDA_CHECK(cudaMemcpy(last[l].ptr, level.last_page_len.data(), level.last_page_len.size() * 4, cudaMemcpyHostToDevice));
      levels.push_back({level.qo_indptr, level.kv_indptr, level.last_page_len, level.indices});
    }
    o.poison();
    lse.poison();
    cascade->plan(levels, kPoolPages, ws.ws, aotinfer::Stream(stream));
    INFO("plan " << i << ": total_q " << p.total_q << ", prefix level split " << cascade->level(0).work_plan().split);
    if (i == 1) CHECK(cascade->level(0).work_plan().split);
    if (i == 0) {
      aotinfer::CascadeRunArgs a;
      a.total_q = p.total_q;
      a.q = q.ptr, a.k_pages = k.ptr, a.v_pages = v.ptr;
      a.levels = arrays;
      a.o = o.ptr, a.lse = lse.ptr;
      a.logits_soft_cap = cap;
      CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
      cascade->run(a, aotinfer::Stream(stream));
      CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
      CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    }
    // Two replays, poisoned in between: the second must find the workspace as the plan left it.
    CUDA_CHECK(cudaGraphLaunch(exec, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    o.poison();
    lse.poison();
    CUDA_CHECK(cudaGraphLaunch(exec, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    check(rng, p, o.download(), lse.download());
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

TEST_CASE("Cascade refuses bad plans and runs before launching anything", "[gpu][cascade]") {
  SEEDED_RNG(rng);
  std::optional<Cascade> cascade = make_cascade(base_config(2, MaskMode::causal, 8, 2));
  REQUIRE_SOME_RAN(cascade ? 1 : 0);
  auto invalid = [](auto&& f) -> std::string {
    try {
      f();
    } catch (const aotinfer::Error& e) {
      INFO(e.what());
      CHECK(e.code() == aotinfer::ErrorCode::invalid_argument);
      return e.what();
    }
    FAIL("no aotinfer::Error was thrown");
    return {};
  };
  // Three requests under one shared prefix of 7 pages.
  const Problem p = make_problem(rng, Case{cascade->config(), {5, 12, 7}, {{3}, {1, 1, 1}}, {{100}, {20, 30, 10}}});
  std::vector<aotinfer::CascadeLevel> levels;
  for (const Level& l : p.levels) levels.push_back({l.qo_indptr, l.kv_indptr, l.last_page_len, l.indices});
  Workspace ws(cascade->workspace_sizes(p.total_q, 3));
  CHECK_THAT(invalid([&] { cascade->run(aotinfer::CascadeRunArgs{}, nullptr); }), Contains("plan"));
  aotinfer::Workspace tiny = ws.ws;
  tiny.int_bytes = 8;
  CHECK_THAT(invalid([&] { cascade->plan(levels, p.num_pages, tiny, nullptr); }), Contains("cascade: the workspace"));
  CHECK_THAT(invalid([&] { cascade->plan(levels, 1, ws.ws, nullptr); }), Contains("cascade: level 0: kv_indices"));
  cascade->plan(levels, p.num_pages, ws.ws, nullptr);
  LevelBuffers meta(p);
  aotinfer::CascadeRunArgs a;
  a.total_q = p.total_q + 1;
  a.levels = meta.arrays;
  CHECK_THAT(invalid([&] { cascade->run(a, nullptr); }), Contains("plan again"));
  a.total_q = p.total_q;
  CHECK_THAT(invalid([&] { cascade->run(a, nullptr); }), Contains("must not be null"));
  a.levels = std::span(meta.arrays).first(1);
  CHECK_THAT(invalid([&] { cascade->run(a, nullptr); }), Contains("1 levels, the config has 2"));

  // A sliding window counts positions, which restart in each level: refused, in C++ and through
  // the C API.
  CascadeConfig windowed = cascade->config();
  windowed.level.window_left = uniform(rng, 0, 100);
  CHECK_THAT(invalid([&] { Cascade(package(), windowed); }), Contains("window"));
  aotinfer_package* pkg = nullptr;
  REQUIRE(aotinfer_package_open(package().path().c_str(), &pkg) == AOTINFER_OK);
  const std::string dtype(aotinfer::dtype_name(windowed.level.dtype_q));
  aotinfer_cascade_config cc{};
  cc.level.dtype_q = dtype.c_str();
  cc.level.head_dim = windowed.level.head_dim;
  cc.level.num_qo_heads = windowed.level.num_qo_heads;
  cc.level.num_kv_heads = windowed.level.num_kv_heads;
  cc.level.page_size = windowed.level.page_size;
  cc.level.sliding_window = 1;
  cc.level.window_left = windowed.level.window_left;
  cc.num_levels = windowed.num_levels;
  aotinfer_cascade* c_cascade = nullptr;
  CHECK(aotinfer_cascade_create(pkg, &cc, &c_cascade) == AOTINFER_INVALID_ARGUMENT);
  CHECK_THAT(std::string(aotinfer_last_error()), Contains("window"));
  aotinfer_cascade_destroy(c_cascade);
  aotinfer_package_close(pkg);
}
