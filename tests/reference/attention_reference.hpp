// fp64 CPU reference for attention states, shared by the CPU and GPU tests.
//
// A state is what attention over a set of keys leaves for one row (one query, one head): the
// softmax-weighted sum of the value vectors, v, and the log-sum-exp of the scores, lse (natural
// log). Attention over no keys (or only masked keys, score -inf) is the empty state: v = 0,
// lse = -inf. merge() combines the states of two disjoint key sets into the state of their
// union, as params/merge_state.h specifies; everything is computed in double.
#pragma once
#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

namespace aotinfer::reference {

struct State {
  std::vector<double> v;  // head_dim values
  double lse;             // log(sum(exp(scores))), -inf for no keys
};

// Attention of one row: values[i] (head_dim entries each) belongs to key i with score scores[i].
// head_dim is taken from values[0] unless given; give it when there may be no keys at all.
inline State attend(const std::vector<double>& scores, const std::vector<std::vector<double>>& values,
                    std::size_t head_dim = 0) {
  assert(scores.size() == values.size());
  if (head_dim == 0 && !values.empty()) head_dim = values[0].size();
  State out{std::vector<double>(head_dim, 0.0), -std::numeric_limits<double>::infinity()};
  double max = -std::numeric_limits<double>::infinity();
  for (double s : scores) max = std::max(max, s);
  if (max == -std::numeric_limits<double>::infinity()) return out;  // no keys, or all masked
  double sum = 0;
  for (std::size_t i = 0; i < scores.size(); ++i) {
    const double w = std::exp(scores[i] - max);  // <= 1: no overflow for any score range
    sum += w;
    for (std::size_t d = 0; d < head_dim; ++d) out.v[d] += w * values[i][d];
  }
  for (double& x : out.v) x /= sum;
  out.lse = max + std::log(sum);
  return out;
}

// An attention sink (params/batch_decode.h): a logit with a zero value row, i.e. the state of a
// key set whose lse is `sink` and whose values are zero. merge() it into a row's state.
inline State sink_state(double sink, std::size_t head_dim) { return State{std::vector<double>(head_dim, 0.0), sink}; }

// The state of the union of two disjoint key sets (params/merge_state.h):
//   lse = log(exp(a.lse) + exp(b.lse)),  v = exp(a.lse - lse) * a.v + exp(b.lse - lse) * b.v,
// two empty states give v = 0, lse = -inf. An empty state may have an empty v (no head_dim known);
// it then counts as zeros of the other state's size.
inline State merge(const State& a, const State& b) {
  const std::size_t head_dim = std::max(a.v.size(), b.v.size());
  assert(a.v.size() == head_dim || a.v.empty());
  assert(b.v.size() == head_dim || b.v.empty());
  State out{std::vector<double>(head_dim, 0.0), -std::numeric_limits<double>::infinity()};
  const double max = std::max(a.lse, b.lse);
  if (max == -std::numeric_limits<double>::infinity()) return out;
  const double wa = std::exp(a.lse - max), wb = std::exp(b.lse - max);  // one of them is 1
  const double sum = wa + wb;
  out.lse = max + std::log(sum);
  for (std::size_t d = 0; d < head_dim; ++d) {
    const double va = d < a.v.size() ? a.v[d] : 0.0, vb = d < b.v.size() ? b.v[d] : 0.0;
    out.v[d] = (wa * va + wb * vb) / sum;
  }
  return out;
}

}  // namespace aotinfer::reference
