// Checks the fp64 reference (tests/reference/attention_reference.hpp) that the merge_state GPU
// tests compare against. The main property does not use merge's formula: attention over a key
// set split in parts and merged must equal attention over the whole set.
#include "catch.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "reference/attention_reference.hpp"

using aotinfer::reference::attend;
using aotinfer::reference::merge;
using aotinfer::reference::State;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// The seed: AOTINFER_TEST_SEED when set (to replay a failure), random otherwise.
std::uint64_t test_seed() {
  if (const char* s = std::getenv("AOTINFER_TEST_SEED")) return std::strtoull(s, nullptr, 10);
  std::random_device rd;
  return (std::uint64_t(rd()) << 32) | rd();
}

struct Keys {
  std::vector<double> scores;
  std::vector<std::vector<double>> values;
  std::size_t head_dim = 0;

  Keys slice(std::size_t begin, std::size_t end) const {
    Keys part;
    part.scores.assign(scores.begin() + begin, scores.begin() + end);
    part.values.assign(values.begin() + begin, values.begin() + end);
    part.head_dim = head_dim;
    return part;
  }
  State attend() const { return ::attend(scores, values, head_dim); }
};

// Random keys: scores of a random scale and offset (up to +-500, far beyond what exp() takes
// directly), some masked (-inf); values in [-1, 1].
Keys random_keys(std::mt19937_64& rng) {
  std::uniform_int_distribution<std::size_t> count(0, 48);
  const std::size_t dims[] = {1, 3, 8, 64};
  const double scales[] = {0.01, 1.0, 10.0, 100.0};
  Keys k;
  k.head_dim = dims[rng() % 4];
  const double scale = scales[rng() % 4];
  const double offset = std::uniform_real_distribution<double>(-500, 500)(rng);
  const double masked = (rng() % 4 == 0) ? 0.3 : 0.0;
  std::normal_distribution<double> score(offset, scale);
  std::uniform_real_distribution<double> value(-1, 1), coin(0, 1);
  const std::size_t n = count(rng);
  for (std::size_t i = 0; i < n; ++i) {
    k.scores.push_back(coin(rng) < masked ? -kInf : score(rng));
    std::vector<double> v(k.head_dim);
    for (double& x : v) x = value(rng);
    k.values.push_back(std::move(v));
  }
  return k;
}

void check_close(const State& got, const State& want) {
  REQUIRE(got.v.size() == want.v.size());
  if (std::isinf(want.lse)) {
    CHECK(got.lse == want.lse);
  } else {
    CHECK(std::abs(got.lse - want.lse) <= 1e-12 * std::max(1.0, std::abs(want.lse)));
  }
  double worst = 0;
  for (std::size_t d = 0; d < want.v.size(); ++d) worst = std::max(worst, std::abs(got.v[d] - want.v[d]));
  CHECK(worst <= 1e-12);
}

bool identical(const State& a, const State& b) { return a.lse == b.lse && a.v == b.v; }

// |got - want| <= tol, with no relative slack (Catch's Approx adds a float-sized epsilon).
bool near(double got, double want, double tol) { return std::abs(got - want) <= tol; }

// Equal up to rounding: the last bit may differ where a compiler fuses a*b + c into an FMA.
bool same_up_to_rounding(const State& a, const State& b) {
  if (a.v.size() != b.v.size() || std::isinf(a.lse) != std::isinf(b.lse)) return false;
  if (std::isinf(a.lse) ? a.lse != b.lse : !near(a.lse, b.lse, 4e-16 * std::max(1.0, std::abs(a.lse)))) return false;
  for (std::size_t d = 0; d < a.v.size(); ++d)
    if (!near(a.v[d], b.v[d], 4e-16)) return false;
  return true;
}

}  // namespace

TEST_CASE("attend computes softmax-weighted values and the log-sum-exp", "[merge_math]") {
  // Weights 1/4 and 3/4.
  State s = attend({0.0, std::log(3.0)}, {{1.0, 0.0, 2.0}, {0.0, 1.0, -2.0}});
  REQUIRE(s.v.size() == 3);
  CHECK(near(s.v[0], 0.25, 1e-15));
  CHECK(near(s.v[1], 0.75, 1e-15));
  CHECK(near(s.v[2], -1.0, 1e-15));
  CHECK(near(s.lse, std::log(4.0), 1e-15));

  State one = attend({-7.5}, {{0.5, -0.25}});
  CHECK(one.v == std::vector<double>{0.5, -0.25});
  CHECK(one.lse == -7.5);

  // Huge scores do not overflow; the largest dominates.
  State big = attend({1000.0, 0.0}, {{1.0}, {-1.0}});
  CHECK(big.v[0] == 1.0);
  CHECK(near(big.lse, 1000.0, 1e-12));
  State equal = attend({800.0, 800.0, 800.0}, {{3.0}, {0.0}, {-6.0}});
  CHECK(near(equal.v[0], -1.0, 1e-15));
  CHECK(near(equal.lse, 800.0 + std::log(3.0), 1e-12));

  // Masked keys do not count.
  State masked = attend({-kInf, 2.0}, {{100.0}, {4.0}});
  CHECK(masked.v[0] == 4.0);
  CHECK(masked.lse == 2.0);
}

TEST_CASE("attend over no keys is the empty state", "[merge_math]") {
  State none = attend({}, {}, 4);
  CHECK(none.v == std::vector<double>(4, 0.0));
  CHECK(none.lse == -kInf);
  State all_masked = attend({-kInf, -kInf}, {{1.0, 2.0}, {3.0, 4.0}});
  CHECK(all_masked.v == std::vector<double>(2, 0.0));
  CHECK(all_masked.lse == -kInf);
  CHECK(attend({}, {}).v.empty());
}

TEST_CASE("merge matches the formula of params/merge_state.h for moderate values", "[merge_math]") {
  State a{{1.0, -2.0}, 0.3}, b{{0.5, 4.0}, -1.2};
  const double s_out = std::log(std::exp(0.3) + std::exp(-1.2));
  State m = merge(a, b);
  CHECK(near(m.lse, s_out, 1e-14));
  for (int d = 0; d < 2; ++d)
    CHECK(near(m.v[d], std::exp(a.lse - s_out) * a.v[d] + std::exp(b.lse - s_out) * b.v[d], 1e-14));
  CHECK(near(m.v[1], (std::exp(0.3) * -2.0 + std::exp(-1.2) * 4.0) / (std::exp(0.3) + std::exp(-1.2)), 1e-14));
}

TEST_CASE("merge of the states of a split key set equals attention over the whole set", "[merge_math]") {
  const std::uint64_t seed = test_seed();
  INFO("seed " << seed << " (rerun with AOTINFER_TEST_SEED=" << seed << ")");
  std::mt19937_64 rng(seed);
  int empty_halves = 0, masked_halves = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    INFO("trial " << trial);
    const Keys keys = random_keys(rng);
    const std::size_t n = keys.scores.size();
    // Split points cover both ends, so that either half may be empty.
    std::size_t cut = (trial % 7 == 0) ? 0 : (trial % 7 == 1) ? n : std::size_t(rng() % (n + 1));
    const Keys first = keys.slice(0, cut), second = keys.slice(cut, n);
    const State whole = keys.attend();
    const State a = first.attend(), b = second.attend();
    empty_halves += first.scores.empty() || second.scores.empty();
    masked_halves += (std::isinf(a.lse) && !first.scores.empty()) || (std::isinf(b.lse) && !second.scores.empty());
    check_close(merge(a, b), whole);
  }
  CHECK(empty_halves > 0);
  CHECK(masked_halves > 0);
}

TEST_CASE("merging many parts in any grouping equals attention over the whole set", "[merge_math]") {
  const std::uint64_t seed = test_seed();
  INFO("seed " << seed << " (rerun with AOTINFER_TEST_SEED=" << seed << ")");
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 1000; ++trial) {
    INFO("trial " << trial);
    const Keys keys = random_keys(rng);
    const std::size_t n = keys.scores.size();
    std::vector<std::size_t> cuts = {0, n};
    for (std::size_t p = rng() % 6; p > 0; --p) cuts.push_back(rng() % (n + 1));  // duplicates give empty parts
    std::sort(cuts.begin(), cuts.end());
    std::vector<State> parts;
    for (std::size_t i = 0; i + 1 < cuts.size(); ++i) parts.push_back(keys.slice(cuts[i], cuts[i + 1]).attend());

    const State whole = keys.attend();
    State left = parts.front();
    for (std::size_t i = 1; i < parts.size(); ++i) left = merge(left, parts[i]);
    State right = parts.back();
    for (std::size_t i = parts.size() - 1; i-- > 0;) right = merge(parts[i], right);
    check_close(left, whole);
    check_close(right, whole);
  }
}

TEST_CASE("merge with an empty state is the identity and two empty states stay empty", "[merge_math]") {
  const std::uint64_t seed = test_seed();
  INFO("seed " << seed << " (rerun with AOTINFER_TEST_SEED=" << seed << ")");
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 500; ++trial) {
    INFO("trial " << trial);
    const Keys keys = random_keys(rng);
    const State x = keys.attend();
    const State empty = attend({}, {}, keys.head_dim);
    const State masked = attend({-kInf}, {std::vector<double>(keys.head_dim, 9.0)});
    for (const State& e : {empty, masked, State{{}, -kInf}}) {
      CHECK(identical(merge(x, e), x));
      CHECK(identical(merge(e, x), x));
    }
  }
  const State zero4{std::vector<double>(4, 0.0), -kInf};
  State both = merge(attend({}, {}, 4), attend({-kInf}, {{1.0, 2.0, 3.0, 4.0}}));
  CHECK(both.v == std::vector<double>(4, 0.0));
  CHECK(both.lse == -kInf);
  CHECK(identical(merge(zero4, zero4), zero4));
  CHECK_FALSE(std::isnan(both.lse));
}

TEST_CASE("merge is commutative", "[merge_math]") {
  const std::uint64_t seed = test_seed();
  INFO("seed " << seed << " (rerun with AOTINFER_TEST_SEED=" << seed << ")");
  std::mt19937_64 rng(seed);
  int nontrivial = 0;
  for (int trial = 0; trial < 1000; ++trial) {
    INFO("trial " << trial);
    Keys k = random_keys(rng);
    const std::size_t cut = rng() % (k.scores.size() + 1);
    const State a = k.slice(0, cut).attend(), b = k.slice(cut, k.scores.size()).attend();
    const State ab = merge(a, b), ba = merge(b, a);
    CHECK(same_up_to_rounding(ab, ba));
    nontrivial += !std::isinf(a.lse) && !std::isinf(b.lse);
  }
  CHECK(nontrivial > 0);
}
