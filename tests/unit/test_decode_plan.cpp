// The decode work partition (runtime/include/aotinfer/decode_plan.hpp), on the CPU: KV lengths
// from the CSR view, split / no split, exact coverage of every request's KV, the chunk-size
// search checked against a brute-force recount, CUDA-graph padding, and the decode_max_work
// bound, on hand-made cases and on random ones (the seed is printed; AOTINFER_TEST_SEED replays).
#include "catch.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "aotinfer/decode_plan.hpp"
#include "aotinfer/error.hpp"
#include "reference/plan_invariants.hpp"
#include "unit/test_util.hpp"

using namespace aotinfer;
using test::invalid_argument_message;
using test::NamesNumber;
using aotinfer_test::Contains;

namespace {

std::uint64_t test_seed() {
  if (const char* s = std::getenv("AOTINFER_TEST_SEED")) return std::strtoull(s, nullptr, 10);
  std::random_device rd;
  return (std::uint64_t(rd()) << 32) | rd();
}

// Work items for a chunk size, counted from scratch: ceil(len / chunk), at least 1 per request.
std::int64_t items_for(const std::vector<std::int32_t>& lens, std::int64_t chunk) {
  std::int64_t items = 0;
  for (std::int32_t len : lens) items += std::max<std::int64_t>(1, (len + chunk - 1) / chunk);
  return items;
}

DecodePlanLimits limits(int num_sms, int ctas_per_sm, int ctas_per_item, int tile_tokens, std::int32_t graph_work = 0) {
  DecodePlanLimits l;
  l.num_sms = num_sms;
  l.ctas_per_sm = ctas_per_sm;
  l.ctas_per_item = ctas_per_item;
  l.tile_tokens = tile_tokens;
  l.graph_work = graph_work;
  return l;
}

std::string describe(const DecodePlanLimits& l) {
  std::ostringstream s;
  s << "limits {num_sms " << l.num_sms << ", ctas_per_sm " << l.ctas_per_sm << ", ctas_per_item " << l.ctas_per_item
    << ", tile_tokens " << l.tile_tokens << ", graph_work " << l.graph_work << ", window_left " << l.window_left << "}";
  return s.str();
}

std::string describe(const std::vector<std::int32_t>& lens) {
  std::ostringstream s;
  s << lens.size() << " requests {";
  for (std::size_t i = 0; i < lens.size() && i < 40; ++i) s << (i ? ", " : "") << lens[i];
  if (lens.size() > 40) s << ", ...";
  s << "}";
  return s.str();
}

// Everything the header promises about a plan of `lens` under `l`; "" when all hold, else the
// first broken promise (tests/reference/plan_invariants.hpp).
std::string plan_problem(const std::vector<std::int32_t>& lens, const DecodePlanLimits& l, const DecodeWorkPlan& p) {
  return aotinfer::reference::decode_plan_problem(lens, l, p);
}

// CSR metadata of requests with the given lengths (pages in order; ids do not matter here).
void make_csr(const std::vector<std::int32_t>& lens, std::int32_t page_size, std::vector<std::int32_t>& indptr,
              std::vector<std::int32_t>& last_page_len) {
  indptr.assign(1, 0);
  last_page_len.clear();
  for (std::int32_t len : lens) {
    const std::int32_t pages = (len + page_size - 1) / page_size;
    indptr.push_back(indptr.back() + pages);
    last_page_len.push_back(pages == 0 ? 0 : len - (pages - 1) * page_size);
  }
}

std::vector<std::int32_t> random_lengths(std::mt19937_64& rng, std::int64_t batch, std::int32_t tile) {
  std::vector<std::int32_t> lens(batch);
  auto uniform = [&](std::int32_t lo, std::int32_t hi) { return std::uniform_int_distribution<std::int32_t>(lo, hi)(rng); };
  switch (uniform(0, 4)) {
    case 0:  // short: within a couple of tiles
      for (auto& len : lens) len = uniform(0, 2 * tile);
      break;
    case 1:  // moderate
      for (auto& len : lens) len = uniform(0, 5000);
      break;
    case 2:  // skewed: one very long request among short ones
      for (auto& len : lens) len = uniform(0, 300);
      lens[uniform(0, std::int32_t(batch - 1))] = uniform(50000, 200000);
      break;
    case 3:  // long, with zeros mixed in
      for (auto& len : lens) len = uniform(0, 3) == 0 ? 0 : uniform(1, 40000);
      break;
    default:  // all empty
      for (auto& len : lens) len = 0;
  }
  return lens;
}

DecodePlanLimits random_limits(std::mt19937_64& rng) {
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const int tiles[] = {1, 8, 16, 32, 64};
  return limits(uniform(1, 132), uniform(1, 8), uniform(1, 32), tiles[uniform(0, 4)]);
}

}  // namespace

TEST_CASE("decode_kv_lengths: full pages plus the last page's tokens, 0 for no pages", "[decode_plan]") {
  CHECK(decode_kv_lengths(std::vector<std::int32_t>{0, 1, 3, 3, 7}, std::vector<std::int32_t>{5, 16, 0, 1}, 16) ==
        std::vector<std::int32_t>{5, 32, 0, 49});
  CHECK(decode_kv_lengths(std::vector<std::int32_t>{0, 4, 4, 5}, std::vector<std::int32_t>{1, 0, 1}, 1) ==
        std::vector<std::int32_t>{4, 0, 1});
  CHECK(decode_kv_lengths(std::vector<std::int32_t>{0, 2}, std::vector<std::int32_t>{64}, 64) == std::vector<std::int32_t>{128});
  CHECK(decode_kv_lengths(std::vector<std::int32_t>{0}, std::vector<std::int32_t>{}, 16).empty());

  const std::uint64_t seed = test_seed();
  INFO("seed " << seed << " (AOTINFER_TEST_SEED replays it)");
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 200; ++trial) {
    const int page_sizes[] = {1, 2, 16, 64, 256};
    const std::int32_t page_size = page_sizes[trial % 5];
    std::vector<std::int32_t> lens(std::uniform_int_distribution<int>(1, 100)(rng));
    for (auto& len : lens) len = std::uniform_int_distribution<std::int32_t>(0, 5000)(rng);
    std::vector<std::int32_t> indptr, last;
    make_csr(lens, page_size, indptr, last);
    INFO("page_size " << page_size << ", " << describe(lens));
    REQUIRE(decode_kv_lengths(indptr, last, page_size) == lens);
  }
}

TEST_CASE("decode_kv_lengths refuses bad CSR metadata, naming the first bad entry", "[decode_plan]") {
  using V = std::vector<std::int32_t>;
  SECTION("indptr not starting at 0") {
    const std::string msg = invalid_argument_message([] { decode_kv_lengths(V{2, 3, 4}, V{1, 1}, 16); });
    CHECK_THAT(msg, Contains("indptr"));
  }
  SECTION("indptr decreasing") {
    // Entry 5 (7) is below entry 4 (8); no value in the arrays is 5.
    const std::string msg = invalid_argument_message([] { decode_kv_lengths(V{0, 2, 4, 6, 8, 7, 9}, V{1, 1, 1, 1, 1, 1}, 16); });
    CHECK_THAT(msg, Contains("indptr") && NamesNumber(5));
  }
  SECTION("last_page_len 0 for a request with pages") {
    const std::string msg = invalid_argument_message([] { decode_kv_lengths(V{0, 1, 2, 3, 4, 5, 6, 7, 8}, V{16, 16, 16, 16, 16, 16, 0, 16}, 16); });
    CHECK_THAT(msg, Contains("last_page_len") && NamesNumber(6));
  }
  SECTION("last_page_len above page_size") {
    const std::string msg = invalid_argument_message([] { decode_kv_lengths(V{0, 1, 2, 3, 4}, V{8, 8, 8, 9}, 8); });
    CHECK_THAT(msg, Contains("last_page_len") && NamesNumber(3));
  }
  SECTION("last_page_len negative") {
    const std::string msg = invalid_argument_message([] { decode_kv_lengths(V{0, 2, 4}, V{1, -1}, 8); });
    CHECK_THAT(msg, Contains("last_page_len") && NamesNumber(1));
  }
  SECTION("array sizes disagree") {
    const std::string msg = invalid_argument_message([] { decode_kv_lengths(V{0, 1, 2, 3}, V{1, 1}, 8); });
    CHECK_THAT(msg, Contains("last_page_len"));
  }
  SECTION("page_size below 1") {
    const std::string msg = invalid_argument_message([] { decode_kv_lengths(V{0, 1}, V{1}, 0); });
    CHECK_THAT(msg, Contains("page_size"));
  }
}

TEST_CASE("decode_wave_items is one wave of CTAs divided by CTAs per item, at least 1", "[decode_plan]") {
  CHECK(decode_wave_items(limits(132, 2, 4, 32)) == 66);
  CHECK(decode_wave_items(limits(10, 3, 4, 32)) == 7);  // 30 / 4, rounded down
  CHECK(decode_wave_items(limits(1, 1, 8, 32)) == 1);
  CHECK(decode_max_work(100, limits(132, 2, 4, 32)) >= 100);
  CHECK(decode_max_work(1, limits(132, 2, 4, 32)) >= 1);
}

TEST_CASE("plan_decode_work refuses unset limits", "[decode_plan]") {
  DecodeWorkPlan plan;
  const std::vector<std::int32_t> lens{10, 20};
  for (const DecodePlanLimits& l : {DecodePlanLimits{}, limits(0, 2, 4, 32), limits(132, 0, 4, 32), limits(132, 2, 0, 32), limits(132, 2, 4, 0)}) {
    INFO(describe(l));
    invalid_argument_message([&] { plan_decode_work(lens, l, plan); });
  }
}

TEST_CASE("plan_decode_work refuses a request longer than the largest int32 tile multiple, in either mode",
          "[decode_plan]") {
  DecodeWorkPlan plan;
  for (const bool graph : {false, true}) {
    DecodePlanLimits l = limits(132, 2, 4, 64);
    if (graph) l.graph_work = decode_max_work(2, l);
    const std::int32_t most = INT32_MAX / 64 * 64;
    INFO(describe(l));
    plan_decode_work(std::vector<std::int32_t>{most, 5}, l, plan);  // the longest served: one chunk at most
    CHECK(plan_problem({most, 5}, l, plan) == "");
    const std::string msg = invalid_argument_message([&] { plan_decode_work(std::vector<std::int32_t>{5, most + 1}, l, plan); });
    CHECK_THAT(msg, Contains("a request has " + std::to_string(most + 1) + " KV tokens; this kernel serves at most " +
                             std::to_string(most)));
  }
}

TEST_CASE("plan_decode_work: a batch that fills a wave runs whole requests, longest first", "[decode_plan]") {
  const DecodePlanLimits l = limits(4, 2, 1, 16);  // wave of 8 items
  REQUIRE(decode_wave_items(l) == 8);
  // 24000 keys: a slot's share is 3000, and no request has more than twice that.
  const std::vector<std::int32_t> lens = {3000, 1000, 5000, 2000, 4000, 6000, 500, 2500, 0};
  DecodeWorkPlan plan;
  plan_decode_work(lens, l, plan);
  CHECK_FALSE(plan.split);
  CHECK(plan.num_work == std::int32_t(lens.size()));
  CHECK(plan.padded_work == plan.num_work);
  CHECK(plan.chunk_tokens == 0);
  CHECK(plan.request == std::vector<std::int32_t>{5, 2, 4, 0, 7, 3, 1, 6, 8});
  CHECK(plan_problem(lens, l, plan) == "");
  const std::vector<std::int32_t> even(20, 3000);
  plan_decode_work(even, l, plan);
  CHECK_FALSE(plan.split);
  CHECK(plan.num_work == 20);
  CHECK(plan_problem(even, l, plan) == "");
}

TEST_CASE("plan_decode_work: a request longer than twice a wave slot's share is cut even when the batch fills a wave",
          "[decode_plan]") {
  const DecodePlanLimits l = limits(4, 2, 1, 16);  // wave of 8 items
  // 108024 keys: a slot's share is 13503, the 100000-key request more than twice it. Left whole,
  // its CTAs would run alone long after the others; in 13504-key chunks (the share, rounded up to
  // the tile) the items even out: 7 short ones and 8 chunks, at most batch + wave.
  const std::vector<std::int32_t> lens = {1000, 2000, 1, 0, 5000, 7, 100000, 16};
  DecodeWorkPlan plan;
  plan_decode_work(lens, l, plan);
  CHECK(plan.split);
  CHECK(plan.chunk_tokens == 13504);
  CHECK(plan.num_work == 15);
  CHECK(plan.num_work <= decode_max_work(std::int32_t(lens.size()), l));
  CHECK(plan.merge_indptr == std::vector<std::int32_t>{0, 1, 2, 3, 4, 5, 6, 14, 15});
  CHECK(plan_problem(lens, l, plan) == "");
}

TEST_CASE("plan_decode_work: small batches of long requests split into tile-multiple chunks filling a wave",
          "[decode_plan]") {
  const DecodePlanLimits l = limits(132, 2, 4, 32);  // wave of 66 items
  const std::vector<std::int32_t> lens{10000, 3000};
  DecodeWorkPlan plan;
  plan_decode_work(lens, l, plan);
  REQUIRE(plan.split);
  CHECK(plan.chunk_tokens % 32 == 0);
  CHECK(plan.num_work <= 66);
  CHECK(plan.num_work > 2);
  // Brute force: the smallest tile multiple whose item count fits 66.
  std::int64_t smallest = 32;
  while (items_for(lens, smallest) > 66) smallest += 32;
  CHECK(plan.chunk_tokens == smallest);
  CHECK(plan.merge_indptr == std::vector<std::int32_t>{0, std::int32_t((10000 + smallest - 1) / smallest), plan.num_work});
  CHECK(plan_problem(lens, l, plan) == "");

  // One long request alone: chunks fill the wave.
  const std::vector<std::int32_t> one{131072};
  plan_decode_work(one, l, plan);
  REQUIRE(plan.split);
  CHECK(plan.num_work <= 66);
  CHECK(plan.num_work >= 60);  // 131072 / 66 rounded up to a tile multiple still gives ~66 chunks
  CHECK(plan_problem(one, l, plan) == "");

  // Zero-length requests keep one (empty) item each, also in a split plan.
  const std::vector<std::int32_t> zeros{0, 50000, 0};
  plan_decode_work(zeros, l, plan);
  REQUIRE(plan.split);
  CHECK(plan.merge_indptr[1] - plan.merge_indptr[0] == 1);
  CHECK(plan.merge_indptr[3] - plan.merge_indptr[2] == 1);
  CHECK(plan.kv_begin[0] == 0);
  CHECK(plan.kv_end[0] == 0);
  CHECK(plan_problem(zeros, l, plan) == "");

  // Zero-length requests in an unsplit plan too.
  const std::vector<std::int32_t> all_zero{0, 0, 0, 0};
  plan_decode_work(all_zero, l, plan);
  CHECK(plan.num_work == 4);
  CHECK(plan_problem(all_zero, l, plan) == "");
}

TEST_CASE("plan_decode_work property: exact coverage, minimal chunks, consistent merge_indptr", "[decode_plan]") {
  const std::uint64_t seed = test_seed();
  INFO("seed " << seed << " (AOTINFER_TEST_SEED replays it)");
  std::mt19937_64 rng(seed);
  DecodeWorkPlan plan;  // reused on purpose: plans must not keep stale entries
  int split = 0, unsplit = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const DecodePlanLimits l = random_limits(rng);
    const std::int32_t wave = decode_wave_items(l);
    // Batches around the wave size, small batches and single requests.
    std::int64_t batch;
    switch (trial % 4) {
      case 0: batch = 1; break;
      case 1: batch = std::uniform_int_distribution<std::int64_t>(1, std::max(1, wave / 4))(rng); break;
      case 2: batch = std::max<std::int64_t>(1, wave + std::uniform_int_distribution<int>(-2, 2)(rng)); break;
      default: batch = std::uniform_int_distribution<std::int64_t>(1, 2 * std::int64_t(wave) + 1)(rng);
    }
    batch = std::min<std::int64_t>(batch, 2000);
    const std::vector<std::int32_t> lens = random_lengths(rng, batch, l.tile_tokens);
    INFO("trial " << trial << ", " << describe(l) << ", " << describe(lens));
    plan_decode_work(lens, l, plan);
    REQUIRE(plan_problem(lens, l, plan) == "");
    (plan.split ? split : unsplit)++;

    // The reused plan equals a fresh one.
    DecodeWorkPlan fresh;
    plan_decode_work(lens, l, fresh);
    REQUIRE(fresh.split == plan.split);
    REQUIRE(fresh.num_work == plan.num_work);
    REQUIRE(fresh.padded_work == plan.padded_work);
    REQUIRE(fresh.chunk_tokens == plan.chunk_tokens);
    REQUIRE(fresh.request == plan.request);
    REQUIRE(fresh.kv_begin == plan.kv_begin);
    REQUIRE(fresh.kv_end == plan.kv_end);
    if (plan.split) REQUIRE(fresh.merge_indptr == plan.merge_indptr);
  }
  CHECK(split > 100);
  CHECK(unsplit > 100);
}

TEST_CASE("plan_decode_work under a sliding window: items cover only the keys the window keeps", "[decode_plan]") {
  const std::uint64_t seed = test_seed();
  INFO("seed " << seed << " (AOTINFER_TEST_SEED replays it)");
  std::mt19937_64 rng(seed);
  DecodeWorkPlan plan;
  int split = 0, clamped = 0;
  for (int trial = 0; trial < 1500; ++trial) {
    DecodePlanLimits l = random_limits(rng);
    l.window_left = trial % 2 ? std::uniform_int_distribution<int>(0, 64)(rng) : std::uniform_int_distribution<int>(0, 8000)(rng);
    const std::int64_t batch = trial % 3 == 0 ? 1 : std::uniform_int_distribution<std::int64_t>(1, 2 * decode_wave_items(l))(rng);
    const std::vector<std::int32_t> lens = random_lengths(rng, std::min<std::int64_t>(batch, 2000), l.tile_tokens);
    if (trial % 7 == 0) l.graph_work = decode_max_work(std::int32_t(lens.size()), l);
    INFO("trial " << trial << ", " << describe(l) << ", " << describe(lens));
    plan_decode_work(lens, l, plan);
    REQUIRE(aotinfer::reference::decode_plan_problem(lens, l, plan) == "");
    split += plan.split;
    for (std::int32_t x = 0; x < plan.num_work; ++x) clamped += plan.kv_begin[x] > 0 && plan.kv_begin[x] == lens[plan.request[x]] - 1 - l.window_left;
  }
  CHECK(split > 100);
  CHECK(clamped > 100);
  // A 100k-key request under a 128-key window at batch 1 reads 129 keys, not 100k.
  DecodePlanLimits l = limits(132, 2, 8, 16);
  l.window_left = 128;
  plan_decode_work(std::vector<std::int32_t>{100000}, l, plan);
  std::int64_t keys = 0;
  for (std::int32_t x = 0; x < plan.num_work; ++x) keys += plan.kv_end[x] - plan.kv_begin[x];
  CHECK(keys == 129);
  CHECK(plan.kv_begin[0] == 100000 - 129);
}

TEST_CASE("plan_decode_work in CUDA-graph mode: fixed padded grid, always split, empty padding items", "[decode_plan]") {
  const std::uint64_t seed = test_seed();
  INFO("seed " << seed << " (AOTINFER_TEST_SEED replays it)");
  std::mt19937_64 rng(seed);
  DecodeWorkPlan plan;
  for (int trial = 0; trial < 1000; ++trial) {
    DecodePlanLimits l = random_limits(rng);
    const std::int32_t wave = decode_wave_items(l);
    const std::int32_t max_batch = std::uniform_int_distribution<std::int32_t>(1, std::max(2, 2 * wave))(rng);
    const std::int32_t max_work = decode_max_work(max_batch, l);
    REQUIRE(max_work >= max_batch);
    l.graph_work = max_work + (trial % 3 == 0 ? std::uniform_int_distribution<std::int32_t>(1, 50)(rng) : 0);
    // Batches up to max_batch, including max_batch itself and 1.
    const std::int64_t batch = trial % 5 == 0 ? max_batch
                               : trial % 5 == 1 ? 1
                                                : std::uniform_int_distribution<std::int64_t>(1, max_batch)(rng);
    const std::vector<std::int32_t> lens = random_lengths(rng, batch, l.tile_tokens);
    INFO("trial " << trial << ", max_batch " << max_batch << ", " << describe(l) << ", " << describe(lens));
    plan_decode_work(lens, l, plan);
    REQUIRE(plan.split);
    REQUIRE(plan.padded_work == l.graph_work);
    REQUIRE(plan_problem(lens, l, plan) == "");
  }

  // A batch with more requests than the grid has items cannot be planned.
  const DecodePlanLimits l = limits(132, 2, 4, 32, 8);
  const std::vector<std::int32_t> lens(10, 100);
  const std::string msg = invalid_argument_message([&] { plan_decode_work(lens, l, plan); });
  CHECK_THAT(msg, Contains("graph", Catch::CaseSensitive::No));
}

TEST_CASE("decode_max_work bounds every plan of up to max_batch requests", "[decode_plan]") {
  const std::uint64_t seed = test_seed();
  INFO("seed " << seed << " (AOTINFER_TEST_SEED replays it)");
  std::mt19937_64 rng(seed);
  DecodeWorkPlan plan;
  for (int trial = 0; trial < 300; ++trial) {
    const DecodePlanLimits l = random_limits(rng);
    const std::int32_t max_batch = std::uniform_int_distribution<std::int32_t>(1, 600)(rng);
    const std::int32_t max_work = decode_max_work(max_batch, l);
    for (int i = 0; i < 10; ++i) {
      const std::int64_t batch = i == 0 ? max_batch : std::uniform_int_distribution<std::int64_t>(1, max_batch)(rng);
      const std::vector<std::int32_t> lens = random_lengths(rng, batch, l.tile_tokens);
      INFO("trial " << trial << ", max_batch " << max_batch << ", " << describe(l) << ", " << describe(lens));
      plan_decode_work(lens, l, plan);
      REQUIRE(plan.num_work <= max_work);
    }
  }
}

TEST_CASE("plan_decode_work batch-invariant (fixed split, none): a request's items follow from its length alone",
          "[decode_plan]") {
  std::mt19937 rng(31u);
  DecodeWorkPlan plan, alone;
  for (int trial = 0; trial < 400; ++trial) {
    const bool graph = trial % 5 == 4;
    DecodePlanLimits l = limits(trial % 2 ? 132 : 8, 1 + trial % 2, 1 + trial % 8, trial % 3 ? 16 : 64);
    l.kv_split.mode = trial % 3 == 0 ? KvSplit::Mode::none : KvSplit::Mode::fixed;
    l.kv_split.tokens = std::uniform_int_distribution<int>(1, 5000)(rng);
    if (trial % 4 == 1) l.window_left = std::uniform_int_distribution<int>(0, 3000)(rng);
    std::vector<std::int32_t> lens(std::uniform_int_distribution<int>(1, 40)(rng));
    for (auto& len : lens) len = std::uniform_int_distribution<int>(0, 20000)(rng);
    const std::int32_t longest = *std::max_element(lens.begin(), lens.end());
    if (graph) l.graph_work = decode_max_work(std::int32_t(lens.size()), l, std::max(longest, 1));
    INFO("trial " << trial << ", " << describe(l) << ", " << describe(lens) << ", split "
                  << kv_split_name(l.kv_split.mode) << " " << l.kv_split.tokens);
    plan_decode_work(lens, l, plan);
    REQUIRE(aotinfer::reference::decode_plan_problem(lens, l, plan) == "");
    DecodePlanLimits single = l;
    single.graph_work = 0;
    for (std::size_t r = 0; r < lens.size(); ++r) {
      plan_decode_work(std::vector<std::int32_t>{lens[r]}, single, alone);
      std::vector<std::pair<std::int32_t, std::int32_t>> in_batch, by_itself;
      for (std::int32_t x = 0; x < plan.num_work; ++x)
        if (plan.request[x] == std::int32_t(r)) in_batch.emplace_back(plan.kv_begin[x], plan.kv_end[x]);
      for (std::int32_t x = 0; x < alone.num_work; ++x) by_itself.emplace_back(alone.kv_begin[x], alone.kv_end[x]);
      INFO("request " << r);
      CHECK(in_batch == by_itself);
    }
  }
}

TEST_CASE("decode_max_work under a fixed split needs the longest request and bounds its plans", "[decode_plan]") {
  DecodePlanLimits l = limits(132, 1, 8, 16);
  l.kv_split = {KvSplit::Mode::fixed, 100};  // chunks of 112 keys (7 tiles)
  CHECK_THAT(invalid_argument_message([&] { decode_max_work(4, l); }), Contains("max_kv_len"));
  CHECK(decode_max_work(4, l, 1000) == 4 * 9);
  l.kv_split = {KvSplit::Mode::none, 0};
  CHECK(decode_max_work(4, l) == 4);
  l.kv_split = {KvSplit::Mode::fixed, 0};
  CHECK_THAT(invalid_argument_message([&] { decode_wave_items(l); }), Contains("chunk"));
  // A CUDA-graph grid sized for 1000 keys refuses a longer request by name.
  l.kv_split = {KvSplit::Mode::fixed, 100};
  l.graph_work = decode_max_work(2, l, 1000);
  DecodeWorkPlan plan;
  CHECK_THAT(invalid_argument_message([&] { plan_decode_work(std::vector<std::int32_t>{5000, 5000}, l, plan); }),
             Contains("max_kv_len"));
}
