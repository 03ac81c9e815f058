// Custom masks as engines draw them, packed as FlashInfer packs them (the custom_mask layout of
// aotinfer/params/batch_prefill.h): shared by the prefill and decode GPU tests.
#pragma once
#include <cstdint>
#include <random>
#include <vector>

#include "random_values.hpp"

namespace gpu_test {

enum class MaskShape { random, causal_like, tree, blocks };

inline const char* mask_shape_name(MaskShape s) {
  return s == MaskShape::random        ? "random"
         : s == MaskShape::causal_like ? "causal with holes"
         : s == MaskShape::tree        ? "tree"
                                       : "blocks";
}

// Request i's [qo_lens[i]][kv_lens[i]] bits, row-major, in a shape: random bits (some rows
// empty); causal with random holes; a speculative-decoding tree over the last qo_len keys,
// whose nodes see the whole prefix, themselves and their ancestors; or blocks: runs of rows see
// runs of keys (both 1-300 long) or none of them, so that whole KV tiles, anywhere in a row,
// are unseen by every row of a query tile (bits within a seen block kept at random, or all).
inline std::vector<std::vector<bool>> random_masks(std::mt19937_64& rng, const std::vector<std::int32_t>& qo_lens,
                                                   const std::vector<std::int32_t>& kv_lens, MaskShape shape) {
  std::vector<std::vector<bool>> out;
  for (std::size_t i = 0; i < qo_lens.size(); ++i) {
    const std::int64_t qo = qo_lens[i], kv = kv_lens[i];
    std::vector<bool> m(std::size_t(qo * kv));
    std::vector<std::int64_t> parent(qo, -1);
    for (std::int64_t t = 1; t < qo; ++t) parent[t] = uniform<std::int64_t>(rng, -1, t - 1);
    const double density = uniform(rng, 0.05, 0.95);
    if (shape == MaskShape::blocks) {
      // Run boundaries along the keys, then per run of rows which key runs it sees.
      std::vector<std::int64_t> key_runs{0};
      while (key_runs.back() < kv) key_runs.push_back(std::min<std::int64_t>(kv, key_runs.back() + uniform(rng, 1, 300)));
      const bool dense = uniform(rng, 0, 1) == 0;
      for (std::int64_t t0 = 0; t0 < qo;) {
        const std::int64_t t1 = std::min<std::int64_t>(qo, t0 + uniform(rng, 1, 300));
        for (std::size_t r = 0; r + 1 < key_runs.size(); ++r) {
          if (uniform(rng, 0, 1) == 0) continue;
          for (std::int64_t t = t0; t < t1; ++t)
            for (std::int64_t j = key_runs[r]; j < key_runs[r + 1]; ++j)
              m[std::size_t(t * kv + j)] = dense || uniform(rng, 0.0, 1.0) < density;
        }
        t0 = t1;
      }
      out.push_back(std::move(m));
      continue;
    }
    for (std::int64_t t = 0; t < qo; ++t) {
      const bool empty_row = shape == MaskShape::random && uniform(rng, 0, 15) == 0;
      const std::int64_t pos = kv - qo + t;
      for (std::int64_t j = 0; j < kv; ++j) {
        bool keep = false;
        if (shape == MaskShape::random) keep = !empty_row && uniform(rng, 0.0, 1.0) < density;
        if (shape == MaskShape::causal_like) keep = j <= pos && uniform(rng, 0, 9) != 0;
        if (shape == MaskShape::tree) {
          if (j < kv - qo) keep = true;
          else
            for (std::int64_t a = t; a >= 0 && !keep; a = parent[a]) keep = j == kv - qo + a;
        }
        m[std::size_t(t * kv + j)] = keep;
      }
    }
    out.push_back(std::move(m));
  }
  return out;
}

// Each request's bits row-major, little-endian within a byte, padded to whole bytes with set
// bits; the buffer to a multiple of 4 bytes (the kernels read words) with 0xff: no bit past a
// request's mask may count. indptr: each request's first byte, then the end.
struct PackedMasks {
  std::vector<std::uint8_t> bytes;
  std::vector<std::int32_t> indptr;
};
inline PackedMasks pack_masks(const std::vector<std::vector<bool>>& masks) {
  PackedMasks p;
  p.indptr.assign(1, 0);
  for (const std::vector<bool>& m : masks) {
    const std::size_t at = p.bytes.size();
    p.bytes.resize(at + (m.size() + 7) / 8, 0);
    for (std::size_t b = 0; b < m.size(); ++b)
      if (m[b]) p.bytes[at + b / 8] |= std::uint8_t(1u << (b % 8));
    if (m.size() % 8) p.bytes.back() |= std::uint8_t(0xffu << (m.size() % 8));
    p.indptr.push_back(std::int32_t(p.bytes.size()));
  }
  p.bytes.resize((p.bytes.size() + 3) / 4 * 4 + (p.bytes.empty() ? 4 : 0), 0xff);
  return p;
}

}  // namespace gpu_test
