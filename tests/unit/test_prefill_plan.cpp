// The prefill work partition (runtime/include/aotinfer/prefill_plan.hpp), on the CPU, against the
// contract of templates/aotinfer/params/batch_prefill.h: packed rows R = t * group + g; CTA x
// handles (request, packed rows [q_row, q_row + tile_rows) clipped to the request, keys
// [kv_begin, kv_end)) for every KV head; split items write state
// state[x] + (kv_head * rows + row) * state_stride[x]; merge output i combines states
// merge_indptr[i] .. [i+1] into row merge_row[i] of o viewed as [total_q * num_qo_heads, head_dim].
//
// An independent checker (plan_problem) recomputes tiles, key extents under the causal rule
// (key j visible to token t when j <= kv_len - qo_len + t), the wave and the smallest chunk, and
// checks coverage, ordering, states, merge and padding. It runs on hand-made cases and on
// fixed-seed random batches.
#include "catch.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "aotinfer/batch_prefill.hpp"
#include "aotinfer/error.hpp"
#include "aotinfer/merge_state.hpp"
#include "aotinfer/prefill_plan.hpp"
#include "reference/plan_invariants.hpp"
#include "unit/test_util.hpp"

using namespace aotinfer;
using test::invalid_argument_message;
using test::NamesNumber;
using aotinfer_test::Contains;

namespace {

using V = std::vector<std::int32_t>;

constexpr int kLargeRows = 128, kSmallRows = 64, kKvTile = 64;

PrefillPlanLimits make_limits(int num_sms, int num_kv_heads, int group, bool causal, int large_ctas = 1, int small_ctas = 1,
                              std::int32_t graph_work = 0) {
  PrefillPlanLimits l;
  l.num_sms = num_sms;
  l.num_kv_heads = num_kv_heads;
  l.num_qo_heads = num_kv_heads * group;
  l.large = {kLargeRows, large_ctas};
  l.small = {kSmallRows, small_ctas};
  l.kv_tile_tokens = kKvTile;
  l.causal = causal;
  l.graph_work = graph_work;
  return l;
}

V indptr_of(const V& qo_lens) {
  V indptr{0};
  for (std::int32_t len : qo_lens) indptr.push_back(indptr.back() + len);
  return indptr;
}

std::string describe(const PrefillPlanLimits& l) {
  std::ostringstream s;
  s << "limits {num_sms " << l.num_sms << ", heads " << l.num_qo_heads << "/" << l.num_kv_heads << ", large "
    << l.large.rows << "x" << l.large.ctas_per_sm << ", small " << l.small.rows << "x" << l.small.ctas_per_sm
    << ", kv_tile_tokens " << l.kv_tile_tokens << ", causal " << l.causal << ", graph_work " << l.graph_work
    << ", window_left " << l.window_left << "}";
  return s.str();
}

std::string describe(const V& qo_indptr, const V& kv) {
  std::ostringstream s;
  s << kv.size() << " requests (qo_len/kv_len) {";
  for (std::size_t i = 0; i + 1 < qo_indptr.size() && i < 60; ++i)
    s << (i ? ", " : "") << qo_indptr[i + 1] - qo_indptr[i] << "/" << (i < kv.size() ? kv[i] : -1);
  if (qo_indptr.size() > 61) s << ", ...";
  s << "}";
  return s.str();
}

// Everything the contract promises about a plan (tests/reference/plan_invariants.hpp, which the
// fuzz targets check too); "" when all hold, else the first broken promise.
std::string plan_problem(const V& qo_indptr, const V& kv, const PrefillPlanLimits& l, const PrefillWorkPlan& p) {
  return reference::prefill_plan_problem(qo_indptr, kv, l, p);
}

// The plan written through plan_prefill_work's `place` into one caller buffer, filled with a
// value no plan holds, so that an entry the planner skips shows.
struct PlacedPlan {
  PrefillWorkPlan plan;  // the scalars; its vectors stay empty
  PrefillWorkPlan seen;  // the scalars `place` saw
  std::vector<std::int32_t> buffer;
  PrefillWorkArrays arrays;
};

void plan_placed(const V& qo_indptr, const V& kv, const PrefillPlanLimits& l, PlacedPlan& p) {
  plan_prefill_work(qo_indptr, kv, l, p.plan, [&](const PrefillWorkPlan& w) {
    p.seen = w;
    const std::size_t work = std::size_t(w.padded_work), outputs = std::size_t(w.num_outputs());
    p.buffer.assign(6 * work + 2 * outputs + 1, -123456789);
    std::int32_t* b = p.buffer.data();
    p.arrays = {b, b + work, b + 2 * work, b + 3 * work, b + 4 * work, b + 5 * work, b + 6 * work, b + 6 * work + outputs + 1};
    return p.arrays;
  });
}

// Plans and checks, with a fresh plan and a reused one (which must not keep stale entries), and
// the same plan written into caller arrays.
void check_plan(const V& qo_indptr, const V& kv, const PrefillPlanLimits& l, PrefillWorkPlan& plan) {
  INFO(describe(l) << ", " << describe(qo_indptr, kv));
  plan_prefill_work(qo_indptr, kv, l, plan);
  REQUIRE(plan_problem(qo_indptr, kv, l, plan) == "");
  // The kernels tell a split plan by its merge rows (num_merge_rows), the upload by `split`.
  REQUIRE(plan.split == (plan.num_outputs() > 0));
  PrefillWorkPlan fresh;
  plan_prefill_work(qo_indptr, kv, l, fresh);
  REQUIRE(fresh.num_work == plan.num_work);
  REQUIRE(fresh.padded_work == plan.padded_work);
  REQUIRE(fresh.request == plan.request);
  REQUIRE(fresh.q_row == plan.q_row);
  REQUIRE(fresh.kv_begin == plan.kv_begin);
  REQUIRE(fresh.kv_end == plan.kv_end);
  REQUIRE(fresh.state == plan.state);
  REQUIRE(fresh.state_stride == plan.state_stride);
  REQUIRE(fresh.merge_indptr == plan.merge_indptr);
  REQUIRE(fresh.merge_row == plan.merge_row);

  PlacedPlan placed;
  plan_placed(qo_indptr, kv, l, placed);
  const PrefillWorkPlan& p = placed.plan;
  for (const PrefillWorkPlan* scalars : {&p, static_cast<const PrefillWorkPlan*>(&placed.seen)}) {
    REQUIRE(scalars->large_tile == plan.large_tile);
    REQUIRE(scalars->tile_rows == plan.tile_rows);
    REQUIRE(scalars->split == plan.split);
    REQUIRE(scalars->chunk_tokens == plan.chunk_tokens);
    REQUIRE(scalars->num_work == plan.num_work);
    REQUIRE(scalars->padded_work == plan.padded_work);
    REQUIRE(scalars->num_states == plan.num_states);
    REQUIRE(scalars->num_outputs() == plan.num_outputs());
  }
  for (const V* v : {&p.request, &p.q_row, &p.kv_begin, &p.kv_end, &p.state, &p.state_stride, &p.merge_indptr, &p.merge_row})
    REQUIRE(v->empty());
  // What the kernels read, as copy_work_arrays gives it back (an unsplit plan leaves the
  // split-only arrays unwritten).
  PrefillWorkPlan copied = p;
  copy_work_arrays(placed.arrays, qo_indptr, kv, l, copied);
  REQUIRE(copied.request == plan.request);
  REQUIRE(copied.q_row == plan.q_row);
  REQUIRE(copied.kv_begin == plan.kv_begin);
  REQUIRE(copied.kv_end == plan.kv_end);
  REQUIRE(copied.state == plan.state);
  REQUIRE(copied.state_stride == plan.state_stride);
  REQUIRE(copied.merge_indptr == plan.merge_indptr);
  REQUIRE(copied.merge_row == plan.merge_row);
}

PrefillPlanLimits random_limits(std::mt19937& rng) {
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const int groups[] = {1, 2, 3, 4, 5, 6, 7, 8, 16};
  PrefillPlanLimits l = make_limits(uniform(0, 1) ? 132 : 8, uniform(1, 8), groups[uniform(0, 8)], uniform(0, 1) == 1,
                                    uniform(1, 3), uniform(1, 3));
  // A sliding window in a third of the draws: none to a few thousand keys.
  if (uniform(0, 2) == 0) l.window_left = uniform(0, 1) ? uniform(0, 64) : uniform(0, 4000);
  return l;
}

// A random batch of up to max_batch requests and max_total_q query tokens in all.
void random_batch(std::mt19937& rng, bool causal, int max_batch, int max_total_q, V& qo_indptr, V& kv) {
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const int kind = uniform(0, 3);
  const bool short_batch = uniform(0, 2) == 0;  // short prompts: the small tile
  const bool keyless = !causal && uniform(0, 3) == 0;  // some requests without keys
  const int batch = kind == 0 ? uniform(0, std::min(3, max_batch)) : kind == 1 ? uniform(1, std::min(8, max_batch)) : uniform(1, max_batch);
  qo_indptr.assign(1, 0);
  kv.clear();
  for (int i = 0; i < batch; ++i) {
    const int left = max_total_q - qo_indptr.back();
    int qo = short_batch || uniform(0, 3) == 0 ? uniform(0, 40) : uniform(0, 600);
    if (uniform(0, 9) == 0) qo = 0;
    qo = std::min(qo, left);
    int k = keyless && uniform(0, 2) == 0 ? 0 : uniform(0, 5000);
    if (causal) k = uniform(0, 3) == 0 ? qo : uniform(qo, 5000);  // a prompt from scratch, or with a prefix
    qo_indptr.push_back(qo_indptr.back() + qo);
    kv.push_back(k);
  }
}

}  // namespace

TEST_CASE("lengths_from_indptr: differences of a non-decreasing indptr starting at 0", "[prefill_plan]") {
  CHECK(lengths_from_indptr(V{0, 3, 3, 10}, "qo_indptr") == V{3, 0, 7});
  CHECK(lengths_from_indptr(V{0}, "qo_indptr").empty());
  CHECK(lengths_from_indptr(V{0, 0, 0}, "qo_indptr") == V{0, 0});

  std::string msg = invalid_argument_message([] { lengths_from_indptr(V{}, "kv_indptr"); });
  CHECK_THAT(msg, Contains("kv_indptr"));
  msg = invalid_argument_message([] { lengths_from_indptr(V{1, 3, 5}, "kv_indptr"); });
  CHECK_THAT(msg, Contains("kv_indptr") && NamesNumber(1));
  // Entry 3 (8) is below entry 2 (9); no value in the array is 3.
  msg = invalid_argument_message([] { lengths_from_indptr(V{0, 4, 9, 8, 12}, "kv_indptr"); });
  CHECK_THAT(msg, Contains("kv_indptr") && NamesNumber(3));
}

TEST_CASE("lengths_from_indptr into a reused vector: the same lengths and refusals", "[prefill_plan]") {
  V lengths{7, 7, 7, 7, 7, 7};  // longer than any result below: nothing of it may remain
  lengths_from_indptr(V{0, 3, 3, 10}, "qo_indptr", lengths);
  CHECK(lengths == V{3, 0, 7});
  lengths_from_indptr(V{0}, "qo_indptr", lengths);
  CHECK(lengths.empty());
  lengths_from_indptr(V{0, 0, 0}, "qo_indptr", lengths);
  CHECK(lengths == V{0, 0});
  const std::string msg = invalid_argument_message([&] { lengths_from_indptr(V{0, 4, 9, 8, 12}, "kv_indptr", lengths); });
  CHECK_THAT(msg, Contains("kv_indptr") && NamesNumber(3));
  CHECK(lengths == V{0, 0});  // a refused indptr leaves the vector as it was
}

TEST_CASE("plan_prefill_work refuses bad batches, naming the problem", "[prefill_plan]") {
  PrefillWorkPlan plan;
  const PrefillPlanLimits causal = make_limits(132, 2, 4, true);
  SECTION("causal request with more queries than keys: served, its first queries see no key") {
    check_plan(V{0, 3, 7, 14}, V{10, 10, 5}, causal, plan);
    PrefillPlanLimits plain = causal;
    plain.causal = false;
    check_plan(V{0, 3, 7, 14}, V{10, 10, 5}, plain, plan);
  }
  SECTION("negative KV length") {
    // Request 1 has -3 keys; without the mask, so that only the sign is wrong.
    PrefillPlanLimits plain = causal;
    plain.causal = false;
    const std::string msg = invalid_argument_message([&] { plan_prefill_work(V{0, 2, 4, 6}, V{10, -3, 10}, plain, plan); });
    CHECK_THAT(msg, Contains("request") && NamesNumber(1) && NamesNumber(-3) && Contains("negative"));
  }
  SECTION("qo_indptr not starting at 0") {
    const std::string msg = invalid_argument_message([&] { plan_prefill_work(V{5, 8, 9}, V{10, 10}, causal, plan); });
    CHECK_THAT(msg, Contains("qo_indptr") && NamesNumber(5));
  }
  SECTION("qo_indptr decreasing") {
    const std::string msg = invalid_argument_message([&] { plan_prefill_work(V{0, 4, 9, 8, 12}, V{10, 10, 10, 10}, causal, plan); });
    CHECK_THAT(msg, Contains("qo_indptr") && Contains("decrease") && NamesNumber(3));
  }
  SECTION("empty qo_indptr") {
    const std::string msg = invalid_argument_message([&] { plan_prefill_work(V{}, V{}, causal, plan); });
    CHECK_THAT(msg, Contains("qo_indptr"));
  }
  SECTION("kv_lengths size differing from the batch") {
    std::string msg = invalid_argument_message([&] { plan_prefill_work(V{0, 1, 2, 3}, V{10, 10}, causal, plan); });
    CHECK_THAT(msg, NamesNumber(3) && NamesNumber(2));
    msg = invalid_argument_message([&] { plan_prefill_work(V{0, 1}, V{10, 10, 10, 10, 10}, causal, plan); });
    CHECK_THAT(msg, NamesNumber(1) && NamesNumber(5));
  }
}

TEST_CASE("plan_prefill_work and prefill_capacity refuse unset limits", "[prefill_plan]") {
  PrefillWorkPlan plan;
  const PrefillPlanLimits good = make_limits(132, 2, 4, false);
  std::vector<PrefillPlanLimits> bad{PrefillPlanLimits{}};
  for (int field = 0; field < 9; ++field) {
    PrefillPlanLimits l = good;
    switch (field) {
      case 0: l.num_sms = 0; break;
      case 1: l.num_kv_heads = 0; break;
      case 2: l.num_qo_heads = 1; break;  // fewer query heads than KV heads
      case 3: l.num_qo_heads = 7; break;  // not a multiple of 2
      case 4: l.large.rows = 0; break;
      case 5: l.large.ctas_per_sm = 0; break;
      case 6: l.small.rows = 0; break;
      case 7: l.small.ctas_per_sm = 0; break;
      default: l.kv_tile_tokens = 0;
    }
    bad.push_back(l);
  }
  for (const PrefillPlanLimits& l : bad) {
    INFO(describe(l));
    std::string msg = invalid_argument_message([&] { plan_prefill_work(V{0, 10}, V{100}, l, plan); });
    CHECK_THAT(msg, Contains("limits"));
    msg = invalid_argument_message([&] { prefill_capacity(1000, 4, l); });
    CHECK_THAT(msg, Contains("limits"));
  }
  plan_prefill_work(V{0, 10}, V{100}, good, plan);  // the good limits pass
  CHECK(plan.num_work >= 1);
}

TEST_CASE("plan_prefill_work picks the large tile when the average packed length exceeds the small tile", "[prefill_plan]") {
  PrefillWorkPlan plan;
  struct Case {
    int group;
    V qo_lens;
    bool large;
  };
  const std::vector<Case> cases{
      {1, {64, 64}, false},         // average 64, not above 64
      {1, {65, 64}, true},          // average 64.5
      {1, {200, 0, 0, 0}, false},   // empty requests count in the average: 50
      {1, {200, 0, 0}, true},       // 66.7
      {4, {16, 16}, false},         // packed 64 each
      {4, {16, 17}, true},          // packed 64 and 68
      {16, {5}, true},              // packed 80
      {16, {4, 4, 4}, false},       // packed 64 each
      {8, {1, 1, 1, 1, 1, 60}, true},  // packed 8 x 5 + 480: average 86.7
      {8, {1, 1, 1, 1, 1, 1, 1, 50}, false},  // (7 + 50) * 8 / 8 = 57
  };
  for (const Case& c : cases) {
    for (bool graph : {false, true}) {
      V kv;
      for (std::int32_t len : c.qo_lens) kv.push_back(len + 300);
      PrefillPlanLimits l = make_limits(132, 2, c.group, true);
      if (graph) {
        l.graph_work = 1;  // marks graph mode for prefill_capacity, as BatchPrefill does
        l.graph_work = std::int32_t(prefill_capacity(1000, 10, l).work);
      }
      INFO("group " << c.group << ", graph " << graph);
      check_plan(indptr_of(c.qo_lens), kv, l, plan);
      CHECK(plan.large_tile == (c.large || graph));
      CHECK(plan.tile_rows == (c.large || graph ? kLargeRows : kSmallRows));
    }
  }
}

TEST_CASE("plan_prefill_work splits only when the tiles leave a wave unfilled, with the smallest chunk that fits", "[prefill_plan]") {
  PrefillWorkPlan plan;
  SECTION("one long tile: chunks of 640 keys make 8 items for a wave of 8") {
    const PrefillPlanLimits l = make_limits(8, 1, 1, false);  // large tile wave: 8 * 1 / 1
    check_plan(V{0, 128}, V{5000}, l, plan);
    REQUIRE(plan.split);
    CHECK(plan.chunk_tokens == 640);  // 576 would need ceil(5000 / 576) = 9 items
    CHECK(plan.num_work == 8);
    CHECK(plan.num_states == 128 * 8);
    CHECK(plan.num_outputs() == 128);
  }
  SECTION("tiles that already fill a wave are not split") {
    const PrefillPlanLimits l = make_limits(8, 1, 1, false);
    check_plan(V{0, 1024}, V{5000}, l, plan);  // 8 tiles of 128 rows
    CHECK_FALSE(plan.split);
    CHECK(plan.num_work == 8);
    CHECK(plan.num_states == 0);
    CHECK(plan.num_outputs() == 0);
    CHECK(std::count(plan.state.begin(), plan.state.end(), -1) == 8);
  }
  SECTION("the wave divides by the KV heads") {
    const PrefillPlanLimits l = make_limits(8, 4, 1, false, 2);  // wave 8 * 2 / 4 = 4
    check_plan(V{0, 256}, V{5000}, l, plan);                     // 2 tiles: 2 < 4, split in 2 each
    REQUIRE(plan.split);
    CHECK(plan.chunk_tokens == 2560);
    CHECK(plan.num_work == 4);
    check_plan(V{0, 384}, V{5000}, l, plan);  // 3 tiles: a split doubles them, beyond the wave
    CHECK_FALSE(plan.split);
    CHECK(plan.num_work == 3);
    check_plan(V{0, 512}, V{5000}, l, plan);  // 4 tiles fill the wave
    CHECK_FALSE(plan.split);
    CHECK(plan.num_work == 4);
  }
  SECTION("causal extents: the first tile sees half the keys") {
    const PrefillPlanLimits l = make_limits(132, 1, 1, true);
    check_plan(V{0, 256}, V{256}, l, plan);
    REQUIRE(plan.split);
    CHECK(plan.chunk_tokens == 64);
    CHECK(plan.num_work == 6);  // 128 keys in 2 chunks + 256 keys in 4 chunks
    for (std::int32_t x = 0; x < plan.num_work; ++x) CHECK(plan.kv_end[x] - plan.kv_begin[x] == 64);
  }
  SECTION("short keys are not split below one KV tile") {
    const PrefillPlanLimits l = make_limits(132, 1, 1, false);
    check_plan(V{0, 100, 200}, V{64, 30}, l, plan);
    CHECK_FALSE(plan.split);
    CHECK(plan.chunk_tokens == 0);
  }
  SECTION("GQA: the merge rows of a split request are its o rows, query head kv_head * group + g") {
    // group 2, 2 KV heads: wave 8 * 1 / 2 = 4. Tiles: request 0 (6 packed rows, 4000 keys) and
    // request 1 (4 packed rows, 10 keys): chunks of 1344 keys give 3 + 1 = 4 items.
    const PrefillPlanLimits l = make_limits(8, 2, 2, false);
    check_plan(V{0, 3, 5}, V{4000, 10}, l, plan);
    REQUIRE(plan.split);
    CHECK(plan.chunk_tokens == 1344);
    CHECK(plan.num_work == 4);
    CHECK(plan.num_states == 3 * 6 * 2);
    V rows = plan.merge_row;
    std::sort(rows.begin(), rows.end());
    V expected(12);
    for (int i = 0; i < 12; ++i) expected[i] = i;  // request 0: 3 tokens x 4 query heads
    CHECK(rows == expected);
    CHECK(plan.request[3] == 1);  // the short item runs last
    CHECK(plan.kv_end[3] == 10);
    CHECK(plan.state[3] == -1);
  }
}

TEST_CASE("plan_prefill_work edge cases: empty batch, empty requests, no keys", "[prefill_plan]") {
  PrefillWorkPlan plan;
  for (bool causal : {false, true}) {
    const PrefillPlanLimits l = make_limits(132, 2, 4, causal);
    INFO("causal " << causal);
    check_plan(V{0}, V{}, l, plan);
    CHECK(plan.num_work == 0);
    CHECK(plan.padded_work == 0);
    CHECK(plan.num_states == 0);
    CHECK(plan.merge_indptr == V{0});
    CHECK(plan.num_outputs() == 0);

    // Requests with no queries get no items; the others are planned as usual.
    check_plan(V{0, 0, 5, 5}, V{100, 3000, 0}, l, plan);
    CHECK(plan.num_work >= 1);
    for (std::int32_t x = 0; x < plan.num_work; ++x) CHECK(plan.request[x] == 1);

    // Only empty requests: nothing to run.
    check_plan(V{0, 0, 0}, V{0, 70}, l, plan);
    CHECK(plan.num_work == 0);

    // Queries with no keys: causal needs qo_len 0 then; without the mask the tile still gets
    // one item, with an empty range, writing o directly.
    check_plan(V{0, 0}, V{0}, l, plan);
    CHECK(plan.num_work == 0);
  }
  const PrefillPlanLimits l = make_limits(8, 1, 1, false);  // wave 8
  check_plan(V{0, 3}, V{0}, l, plan);
  REQUIRE(plan.num_work == 1);
  CHECK(plan.kv_begin[0] == 0);
  CHECK(plan.kv_end[0] == 0);
  CHECK(plan.state[0] == -1);
  CHECK(plan.q_row[0] == 0);
  // Also inside a split plan: the keyless request keeps its one empty direct item, last.
  check_plan(V{0, 3, 131}, V{0, 5000}, l, plan);
  REQUIRE(plan.split);
  REQUIRE(plan.num_work == 8);
  CHECK(plan.request[7] == 0);
  CHECK(plan.kv_begin[7] == plan.kv_end[7]);
  CHECK(plan.state[7] == -1);
  // Causal qo_len == kv_len: the first token sees one key.
  const PrefillPlanLimits c = make_limits(132, 1, 1, true);
  check_plan(V{0, 1}, V{1}, c, plan);
  REQUIRE(plan.num_work == 1);
  CHECK(plan.kv_end[0] == 1);
}

TEST_CASE("plan_prefill_work property: exact coverage, minimal chunks, states and merge (fixed-seed random batches)",
          "[prefill_plan]") {
  std::mt19937 rng(20240611u);
  PrefillWorkPlan plan;  // reused on purpose: plans must not keep stale entries
  int split = 0, unsplit = 0, small = 0, large = 0, causal_split = 0, empty_items = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const PrefillPlanLimits l = random_limits(rng);
    V qo_indptr, kv;
    random_batch(rng, l.causal, trial % 3 == 0 ? 40 : 12, 1 << 20, qo_indptr, kv);
    INFO("trial " << trial);
    check_plan(qo_indptr, kv, l, plan);
    (plan.split ? split : unsplit)++;
    (plan.large_tile ? large : small)++;
    causal_split += plan.split && l.causal;
    for (std::int32_t x = 0; x < plan.num_work; ++x) empty_items += plan.kv_begin[x] == plan.kv_end[x];
  }
  // The generator reaches every branch.
  INFO("split " << split << ", unsplit " << unsplit << ", small " << small << ", large " << large << ", causal split "
                << causal_split << ", empty items " << empty_items);
  CHECK(split >= 30);
  CHECK(unsplit >= 30);
  CHECK(small >= 20);
  CHECK(large >= 30);
  CHECK(causal_split >= 10);
  CHECK(empty_items >= 5);
}

TEST_CASE("plan_prefill_work on large unsplit batches: equal requests, mixed ones, prefixes, other tile shapes",
          "[prefill_plan]") {
  // Unsplit plans sort a request's runs of tiles with as many KV tiles, not the tiles: causal
  // runs of several tiles, of one tile, and KV tiles skipped between tiles (tiles of more
  // tokens than a KV tile), with and without a mask. Equal requests put every bucket's slots a
  // multiple of 4 KiB apart (the case the in-order writing is for).
  PrefillWorkPlan plan;
  std::mt19937 rng(90210u);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  struct Shape {
    int group, kv_tile;
  };
  int cases = 0;
  for (const Shape shape : {Shape{4, 128}, Shape{1, 64}, Shape{1, 16}, Shape{8, 64}, Shape{3, 100}, Shape{16, 7}})
    for (bool causal : {true, false})
      for (int kind = 0; kind < 4; ++kind) {
        PrefillPlanLimits l = make_limits(132, 8, shape.group, causal);
        l.kv_tile_tokens = shape.kv_tile;
        V qo_indptr{0}, kv;
        const int batch = kind == 0 ? 256 : uniform(40, 200);
        for (int i = 0; i < batch; ++i) {
          int qo = 1024, k = 1024;                              // 0: equal prompts
          if (kind == 1) qo = uniform(0, 1500), k = qo;         // prompts of mixed lengths
          if (kind == 2) qo = uniform(1, 600), k = qo + uniform(0, 20000);  // chunked prefill: prefixes
          if (kind == 3) qo = uniform(0, 900), k = causal ? qo + uniform(0, 3) : uniform(0, 2000);
          qo_indptr.push_back(qo_indptr.back() + qo);
          kv.push_back(k);
        }
        INFO("group " << shape.group << ", kv_tile " << shape.kv_tile << ", causal " << causal << ", kind " << kind);
        check_plan(qo_indptr, kv, l, plan);
        CHECK_FALSE(plan.split);
        ++cases;
      }
  CHECK(cases == 48);
}

TEST_CASE("plan_prefill_work in CUDA-graph mode: the large tile, graph_work items, empty padding", "[prefill_plan]") {
  std::mt19937 rng(777u);
  PrefillWorkPlan plan;
  int padded = 0, split = 0;
  for (int trial = 0; trial < 200; ++trial) {
    PrefillPlanLimits l = random_limits(rng);
    const int max_batch = std::uniform_int_distribution<int>(1, 24)(rng);
    const int max_total_q = std::uniform_int_distribution<int>(1, 4000)(rng);
    l.graph_work = 1;  // marks graph mode for prefill_capacity: the large tile only
    const PrefillCapacity cap = prefill_capacity(max_total_q, max_batch, l);
    l.graph_work = std::int32_t(cap.work) + (trial % 3 == 0 ? std::uniform_int_distribution<int>(1, 40)(rng) : 0);
    V qo_indptr, kv;
    random_batch(rng, l.causal, max_batch, max_total_q, qo_indptr, kv);
    INFO("trial " << trial << ", max_total_q " << max_total_q << ", max_batch " << max_batch);
    check_plan(qo_indptr, kv, l, plan);  // checks padded_work == graph_work and empty padding
    REQUIRE(plan.large_tile);
    REQUIRE(plan.padded_work == l.graph_work);
    for (std::int32_t x = plan.num_work; x < plan.padded_work; ++x) {
      REQUIRE(plan.kv_begin[x] == plan.kv_end[x]);
      REQUIRE(plan.state[x] == -1);
    }
    padded += plan.num_work < plan.padded_work;
    split += plan.split;
  }
  CHECK(padded >= 100);
  CHECK(split >= 10);

  // A batch that needs more items than the grid holds is refused: 8 unsplittable tiles (64
  // keys, one KV tile) for a grid of 4.
  const PrefillPlanLimits l = make_limits(132, 1, 1, false, 1, 1, 4);
  const std::string msg = invalid_argument_message([&] { plan_prefill_work(V{0, 1024}, V{64}, l, plan); });
  CHECK_THAT(msg, Contains("grid") && NamesNumber(8) && NamesNumber(4));
  // Exactly as many items as the grid holds is fine.
  const PrefillPlanLimits fits = make_limits(132, 1, 1, false, 1, 1, 8);
  check_plan(V{0, 1024}, V{64}, fits, plan);
  CHECK(plan.num_work == 8);
  CHECK(plan.padded_work == 8);
}

TEST_CASE("prefill_capacity bounds the items, states and outputs of every plan within (max_total_q, max_batch)",
          "[prefill_plan]") {
  std::mt19937 rng(4242u);
  PrefillWorkPlan plan;
  for (int trial = 0; trial < 300; ++trial) {
    PrefillPlanLimits l = random_limits(rng);
    const int max_batch = std::uniform_int_distribution<int>(1, 32)(rng);
    const int max_total_q = std::uniform_int_distribution<int>(1, 5000)(rng);
    const bool graph = trial % 2 == 1;
    if (graph) {
      l.graph_work = 1;  // marks graph mode for prefill_capacity: the large tile only
      l.graph_work = std::int32_t(prefill_capacity(max_total_q, max_batch, l).work);
    }
    const PrefillCapacity cap2 = prefill_capacity(max_total_q, max_batch, l);
    INFO("trial " << trial << ", " << describe(l) << ", max_total_q " << max_total_q << ", max_batch " << max_batch
                  << ", capacity " << cap2.work << "/" << cap2.states << "/" << cap2.outputs);
    for (int i = 0; i < 8; ++i) {
      V qo_indptr, kv;
      const std::int64_t group = l.num_qo_heads / l.num_kv_heads;
      if (i == 0) {  // every request with one row more than a tile: the most partial tiles
        const int per = int(std::max<std::int64_t>(1, (kLargeRows + 1 + group - 1) / group));
        qo_indptr.assign(1, 0);
        for (int r = 0; r < max_batch && qo_indptr.back() + per <= max_total_q; ++r) {
          qo_indptr.push_back(qo_indptr.back() + per);
          kv.push_back(l.causal ? per + 4000 : 4000);
        }
      } else if (i == 1) {  // one request with all the queries and few tiles: splits
        qo_indptr = {0, max_total_q};
        kv = {max_total_q + 5000};
      } else if (i == 2) {  // max_batch short requests with long keys
        qo_indptr.assign(1, 0);
        for (int r = 0; r < max_batch; ++r) {
          qo_indptr.push_back(qo_indptr.back() + (qo_indptr.back() < max_total_q ? 1 : 0));
          kv.push_back(5000);
        }
      } else {
        random_batch(rng, l.causal, max_batch, max_total_q, qo_indptr, kv);
      }
      INFO("case " << i << ", " << describe(qo_indptr, kv));
      REQUIRE(qo_indptr.back() <= max_total_q);
      REQUIRE(std::int64_t(kv.size()) <= max_batch);
      plan_prefill_work(qo_indptr, kv, l, plan);
      REQUIRE(plan_problem(qo_indptr, kv, l, plan) == "");
      CHECK(plan.num_work <= cap2.work);
      CHECK(plan.padded_work <= cap2.work);
      CHECK(plan.num_states <= cap2.states);
      CHECK(plan.num_outputs() <= cap2.outputs);
    }
  }
}

TEST_CASE("plan_prefill_work, causal with more queries than keys: tiles before the first key have no keys",
          "[prefill_plan]") {
  PrefillWorkPlan plan;
  // group 4, 128-row tiles = 32 tokens: request 0 has 100 queries and 10 keys, so its first 90
  // tokens (tiles 0 and 1, and most of 2) see nothing; request 1 has no keys at all.
  const PrefillPlanLimits l = make_limits(132, 2, 4, true);
  check_plan(V{0, 100, 140}, V{10, 0}, l, plan);
  REQUIRE_FALSE(plan.split);
  for (std::int32_t x = 0; x < plan.num_work; ++x) {
    const std::int32_t qo = plan.request[x] == 0 ? 100 : 40, kv = plan.request[x] == 0 ? 10 : 0;
    const std::int32_t last_token = std::min(plan.q_row[x] + plan.tile_rows, qo * 4) / 4 - 1;
    CHECK(plan.kv_end[x] == std::max(0, kv - qo + last_token + 1));
  }
  // Random batches with such requests, split and unsplit (the checker recomputes the extents).
  std::mt19937 rng(77u);
  for (int trial = 0; trial < 200; ++trial) {
    const PrefillPlanLimits r = make_limits(trial % 2 ? 132 : 8, 1 + trial % 3, 1 + trial % 5, true);
    V qo_indptr{0}, kv;
    const int batch = std::uniform_int_distribution<int>(1, 6)(rng);
    for (int i = 0; i < batch; ++i) {
      qo_indptr.push_back(qo_indptr.back() + std::uniform_int_distribution<int>(0, 300)(rng));
      kv.push_back(std::uniform_int_distribution<int>(0, 400)(rng));
    }
    check_plan(qo_indptr, kv, r, plan);
  }
}

namespace {

// The items of request `r` in a plan, as (q_row, kv_begin, kv_end) sorted: what decides the
// request's arithmetic.
std::vector<std::array<std::int32_t, 3>> items_of_request(const PrefillWorkPlan& p, std::int32_t r) {
  std::vector<std::array<std::int32_t, 3>> items;
  for (std::int32_t x = 0; x < p.num_work; ++x)
    if (p.request[x] == r) items.push_back({p.q_row[x], p.kv_begin[x], p.kv_end[x]});
  std::sort(items.begin(), items.end());
  return items;
}

}  // namespace

TEST_CASE("plan_prefill_work batch-invariant (fixed split, none): a request's items follow from its own lengths",
          "[prefill_plan]") {
  std::mt19937 rng(2024u);
  PrefillWorkPlan plan, alone;
  for (int trial = 0; trial < 300; ++trial) {
    PrefillPlanLimits l = random_limits(rng);
    l.kv_split.mode = trial % 3 == 0 ? KvSplit::Mode::none : KvSplit::Mode::fixed;
    l.kv_split.tokens = std::uniform_int_distribution<int>(1, 3000)(rng);
    V qo_indptr, kv;
    random_batch(rng, l.causal, 12, 3000, qo_indptr, kv);
    INFO("trial " << trial << ", " << describe(l) << ", split " << kv_split_name(l.kv_split.mode) << " " << l.kv_split.tokens);
    check_plan(qo_indptr, kv, l, plan);
    CHECK(plan.large_tile);
    for (std::int32_t r = 0; r < std::int32_t(kv.size()); ++r) {
      const V one{0, qo_indptr[r + 1] - qo_indptr[r]};
      plan_prefill_work(one, V{kv[r]}, l, alone);
      INFO("request " << r);
      CHECK(items_of_request(plan, r) == items_of_request(alone, 0));
    }
  }
}

TEST_CASE("prefill_capacity under a fixed split needs max_kv_len and bounds every plan within it", "[prefill_plan]") {
  PrefillPlanLimits l = make_limits(132, 2, 4, true);
  l.kv_split = {KvSplit::Mode::fixed, 1000};
  CHECK_THAT(invalid_argument_message([&] { prefill_capacity(100, 2, l); }), Contains("max_kv_len"));
  std::mt19937 rng(99u);
  PrefillWorkPlan plan;
  for (int trial = 0; trial < 200; ++trial) {
    PrefillPlanLimits r = random_limits(rng);
    r.kv_split = {trial % 4 == 0 ? KvSplit::Mode::none : KvSplit::Mode::fixed, std::uniform_int_distribution<int>(1, 2000)(rng)};
    V qo_indptr, kv;
    random_batch(rng, r.causal, 16, 4000, qo_indptr, kv);
    const std::int64_t longest = kv.empty() ? 1 : std::max<std::int64_t>(1, *std::max_element(kv.begin(), kv.end()));
    const PrefillCapacity cap = prefill_capacity(qo_indptr.back(), std::int32_t(kv.size()), r, longest);
    plan_prefill_work(qo_indptr, kv, r, plan);
    INFO("trial " << trial << ", " << describe(r) << ", " << describe(qo_indptr, kv));
    CHECK(plan.num_work <= cap.work);
    CHECK(plan.num_states <= cap.states);
    CHECK(plan.num_outputs() <= cap.outputs);
  }
}

TEST_CASE("BatchPrefill names head_dim_vo last in its variant key, head_dim's width when the config leaves it 0", "[prefill_plan]") {
  BatchPrefillConfig c;  // bf16, head_dim 128, paged
  const VariantKey same = BatchPrefill::variant_key(c);
  CHECK(same.uri() == "batch_prefill_paged.dtype_q-bf16.head_dim-128.dtype_kv-bf16.dtype_o-bf16.pos_encoding-none.head_dim_vo-128");
  c.head_dim_vo = 128;
  CHECK(BatchPrefill::variant_key(c) == same);
  CHECK(c.vo_dim() == 128);

  // MLA prefill (DeepSeek-V3, Kimi K2): q.k 192 wide, V and o 128; its split states merge 128 wide.
  c.head_dim = 192;
  c.kv_storage = KvStorage::ragged;
  CHECK_NOTHROW(BatchPrefill::check_config(c));
  CHECK(BatchPrefill::variant_key(c).uri() ==
        "batch_prefill_ragged.dtype_q-bf16.head_dim-192.dtype_kv-bf16.dtype_o-bf16.pos_encoding-none.head_dim_vo-128");
  CHECK(MergeState::variant_key(c.dtype_o, c.vo_dim()).uri() == "merge_state.dtype-bf16.head_dim-128");
  c.pos_encoding = PosEncoding::alibi;  // a run-time bias of the none variant
  CHECK_NOTHROW(BatchPrefill::check_config(c));
  CHECK(*BatchPrefill::variant_key(c).find("pos_encoding") == "none");
}

TEST_CASE("BatchPrefill::check_config takes unequal widths with 16-bit K/V and no RoPE only", "[prefill_plan]") {
  BatchPrefillConfig mla;
  mla.head_dim = 192, mla.head_dim_vo = 128;
  const std::string served = "head_dim_vo != head_dim (MLA prefill, 192/128) is served with 16-bit K/V and pos_encoding none";
  BatchPrefillConfig c = mla;
  c.pos_encoding = PosEncoding::rope_llama;
  CHECK_THAT(invalid_argument_message([&] { BatchPrefill::check_config(c); }), Contains(served) && Contains("rope_llama"));
  for (DType fp8 : {DType::e4m3, DType::e5m2}) {
    c = mla;
    c.dtype_kv = fp8;
    CHECK_THAT(invalid_argument_message([&] { BatchPrefill::check_config(c); }),
               Contains(served) && Contains(std::string(dtype_name(fp8))));
  }
  c = mla;
  c.head_dim_vo = -1;
  CHECK_THAT(invalid_argument_message([&] { BatchPrefill::check_config(c); }),
             Contains("batch_prefill: head_dim_vo must be 0 (head_dim) or >= 1, got -1"));
  // Equal widths keep every option: RoPE and fp8 K/V, whether head_dim_vo is 0 or spelled out.
  for (int vo : {0, 128}) {
    c = BatchPrefillConfig{};
    c.head_dim_vo = vo;
    c.pos_encoding = PosEncoding::rope_llama;
    c.dtype_kv = DType::e4m3;
    CHECK_NOTHROW(BatchPrefill::check_config(c));
  }
}
