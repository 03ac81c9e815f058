// batch_mla_decode on the GPU through its front-end (aotinfer::BatchMlaDecode), from the package
// under test, against the fp64 CPU reference (tests/reference/mla_reference.hpp) on freshly drawn
// shapes and values: batch 1-256, lengths 0-64k, page sizes 1-128 (those the Hopper kernel copies
// by TMA, 8/16/32/64/128, and others it copies row by row), 1-128 heads, 1-4 query
// tokens, split and unsplit plans, CUDA-graph replay, 16-bit caches and e4m3 caches with random
// per-tensor scales (the reference sees the dequantised values). The seed is printed with every failure; AOTINFER_TEST_SEED
// replays it. The cache is a random permutation of physical pages; spare pages, unwritten slots
// and the outputs start as NaN bytes (0xff), so a read past a request or a row left unwritten
// fails the comparison.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>
#include <set>
#include <thread>

#include "aotinfer/batch_mla_decode.hpp"
#include "catch.hpp"
#include "gpu_test_util.hpp"
#include "random_values.hpp"
#include "reference/mla_reference.hpp"

using namespace gpu_test;
using aotinfer::BatchMlaDecode;
using aotinfer::BatchMlaDecodeConfig;
using aotinfer::DType;
using aotinfer::ErrorCode;
namespace ref = aotinfer::reference;

namespace {

std::optional<BatchMlaDecode> make_mla(const BatchMlaDecodeConfig& c) {
  try {
    return BatchMlaDecode(package(), c);
  } catch (const aotinfer::Error& e) {
    if (e.code() != ErrorCode::not_found) throw;
    static std::set<std::string> warned;
    const std::string name = BatchMlaDecode::variant_key(c).uri();
    if (warned.insert(name).second) WARN("skipped, not in the package: " << name << " or merge_state head_dim 512");
    return std::nullopt;
  }
}

// DeepSeek-V3's: 1 / sqrt(qk_nope_head_dim + qk_rope_head_dim).
const double kSmScale = 1.0 / std::sqrt(192.0);

struct Shape {
  int heads = 16, q_len = 1, page_size = 64;
  std::vector<int> kv_lens;
};

// The queries' (and output's) type and the cache's.
struct Types {
  DType q, kv;
};
const std::vector<Types> kTypes = {{DType::bf16, DType::bf16}, {DType::f16, DType::f16}, {DType::bf16, DType::e4m3},
                                   {DType::f16, DType::e4m3}};

BatchMlaDecodeConfig config_for(Types t) {
  BatchMlaDecodeConfig c;
  c.dtype = t.q, c.dtype_kv = t.kv;
  return c;
}

// 16-bit values in [-1, 1], as stored, and their fp64 values.
struct Values {
  std::vector<std::uint16_t> bits;
  std::vector<double> value;
  Values(std::size_t n, DType t, std::mt19937_64& rng) : bits(n), value(n) {
    std::uniform_real_distribution<double> u(-1.0, 1.0);
    for (std::size_t i = 0; i < n; ++i) bits[i] = to_bits(u(rng), t), value[i] = from_bits(bits[i], t);
  }
};

struct Outcome {
  bool split = false;
};

// One shape's data on the host: the cache (written slots random, spare pages and unwritten slots
// NaN bytes; fp8 with random scales), the queries, and the fp64 reference's o and lse.
struct Problem {
  int batch = 0, q_len = 1, heads = 16, num_pages = 0;
  std::size_t rows = 0;  // batch * q_len * heads
  ref::MlaCache cache;
  std::vector<std::uint8_t> ckv_bytes, kpe_bytes;
  float ckv_scale = 1, kpe_scale = 1;
  double range = 1;  // stored values drawn from [-range, range]
  std::optional<Values> q_nope, q_pe;
  std::vector<double> want, want_lse;
};

// An fp8 cache's stored range and scales are drawn unless given (> 0), together: scales drawn
// for one range put another's values far from [-1, 1].
Problem make_problem(Types types, const Shape& sh, std::mt19937_64& rng, float ckv_scale = 0, float kpe_scale = 0,
                     double fp8_range = 0) {
  const DType dtype = types.q;
  Problem p;
  p.batch = int(sh.kv_lens.size()), p.heads = sh.heads, p.q_len = sh.q_len;
  const int page = sh.page_size;
  ref::MlaCache& cache = p.cache;
  cache.page_size = page;
  cache.indptr.assign(1, 0);
  for (int L : sh.kv_lens) {
    const int pages = (L + page - 1) / page;
    cache.indptr.push_back(cache.indptr.back() + pages);
    cache.last_page_len.push_back(pages == 0 ? 0 : L - (pages - 1) * page);
  }
  for (int b = 0; b < p.batch; ++b)
    if (cache.last_page_len[b] == 0) cache.last_page_len[b] = 1;  // unused: no pages (kv_len 0)
  const int used = cache.indptr.back(), spare = std::uniform_int_distribution<int>(0, 3)(rng);
  p.num_pages = used + spare;
  std::vector<std::int32_t> physical(p.num_pages);
  std::iota(physical.begin(), physical.end(), 0);
  std::shuffle(physical.begin(), physical.end(), rng);
  cache.indices.assign(physical.begin(), physical.begin() + used);

  const std::size_t slots = std::size_t(p.num_pages) * page, size = aotinfer::dtype_size(types.kv);
  p.ckv_bytes.assign(slots * ref::kMlaCkv * size, 0xff), p.kpe_bytes.assign(slots * ref::kMlaKpe * size, 0xff);
  cache.ckv.assign(slots * ref::kMlaCkv, 0.0), cache.kpe.assign(slots * ref::kMlaKpe, 0.0);
  // Stored values: uniform in [-1, 1] (16-bit); e4m3 in [-16, 16] (whose steps then run from
  // subnormals to 1) or, half the time, over its whole range [-448, 448], with real values
  // scale * stored, the scales putting them near [-1, 1].
  const double range = p.range = !is_fp8(types.kv)     ? 1.0
                                 : fp8_range > 0         ? fp8_range
                                 : std::bernoulli_distribution(0.5)(rng) ? 448.0
                                                                         : 16.0;
  if (is_fp8(types.kv)) {
    std::uniform_real_distribution<double> scale(0.25 / range, 4.0 / range);
    p.ckv_scale = ckv_scale > 0 ? ckv_scale : float(scale(rng));
    p.kpe_scale = kpe_scale > 0 ? kpe_scale : float(scale(rng));
  }
  std::uniform_real_distribution<double> u(-range, range);
  auto store = [&](std::vector<std::uint8_t>& bytes, std::vector<double>& real, std::size_t at, float scale) {
    encode(u(rng), types.kv, &bytes[at * size]);
    real[at] = decode_element(&bytes[at * size], types.kv) * scale;
  };
  for (int b = 0; b < p.batch; ++b)
    for (int j = 0; j < sh.kv_lens[b]; ++j) {
      const std::size_t row = cache.row(b, j);
      for (int d = 0; d < ref::kMlaCkv; ++d) store(p.ckv_bytes, cache.ckv, row * ref::kMlaCkv + d, p.ckv_scale);
      for (int d = 0; d < ref::kMlaKpe; ++d) store(p.kpe_bytes, cache.kpe, row * ref::kMlaKpe + d, p.kpe_scale);
    }
  p.rows = std::size_t(p.batch) * p.q_len * p.heads;
  p.q_nope.emplace(p.rows * ref::kMlaCkv, dtype, rng), p.q_pe.emplace(p.rows * ref::kMlaKpe, dtype, rng);

  p.want.assign(p.rows * ref::kMlaCkv, 0.0), p.want_lse.assign(p.rows, 0.0);
  std::vector<std::thread> threads;
  const int n = int(std::max(1u, std::thread::hardware_concurrency()));
  for (int w = 0; w < n; ++w)
    threads.emplace_back([&, w] {
      for (int b = w; b < p.batch; b += n)
        ref::mla_decode_request(p.cache, b, p.q_len, p.heads, p.q_nope->value, p.q_pe->value, kSmScale, p.want, p.want_lse);
    });
  for (auto& t : threads) t.join();
  return p;
}

// o (the problem's rows of it) and lse against the reference.
void check(const Problem& p, DType dtype, const std::vector<std::uint16_t>& o_bits, const std::vector<float>& lse) {
  std::vector<double> got(p.rows * ref::kMlaCkv);
  std::int64_t non_finite = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    got[i] = from_bits(o_bits[i], dtype);
    non_finite += !std::isfinite(got[i]);
  }
  REQUIRE(non_finite == 0);
  const double err = relative_error(got, p.want);
  INFO("stored values in +-" << p.range << ", ckv_scale " << p.ckv_scale << ", kpe_scale " << p.kpe_scale);
  INFO("o relative error " << err);
  REQUIRE(err < tolerance(dtype));
  for (std::size_t r = 0; r < p.rows; ++r) {
    if (std::isinf(p.want_lse[r])) {
      INFO("row " << r << " has no keys: lse " << lse[r]);
      REQUIRE((std::isinf(lse[r]) && lse[r] < 0));
    } else {
      INFO("row " << r << ": lse " << lse[r] << ", reference " << p.want_lse[r]);
      REQUIRE(std::abs(lse[r] - p.want_lse[r]) < 2e-3 * std::max(1.0, std::abs(p.want_lse[r])));
    }
  }
}

// Plans and runs one shape; compares o and lse with the reference.
Outcome run_case(BatchMlaDecode& mla, Types types, const Shape& sh, std::mt19937_64& rng) {
  INFO("batch " << sh.kv_lens.size() << ", heads " << sh.heads << ", q_len " << sh.q_len << ", page " << sh.page_size
                << ", longest " << *std::max_element(sh.kv_lens.begin(), sh.kv_lens.end()));
  const Problem p = make_problem(types, sh, rng);
  INFO("ckv_scale " << p.ckv_scale << ", kpe_scale " << p.kpe_scale);
  auto d_ckv = on_device(p.ckv_bytes), d_kpe = on_device(p.kpe_bytes);
  auto d_qn = on_device(p.q_nope->bits), d_qp = on_device(p.q_pe->bits);
  auto d_indices = on_device(p.cache.indices);
  DeviceBuffer<std::uint16_t> d_o(p.rows * ref::kMlaCkv);
  DeviceBuffer<float> d_lse(p.rows);
  d_o.poison(), d_lse.poison();
  Workspace ws(mla.workspace_sizes(std::max(p.batch, 1), p.q_len));
  mla.plan(p.cache.indptr, p.cache.last_page_len, p.cache.indices, p.num_pages, p.q_len, ws.ws, nullptr);
  aotinfer::MlaDecodeRunArgs a;
  a.batch = p.batch;
  a.q_nope = d_qn.ptr, a.q_pe = d_qp.ptr;
  a.ckv = d_ckv.ptr, a.kpe = d_kpe.ptr;
  a.kv_indices = d_indices.ptr;
  a.o = d_o.ptr, a.lse = d_lse.ptr;
  a.sm_scale = float(kSmScale);
  a.ckv_scale = p.ckv_scale, a.kpe_scale = p.kpe_scale;
  mla.run(a, nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  check(p, types.q, d_o.download(), d_lse.download());
  return {mla.work_plan().split};
}

// Key counts: 0 now and then, else at least q_len; a few long ones.
std::vector<int> draw_lengths(std::mt19937_64& rng, int batch, int q_len, int longest) {
  std::vector<int> out(batch);
  for (int& L : out) {
    const int kind = std::uniform_int_distribution<int>(0, 9)(rng);
    L = kind == 0 ? 0 : std::uniform_int_distribution<int>(q_len, kind == 9 ? longest : std::max(q_len, longest / 8))(rng);
  }
  return out;
}

// Page sizes whose stages the Hopper kernel copies by TMA (boxes of min(page, 64) keys: 8, 16, 32,
// 64 and 128), and ones it copies row by row (1, 48).
int draw_page_size(std::mt19937_64& rng) {
  const int sizes[] = {1, 8, 16, 32, 48, 64, 128};
  return sizes[std::uniform_int_distribution<int>(0, 6)(rng)];
}

}  // namespace

TEST_CASE("batch_mla_decode matches the fp64 reference on random shapes", "[gpu][mla]") {
  SEEDED_RNG(rng);
  int ran = 0;
  bool saw_split = false, saw_unsplit = false;
  for (Types types : kTypes) {
    const int head_choices[] = {16, 32, 64, 128};
    for (int round = 0; round < 10; ++round) {
      Shape sh;
      sh.heads = round % 5 == 4 ? std::uniform_int_distribution<int>(1, 128)(rng) : head_choices[round % 4];
      sh.q_len = std::uniform_int_distribution<int>(1, 4)(rng);
      sh.page_size = draw_page_size(rng);
      // Round 0: one long request (a split plan); round 1: many short ones (unsplit); the rest
      // drawn. The reference's work (rows x keys) stays within a few seconds.
      const int rows = sh.q_len * sh.heads;
      if (round == 0) {
        sh.kv_lens = {std::uniform_int_distribution<int>(2000, 8000)(rng)};
      } else if (round == 1) {
        // As many short requests of one length as a wave of CTAs or more: the planner keeps them
        // whole (it splits a batch this size only when a request is far longer than its share).
        sh.heads = 16, sh.q_len = 1;
        sh.kv_lens.assign(256, std::uniform_int_distribution<int>(1, 64)(rng));
      } else {
        const int batch = std::uniform_int_distribution<int>(1, 64)(rng);
        const int longest = std::max(sh.q_len, int(std::min<std::int64_t>(8192, 3000000 / (std::int64_t(batch) * rows))));
        sh.kv_lens = draw_lengths(rng, batch, sh.q_len, longest);
      }
      BatchMlaDecodeConfig c = config_for(types);
      c.num_heads = sh.heads, c.page_size = sh.page_size;
      auto mla = make_mla(c);
      if (!mla) break;
      INFO(BatchMlaDecode::variant_key(c).uri() << " round " << round);
      const Outcome out = run_case(*mla, types, sh, rng);
      (out.split ? saw_split : saw_unsplit) = true;
      ++ran;
    }
  }
  if (ran == 0) FAIL("the package holds no batch_mla_decode variant (see the WARN lines)");
  CHECK(saw_split);
  CHECK(saw_unsplit);
}

TEST_CASE("batch_mla_decode serves a 64k-token request", "[gpu][mla][long]") {
  SEEDED_RNG(rng);
  for (Types types : {Types{DType::bf16, DType::bf16}, Types{DType::bf16, DType::e4m3}}) {
    BatchMlaDecodeConfig c = config_for(types);
    c.num_heads = 16, c.page_size = 64;
    auto mla = make_mla(c);
    if (!mla) FAIL("the package lacks " << BatchMlaDecode::variant_key(c).uri());
    Shape sh;
    sh.heads = 16, sh.q_len = 2, sh.page_size = 64, sh.kv_lens = {65536};
    CHECK(run_case(*mla, types, sh, rng).split);
  }
}

// CUDA-graph mode: one run captured after the first plan replays every later plan of up to
// max_batch requests (split or not, with fewer requests, with empty ones), its data written into
// the same buffers and its page ids into the same kv_indices.
namespace {

void graph_replays_later_plans(Types types, std::mt19937_64& rng) {
  BatchMlaDecodeConfig c = config_for(types);
  c.cuda_graph = true, c.max_batch = 24;
  c.q_len = std::uniform_int_distribution<int>(1, 4)(rng);
  c.num_heads = std::vector<int>{16, 32, 128}[std::uniform_int_distribution<int>(0, 2)(rng)];
  c.page_size = draw_page_size(rng);
  INFO(BatchMlaDecode::variant_key(c).uri() << ", heads " << c.num_heads << ", q_len " << c.q_len << ", page " << c.page_size);
  auto mla = make_mla(c);
  if (!mla) FAIL("the package lacks " << BatchMlaDecode::variant_key(c).uri());
  constexpr int kLongest = 6000;
  const int max_pages = c.max_batch * ((kLongest + c.page_size - 1) / c.page_size) + 3;
  const std::size_t max_rows = std::size_t(c.max_batch) * c.q_len * c.num_heads;
  const std::size_t kv_size = aotinfer::dtype_size(types.kv);
  DeviceBuffer<std::uint8_t> ckv(std::size_t(max_pages) * c.page_size * ref::kMlaCkv * kv_size),
      kpe(std::size_t(max_pages) * c.page_size * ref::kMlaKpe * kv_size);
  DeviceBuffer<std::uint16_t> qn(max_rows * ref::kMlaCkv), qp(max_rows * ref::kMlaKpe), o(max_rows * ref::kMlaCkv);
  DeviceBuffer<float> lse(max_rows);
  DeviceBuffer<std::int32_t> indices(max_pages);
  Workspace ws(mla->workspace_sizes(c.max_batch, c.q_len));
  cudaStream_t stream = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  bool saw_split = false, saw_unsplit = false;
  // The captured run's scales (an fp8 cache's, drawn by the first step with its range): the
  // graph froze them.
  float ckv_scale = 0, kpe_scale = 0;
  double fp8_range = 0;
  for (int step = 0; step < 5; ++step) {
    Shape sh;
    sh.heads = c.num_heads, sh.q_len = c.q_len, sh.page_size = c.page_size;
    // Step 0 (the capture): a few long requests, a split plan; then the full batch, few
    // requests, one, and many short ones.
    const int batch = std::vector<int>{3, c.max_batch, 5, 1, c.max_batch}[step];
    const int longest = step == 4 ? 40 : std::max(c.q_len, int(std::min<std::int64_t>(kLongest, 1500000 / (std::int64_t(batch) * c.q_len * c.num_heads))));
    sh.kv_lens = draw_lengths(rng, batch, c.q_len, longest);
    if (step == 0) sh.kv_lens.assign(batch, longest);
    INFO("step " << step << ": batch " << batch << ", longest " << *std::max_element(sh.kv_lens.begin(), sh.kv_lens.end()));
    const Problem p = make_problem(types, sh, rng, ckv_scale, kpe_scale, fp8_range);
    if (step == 0) ckv_scale = p.ckv_scale, kpe_scale = p.kpe_scale, fp8_range = p.range;
    REQUIRE(p.num_pages <= max_pages);
    ckv.poison(), kpe.poison(), o.poison(), lse.poison();
    CUDA_CHECK(cudaMemcpy(ckv.ptr, p.ckv_bytes.data(), p.ckv_bytes.size(), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(kpe.ptr, p.kpe_bytes.data(), p.kpe_bytes.size(), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(qn.ptr, p.q_nope->bits.data(), p.q_nope->bits.size() * 2, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(qp.ptr, p.q_pe->bits.data(), p.q_pe->bits.size() * 2, cudaMemcpyHostToDevice));
    if (!p.cache.indices.empty())
      CUDA_CHECK(cudaMemcpy(indices.ptr, p.cache.indices.data(), p.cache.indices.size() * 4, cudaMemcpyHostToDevice));
    mla->plan(p.cache.indptr, p.cache.last_page_len, p.cache.indices, p.num_pages, c.q_len, ws.ws, aotinfer::Stream(stream));
    (mla->work_plan().split ? saw_split : saw_unsplit) = true;
    if (step == 0) {
      aotinfer::MlaDecodeRunArgs a;
      a.batch = p.batch;
      a.q_nope = qn.ptr, a.q_pe = qp.ptr, a.ckv = ckv.ptr, a.kpe = kpe.ptr, a.kv_indices = indices.ptr;
      a.o = o.ptr, a.lse = lse.ptr, a.sm_scale = float(kSmScale);
      a.ckv_scale = ckv_scale, a.kpe_scale = kpe_scale;
      CUDA_CHECK(cudaStreamSynchronize(stream));
      CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
      mla->run(a, aotinfer::Stream(stream));
      CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
      CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    }
    CUDA_CHECK(cudaGraphLaunch(exec, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    check(p, types.q, o.download(), lse.download());
  }
  CHECK(saw_split);  // graph plans always split: every item writes states the merge combines
  CHECK_FALSE(saw_unsplit);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

}  // namespace

TEST_CASE("batch_mla_decode in CUDA-graph mode: one captured graph replays later plans", "[gpu][mla]") {
  SEEDED_RNG(rng);
  for (Types types : {Types{DType::bf16, DType::bf16}, Types{DType::bf16, DType::e4m3}}) graph_replays_later_plans(types, rng);
}

// In CUDA-graph mode the config fixes q_len and bounds the batch.
TEST_CASE("batch_mla_decode in CUDA-graph mode refuses another q_len and a larger batch", "[gpu][mla]") {
  BatchMlaDecodeConfig c;
  c.dtype = DType::bf16, c.cuda_graph = true, c.max_batch = 1, c.q_len = 1;
  auto mla = make_mla(c);
  if (!mla) FAIL("the package holds no bf16 batch_mla_decode variant");
  Workspace ws(mla->workspace_sizes(1, 1));
  try {
    mla->plan(std::vector<std::int32_t>{0, 1}, std::vector<std::int32_t>{8}, {}, 0, 2, ws.ws, nullptr);
    FAIL("a plan with another q_len was accepted");
  } catch (const aotinfer::Error& e) {
    CHECK_THAT(e.what(), aotinfer_test::Contains("differs from this CUDA-graph decode's 1"));
  }
  try {
    mla->plan(std::vector<std::int32_t>{0, 1, 2}, std::vector<std::int32_t>{8, 8}, {}, 0, 1, ws.ws, nullptr);
    FAIL("a plan of two requests was accepted");
  } catch (const aotinfer::Error& e) {
    CHECK_THAT(e.what(), aotinfer_test::Contains("exceeds max_batch 1"));
  }
}

TEST_CASE("batch_mla_decode refuses bad plans and runs with their reasons", "[gpu][mla]") {
  BatchMlaDecodeConfig c;
  c.dtype = DType::bf16;
  auto mla = make_mla(c);
  if (!mla) FAIL("the package holds no bf16 batch_mla_decode variant");
  Workspace ws(mla->workspace_sizes(4, 4));
  const std::vector<std::int32_t> indptr = {0, 1, 2}, last = {64, 3}, indices = {0, 1};
  auto refused = [&](auto&& call, const std::string& words) {
    try {
      call();
      FAIL("not refused: " << words);
    } catch (const aotinfer::Error& e) {
      CHECK(e.code() == ErrorCode::invalid_argument);
      CHECK_THAT(e.what(), aotinfer_test::Contains(words));
    }
  };
  refused([&] { mla->plan(indptr, last, indices, 2, 5, ws.ws, nullptr); }, "q_len");
  refused([&] { mla->plan(indptr, last, indices, 2, 4, ws.ws, nullptr); }, "fewer than its 4 new tokens");
  const std::vector<std::int32_t> bad_indices = {0, 7};
  refused([&] { mla->plan(indptr, last, bad_indices, 2, 1, ws.ws, nullptr); }, "is not a page of the pool");
  aotinfer::MlaDecodeRunArgs a;
  refused([&] { mla->run(a, nullptr); }, "plan() first");
  mla->plan(indptr, last, indices, 2, 2, ws.ws, nullptr);
  a.batch = 2;
  refused([&] { mla->run(a, nullptr); }, "must not be null");
  DeviceBuffer<std::uint16_t> buf(2 * 64 * 576);
  DeviceBuffer<std::int32_t> ids(2);
  a.q_nope = a.q_pe = a.ckv = a.kpe = buf.ptr, a.o = buf.ptr, a.kv_indices = ids.ptr;
  refused([&] { mla->run(a, nullptr); }, "sm_scale");
  a.sm_scale = 0.07f, a.ckv_scale = 2;
  refused([&] { mla->run(a, nullptr); }, "ckv_scale must be 1 for a 16-bit cache");
  a.ckv_scale = 1, a.batch = 3;
  refused([&] { mla->run(a, nullptr); }, "plan again");

  // An fp8 cache's scales must be finite and positive.
  c.dtype_kv = DType::e4m3;
  auto fp8 = make_mla(c);
  if (!fp8) FAIL("the package lacks " << BatchMlaDecode::variant_key(c).uri());
  fp8->plan(indptr, last, indices, 2, 2, ws.ws, nullptr);
  a.batch = 2;
  for (float bad : {0.f, -1.f, std::numeric_limits<float>::infinity(), std::nanf("")}) {
    a.kpe_scale = bad;
    refused([&] { fp8->run(a, nullptr); }, "kpe_scale must be finite and > 0");
  }
}
