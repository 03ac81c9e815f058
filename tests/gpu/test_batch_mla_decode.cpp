// batch_mla_decode on the GPU through its front-end (aotinfer::BatchMlaDecode), from the package
// under test, against the fp64 CPU reference (tests/reference/mla_reference.hpp) on freshly drawn
// shapes and values: batch 1-256, lengths 0-64k, page sizes 1/16/64, 1-128 heads, 1-4 query
// tokens, split and unsplit plans. The seed is printed with every failure; AOTINFER_TEST_SEED
// replays it. The cache is a random permutation of physical pages; spare pages, unwritten slots
// and the outputs start as NaN bytes (0xff), so a read past a request or a row left unwritten
// fails the comparison.
#include <algorithm>
#include <numeric>
#include <optional>
#include <set>
#include <thread>

#include "aotinfer/batch_mla_decode.hpp"
#include "catch.hpp"
#include "gpu_test_util.hpp"
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
    if (warned.insert(std::string(aotinfer::dtype_name(c.dtype))).second)
      WARN("skipped, not in the package: batch_mla_decode{dtype=" << aotinfer::dtype_name(c.dtype) << "} or merge_state head_dim 512");
    return std::nullopt;
  }
}

struct Shape {
  int heads = 16, q_len = 1, page_size = 64;
  std::vector<int> kv_lens;
};

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

// Plans and runs one shape; compares o and lse with the reference.
Outcome run_case(BatchMlaDecode& mla, DType dtype, const Shape& sh, std::mt19937_64& rng) {
  const int batch = int(sh.kv_lens.size()), heads = sh.heads, q = sh.q_len, page = sh.page_size;
  INFO("batch " << batch << ", heads " << heads << ", q_len " << q << ", page " << page << ", longest "
                << *std::max_element(sh.kv_lens.begin(), sh.kv_lens.end()));
  ref::MlaCache cache;
  cache.page_size = page;
  cache.indptr.assign(1, 0);
  for (int L : sh.kv_lens) {
    const int pages = (L + page - 1) / page;
    cache.indptr.push_back(cache.indptr.back() + pages);
    cache.last_page_len.push_back(pages == 0 ? 0 : L - (pages - 1) * page);
  }
  for (int b = 0; b < batch; ++b)
    if (cache.last_page_len[b] == 0) cache.last_page_len[b] = 1;  // unused: no pages (kv_len 0)
  const int used = cache.indptr.back(), spare = std::uniform_int_distribution<int>(0, 3)(rng);
  const int num_pages = used + spare;
  std::vector<std::int32_t> physical(num_pages);
  std::iota(physical.begin(), physical.end(), 0);
  std::shuffle(physical.begin(), physical.end(), rng);
  cache.indices.assign(physical.begin(), physical.begin() + used);

  // The cache: written slots random, the rest NaN bytes.
  const std::size_t slots = std::size_t(num_pages) * page;
  std::vector<std::uint16_t> ckv_bits(slots * ref::kMlaCkv, 0xffff), kpe_bits(slots * ref::kMlaKpe, 0xffff);
  cache.ckv.assign(ckv_bits.size(), 0.0), cache.kpe.assign(kpe_bits.size(), 0.0);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  for (int b = 0; b < batch; ++b)
    for (int j = 0; j < sh.kv_lens[b]; ++j) {
      const std::size_t row = cache.row(b, j);
      for (int d = 0; d < ref::kMlaCkv; ++d) {
        const std::size_t at = row * ref::kMlaCkv + d;
        ckv_bits[at] = to_bits(u(rng), dtype), cache.ckv[at] = from_bits(ckv_bits[at], dtype);
      }
      for (int d = 0; d < ref::kMlaKpe; ++d) {
        const std::size_t at = row * ref::kMlaKpe + d;
        kpe_bits[at] = to_bits(u(rng), dtype), cache.kpe[at] = from_bits(kpe_bits[at], dtype);
      }
    }
  const std::size_t rows = std::size_t(batch) * q * heads;
  Values q_nope(rows * ref::kMlaCkv, dtype, rng), q_pe(rows * ref::kMlaKpe, dtype, rng);
  const double sm_scale = 1.0 / std::sqrt(192.0);

  auto d_ckv = on_device(ckv_bits), d_kpe = on_device(kpe_bits);
  auto d_qn = on_device(q_nope.bits), d_qp = on_device(q_pe.bits);
  auto d_indices = on_device(cache.indices);
  DeviceBuffer<std::uint16_t> d_o(rows * ref::kMlaCkv);
  DeviceBuffer<float> d_lse(rows);
  d_o.poison(), d_lse.poison();
  Workspace ws(mla.workspace_sizes(std::max(batch, 1), q));
  mla.plan(cache.indptr, cache.last_page_len, cache.indices, num_pages, q, ws.ws, nullptr);
  aotinfer::MlaDecodeRunArgs a;
  a.batch = batch;
  a.q_nope = d_qn.ptr, a.q_pe = d_qp.ptr;
  a.ckv = d_ckv.ptr, a.kpe = d_kpe.ptr;
  a.kv_indices = d_indices.ptr;
  a.o = d_o.ptr, a.lse = d_lse.ptr;
  a.sm_scale = float(sm_scale);
  mla.run(a, nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<std::uint16_t> o_bits = d_o.download();
  const std::vector<float> lse = d_lse.download();

  std::vector<double> want(rows * ref::kMlaCkv), want_lse(rows);
  {
    std::vector<std::thread> threads;
    const int n = int(std::max(1u, std::thread::hardware_concurrency()));
    for (int w = 0; w < n; ++w)
      threads.emplace_back([&, w] {
        for (int b = w; b < batch; b += n)
          ref::mla_decode_request(cache, b, q, heads, q_nope.value, q_pe.value, sm_scale, want, want_lse);
      });
    for (auto& t : threads) t.join();
  }
  std::vector<double> got(o_bits.size());
  std::int64_t non_finite = 0;
  for (std::size_t i = 0; i < o_bits.size(); ++i) {
    got[i] = from_bits(o_bits[i], dtype);
    non_finite += !std::isfinite(got[i]);
  }
  REQUIRE(non_finite == 0);
  const double err = relative_error(got, want);
  INFO("o relative error " << err);
  REQUIRE(err < tolerance(dtype));
  for (std::size_t r = 0; r < rows; ++r) {
    if (std::isinf(want_lse[r])) {
      INFO("row " << r << " has no keys: lse " << lse[r]);
      REQUIRE((std::isinf(lse[r]) && lse[r] < 0));
    } else {
      INFO("row " << r << ": lse " << lse[r] << ", reference " << want_lse[r]);
      REQUIRE(std::abs(lse[r] - want_lse[r]) < 2e-3 * std::max(1.0, std::abs(want_lse[r])));
    }
  }
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

const std::vector<DType> kDtypes = {DType::bf16, DType::f16};

}  // namespace

TEST_CASE("batch_mla_decode matches the fp64 reference on random shapes", "[gpu][mla]") {
  SEEDED_RNG(rng);
  int ran = 0;
  bool saw_split = false, saw_unsplit = false;
  for (DType dtype : kDtypes) {
    const int head_choices[] = {16, 32, 64, 128};
    for (int round = 0; round < 10; ++round) {
      Shape sh;
      sh.heads = round % 5 == 4 ? std::uniform_int_distribution<int>(1, 128)(rng) : head_choices[round % 4];
      sh.q_len = std::uniform_int_distribution<int>(1, 4)(rng);
      sh.page_size = std::vector<int>{1, 16, 64}[std::uniform_int_distribution<int>(0, 2)(rng)];
      // Round 0: one long request (a split plan); round 1: many short ones (unsplit); the rest
      // drawn. The reference's work (rows x keys) stays within a few seconds.
      const int rows = sh.q_len * sh.heads;
      if (round == 0) {
        sh.kv_lens = {std::uniform_int_distribution<int>(2000, 8000)(rng)};
      } else if (round == 1) {
        sh.heads = 16, sh.q_len = 1;
        sh.kv_lens = draw_lengths(rng, 256, 1, 64);
      } else {
        const int batch = std::uniform_int_distribution<int>(1, 64)(rng);
        const int longest = std::max(sh.q_len, int(std::min<std::int64_t>(8192, 3000000 / (std::int64_t(batch) * rows))));
        sh.kv_lens = draw_lengths(rng, batch, sh.q_len, longest);
      }
      BatchMlaDecodeConfig c;
      c.dtype = dtype, c.num_heads = sh.heads, c.page_size = sh.page_size;
      auto mla = make_mla(c);
      if (!mla) break;
      INFO(aotinfer::dtype_name(dtype) << " round " << round);
      const Outcome out = run_case(*mla, dtype, sh, rng);
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
  BatchMlaDecodeConfig c;
  c.dtype = DType::bf16, c.num_heads = 16, c.page_size = 64;
  auto mla = make_mla(c);
  if (!mla) FAIL("the package holds no bf16 batch_mla_decode variant");
  Shape sh;
  sh.heads = 16, sh.q_len = 2, sh.page_size = 64, sh.kv_lens = {65536};
  CHECK(run_case(*mla, DType::bf16, sh, rng).split);
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
  a.sm_scale = 0.07f, a.batch = 3;
  refused([&] { mla->run(a, nullptr); }, "plan again");
}
