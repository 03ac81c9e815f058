// Batch-invariant plans (KvSplit fixed and none, aotinfer/attention.hpp) on the GPU: a request's
// output and LSE must be the same bytes whatever else shares its batch, the batch's size and
// order, CUDA-graph mode or not, with a sliding window or without (the plan cuts a request's
// window by the request alone), and (prefill, causal) however its queries were cut into chunks.
// Requests are drawn once per test; each is run alone, then inside random batches of the others,
// and the bytes compared (a chunk of a prompt that starts inside a query tile: o's bytes only). That the bytes are right is the other GPU tests' job (they run the
// invariant modes against the fp64 reference too).
#include <algorithm>
#include <cstring>
#include <numeric>
#include <optional>
#include <sstream>

#include "aotinfer/batch_decode.hpp"
#include "aotinfer/batch_prefill.hpp"
#include "gpu_test_util.hpp"
#include "random_values.hpp"

using namespace gpu_test;
using aotinfer::KvSplit;

namespace {

constexpr int kKvHeads = 2, kGroup = 4, kHeads = kKvHeads * kGroup, kDim = 128, kPage = 16;
constexpr aotinfer::DType kType = aotinfer::DType::bf16;

// One request's data as the kernels read it: q [qo][heads][dim], k and v [kv][kv_heads][dim].
struct Request {
  int qo = 0, kv = 0;
  std::vector<std::uint16_t> q, k, v;
};

std::vector<std::uint16_t> random_bits(std::mt19937_64& rng, std::size_t n) {
  std::vector<std::uint16_t> bits(n);
  std::uniform_real_distribution<double> u(-2, 2);
  for (auto& b : bits) b = to_bits(u(rng), kType);
  return bits;
}

Request random_request(std::mt19937_64& rng, int qo, int kv) {
  return {qo, kv, random_bits(rng, std::size_t(qo) * kHeads * kDim), random_bits(rng, std::size_t(kv) * kKvHeads * kDim),
          random_bits(rng, std::size_t(kv) * kKvHeads * kDim)};
}

// A request's outputs: o [qo][heads][dim] bits and lse [qo][heads].
struct Output {
  std::vector<std::uint16_t> o;
  std::vector<float> lse;
};

// The batch's K/V in pages of kPage tokens (NHD), in a random order of the pool's pages.
struct Pages {
  std::vector<std::int32_t> indptr{0}, indices, last_page_len;
  std::vector<std::uint16_t> k, v;
  std::int32_t num_pages = 0;
  Pages(std::mt19937_64& rng, const std::vector<const Request*>& batch) {
    for (const Request* r : batch) {
      const int pages = (r->kv + kPage - 1) / kPage;
      indptr.push_back(indptr.back() + pages);
      last_page_len.push_back(pages == 0 ? 0 : r->kv - (pages - 1) * kPage);
    }
    num_pages = indptr.back() + 1;
    std::vector<std::int32_t> perm(num_pages);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    indices.assign(perm.begin(), perm.begin() + indptr.back());
    const std::size_t token = std::size_t(kKvHeads) * kDim, page = token * kPage;
    k.assign(num_pages * page, 0xffff);  // NaN: a read outside a request shows in its bytes
    v.assign(num_pages * page, 0xffff);
    for (std::size_t i = 0; i < batch.size(); ++i)
      for (int t = 0; t < batch[i]->kv; ++t) {
        const std::size_t at = std::size_t(indices[indptr[i] + t / kPage]) * page + std::size_t(t % kPage) * token;
        std::copy_n(&batch[i]->k[t * token], token, &k[at]);
        std::copy_n(&batch[i]->v[t * token], token, &v[at]);
      }
  }
};

int longest(const std::vector<const Request*>& batch) {
  int most = 1;
  for (const Request* r : batch) most = std::max(most, r->kv);
  return most;
}

// Splits downloaded rows [total][heads][...] back into the requests' outputs.
std::vector<Output> per_request(const std::vector<const Request*>& batch, const std::vector<std::uint16_t>& o,
                                const std::vector<float>& lse) {
  std::vector<Output> out;
  std::size_t row = 0;
  for (const Request* r : batch) {
    const std::size_t rows = std::size_t(r->qo);
    out.push_back({{o.begin() + row * kHeads * kDim, o.begin() + (row + rows) * kHeads * kDim},
                   {lse.begin() + row * kHeads, lse.begin() + (row + rows) * kHeads}});
    row += rows;
  }
  return out;
}

// Whether the package holds the variant `Op` needs for `config` (a WARN names it when not).
template <typename Op, typename Config>
bool held(const Config& config) {
  try {
    package().find(Op::variant_key(config));
    return true;
  } catch (const aotinfer::Error&) {
    WARN("skipped, not in the package: " << Op::variant_key(config).uri());
    return false;
  }
}

// ---- prefill -------------------------------------------------------------------------------

aotinfer::BatchPrefillConfig prefill_config(aotinfer::KvStorage storage, aotinfer::MaskMode mask, KvSplit split,
                                           std::int32_t window_left = -1) {
  aotinfer::BatchPrefillConfig c;
  c.dtype_q = c.dtype_kv = c.dtype_o = kType;
  c.head_dim = kDim, c.num_qo_heads = kHeads, c.num_kv_heads = kKvHeads, c.page_size = kPage;
  c.kv_storage = storage, c.mask = mask, c.kv_split = split, c.window_left = window_left;
  return c;
}

// Runs the batch, in CUDA-graph mode with room to spare when `graph` (the grids are padded).
std::vector<Output> run_prefill(std::mt19937_64& rng, aotinfer::BatchPrefillConfig c,
                                const std::vector<const Request*>& batch, bool graph) {
  const std::int32_t n = std::int32_t(batch.size());
  std::vector<std::int32_t> qo_indptr{0}, kv_indptr{0};
  std::vector<std::uint16_t> q, k, v;
  for (const Request* r : batch) {
    qo_indptr.push_back(qo_indptr.back() + r->qo);
    kv_indptr.push_back(kv_indptr.back() + r->kv);
    q.insert(q.end(), r->q.begin(), r->q.end());
    k.insert(k.end(), r->k.begin(), r->k.end());
    v.insert(v.end(), r->v.begin(), r->v.end());
  }
  const std::int64_t total_q = qo_indptr.back();
  if (graph) {
    c.cuda_graph = true;
    c.max_batch = n + 3;  // room beyond the batch: the grid is padded
    c.max_total_q = total_q + 100;
    c.max_kv_len = longest(batch) + 50;
  }
  aotinfer::BatchPrefill prefill(package(), c);
  Workspace ws(prefill.workspace_sizes(std::max<std::int64_t>(total_q, 1), n, longest(batch)));
  const Pages pages(rng, batch);
  const bool paged = c.kv_storage == aotinfer::KvStorage::paged;
  k.resize(k.size() + 3 * kKvHeads * kDim, 0xffff);  // NaN rows past the batch's
  v.resize(v.size() + 3 * kKvHeads * kDim, 0xffff);
  auto dq = on_device(q), dk = on_device(paged ? pages.k : k), dv = on_device(paged ? pages.v : v);
  auto dqo = on_device(qo_indptr), dkv = on_device(paged ? pages.indptr : kv_indptr);
  auto dind = on_device(pages.indices), dlast = on_device(pages.last_page_len);
  DeviceBuffer<std::uint16_t> o(std::max<std::int64_t>(total_q, 1) * kHeads * kDim);
  DeviceBuffer<float> lse(std::max<std::int64_t>(total_q, 1) * kHeads);
  if (paged) prefill.plan_paged(qo_indptr, pages.indptr, pages.last_page_len, pages.indices, pages.num_pages, ws.ws, nullptr);
  else prefill.plan_ragged(qo_indptr, kv_indptr, ws.ws, nullptr);
  aotinfer::PrefillRunArgs a;
  a.batch = n, a.total_q = total_q, a.q = dq.ptr, a.qo_indptr = dqo.ptr, a.k = dk.ptr, a.v = dv.ptr;
  a.kv_indptr = dkv.ptr, a.kv_indices = dind.ptr, a.kv_last_page_len = dlast.ptr, a.o = o.ptr, a.lse = lse.ptr;
  o.poison(), lse.poison();
  prefill.run(a, nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  return per_request(batch, o.download(), lse.download());
}

// `count` requests: prompts, chunks of long prompts, decode-like rows, a few with no keys.
std::vector<Request> prefill_pool(std::mt19937_64& rng, bool causal, int count) {
  std::vector<Request> pool;
  for (int i = 0; i < count; ++i) {
    const int kind = uniform(rng, 0, 3);
    const int qo = kind == 0 ? 1 : kind == 1 ? uniform(rng, 1, 40) : uniform(rng, 40, 400);
    const int kv = kind == 3 && causal ? uniform(rng, 0, qo)  // more queries than keys: the first see none
                                       : (causal ? qo : 0) + uniform(rng, 0, kind == 0 ? 9000 : 3000);
    pool.push_back(random_request(rng, qo, kv));
  }
  return pool;
}

// Where two outputs differ, for a failure's message: the first differing o element and lse entry
// (row, head) and the largest differences.
std::string difference(const Output& a, const Output& b) {
  if (a.o.size() != b.o.size() || a.lse.size() != b.lse.size()) return "different sizes";
  std::ostringstream s;
  double o_max = 0, lse_max = 0;
  std::ptrdiff_t first_o = -1, first_lse = -1;
  for (std::size_t i = 0; i < a.o.size(); ++i)
    if (a.o[i] != b.o[i]) {
      if (first_o < 0) first_o = std::ptrdiff_t(i);
      o_max = std::max(o_max, std::abs(from_bits(a.o[i], kType) - from_bits(b.o[i], kType)));
    }
  for (std::size_t i = 0; i < a.lse.size(); ++i)
    if (std::memcmp(&a.lse[i], &b.lse[i], sizeof(float)) != 0) {
      if (first_lse < 0) first_lse = std::ptrdiff_t(i);
      lse_max = std::max(lse_max, double(std::abs(a.lse[i] - b.lse[i])));
    }
  const std::ptrdiff_t row = kHeads * kDim;
  s.precision(9);
  if (first_lse >= 0) s << "lse " << a.lse[first_lse] << " vs " << b.lse[first_lse] << "; ";
  s << "o: first at row " << (first_o < 0 ? -1 : first_o / row) << " head " << (first_o < 0 ? -1 : first_o % row / kDim)
    << ", max |diff| " << o_max << "; lse: first at row " << (first_lse < 0 ? -1 : first_lse / kHeads) << " head "
    << (first_lse < 0 ? -1 : first_lse % kHeads) << ", max |diff| " << lse_max;
  return s.str();
}

bool same_bytes(const Output& a, const Output& b) {
  const bool same = a.o == b.o && a.lse.size() == b.lse.size() &&
                    std::memcmp(a.lse.data(), b.lse.data(), a.lse.size() * sizeof(float)) == 0;
  if (!same) UNSCOPED_INFO(difference(a, b));
  return same;
}

KvSplit random_split(std::mt19937_64& rng) {
  if (uniform(rng, 0, 2) == 0) return {KvSplit::Mode::none, 0};
  return {KvSplit::Mode::fixed, pick<int>(rng, {128, 256, 1000, 2048, 4096})};
}

std::string describe(const KvSplit& s, aotinfer::KvStorage storage, aotinfer::MaskMode mask, std::int32_t window_left = -1) {
  std::ostringstream out;
  out << (storage == aotinfer::KvStorage::paged ? "paged" : "ragged") << ", "
      << (mask == aotinfer::MaskMode::causal ? "causal" : "no mask") << ", kv_split " << aotinfer::kv_split_name(s.mode)
      << " " << s.tokens << ", window_left " << window_left;
  return out.str();
}

// ---- decode --------------------------------------------------------------------------------

std::vector<Output> run_decode(std::mt19937_64& rng, KvSplit split, std::int32_t window_left, const std::vector<const Request*>& batch,
                               bool graph) {
  aotinfer::BatchDecodeConfig c;
  c.dtype_q = c.dtype_kv = c.dtype_o = kType;
  c.head_dim = kDim, c.num_qo_heads = kHeads, c.num_kv_heads = kKvHeads, c.page_size = kPage, c.kv_split = split;
  c.window_left = window_left;
  const std::int32_t n = std::int32_t(batch.size());
  if (graph) c.cuda_graph = true, c.max_batch = n + 5, c.max_kv_len = longest(batch) + 50;
  aotinfer::BatchDecode decode(package(), c);
  Workspace ws(decode.workspace_sizes(n, longest(batch)));
  const Pages pages(rng, batch);
  std::vector<std::uint16_t> q;
  for (const Request* r : batch) q.insert(q.end(), r->q.begin(), r->q.end());
  auto dq = on_device(q), dk = on_device(pages.k), dv = on_device(pages.v);
  auto dind = on_device(pages.indptr), dindices = on_device(pages.indices), dlast = on_device(pages.last_page_len);
  DeviceBuffer<std::uint16_t> o(std::size_t(n) * kHeads * kDim);
  DeviceBuffer<float> lse(std::size_t(n) * kHeads);
  decode.plan(pages.indptr, pages.last_page_len, pages.indices, pages.num_pages, ws.ws, nullptr);
  aotinfer::DecodeRunArgs a;
  a.batch = n, a.q = dq.ptr, a.k_pages = dk.ptr, a.v_pages = dv.ptr, a.kv_indptr = dind.ptr;
  a.kv_indices = dindices.ptr, a.kv_last_page_len = dlast.ptr, a.o = o.ptr, a.lse = lse.ptr;
  o.poison(), lse.poison();
  decode.run(a, nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  return per_request(batch, o.download(), lse.download());
}

// A random batch of `size` distinct pool entries that holds entry `must`, in random order.
std::vector<std::size_t> random_batch(std::mt19937_64& rng, std::size_t pool, std::size_t must, std::size_t size) {
  std::vector<std::size_t> others;
  for (std::size_t i = 0; i < pool; ++i)
    if (i != must) others.push_back(i);
  std::shuffle(others.begin(), others.end(), rng);
  others.resize(size - 1);
  others.push_back(must);
  std::shuffle(others.begin(), others.end(), rng);
  return others;
}

}  // namespace

TEST_CASE("batch-invariant prefill: a request's bytes do not depend on its batch, its order or CUDA-graph mode", "[gpu]") {
  SEEDED_RNG(rng);
  for (auto storage : {aotinfer::KvStorage::paged, aotinfer::KvStorage::ragged})
    for (auto mask : {aotinfer::MaskMode::causal, aotinfer::MaskMode::none}) {
      const KvSplit split = random_split(rng);
      const std::int32_t window_left = uniform(rng, 0, 1) ? random_window_left(rng) : -1;
      INFO(describe(split, storage, mask, window_left));
      const auto config = prefill_config(storage, mask, split, window_left);
      if (!held<aotinfer::BatchPrefill>(config)) continue;
      const std::vector<Request> pool = prefill_pool(rng, mask == aotinfer::MaskMode::causal, 12);
      std::vector<Output> alone;
      for (const Request& r : pool) alone.push_back(run_prefill(rng, config, {&r}, false)[0]);
      for (int trial = 0; trial < 6; ++trial) {
        const std::size_t probe = uniform<std::size_t>(rng, 0, pool.size() - 1);
        const auto members = random_batch(rng, pool.size(), probe, uniform<std::size_t>(rng, 1, pool.size()));
        std::vector<const Request*> batch;
        for (std::size_t m : members) batch.push_back(&pool[m]);
        const bool graph = trial % 3 == 2;
        const std::vector<Output> out = run_prefill(rng, config, batch, graph);
        for (std::size_t j = 0; j < members.size(); ++j) {
          INFO("trial " << trial << (graph ? " (CUDA graph)" : "") << ": request " << members[j] << " (qo "
                        << pool[members[j]].qo << ", kv " << pool[members[j]].kv << ") in a batch of " << members.size());
          CHECK(same_bytes(out[j], alone[members[j]]));
        }
      }
    }
}

// (No window here: under one a query tile's keys start at its first token's window, so a chunk
// that starts inside a one-pass tile walks its keys from another key, in other blocks, and even
// o's bytes may differ without a split.)
TEST_CASE("batch-invariant causal prefill: chunked prefill gives the bytes of one pass", "[gpu]") {
  SEEDED_RNG(rng);
  for (auto storage : {aotinfer::KvStorage::paged, aotinfer::KvStorage::ragged}) {
    const KvSplit split = random_split(rng);
    INFO(describe(split, storage, aotinfer::MaskMode::causal));
    const auto config = prefill_config(storage, aotinfer::MaskMode::causal, split);
    if (!held<aotinfer::BatchPrefill>(config)) continue;
    const std::vector<Request> others = prefill_pool(rng, true, 6);
    const int qo = uniform(rng, 300, 900), prefix = uniform(rng, 0, 3000);
    const Request whole = random_request(rng, qo, prefix + qo);
    const Output one_pass = run_prefill(rng, config, {&whole}, false)[0];
    for (int trial = 0; trial < 3; ++trial) {
      // Random chunk edges; chunk [a, b) holds queries a..b-1 over the first prefix + b keys.
      int a = 0;
      while (a < qo) {
        // Trial 0 cuts at whole query tiles (128 packed rows: 32 tokens), the others anywhere.
        const int b = std::min(qo, a + (trial == 0 ? 32 * uniform(rng, 1, 8) : uniform(rng, 1, 400)));
        Request chunk = whole;
        chunk.qo = b - a, chunk.kv = prefix + b;
        const std::size_t q_row = std::size_t(kHeads) * kDim, kv_row = std::size_t(kKvHeads) * kDim;
        chunk.q.assign(whole.q.begin() + a * q_row, whole.q.begin() + b * q_row);
        chunk.k.resize(chunk.kv * kv_row), chunk.v.resize(chunk.kv * kv_row);
        std::vector<const Request*> batch{&chunk};
        for (const Request& r : others)
          if (uniform(rng, 0, 1)) batch.push_back(&r);
        std::shuffle(batch.begin(), batch.end(), rng);
        const std::size_t at = std::find(batch.begin(), batch.end(), &chunk) - batch.begin();
        const Output got = run_prefill(rng, config, batch, false)[at];
        Output want{{one_pass.o.begin() + a * q_row, one_pass.o.begin() + b * q_row},
                    {one_pass.lse.begin() + std::size_t(a) * kHeads, one_pass.lse.begin() + std::size_t(b) * kHeads}};
        INFO("trial " << trial << ": queries " << a << ".." << b << " of " << qo << " after " << prefix << " keys, in a batch of "
                      << batch.size());
        // Chunks that start at a query tile's edge (128 packed rows: 128 / group tokens) give the
        // same bytes. Elsewhere a row's tile-mates change, and the LSE may differ in its last bit
        // (measured, cause not found; docs/ARCHITECTURE.md): o stays the same bytes without a
        // split, and where split states are merged with those LSEs it was seen up to 2.5 bf16
        // steps apart with 128-key chunks: bounded here at 4 steps of the row's largest value
        // (2^-7 of it; an element near 0 in a row of larger ones has a far smaller step of its
        // own, which a merge's rounding of the row does not keep).
        if (a % (128 / kGroup) == 0) {
          CHECK(same_bytes(got, want));
        } else if (split.mode == KvSplit::Mode::none) {
          CHECK(same_bytes({got.o, {}}, {want.o, {}}));
        } else {
          double worst = 0;  // in units of the bf16 step of the row's largest value
          for (std::size_t row = 0; row < got.o.size() / kDim; ++row) {
            double largest = 0;
            for (std::size_t d = 0; d < kDim; ++d)
              largest = std::max({largest, std::abs(from_bits(got.o[row * kDim + d], kType)),
                                  std::abs(from_bits(want.o[row * kDim + d], kType))});
            for (std::size_t d = 0; d < kDim; ++d) {
              const double x = from_bits(got.o[row * kDim + d], kType), y = from_bits(want.o[row * kDim + d], kType);
              worst = std::max(worst, std::abs(x - y) / std::max(std::ldexp(largest, -7), 1e-30));
            }
          }
          INFO("largest o difference: " << worst << " bf16 steps");
          CHECK(worst <= 4.0);
        }
        a = b;
      }
    }
  }
}

TEST_CASE("batch-invariant decode: a request's bytes do not depend on its batch, its order or CUDA-graph mode", "[gpu]") {
  SEEDED_RNG(rng);
  for (int round = 0; round < 3; ++round) {
    const KvSplit split = round == 0 ? KvSplit{KvSplit::Mode::none, 0} : random_split(rng);
    const std::int32_t window_left = round == 2 ? random_window_left(rng) : -1;  // the last round under a window
    INFO("kv_split " << aotinfer::kv_split_name(split.mode) << " " << split.tokens << ", window_left " << window_left);
    std::vector<Request> pool;
    for (int i = 0; i < 16; ++i) pool.push_back(random_request(rng, 1, pick<int>(rng, {0, 1, 17, 300, 2048, 5000, 20000})));
    std::vector<Output> alone;
    for (const Request& r : pool) alone.push_back(run_decode(rng, split, window_left, {&r}, false)[0]);
    for (int trial = 0; trial < 6; ++trial) {
      const std::size_t probe = uniform<std::size_t>(rng, 0, pool.size() - 1);
      const auto members = random_batch(rng, pool.size(), probe, uniform<std::size_t>(rng, 1, pool.size()));
      std::vector<const Request*> batch;
      for (std::size_t m : members) batch.push_back(&pool[m]);
      const bool graph = trial % 2 == 1;
      const std::vector<Output> out = run_decode(rng, split, window_left, batch, graph);
      for (std::size_t j = 0; j < members.size(); ++j) {
        INFO("trial " << trial << (graph ? " (CUDA graph)" : "") << ": request " << members[j] << " (kv " << pool[members[j]].kv
                      << ") in a batch of " << members.size());
        CHECK(same_bytes(out[j], alone[members[j]]));
      }
    }
  }
}
