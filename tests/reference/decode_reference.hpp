// fp64 CPU reference for batch decode over a paged KV cache: the oracle of the batch_decode GPU
// tests. It follows templates/aotinfer/params/batch_decode.h and paged_kv.h literally and prefers
// obviousness to speed (requests are independent, so callers may run them on several threads).
//
// Per request b with kv_len = L, per query token j < q_len (row b * q_len + j of q and o) with
// q_pos = q_positions[b * q_len + j] (or L - q_len + j), per query head h reading KV head
// h / (num_qo_heads / num_kv_heads), over the keys t = 0 .. L-1 of the request (causal, q_len > 1:
// t <= L - q_len + j only; with a custom mask, those whose bit (j, t) is set):
//   q' = round(rope(q, q_pos)), k' = round(rope(k, t)) * k_scale   (rope_llama; round = to the
//                                      operand type; otherwise q' = q, k' = k * k_scale)
//   s  = dot(q', k') * sm_scale
//   s  = cap * tanh(s / cap)                             (cap > 0)
//   s += alibi_slope(h) * (t - q_pos)                    (alibi)
//   key t is dropped when t < L - 1 - window_left         (window_left >= 0: the window counts
//                                      back from the request's last key, whatever q_pos is)
//   o  = softmax(s) . (v * v_scale),  lse = log(sum(exp(s)))  (natural log)
//   with sinks, the row's state merged with sink_state(sinks[h])
// No keys (L = 0, or a custom mask's empty row; a window always keeps the last key) give o = 0, lse = -inf (with sinks:
// lse = sinks[h]). q_pos moves RoPE and ALiBi only.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <vector>

#include "reference/attention_reference.hpp"

namespace aotinfer::reference {

enum class DecodeLayout { nhd, hnd };  // [pages, page_size, heads, dim] / [pages, heads, page_size, dim]
enum class DecodePos { none, rope_llama, alibi };

// A paged KV cache on the host, values as stored (before k_scale / v_scale), in CSR form.
struct PagedCache {
  DecodeLayout layout = DecodeLayout::nhd;
  int page_size = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  std::vector<double> k, v;  // [num_pages * page_size * num_kv_heads * head_dim] in `layout`
  std::vector<std::int32_t> indptr, indices, last_page_len;

  std::int64_t batch() const { return std::int64_t(indptr.size()) - 1; }
  std::int64_t kv_len(std::int64_t b) const {
    const std::int64_t pages = indptr[b + 1] - indptr[b];
    return pages == 0 ? 0 : (pages - 1) * page_size + last_page_len[b];
  }
  // Index of element 0 of token t (request-relative) of request b, KV head h, in k and v.
  std::size_t at(std::int64_t b, std::int64_t t, int h) const {
    const std::int64_t page = indices[indptr[b] + t / page_size], slot = t % page_size;
    const std::int64_t in_page = layout == DecodeLayout::nhd ? (slot * num_kv_heads + h) * head_dim
                                                             : (std::int64_t(h) * page_size + slot) * head_dim;
    return std::size_t(page * page_size * num_kv_heads * head_dim + in_page);
  }
};

struct DecodeParams {
  int num_qo_heads = 0;
  DecodePos pos = DecodePos::none;
  double sm_scale = 0;
  double logits_soft_cap = 0;  // 0: off
  int window_left = -1;        // -1: off; else keys L - 1 - window_left .. L - 1 of a request of L
  double rope_rcp_scale = 1;
  double rope_rcp_theta = 1e-4;
  double k_scale = 1;
  double v_scale = 1;
  int q_len = 1;        // query tokens per request
  bool causal = true;   // q_len > 1: token j sees keys up to L - q_len + j; else every key
  // Per request, or empty: [q_len][L] row-major, token j sees key t where set (causal unread).
  std::vector<std::vector<bool>> custom_mask;
  std::vector<std::int32_t> q_positions;  // [batch * q_len], or empty for q_pos = kv_len - q_len + j
  std::vector<double> sinks;              // [num_qo_heads] attention-sink logits, or empty
  // RoPE variants rotate q and K and round them once to the type of their products.
  std::function<double(double)> round_operand = [](double x) { return x; };
};

// ALiBi slope of head h of n_heads: m0^(h+1) for the first n (largest power of two <= n_heads)
// heads, m1^(2(h-n)+1) for the rest, with m0 = 2^(-8/n), m1 = 2^(-4/n).
inline double alibi_slope(int h, int n_heads) {
  int n = 1;
  while (n * 2 <= n_heads) n *= 2;
  return h < n ? std::pow(2.0, -8.0 * (h + 1) / n) : std::pow(2.0, -4.0 * (2 * (h - n) + 1) / n);
}

// Llama RoPE, non-interleaved ("rotate half"): pairs (i, i + d/2) rotate by pos * freq_i,
// freq_i = rcp_scale * rcp_theta^(2i/d).
inline std::vector<double> rope_llama(const double* x, int d, double pos, double rcp_scale, double rcp_theta) {
  std::vector<double> y(x, x + d);
  for (int i = 0; i < d / 2; ++i) {
    const double angle = pos * rcp_scale * std::pow(rcp_theta, 2.0 * i / d);
    y[i] = x[i] * std::cos(angle) - x[i + d / 2] * std::sin(angle);
    y[i + d / 2] = x[i + d / 2] * std::cos(angle) + x[i] * std::sin(angle);
  }
  return y;
}

// Request b: q is [batch * q_len][num_qo_heads][head_dim]; writes o[q_len * num_qo_heads *
// head_dim] and lse[q_len * num_qo_heads] (its token rows).
inline void decode_request(const std::vector<double>& q, const PagedCache& kv, const DecodeParams& p, std::int64_t b,
                           double* o, double* lse) {
  const int d = kv.head_dim, heads = p.num_qo_heads, group = heads / kv.num_kv_heads;
  const std::int64_t len = kv.kv_len(b);
  const bool rope = p.pos == DecodePos::rope_llama;
  for (int kv_head = 0; kv_head < kv.num_kv_heads; ++kv_head) {
    std::vector<std::vector<double>> keys(len), values(len);
    for (std::int64_t t = 0; t < len; ++t) {
      std::vector<double> key(kv.k.begin() + kv.at(b, t, kv_head), kv.k.begin() + kv.at(b, t, kv_head) + d), value(d);
      if (rope) key = rope_llama(key.data(), d, double(t), p.rope_rcp_scale, p.rope_rcp_theta);
      for (int i = 0; i < d; ++i) {
        key[i] = (rope ? p.round_operand(key[i]) : key[i]) * p.k_scale;
        value[i] = kv.v[kv.at(b, t, kv_head) + i] * p.v_scale;
      }
      keys[t] = key;
      values[t] = value;
    }
    for (int r = 0; r < p.q_len * group; ++r) {  // this KV head's (token j, query head h) pairs
      const int j = r / group, h = kv_head * group + r % group;
      const std::int64_t token = b * p.q_len + j, row = std::int64_t(j) * heads + h;  // row: of the request's
      const std::int64_t q_pos = p.q_positions.empty() ? len - p.q_len + j : p.q_positions[token];
      const std::int64_t last_key = p.causal ? len - p.q_len + j : len - 1;
      const double* q_row = &q[std::size_t((token * heads + h) * d)];
      std::vector<double> qv(q_row, q_row + d);
      if (rope) {
        qv = rope_llama(q_row, d, double(q_pos), p.rope_rcp_scale, p.rope_rcp_theta);
        for (double& x : qv) x = p.round_operand(x);
      }
      std::vector<double> scores(len);
      for (std::int64_t t = 0; t < len; ++t) {
        double s = 0;
        for (int i = 0; i < d; ++i) s += qv[i] * keys[t][i];
        s *= p.sm_scale;
        if (p.logits_soft_cap > 0) s = p.logits_soft_cap * std::tanh(s / p.logits_soft_cap);
        if (p.pos == DecodePos::alibi) s += alibi_slope(h, heads) * double(t - q_pos);
        if (p.window_left >= 0 && t < len - 1 - p.window_left) s = -std::numeric_limits<double>::infinity();
        if (p.custom_mask.empty() ? t > last_key : !p.custom_mask[b][std::size_t(j * len + t)])
          s = -std::numeric_limits<double>::infinity();
        scores[t] = s;
      }
      State state = attend(scores, values, std::size_t(d));
      if (!p.sinks.empty()) state = merge(state, sink_state(p.sinks[h], std::size_t(d)));
      for (int i = 0; i < d; ++i) o[row * d + i] = state.v[i];
      lse[row] = state.lse;
    }
  }
}

struct DecodeResult {
  std::vector<double> o;    // [batch * q_len][num_qo_heads][head_dim]
  std::vector<double> lse;  // [batch * q_len][num_qo_heads]
};

inline DecodeResult decode(const std::vector<double>& q, const PagedCache& kv, const DecodeParams& p) {
  const std::int64_t rows = std::int64_t(p.q_len) * p.num_qo_heads;  // of a request
  DecodeResult r{std::vector<double>(std::size_t(kv.batch() * rows * kv.head_dim)), std::vector<double>(std::size_t(kv.batch() * rows))};
  for (std::int64_t b = 0; b < kv.batch(); ++b)
    decode_request(q, kv, p, b, &r.o[std::size_t(b * rows * kv.head_dim)], &r.lse[std::size_t(b * rows)]);
  return r;
}

}  // namespace aotinfer::reference
