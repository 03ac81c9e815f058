// BatchPrefill::plan() host time on the CPU alone: no GPU, no CUDA runtime, no driver.
//
// Columns, per batch of ragged causal 1024-token requests (32 query / 8 KV heads, the H100
// limits of bench_prefill.cpp's plan() section: 132 SMs, 128-row large and 64-row small query
// tiles), once with the Hopper kernel's 128-key KV tiles and once with the mma.sync kernel's
// 32 (head_dim 128):
//   plan_prefill_work  the work partition alone (prefill_plan.hpp, into the plan's vectors);
//   plan + image       what plan_ragged() does on the host: kv_indptr to lengths, the partition
//                      and the int workspace image it copies to the device, without the two
//                      driver calls (the event wait before and the async copy after).
// Each is the median of many calls on one reused plan and image, as BatchPrefill reuses them.
// A last row plans one 256-token request on 32k keys (chunked prefill), a split plan.
// Usage: aotinfer_bench_prefill_plan_cpu [calls]   (default 2000)
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <vector>

#include "aotinfer/prefill_plan.hpp"
#include "planning/prefill_layout.hpp"

namespace {

using aotinfer::detail::PrefillIntLayout;

// plan_ragged()'s host work as runtime/src/ops/batch_prefill.cpp does it, minus the driver calls
// and the workspace checks; `image` stands for the pinned staging buffer (PlanUpload::raw_image).
std::size_t plan_and_image(std::span<const std::int32_t> qo_indptr, std::span<const std::int32_t> kv_indptr,
                           const aotinfer::PrefillPlanLimits& limits, aotinfer::PrefillWorkPlan& work,
                           std::vector<std::int32_t>& kv_lengths, std::vector<char>& image) {
  aotinfer::lengths_from_indptr(kv_indptr, "kv_indptr", kv_lengths);
  PrefillIntLayout layout{0, 0};
  aotinfer::plan_prefill_work(qo_indptr, kv_lengths, limits, work, [&](const aotinfer::PrefillWorkPlan& w) {
    layout = PrefillIntLayout(w.padded_work, w.num_outputs());
    if (image.size() < layout.bytes) image.resize(layout.bytes);
    return layout.arrays(image.data());
  });
  layout.write_counts(image.data(), work);
  return work.split ? layout.bytes : layout.unsplit_bytes;  // what would be uploaded
}

template <typename Body>
double median_us(int calls, Body&& body) {
  for (int i = 0; i < std::max(3, calls / 20); ++i) body();  // warm caches, buffers and page tables
  std::vector<double> times(calls);
  for (double& t : times) {
    const auto t0 = std::chrono::steady_clock::now();
    body();
    const auto t1 = std::chrono::steady_clock::now();
    t = std::chrono::duration<double, std::micro>(t1 - t0).count();
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int calls = argc > 1 ? std::atoi(argv[1]) : 2000;
  if (calls < 1) {
    std::fprintf(stderr, "usage: %s [calls]\n", argv[0]);
    return 2;
  }
  aotinfer::PrefillPlanLimits limits;
  limits.num_sms = 132;
  limits.num_qo_heads = 32;
  limits.num_kv_heads = 8;
  limits.large = {128, 1};
  limits.small = {64, 2};
  limits.causal = true;

  struct Row {
    int batch, qo_len, kv_len;
  };
  for (const int kv_tile : {128, 32}) {
    limits.kv_tile_tokens = kv_tile;
    std::printf("prefill plan() host time, CPU only (ragged, causal, 32/8 heads, tiles 128/64 rows, %d-key KV tiles, "
                "132 SMs; median of %d calls)\n",
                kv_tile, calls);
    std::printf("%-6s %6s %6s %6s %6s %8s %10s %18s %14s\n", "batch", "qo", "kv", "items", "split", "outputs", "image KB",
                "plan_prefill_work", "plan + image");
    for (const Row& r : {Row{1, 1024, 1024}, Row{16, 1024, 1024}, Row{64, 1024, 1024}, Row{256, 1024, 1024}, Row{1, 256, 32768}}) {
      std::vector<std::int32_t> qo_indptr(r.batch + 1), kv_indptr(r.batch + 1);
      for (int i = 0; i <= r.batch; ++i) qo_indptr[i] = i * r.qo_len, kv_indptr[i] = i * r.kv_len;
      aotinfer::PrefillWorkPlan alone, work;
      const std::vector<std::int32_t> kv_lengths = aotinfer::lengths_from_indptr(kv_indptr, "kv_indptr");
      const double plan_us = median_us(calls, [&] { aotinfer::plan_prefill_work(qo_indptr, kv_lengths, limits, alone); });
      std::vector<std::int32_t> lengths;
      std::vector<char> image;
      std::size_t bytes = 0;
      const double image_us = median_us(calls, [&] { bytes = plan_and_image(qo_indptr, kv_indptr, limits, work, lengths, image); });
      std::printf("%-6d %6d %6d %6d %6s %8d %10.1f %18.2f %14.2f\n", r.batch, r.qo_len, r.kv_len, work.num_work,
                  work.split ? "yes" : "no", work.num_outputs(), bytes / 1024.0, plan_us, image_us);
    }
    std::printf("\n");
  }
  return 0;
}
