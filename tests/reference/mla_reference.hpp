// fp64 CPU reference for multi-head latent attention decode over a paged latent cache: the
// oracle of the batch_mla_decode GPU tests. It follows templates/aotinfer/params/batch_mla_decode.h
// literally and prefers obviousness to speed (requests are independent).
//
// Request b has kv_len = L keys and q_len new tokens; token t (0 .. q_len - 1) of head h sees keys
// j = 0 .. L - q_len + t:
//   s_j = (dot(q_nope[b, t, h], ckv_j) + dot(q_pe[b, t, h], kpe_j)) * sm_scale
//   o   = softmax(s) . ckv,   lse = log(sum_j exp(s_j))   (natural log)
// No keys (L = 0) give o = 0, lse = -inf.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace aotinfer::reference {

constexpr int kMlaCkv = 512, kMlaKpe = 64;

// A paged latent cache on the host (values as stored), in CSR form.
struct MlaCache {
  int page_size = 0;
  std::vector<double> ckv, kpe;  // [num_pages, page_size, 512] and [num_pages, page_size, 64]
  std::vector<std::int32_t> indptr, indices, last_page_len;

  int kv_len(int b) const {
    const int pages = indptr[b + 1] - indptr[b];
    return pages == 0 ? 0 : (pages - 1) * page_size + last_page_len[b];
  }
  // Cache row of key j of request b.
  std::size_t row(int b, int j) const { return std::size_t(indices[indptr[b] + j / page_size]) * page_size + j % page_size; }
};

// q_nope [batch * q_len, heads, 512], q_pe [batch * q_len, heads, 64] (dense, token-major);
// fills o [batch * q_len, heads, 512] and lse [batch * q_len, heads].
inline void mla_decode_request(const MlaCache& cache, int b, int q_len, int heads, const std::vector<double>& q_nope,
                               const std::vector<double>& q_pe, double sm_scale, std::vector<double>& o,
                               std::vector<double>& lse) {
  const int L = cache.kv_len(b);
  std::vector<double> s;
  for (int t = 0; t < q_len; ++t)
    for (int h = 0; h < heads; ++h) {
      const std::size_t r = (std::size_t(b) * q_len + t) * heads + h;
      const double* qn = q_nope.data() + r * kMlaCkv;
      const double* qp = q_pe.data() + r * kMlaKpe;
      double* out = o.data() + r * kMlaCkv;
      std::fill(out, out + kMlaCkv, 0.0);
      const int keys = L == 0 ? 0 : L - q_len + t + 1;
      if (keys <= 0) {
        lse[r] = -std::numeric_limits<double>::infinity();
        continue;
      }
      s.assign(keys, 0.0);
      double m = -std::numeric_limits<double>::infinity();
      for (int j = 0; j < keys; ++j) {
        const std::size_t row = cache.row(b, j);
        const double* c = cache.ckv.data() + row * kMlaCkv;
        const double* k = cache.kpe.data() + row * kMlaKpe;
        double dot = 0;
        for (int d = 0; d < kMlaCkv; ++d) dot += qn[d] * c[d];
        for (int d = 0; d < kMlaKpe; ++d) dot += qp[d] * k[d];
        s[j] = dot * sm_scale;
        m = std::max(m, s[j]);
      }
      double sum = 0;
      for (int j = 0; j < keys; ++j) {
        const double p = std::exp(s[j] - m);
        sum += p;
        const double* c = cache.ckv.data() + cache.row(b, j) * kMlaCkv;
        for (int d = 0; d < kMlaCkv; ++d) out[d] += p * c[d];
      }
      for (int d = 0; d < kMlaCkv; ++d) out[d] /= sum;
      lse[r] = m + std::log(sum);
    }
}

}  // namespace aotinfer::reference
