// Batch prefill benchmark: achieved tensor throughput (TF/s; a causal mask counts half the score
// matrix, as FlashAttention reports it) on ragged and paged KV, with the paged/ragged ratio and
// plan() host time. Writes its rows as JSON lines for bench/prefill_torch.py, which measures
// PyTorch SDPA (flash, cuDNN) on the same shapes and prints the comparison.
// Usage: aotinfer_bench_prefill PACKAGE_DIR RESULTS.jsonl   (AOTINFER_BENCH_ONLY=ragged:causal:4:4096:8
// runs that row only, and a comma-separated list those rows; ...:8:64 names one of head_dim 64,
// 96 or 256, ragged:causal:1:32768:8:q256 a chunked prefill; AOTINFER_BENCH_SINKS=1 passes
// attention sinks to every run, AOTINFER_BENCH_PAGE=64 another page size than 16,
// AOTINFER_BENCH_KV=e4m3 (or e5m2) an fp8 K/V cache under the bf16 queries; the features of
// bench_util.hpp, such as AOTINFER_BENCH_ROPE=1, apply to every row; AOTINFER_BENCH_MASK=custom
// or custom-holes runs every row under a custom mask, see below)
// MLA prefill rows (DeepSeek-V3 / Kimi K2: head_dim 192 for q and K, head_dim_vo 128 for V and o,
// 128 query and KV heads, bf16, causal, 4 x 4096) have their own table and names:
// ragged:causal:4:4096:128:192v128 and paged:causal:4:4096:128:192v128:p64 (page 64 whatever
// AOTINFER_BENCH_PAGE says); bench/prefill_torch.py and bench/mla_prefill_peer.py time the peers.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "aotinfer/batch_prefill.hpp"
#include "bench_util.hpp"

namespace {

using bench::check;
using bench::median_us;

// Random values of magnitude near 1 in a 16-bit type or fp8 (timing on zeros can flatter a
// kernel; the fp8 patterns are never NaN).
void fill(void* p, size_t bytes, size_t element = 2) {
  std::mt19937 rng(11);
  if (element == 1) {
    std::vector<unsigned char> host(bytes);
    for (auto& x : host) x = static_cast<unsigned char>(0x30 | (rng() & 0x87));
    check(cudaMemcpy(p, host.data(), bytes, cudaMemcpyHostToDevice), "fill");
    return;
  }
  std::vector<unsigned short> host(bytes / 2);
  for (auto& x : host) x = static_cast<unsigned short>(0x3c00 | (rng() & 0x80ff));
  check(cudaMemcpy(p, host.data(), bytes, cudaMemcpyHostToDevice), "fill");
}

void* device(size_t bytes) {
  void* p = nullptr;
  check(cudaMalloc(&p, std::max<size_t>(bytes, 256)), "malloc");
  return p;
}

struct Case {
  aotinfer::KvStorage storage;
  bool causal;
  int batch, len, kv_heads;
  int head_dim = 128;
  int qo_len = 0;  // query tokens per request, the last of its len keys; 0: len (whole prompts)
  int head_dim_vo = 0;  // V and o rows; 0: head_dim (an MLA prefill row otherwise)
  int qo_heads = 0;     // 0: the table's 32
  int page = 0;         // paged: 0: the run's page size (AOTINFER_BENCH_PAGE)
};

}  // namespace

int main(int argc, char** argv) {
  bench::Session run = bench::start(argc, argv);
  const aotinfer::Package& pkg = run.pkg;
  std::ofstream& results = run.results;

  const int qo_heads = 32;
  const int page = std::getenv("AOTINFER_BENCH_PAGE") ? std::atoi(std::getenv("AOTINFER_BENCH_PAGE")) : 16;
  if (page < 1 || 1024 % page != 0) {
    std::fprintf(stderr, "AOTINFER_BENCH_PAGE must divide 1024 (the shortest request), got %d\n", page);
    return 2;
  }
  const aotinfer::KvSplit kv_split = bench::kv_split_from_env();
  const bench::Features features = bench::features_from_env();
  const char* kv_env = std::getenv("AOTINFER_BENCH_KV");
  const std::optional<aotinfer::DType> kv_dtype = aotinfer::parse_dtype(kv_env ? kv_env : "bf16");
  if (!kv_dtype || (*kv_dtype != aotinfer::DType::bf16 && aotinfer::dtype_size(*kv_dtype) != 1)) {
    std::fprintf(stderr, "AOTINFER_BENCH_KV must be bf16, e4m3 or e5m2, got %s\n", kv_env);
    return 2;
  }
  const size_t kv_element = aotinfer::dtype_size(*kv_dtype);
  // AOTINFER_BENCH_MASK=custom: every row under a custom mask of the same work, its bits the
  // causal mask's (causal rows) or every key (none rows): the cost of reading the bits.
  // AOTINFER_BENCH_MASK=custom-holes: the same bits with one in two cleared at random, so that
  // every tile a row sees needs the per-element work (the tiles past the causal edge stay clear).
  const std::string mask_env = std::getenv("AOTINFER_BENCH_MASK") ? std::getenv("AOTINFER_BENCH_MASK") : "";
  if (!mask_env.empty() && mask_env != "custom" && mask_env != "custom-holes") {
    std::fprintf(stderr, "AOTINFER_BENCH_MASK must be custom or custom-holes, got %s\n", mask_env.c_str());
    return 2;
  }
  const bool custom = !mask_env.empty(), holes = mask_env == "custom-holes";
  if (custom)
    std::printf("(every row under a custom mask: the causal mask's bits, or every key's%s)\n",
                holes ? ", one in two cleared at random" : "");
  std::printf("\nbatch_prefill: bf16 q and o, %s K/V, %d qo heads, qo_len = kv_len, paged: page %d NHD, kv_split %s %d, %s\n",
              std::string(aotinfer::dtype_name(*kv_dtype)).c_str(), qo_heads, page, aotinfer::kv_split_name(kv_split.mode), kv_split.tokens,
              features.describe().c_str());
  std::printf("%-7s %-7s %5s %6s %4s %4s %5s %6s %6s %10s %8s\n", "kv", "mask", "batch", "len", "kvh", "hd", "tile", "split",
              "ctas", "time us", "TF/s");
  std::vector<Case> cases;
  for (int kv_heads : {32, 8})
    for (bool causal : {true, false})
      for (auto [batch, len] : {std::pair{16, 1024}, {4, 4096}, {1, 16384}})
        for (auto storage : {aotinfer::KvStorage::ragged, aotinfer::KvStorage::paged})
          cases.push_back({storage, causal, batch, len, kv_heads});
  // The other head dims on the mid-size shape.
  for (int head_dim : {64, 96, 256})
    for (bool causal : {true, false})
      for (auto storage : {aotinfer::KvStorage::ragged, aotinfer::KvStorage::paged})
        cases.push_back({storage, causal, 4, 4096, 8, head_dim});
  // Chunked prefill: a few queries on long KV, split plans whose merge_varlen is part of run().
  for (auto [batch, len, qo] : {std::tuple{1, 32768, 256}, {4, 16384, 512}, {1, 131072, 64}})
    for (auto storage : {aotinfer::KvStorage::ragged, aotinfer::KvStorage::paged})
      cases.push_back({storage, true, batch, len, 8, 128, qo});
  // MLA prefill (DeepSeek-V3, Kimi K2): head_dim 192 / head_dim_vo 128, 128 query = KV heads,
  // causal 4 x 4096; ragged, and paged at page 64.
  cases.push_back({aotinfer::KvStorage::ragged, true, 4, 4096, 128, 192, 0, 128, 128});
  cases.push_back({aotinfer::KvStorage::paged, true, 4, 4096, 128, 192, 0, 128, 128, 64});

  const bench::OnlyRows only;
  bool chunked_header = false, mla_header = false;
  const bool sinks = std::getenv("AOTINFER_BENCH_SINKS") && std::string(std::getenv("AOTINFER_BENCH_SINKS")) == "1";
  if (sinks) std::printf("(every run with attention sinks)\n");
  constexpr int kMaxHeads = 128;  // the MLA rows'
  float* d_sinks = static_cast<float*>(device(kMaxHeads * sizeof(float)));
  check(cudaMemset(d_sinks, 0, kMaxHeads * sizeof(float)), "sinks");  // logit 0: the values do not change the time
  for (const Case& c : cases) {
    const bool mla = c.head_dim_vo != 0 && c.head_dim_vo != c.head_dim;
    const int heads = c.qo_heads ? c.qo_heads : qo_heads, page_size = c.page ? c.page : page;
    const std::string kv_name = c.storage == aotinfer::KvStorage::paged ? "paged" : "ragged";
    const std::string mask = c.causal ? "causal" : "none";
    const std::string name = kv_name + ":" + mask + ":" + std::to_string(c.batch) + ":" + std::to_string(c.len) + ":" +
                             std::to_string(c.kv_heads) +
                             (mla ? ":" + std::to_string(c.head_dim) + "v" + std::to_string(c.head_dim_vo)
                                  : c.head_dim == 128 ? "" : ":" + std::to_string(c.head_dim)) +
                             (c.qo_len ? ":q" + std::to_string(c.qo_len) : "") +
                             (c.page && c.storage == aotinfer::KvStorage::paged ? ":p" + std::to_string(c.page) : "");
    const int head_dim = c.head_dim, head_dim_vo = c.head_dim_vo ? c.head_dim_vo : c.head_dim;
    if (only.skips(name)) continue;
    if (mla && !mla_header) {
      mla_header = true;
      std::printf("\nMLA prefill (DeepSeek-V3 / Kimi K2): head_dim 192 (q, K) / head_dim_vo 128 (V, o), bf16, qo_len = kv_len;\n"
                  "TF/s = 2 (192 + 128) x causal pairs (half the score matrix) x heads / time\n"
                  "%-7s %-7s %5s %6s %4s %4s %7s %4s %5s %6s %6s %10s %8s\n", "kv", "mask", "batch", "len", "qoh", "kvh", "hd/vo",
                  "page", "tile", "split", "ctas", "time us", "TF/s");
    }
    aotinfer::BatchPrefillConfig cfg;
    cfg.head_dim = head_dim;
    cfg.head_dim_vo = c.head_dim_vo;
    cfg.num_qo_heads = heads;
    cfg.num_kv_heads = c.kv_heads;
    cfg.kv_storage = c.storage;
    cfg.page_size = page_size;
    cfg.mask = custom ? aotinfer::MaskMode::custom : c.causal ? aotinfer::MaskMode::causal : aotinfer::MaskMode::none;
    cfg.kv_split = kv_split;
    cfg.window_left = features.window_left;
    cfg.dtype_kv = *kv_dtype;
    if (features.rope) cfg.pos_encoding = aotinfer::PosEncoding::rope_llama;
    if (features.alibi) cfg.pos_encoding = aotinfer::PosEncoding::alibi;
    if (!bench::has_variant<aotinfer::BatchPrefill>(pkg, cfg)) {
      if (mla)
        std::printf("%-7s %-7s %5d %6d %4d %4d %3d/%3d  (not in the package: skipped)\n", kv_name.c_str(), mask.c_str(), c.batch,
                    c.len, heads, c.kv_heads, head_dim, head_dim_vo);
      else
        std::printf("%-7s %-7s %5d %6d %4d %4d  (not in the package: skipped)\n", kv_name.c_str(), mask.c_str(), c.batch, c.len,
                    c.kv_heads, head_dim);
      continue;
    }
    aotinfer::BatchPrefill prefill(pkg, cfg);

    const int qo = c.qo_len ? c.qo_len : c.len;
    const long tokens = long(c.batch) * qo;
    const size_t q_bytes = size_t(tokens) * heads * head_dim * 2, o_bytes = size_t(tokens) * heads * head_dim_vo * 2;
    // Pages hold exactly the keys; V rows head_dim_vo wide.
    const size_t k_bytes = size_t(c.batch) * c.len * c.kv_heads * head_dim * kv_element;
    const size_t v_bytes = size_t(c.batch) * c.len * c.kv_heads * head_dim_vo * kv_element;
    std::vector<int> qo_indptr(c.batch + 1), kv_indptr(c.batch + 1), last(c.batch, page_size);
    const int pages_per_req = c.len / page_size;
    for (int i = 0; i <= c.batch; ++i) {
      qo_indptr[i] = i * qo;
      kv_indptr[i] = c.storage == aotinfer::KvStorage::paged ? i * pages_per_req : i * c.len;
    }
    std::vector<int> indices(c.batch * pages_per_req);
    for (size_t i = 0; i < indices.size(); ++i) indices[i] = int(i);
    std::shuffle(indices.begin(), indices.end(), std::mt19937(7));  // pages scattered as in a real pool

    void *q = device(q_bytes), *o = device(o_bytes), *k = device(k_bytes), *v = device(v_bytes);
    fill(q, q_bytes), fill(k, k_bytes, kv_element), fill(v, v_bytes, kv_element);
    int *d_qo = static_cast<int*>(device(qo_indptr.size() * 4)), *d_kv = static_cast<int*>(device(kv_indptr.size() * 4));
    int *d_last = static_cast<int*>(device(last.size() * 4)), *d_indices = static_cast<int*>(device(indices.size() * 4));
    check(cudaMemcpy(d_qo, qo_indptr.data(), qo_indptr.size() * 4, cudaMemcpyHostToDevice), "upload");
    check(cudaMemcpy(d_kv, kv_indptr.data(), kv_indptr.size() * 4, cudaMemcpyHostToDevice), "upload");
    check(cudaMemcpy(d_last, last.data(), last.size() * 4, cudaMemcpyHostToDevice), "upload");
    check(cudaMemcpy(d_indices, indices.data(), indices.size() * 4, cudaMemcpyHostToDevice), "upload");

    const aotinfer::WorkspaceSizes sizes = prefill.workspace_sizes(tokens, c.batch, c.len);
    aotinfer::Workspace ws{device(sizes.float_bytes), sizes.float_bytes, device(sizes.int_bytes), sizes.int_bytes};
    if (c.storage == aotinfer::KvStorage::paged)
      prefill.plan_paged(qo_indptr, kv_indptr, last, indices, int(indices.size()), ws, nullptr);
    else
      prefill.plan_ragged(qo_indptr, kv_indptr, ws, nullptr);

    aotinfer::PrefillRunArgs args;
    args.batch = c.batch;
    args.total_q = tokens;
    args.q = q, args.qo_indptr = d_qo, args.k = k, args.v = v, args.kv_indptr = d_kv;
    args.kv_indices = d_indices, args.kv_last_page_len = d_last, args.o = o;
    if (sinks) args.sinks = d_sinks;
    args.logits_soft_cap = features.soft_cap;
    void* d_mask = nullptr;
    if (custom) {  // each request's qo x len bits (whole bytes: len is a multiple of 8), as the mask keeps them
      const std::size_t row_bytes = std::size_t(c.len) / 8, request_bytes = std::size_t(qo) * row_bytes;
      std::vector<std::uint8_t> bits(c.batch * request_bytes, 0xff);
      std::vector<int> mask_indptr(c.batch + 1);
      for (int i = 0; i <= c.batch; ++i) mask_indptr[i] = int(i * request_bytes);
      if (c.causal)
        for (int i = 0; i < c.batch; ++i)
          for (int t = 0; t < qo; ++t)
            for (int j = c.len - qo + t + 1; j < c.len; ++j) bits[i * request_bytes + t * row_bytes + j / 8] &= ~(1u << (j % 8));
      if (holes) {
        std::mt19937 rng(5);
        for (std::uint8_t& b : bits) b &= std::uint8_t(rng());
      }
      d_mask = device(bits.size() + 4 * (c.batch + 1));
      check(cudaMemcpy(d_mask, bits.data(), bits.size(), cudaMemcpyHostToDevice), "upload");
      check(cudaMemcpy(static_cast<char*>(d_mask) + bits.size(), mask_indptr.data(), 4 * (c.batch + 1), cudaMemcpyHostToDevice), "upload");
      args.custom_mask = static_cast<const std::uint8_t*>(d_mask);
      args.mask_indptr = reinterpret_cast<const std::int32_t*>(static_cast<char*>(d_mask) + bits.size());
    }
    const double us = median_us(3, 20, [&](int) { prefill.run(args, nullptr); });
    check(cudaGetLastError(), "prefill");
    // Query t of qo sees len - qo + t + 1 keys under a causal mask: about qo (len - qo / 2).
    const double keys_seen = double(qo) * c.len - (c.causal ? 0.5 * qo * qo : 0.0);
    // Two GEMMs per (query, key) pair and head: q.k over head_dim, p.v over head_dim_vo, 2 flops
    // per multiply-add: flops = 2 (head_dim + head_dim_vo) x pairs x heads (4 head_dim x ... when
    // equal; MLA: 2 (192 + 128) x causal pairs x heads, the pairs half the score matrix).
    const double flops = 2.0 * (head_dim + head_dim_vo) * c.batch * keys_seen * heads;
    const double tflops = flops / us / 1e6;
    const auto& plan = prefill.work_plan();
    if (mla) {  // its own table; prefill_torch.py times SDPA on the shape
      std::printf("%-7s %-7s %5d %6d %4d %4d %3d/%3d %4s %5d %6s %6d %10.1f %8.1f\n", kv_name.c_str(), mask.c_str(), c.batch, c.len,
                  heads, c.kv_heads, head_dim, head_dim_vo, c.storage == aotinfer::KvStorage::paged ? std::to_string(page_size).c_str() : "-",
                  plan.tile_rows, plan.split ? "yes" : "no", plan.padded_work * c.kv_heads, us, tflops);
      if (!custom)
        results << "{\"kv\": \"" << kv_name << "\", \"causal\": " << (c.causal ? "true" : "false") << ", \"batch\": " << c.batch
                << ", \"len\": " << c.len << ", \"qo_heads\": " << heads << ", \"kv_heads\": " << c.kv_heads << ", \"head_dim\": "
                << head_dim << ", \"head_dim_vo\": " << head_dim_vo << ", \"page\": " << page_size << ", \"us\": " << us
                << ", \"flops\": " << flops << "}\n";
    } else if (c.qo_len) {  // its own table, and no row for prefill_torch.py (whose shapes have qo = len)
      if (!chunked_header) {
        chunked_header = true;
        std::printf("\nchunked prefill: causal, queries at the end of the KV, split plans (run() includes merge_varlen)\n"
                    "%-7s %5s %6s %6s %4s %4s %6s %8s %10s %8s\n", "kv", "batch", "qo", "kv_len", "kvh", "hd", "split",
                    "merged", "time us", "TF/s");
      }
      std::printf("%-7s %5d %6d %6d %4d %4d %6s %8d %10.1f %8.1f\n", kv_name.c_str(), c.batch, qo, c.len, c.kv_heads,
                  head_dim, plan.split ? "yes" : "no", plan.num_outputs(), us, tflops);
    } else {
      std::printf("%-7s %-7s %5d %6d %4d %4d %5d %6s %6d %10.1f %8.1f\n", kv_name.c_str(), mask.c_str(), c.batch, c.len,
                  c.kv_heads, head_dim, plan.tile_rows, plan.split ? "yes" : "no", plan.padded_work * c.kv_heads, us, tflops);
      if (!custom)  // prefill_torch.py's peers run the built-in masks
        results << "{\"kv\": \"" << kv_name << "\", \"causal\": " << (c.causal ? "true" : "false") << ", \"batch\": " << c.batch
              << ", \"len\": " << c.len << ", \"kv_heads\": " << c.kv_heads << ", \"head_dim\": " << head_dim << ", \"us\": " << us
              << ", \"flops\": " << flops << "}\n";
    }
    for (void* p : {q, o, k, v, static_cast<void*>(d_qo), static_cast<void*>(d_kv), static_cast<void*>(d_last),
                    static_cast<void*>(d_indices), ws.float_buffer, ws.int_buffer, d_mask})
      cudaFree(p);
  }
  if (only) return 0;

  // plan() host time for ragged batches of 1k-token prompts.
  std::printf("\nplan() host time (ragged, causal, 32/8 heads, 1024-token requests; median of 200)\n%-6s %10s\n", "batch", "us");
  aotinfer::BatchPrefillConfig cfg;
  cfg.kv_storage = aotinfer::KvStorage::ragged;
  if (!bench::has_variant<aotinfer::BatchPrefill>(pkg, cfg)) {
    std::printf("(its variant is not in the package: skipped)\n");
    return 0;
  }
  aotinfer::BatchPrefill prefill(pkg, cfg);
  const aotinfer::WorkspaceSizes sizes = prefill.workspace_sizes(256 * 1024, 256);
  aotinfer::Workspace ws{device(sizes.float_bytes), sizes.float_bytes, device(sizes.int_bytes), sizes.int_bytes};
  for (int batch : {1, 16, 64, 256}) {
    std::vector<int> indptr(batch + 1);
    for (int i = 0; i <= batch; ++i) indptr[i] = i * 1024;
    std::vector<double> times;
    for (int r = 0; r < 220; ++r) {
      check(cudaDeviceSynchronize(), "sync");
      auto t0 = std::chrono::steady_clock::now();
      prefill.plan_ragged(indptr, indptr, ws, nullptr);
      auto t1 = std::chrono::steady_clock::now();
      if (r >= 20) times.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    }
    std::sort(times.begin(), times.end());
    std::printf("%-6d %10.2f\n", batch, times[times.size() / 2]);
    results << "{\"plan_batch\": " << batch << ", \"plan_us\": " << times[times.size() / 2] << "}\n";
  }
  return 0;
}
