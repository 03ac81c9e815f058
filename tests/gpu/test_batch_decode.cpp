// batch_decode and append_paged_kv on the GPU through their front-ends (aotinfer::BatchDecode,
// aotinfer::AppendPagedKv), from the package under test, against the fp64 CPU reference
// (tests/reference/decode_reference.hpp) on freshly drawn shapes and values. The seed is printed
// with every failure; AOTINFER_TEST_SEED replays it.
//
// A configuration whose variant the package lacks is skipped with a WARN naming it; a test case
// fails when none of its configurations ran. Sliding windows and soft caps are no variant axes:
// every variant serves both, so cases draw them (window_left in the config, since the plan
// clamps each request's keys to it; the cap in the run arguments). Paged caches use a random
// permutation of physical pages, spare pages and unwritten slots hold NaN bytes (0xff), outputs
// start as NaN bytes.
// fp8 caches are compared against the reference on the dequantised fp8 values, so the 16-bit
// thresholds hold for them too.
#include <cuda_fp8.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <sstream>
#include <thread>
#include <type_traits>

#include "aotinfer/aotinfer.h"
#include "aotinfer/append_paged_kv.hpp"
#include "aotinfer/batch_decode.hpp"
#include "custom_masks.hpp"
#include "gpu_test_util.hpp"
#include "random_values.hpp"
#include "reference/decode_reference.hpp"

using namespace gpu_test;
using aotinfer::BatchDecode;
using aotinfer::BatchDecodeConfig;
using aotinfer::DType;
using aotinfer::ErrorCode;
using aotinfer::KvLayout;
using aotinfer::PosEncoding;
using aotinfer_test::Contains;
namespace ref = aotinfer::reference;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// ---------------------------------------------------------------------------------------------
// Configurations and the package.

const char* name(PosEncoding p) { return p == PosEncoding::none ? "none" : p == PosEncoding::rope_llama ? "rope_llama" : "alibi"; }
const char* name(KvLayout l) { return l == KvLayout::nhd ? "nhd" : "hnd"; }

// What selects the kernel variant.
std::string variant_name(const BatchDecodeConfig& c) {
  std::ostringstream s;
  s << "batch_decode{dtype_q=" << aotinfer::dtype_name(c.dtype_q) << ", dtype_kv=" << aotinfer::dtype_name(c.dtype_kv)
    << ", head_dim=" << c.head_dim << ", dtype_o=" << aotinfer::dtype_name(c.dtype_o) << ", pos_encoding=" << name(c.pos_encoding)
    << "}";
  return s.str();
}

// Head dims of a family in the package (128 when it names none).
std::vector<int> head_dims(std::string_view family) {
  std::set<int> dims;
  for (const auto* v : package().variants(family))
    if (const std::string* d = v->key.find("head_dim")) dims.insert(std::stoi(*d));
  if (dims.empty()) return {128};
  return {dims.begin(), dims.end()};
}

// BatchDecode for a config, or nullopt (with one WARN per variant) when the package lacks it.
std::optional<BatchDecode> make_decode(const BatchDecodeConfig& c, bool warn = true) {
  try {
    return BatchDecode(package(), c);
  } catch (const aotinfer::Error& e) {
    if (e.code() != ErrorCode::not_found) throw;
    static std::set<std::string> warned;
    if (warn && warned.insert(variant_name(c)).second) WARN("skipped, not in the package: " << variant_name(c) << ": " << e.what());
    return std::nullopt;
  }
}

bool available(const BatchDecodeConfig& c);

// The config with a head_dim (random among those the package holds for its other axes), or
// nullopt when the package holds none.
std::optional<BatchDecodeConfig> with_available_head_dim(std::mt19937_64& rng, BatchDecodeConfig c) {
  std::vector<int> dims;
  for (int dim : head_dims("batch_decode")) {
    c.head_dim = dim;
    if (available(c)) dims.push_back(dim);
  }
  if (dims.empty()) return std::nullopt;
  c.head_dim = pick(rng, dims);
  return c;
}

bool available(const BatchDecodeConfig& c) {
  static std::map<std::string, bool> known;
  const std::string key = variant_name(c);
  auto it = known.find(key);
  if (it == known.end()) it = known.emplace(key, make_decode(c, false).has_value()).first;
  return it->second;
}

struct Dtypes {
  DType q, kv, o;
};
const std::vector<Dtypes> kDtypes = {
    {DType::bf16, DType::bf16, DType::bf16}, {DType::f16, DType::f16, DType::f16},   {DType::bf16, DType::e4m3, DType::bf16},
    {DType::f16, DType::e4m3, DType::f16},   {DType::bf16, DType::e5m2, DType::bf16}, {DType::f16, DType::e5m2, DType::f16},
    {DType::f16, DType::f16, DType::bf16},   {DType::bf16, DType::bf16, DType::f16},
};

BatchDecodeConfig with_dtypes(BatchDecodeConfig c, Dtypes d) {
  c.dtype_q = d.q;
  c.dtype_kv = d.kv;
  c.dtype_o = d.o;
  return c;
}

// Every variant configuration the package holds (dtypes, head_dim, position encoding).
std::vector<BatchDecodeConfig> held_configs() {
  std::vector<BatchDecodeConfig> held;
  for (PosEncoding pos : {PosEncoding::none, PosEncoding::rope_llama, PosEncoding::alibi})
    for (const Dtypes& d : kDtypes) {
      BatchDecodeConfig c = with_dtypes({}, d);
      c.pos_encoding = pos;
      for (int dim : head_dims("batch_decode")) {
        c.head_dim = dim;
        if (available(c)) held.push_back(c);
      }
    }
  return held;
}

// The first plain configuration (no position encoding unless asked) that the package holds,
// preferring bf16 and head_dim 128; nullopt when there is none.
std::optional<BatchDecodeConfig> base_config(BatchDecodeConfig features = {}) {
  std::vector<int> dims = head_dims("batch_decode");
  std::stable_sort(dims.begin(), dims.end(), [](int a, int b) { return (a == 128) > (b == 128); });
  for (const Dtypes& d : kDtypes)
    for (int dim : dims) {
      BatchDecodeConfig c = with_dtypes(features, d);
      c.head_dim = dim;
      if (available(c)) return c;
    }
  return std::nullopt;
}

double o_tolerance(const BatchDecodeConfig& c) {
  return c.dtype_q == DType::bf16 || c.dtype_kv == DType::bf16 || c.dtype_o == DType::bf16 ? 1e-2 : 2e-3;
}

// ---------------------------------------------------------------------------------------------
// A decode problem: a paged cache and queries on the host (bytes for the GPU, doubles for the
// reference), and the run arguments.

struct Case {
  BatchDecodeConfig config;
  std::vector<std::int32_t> lens;  // KV length per request
  bool with_lse = true;
  bool with_q_positions = false;
  bool with_sinks = false;
  float sm_scale = 0;  // 0: 1/sqrt(head_dim)
  float soft_cap = 0;  // > 0: scores are capped (the window is config.window_left)
  float rope_scale = 1, rope_theta = 1e4f;
  float k_scale = 1, v_scale = 1;
  int spare_pages = 2;
  int q_pad = 0;  // q rows this many elements (NaN) apart beyond their heads: a fused qkv slice
  MaskShape mask_shape = MaskShape::tree;  // of the masks drawn with config.custom_mask
};

std::string describe(const Case& c) {
  std::ostringstream s;
  const auto& g = c.config;
  s << variant_name(g) << ", layout " << name(g.layout) << ", page_size " << g.page_size << ", heads " << g.num_qo_heads << "/"
    << g.num_kv_heads << ", batch " << c.lens.size() << ", kv_len {";
  for (std::size_t i = 0; i < c.lens.size() && i < 16; ++i) s << (i ? ", " : "") << c.lens[i];
  if (c.lens.size() > 16) s << ", ... max " << *std::max_element(c.lens.begin(), c.lens.end());
  s << "}, lse " << c.with_lse << ", q_positions " << c.with_q_positions << ", sinks " << c.with_sinks << ", sm_scale " << c.sm_scale << ", soft_cap "
    << c.soft_cap << ", window_left " << g.window_left << ", rope " << c.rope_scale << "/" << c.rope_theta << ", k/v scale "
    << c.k_scale << "/" << c.v_scale << (g.cuda_graph ? ", cuda_graph, max_batch " + std::to_string(g.max_batch) : "")
    << (g.q_len > 1 && !g.custom_mask ? ", q_len " + std::to_string(g.q_len) + (g.causal ? " causal" : " every key") : "")
    << (g.custom_mask ? ", q_len " + std::to_string(g.q_len) + ", custom mask: " + mask_shape_name(c.mask_shape) : "");
  return s.str();
}

struct Strides {
  std::int64_t page, token, head;
};
Strides strides(KvLayout layout, std::int64_t page_size, std::int64_t heads, std::int64_t head_dim) {
  if (layout == KvLayout::nhd) return {page_size * heads * head_dim, heads * head_dim, head_dim};
  return {page_size * heads * head_dim, head_dim, page_size * head_dim};
}

struct Problem {
  Case c;
  std::int32_t num_pages = 0;
  ref::PagedCache cache;                       // values as stored; NaN where nothing was written
  std::vector<std::uint8_t> k_bytes, v_bytes;  // the pools for the GPU; 0xff where nothing was written
  std::vector<std::uint8_t> q_bytes;
  std::vector<double> q;
  std::vector<std::int32_t> q_positions;
  std::vector<float> sinks;  // [num_qo_heads]
  std::vector<std::vector<bool>> masks;  // config.custom_mask: each request's [q_len][kv_len] bits
  PackedMasks packed_masks;

  std::int64_t batch() const { return std::int64_t(c.lens.size()); }
  std::int64_t rows_per_request() const { return std::int64_t(c.config.q_len) * c.config.num_qo_heads; }
  std::int64_t rows() const { return batch() * rows_per_request(); }  // (token, head) rows of q and o

  ref::DecodeParams params() const {
    ref::DecodeParams p;
    p.num_qo_heads = c.config.num_qo_heads;
    p.pos = c.config.pos_encoding == PosEncoding::none         ? ref::DecodePos::none
            : c.config.pos_encoding == PosEncoding::rope_llama ? ref::DecodePos::rope_llama
                                                               : ref::DecodePos::alibi;
    p.sm_scale = c.sm_scale > 0 ? double(c.sm_scale) : 1 / std::sqrt(double(c.config.head_dim));
    p.logits_soft_cap = c.soft_cap > 0 ? double(c.soft_cap) : 0;
    p.window_left = c.config.window_left >= 0 ? c.config.window_left : -1;
    p.rope_rcp_scale = 1 / double(c.rope_scale);
    p.rope_rcp_theta = 1 / double(c.rope_theta);
    p.k_scale = c.k_scale;
    p.v_scale = c.v_scale;
    p.q_len = c.config.q_len;
    p.causal = c.config.causal;
    if (c.config.custom_mask) p.custom_mask = masks;
    if (c.with_q_positions) p.q_positions = q_positions;
    if (c.with_sinks) p.sinks.assign(sinks.begin(), sinks.end());
    // The products' operand type: the KV's, f16 for fp8 KV.
    const DType operand = aotinfer::dtype_size(c.config.dtype_kv) == 1 ? DType::f16 : c.config.dtype_kv;
    p.round_operand = [operand](double x) { return round_to(x, operand); };
    return p;
  }
};

// Draws the cache contents and queries of a case: request b owns the next pages of a random
// permutation of all page ids, the rest are spare.
Problem make_problem(std::mt19937_64& rng, const Case& c) {
  const auto& g = c.config;
  Problem p;
  p.c = c;
  const std::int64_t ps = g.page_size, heads = g.num_kv_heads, d = g.head_dim, batch = p.batch();
  std::int64_t used = 0;
  for (std::int32_t len : c.lens) used += (len + ps - 1) / ps;
  p.num_pages = std::int32_t(used + c.spare_pages);
  std::vector<std::int32_t> perm(p.num_pages);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);

  ref::PagedCache& kv = p.cache;
  kv.layout = g.layout == KvLayout::nhd ? ref::DecodeLayout::nhd : ref::DecodeLayout::hnd;
  kv.page_size = g.page_size;
  kv.num_kv_heads = g.num_kv_heads;
  kv.head_dim = g.head_dim;
  kv.indptr.assign(1, 0);
  for (std::int32_t len : c.lens) {
    const std::int32_t pages = std::int32_t((len + ps - 1) / ps);
    for (std::int32_t i = 0; i < pages; ++i) kv.indices.push_back(perm[kv.indices.size()]);
    kv.indptr.push_back(std::int32_t(kv.indices.size()));
    kv.last_page_len.push_back(pages == 0 ? 0 : std::int32_t(len - (pages - 1) * ps));
  }

  const std::int64_t elements = std::int64_t(p.num_pages) * ps * heads * d;
  const std::size_t esize = aotinfer::dtype_size(g.dtype_kv);
  kv.k.assign(elements, std::numeric_limits<double>::quiet_NaN());
  kv.v.assign(elements, std::numeric_limits<double>::quiet_NaN());
  p.k_bytes.assign(elements * esize, 0xff);
  p.v_bytes.assign(elements * esize, 0xff);
  Values kv_values(rng, g.dtype_kv);
  const Strides st = strides(g.layout, ps, heads, d);
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t t = 0; t < c.lens[b]; ++t)
      for (std::int64_t h = 0; h < heads; ++h) {
        const std::int64_t at = kv.indices[kv.indptr[b] + t / ps] * st.page + (t % ps) * st.token + h * st.head;
        kv_values.fill(&p.k_bytes[at * esize], &kv.k[at], d);
        kv_values.fill(&p.v_bytes[at * esize], &kv.v[at], d);
      }

  Values q_values(rng, g.dtype_q);
  p.q.resize(p.rows() * d);
  p.q_bytes.resize(p.q.size() * aotinfer::dtype_size(g.dtype_q));
  q_values.fill(p.q_bytes.data(), p.q.data(), std::int64_t(p.q.size()));
  // Explicit positions run a little ahead of the cache (as after evictions), never behind it.
  for (std::int32_t len : c.lens) {
    const int ahead = uniform(rng, 0, 16);
    for (int j = 0; j < g.q_len; ++j) p.q_positions.push_back(std::max(0, len - g.q_len + j) + ahead);
  }
  // Sinks from well below to well above a row's lse: some barely count, some dominate.
  for (int h = 0; h < g.num_qo_heads; ++h) p.sinks.push_back(float(uniform(rng, -2.0, 8.0)));
  if (g.custom_mask) {
    p.masks = random_masks(rng, std::vector<std::int32_t>(c.lens.size(), g.q_len), c.lens, c.mask_shape);
    p.packed_masks = pack_masks(p.masks);
  }
  return p;
}

// The reference on all requests, several at a time.
ref::DecodeResult reference(const Problem& p) {
  const ref::DecodeParams params = p.params();
  const std::int64_t rows = p.rows_per_request(), d = p.c.config.head_dim;
  ref::DecodeResult r{std::vector<double>(p.rows() * d), std::vector<double>(p.rows())};
  std::atomic<std::int64_t> next{0};
  auto work = [&] {
    for (std::int64_t b; (b = next++) < p.batch();) ref::decode_request(p.q, p.cache, params, b, &r.o[b * rows * d], &r.lse[b * rows]);
  };
  std::vector<std::thread> threads;
  const unsigned n = std::clamp(std::thread::hardware_concurrency(), 1u, 16u);
  for (unsigned i = 1; i < n && i < p.batch(); ++i) threads.emplace_back(work);
  work();
  for (auto& t : threads) t.join();
  return r;
}

// Device buffers of a problem, sized for capacities so that a CUDA graph can keep using them
// across problems.
struct DeviceProblem {
  BatchDecodeConfig config;
  std::int64_t max_batch;
  int q_pad;
  DeviceBuffer<std::uint8_t> q, o, k, v;
  DeviceBuffer<float> lse, sinks;
  DeviceBuffer<std::int32_t> indptr, indices, last_page_len, q_positions;
  DeviceBuffer<std::uint8_t> mask_bytes;  // config.custom_mask: packed masks of up to mask_capacity bytes
  DeviceBuffer<std::int32_t> mask_indptr;

  DeviceProblem(const BatchDecodeConfig& c, std::int64_t max_batch, std::int64_t max_pages, std::int64_t max_indices,
                int q_pad = 0, std::int64_t mask_capacity = 0)
      : config(c),
        max_batch(max_batch),
        q_pad(q_pad),
        q(max_batch * c.q_len * (c.num_qo_heads * c.head_dim + q_pad) * aotinfer::dtype_size(c.dtype_q)),
        o(max_batch * c.q_len * c.num_qo_heads * c.head_dim * aotinfer::dtype_size(c.dtype_o)),
        k(max_pages * c.page_size * c.num_kv_heads * c.head_dim * aotinfer::dtype_size(c.dtype_kv)),
        v(k.count),
        lse(max_batch * c.q_len * c.num_qo_heads),
        sinks(c.num_qo_heads),
        indptr(max_batch + 1),
        indices(max_indices),
        last_page_len(max_batch),
        q_positions(max_batch * c.q_len),
        mask_bytes(c.custom_mask ? mask_capacity : 0),
        mask_indptr(c.custom_mask ? max_batch + 1 : 0) {}
  explicit DeviceProblem(const Problem& p)
      : DeviceProblem(p.c.config, p.batch(), p.num_pages, std::int64_t(p.cache.indices.size()), p.c.q_pad,
                      std::int64_t(p.packed_masks.bytes.size())) {}

  template <typename T>
  static void put(DeviceBuffer<T>& dst, const std::vector<T>& src) {
    REQUIRE(src.size() <= dst.count);
    if (!src.empty()) dst.upload(src);
  }
  // Writes a problem into the buffers (same addresses every time) and poisons the outputs.
  void upload(const Problem& p) {
    if (q_pad == 0) {
      put(q, p.q_bytes);
    } else {  // each request's row, then q_pad NaN elements
      const std::size_t row = std::size_t(config.num_qo_heads) * config.head_dim * aotinfer::dtype_size(config.dtype_q);
      const std::size_t stride = row + std::size_t(q_pad) * aotinfer::dtype_size(config.dtype_q);
      std::vector<std::uint8_t> padded(p.q_bytes.size() / row * stride, 0xff);
      for (std::size_t r = 0; r < p.q_bytes.size() / row; ++r) std::memcpy(&padded[r * stride], &p.q_bytes[r * row], row);
      put(q, padded);
    }
    put(k, p.k_bytes);
    put(v, p.v_bytes);
    put(indptr, p.cache.indptr);
    put(indices, p.cache.indices);
    put(last_page_len, p.cache.last_page_len);
    put(q_positions, p.q_positions);
    put(sinks, p.sinks);
    if (config.custom_mask) {
      put(mask_bytes, p.packed_masks.bytes);
      put(mask_indptr, p.packed_masks.indptr);
    }
    poison_outputs();
  }
  void poison_outputs() {
    o.poison();
    lse.poison();
    CUDA_CHECK(cudaDeviceSynchronize());
  }
  aotinfer::DecodeRunArgs args(const Problem& p) const {
    aotinfer::DecodeRunArgs a;
    a.batch = std::int32_t(p.batch());
    a.q = q.ptr;
    a.q_stride = q_pad ? std::int64_t(config.num_qo_heads) * config.head_dim + q_pad : 0;
    a.k_pages = k.ptr;
    a.v_pages = v.ptr;
    a.kv_indptr = indptr.ptr;
    a.kv_indices = indices.ptr;
    a.kv_last_page_len = last_page_len.ptr;
    a.o = o.ptr;
    a.lse = p.c.with_lse ? lse.ptr : nullptr;
    a.q_positions = p.c.with_q_positions ? q_positions.ptr : nullptr;
    a.sinks = p.c.with_sinks ? sinks.ptr : nullptr;
    a.sm_scale = p.c.sm_scale;
    a.logits_soft_cap = p.c.soft_cap;
    a.rope_scale = p.c.rope_scale;
    a.rope_theta = p.c.rope_theta;
    a.k_scale = p.c.k_scale;
    a.v_scale = p.c.v_scale;
    if (config.custom_mask) a.custom_mask = mask_bytes.ptr, a.mask_indptr = mask_indptr.ptr;
    return a;
  }
};

// RoPE variants rotate q and K in fp32 and round each once to the 16-bit type of their matrix
// products (f16 for fp8 KV). The reference rounds its fp64 rotation the same way, but an element
// near a rounding boundary may go the other way: a score then errs by at most 2u |q| |k| |scale|
// (Cauchy-Schwarz; rotation keeps norms), u the unit roundoff. The bound for query head h of request b
// over its keys, which its lse inherits (`row` of the request's q_len * num_qo_heads); 0 for
// other variants.
double rope_score_error(const Problem& p, std::int64_t b, std::int64_t row) {
  const auto& g = p.c.config;
  if (g.pos_encoding != PosEncoding::rope_llama) return 0;
  const double u = g.dtype_kv == DType::bf16 ? 0x1p-8 : 0x1p-11;
  const int d = g.head_dim, kv_head = int(row % g.num_qo_heads) / (g.num_qo_heads / g.num_kv_heads);
  const double* q = &p.q[(b * p.rows_per_request() + row) * d];
  double q_norm = 0, k_norm = 0;
  for (int i = 0; i < d; ++i) q_norm += q[i] * q[i];
  for (std::int64_t t = 0; t < p.cache.kv_len(b); ++t) {
    double n = 0;
    for (int i = 0; i < d; ++i) n += p.cache.k[p.cache.at(b, t, kv_head) + i] * p.cache.k[p.cache.at(b, t, kv_head) + i];
    k_norm = std::max(k_norm, n);
  }
  const double sm_scale = p.c.sm_scale != 0 ? p.c.sm_scale : 1 / std::sqrt(double(d));
  return 2 * u * std::sqrt(q_norm * k_norm) * sm_scale * p.c.k_scale;
}

// Compares the outputs with the reference: per request (o relative error; o exactly 0 and lse
// -inf where no key is attended), lse per row, and rows past the batch still poisoned.
void check(const Problem& p, const DeviceProblem& d, const ref::DecodeResult& r) {
  const auto& g = p.c.config;
  const std::int64_t heads = p.rows_per_request(), dim = g.head_dim, osize = aotinfer::dtype_size(g.dtype_o);
  const std::vector<std::uint8_t> o_bytes = d.o.download();
  std::vector<double> o(p.rows() * dim);
  for (std::size_t i = 0; i < o.size(); ++i) o[i] = decode_element(&o_bytes[i * osize], g.dtype_o);
  const std::vector<float> lse = d.lse.download();
  const double tol = o_tolerance(g);

  std::vector<std::string> problems;
  auto report = [&](std::int64_t b, const std::string& what) {
    if (problems.size() < 6) {
      std::ostringstream s;
      s << "request " << b << " (kv_len " << p.c.lens[b] << ", q_pos "
        << (p.c.with_q_positions ? p.q_positions[b * g.q_len] : p.c.lens[b] - g.q_len) << "): " << what;
      problems.push_back(s.str());
    }
  };
  for (std::int64_t b = 0; b < p.batch(); ++b) {
    const std::vector<double> out(o.begin() + b * heads * dim, o.begin() + (b + 1) * heads * dim);
    const std::vector<double> want(r.o.begin() + b * heads * dim, r.o.begin() + (b + 1) * heads * dim);
    // A row that attends no key (a request without keys, a custom mask's empty row) has o = 0;
    // the others are compared with the reference together.
    bool every_row_empty = true;
    for (std::int64_t h = 0; h < heads; ++h) {
      if (!std::isinf(r.lse[b * heads + h])) {
        every_row_empty = false;
        continue;
      }
      const auto row = out.begin() + h * dim;
      const auto nonzero = std::find_if(row, row + dim, [](double x) { return x != 0; });
      if (nonzero != row + dim)
        report(b, "row " + std::to_string(h) + " attends no key but o[" + std::to_string(nonzero - out.begin()) + "] = " +
                      std::to_string(*nonzero));
    }
    const double err = relative_error(out, want);
    if (!every_row_empty && !(err < tol)) report(b, "relative error " + std::to_string(err) + " >= " + std::to_string(tol));
    if (p.c.with_lse)
      for (std::int64_t h = 0; h < heads; ++h) {
        const double want_lse = r.lse[b * heads + h], got = lse[b * heads + h];
        const double tol_lse = 1e-3 * std::max(1.0, std::abs(want_lse)) + rope_score_error(p, b, h);
        const bool ok = std::isinf(want_lse) ? (std::isinf(got) && got < 0) : std::abs(got - want_lse) <= tol_lse;
        if (!ok) {
          report(b, "row " + std::to_string(h) + " (token " + std::to_string(h / g.num_qo_heads) + ") lse " + std::to_string(got) + ", reference " + std::to_string(want_lse));
          break;
        }
      }
  }
  // Rows past the batch (CUDA-graph buffers sized for max_batch) are never written.
  for (std::size_t i = p.rows() * dim * osize; i < o_bytes.size(); ++i)
    if (o_bytes[i] != 0xff) {
      problems.push_back("o byte " + std::to_string(i) + " past the batch was written");
      break;
    }
  if (p.c.with_lse) {
    const std::vector<std::uint8_t> poison(sizeof(float), 0xff);
    for (std::size_t i = p.rows(); i < lse.size(); ++i)
      if (std::memcmp(&lse[i], poison.data(), sizeof(float)) != 0) {
        problems.push_back("lse row " + std::to_string(i) + " past the batch was written");
        break;
      }
  }
  std::string all;
  for (const auto& s : problems) all += "\n  " + s;
  INFO("overall relative error " << relative_error(o, r.o) << ", tolerance " << tol);
  INFO("problems:" << all);
  REQUIRE(problems.empty());
}

// Plans, runs and checks one case with a fresh BatchDecode; false (after a WARN) when the
// package lacks its variant. `plan` receives the work plan. The plan runs twice with the outputs
// poisoned in between, and the second run is checked: a split request's merge must find its
// counters as it found them the first time.
bool run_case(std::mt19937_64& rng, const Case& c, aotinfer::DecodeWorkPlan* plan = nullptr) {
  INFO(describe(c));
  std::optional<BatchDecode> decode = make_decode(c.config);
  if (!decode) return false;
  const Problem p = make_problem(rng, c);
  DeviceProblem d(p);
  d.upload(p);
  const std::int32_t longest = c.lens.empty() ? 1 : std::max(1, *std::max_element(c.lens.begin(), c.lens.end()));
  Workspace ws(decode->workspace_sizes(std::int32_t(p.batch()), longest));
  decode->plan(p.cache.indptr, p.cache.last_page_len, p.cache.indices, p.num_pages, ws.ws, nullptr);
  decode->run(d.args(p), nullptr);
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaDeviceSynchronize());
  d.poison_outputs();
  decode->run(d.args(p), nullptr);
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaDeviceSynchronize());
  const aotinfer::DecodeWorkPlan& wp = decode->work_plan();
  INFO("plan: split " << wp.split << ", num_work " << wp.num_work << ", chunk_tokens " << wp.chunk_tokens);
  check(p, d, reference(p));
  if (plan) *plan = wp;
  return true;
}

// After refused runs: nothing ran (o still holds the poison), and the plan still runs right.
void untouched_then_right(const BatchDecode& decode, const Problem& p, const DeviceProblem& d) {
  CUDA_CHECK(cudaDeviceSynchronize());
  const auto o = d.o.download();
  CHECK(std::all_of(o.begin(), o.end(), [](std::uint8_t b) { return b == 0xff; }));
  decode.run(d.args(p), nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  check(p, d, reference(p));
}

// ---------------------------------------------------------------------------------------------
// Drawing cases.

const std::vector<int> kGroups = {1, 2, 3, 4, 5, 6, 7, 8, 16};

BatchDecodeConfig with_heads(BatchDecodeConfig c, int group, int kv_heads) {
  c.num_kv_heads = kv_heads;
  c.num_qo_heads = group * kv_heads;
  return c;
}

// Lengths up to max_len, with empty requests, single tokens and page-boundary lengths mixed in.
std::vector<std::int32_t> random_lens(std::mt19937_64& rng, std::int64_t batch, std::int32_t max_len, std::int32_t page_size) {
  std::vector<std::int32_t> lens(batch);
  for (auto& len : lens) {
    const int kind = uniform(rng, 0, 19);
    if (kind == 0) len = 0;
    else if (kind == 1) len = 1;
    else if (kind <= 3) len = std::max(0, std::min(max_len, uniform(rng, 1, std::max(1, max_len / page_size)) * page_size + uniform(rng, -1, 1)));
    else len = uniform(rng, 0, max_len);
  }
  return lens;
}

// Run-time arguments drawn to suit the config's variant axes; no window or cap (with_features).
Case random_case(std::mt19937_64& rng, const BatchDecodeConfig& config, std::vector<std::int32_t> lens, bool q_positions, bool lse) {
  Case c;
  c.config = config;
  c.lens = std::move(lens);
  c.with_lse = lse;
  c.with_q_positions = q_positions;
  c.with_sinks = uniform(rng, 0, 2) == 0;
  c.sm_scale = uniform(rng, 0, 1) ? 0.0f : float(uniform(rng, 0.5, 2.0) / std::sqrt(double(config.head_dim)));
  if (config.pos_encoding == PosEncoding::rope_llama) {
    c.rope_scale = uniform(rng, 0, 1) ? 1.0f : float(uniform(rng, 1.0, 4.0));
    c.rope_theta = uniform(rng, 0, 1) ? 1e4f : 5e5f;
  }
  if (is_fp8(config.dtype_kv)) {
    c.k_scale = float(uniform(rng, 0.25, 2.0));
    c.v_scale = float(uniform(rng, 0.25, 2.0));
  }
  c.spare_pages = uniform(rng, 0, 4);
  return c;
}

// The case with a sliding window (window_left 0, small or medium; the window counts back from
// each request's last key, explicit q_positions or not) and a soft cap, each on or off.
Case with_features(std::mt19937_64& rng, Case c, bool window, bool cap) {
  c.config.window_left = window ? random_window_left(rng) : -1;
  c.soft_cap = cap ? random_soft_cap(rng) : 0;
  return c;
}

// The same, each on in a third of the cases.
Case with_random_features(std::mt19937_64& rng, Case c) {
  const bool window = uniform(rng, 0, 2) == 0, cap = uniform(rng, 0, 2) == 0;
  return with_features(rng, std::move(c), window, cap);
}

// Page size and layout rotating with `index`, random GQA shape; the variant axes stay.
BatchDecodeConfig random_shape(std::mt19937_64& rng, BatchDecodeConfig c, int index) {
  const std::vector<int> page_sizes = {1, 16, 64};
  c.page_size = page_sizes[index % 3];
  c.layout = index % 2 ? KvLayout::hnd : KvLayout::nhd;
  return with_heads(c, pick(rng, kGroups), uniform(rng, 1, 4));
}

#define REQUIRE_SOME_RAN(ran) \
  do {                                                                                              \
    INFO("none of this test's configurations is in the package " << package().path().string());    \
    REQUIRE((ran) > 0);                                                                             \
  } while (0)

}  // namespace

// (tests/gpu/ptx_fallback.sh selects this test by the start of its name.)
TEST_CASE("batch_decode matches the fp64 reference across variant axes, run-time windows and caps, layouts and page sizes", "[gpu]") {
  SEEDED_RNG(rng);
  int ran = 0, index = 0;

  auto go = [&](BatchDecodeConfig config, bool window, bool cap) {
    const int i = index++;
    config = random_shape(rng, config, i);
    const std::int64_t batch = i % 5 == 0 ? 1 : uniform(rng, 2, 32);
    Case c = random_case(rng, config, random_lens(rng, batch, 1024, config.page_size), i % 2 == 0, i % 3 != 0);
    ran += run_case(rng, with_features(rng, c, window, cap));
  };

  // Every position encoding with every combination of window and soft cap on one variant, on
  // rotating dtypes (the next one the package holds for that encoding when the rotating one is
  // missing).
  for (PosEncoding pos : {PosEncoding::none, PosEncoding::rope_llama, PosEncoding::alibi})
    for (bool window : {false, true})
      for (bool cap : {false, true}) {
        BatchDecodeConfig features;
        features.pos_encoding = pos;
        std::optional<BatchDecodeConfig> config;
        for (std::size_t k = 0; k < kDtypes.size() && !config; ++k)
          config = with_available_head_dim(rng, with_dtypes(features, kDtypes[(index + k) % kDtypes.size()]));
        if (config) go(*config, window, cap);
        else make_decode(with_dtypes(features, kDtypes[0]));  // WARNs that it is skipped
      }
  // Every dtype combination (fp8 caches with random k_scale / v_scale), with a random position
  // encoding (none when the package lacks it for those dtypes), window and cap.
  for (const Dtypes& d : kDtypes) {
    BatchDecodeConfig c = with_dtypes({}, d);
    c.pos_encoding = pick(rng, std::vector<PosEncoding>{PosEncoding::none, PosEncoding::rope_llama, PosEncoding::alibi});
    std::optional<BatchDecodeConfig> config = with_available_head_dim(rng, c);
    if (!config) config = with_available_head_dim(rng, with_dtypes({}, d));
    const bool window = uniform(rng, 0, 1), cap = uniform(rng, 0, 1);
    if (config) go(*config, window, cap);
    else make_decode(with_dtypes({}, d));  // WARNs that it is skipped
  }
  // Random draws over everything the package holds, windows and caps on in a third of them each.
  const std::vector<BatchDecodeConfig> held = held_configs();
  for (int trial = 0; trial < 24 && !held.empty(); ++trial) {
    const bool window = uniform(rng, 0, 2) == 0, cap = uniform(rng, 0, 2) == 0;
    go(pick(rng, held), window, cap);
  }
  REQUIRE_SOME_RAN(ran);
}

TEST_CASE("batch_decode reads a token-strided q (a slice of a fused qkv tensor) in place", "[gpu]") {
  SEEDED_RNG(rng);
  int ran = 0;
  for (int i = 0; i < 8; ++i) {
    std::optional<BatchDecodeConfig> config = with_available_head_dim(rng, with_dtypes({}, kDtypes[i % kDtypes.size()]));
    if (!config) continue;
    const BatchDecodeConfig c = random_shape(rng, *config, i);
    Case k = with_random_features(rng, random_case(rng, c, random_lens(rng, uniform(rng, 1, 40), 3000, c.page_size), i % 2 == 0, true));
    k.q_pad = pick<int>(rng, {8, 64, 2 * c.num_kv_heads * c.head_dim});  // the k and v of a fused qkv
    ran += run_case(rng, k);
  }
  REQUIRE_SOME_RAN(ran);
}

TEST_CASE("batch_decode with batch-invariant plans (fixed KV split, none) matches the fp64 reference", "[gpu]") {
  SEEDED_RNG(rng);
  int ran = 0, split = 0;
  for (int i = 0; i < 12; ++i) {
    std::optional<BatchDecodeConfig> config = with_available_head_dim(rng, with_dtypes({}, kDtypes[i % kDtypes.size()]));
    if (!config) continue;
    BatchDecodeConfig c = random_shape(rng, *config, i);
    // Round 2 splits every request into single pages, so that some round surely splits.
    c.kv_split = {i % 3 == 0 ? aotinfer::KvSplit::Mode::none : aotinfer::KvSplit::Mode::fixed,
                  i == 2 ? 1 : pick<int>(rng, {1, 50, 256, 2048})};
    const std::int64_t batch = i % 4 == 0 ? 1 : uniform(rng, 2, 24);
    // Odd rounds under a window: a fixed split then cuts a request's window from its first key.
    Case k = with_features(rng, random_case(rng, c, random_lens(rng, batch, 6000, c.page_size), i % 2 == 0, true), i % 2 == 1,
                           uniform(rng, 0, 2) == 0);
    INFO("kv_split " << aotinfer::kv_split_name(c.kv_split.mode) << " " << c.kv_split.tokens);
    aotinfer::DecodeWorkPlan plan;
    ran += run_case(rng, k, &plan);
    split += plan.split;
  }
  REQUIRE_SOME_RAN(ran);
  CHECK(split > 0);
}

TEST_CASE("batch_decode edge lengths: empty requests, single tokens, page and tile boundaries, skew", "[gpu]") {
  SEEDED_RNG(rng);
  std::optional<BatchDecodeConfig> base = base_config();
  REQUIRE_SOME_RAN(base ? 1 : 0);
  int ran = 0;
  for (int page_size : {1, 16, 64})
    for (KvLayout layout : {KvLayout::nhd, KvLayout::hnd}) {
      BatchDecodeConfig config = with_heads(*base, pick(rng, kGroups), uniform(rng, 1, 4));
      config.page_size = page_size;
      config.layout = layout;
      const int k = uniform(rng, 3, 20);
      std::vector<std::int32_t> lens = {0, 1, 2, 31, 32, 33, 63, 64, 65, 127, 128, 129, 0, 1};
      for (int n : {1, 2, k})
        for (int delta : {-1, 0, 1}) lens.push_back(std::max(0, n * page_size + delta));
      std::shuffle(lens.begin(), lens.end(), rng);
      ran += run_case(rng, with_random_features(rng, random_case(rng, config, lens, uniform(rng, 0, 1), true)));

      // Single requests: empty, one token, exactly one page; all-empty batches; and skewed
      // batches, one long request among short ones (split, uneven chunk counts).
      for (std::vector<std::int32_t> small : std::vector<std::vector<std::int32_t>>{{0}, {1}, {page_size}, {0, 0, 0}})
        ran += run_case(rng, with_random_features(rng, random_case(rng, config, small, false, true)));
      std::vector<std::int32_t> skewed = random_lens(rng, uniform(rng, 8, 40), 12, page_size);
      skewed[uniform<std::size_t>(rng, 0, skewed.size() - 1)] = uniform(rng, 3000, 6000);
      ran += run_case(rng, with_random_features(rng, random_case(rng, config, skewed, uniform(rng, 0, 1), uniform(rng, 0, 1))));
    }
  REQUIRE_SOME_RAN(ran);
}

// One random case per GQA group size (KV heads 1..4, 1..2 for groups of 64); returns how many ran.
static int run_group_sizes(std::mt19937_64& rng, const BatchDecodeConfig& base, const std::vector<int>& groups, int max_requests,
                    int max_len) {
  int ran = 0, index = 0;
  for (int group : groups) {
    BatchDecodeConfig config =
        with_heads(random_shape(rng, base, index++), group, group == 64 ? uniform(rng, 1, 2) : uniform(rng, 1, 4));
    ran += run_case(rng, with_random_features(rng, random_case(rng, config, random_lens(rng, uniform(rng, 1, max_requests), max_len,
                                                                                        config.page_size),
                                                               uniform(rng, 0, 1), true)));
  }
  return ran;
}

TEST_CASE("batch_decode over GQA group sizes 1..8 and 16", "[gpu]") {
  SEEDED_RNG(rng);
  std::optional<BatchDecodeConfig> base = base_config();
  REQUIRE_SOME_RAN(base ? 1 : 0);
  REQUIRE_SOME_RAN(run_group_sizes(rng, *base, kGroups, 24, 800));
}

TEST_CASE("batch_decode with GQA groups of 5, 7 and 64", "[gpu]") {
  SEEDED_RNG(rng);
  std::optional<BatchDecodeConfig> base = base_config();
  REQUIRE_SOME_RAN(base ? 1 : 0);
  REQUIRE_SOME_RAN(run_group_sizes(rng, *base, {5, 7, 64}, 16, 1500));
}

TEST_CASE("batch_decode batch sizes 1..512: split plans for few long requests, unsplit for large batches", "[gpu]") {
  SEEDED_RNG(rng);
  std::optional<BatchDecodeConfig> base = base_config();
  REQUIRE_SOME_RAN(base ? 1 : 0);
  aotinfer::DecodeWorkPlan plan;

  // 512 requests over 4 KV heads with groups of 16: more CTAs than the GPU holds at once.
  {
    BatchDecodeConfig config = with_heads(*base, 16, 4);
    config.page_size = 16;
    config.layout = uniform(rng, 0, 1) ? KvLayout::hnd : KvLayout::nhd;
    REQUIRE(run_case(rng, random_case(rng, config, random_lens(rng, 512, 200, 16), uniform(rng, 0, 1), true), &plan));
    CHECK_FALSE(plan.split);
  }
  // A few long requests: split into chunks merged afterwards.
  {
    BatchDecodeConfig config = with_heads(*base, uniform(rng, 1, 8), uniform(rng, 1, 2));
    config.page_size = pick(rng, std::vector<int>{1, 16, 64});
    config.layout = uniform(rng, 0, 1) ? KvLayout::hnd : KvLayout::nhd;
    std::vector<std::int32_t> lens(uniform(rng, 1, 3));
    for (auto& len : lens) len = uniform(rng, 8000, 20000);
    REQUIRE(run_case(rng, random_case(rng, config, lens, uniform(rng, 0, 1), uniform(rng, 0, 1)), &plan));
    CHECK(plan.split);
  }
  // Batch 1 and random batches up to 512.
  for (std::int64_t batch : {std::int64_t(1), uniform<std::int64_t>(rng, 2, 512), uniform<std::int64_t>(rng, 2, 512)}) {
    const BatchDecodeConfig config = random_shape(rng, *base, int(batch));
    REQUIRE(run_case(rng, with_random_features(rng, random_case(rng, config, random_lens(rng, batch, batch == 1 ? 3000 : 300,
                                                                                         config.page_size),
                                                                uniform(rng, 0, 1), uniform(rng, 0, 1)))));
  }
}

// Under a window the plan starts each request's first item at the window's first key, not key 0,
// and that item folds the sink: so sinks with windows, in plans that split a request's window
// into chunks and plans that leave it whole, on every dtype (fp8 with k/v scales) with the
// position encodings rotating, caps and q_positions (which move RoPE and ALiBi, not the window)
// at random.
TEST_CASE("batch_decode with a sliding window and attention sinks: split and unsplit plans, every dtype", "[gpu]") {
  SEEDED_RNG(rng);
  const std::vector<PosEncoding> encodings = {PosEncoding::none, PosEncoding::rope_llama, PosEncoding::alibi};
  int ran = 0, index = 0;
  for (const Dtypes& d : kDtypes) {
    const int i = index++;
    BatchDecodeConfig features = with_dtypes({}, d);
    features.pos_encoding = encodings[(i + uniform(rng, 0, 2)) % 3];
    std::optional<BatchDecodeConfig> config = with_available_head_dim(rng, features);
    if (!config) config = with_available_head_dim(rng, with_dtypes({}, d));
    if (!config) {
      make_decode(with_dtypes({}, d));  // WARNs that it is skipped
      continue;
    }
    const BatchDecodeConfig shape = with_heads(random_shape(rng, *config, i), pick(rng, kGroups), uniform(rng, 1, 2));
    auto windowed = [&](std::vector<std::int32_t> lens, std::int32_t window_left) {
      Case c = random_case(rng, shape, std::move(lens), uniform(rng, 0, 1), true);
      c.config.window_left = window_left;
      c.soft_cap = uniform(rng, 0, 1) ? random_soft_cap(rng) : 0;
      c.with_sinks = true;
      return c;
    };
    aotinfer::DecodeWorkPlan plan;
    // One long request, or a few beside short and empty ones, under a window of hundreds to
    // thousands of keys (5 KV tiles or more): few items for the GPU, so the window is split.
    {
      const std::int32_t window_left = uniform(rng, 300, 3000);
      std::vector<std::int32_t> lens = {uniform(rng, 4000, 20000)};
      if (uniform(rng, 0, 1)) lens.insert(lens.end(), {0, 1, uniform(rng, 2, window_left), uniform(rng, 4000, 12000)});
      std::shuffle(lens.begin(), lens.end(), rng);
      ran += run_case(rng, windowed(lens, window_left), &plan);
      CHECK(plan.split);
    }
    // A window of at most 16 keys (one KV tile: 16 keys at head_dim 512, 32 at 256, 64 below)
    // leaves every request one item, beginning at its window unless the request is shorter.
    {
      std::vector<std::int32_t> lens = random_lens(rng, uniform(rng, 1, 16), 6000, shape.page_size);
      lens.push_back(uniform(rng, 3000, 8000));
      ran += run_case(rng, windowed(lens, uniform(rng, 0, 1) ? 0 : uniform(rng, 1, 15)), &plan);
      CHECK_FALSE(plan.split);
    }
  }
  REQUIRE_SOME_RAN(ran);
}

TEST_CASE("batch_decode of one request with 1 to 131k keys", "[gpu]") {
  SEEDED_RNG(rng);
  std::optional<BatchDecodeConfig> base = base_config();
  REQUIRE_SOME_RAN(base ? 1 : 0);
  // Lengths spread evenly over log2(length) from 1 to 2^17, one draw per octave.
  for (int octave = 0; octave < 17; ++octave) {
    const std::int32_t len = uniform(rng, 1 << octave, (2 << octave) - 1);
    BatchDecodeConfig config = random_shape(rng, *base, octave);
    if (len > 20000) config = with_heads(config, config.num_qo_heads / config.num_kv_heads, 1);  // keeps the fp64 reference quick
    REQUIRE(run_case(rng, with_random_features(rng, random_case(rng, config, {len}, uniform(rng, 0, 1), uniform(rng, 0, 1)))));
  }
}

// Batches that fill a wave of CTAs by themselves (8 KV heads: 8 CTAs an item): one long request
// among short ones is cut into chunks of a slot's share (split, merged), and skewed whole
// requests go out longest first (unsplit).
TEST_CASE("batch_decode of batches that fill a wave: a long request among short ones, and skewed lengths", "[gpu]") {
  SEEDED_RNG(rng);
  std::optional<BatchDecodeConfig> base = base_config();
  REQUIRE_SOME_RAN(base ? 1 : 0);
  const BatchDecodeConfig config = with_heads(random_shape(rng, *base, 0), uniform(rng, 1, 4), 8);
  aotinfer::DecodeWorkPlan plan;
  std::vector<std::int32_t> one_long(40);
  for (auto& len : one_long) len = uniform(rng, 1, 600);
  one_long[uniform(rng, 0, 39)] = uniform(rng, 40000, 60000);
  // (No window: it would keep the long request's keys few.)
  REQUIRE(run_case(rng, with_features(rng, random_case(rng, config, one_long, uniform(rng, 0, 1), true), false, uniform(rng, 0, 1)), &plan));
  CHECK(plan.split);
  // Whole skewed requests run longest first when they are more than a wave, in request order
  // otherwise (a wave's CTAs all start together). The wave depends on the variant's occupancy,
  // which the test does not know: 160 requests exceed it unless more than 8 CTAs fit an SM.
  std::vector<std::int32_t> skewed(160);
  for (auto& len : skewed) len = uniform(rng, 0, 1500);
  REQUIRE(run_case(rng, with_random_features(rng, random_case(rng, config, skewed, uniform(rng, 0, 1), true)), &plan));
  if (!plan.split) {
    bool request_order = true;
    for (std::int32_t x = 0; x < plan.num_work; ++x) request_order = request_order && plan.request[x] == x;
    if (!request_order)
      for (std::int32_t x = 1; x < plan.num_work; ++x)
        CHECK(plan.kv_end[x] - plan.kv_begin[x] <= plan.kv_end[x - 1] - plan.kv_begin[x - 1]);
  }
}

TEST_CASE("batch_decode of a 128k-token request among short ones", "[gpu][long]") {
  SEEDED_RNG(rng);
  BatchDecodeConfig bf16;
  bf16.head_dim = 128;
  std::optional<BatchDecodeConfig> base = available(bf16) ? std::optional(bf16) : base_config();
  REQUIRE_SOME_RAN(base ? 1 : 0);
  BatchDecodeConfig config = with_heads(*base, uniform(rng, 4, 8), 1);
  config.page_size = 16;
  config.layout = uniform(rng, 0, 1) ? KvLayout::hnd : KvLayout::nhd;
  aotinfer::DecodeWorkPlan plan;
  REQUIRE(run_case(rng, random_case(rng, config, {131072 + uniform(rng, 0, 63), 1, uniform(rng, 2, 500)}, false, true), &plan));
  CHECK(plan.split);
}

// Lengths raised to at least `keys` (causal speculative tokens need their own keys in the cache).
static std::vector<std::int32_t> at_least(std::vector<std::int32_t> lens, std::int32_t keys) {
  for (auto& len : lens) len = std::max(len, keys);
  return lens;
}

// Speculative verification: q_len tokens per request packed with the GQA heads into the
// kernel's rows, causal among themselves or seeing every key.
TEST_CASE("batch_decode verifies 2..16 query tokens per request: causal and every key, split and unsplit plans", "[gpu]") {
  SEEDED_RNG(rng);
  const std::vector<BatchDecodeConfig> held = held_configs();
  REQUIRE_SOME_RAN(held.size());
  int ran = 0, split = 0, unsplit = 0, every_key = 0;
  for (int i = 0; i < 30; ++i) {
    BatchDecodeConfig config = random_shape(rng, pick(rng, held), i);
    config = with_heads(config, pick<int>(rng, {1, 2, 3, 4, 5, 8}), uniform(rng, 1, 4));
    config.q_len = pick<int>(rng, {2, 2, 3, 4, 4, 5, 7, 8, 16});
    config.causal = i % 4 != 3;
    // Few long requests split, many short ones do not; causal tokens need their keys.
    const bool few = i % 2 == 0;
    const std::int64_t batch = few ? uniform(rng, 1, 6) : uniform(rng, 20, 140);
    std::vector<std::int32_t> lens = random_lens(rng, batch, few ? 9000 : 700, config.page_size);
    if (config.causal) lens = at_least(lens, config.q_len);
    Case c = random_case(rng, config, lens, uniform(rng, 0, 2) == 0, uniform(rng, 0, 3) != 0);
    c.soft_cap = uniform(rng, 0, 3) == 0 ? random_soft_cap(rng) : 0;
    if (uniform(rng, 0, 4) == 0) c.q_pad = pick<int>(rng, {8, 2 * c.config.num_kv_heads * c.config.head_dim});
    aotinfer::DecodeWorkPlan plan;
    if (!run_case(rng, c, &plan)) continue;
    ++ran;
    (plan.split ? split : unsplit) += 1;
    every_key += !config.causal;
  }
  REQUIRE_SOME_RAN(ran);
  CHECK(split > 0);
  CHECK(unsplit > 0);
  CHECK(every_key > 0);
}

// Custom masks on the decode kernel (FlashInfer's packed bits; a speculative tree is the case it
// is there for): each block's mask words travel with its keys. Trees over the last q_len keys,
// random bits with empty rows, causal with holes; 1..16 tokens, GQA groups 1-8 (rows past one
// CTA's 16 too), page sizes 1/16/64, split and unsplit plans, requests shorter than q_len.
TEST_CASE("batch_decode under custom masks: speculative trees, random bits, causal with holes, split and unsplit", "[gpu]") {
  SEEDED_RNG(rng);
  const std::vector<BatchDecodeConfig> held = held_configs();
  REQUIRE_SOME_RAN(held.size());
  int ran = 0, split = 0, unsplit = 0;
  for (int i = 0; i < 36; ++i) {
    BatchDecodeConfig config = random_shape(rng, pick(rng, held), i);
    config = with_heads(config, pick<int>(rng, {1, 2, 3, 4, 8}), uniform(rng, 1, 4));
    config.page_size = pick<int>(rng, {1, 16, 64});
    config.q_len = pick<int>(rng, {1, 2, 3, 4, 4, 6, 8, 8, 16});
    config.custom_mask = true;
    config.causal = uniform(rng, 0, 1);  // not read under a custom mask
    const bool few = i % 2 == 0;         // few long requests split, many short ones do not
    const std::int64_t batch = few ? uniform(rng, 1, 6) : uniform(rng, 20, 140);
    Case c = random_case(rng, config, random_lens(rng, batch, few ? 9000 : 700, config.page_size), uniform(rng, 0, 2) == 0,
                         uniform(rng, 0, 3) != 0);
    c.mask_shape = std::array{MaskShape::tree, MaskShape::random, MaskShape::causal_like}[i % 3];
    if (c.mask_shape == MaskShape::tree) c.lens = at_least(c.lens, config.q_len);  // the tree's own keys
    c.soft_cap = uniform(rng, 0, 3) == 0 ? random_soft_cap(rng) : 0;
    aotinfer::DecodeWorkPlan plan;
    if (!run_case(rng, c, &plan)) continue;
    ++ran;
    (plan.split ? split : unsplit) += 1;
  }
  REQUIRE_SOME_RAN(ran);
  CHECK(split > 0);
  CHECK(unsplit > 0);
}

TEST_CASE("BatchDecode refuses custom-mask arguments that disagree with its config", "[gpu]") {
  SEEDED_RNG(rng);
  std::optional<BatchDecodeConfig> base = base_config();
  REQUIRE_SOME_RAN(base ? 1 : 0);
  BatchDecodeConfig config = *base;
  config.q_len = 4;
  config.custom_mask = true;
  Case c = random_case(rng, config, {40, 3, 200}, false, true);  // 3 keys: fewer than q_len is fine here
  const Problem p = make_problem(rng, c);
  DeviceProblem d(p);
  d.upload(p);
  BatchDecode decode(package(), config);
  Workspace ws(decode.workspace_sizes(std::int32_t(p.batch())));
  decode.plan(p.cache.indptr, p.cache.last_page_len, p.cache.indices, p.num_pages, ws.ws, nullptr);
  aotinfer::DecodeRunArgs args = d.args(p);
  args.custom_mask = nullptr;
  REQUIRE_THROWS_WITH(decode.run(args, nullptr), Contains("needs custom_mask and mask_indptr"));
  args = d.args(p);
  args.custom_mask += 2;
  REQUIRE_THROWS_WITH(decode.run(args, nullptr), Contains("custom_mask must be 4-byte aligned"));

  config.custom_mask = false;
  BatchDecode plain(package(), config);
  const Problem causal = make_problem(rng, random_case(rng, config, {40, 5, 200}, false, true));
  Workspace plain_ws(plain.workspace_sizes(std::int32_t(causal.batch())));  // the plan above keeps its own
  plain.plan(causal.cache.indptr, causal.cache.last_page_len, causal.cache.indices, causal.num_pages, plain_ws.ws, nullptr);
  args = d.args(p);
  REQUIRE_THROWS_WITH(plain.run(args, nullptr), Contains("config.custom_mask is false"));

  untouched_then_right(decode, p, d);
}

TEST_CASE("batch_decode at head_dim 512: the four warps of a team add their partial scores", "[gpu]") {
  SEEDED_RNG(rng);
  int ran = 0;
  for (int i = 0; i < 8; ++i) {
    BatchDecodeConfig c = with_dtypes({}, kDtypes[i % 2]);  // bf16 and f16, q = KV = o
    c.head_dim = 512;
    c.pos_encoding = i % 4 < 2 ? PosEncoding::none : PosEncoding::rope_llama;
    if (!available(c)) {
      make_decode(c);  // WARNs that it is skipped
      continue;
    }
    c = random_shape(rng, c, i);
    c.q_len = i >= 4 ? uniform(rng, 2, 4) : 1;
    const bool few = i % 2 == 0;  // few long requests split, many short ones do not
    std::vector<std::int32_t> lens = random_lens(rng, few ? uniform(rng, 1, 4) : uniform(rng, 20, 60), few ? 6000 : 400, c.page_size);
    lens = at_least(lens, c.q_len);
    // Windows take one token per request.
    ran += run_case(rng, with_features(rng, random_case(rng, c, lens, uniform(rng, 0, 1), true), c.q_len == 1 && uniform(rng, 0, 1),
                                       uniform(rng, 0, 1)));
  }
  REQUIRE_SOME_RAN(ran);
}

TEST_CASE("batch_decode refuses q_len outside 1..16, a window with several tokens, and requests with fewer keys than causal tokens", "[gpu]") {
  std::optional<BatchDecodeConfig> base = base_config();
  REQUIRE_SOME_RAN(base ? 1 : 0);
  BatchDecodeConfig c = *base;
  for (int q_len : {0, 17}) {
    c.q_len = q_len;
    REQUIRE_THROWS_WITH(BatchDecode(package(), c), Contains("q_len (query tokens per request) must be 1..16, got " + std::to_string(q_len)));
  }
  c.q_len = 4;
  c.window_left = 100;
  REQUIRE_THROWS_WITH(BatchDecode(package(), c), Contains("takes one query token per request, got q_len 4"));
  c.window_left = -1;
  c.page_size = 16;
  BatchDecode decode(package(), c);
  Workspace ws(decode.workspace_sizes(2));
  const std::vector<std::int32_t> indptr = {0, 1, 2}, last = {16, 3}, indices = {0, 1};
  REQUIRE_THROWS_WITH(decode.plan(indptr, last, indices, 2, ws.ws, nullptr),
                      Contains("request 1 has 3 keys, fewer than its q_len 4 causal query tokens"));
  c.causal = false;  // every key: a short request is fine
  BatchDecode all_keys(package(), c);
  Workspace ws2(all_keys.workspace_sizes(2));
  all_keys.plan(indptr, last, indices, 2, ws2.ws, nullptr);
}

// One CUDA-graph decode captured once and replayed after each of several plans, each checked.
static void replay_plans(std::mt19937_64& rng, const BatchDecodeConfig& base, bool window, int q_len = 1,
                         bool custom_mask = false) {
  BatchDecodeConfig config = with_heads(base, pick(rng, kGroups), uniform(rng, 1, 4));
  config.q_len = q_len;
  config.custom_mask = custom_mask;  // the masks' bits and offsets change with each plan, their buffers do not
  config.page_size = pick(rng, std::vector<int>{1, 16, 64});
  config.layout = uniform(rng, 0, 1) ? KvLayout::hnd : KvLayout::nhd;
  config.cuda_graph = true;
  config.max_batch = uniform(rng, 24, 64);
  // The window is the plan's (each request's items cover only its window's keys): the grid and
  // the captured launch stay the same.
  config.window_left = window ? random_window_left(rng) : -1;
  const std::int32_t max_batch = config.max_batch;
  BatchDecode decode(package(), config);

  // The plans replayed: a first batch (captured), the largest batch, one long request (many
  // chunks), empty and tiny requests, and the first shape again with new values. Pointers and
  // scalars (scales, rope, cap) are captured with the launches, so only the lengths and the
  // values behind the pointers change; lse, q_positions, sinks and the cap are on or off for all
  // of them.
  const bool q_positions = uniform(rng, 0, 1);
  const std::int64_t first = uniform(rng, 4, max_batch / 2);
  std::vector<std::vector<std::int32_t>> shapes = {
      random_lens(rng, first, 1500, config.page_size), random_lens(rng, max_batch, 600, config.page_size),
      {uniform(rng, 12000, 24000)}, random_lens(rng, uniform(rng, 2, max_batch), 3, config.page_size)};
  shapes.push_back(shapes[0]);
  for (auto& lens : shapes) lens = at_least(lens, q_len);
  std::vector<Problem> problems;
  std::int64_t max_pages = 0, max_indices = 0, max_mask_bytes = 0;
  Case first_case = random_case(rng, config, shapes[0], q_positions, true);
  first_case.soft_cap = uniform(rng, 0, 1) ? random_soft_cap(rng) : 0;
  first_case.mask_shape = pick<MaskShape>(rng, {MaskShape::tree, MaskShape::random, MaskShape::causal_like});
  for (const auto& lens : shapes) {
    Case c = first_case;
    c.lens = lens;
    c.spare_pages = uniform(rng, 0, 4);
    problems.push_back(make_problem(rng, c));
    max_pages = std::max<std::int64_t>(max_pages, problems.back().num_pages);
    max_indices = std::max<std::int64_t>(max_indices, problems.back().cache.indices.size());
    max_mask_bytes = std::max<std::int64_t>(max_mask_bytes, problems.back().packed_masks.bytes.size());
  }
  DeviceProblem d(config, max_batch, max_pages, max_indices, 0, max_mask_bytes);
  Workspace ws(decode.workspace_sizes(max_batch));

  struct Graph {
    cudaStream_t stream = nullptr;
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    ~Graph() {
      if (exec) cudaGraphExecDestroy(exec);
      if (graph) cudaGraphDestroy(graph);
      if (stream) cudaStreamDestroy(stream);
    }
  } g;
  CUDA_CHECK(cudaStreamCreate(&g.stream));
  std::int32_t padded_work = 0;
  for (std::size_t i = 0; i < problems.size(); ++i) {
    const Problem& p = problems[i];
    INFO("plan " << i << ": " << describe(p.c));
    d.upload(p);
    decode.plan(p.cache.indptr, p.cache.last_page_len, p.cache.indices, p.num_pages, ws.ws, aotinfer::Stream(g.stream));
    const aotinfer::DecodeWorkPlan& wp = decode.work_plan();
    INFO("plan: split " << wp.split << ", num_work " << wp.num_work << ", padded_work " << wp.padded_work);
    CHECK(wp.split);
    if (i == 0) {
      CUDA_CHECK(cudaStreamBeginCapture(g.stream, cudaStreamCaptureModeGlobal));
      decode.run(d.args(p), aotinfer::Stream(g.stream));
      CUDA_CHECK(cudaStreamEndCapture(g.stream, &g.graph));
      REQUIRE(g.graph != nullptr);
      CUDA_CHECK(cudaGraphInstantiate(&g.exec, g.graph, 0));
      padded_work = wp.padded_work;
    }
    CHECK(wp.padded_work == padded_work);
    // Two replays, the second from poisoned outputs: the merge counters are reset by each run.
    for (int replay = 0; replay < 2; ++replay) {
      d.poison_outputs();
      CUDA_CHECK(cudaGraphLaunch(g.exec, g.stream));
      CUDA_CHECK(cudaStreamSynchronize(g.stream));
      CUDA_CHECK(cudaGetLastError());
    }
    check(p, d, reference(p));
  }
}

TEST_CASE("batch_decode in CUDA-graph mode: one captured graph replays every later plan, with and without a window, with several query tokens and under a custom mask", "[gpu]") {
  SEEDED_RNG(rng);
  std::optional<BatchDecodeConfig> base = base_config();
  REQUIRE_SOME_RAN(base ? 1 : 0);
  for (bool window : {false, true}) {
    INFO((window ? "with" : "without") << " a sliding window");
    replay_plans(rng, *base, window);
  }
  const int q_len = uniform(rng, 2, 8);
  INFO("q_len " << q_len);
  replay_plans(rng, *base, false, q_len);
  INFO("under a custom mask");
  replay_plans(rng, *base, false, uniform(rng, 1, 8), true);
}

// A decode step runs the layers' decodes back to back on one stream, each reading what the
// launches before it wrote: here each run's q is the previous run's o, with every o poisoned
// beforehand, so a run that started reading early would see NaN.
TEST_CASE("batch_decode launched back to back reads what the launch before it wrote", "[gpu]") {
  SEEDED_RNG(rng);
  std::optional<BatchDecodeConfig> base = base_config();  // its o feeds the next run's q: same type
  REQUIRE_SOME_RAN(base && base->dtype_o == base->dtype_q ? 1 : 0);
  BatchDecodeConfig config = with_heads(*base, pick(rng, kGroups), uniform(rng, 1, 4));
  config.page_size = pick(rng, std::vector<int>{1, 16});
  config.layout = uniform(rng, 0, 1) ? KvLayout::hnd : KvLayout::nhd;
  std::optional<BatchDecode> decode = make_decode(config);
  REQUIRE(decode);
  // Small batches of long requests split their KV: the merge reads the previous states too.
  Case c = random_case(rng, config, random_lens(rng, uniform(rng, 1, 6), 6000, config.page_size), false, false);
  INFO(describe(c));
  Problem p = make_problem(rng, c);
  DeviceProblem d(p);
  d.upload(p);
  Workspace ws(decode->workspace_sizes(std::int32_t(p.batch())));
  constexpr int kRuns = 6;
  std::vector<DeviceBuffer<std::uint8_t>> outs;
  for (int i = 0; i < kRuns; ++i) {
    outs.emplace_back(d.o.count);
    outs.back().poison();
  }
  cudaStream_t stream = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  CUDA_CHECK(cudaDeviceSynchronize());
  decode->plan(p.cache.indptr, p.cache.last_page_len, p.cache.indices, p.num_pages, ws.ws, aotinfer::Stream(stream));
  for (int i = 0; i < kRuns; ++i) {
    aotinfer::DecodeRunArgs a = d.args(p);
    a.q = i == 0 ? d.q.ptr : outs[i - 1].ptr;
    a.o = outs[i].ptr;
    decode->run(a, aotinfer::Stream(stream));
  }
  CUDA_CHECK(cudaStreamSynchronize(stream));
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaStreamDestroy(stream));

  // Run i against the reference on the q it should have read: the input, then run i - 1's o.
  const std::int64_t osize = aotinfer::dtype_size(config.dtype_o);
  std::vector<double> got(p.q.size());
  for (int i = 0; i < kRuns; ++i) {
    INFO("run " << i);
    const ref::DecodeResult want = reference(p);
    const std::vector<std::uint8_t> bytes = outs[i].download();
    for (std::size_t e = 0; e < got.size(); ++e) got[e] = decode_element(&bytes[e * osize], config.dtype_o);
    for (std::int64_t b = 0; b < p.batch(); ++b) {
      INFO("request " << b << " (kv_len " << p.c.lens[b] << ")");
      const std::int64_t row = config.num_qo_heads * std::int64_t(config.head_dim);
      const std::vector<double> out(got.begin() + b * row, got.begin() + (b + 1) * row);
      const std::vector<double> ref_o(want.o.begin() + b * row, want.o.begin() + (b + 1) * row);
      if (std::isinf(want.lse[b * config.num_qo_heads]))
        CHECK(std::all_of(out.begin(), out.end(), [](double x) { return x == 0; }));
      else
        CHECK(relative_error(out, ref_o) < o_tolerance(config));
    }
    p.q = got;  // the next run's q
  }
}

TEST_CASE("the C API's raw batch_decode run takes attention sinks, q positions, a window and a soft cap", "[gpu]") {
  SEEDED_RNG(rng);
  std::optional<BatchDecodeConfig> config = base_config();
  REQUIRE_SOME_RAN(config.has_value());
  *config = with_heads(*config, 4, 2);
  Case c = with_features(rng, random_case(rng, *config, random_lens(rng, 6, 700, config->page_size), /*q_positions=*/true, /*lse=*/true),
                         /*window=*/true, /*cap=*/true);
  c.with_sinks = true;
  INFO(describe(c));
  const Problem p = make_problem(rng, c);
  DeviceProblem d(p);
  d.upload(p);

  aotinfer_package* pkg = nullptr;
  REQUIRE(aotinfer_package_open(package().path().c_str(), &pkg) == AOTINFER_OK);
  const std::string dtype_q(aotinfer::dtype_name(c.config.dtype_q)), dtype_kv(aotinfer::dtype_name(c.config.dtype_kv)),
      dtype_o(aotinfer::dtype_name(c.config.dtype_o));
  aotinfer_batch_decode_config cc{};
  cc.dtype_q = dtype_q.c_str();
  cc.dtype_kv = dtype_kv.c_str();
  cc.dtype_o = dtype_o.c_str();
  cc.head_dim = c.config.head_dim;
  cc.num_qo_heads = c.config.num_qo_heads;
  cc.num_kv_heads = c.config.num_kv_heads;
  cc.page_size = c.config.page_size;
  cc.layout = name(c.config.layout);
  // A window is a flag and a count (a zeroed config has none); the flag without a count is refused.
  cc.sliding_window = 1;
  cc.window_left = -1;
  aotinfer_batch_decode* decode = nullptr;
  CHECK(aotinfer_batch_decode_create(pkg, &cc, &decode) == AOTINFER_INVALID_ARGUMENT);
  CHECK_THAT(std::string(aotinfer_last_error()), Contains("window_left"));
  cc.window_left = c.config.window_left;
  REQUIRE(aotinfer_batch_decode_create(pkg, &cc, &decode) == AOTINFER_OK);
  std::size_t float_bytes = 0, int_bytes = 0;
  REQUIRE(aotinfer_batch_decode_workspace_sizes(decode, std::int32_t(p.batch()), 0, &float_bytes, &int_bytes) == AOTINFER_OK);
  DeviceBuffer<std::uint8_t> floats(float_bytes), ints(int_bytes);
  REQUIRE(aotinfer_batch_decode_plan(decode, p.cache.indptr.data(), std::int32_t(p.batch()), p.cache.last_page_len.data(),
                                     p.cache.indices.data(), std::int32_t(p.cache.indices.size()), std::int32_t(p.num_pages),
                                     floats.ptr, float_bytes, ints.ptr, int_bytes, nullptr) == AOTINFER_OK);
  const aotinfer::DecodeRunArgs a = d.args(p);
  aotinfer_batch_decode_run_args args{};
  args.batch = a.batch;
  args.q = a.q;
  args.k_pages = a.k_pages;
  args.v_pages = a.v_pages;
  args.kv_indptr = a.kv_indptr;
  args.kv_indices = a.kv_indices;
  args.kv_last_page_len = a.kv_last_page_len;
  args.o = a.o;
  args.lse = a.lse;
  args.q_positions = a.q_positions;
  args.sinks = a.sinks;
  args.sm_scale = a.sm_scale;
  args.logits_soft_cap = a.logits_soft_cap;
  args.k_scale = a.k_scale;
  args.v_scale = a.v_scale;
  REQUIRE(a.sinks != nullptr);
  REQUIRE(a.logits_soft_cap > 0);
  REQUIRE(aotinfer_batch_decode_run(decode, &args, nullptr) == AOTINFER_OK);
  CUDA_CHECK(cudaDeviceSynchronize());
  aotinfer_batch_decode_destroy(decode);
  aotinfer_package_close(pkg);
  check(p, d, reference(p));
}

TEST_CASE("BatchDecode refuses bad arguments before launching anything", "[gpu]") {
  SEEDED_RNG(rng);
  std::optional<BatchDecodeConfig> base = base_config();
  REQUIRE_SOME_RAN(base ? 1 : 0);
  using Catch::CaseSensitive;
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

  SECTION("head counts") {
    BatchDecodeConfig c = *base;
    c.num_qo_heads = 6, c.num_kv_heads = 4;
    CHECK_THAT(invalid([&] { BatchDecode(package(), c); }), Contains("heads"));
    c.num_qo_heads = 128, c.num_kv_heads = 1;  // group 128 > 64
    CHECK_THAT(invalid([&] { BatchDecode(package(), c); }), Contains("group", CaseSensitive::No) || Contains("64"));
    c.num_qo_heads = 8, c.num_kv_heads = 0;
    CHECK_THAT(invalid([&] { BatchDecode(package(), c); }), Contains("heads"));
  }

  SECTION("plan and run arguments") {
    BatchDecodeConfig config = with_heads(*base, 4, 2);
    config.page_size = 16;
    BatchDecode decode(package(), config);
    std::vector<std::int32_t> lens(8);
    for (auto& len : lens) len = uniform(rng, 40, 300);  // several pages each
    const Problem p = make_problem(rng, random_case(rng, config, lens, false, true));
    DeviceProblem d(p);
    d.upload(p);
    const aotinfer::WorkspaceSizes sizes = decode.workspace_sizes(std::int32_t(p.batch()));
    Workspace ws(sizes);
    const auto& kv = p.cache;
    auto plan = [&](std::vector<std::int32_t> indptr, std::vector<std::int32_t> last, std::vector<std::int32_t> indices,
                    const aotinfer::Workspace& w) { decode.plan(indptr, last, indices, p.num_pages, w, nullptr); };

    // run() before any plan.
    CHECK_THAT(invalid([&] { decode.run(d.args(p), nullptr); }), Contains("plan"));

    auto indptr = kv.indptr;
    indptr[0] = 1;
    CHECK_THAT(invalid([&] { plan(indptr, kv.last_page_len, kv.indices, ws.ws); }), Contains("indptr"));
    indptr = kv.indptr;
    indptr[5] = indptr[4] - 1;
    CHECK_THAT(invalid([&] { plan(indptr, kv.last_page_len, kv.indices, ws.ws); }), Contains("indptr") && aotinfer_test::NamesNumber(5));
    auto last = kv.last_page_len;
    last[2] = 0;
    CHECK_THAT(invalid([&] { plan(kv.indptr, last, kv.indices, ws.ws); }), Contains("last_page_len") && aotinfer_test::NamesNumber(2));
    last = kv.last_page_len;
    last[6] = config.page_size + 1;
    CHECK_THAT(invalid([&] { plan(kv.indptr, last, kv.indices, ws.ws); }), Contains("last_page_len") && aotinfer_test::NamesNumber(6));
    for (std::int32_t bad : {p.num_pages, p.num_pages + 100, -1}) {
      auto indices = kv.indices;
      indices[uniform<std::size_t>(rng, 0, indices.size() - 1)] = bad;
      CHECK_THAT(invalid([&] { plan(kv.indptr, kv.last_page_len, indices, ws.ws); }),
                 Contains("indices", CaseSensitive::No) || Contains("page", CaseSensitive::No));
    }
    aotinfer::Workspace small = ws.ws;
    small.int_bytes = 8;
    CHECK_THAT(invalid([&] { plan(kv.indptr, kv.last_page_len, kv.indices, small); }), Contains("workspace", CaseSensitive::No));
    {
      // A split plan (one long request) without room for its partial states.
      BatchDecodeConfig one = config;
      const Problem long_p = make_problem(rng, random_case(rng, one, {30000}, false, true));
      Workspace long_ws(decode.workspace_sizes(1));
      aotinfer::Workspace no_floats = long_ws.ws;
      no_floats.float_bytes = 0;
      CHECK_THAT(invalid([&] {
                   decode.plan(long_p.cache.indptr, long_p.cache.last_page_len, long_p.cache.indices, long_p.num_pages, no_floats,
                               nullptr);
                 }),
                 Contains("workspace", CaseSensitive::No));
    }

    // A valid plan; then runs that disagree with it or lack pointers.
    plan(kv.indptr, kv.last_page_len, kv.indices, ws.ws);
    aotinfer::DecodeRunArgs args = d.args(p);
    args.batch = std::int32_t(p.batch()) + 1;
    CHECK_THAT(invalid([&] { decode.run(args, nullptr); }), Contains("batch"));
    args.batch = std::int32_t(p.batch()) - 1;
    CHECK_THAT(invalid([&] { decode.run(args, nullptr); }), Contains("batch"));
    args = d.args(p);
    args.q = nullptr;
    CHECK_THAT(invalid([&] { decode.run(args, nullptr); }), Contains("null", CaseSensitive::No));
    args = d.args(p);
    args.kv_indptr = nullptr;
    CHECK_THAT(invalid([&] { decode.run(args, nullptr); }), Contains("null", CaseSensitive::No));

    untouched_then_right(decode, p, d);
  }
}

// Before kernel ABI 2, sliding_window and soft_cap were batch_decode variant axes. A package built
// then must be refused by name with the rebuild that fixes it, in C++ and through the C API,
// rather than have its window-less variants run with the window ignored. (The refusal comes
// before any kernel is loaded: the manifest alone is enough to test it.)
TEST_CASE("BatchDecode refuses a package built when windows and soft caps were variant axes", "[gpu]") {
  const OldAxesPackage old({"batch_decode"});
  if (!old.made) {
    WARN("skipped: the package under test records no batch_decode family without those axes in its manifest");
    return;
  }
  const aotinfer::Package pkg = aotinfer::Package::open(old.dir);
  BatchDecodeConfig config = with_heads({}, 4, 2);
  config.window_left = 16;
  try {
    BatchDecode decode(pkg, config);
    FAIL("a batch_decode family with sliding_window and soft_cap axes was accepted");
  } catch (const aotinfer::Error& e) {
    INFO(e.what());
    CHECK(e.code() == ErrorCode::not_found);
    CHECK_THAT(std::string(e.what()), Contains("sliding_window") && Contains("soft_cap") && Contains("rebuild"));
  }

  aotinfer_package* c_pkg = nullptr;
  REQUIRE(aotinfer_package_open(old.dir.c_str(), &c_pkg) == AOTINFER_OK);
  aotinfer_batch_decode_config cc{};
  cc.dtype_q = cc.dtype_kv = "bf16";
  cc.head_dim = config.head_dim;
  cc.num_qo_heads = config.num_qo_heads;
  cc.num_kv_heads = config.num_kv_heads;
  cc.page_size = config.page_size;
  aotinfer_batch_decode* decode = nullptr;
  CHECK(aotinfer_batch_decode_create(c_pkg, &cc, &decode) == AOTINFER_NOT_FOUND);
  CHECK(decode == nullptr);
  CHECK_THAT(std::string(aotinfer_last_error()), Contains("sliding_window") && Contains("rebuild"));
  aotinfer_batch_decode_destroy(decode);
  aotinfer_package_close(c_pkg);
}

// ---------------------------------------------------------------------------------------------
// append_paged_kv

TEST_CASE("append_paged_kv writes every new token into its page slot and nothing else", "[gpu]") {
  SEEDED_RNG(rng);
  int ran = 0, index = 0;
  for (DType dtype : {DType::f16, DType::bf16, DType::e4m3, DType::e5m2})
    for (KvLayout layout : {KvLayout::nhd, KvLayout::hnd}) {
      const int i = index++;
      const int head_dim = pick(rng, head_dims("append_paged_kv"));
      std::optional<aotinfer::AppendPagedKv> op;
      try {
        op.emplace(package(), dtype, head_dim);
      } catch (const aotinfer::Error& e) {
        if (e.code() != ErrorCode::not_found) throw;
        WARN("skipped, not in the package: append_paged_kv{dtype=" << aotinfer::dtype_name(dtype) << ", head_dim=" << head_dim
                                                                    << "}: " << e.what());
        continue;
      }
      const std::int64_t page_size = std::vector<int>{1, 16, 64}[i % 3], heads = uniform(rng, 1, 4), d = head_dim;
      const std::int64_t batch = uniform(rng, 1, 16);
      const std::size_t esize = aotinfer::dtype_size(dtype);
      INFO("append_paged_kv " << aotinfer::dtype_name(dtype) << ", layout " << name(layout) << ", head_dim " << d << ", page_size "
                              << page_size << ", kv heads " << heads << ", batch " << batch);

      // Lengths before and after: some requests start empty or right at / before a page end.
      std::vector<std::int32_t> old_len(batch), new_len(batch);
      for (std::int64_t b = 0; b < batch; ++b) {
        const int kind = uniform(rng, 0, 3);
        old_len[b] = kind == 0 ? 0 : kind == 1 ? std::int32_t(uniform<std::int64_t>(rng, 1, 4) * page_size - uniform(rng, 0, 1)) : uniform(rng, 0, 150);
        new_len[b] = old_len[b] + uniform(rng, 1, 5);
      }
      std::int64_t used = 0;
      for (auto len : new_len) used += (len + page_size - 1) / page_size;
      const std::int32_t num_pages = std::int32_t(used + uniform(rng, 0, 3));
      std::vector<std::int32_t> perm(num_pages), indptr{0}, indices, last;
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(perm.begin(), perm.end(), rng);
      for (auto len : new_len) {
        const std::int32_t pages = std::int32_t((len + page_size - 1) / page_size);
        for (std::int32_t k = 0; k < pages; ++k) indices.push_back(perm[indices.size()]);
        indptr.push_back(std::int32_t(indices.size()));
        last.push_back(std::int32_t(len - (pages - 1) * page_size));
      }

      // The new tokens in random order, from strided [nnz, heads, head_dim] inputs.
      std::vector<std::int32_t> batch_indices, positions;
      std::vector<std::pair<std::int32_t, std::int32_t>> tokens;
      for (std::int32_t b = 0; b < batch; ++b)
        for (std::int32_t pos = old_len[b]; pos < new_len[b]; ++pos) tokens.emplace_back(b, pos);
      std::shuffle(tokens.begin(), tokens.end(), rng);
      for (auto [b, pos] : tokens) batch_indices.push_back(b), positions.push_back(pos);
      const std::int64_t nnz = std::int64_t(tokens.size());
      // Padded token strides, kept to multiples of 16 bytes (the contract names no alignment;
      // the kernel uses 16-byte accesses).
      const std::int64_t k_stride = heads * d + pick(rng, std::vector<std::int64_t>{0, 16, 64}) / std::int64_t(esize);
      const std::int64_t v_stride = heads * d + pick(rng, std::vector<std::int64_t>{0, 32, 256}) / std::int64_t(esize);
      Values values(rng, dtype);
      std::vector<std::uint8_t> k_in(nnz * k_stride * esize, 0), v_in(nnz * v_stride * esize, 0);
      values.fill(k_in.data(), nullptr, nnz * k_stride);
      values.fill(v_in.data(), nullptr, nnz * v_stride);

      // Pools of random bytes; the expected pools differ only in the appended slots.
      const std::int64_t pool = std::int64_t(num_pages) * page_size * heads * d * esize;
      std::vector<std::uint8_t> k_pool(pool), v_pool(pool);
      for (auto& x : k_pool) x = std::uint8_t(rng());
      for (auto& x : v_pool) x = std::uint8_t(rng());
      std::vector<std::uint8_t> k_want = k_pool, v_want = v_pool;
      const Strides st = strides(layout, page_size, heads, d);
      for (std::int64_t j = 0; j < nnz; ++j)
        for (std::int64_t h = 0; h < heads; ++h) {
          const std::int64_t page = indices[indptr[batch_indices[j]] + positions[j] / page_size];
          const std::int64_t at = page * st.page + (positions[j] % page_size) * st.token + h * st.head;
          std::memcpy(&k_want[at * esize], &k_in[(j * k_stride + h * d) * esize], d * esize);
          std::memcpy(&v_want[at * esize], &v_in[(j * v_stride + h * d) * esize], d * esize);
        }

      DeviceBuffer<std::uint8_t> dk(k_in.size()), dv(v_in.size()), dk_pool(pool), dv_pool(pool);
      DeviceBuffer<std::int32_t> d_batch(nnz), d_pos(nnz), d_indptr(indptr.size()), d_indices(indices.size()), d_last(last.size());
      dk.upload(k_in), dv.upload(v_in), dk_pool.upload(k_pool), dv_pool.upload(v_pool);
      d_batch.upload(batch_indices), d_pos.upload(positions), d_indptr.upload(indptr), d_indices.upload(indices), d_last.upload(last);

      aotinfer_append_paged_kv_params params{};
      params.k = dk.ptr;
      params.v = dv.ptr;
      params.k_stride_token = k_stride;
      params.v_stride_token = v_stride;
      params.batch_indices = d_batch.ptr;
      params.positions = d_pos.ptr;
      params.kv = {dk_pool.ptr, dv_pool.ptr, d_indptr.ptr, d_indices.ptr, d_last.ptr, st.page, st.token, st.head,
                   std::int32_t(page_size), std::int32_t(heads)};
      params.nnz = nnz;
      op->run(params, nullptr);
      CUDA_CHECK(cudaGetLastError());
      CUDA_CHECK(cudaDeviceSynchronize());

      auto first_difference = [&](const std::vector<std::uint8_t>& got, const std::vector<std::uint8_t>& want) -> std::string {
        for (std::size_t x = 0; x < got.size(); ++x)
          if (got[x] != want[x]) {
            const std::int64_t e = std::int64_t(x / esize), page = e / st.page;
            std::ostringstream s;
            s << "element " << e << " (page " << page << ", offset in page " << e % st.page << ") is 0x" << std::hex << int(got[x])
              << ", expected 0x" << int(want[x]);
            return s.str();
          }
        return "";
      };
      CHECK(first_difference(dk_pool.download(), k_want) == "");
      CHECK(first_difference(dv_pool.download(), v_want) == "");

      // nnz 0 launches nothing; bad arguments are refused before launching.
      params.nnz = 0;
      op->run(params, nullptr);
      params.nnz = -1;
      try {
        op->run(params, nullptr);
        FAIL("nnz -1 was accepted");
      } catch (const aotinfer::Error& e) {
        CHECK(e.code() == ErrorCode::invalid_argument);
        CHECK_THAT(std::string(e.what()), Contains("nnz"));
      }
      params.nnz = nnz;
      params.kv.num_kv_heads = 0;
      try {
        op->run(params, nullptr);
        FAIL("num_kv_heads 0 was accepted");
      } catch (const aotinfer::Error& e) {
        CHECK(e.code() == ErrorCode::invalid_argument);
        CHECK_THAT(std::string(e.what()), Contains("heads"));
      }
      params.kv.num_kv_heads = std::int32_t(heads);
      params.k = nullptr;
      try {
        op->run(params, nullptr);
        FAIL("a null k was accepted");
      } catch (const aotinfer::Error& e) {
        CHECK(e.code() == ErrorCode::invalid_argument);
        CHECK_THAT(std::string(e.what()), Contains("null", Catch::CaseSensitive::No));
      }
      CUDA_CHECK(cudaDeviceSynchronize());
      CHECK(first_difference(dk_pool.download(), k_want) == "");
      ++ran;
    }
  REQUIRE_SOME_RAN(ran);
}
