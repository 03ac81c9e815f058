// fp64 CPU reference for batch prefill: the oracle of the batch_prefill GPU tests. It follows
// templates/aotinfer/params/batch_prefill.h literally and prefers obviousness to speed (rows are
// independent, so callers may compute a sample of them on several threads).
//
// One request with qo_len queries and kv_len keys (q and K rows head_dim wide, V and o rows
// head_dim_vo wide: equal but for MLA models' prefill, 192 / 128); query token t sits at position
// p_t = kv_len - qo_len + t. Query head h reads KV head h / (num_qo_heads / num_kv_heads):
//   q' = round(rope(q, p_t)), k'_j = round(rope(k_j, j))   (rope_llama; round = to the operand
//                                                            type, identity for exact inputs)
//   s_j = dot(q', k'_j) * sm_scale, then s_j = cap * tanh(s_j / cap)   (cap > 0)
//   s_j += alibi_slope(h) * (j - p_t)                                  (alibi)
//   key j is kept when j <= p_t (causal), j >= p_t - window_left (window_left >= 0) and, with a
//   custom mask, mask[t * kv_len + j] is set
//   o = softmax(s) . v,  lse = log(sum(exp(s))); with sinks, merged with sink_state(sinks[h])
// No kept key gives o = 0, lse = -inf (with sinks: lse = sinks[h]).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <functional>
#include <vector>

#include "reference/attention_reference.hpp"
#include "reference/decode_reference.hpp"  // rope_llama, alibi_slope

namespace aotinfer::reference {

struct PrefillParams {
  int num_qo_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;     // q and K rows (the scores' dot products)
  int head_dim_vo = 0;  // V and o rows; 0: head_dim
  bool causal = false;
  bool rope = false;
  bool alibi = false;
  double sm_scale = 0;
  double logits_soft_cap = 0;  // 0: off
  int window_left = -1;        // -1: off
  double rope_rcp_scale = 1;
  double rope_rcp_theta = 1e-4;
  double k_scale = 1;  // dequantisation: keys k * k_scale (after rotation and rounding), values v * v_scale
  double v_scale = 1;
  std::function<double(double)> round_operand = [](double x) { return x; };
  std::vector<double> sinks;  // [num_qo_heads] attention-sink logits, or empty
};

// Keys as the products see them: [kv_len][num_kv_heads][head_dim] in, rotated and rounded out.
inline std::vector<double> prefill_keys(const PrefillParams& p, const std::vector<double>& k, std::int64_t kv_len) {
  std::vector<double> out(k.size());
  const int d = p.head_dim;
  for (std::int64_t j = 0; j < kv_len; ++j)
    for (int h = 0; h < p.num_kv_heads; ++h) {
      const double* src = &k[(j * p.num_kv_heads + h) * d];
      std::vector<double> x = p.rope ? rope_llama(src, d, double(j), p.rope_rcp_scale, p.rope_rcp_theta)
                                     : std::vector<double>(src, src + d);
      for (int e = 0; e < d; ++e) out[(j * p.num_kv_heads + h) * d + e] = p.round_operand(x[e]) * p.k_scale;
    }
  return out;
}

// The width of V and o rows.
inline int value_dim(const PrefillParams& p) { return p.head_dim_vo > 0 ? p.head_dim_vo : p.head_dim; }

// The state of query token t, head h (its v head_dim_vo wide): q_row is its head_dim values;
// keys from prefill_keys, values [kv_len][num_kv_heads][head_dim_vo]; mask: the request's custom
// mask [qo_len][kv_len], or null.
inline State prefill_row(const PrefillParams& p, const double* q_row, std::int64_t t, std::int64_t qo_len,
                         const std::vector<double>& keys, const std::vector<double>& values, std::int64_t kv_len, int h,
                         const std::vector<bool>* mask = nullptr) {
  const int d = p.head_dim, dv = value_dim(p), kv_head = h / (p.num_qo_heads / p.num_kv_heads);
  const std::int64_t pos = kv_len - qo_len + t;
  std::vector<double> q = p.rope ? rope_llama(q_row, d, double(pos), p.rope_rcp_scale, p.rope_rcp_theta)
                                 : std::vector<double>(q_row, q_row + d);
  for (double& x : q) x = p.round_operand(x);
  std::vector<double> scores;
  std::vector<std::int64_t> kept;  // key index of each score
  for (std::int64_t j = 0; j < kv_len; ++j) {
    if (p.causal && j > pos) break;
    if (p.window_left >= 0 && j < pos - p.window_left) continue;
    if (mask && !(*mask)[std::size_t(t * kv_len + j)]) continue;
    const double* key = &keys[(j * p.num_kv_heads + kv_head) * d];
    double s = 0;
    for (int e = 0; e < d; ++e) s += q[e] * key[e];
    s *= p.sm_scale;
    if (p.logits_soft_cap > 0) s = p.logits_soft_cap * std::tanh(s / p.logits_soft_cap);
    if (p.alibi) s += alibi_slope(h, p.num_qo_heads) * double(j - pos);
    scores.push_back(s);
    kept.push_back(j);
  }
  // attend() without copying every value row: o = sum_j w_j v_j / sum_j w_j, w_j = exp(s_j - max).
  State out{std::vector<double>(dv, 0.0), -std::numeric_limits<double>::infinity()};
  const auto with_sink = [&](const State& s) { return p.sinks.empty() ? s : merge(s, sink_state(p.sinks[h], std::size_t(dv))); };
  if (scores.empty()) return with_sink(out);
  double max = scores[0], sum = 0;
  for (double s : scores) max = std::max(max, s);
  for (std::size_t i = 0; i < scores.size(); ++i) {
    const double w = std::exp(scores[i] - max);
    sum += w;
    const double* value = &values[(kept[i] * p.num_kv_heads + kv_head) * dv];
    for (int e = 0; e < dv; ++e) out.v[e] += w * value[e];
  }
  for (double& x : out.v) x *= p.v_scale / sum;
  out.lse = max + std::log(sum);
  return with_sink(out);
}

}  // namespace aotinfer::reference
