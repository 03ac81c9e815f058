// The seesaw schedule of the Hopper MLA decode kernel (aotinfer/mla_decode_sm90.cuh, entry
// `decode_seesaw`, 16-bit caches): its two consumer warpgroups for batches whose row groups are
// full (num_heads x q_len >= 64), where the tensor pipe rather than the copies sets the pace. The
// producer and the stages are the kernel's; only the consumers differ.
//
// Roles: consumer warpgroup kX (warpgroup 1 + kX of the CTA) holds output columns kX * 256 ..
// + 256 and owns the tiles t with t % 2 == kX: it computes their scores S = Q K^T (wgmma, q and
// the stage from shared memory), their softmax, and publishes their weights P (16-bit), rescale
// factors and running maxima in shared memory. Each warpgroup adds every tile to its half of O in
// tile order: its own tiles from P in registers (wgmma A from registers), the other's from the
// published P (A from shared memory). So one warpgroup's softmax runs while the tensor pipe works
// on the other's score product and output products, where decode's schedule leaves the pipe idle
// for every softmax.
//
// Order (a = an even tile, b = a + 1):
//   warpgroup 0: S_a; softmax_a; O += P_a V_a (registers); publish a; O += P_b V_b (shared);
//   warpgroup 1: S_b; O += P_a V_a (shared; runs during softmax_b); softmax_b; O += P_b V_b; publish b.
// The running max is the last published one, so softmax_b starts after publish a, and softmax_a
// (of the next pair) after publish b.
//
// Barriers: published(x) (mbarrier, warpgroup x's publications: P, factors, maxima); the turns
// (named barriers kTurnBarrier + x, 256 threads: a score product is issued once the other
// warpgroup has issued its last, so that the two never share the pipe and both softmaxes start
// late); per stage part k_full and k_empty (the kernel's Shared): a stage's parts have one last
// reader each, kpe the owner's score product and each V half its warpgroup's output product, so
// the owner's half and kpe are refilled first and the next score product starts on them (with
// row copies, part 0's barriers stand for the stage and both warpgroups release it); sums_full
// (both partial row sums written). One P slot serves both warpgroups: each overwrites it only
// after its own product of the other's last P is done, and the other's product of its previous P
// came before that. The row sums l are kept per warpgroup (its own tiles' weights, rescaled by
// every tile's factor) and added at the end.
#pragma once
#include <limits.h>
#include <math.h>
#include <stdint.h>

#include <type_traits>

#include "aotinfer/attention.cuh"
#include "aotinfer/score_fragment.cuh"
#include "aotinfer/sm90.cuh"

namespace aotinfer {

template <typename Kernel, int kX>
struct MlaSeesawConsumer {
  using Params = typename Kernel::Params;
  using Shared = typename Kernel::Shared;
  using Item = typename Kernel::Item;
  using op = typename Kernel::op;
  static constexpr int kRows = Kernel::kRows, kKv = Kernel::kKv, kDim = Kernel::kDim, kBlocks = Kernel::kBlocks;
  static constexpr int kHalf = Kernel::kHalf, kKpePart = Kernel::kKpePart;
  static constexpr int kTurnBarrier = 2;  // and 3 (the kernel's producer barrier is 1)
  static_assert(Kernel::kProducerBarrier < kTurnBarrier, "named barriers apart");

  static __device__ void run(const Params& p, const Shared& sh, const Item& it) {
    const int warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
    const int rows[2] = {16 * warp + lane / 4, 16 * warp + lane / 4 + 8};
    const float scale = p.sm_scale * kLog2e;  // log2 units (score_fragment.cuh)
    float row_m[2] = {-INFINITY, -INFINITY}, row_l[2] = {0.f, 0.f}, alpha[2] = {1.f, 1.f};
    float o[kHalf / 8][4], s[kKv / 8][4];
#pragma unroll
    for (int j = 0; j < kHalf / 8; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
#pragma unroll
    for (int j = 0; j < kKv / 8; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
    auto& o_flat = reinterpret_cast<float(&)[kHalf / 2]>(o);
    auto& s_flat = reinterpret_cast<float(&)[kKv / 2]>(s);
    uint32_t p_frag[kKv / 16][4];
    const int last_key[2] = {Kernel::last_key_of(p, it, rows[0]), Kernel::last_key_of(p, it, rows[1])};

    const uint64_t q_desc = sm90::sw128_desc(sm90::smem_u32(sh.q));
    const uint64_t p_desc = sm90::sw128_desc(sm90::smem_u32(sh.p));
    auto values = [&](int t) {  // this warpgroup's V columns of tile t (MN-major, blocks kKv * 128 apart)
      return sm90::sw128_desc(sm90::smem_u32(sh.stage(t)) + kX * (kHalf / 64) * kKv * 128, kKv * 128);
    };
    // S of an own tile, issued and waited for (as consume_scores issues it). The warpgroups take
    // turns: a score product issued while the other's is issuing would share the tensor pipe
    // with it, and both softmaxes would start late.
    auto scores = [&](int t, int n) {
      const uint64_t k_desc = sm90::sw128_desc(sm90::smem_u32(sh.stage(t)));
      // Column block b's four k16 steps (a step 32 bytes along a 128-byte row).
      auto block = [&](int b, bool first) {
#pragma unroll
        for (int k = 0; k < 4; ++k)
          sm90::wgmma_ss<op>(s_flat, sm90::desc_advance(q_desc, b * kRows * 128 + k * 32),
                                sm90::desc_advance(k_desc, b * kKv * 128 + k * 32), !(first && k == 0));
      };
      sm90::mbar_wait(sh.k_full(t, kKpePart), Shared::parity(t));
      sm90::mbar_wait(sh.k_full(t, 1 + kX), Shared::parity(t));
      sm90::fence_async_shared();
      if (t > 0) sm90::named_barrier_sync<256>(kTurnBarrier + kX);
      sm90::wgmma_fence();
      // kpe and this warpgroup's half first: their stage parts were released and refilled first.
      block(kBlocks - 1, true);
#pragma unroll
      for (int b = 4 * kX; b < 4 * kX + 4; ++b) block(b, false);
      sm90::mbar_wait(sh.k_full(t, 2 - kX), Shared::parity(t));
      sm90::fence_async_shared();
      sm90::wgmma_fence();  // (without it ptxas inserts one on the wait's path and serializes every wgmma)
#pragma unroll
      for (int b = 4 - 4 * kX; b < 8 - 4 * kX; ++b) block(b, false);
      sm90::wgmma_commit();
      if (t + 1 < n) sm90::named_barrier_arrive<256>(kTurnBarrier + 1 - kX);
      sm90::wgmma_wait<0>();
      sm90::pin(s_flat);
      if (sh.parts) sm90::mbar_arrive(sh.k_empty(t, kKpePart));  // the score product is kpe's only reader
    };
    // The own tile's softmax against the last published max, and its weights as A fragments.
    auto softmax = [&](int t) {
      Kernel::tile_softmax(p, it, t, s, row_m, row_l, alpha, scale, last_key);
#pragma unroll
      for (int jj = 0; jj < kKv / 16; ++jj) weights_fragment<op>(p_frag[jj], s, jj);
    };
    // O rescaled by the own tile's factors (no product of this warpgroup in flight), then its
    // output product issued.
    auto own_output = [&](int t) {
      if (__any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f)) rescale_rows(o, alpha);
      const uint64_t v_desc = values(t);
      sm90::wgmma_fence();
#pragma unroll
      for (int jj = 0; jj < kKv / 16; ++jj) sm90::wgmma_rs<op>(o_flat, p_frag[jj], sm90::desc_advance(v_desc, jj * 2048));
      sm90::wgmma_commit();
    };
    // The own tile's P, factors and maxima to the other warpgroup.
    // Every lane has read the other's factors and maxima (other_output) before lane 0 of its quad
    // overwrites them: the warp's lanes meet first.
    auto publish = [&]() {
      __syncwarp();
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        Kernel::store_weights(sh.p, s, h, rows[h], lane);
        if (lane % 4 == 0) {
          sh.alpha[rows[h]] = alpha[h];
          sh.max[rows[h]] = row_m[h];
        }
      }
      sm90::fence_async_shared();  // P is read by the other warpgroup's wgmma (async proxy)
      sm90::mbar_arrive(sh.published(kX));
    };
    // The other warpgroup's tile t: once published, its factors applied to O and l (no product of
    // this warpgroup in flight), its max taken, and its output product issued.
    auto other_output = [&](int t) {
      sm90::mbar_wait(sh.published(1 - kX), uint32_t(t / 2) & 1);
      sm90::mbar_wait(sh.k_full(t, 1 + kX), Shared::parity(t));  // landed long since: the owner's S read it
      const float a[2] = {sh.alpha[rows[0]], sh.alpha[rows[1]]};
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        row_m[h] = sh.max[rows[h]];
        row_l[h] *= a[h];
      }
      if (__any_sync(0xffffffffu, a[0] != 1.f || a[1] != 1.f)) rescale_rows(o, a);
      const uint64_t v_desc = values(t);
      sm90::wgmma_fence();
#pragma unroll
      for (int jj = 0; jj < kKv / 16; ++jj)
        sm90::wgmma_ss<op, /*kBMnMajor=*/true>(o_flat, sm90::desc_advance(p_desc, jj * 32),
                                                  sm90::desc_advance(v_desc, jj * 2048), true);
      sm90::wgmma_commit();
    };
    auto output_done = [&](int t) {
      sm90::wgmma_wait<0>();
      sm90::pin(o_flat);
      sm90::pin(p_frag);
      sm90::mbar_arrive(sh.k_empty(t, 1 + kX));  // this warpgroup is its half's last reader
    };

    sm90::mbar_wait(sh.q_full(), 0);
    const int n = it.num_tiles;
    if constexpr (kX == 0) {
#pragma unroll 1
      for (int a = 0; a < n; a += 2) {
        scores(a, n);
        softmax(a);
        own_output(a);
        publish();
        output_done(a);
        if (a + 1 < n) {
          other_output(a + 1);
          output_done(a + 1);
        }
      }
    } else {
#pragma unroll 1
      for (int b = 1; b < n; b += 2) {
        scores(b, n);
        other_output(b - 1);  // runs during this tile's softmax
        softmax(b);
        output_done(b - 1);
        own_output(b);
        publish();
        output_done(b);
      }
      if (n % 2 == 1) {
        other_output(n - 1);
        output_done(n - 1);
      }
    }

    // Both warpgroups' sums of each row, added: each reads only the other's (the quad's threads
    // hold their own after the shuffles).
    float inv[2], lse[2], l[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      l[h] = row_l[h];
      l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
      l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
      if (lane % 4 == 0) sh.sum[kX * kRows + rows[h]] = l[h];
    }
    sm90::mbar_arrive(sh.sums_full());
    sm90::mbar_wait(sh.sums_full(), 0);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const RowResult r = RowResult::of_sum(row_m[h], l[h] + sh.sum[(1 - kX) * kRows + rows[h]], scale);
      inv[h] = r.inv;
      lse[h] = r.lse;
    }
    Kernel::write_output(p, it, o, inv, kX == 0 ? lse : nullptr, kX);
  }
};

}  // namespace aotinfer
