// batch_prefill_paged / batch_prefill_ragged on the GPU through aotinfer::BatchPrefill, from the
// package under test, against the fp64 CPU reference (tests/reference/prefill_reference.hpp) on
// freshly drawn shapes and values. The seed is printed with every failure; AOTINFER_TEST_SEED
// replays it.
//
// Every output element must be finite (o starts as NaN bytes); a sample of rows per request
// (first, last and random tokens, all heads) is compared with the reference. Paged caches use a
// random permutation of physical pages, and spare pages and unwritten slots hold NaN bytes, so
// reading outside a request's keys shows up in the outputs. Masks, sliding windows, soft caps and
// ALiBi are no variant axes: every variant serves them all (ALiBi those without RoPE), so cases
// draw them (the mask, window_left and ALiBi in the config, since the plan gives each query tile
// only the keys they keep; the cap in the run arguments; a custom mask's bits there too).
// head_dim_vo is a variant axis: q and K rows are head_dim wide, V and o rows head_dim_vo wide
// (equal but for MLA models' prefill, 192 / 128: 16-bit K/V, no RoPE; its own test cases too).
#include <algorithm>
#include <limits>
#include <numeric>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "aotinfer/aotinfer.h"
#include "aotinfer/batch_prefill.hpp"
#include "custom_masks.hpp"
#include "gpu_test_util.hpp"
#include "random_values.hpp"
#include "reference/prefill_reference.hpp"

using namespace gpu_test;
using aotinfer::BatchPrefill;
using aotinfer::BatchPrefillConfig;
using aotinfer::ErrorCode;
using aotinfer::KvLayout;
using aotinfer::KvStorage;
using aotinfer::MaskMode;
using aotinfer::PosEncoding;
using aotinfer_test::Contains;
namespace ref = aotinfer::reference;

namespace {

const char* mask_name(MaskMode m) { return m == MaskMode::causal ? "causal" : m == MaskMode::custom ? "custom" : "none"; }

// Whether V and o rows (BatchPrefillConfig::vo_dim) are narrower than q's and
// K's: the prefill of MLA models (head_dim 192, head_dim_vo 128).
bool is_mla(const BatchPrefillConfig& c) { return c.vo_dim() != c.head_dim; }

std::string describe(const BatchPrefillConfig& c) {
  std::ostringstream s;
  s << (c.kv_storage == KvStorage::paged ? "batch_prefill_paged" : "batch_prefill_ragged")
    << "{dtype_q=" << aotinfer::dtype_name(c.dtype_q) << ", head_dim=" << c.head_dim;
  if (is_mla(c)) s << ", head_dim_vo=" << c.vo_dim();
  s << ", mask=" << mask_name(c.mask) << ", dtype_kv=" << aotinfer::dtype_name(c.dtype_kv)
    << ", dtype_o=" << aotinfer::dtype_name(c.dtype_o) << ", pos_encoding=" << aotinfer::pos_encoding_name(c.pos_encoding)
    << "} heads " << c.num_qo_heads << "/" << c.num_kv_heads;
  if (c.kv_storage == KvStorage::paged) s << " page " << c.page_size << (c.layout == KvLayout::nhd ? " nhd" : " hnd");
  if (c.kv_split.mode != aotinfer::KvSplit::Mode::adaptive)
    s << ", kv_split " << aotinfer::kv_split_name(c.kv_split.mode) << " " << c.kv_split.tokens;
  return s.str();
}

// BatchPrefill for a config, or nullopt (one WARN per variant) when the package lacks it.
std::optional<BatchPrefill> make_prefill(const BatchPrefillConfig& c) {
  try {
    return BatchPrefill(package(), c);
  } catch (const aotinfer::Error& e) {
    if (e.code() != ErrorCode::not_found) throw;
    static std::set<std::string> warned;
    if (warned.insert(describe(c)).second) WARN("skipped, not in the package: " << describe(c));
    return std::nullopt;
  }
}

// Configs of every prefill variant in the package (heads, pages and mask chosen by the caller).
// head_dim_vo from the key's axis: set where it differs from head_dim, else 0 (head_dim; a
// package built before the axis existed has no such axis).
std::vector<BatchPrefillConfig> package_configs() {
  std::vector<BatchPrefillConfig> out;
  for (const char* family : {"batch_prefill_paged", "batch_prefill_ragged"})
    for (const auto* v : package().variants(family)) {
      auto axis = [&](const char* name) { return *v->key.find(name); };
      BatchPrefillConfig c;
      c.kv_storage = std::string(family) == "batch_prefill_paged" ? KvStorage::paged : KvStorage::ragged;
      c.dtype_q = *aotinfer::parse_dtype(axis("dtype_q"));
      c.dtype_kv = *aotinfer::parse_dtype(axis("dtype_kv"));
      c.dtype_o = *aotinfer::parse_dtype(axis("dtype_o"));
      c.head_dim = std::stoi(axis("head_dim"));
      if (const std::string* vo = v->key.find("head_dim_vo"); vo && std::stoi(*vo) != c.head_dim) c.head_dim_vo = std::stoi(*vo);
      c.pos_encoding = axis("pos_encoding") == "rope_llama" ? PosEncoding::rope_llama : PosEncoding::none;
      out.push_back(c);
    }
  return out;
}

// The package's MLA-prefill variants (head_dim 192, head_dim_vo 128) of the storage.
std::vector<BatchPrefillConfig> mla_configs(KvStorage storage) {
  std::vector<BatchPrefillConfig> out;
  for (const BatchPrefillConfig& v : package_configs())
    if (v.kv_storage == storage && v.head_dim == 192 && v.vo_dim() == 128) out.push_back(v);
  return out;
}

// The plain bf16 variant of the given storage (no RoPE) with the mask: head_dim 128 where the
// package holds it, else its smallest head_dim of that kind (or 128, which make_prefill then
// reports missing); never an MLA pair (head_dim_vo != head_dim).
BatchPrefillConfig base_config(KvStorage storage, MaskMode mask, int qo_heads, int kv_heads) {
  BatchPrefillConfig c;
  c.kv_storage = storage;
  c.mask = mask;
  c.num_qo_heads = qo_heads;
  c.num_kv_heads = kv_heads;
  std::set<int> dims;
  for (const BatchPrefillConfig& v : package_configs())
    if (v.kv_storage == storage && v.dtype_q == c.dtype_q && v.dtype_kv == c.dtype_kv &&
        v.dtype_o == c.dtype_o && v.pos_encoding == c.pos_encoding && !is_mla(v))
      dims.insert(v.head_dim);
  if (!dims.empty() && !dims.count(c.head_dim)) c.head_dim = *dims.begin();
  return c;
}

struct Case {
  BatchPrefillConfig config;  // with the window (window_left), which the plan needs
  std::vector<std::int32_t> qo_lens, kv_lens;
  float soft_cap = 0;         // > 0: scores are capped
  int sampled_tokens = 24;  // per request, besides the first and last
  std::vector<float> sinks{};  // [num_qo_heads] attention-sink logits, or empty
  bool c_api = false;          // plan and run through the C API's raw entry points
  int q_pad = 0;               // q tokens this many elements (NaN) apart beyond their heads: a fused qkv slice
  float k_scale = 1, v_scale = 1;  // K/V dequantisation (fp8 caches)
  double kv_range = 2;             // K/V values drawn from [-kv_range, kv_range]
  // > 0: each q row (token, head) scaled by 2^u, u drawn from [-q_row_spread, 0] ([.., 2] for
  // q_one_hot), and each of its elements by 2^-u, u from [0, 4] (exactly: powers of two);
  // q_one_hot: a row keeps one element (at a random column), the others zero
  int q_row_spread = 0;
  bool q_one_hot = false;
  double lse_tolerance = 2e-2;  // the largest absolute lse error accepted
  std::vector<std::vector<bool>> masks{};  // mask custom: each request's [qo_len][kv_len] bits
  // V this many (NaN) elements apart beyond packed, between its tokens (ragged) or pages (paged):
  // a slice of a wider tensor, passed as v_stride. MLA pairs only (equal widths share K's strides).
  int v_pad = 0;
  bool tensors = false;  // run through the described-tensors run() (aotinfer_batch_prefill_tensors)
};

// The case under a custom mask of that shape.
Case with_custom_mask(std::mt19937_64& rng, Case c, MaskShape shape) {
  c.config.mask = MaskMode::custom;
  c.masks = random_masks(rng, c.qo_lens, c.kv_lens, shape);
  return c;
}

// The q image with each token's row followed by `pad` NaN elements (16-bit types).
std::vector<std::uint8_t> pad_rows(const std::vector<std::uint8_t>& dense, std::int64_t row_elems, int pad) {
  if (pad == 0) return dense;
  const std::size_t row = std::size_t(row_elems) * 2, stride = row + std::size_t(pad) * 2, rows = dense.size() / row;
  std::vector<std::uint8_t> out(rows * stride, 0xff);
  for (std::size_t r = 0; r < rows; ++r) std::memcpy(&out[r * stride], &dense[r * row], row);
  return out;
}

// Sinks from well below to well above a row's lse: some barely count, some dominate.
std::vector<float> random_sinks(std::mt19937_64& rng, int num_qo_heads) {
  std::vector<float> sinks(num_qo_heads);
  for (float& s : sinks) s = float(uniform(rng, -2.0, 8.0));
  return sinks;
}

struct Outcome {
  bool ran = false;
  bool split = false;
  bool large_tile = false;
};

// Host data of a case: values as the kernel reads them, and device buffers.
struct Problem {
  Case c;
  std::int64_t total_q = 0, total_kv = 0;
  std::vector<std::int32_t> qo_indptr, kv_indptr;  // kv_indptr: tokens (ragged) or pages (paged)
  std::vector<std::int32_t> indices, last_page_len;
  std::int32_t num_pages = 0;
  std::vector<double> q;                 // [total_q][H][d]
  std::vector<std::vector<double>> k, v;  // per request [kv_len][KVH][d] (k), [kv_len][KVH][dv] (v)
  std::vector<std::uint8_t> q_bytes, k_bytes, v_bytes;  // device images (ragged rows or page pools)
  std::int64_t v_stride = 0;  // the run argument: elements between V's tokens (ragged) or pages (paged); 0: packed
  std::vector<std::uint8_t> mask_bytes;    // custom masks packed as FlashInfer packs them
  std::vector<std::int32_t> mask_indptr;
};

Problem make_problem(std::mt19937_64& rng, const Case& c) {
  const BatchPrefillConfig& cfg = c.config;
  const int H = cfg.num_qo_heads, KVH = cfg.num_kv_heads, d = cfg.head_dim, dv = cfg.vo_dim();
  Problem p;
  p.c = c;
  const std::size_t batch = c.qo_lens.size();
  p.qo_indptr.assign(1, 0);
  for (auto len : c.qo_lens) p.qo_indptr.push_back(p.qo_indptr.back() + len);
  p.total_q = p.qo_indptr.back();
  if (cfg.mask == MaskMode::custom) {
    PackedMasks packed = pack_masks(c.masks);
    p.mask_bytes = std::move(packed.bytes);
    p.mask_indptr = std::move(packed.indptr);
  }
  Values qv(rng, cfg.dtype_q), kvv(rng, cfg.dtype_kv, c.kv_range);
  p.q.resize(p.total_q * H * d);
  p.q_bytes.resize(p.q.size() * 2);
  qv.fill(p.q_bytes.data(), p.q.data(), std::int64_t(p.q.size()));
  if (c.q_row_spread > 0) {
    std::int64_t inexact = 0;  // values the scaling moved off the type's grid (none: powers of two in range)
    for (std::int64_t row = 0; row < p.total_q * H; ++row) {
      const double row_scale = std::ldexp(1.0, uniform(rng, -c.q_row_spread, c.q_one_hot ? 2 : 0));
      const int kept = uniform(rng, 0, d - 1);
      for (int e = 0; e < d; ++e) {
        const std::int64_t i = row * d + e;
        p.q[i] *= c.q_one_hot && e != kept ? 0.0 : row_scale * std::ldexp(1.0, -uniform(rng, 0, 4));
        const std::uint16_t bits = to_bits(p.q[i], cfg.dtype_q);
        inexact += from_bits(bits, cfg.dtype_q) != p.q[i];
        std::memcpy(&p.q_bytes[std::size_t(i) * 2], &bits, 2);
      }
    }
    REQUIRE(inexact == 0);
  }

  const std::int64_t row = std::int64_t(KVH) * d, vrow = std::int64_t(KVH) * dv;  // elements per token
  const std::size_t esize = aotinfer::dtype_size(cfg.dtype_kv);
  p.k.resize(batch);
  p.v.resize(batch);
  std::vector<std::vector<std::uint8_t>> kb(batch), vb(batch);
  for (std::size_t i = 0; i < batch; ++i) {
    const std::int64_t n = std::int64_t(c.kv_lens[i]) * row, nv = std::int64_t(c.kv_lens[i]) * vrow;
    p.k[i].resize(n), p.v[i].resize(nv), kb[i].resize(n * esize), vb[i].resize(nv * esize);
    kvv.fill(kb[i].data(), p.k[i].data(), n);
    kvv.fill(vb[i].data(), p.v[i].data(), nv);
    p.total_kv += c.kv_lens[i];
  }
  if (cfg.kv_storage == KvStorage::ragged) {
    // V's tokens vrow + v_pad elements apart, the padding NaN.
    const std::int64_t vs = vrow + c.v_pad;
    p.v_stride = c.v_pad ? vs : 0;
    p.kv_indptr.assign(1, 0);
    for (std::size_t i = 0; i < batch; ++i) {
      p.kv_indptr.push_back(p.kv_indptr.back() + c.kv_lens[i]);
      p.k_bytes.insert(p.k_bytes.end(), kb[i].begin(), kb[i].end());
    }
    // Spare NaN rows past the batch's, as a buffer with room for more tokens holds: a tile's
    // last rows reach past its request, and none of these may weigh in a result.
    p.k_bytes.resize(p.k_bytes.size() + 3 * row * esize, 0xff);
    p.v_bytes.assign(std::size_t((p.total_kv + 3) * vs) * esize, 0xff);
    for (std::size_t i = 0; i < batch; ++i) {
      if (c.v_pad == 0) {  // packed: the request's rows at once
        std::memcpy(&p.v_bytes[std::size_t(p.kv_indptr[i] * vs) * esize], vb[i].data(), vb[i].size());
        continue;
      }
      for (std::int32_t t = 0; t < c.kv_lens[i]; ++t)
        std::memcpy(&p.v_bytes[std::size_t((p.kv_indptr[i] + t) * vs) * esize], &vb[i][std::size_t(t * vrow) * esize], vrow * esize);
    }
    return p;
  }
  // Paged: pages in a random order among a few spare (NaN) pages.
  const int page = cfg.page_size;
  p.kv_indptr.assign(1, 0);
  for (std::size_t i = 0; i < batch; ++i) {
    const std::int32_t pages = (c.kv_lens[i] + page - 1) / page;
    p.kv_indptr.push_back(p.kv_indptr.back() + pages);
    p.last_page_len.push_back(pages == 0 ? 0 : c.kv_lens[i] - (pages - 1) * page);
  }
  p.num_pages = p.kv_indptr.back() + 3;
  std::vector<std::int32_t> perm(p.num_pages);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  p.indices.assign(perm.begin(), perm.begin() + p.kv_indptr.back());
  // V's pages page * vrow + v_pad elements apart, the padding NaN.
  const std::int64_t page_elems = std::int64_t(page) * row, v_page_elems = std::int64_t(page) * vrow + c.v_pad;
  p.v_stride = c.v_pad ? v_page_elems : 0;
  p.k_bytes.assign(p.num_pages * page_elems * esize, 0xff);  // NaN in every type, fp8 too
  p.v_bytes.assign(p.num_pages * v_page_elems * esize, 0xff);
  for (std::size_t i = 0; i < batch; ++i)
    for (std::int32_t t = 0; t < c.kv_lens[i]; ++t)
      for (int h = 0; h < KVH; ++h) {
        const std::int64_t pg = p.indices[p.kv_indptr[i] + t / page], slot = t % page;
        const std::int64_t in_page = cfg.layout == KvLayout::nhd ? slot * KVH + h : std::int64_t(h) * page + slot;  // rows
        const std::int64_t at = pg * page_elems + in_page * d, v_at = pg * v_page_elems + in_page * dv;
        std::memcpy(&p.k_bytes[at * esize], &kb[i][(std::int64_t(t) * KVH + h) * d * esize], d * esize);
        std::memcpy(&p.v_bytes[v_at * esize], &vb[i][(std::int64_t(t) * KVH + h) * dv * esize], dv * esize);
      }
  return p;
}

// Compares o/lse of the sampled rows with the reference; every o element must be finite.
void check(std::mt19937_64& rng, const Problem& p, const std::vector<std::uint16_t>& o, const std::vector<float>& lse) {
  const BatchPrefillConfig& cfg = p.c.config;
  const int H = cfg.num_qo_heads, d = cfg.head_dim, dv = cfg.vo_dim();
  std::int64_t non_finite = 0;
  for (std::uint16_t bits : o) non_finite += !std::isfinite(from_bits(bits, cfg.dtype_o));
  REQUIRE(non_finite == 0);

  ref::PrefillParams rp;
  rp.num_qo_heads = H, rp.num_kv_heads = cfg.num_kv_heads, rp.head_dim = d, rp.head_dim_vo = dv;
  rp.causal = cfg.mask == MaskMode::causal;
  rp.rope = cfg.pos_encoding == PosEncoding::rope_llama;
  rp.alibi = cfg.pos_encoding == PosEncoding::alibi;
  rp.sm_scale = 1.0 / std::sqrt(double(d));  // the default: head_dim's (q and K), also where V is narrower
  rp.logits_soft_cap = p.c.soft_cap > 0 ? p.c.soft_cap : 0;
  rp.window_left = cfg.window_left >= 0 ? cfg.window_left : -1;
  rp.rope_rcp_theta = 1e-4;
  rp.sinks.assign(p.c.sinks.begin(), p.c.sinks.end());
  rp.k_scale = p.c.k_scale, rp.v_scale = p.c.v_scale;
  // The products' operand type: the KV's, f16 for fp8 KV (widened exactly).
  const aotinfer::DType operand = aotinfer::dtype_size(cfg.dtype_kv) == 1 ? aotinfer::DType::f16 : cfg.dtype_kv;
  rp.round_operand = [operand](double x) { return round_to(x, operand); };

  struct Row {
    std::size_t request;
    std::int64_t t;
  };
  std::vector<Row> rows;
  for (std::size_t i = 0; i < p.c.qo_lens.size(); ++i) {
    const std::int64_t n = p.c.qo_lens[i];
    std::set<std::int64_t> ts;
    if (n > 0) ts = {0, n - 1};
    for (int s = 0; s < p.c.sampled_tokens && n > 0; ++s) ts.insert(uniform<std::int64_t>(rng, 0, n - 1));
    for (auto t : ts) rows.push_back({i, t});
  }
  std::vector<std::vector<double>> keys(p.c.qo_lens.size());
  std::vector<double> got, want;
  std::vector<double> got_lse, want_lse;
  got.resize(rows.size() * H * dv), want.resize(rows.size() * H * dv);
  got_lse.resize(rows.size() * H), want_lse.resize(rows.size() * H);
  {
    std::vector<std::thread> threads;
    const unsigned n = std::max(1u, std::thread::hardware_concurrency());
    for (unsigned w = 0; w < n; ++w)
      threads.emplace_back([&, w] {
        for (std::size_t i = w; i < keys.size(); i += n) keys[i] = ref::prefill_keys(rp, p.k[i], p.c.kv_lens[i]);
      });
    for (auto& th : threads) th.join();
    threads.clear();
    for (unsigned w = 0; w < n; ++w)
      threads.emplace_back([&, w] {
        for (std::size_t r = w; r < rows.size(); r += n) {
          const auto [i, t] = rows[r];
          const std::int64_t token = p.qo_indptr[i] + t;
          for (int h = 0; h < H; ++h) {
            const ref::State s = ref::prefill_row(rp, &p.q[(token * H + h) * d], t, p.c.qo_lens[i], keys[i], p.v[i],
                                                  p.c.kv_lens[i], h, p.c.masks.empty() ? nullptr : &p.c.masks[i]);
            for (int e = 0; e < dv; ++e) {
              want[(r * H + h) * dv + e] = s.v[e];
              got[(r * H + h) * dv + e] = from_bits(o[(token * H + h) * dv + e], cfg.dtype_o);
            }
            want_lse[r * H + h] = s.lse;
            got_lse[r * H + h] = lse[token * H + h];
          }
        }
      });
    for (auto& th : threads) th.join();
  }
  const double error = relative_error(got, want);
  const double tol = std::max(tolerance(cfg.dtype_o), tolerance(operand));
  INFO("relative error of o over " << rows.size() << " sampled tokens x " << H << " heads: " << error << " (tolerance " << tol << ")");
  CHECK(error < tol);
  double lse_error = 0;
  std::int64_t lse_mismatch = 0;
  for (std::size_t i = 0; i < want_lse.size(); ++i) {
    if (std::isinf(want_lse[i]) || std::isinf(got_lse[i])) lse_mismatch += want_lse[i] != got_lse[i];
    else lse_error = std::max(lse_error, std::abs(got_lse[i] - want_lse[i]));
  }
  INFO("lse: max abs error " << lse_error << ", empty-row mismatches " << lse_mismatch);
  CHECK(lse_mismatch == 0);
  CHECK(lse_error < p.c.lse_tolerance);
}

// Runs one case end to end; ran = false when the package lacks the variant.
// Plans and runs `a` through the C API's raw entry points, twice with the outputs poisoned in
// between, as run_case does through BatchPrefill.
void run_through_c_api(const Case& c, const Problem& p, const aotinfer::PrefillRunArgs& a, DeviceBuffer<std::uint16_t>& o,
                       DeviceBuffer<float>& lse) {
  const BatchPrefillConfig& cfg = c.config;
  const std::string dtype_q(aotinfer::dtype_name(cfg.dtype_q)), dtype_kv(aotinfer::dtype_name(cfg.dtype_kv)),
      dtype_o(aotinfer::dtype_name(cfg.dtype_o));
  const bool paged = cfg.kv_storage == KvStorage::paged;
  aotinfer_batch_prefill_config cc{};
  cc.dtype_q = dtype_q.c_str();
  cc.dtype_kv = dtype_kv.c_str();
  cc.dtype_o = dtype_o.c_str();
  cc.head_dim = cfg.head_dim;
  cc.head_dim_vo = cfg.head_dim_vo;
  cc.num_qo_heads = cfg.num_qo_heads;
  cc.num_kv_heads = cfg.num_kv_heads;
  cc.kv_storage = paged ? "paged" : "ragged";
  cc.page_size = cfg.page_size;
  cc.layout = cfg.layout == KvLayout::hnd ? "hnd" : "nhd";
  cc.mask = mask_name(cfg.mask);
  cc.pos_encoding = aotinfer::pos_encoding_name(cfg.pos_encoding);
  cc.sliding_window = cfg.window_left >= 0;  // a flag beside the count: a zeroed config has no window
  cc.window_left = std::max(0, cfg.window_left);
  aotinfer_package* pkg = nullptr;
  REQUIRE(aotinfer_package_open(package().path().c_str(), &pkg) == AOTINFER_OK);
  aotinfer_batch_prefill* prefill = nullptr;
  const aotinfer_status created = aotinfer_batch_prefill_create(pkg, &cc, &prefill);
  INFO("aotinfer_batch_prefill_create: " << (created == AOTINFER_OK ? "ok" : aotinfer_last_error()));
  REQUIRE(created == AOTINFER_OK);
  std::size_t float_bytes = 0, int_bytes = 0;
  REQUIRE(aotinfer_batch_prefill_workspace_sizes(prefill, p.total_q, a.batch, 0, &float_bytes, &int_bytes) == AOTINFER_OK);
  DeviceBuffer<std::uint8_t> floats(float_bytes), ints(int_bytes);
  const aotinfer_status planned =
      paged ? aotinfer_batch_prefill_plan_paged(prefill, p.qo_indptr.data(), p.kv_indptr.data(), a.batch,
                                                p.last_page_len.data(), p.indices.data(), std::int32_t(p.indices.size()),
                                                p.num_pages, floats.ptr, float_bytes, ints.ptr, int_bytes, nullptr)
            : aotinfer_batch_prefill_plan_ragged(prefill, p.qo_indptr.data(), p.kv_indptr.data(), a.batch, floats.ptr,
                                                 float_bytes, ints.ptr, int_bytes, nullptr);
  INFO(aotinfer_last_error());
  REQUIRE(planned == AOTINFER_OK);
  aotinfer_batch_prefill_run_args args{};
  args.batch = a.batch;
  args.total_q = a.total_q;
  args.q = a.q, args.qo_indptr = a.qo_indptr, args.k = a.k, args.v = a.v, args.kv_indptr = a.kv_indptr;
  args.kv_indices = paged ? a.kv_indices : nullptr, args.kv_last_page_len = paged ? a.kv_last_page_len : nullptr;
  args.o = a.o, args.lse = a.lse, args.sinks = a.sinks;
  args.logits_soft_cap = a.logits_soft_cap;
  args.q_stride_token = a.q_stride;
  args.k_scale = a.k_scale, args.v_scale = a.v_scale;
  args.custom_mask = a.custom_mask, args.mask_indptr = a.mask_indptr;
  args.v_stride = a.v_stride;
  for (int launch = 0; launch < 2; ++launch) {
    o.poison();
    lse.poison();
    REQUIRE(aotinfer_batch_prefill_run(prefill, &args, nullptr) == AOTINFER_OK);
  }
  aotinfer_batch_prefill_destroy(prefill);
  aotinfer_package_close(pkg);
}

// A described device tensor (aotinfer/tensor.h) of the shape, row-major but for the first
// dimension's stride (0: packed).
aotinfer_tensor described(const void* data, aotinfer::DType dtype, std::initializer_list<std::int64_t> shape, std::int64_t first_stride = 0) {
  aotinfer_tensor t{};
  t.data = const_cast<void*>(data);
  t.ndim = std::int32_t(shape.size());
  int i = 0;
  for (std::int64_t n : shape) t.shape[i++] = n;
  for (std::int64_t k = t.ndim - 1, step = 1; k >= 0; step *= t.shape[k--]) t.strides[k] = step;
  if (first_stride && t.ndim > 0) t.strides[0] = first_stride;
  t.dtype = std::int32_t(dtype);
  t.device_type = AOTINFER_DEVICE_CUDA;
  CUDA_CHECK(cudaGetDevice(&t.device_id));
  return t;
}

// The run arguments `a` as described tensors: q [total_q, H, d] (token-strided when q_pad), K and
// V with their own widths and strides (ragged [rows, KVH, d or dv], pools [pages, page, KVH, .]
// NHD or [pages, KVH, page, .] HND), o [total_q, H, dv], lse, sinks and the metadata.
aotinfer_batch_prefill_tensors describe_tensors(const Problem& p, const aotinfer::PrefillRunArgs& a) {
  const BatchPrefillConfig& cfg = p.c.config;
  const std::int64_t H = cfg.num_qo_heads, KVH = cfg.num_kv_heads, d = cfg.head_dim, dv = cfg.vo_dim();
  const std::int64_t batch = std::int64_t(p.c.qo_lens.size()), esize = std::int64_t(aotinfer::dtype_size(cfg.dtype_kv));
  aotinfer_batch_prefill_tensors t{};
  t.q = described(a.q, cfg.dtype_q, {p.total_q, H, d}, a.q_stride);
  if (cfg.kv_storage == KvStorage::paged) {
    const std::int64_t page = cfg.page_size, pages = p.num_pages;
    const std::int64_t v_page = p.v_stride ? p.v_stride : page * KVH * dv;
    if (cfg.layout == KvLayout::nhd) {
      t.k = described(a.k, cfg.dtype_kv, {pages, page, KVH, d});
      t.v = described(a.v, cfg.dtype_kv, {pages, page, KVH, dv}, v_page);
    } else {
      t.k = described(a.k, cfg.dtype_kv, {pages, KVH, page, d});
      t.v = described(a.v, cfg.dtype_kv, {pages, KVH, page, dv}, v_page);
    }
    t.kv_indices = described(a.kv_indices, aotinfer::DType::i32, {std::int64_t(p.indices.size())});
    t.kv_last_page_len = described(a.kv_last_page_len, aotinfer::DType::i32, {batch});
  } else {
    const std::int64_t k_rows = std::int64_t(p.k_bytes.size()) / (KVH * d * esize);
    const std::int64_t v_token = p.v_stride ? p.v_stride : KVH * dv, v_rows = std::int64_t(p.v_bytes.size()) / (v_token * esize);
    t.k = described(a.k, cfg.dtype_kv, {k_rows, KVH, d});
    t.v = described(a.v, cfg.dtype_kv, {v_rows, KVH, dv}, v_token);
  }
  t.qo_indptr = described(a.qo_indptr, aotinfer::DType::i32, {batch + 1});
  t.kv_indptr = described(a.kv_indptr, aotinfer::DType::i32, {batch + 1});
  t.o = described(a.o, cfg.dtype_o, {p.total_q, H, dv});
  t.lse = described(a.lse, aotinfer::DType::f32, {p.total_q, H});
  if (a.sinks) t.sinks = described(a.sinks, aotinfer::DType::f32, {H});
  if (a.custom_mask) {
    t.custom_mask = described(a.custom_mask, aotinfer::DType::u8, {std::int64_t(p.mask_bytes.size())});
    t.mask_indptr = described(a.mask_indptr, aotinfer::DType::i32, {batch + 1});
  }
  return t;
}

Outcome run_case(std::mt19937_64& rng, const Case& c) {
  std::optional<BatchPrefill> prefill = make_prefill(c.config);
  if (!prefill) return {};
  INFO(describe(c.config) << ", " << c.qo_lens.size() << " requests, window_left " << c.config.window_left << ", cap " << c.soft_cap
                          << ", sinks " << !c.sinks.empty() << ", k/v scales " << c.k_scale << "/" << c.v_scale << ", v_pad "
                          << c.v_pad << (c.tensors ? ", described tensors" : "") << (c.c_api ? ", C API" : ""));
  const Problem p = make_problem(rng, c);
  const BatchPrefillConfig& cfg = c.config;
  const std::int32_t batch = std::int32_t(c.qo_lens.size());
  auto q = on_device(pad_rows(p.q_bytes, std::int64_t(cfg.num_qo_heads) * cfg.head_dim, c.q_pad));
  auto k = on_device(p.k_bytes), v = on_device(p.v_bytes);
  auto qo_indptr = on_device(p.qo_indptr), kv_indptr = on_device(p.kv_indptr);
  auto indices = on_device(p.indices), last = on_device(p.last_page_len);
  auto mask_bytes = on_device(p.mask_bytes);
  auto mask_indptr = on_device(p.mask_indptr);
  DeviceBuffer<std::uint16_t> o(p.total_q * cfg.num_qo_heads * cfg.vo_dim());
  DeviceBuffer<float> lse(p.total_q * cfg.num_qo_heads);
  DeviceBuffer<float> sinks(c.sinks.size());
  if (!c.sinks.empty()) sinks.upload(c.sinks);
  const std::int32_t longest = c.kv_lens.empty() ? 1 : std::max(1, *std::max_element(c.kv_lens.begin(), c.kv_lens.end()));
  Workspace ws(prefill->workspace_sizes(p.total_q, batch, longest));
  if (cfg.kv_storage == KvStorage::paged)
    prefill->plan_paged(p.qo_indptr, p.kv_indptr, p.last_page_len, p.indices, p.num_pages, ws.ws, nullptr);
  else
    prefill->plan_ragged(p.qo_indptr, p.kv_indptr, ws.ws, nullptr);
  const aotinfer::PrefillWorkPlan& plan = prefill->work_plan();  // the C API plans the same
  INFO("plan: tile " << plan.tile_rows << ", split " << plan.split << " (chunk " << plan.chunk_tokens << "), items "
                     << plan.num_work << ", merged rows " << plan.num_outputs());
  aotinfer::PrefillRunArgs a;
  a.batch = batch;
  a.total_q = p.total_q;
  a.q = q.ptr, a.qo_indptr = qo_indptr.ptr, a.k = k.ptr, a.v = v.ptr, a.kv_indptr = kv_indptr.ptr;
  a.q_stride = c.q_pad ? std::int64_t(cfg.num_qo_heads) * cfg.head_dim + c.q_pad : 0;
  a.v_stride = p.v_stride;
  a.kv_indices = indices.ptr, a.kv_last_page_len = last.ptr;
  a.o = o.ptr, a.lse = lse.ptr;
  a.sinks = c.sinks.empty() ? nullptr : sinks.ptr;
  a.logits_soft_cap = c.soft_cap;
  a.k_scale = c.k_scale, a.v_scale = c.v_scale;
  if (cfg.mask == MaskMode::custom) a.custom_mask = mask_bytes.ptr, a.mask_indptr = mask_indptr.ptr;
  // Twice, outputs poisoned in between: the second launch must find the workspace as the plan
  // left it (the persistent kernel's pair counter back at 0), and it is the one checked.
  if (c.c_api) run_through_c_api(c, p, a, o, lse);
  else if (c.tensors) {
    const aotinfer_batch_prefill_tensors t = describe_tensors(p, a);
    aotinfer_attention_scalars scalars{};
    scalars.logits_soft_cap = c.soft_cap;
    scalars.k_scale = c.k_scale, scalars.v_scale = c.v_scale;
    for (int launch = 0; launch < 2; ++launch) {
      o.poison();
      lse.poison();
      prefill->run(t, scalars, nullptr);
    }
  } else
    for (int launch = 0; launch < 2; ++launch) {
      o.poison();
      lse.poison();
      prefill->run(a, nullptr);
    }
  CUDA_CHECK(cudaDeviceSynchronize());
  CUDA_CHECK(cudaGetLastError());
  check(rng, p, o.download(), lse.download());
  return {true, plan.split, plan.large_tile};
}

// A random case for a config: lengths, heads, page size, layout and sinks; no window, cap or
// ALiBi (with_features).
Case random_case(std::mt19937_64& rng, BatchPrefillConfig c) {
  const int group = pick<int>(rng, {1, 2, 3, 4, 8});
  c.num_kv_heads = uniform(rng, 1, 3);
  c.num_qo_heads = c.num_kv_heads * group;
  // Pages the Hopper kernel copies by TMA (multiples of 8 that divide its tiles or are divided
  // by them) and pages it copies by cp.async.
  c.page_size = pick<int>(rng, {1, 8, 16, 24, 64, 256});
  if (c.kv_storage == KvStorage::paged) c.layout = pick<KvLayout>(rng, {KvLayout::nhd, KvLayout::hnd});
  Case k{c, {}, {}};
  const int batch = uniform(rng, 1, 4);
  for (int i = 0; i < batch; ++i) {
    const std::int32_t qo = uniform(rng, 1, 300);
    k.qo_lens.push_back(qo);
    k.kv_lens.push_back(c.mask == MaskMode::causal ? qo + uniform(rng, 0, 700) : uniform(rng, 0, 900));
  }
  if (uniform(rng, 0, 2) == 0) k.sinks = random_sinks(rng, c.num_qo_heads);
  if (aotinfer::dtype_size(c.dtype_kv) == 1) k.k_scale = float(uniform(rng, 0.25, 2.0)), k.v_scale = float(uniform(rng, 0.25, 2.0));
  return k;
}

// The case with a sliding window (window_left 0, small, or medium up to `medium`), a soft cap and
// ALiBi (on a variant without RoPE: the none variant serves it), each on or off.
Case with_features(std::mt19937_64& rng, Case c, bool window, bool cap, bool alibi, std::int32_t medium = 600) {
  c.config.window_left = window ? random_window_left(rng, medium) : -1;
  c.soft_cap = cap ? random_soft_cap(rng) : 0;
  if (alibi && c.config.pos_encoding == PosEncoding::none) c.config.pos_encoding = PosEncoding::alibi;
  return c;
}

// The same, each on in a third of the cases.
Case with_random_features(std::mt19937_64& rng, Case c, std::int32_t medium = 600) {
  const bool window = uniform(rng, 0, 2) == 0, cap = uniform(rng, 0, 2) == 0, alibi = uniform(rng, 0, 2) == 0;
  return with_features(rng, std::move(c), window, cap, alibi, medium);
}

// A variant of the storage and mask, with RoPE or without at random (RoPE only where the package
// holds it), of any dtypes and head_dim the package holds, but the MLA pair (its own test case);
// the plain bf16 one (base_config) when it holds none. Page size and layout random.
BatchPrefillConfig any_variant(std::mt19937_64& rng, KvStorage storage, MaskMode mask, int qo_heads, int kv_heads) {
  const PosEncoding pos = uniform(rng, 0, 1) ? PosEncoding::rope_llama : PosEncoding::none;
  std::vector<BatchPrefillConfig> held;
  for (const BatchPrefillConfig& v : package_configs())
    if (v.kv_storage == storage && v.pos_encoding == pos && !is_mla(v)) held.push_back(v);
  BatchPrefillConfig c = held.empty() ? base_config(storage, mask, qo_heads, kv_heads) : pick(rng, held);
  c.mask = mask;
  c.num_qo_heads = qo_heads, c.num_kv_heads = kv_heads;
  c.page_size = pick<int>(rng, {1, 8, 16, 24, 64, 256});
  if (storage == KvStorage::paged) c.layout = pick<KvLayout>(rng, {KvLayout::nhd, KvLayout::hnd});
  return c;
}

#define REQUIRE_SOME_RAN(n) \
  if ((n) == 0) FAIL("the package holds none of the variants this test needs (see the WARN lines)")

}  // namespace

// (tests/gpu/prefill_sm90.sh names this test.)
TEST_CASE("batch_prefill matches the fp64 reference for every prefill variant in the package", "[gpu]") {
  SEEDED_RNG(rng);
  int ran = 0;
  // Window, cap and ALiBi off and on in turn, and the masks none, causal and custom, from random
  // starts: any 24 variants in a row meet every combination.
  int combo = uniform(rng, 0, 7), mask = uniform(rng, 0, 2);
  for (BatchPrefillConfig c : package_configs()) {
    const int features = combo++ % 8;
    c.mask = std::array{MaskMode::none, MaskMode::causal, MaskMode::custom}[mask++ % 3];
    Case k = with_features(rng, random_case(rng, c), features & 1, features & 2, features & 4);
    if (c.mask == MaskMode::custom) k = with_custom_mask(rng, k, pick<MaskShape>(rng, {MaskShape::random, MaskShape::causal_like, MaskShape::tree, MaskShape::blocks}));
    ran += run_case(rng, k).ran;
  }
  REQUIRE_SOME_RAN(ran);
}

TEST_CASE("batch_prefill, causal with more queries than keys: rows that see no key give o = 0, lse = -inf", "[gpu]") {
  SEEDED_RNG(rng);
  int ran = 0;
  for (BatchPrefillConfig config : package_configs()) {
    config.mask = MaskMode::causal;
    Case c = with_random_features(rng, random_case(rng, config));  // a window keeps a row's own key: no more empty rows
    for (std::size_t i = 0; i < c.qo_lens.size(); ++i)  // the first qo - kv queries of each see nothing
      c.kv_lens[i] = uniform(rng, 0, c.qo_lens[i] - 1);
    c.qo_lens.push_back(200), c.kv_lens.push_back(0);  // a whole request without keys
    ran += run_case(rng, c).ran;
  }
  REQUIRE_SOME_RAN(ran);
}

TEST_CASE("batch_prefill reads a token-strided q (a slice of a fused qkv tensor) in place", "[gpu]") {
  SEEDED_RNG(rng);
  int ran = 0;
  for (const BatchPrefillConfig& config : package_configs()) {
    Case c = with_random_features(rng, random_case(rng, config));
    c.q_pad = pick<int>(rng, {8, 64, 2 * c.config.num_kv_heads * c.config.head_dim});  // the k and v of a fused qkv
    c.c_api = uniform(rng, 0, 3) == 0;
    ran += run_case(rng, c).ran;
  }
  REQUIRE_SOME_RAN(ran);
}

TEST_CASE("batch_prefill with batch-invariant plans (fixed KV split, none) matches the fp64 reference", "[gpu]") {
  SEEDED_RNG(rng);
  int ran = 0, split = 0;
  int index = 0;
  for (const BatchPrefillConfig& config : package_configs()) {
    // A window in odd rounds (a fixed split then counts each tile's chunks from its window's
    // first key); the first variant always without, and with a fixed split, so some plan splits.
    Case c = with_features(rng, random_case(rng, config), index % 2 == 1, uniform(rng, 0, 2) == 0, uniform(rng, 0, 2) == 0);
    const bool fixed = index++ % 3 != 1;
    c.config.kv_split = {fixed ? aotinfer::KvSplit::Mode::fixed : aotinfer::KvSplit::Mode::none, pick<int>(rng, {1, 100, 256, 700})};
    c.qo_lens.push_back(1), c.kv_lens.push_back(uniform(rng, 1000, 3000));  // a decode row: a fixed split cuts it
    INFO("kv_split " << aotinfer::kv_split_name(c.config.kv_split.mode) << " " << c.config.kv_split.tokens);
    const Outcome o = run_case(rng, c);
    ran += o.ran, split += o.split;
    if (o.ran) CHECK(o.large_tile);
  }
  REQUIRE_SOME_RAN(ran);
  CHECK(split > 0);
}

TEST_CASE("batch_prefill of qo_len 1..4096 mixed with kv_len 0..32k in one batch", "[gpu]") {
  SEEDED_RNG(rng);
  int ran = 0;
  for (KvStorage storage : {KvStorage::paged, KvStorage::ragged})
    for (MaskMode mask : {MaskMode::causal, MaskMode::none}) {
      Case c{base_config(storage, mask, 8, 2), {}, {}};
      c.config.page_size = 16;
      c.qo_lens = {1, 4096, 7, 600, 1, 0, 129};
      c.kv_lens = {1, 4096, 32768, 20000, uniform(rng, 1, 5000), 10, 129 + uniform(rng, 0, 300)};
      if (mask == MaskMode::none) {  // no causal constraint: a request without keys, and more queries than keys
        c.qo_lens.push_back(5), c.kv_lens.push_back(0);
        c.qo_lens.push_back(300), c.kv_lens.push_back(40);
      }
      // A medium window half the time: long requests then see a few thousand keys per query.
      ran += run_case(rng, with_features(rng, c, uniform(rng, 0, 1), uniform(rng, 0, 2) == 0, uniform(rng, 0, 2) == 0, 3000)).ran;
    }
  REQUIRE_SOME_RAN(ran);
}

TEST_CASE("batch_prefill over GQA group sizes 1..8 and 16, page sizes 1 to 256 and both layouts", "[gpu]") {
  SEEDED_RNG(rng);
  int ran = 0;
  for (int group : {1, 2, 3, 4, 5, 6, 7, 8, 16})
    for (KvStorage storage : {KvStorage::paged, KvStorage::ragged}) {
      Case c{base_config(storage, MaskMode::causal, 2 * group, 2), {}, {}};
      c.config.page_size = pick<int>(rng, {1, 8, 16, 24, 64, 256});
      c.config.layout = storage == KvStorage::paged ? pick<KvLayout>(rng, {KvLayout::nhd, KvLayout::hnd}) : KvLayout::nhd;
      for (int i = 0; i < 3; ++i) {
        const std::int32_t qo = uniform(rng, 1, 200);
        c.qo_lens.push_back(qo), c.kv_lens.push_back(qo + uniform(rng, 0, 500));
      }
      ran += run_case(rng, with_random_features(rng, c)).ran;
    }
  REQUIRE_SOME_RAN(ran);
}

// fp8 caches stream through a ring of raw tiles that runs on from one (item, KV head) pair to the
// next: enough short requests that every CTA of the persistent Hopper kernel takes several pairs,
// beside long ones whose keys wrap the ring many times.
TEST_CASE("batch_prefill over fp8 K/V: many pairs per CTA, long and short requests", "[gpu]") {
  SEEDED_RNG(rng);
  for (KvStorage storage : {KvStorage::paged, KvStorage::ragged}) {
    std::vector<BatchPrefillConfig> fp8;
    for (const BatchPrefillConfig& v : package_configs())
      if (v.kv_storage == storage && aotinfer::dtype_size(v.dtype_kv) == 1 && v.pos_encoding == PosEncoding::none)
        fp8.push_back(v);
    if (fp8.empty()) {
      WARN("skipped, not in the package: an fp8 K/V variant of " << (storage == KvStorage::paged ? "paged" : "ragged")
                                                                << " prefill without RoPE");
      continue;
    }
    Case c{pick(rng, fp8), {}, {}};
    c.config.mask = pick<MaskMode>(rng, {MaskMode::causal, MaskMode::none});
    c.config.num_kv_heads = 2, c.config.num_qo_heads = 8;
    c.config.page_size = pick<int>(rng, {1, 16, 64});
    if (storage == KvStorage::paged) c.config.layout = pick<KvLayout>(rng, {KvLayout::nhd, KvLayout::hnd});
    for (int i = 0; i < 150; ++i) {
      const std::int32_t qo = uniform(rng, 1, 40);
      c.qo_lens.push_back(qo), c.kv_lens.push_back(qo + uniform(rng, 0, 1500));
    }
    c.qo_lens.push_back(300), c.kv_lens.push_back(uniform(rng, 6000, 9000));
    c.qo_lens.push_back(64), c.kv_lens.push_back(uniform(rng, 16000, 20000));
    c.sampled_tokens = 4;
    // Values near 1 (every exponent below 2, subnormals included), or over the type's whole
    // range with scales that bring them back near 1: every encoding but NaN's gets widened.
    const double full_range = c.config.dtype_kv == aotinfer::DType::e4m3 ? 448 : 57344;
    c.kv_range = pick<double>(rng, {2.0, full_range});
    const double unit = 2 / c.kv_range;
    c.k_scale = float(unit * uniform(rng, 0.25, 2.0)), c.v_scale = float(unit * uniform(rng, 0.25, 2.0));
    INFO("K/V values in +-" << c.kv_range << ", k_scale " << c.k_scale << ", v_scale " << c.v_scale);
    CHECK(run_case(rng, c).ran);  // the package holds the variant
  }
}

// With bf16 q over an fp8 cache the Hopper kernel's score product runs on fp8 tensor cores, q
// split per row into two e4m3 terms that hold its values exactly (prefill_sm90.cuh, split_q),
// each row under its own power-of-two scale.
// - One-hot q rows: each score is one product, which the tensor cores sum exactly, so the lse
//   must match the fp64 one to 1e-3; q rounded to one e4m3 term would move it by several
//   hundredths.
// - Rows of far-apart magnitudes (2^-24 .. 1, a row's elements over 2^4 of each other): each
//   row's scale. These scores carry the fp8 tensor cores' accumulation error (about 2^-9 of a
//   score, docs/PERF.md), so the suite's usual bounds apply.
TEST_CASE("batch_prefill over fp8 K/V holds bf16 q exactly: one-hot rows, rows of far-apart magnitudes", "[gpu]") {
  SEEDED_RNG(rng);
  int ran = 0;
  for (const BatchPrefillConfig& v : package_configs()) {
    if (aotinfer::dtype_size(v.dtype_kv) != 1 || v.dtype_q != aotinfer::DType::bf16 || v.pos_encoding != PosEncoding::none)
      continue;
    for (bool one_hot : {true, false}) {
      Case c{v, {}, {}};
      c.config.mask = pick<MaskMode>(rng, {MaskMode::causal, MaskMode::none});
      c.config.num_kv_heads = 2, c.config.num_qo_heads = 8;
      c.config.page_size = pick<int>(rng, {1, 16, 64});
      for (int i = 0; i < 6; ++i) {
        const std::int32_t qo = uniform(rng, 1, 300);
        c.qo_lens.push_back(qo), c.kv_lens.push_back(qo + uniform(rng, 0, 3000));
      }
      c.q_row_spread = 24;
      c.q_one_hot = one_hot;
      if (one_hot) c.lse_tolerance = 1e-3;
      c.sampled_tokens = 8;
      INFO((one_hot ? "one-hot q rows" : "rows of far-apart magnitudes"));
      ran += run_case(rng, c).ran;
    }
  }
  if (ran == 0) WARN("skipped, not in the package: a bf16-q fp8 K/V prefill variant without RoPE");
}

TEST_CASE("batch_prefill split and unsplit plans, large and small query tiles", "[gpu]") {
  SEEDED_RNG(rng);
  for (KvStorage storage : {KvStorage::paged, KvStorage::ragged}) {
    // One chunk of a long prompt: few tiles, long keys -> split.
    Case few{base_config(storage, MaskMode::causal, 8, 8), {uniform(rng, 100, 300)}, {}};
    few.kv_lens = {few.qo_lens[0] + uniform(rng, 15000, 25000)};
    const Outcome split = run_case(rng, few);
    if (!split.ran) continue;
    CHECK(split.split);
    // Many long prompts: the tiles fill the GPU -> unsplit, large tile; 1024 (item, KV head)
    // pairs, several for each persistent CTA on Hopper.
    Case many{base_config(storage, MaskMode::causal, 8, 8), {}, {}};
    for (int i = 0; i < 16; ++i) many.qo_lens.push_back(1024), many.kv_lens.push_back(1024 + uniform(rng, 0, 100));
    many.sampled_tokens = 8;
    const Outcome unsplit = run_case(rng, many);
    CHECK(!unsplit.split);
    CHECK(unsplit.large_tile);
    // Decode-like rows (1-3 queries per request): the small tile, split across long keys.
    Case short_q{base_config(storage, MaskMode::causal, 4, 4), {}, {}};
    for (int i = 0; i < 6; ++i) short_q.qo_lens.push_back(uniform(rng, 1, 3)), short_q.kv_lens.push_back(uniform(rng, 3000, 9000));
    short_q.sinks = random_sinks(rng, 4);  // only the chunk at key 0 of a split tile takes the sink
    const Outcome small = run_case(rng, short_q);
    CHECK(!small.large_tile);
    CHECK(small.split);
  }
}

// Under a window the plan gives each query tile the keys from its first token's window start on
// (not from key 0); the tile's later tokens start later, which the kernels mask, and the item at
// the tile's first key folds the sink. For each storage and mask, RoPE or not: plans that split
// tiles' windows (adaptive and fixed splits) and plans that leave every tile whole, all with sinks.
TEST_CASE("batch_prefill with a sliding window: split and unsplit plans, windows inside query tiles, sinks", "[gpu]") {
  SEEDED_RNG(rng);
  int ran = 0;
  for (KvStorage storage : {KvStorage::paged, KvStorage::ragged})
    for (MaskMode mask : {MaskMode::causal, MaskMode::none}) {
      auto run = [&](Case c, std::int32_t window_left) {
        c.config.window_left = window_left;
        c.soft_cap = uniform(rng, 0, 1) ? random_soft_cap(rng) : 0;
        if (c.sinks.empty()) c.sinks = random_sinks(rng, c.config.num_qo_heads);
        const Outcome o = run_case(rng, c);
        ran += o.ran;
        return o;
      };
      // A chunk of a long prompt beside decode-like rows, under a window of thousands of keys:
      // few tiles for the GPU, each window split into chunks.
      {
        Case c{any_variant(rng, storage, mask, 4, 4), {}, {}};
        const std::int32_t qo = uniform(rng, 100, 300);
        c.qo_lens.push_back(qo), c.kv_lens.push_back(qo + uniform(rng, 6000, 12000));
        for (int i = 0; i < 3; ++i) c.qo_lens.push_back(uniform(rng, 1, 3)), c.kv_lens.push_back(uniform(rng, 3000, 9000));
        const Outcome o = run(c, uniform(rng, 1000, 3000));
        if (o.ran) CHECK(o.split);
      }
      // Random shapes and GQA groups under windows of 0 to a few hundred keys: every tile's
      // tokens start their windows at different keys, inside and across KV tiles. Causal: also
      // a request whose first queries sit before key 0 (they see nothing).
      {
        Case c = random_case(rng, any_variant(rng, storage, mask, 8, 2));
        if (mask == MaskMode::causal) c.qo_lens.push_back(uniform(rng, 40, 200)), c.kv_lens.push_back(uniform(rng, 0, 39));
        run(c, random_window_left(rng, 600));
      }
      // Many long prompts: the tiles fill the GPU, so none is split whatever the window.
      {
        Case c{any_variant(rng, storage, mask, 8, 8), {}, {}};
        for (int i = 0; i < 16; ++i) c.qo_lens.push_back(1024), c.kv_lens.push_back(1024 + uniform(rng, 0, 100));
        c.sampled_tokens = 8;
        const Outcome o = run(c, random_window_left(rng, 1000));
        if (o.ran) {
          CHECK(!o.split);
          CHECK(o.large_tile);
        }
      }
      // A fixed (batch-invariant) split under a window: each tile's chunks count from its window's
      // first key; a decode row whose window is longer than a chunk is cut.
      {
        Case c = random_case(rng, any_variant(rng, storage, mask, 8, 2));
        c.config.kv_split = {aotinfer::KvSplit::Mode::fixed, pick<int>(rng, {100, 256, 700})};
        c.qo_lens.push_back(1), c.kv_lens.push_back(uniform(rng, 4000, 8000));
        const Outcome o = run(c, uniform(rng, 1000, 3000));
        if (o.ran) {
          CHECK(o.split);
          CHECK(o.large_tile);
        }
      }
    }
  REQUIRE_SOME_RAN(ran);
}

// Custom masks (FlashInfer's packed layout) of every shape, in both kernels' tiles: random,
// causal with holes, speculative-decoding trees and blocks (whole KV tiles no row of a query
// tile sees, which the Hopper kernel skips), across page sizes, GQA groups 1-8, split and
// unsplit plans, with windows, caps and sinks now and then; through the C API too.
TEST_CASE("batch_prefill with custom masks: random, causal-like and tree masks, split and unsplit", "[gpu]") {
  SEEDED_RNG(rng);
  int ran = 0, split = 0, unsplit = 0;
  for (KvStorage storage : {KvStorage::paged, KvStorage::ragged})
    for (MaskShape shape : {MaskShape::random, MaskShape::causal_like, MaskShape::tree, MaskShape::blocks}) {
      const int group = pick<int>(rng, {1, 2, 4, 8});
      // Random shapes (bits across and inside KV tiles, rows that keep nothing).
      {
        Case c = random_case(rng, any_variant(rng, storage, MaskMode::custom, 2 * group, 2));
        c.config.page_size = pick<int>(rng, {1, 16, 64});
        if (shape == MaskShape::tree)  // keys at least the tree
          for (std::size_t i = 0; i < c.qo_lens.size(); ++i) c.kv_lens[i] = std::max(c.kv_lens[i], c.qo_lens[i]);
        c = with_custom_mask(rng, with_random_features(rng, c), shape);
        c.c_api = uniform(rng, 0, 3) == 0;
        ran += run_case(rng, c).ran;
      }
      // Speculative verification: 1-8 draft tokens per request over thousands of keys, split.
      {
        Case c{any_variant(rng, storage, MaskMode::custom, group, 1), {}, {}};
        c.config.page_size = pick<int>(rng, {1, 16, 64});
        for (int i = 0; i < 6; ++i) c.qo_lens.push_back(uniform(rng, 1, 8)), c.kv_lens.push_back(uniform(rng, 2000, 9000));
        c = with_custom_mask(rng, c, shape);
        if (uniform(rng, 0, 1)) c.sinks = random_sinks(rng, c.config.num_qo_heads);
        const Outcome o = run_case(rng, c);
        ran += o.ran, split += o.ran && o.split;
      }
      // Many long prompts: whole tiles, none split.
      {
        Case c{any_variant(rng, storage, MaskMode::custom, 8, 8 / std::min(group, 8)), {}, {}};
        for (int i = 0; i < 12; ++i) c.qo_lens.push_back(1024), c.kv_lens.push_back(1024 + uniform(rng, 0, 100));
        c.sampled_tokens = 8;
        c = with_custom_mask(rng, c, shape);
        const Outcome o = run_case(rng, c);
        ran += o.ran, unsplit += o.ran && !o.split;
      }
    }
  REQUIRE_SOME_RAN(ran);
  CHECK(split > 0);
  CHECK(unsplit > 0);
}

// ALiBi is a run-time bias of the general entries (the none variants serve it): every mask, with
// windows, caps and sinks now and then, in the large and small tiles, split and unsplit.
TEST_CASE("batch_prefill with ALiBi: masks, windows, caps, large and small tiles, split and unsplit", "[gpu]") {
  SEEDED_RNG(rng);
  int ran = 0, split = 0, unsplit = 0, small = 0;
  for (KvStorage storage : {KvStorage::paged, KvStorage::ragged})
    for (MaskMode mask : {MaskMode::none, MaskMode::causal, MaskMode::custom}) {
      const int group = pick<int>(rng, {1, 2, 4, 8});
      auto alibi_variant = [&](int qo_heads, int kv_heads) {
        BatchPrefillConfig c = any_variant(rng, storage, mask, qo_heads, kv_heads);
        if (c.pos_encoding == PosEncoding::rope_llama) c = base_config(storage, mask, qo_heads, kv_heads);
        c.pos_encoding = PosEncoding::alibi;
        return c;
      };
      auto finish = [&](Case c) {
        if (mask == MaskMode::custom) c = with_custom_mask(rng, c, pick<MaskShape>(rng, {MaskShape::random, MaskShape::causal_like, MaskShape::tree, MaskShape::blocks}));
        const Outcome o = run_case(rng, c);
        ran += o.ran, split += o.ran && o.split, unsplit += o.ran && !o.split, small += o.ran && !o.large_tile;
      };
      // Random shapes: heads 1-24 (the slopes of head counts that are not powers of two too).
      Case c = random_case(rng, alibi_variant(2 * group, 2));
      c.config.num_kv_heads = uniform(rng, 1, 3), c.config.num_qo_heads = c.config.num_kv_heads * pick<int>(rng, {1, 3, 5, 8});
      if (!c.sinks.empty()) c.sinks = random_sinks(rng, c.config.num_qo_heads);
      finish(with_features(rng, c, uniform(rng, 0, 2) == 0, uniform(rng, 0, 1) == 0, true));
      // A few query tokens per request over thousands of keys: split, small tiles.
      Case d{alibi_variant(group, 1), {}, {}};
      for (int i = 0; i < 5; ++i) d.qo_lens.push_back(uniform(rng, 1, 8)), d.kv_lens.push_back(uniform(rng, 2000, 9000));
      finish(d);
      // Many long prompts: whole large tiles.
      Case e{alibi_variant(8, 8 / group), {}, {}};
      for (int i = 0; i < 12; ++i) e.qo_lens.push_back(1024), e.kv_lens.push_back(1024 + uniform(rng, 0, 100));
      e.sampled_tokens = 8;
      finish(e);
    }
  REQUIRE_SOME_RAN(ran);
  CHECK(split > 0);
  CHECK(unsplit > 0);
  CHECK(small > 0);
}

namespace {

// One run() of the config's first plan (which splits) captured in CUDA-graph mode (ragged, causal)
// and replayed after later plans of other shapes, each checked. V's tokens v_pad elements apart
// beyond packed (the frozen v_stride) when v_pad > 0.
void check_graph_replays(std::mt19937_64& rng, BatchPrefillConfig config, int v_pad = 0) {
  config.cuda_graph = true;
  config.max_batch = 4;
  config.max_total_q = 2048;
  // Half the time under a window of a few thousand keys (the first plan still splits) and with a
  // cap: both captured with the launches, the window in the plans' items too.
  config.window_left = uniform(rng, 0, 1) ? uniform(rng, 2000, 4000) : -1;
  const float cap = uniform(rng, 0, 1) ? random_soft_cap(rng) : 0;
  INFO(describe(config) << ", window_left " << config.window_left << ", cap " << cap << ", v_pad " << v_pad);
  std::optional<BatchPrefill> prefill = make_prefill(config);
  REQUIRE_SOME_RAN(prefill ? 1 : 0);
  const int H = config.num_qo_heads, KVH = config.num_kv_heads, d = config.head_dim, dv = config.vo_dim();
  constexpr std::int64_t kMaxKv = 40000;
  DeviceBuffer<std::uint16_t> q(config.max_total_q * H * d), k(kMaxKv * KVH * d), v(kMaxKv * (KVH * dv + v_pad)),
      o(config.max_total_q * H * dv);
  DeviceBuffer<float> lse(config.max_total_q * H);
  DeviceBuffer<std::int32_t> qo_indptr(config.max_batch + 1), kv_indptr(config.max_batch + 1);
  Workspace ws(prefill->workspace_sizes(config.max_total_q, config.max_batch));
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  // Plans of different shapes: split (one long request) and unsplit (several prompts).
  const std::vector<std::pair<std::vector<std::int32_t>, std::vector<std::int32_t>>> shapes = {
      {{300}, {30000}}, {{500, 500, 500, 500}, {600, 900, 500, 2000}}, {{1, 64}, {5000, 64}}};
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    Case c{config, shapes[i].first, shapes[i].second};
    c.soft_cap = cap;
    c.v_pad = v_pad;
    const Problem p = make_problem(rng, c);
    REQUIRE(p.q_bytes.size() <= q.count * 2);
    REQUIRE(p.k_bytes.size() <= k.count * 2);
    REQUIRE(p.v_bytes.size() <= v.count * 2);
    CUDA_CHECK(cudaMemcpy(q.ptr, p.q_bytes.data(), p.q_bytes.size(), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(k.ptr, p.k_bytes.data(), p.k_bytes.size(), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(v.ptr, p.v_bytes.data(), p.v_bytes.size(), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(qo_indptr.ptr, p.qo_indptr.data(), p.qo_indptr.size() * 4, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(kv_indptr.ptr, p.kv_indptr.data(), p.kv_indptr.size() * 4, cudaMemcpyHostToDevice));
    o.poison();
    prefill->plan_ragged(p.qo_indptr, p.kv_indptr, ws.ws, aotinfer::Stream(stream));
    INFO("plan " << i << ": split " << prefill->work_plan().split << ", items " << prefill->work_plan().num_work);
    if (i == 0) {
      CHECK(prefill->work_plan().split);
      aotinfer::PrefillRunArgs a;
      a.batch = std::int32_t(c.qo_lens.size());
      a.total_q = p.total_q;
      a.q = q.ptr, a.qo_indptr = qo_indptr.ptr, a.k = k.ptr, a.v = v.ptr, a.kv_indptr = kv_indptr.ptr;
      a.v_stride = p.v_stride;
      a.o = o.ptr, a.lse = lse.ptr;
      a.logits_soft_cap = cap;
      CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
      prefill->run(a, aotinfer::Stream(stream));
      CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
      CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    }
    // Two replays, the first poisoned after it: the second must find the workspace as the plan left it.
    CUDA_CHECK(cudaGraphLaunch(exec, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    o.poison();
    CUDA_CHECK(cudaGraphLaunch(exec, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    // The graph froze batch/total_q of the first plan only as run() arguments it validated; the
    // kernels read counts from the workspace, so o of this plan's tokens must match.
    std::vector<std::uint16_t> out = o.download();
    out.resize(p.total_q * H * dv);
    std::vector<float> l = lse.download();
    l.resize(p.total_q * H);
    check(rng, p, out, l);
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

}  // namespace

TEST_CASE("BatchPrefill in CUDA-graph mode: one captured graph replays later plans", "[gpu]") {
  SEEDED_RNG(rng);
  check_graph_replays(rng, base_config(KvStorage::ragged, MaskMode::causal, 8, 2));
}

// The prefill of MLA models (DeepSeek-V3, Kimi K2: q and K rows 192 wide, V and o rows 128, as
// many KV heads as query heads), where the package holds it: fresh random shapes (batch 1-8,
// qo_len 1-600, kv_len 0-3000; heads 1-16 ungrouped and GQA groups 2-4) causal and unmasked, paged
// (pages 1, 16, 64, NHD and HND) and ragged, under adaptive, fixed (split) and no KV split; V
// token- or page-strided beyond packed (a slice of a wider tensor: v_stride); sinks; custom masks;
// decode-like rows over long keys (split plans merged at head_dim_vo); DeepSeek's 128 heads; the
// C API's raw entry points (config head_dim_vo, run v_stride); and the described-tensors run(),
// whose v and o are head_dim_vo wide. o and lse against the fp64 reference, sm_scale 1/sqrt(192).
TEST_CASE("batch_prefill at head_dim 192 / head_dim_vo 128 (MLA prefill) matches the fp64 reference", "[gpu]") {
  SEEDED_RNG(rng);
  if (mla_configs(KvStorage::paged).empty() && mla_configs(KvStorage::ragged).empty()) {
    WARN("skipped: the package holds no batch_prefill variant at head_dim 192 / head_dim_vo 128");
    return;
  }
  int ran = 0, split = 0, unsplit = 0, strided = 0, tensors = 0, c_api = 0, index = 0;
  auto run = [&](const Case& c) {
    const Outcome o = run_case(rng, c);
    ran += o.ran, split += o.ran && o.split, unsplit += o.ran && !o.split;
    strided += o.ran && c.v_pad > 0, tensors += o.ran && c.tensors, c_api += o.ran && c.c_api;
    return o;
  };
  for (KvStorage storage : {KvStorage::paged, KvStorage::ragged}) {
    const std::vector<BatchPrefillConfig> held = mla_configs(storage);
    if (held.empty()) {
      WARN("skipped, not in the package: MLA prefill (head_dim 192 / head_dim_vo 128) of "
           << (storage == KvStorage::paged ? "paged" : "ragged") << " KV");
      continue;
    }
    // The held variants (dtypes) in turn, pages and layout random.
    std::size_t next = 0;
    auto variant = [&](MaskMode mask, int qo_heads, int kv_heads) {
      BatchPrefillConfig c = held[next++ % held.size()];
      c.mask = mask;
      c.num_qo_heads = qo_heads, c.num_kv_heads = kv_heads;
      c.page_size = pick<int>(rng, {1, 16, 64});
      if (storage == KvStorage::paged) c.layout = pick<KvLayout>(rng, {KvLayout::nhd, KvLayout::hnd});
      return c;
    };
    // V's padding beyond packed, between tokens (ragged) or pages (paged): a few 16-byte steps, or
    // as much again as the packed row or page (V beside an equally wide tensor).
    auto v_pad = [&](const BatchPrefillConfig& c) {
      const int packed = (storage == KvStorage::paged ? c.page_size : 1) * c.num_kv_heads * c.vo_dim();
      return pick<int>(rng, {8, 64, packed});
    };
    // Random shapes: causal and none, ungrouped and a GQA group of 2-4, the three plan kinds in
    // turn, V strided every other case, one in four through the C API, sinks in a third.
    for (MaskMode mask : {MaskMode::causal, MaskMode::none})
      for (int group : {1, uniform(rng, 2, 4)}) {
        const int kv_heads = group == 1 ? uniform(rng, 1, 16) : uniform(rng, 1, 16 / group);
        Case c{variant(mask, kv_heads * group, kv_heads), {}, {}};
        const int batch = uniform(rng, 1, 8);
        for (int i = 0; i < batch; ++i) c.qo_lens.push_back(uniform(rng, 1, 600)), c.kv_lens.push_back(uniform(rng, 0, 3000));
        const int n = index++;
        if (n % 3 == 1) c.config.kv_split = {aotinfer::KvSplit::Mode::fixed, pick<int>(rng, {128, 256, 700})};
        if (n % 3 == 2) c.config.kv_split = {aotinfer::KvSplit::Mode::none, 0};
        if (n % 2 == 1) c.v_pad = v_pad(c.config);
        c.c_api = n % 4 == 3;
        if (uniform(rng, 0, 2) == 0) c.sinks = random_sinks(rng, c.config.num_qo_heads);
        c.sampled_tokens = 16;
        INFO("kv_split " << aotinfer::kv_split_name(c.config.kv_split.mode) << " " << c.config.kv_split.tokens);
        run(c);
      }
    // Decode-like rows (1-8 queries) over thousands of keys: split plans, whose partial states
    // merge_state combines at head_dim_vo; with sinks (only the chunk at key 0 takes them).
    {
      const int kv_heads = uniform(rng, 1, 8);
      Case c{variant(MaskMode::causal, kv_heads, kv_heads), {}, {}};
      for (int i = 0; i < 5; ++i) c.qo_lens.push_back(uniform(rng, 1, 8)), c.kv_lens.push_back(uniform(rng, 2000, 9000));
      c.sinks = random_sinks(rng, kv_heads);
      c.v_pad = uniform(rng, 0, 1) ? v_pad(c.config) : 0;
      const Outcome o = run(c);
      if (o.ran) CHECK(o.split);
    }
    // A custom mask of each shape (random, causal with holes, a speculative-decoding tree, blocks), V
    // strided half the time.
    for (MaskShape shape : {MaskShape::random, MaskShape::causal_like, MaskShape::tree, MaskShape::blocks}) {
      const int group = pick<int>(rng, {1, 1, 2, 4});
      const int kv_heads = uniform(rng, 1, 8 / group);
      Case c{variant(MaskMode::custom, kv_heads * group, kv_heads), {}, {}};
      const int batch = uniform(rng, 1, 4);
      for (int i = 0; i < batch; ++i) {
        const std::int32_t qo = uniform(rng, 1, 300);
        c.qo_lens.push_back(qo), c.kv_lens.push_back(shape == MaskShape::tree ? qo + uniform(rng, 0, 1500) : uniform(rng, 0, 1500));
      }
      c = with_custom_mask(rng, c, shape);
      if (uniform(rng, 0, 1)) c.v_pad = v_pad(c.config);
      if (uniform(rng, 0, 2) == 0) c.sinks = random_sinks(rng, c.config.num_qo_heads);
      c.c_api = uniform(rng, 0, 2) == 0;
      run(c);
    }
    // DeepSeek-V3's heads: 128 query and KV heads, a chunk of a prompt after its cached part.
    {
      Case c{variant(MaskMode::causal, 128, 128), {}, {}};
      const std::int32_t qo = uniform(rng, 64, 300);
      c.qo_lens = {qo}, c.kv_lens = {qo + uniform(rng, 0, 1200)};
      c.sampled_tokens = 8;
      run(c);
    }
    // The described-tensors run(): v [.., num_kv_heads, 128] (strided or packed), o [total_q, heads, 128].
    for (bool pad : {false, true}) {
      const int kv_heads = uniform(rng, 1, 8);
      Case c{variant(pick<MaskMode>(rng, {MaskMode::causal, MaskMode::none}), kv_heads, kv_heads), {}, {}};
      for (int i = 0, batch = uniform(rng, 1, 4); i < batch; ++i)
        c.qo_lens.push_back(uniform(rng, 1, 400)), c.kv_lens.push_back(uniform(rng, 0, 2000));
      c.tensors = true;
      c.v_pad = pad ? v_pad(c.config) : 0;
      if (uniform(rng, 0, 1)) c.sinks = random_sinks(rng, kv_heads);
      run(c);
    }
  }
  REQUIRE_SOME_RAN(ran);
  CHECK(split > 0);
  CHECK(unsplit > 0);
  CHECK(strided > 0);
  CHECK(tensors > 0);
  CHECK(c_api > 0);
}

TEST_CASE("BatchPrefill in CUDA-graph mode at head_dim 192 / head_dim_vo 128 (MLA prefill): one graph replays later plans", "[gpu]") {
  SEEDED_RNG(rng);
  const std::vector<BatchPrefillConfig> held = mla_configs(KvStorage::ragged);
  if (held.empty()) {
    WARN("skipped: the package holds no ragged batch_prefill variant at head_dim 192 / head_dim_vo 128");
    return;
  }
  BatchPrefillConfig config = pick(rng, held);
  config.mask = MaskMode::causal;
  config.num_qo_heads = config.num_kv_heads = 8;
  check_graph_replays(rng, config, pick<int>(rng, {0, 64}));
}

TEST_CASE("the C API's raw batch_prefill run takes attention sinks, a window, a soft cap and ALiBi, paged and ragged", "[gpu]") {
  SEEDED_RNG(rng);
  int ran = 0;
  for (KvStorage storage : {KvStorage::paged, KvStorage::ragged}) {
    Case c = with_features(rng, random_case(rng, base_config(storage, MaskMode::causal, 8, 2)), true, true, uniform(rng, 0, 1));
    c.sinks = random_sinks(rng, c.config.num_qo_heads);
    c.c_api = true;
    ran += run_case(rng, c).ran;
  }
  REQUIRE_SOME_RAN(ran);
}

TEST_CASE("BatchPrefill refuses bad arguments before launching anything", "[gpu]") {
  SEEDED_RNG(rng);
  std::optional<BatchPrefill> prefill = make_prefill(base_config(KvStorage::paged, MaskMode::causal, 8, 2));
  REQUIRE_SOME_RAN(prefill ? 1 : 0);
  auto invalid = [](auto&& f) -> std::string {
    try {
      f();
    } catch (const aotinfer::Error& e) {
      INFO(e.what());
      CHECK(e.code() == ErrorCode::invalid_argument);
      return e.what();
    }
    FAIL("no aotinfer::Error was thrown");
    return {};
  };
  Case c{prefill->config(), {5, 40, 17}, {5, 100, 16}};  // request 2: 17 queries, 16 keys
  const Problem p = make_problem(rng, c);
  Workspace ws(prefill->workspace_sizes(p.total_q, 3));
  CHECK_THAT(invalid([&] { prefill->run(aotinfer::PrefillRunArgs{}, nullptr); }), Contains("plan"));
  std::vector<std::int32_t> decreasing = p.qo_indptr;
  decreasing[2] = decreasing[1] - 1;
  CHECK_THAT(invalid([&] { prefill->plan_paged(decreasing, p.kv_indptr, p.last_page_len, p.indices, p.num_pages, ws.ws, nullptr); }),
             Contains("qo_indptr") && Contains("decrease"));
  CHECK_THAT(invalid([&] { prefill->plan_ragged(p.qo_indptr, p.kv_indptr, ws.ws, nullptr); }), Contains("plan_paged"));
  BatchPrefillConfig bad = prefill->config();
  bad.num_qo_heads = 6, bad.num_kv_heads = 4;
  CHECK_THAT(invalid([&] { BatchPrefill(package(), bad); }), Contains("heads"));

  Case ok{prefill->config(), {5, 40}, {5, 100}};
  const Problem good = make_problem(rng, ok);
  aotinfer::Workspace tiny = ws.ws;
  tiny.int_bytes = 8;
  CHECK_THAT(invalid([&] { prefill->plan_paged(good.qo_indptr, good.kv_indptr, good.last_page_len, good.indices, good.num_pages, tiny, nullptr); }),
             Contains("workspace"));
  prefill->plan_paged(good.qo_indptr, good.kv_indptr, good.last_page_len, good.indices, good.num_pages, ws.ws, nullptr);
  aotinfer::PrefillRunArgs a;
  a.batch = 2;
  a.total_q = good.total_q + 1;
  CHECK_THAT(invalid([&] { prefill->run(a, nullptr); }), Contains("plan again"));
  a.total_q = good.total_q;
  CHECK_THAT(invalid([&] { prefill->run(a, nullptr); }), Contains("null"));

  // A custom mask needs its bits and offsets, the bits 4-byte aligned.
  BatchPrefillConfig custom = prefill->config();
  custom.mask = MaskMode::custom;
  BatchPrefill masked(package(), custom);
  masked.plan_paged(good.qo_indptr, good.kv_indptr, good.last_page_len, good.indices, good.num_pages, ws.ws, nullptr);
  auto q = on_device(good.q_bytes), k = on_device(good.k_bytes), v = on_device(good.v_bytes);
  auto qo = on_device(good.qo_indptr), kv = on_device(good.kv_indptr), idx = on_device(good.indices), last = on_device(good.last_page_len);
  DeviceBuffer<std::uint16_t> o(good.total_q * custom.num_qo_heads * custom.head_dim);
  DeviceBuffer<std::uint8_t> bits(64);
  DeviceBuffer<std::int32_t> offsets(3);
  a.q = q.ptr, a.k = k.ptr, a.v = v.ptr, a.qo_indptr = qo.ptr, a.kv_indptr = kv.ptr, a.kv_indices = idx.ptr;
  a.kv_last_page_len = last.ptr, a.o = o.ptr;
  CHECK_THAT(invalid([&] { masked.run(a, nullptr); }), Contains("custom_mask") && Contains("mask_indptr"));
  a.custom_mask = bits.ptr + 1, a.mask_indptr = offsets.ptr;
  CHECK_THAT(invalid([&] { masked.run(a, nullptr); }), Contains("4-byte aligned"));
  CUDA_CHECK(cudaDeviceSynchronize());

  // The C API's window is a flag and a count (a zeroed config has no window): the flag without a
  // count is refused.
  aotinfer_package* pkg = nullptr;
  REQUIRE(aotinfer_package_open(package().path().c_str(), &pkg) == AOTINFER_OK);
  const std::string dtype(aotinfer::dtype_name(prefill->config().dtype_q));
  aotinfer_batch_prefill_config cc{};
  cc.dtype_q = dtype.c_str();
  cc.head_dim = prefill->config().head_dim;
  cc.num_qo_heads = 8, cc.num_kv_heads = 2, cc.page_size = prefill->config().page_size;
  cc.sliding_window = 1;
  cc.window_left = -1;
  aotinfer_batch_prefill* c_prefill = nullptr;
  CHECK(aotinfer_batch_prefill_create(pkg, &cc, &c_prefill) == AOTINFER_INVALID_ARGUMENT);
  CHECK_THAT(std::string(aotinfer_last_error()), Contains("window_left"));
  aotinfer_batch_prefill_destroy(c_prefill);
  aotinfer_package_close(pkg);
}

// Before kernel ABI 2, sliding_window and soft_cap were axes of both prefill families. A package
// built then must be refused by name with the rebuild that fixes it, in C++ and through the C
// API, rather than have its window-less variants run with the window ignored. (The refusal comes
// before any kernel is loaded: the manifest alone is enough to test it.)
// Before kernel ABI 4, the mask was an axis of both prefill families: such a package is refused
// the same way, naming the axis.
TEST_CASE("BatchPrefill refuses a package built when the mask was a variant axis", "[gpu]") {
  const OldAxesPackage old({"batch_prefill_paged", "batch_prefill_ragged"}, {{"mask", {"causal", "none"}}});
  REQUIRE(old.made);
  const aotinfer::Package pkg = aotinfer::Package::open(old.dir);
  for (KvStorage storage : {KvStorage::paged, KvStorage::ragged}) {
    BatchPrefillConfig config;
    config.kv_storage = storage;
    config.num_qo_heads = 8, config.num_kv_heads = 2;
    try {
      BatchPrefill prefill(pkg, config);
      FAIL("a prefill family with a mask axis was accepted");
    } catch (const aotinfer::Error& e) {
      INFO(e.what());
      CHECK(e.code() == ErrorCode::not_found);
      CHECK_THAT(std::string(e.what()), Contains("(mask;") && Contains("rebuild"));
    }
  }
}

TEST_CASE("BatchPrefill refuses a package built when windows and soft caps were variant axes", "[gpu]") {
  const OldAxesPackage old({"batch_prefill_paged", "batch_prefill_ragged"});
  if (!old.made) {
    WARN("skipped: the package under test records no prefill family without those axes in its manifest");
    return;
  }
  const aotinfer::Package pkg = aotinfer::Package::open(old.dir);
  aotinfer_package* c_pkg = nullptr;
  REQUIRE(aotinfer_package_open(old.dir.c_str(), &c_pkg) == AOTINFER_OK);
  for (KvStorage storage : {KvStorage::paged, KvStorage::ragged}) {
    BatchPrefillConfig config;
    config.kv_storage = storage;
    config.num_qo_heads = 8, config.num_kv_heads = 2;
    config.window_left = 16;
    INFO(describe(config));
    try {
      BatchPrefill prefill(pkg, config);
      FAIL("a prefill family with sliding_window and soft_cap axes was accepted");
    } catch (const aotinfer::Error& e) {
      INFO(e.what());
      CHECK(e.code() == ErrorCode::not_found);
      CHECK_THAT(std::string(e.what()), Contains("sliding_window") && Contains("soft_cap") && Contains("rebuild"));
    }
    aotinfer_batch_prefill_config cc{};
    cc.dtype_q = "bf16";
    cc.head_dim = config.head_dim;
    cc.num_qo_heads = config.num_qo_heads, cc.num_kv_heads = config.num_kv_heads, cc.page_size = config.page_size;
    cc.kv_storage = storage == KvStorage::paged ? "paged" : "ragged";
    aotinfer_batch_prefill* prefill = nullptr;
    CHECK(aotinfer_batch_prefill_create(c_pkg, &cc, &prefill) == AOTINFER_NOT_FOUND);
    CHECK(prefill == nullptr);
    CHECK_THAT(std::string(aotinfer_last_error()), Contains("sliding_window") && Contains("rebuild"));
    aotinfer_batch_prefill_destroy(prefill);
  }
  aotinfer_package_close(c_pkg);
}
