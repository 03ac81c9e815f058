// Multi-head latent attention decode benchmark: the rows of DeepSeek-V3's and Kimi K2's decode
// (a 512-wide latent and a 64-wide RoPE key per token; 16 heads per GPU under tensor parallelism,
// 128 without), as achieved bandwidth (the cache's ckv and kpe rows plus q and o, each moved once)
// against the device's copy bandwidth, and as TF/s (scores and outputs: rows x keys x 1088 x 2);
// over a bf16 cache, then over an e4m3 one (bf16 q and o), whose rows read half the bytes. Each
// row is timed two ways: a call alone on an idle GPU (its launch latency included), and calls
// queued back to back (as a model's layers run, and as FlashInfer's benchmarks time), from which
// the bandwidth and TF/s columns come.
// Writes its rows as JSON lines for a peer (FlashInfer's MLA wrapper) to run the same shapes.
// Usage: aotinfer_bench_mla_decode PACKAGE_DIR RESULTS.jsonl
//        (AOTINFER_BENCH_ONLY=16:1:64:4096:64:bf16 runs that row only: heads:q_len:batch:kv_len:page:cache)
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "aotinfer/batch_mla_decode.hpp"
#include "bench_util.hpp"

namespace {

using bench::check;
using bench::median_us;
using bench::median_us_queued;

void* device(size_t bytes) {
  void* p = nullptr;
  check(cudaMalloc(&p, std::max<size_t>(bytes, 256)), "malloc");
  return p;
}

// Random values near 1 in magnitude (timing on zeros can flatter a kernel): 16-bit, or e4m3
// (exponent 1, random sign and mantissa).
void fill(void* p, size_t bytes, bool fp8 = false) {
  std::mt19937 rng(576);
  std::vector<unsigned char> host(std::min<size_t>(bytes, 16u << 20));
  for (size_t i = 0; i < host.size(); ++i)
    host[i] = fp8 ? (0x38 | (rng() & 0x87)) : i % 2 ? (0x3c | (rng() & 0x81)) : (rng() & 0xff);
  for (size_t off = 0; off < bytes; off += host.size())
    check(cudaMemcpy(static_cast<char*>(p) + off, host.data(), std::min(host.size(), bytes - off), cudaMemcpyHostToDevice), "fill");
}

struct Case {
  int heads, q_len, batch, kv_len, page;
};

}  // namespace

int main(int argc, char** argv) {
  bench::Session run = bench::start(argc, argv);
  const aotinfer::Package& pkg = run.pkg;
  std::ofstream& results = run.results;
  const double copy_gbs = run.copy_gbs;

  std::vector<Case> cases;
  for (int page : {64, 1})
    for (int q_len : {1, 2})
      for (int batch : {64, 128}) cases.push_back({16, q_len, batch, 4096, page});
  for (int q_len : {1, 2})
    for (int batch : {64, 128}) cases.push_back({128, q_len, batch, 4096, 64});
  cases.push_back({16, 1, 1, 65536, 64});
  cases.push_back({128, 1, 8, 8192, 64});

  const bench::OnlyRows only;
  for (aotinfer::DType kv : {aotinfer::DType::bf16, aotinfer::DType::e4m3}) {
    aotinfer::BatchMlaDecodeConfig cfg;
    cfg.dtype = aotinfer::DType::bf16, cfg.dtype_kv = kv;
    const std::string kv_name(aotinfer::dtype_name(kv));
    const size_t kv_size = aotinfer::dtype_size(kv);
    if (!bench::has_variant<aotinfer::BatchMlaDecode>(pkg, cfg)) {
      std::printf("(batch_mla_decode with a %s cache is not in the package: skipped)\n", kv_name.c_str());
      continue;
    }
    std::printf("\nbatch_mla_decode: bf16 q and o, %s cache; kv_lora_rank 512, qk_rope_head_dim 64; every request kv_len keys\n",
                kv_name.c_str());
    std::printf("%5s %5s %6s %7s %5s %6s %10s %10s %8s %7s %8s\n", "heads", "q_len", "batch", "kv_len", "page", "split",
                "alone us", "queued us", "TB/s", "of copy", "TF/s");
    for (const Case& c : cases) {
      const std::string name = std::to_string(c.heads) + ":" + std::to_string(c.q_len) + ":" + std::to_string(c.batch) + ":" +
                               std::to_string(c.kv_len) + ":" + std::to_string(c.page) + ":" + kv_name;
      if (only.skips(name)) continue;
      cfg.num_heads = c.heads;
      cfg.page_size = c.page;
      aotinfer::BatchMlaDecode mla(pkg, cfg);
      const int pages_per_request = (c.kv_len + c.page - 1) / c.page, num_pages = c.batch * pages_per_request;
      std::vector<std::int32_t> indptr(c.batch + 1), last(c.batch, c.kv_len - (pages_per_request - 1) * c.page);
      for (int b = 0; b <= c.batch; ++b) indptr[b] = b * pages_per_request;
      std::vector<std::int32_t> indices(num_pages);
      std::iota(indices.begin(), indices.end(), 0);
      std::shuffle(indices.begin(), indices.end(), std::mt19937(7));  // pages scattered as in a real pool

      const size_t tokens = size_t(c.batch) * c.q_len, rows = tokens * c.heads;
      const size_t ckv_bytes = size_t(num_pages) * c.page * 512 * kv_size, kpe_bytes = size_t(num_pages) * c.page * 64 * kv_size;
      void* ckv = device(ckv_bytes);
      void* kpe = device(kpe_bytes);
      void* q_nope = device(rows * 512 * 2);
      void* q_pe = device(rows * 64 * 2);
      void* o = device(rows * 512 * 2);
      auto* d_indices = static_cast<std::int32_t*>(device(indices.size() * 4));
      fill(ckv, ckv_bytes, kv_size == 1), fill(kpe, kpe_bytes, kv_size == 1), fill(q_nope, rows * 512 * 2), fill(q_pe, rows * 64 * 2);
      check(cudaMemcpy(d_indices, indices.data(), indices.size() * 4, cudaMemcpyHostToDevice), "indices");
      const aotinfer::WorkspaceSizes sizes = mla.workspace_sizes(c.batch, c.q_len);
      aotinfer::Workspace ws{device(sizes.float_bytes), sizes.float_bytes, device(sizes.int_bytes), sizes.int_bytes};
      mla.plan(indptr, last, indices, num_pages, c.q_len, ws, nullptr);
      aotinfer::MlaDecodeRunArgs a;
      a.batch = c.batch;
      a.q_nope = q_nope, a.q_pe = q_pe, a.ckv = ckv, a.kpe = kpe, a.kv_indices = d_indices, a.o = o;
      a.sm_scale = 1.f / std::sqrt(192.f);
      if (kv_size == 1) a.ckv_scale = 0.05f, a.kpe_scale = 0.04f;
      const double alone_us = median_us(5, 30, [&](int) { mla.run(a, nullptr); });
      const double us = median_us_queued(5, 30, [&](int) { mla.run(a, nullptr); });
      check(cudaGetLastError(), "batch_mla_decode");

      const double cache = double(c.batch) * c.kv_len * 576 * kv_size;
      const double bytes = cache + double(rows) * 576 * 2 + double(rows) * 512 * 2;
      const double flops = double(rows) * c.kv_len * (576 + 512) * 2;
      const double tbs = bytes / us / 1e6;
      std::printf("%5d %5d %6d %7d %5d %6s %10.1f %10.1f %8.2f %6.0f%% %8.1f\n", c.heads, c.q_len, c.batch, c.kv_len,
                  c.page, mla.work_plan().split ? "yes" : "no", alone_us, us, tbs, 100 * tbs * 1e3 / copy_gbs,
                  flops / us / 1e6);
      results << "{\"op\": \"mla_decode\", \"kv\": \"" << kv_name << "\", \"heads\": " << c.heads
              << ", \"q_len\": " << c.q_len << ", \"batch\": " << c.batch << ", \"kv_len\": " << c.kv_len << ", \"page\": " << c.page << ", \"us\": " << us << ", \"alone_us\": " << alone_us << ", \"bytes\": " << bytes
              << ", \"flops\": " << flops << "}\n";
      for (void* p : {ckv, kpe, q_nope, q_pe, o, static_cast<void*>(d_indices), ws.float_buffer, ws.int_buffer}) cudaFree(p);
    }
  }
  return 0;
}
