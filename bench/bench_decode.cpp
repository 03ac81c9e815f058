// Batch decode benchmark: achieved bandwidth (bytes of K, V, q and o actually moved / time)
// against the device's copy bandwidth, and plan() host time. Writes its rows as JSON lines for
// bench/decode_torch.py, which measures PyTorch SDPA on the same shapes and prints the ratios.
// Usage: aotinfer_bench_decode PACKAGE_DIR RESULTS.jsonl
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <vector>

#include "bench_util.hpp"
#include "aotinfer/batch_decode.hpp"

namespace {

using bench::check;
using bench::median_us;

// Random finite values, not zeros (timing on zeros can flatter a kernel): a 16 MiB random block
// made on the host, tiled over the buffer with device copies.
void fill(void* p, size_t bytes, bool fp8) {
  static void* seeds[2] = {nullptr, nullptr};
  const size_t block = 16u << 20;
  void*& seed = seeds[fp8];
  if (!seed) {
    std::mt19937 rng(fp8 ? 8 : 16);
    std::vector<unsigned char> host(block);
    for (size_t i = 0; i < block; ++i) {
      const unsigned x = rng();
      // fp8: no NaN patterns; 16-bit (little-endian): high bytes keep magnitudes near 1.
      host[i] = fp8 ? (x & 0x77) : (i % 2 ? (0x3c | (x & 0x81)) : (x & 0xff));
    }
    check(cudaMalloc(&seed, block), "malloc");
    check(cudaMemcpy(seed, host.data(), block, cudaMemcpyHostToDevice), "upload");
  }
  for (size_t off = 0; off < bytes; off += block)
    check(cudaMemcpy(static_cast<char*>(p) + off, seed, std::min(block, bytes - off), cudaMemcpyDeviceToDevice), "fill");
}

// A decode workspace of the given sizes, freed with it.
struct Workspace {
  aotinfer::Workspace ws;
  explicit Workspace(aotinfer::WorkspaceSizes sizes) {
    check(cudaMalloc(&ws.float_buffer, std::max<size_t>(sizes.float_bytes, 256)), "malloc");
    check(cudaMalloc(&ws.int_buffer, sizes.int_bytes), "malloc");
    ws.float_bytes = sizes.float_bytes;
    ws.int_bytes = sizes.int_bytes;
  }
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  ~Workspace() { cudaFree(ws.float_buffer), cudaFree(ws.int_buffer); }
};

struct Case {
  int batch, kv_len;
  aotinfer::DType kv;
  int head_dim = 128;
  aotinfer::PosEncoding pos_encoding = aotinfer::PosEncoding::none;

  // "bf16", or with the variant axes that differ from the main table: "bf16 rope hd256".
  std::string variant() const {
    std::string v(aotinfer::dtype_name(kv));
    if (pos_encoding != aotinfer::PosEncoding::none) v += std::string(" ") + aotinfer::pos_encoding_name(pos_encoding);
    if (head_dim != 128) v += " hd" + std::to_string(head_dim);
    return v;
  }
};

}  // namespace

int main(int argc, char** argv) {
  bench::Session run = bench::start(argc, argv);
  const aotinfer::Package& pkg = run.pkg;
  std::ofstream& results = run.results;
  const cudaDeviceProp& prop = run.prop;
  const double copy_gbs = run.copy_gbs;

  const int qo_heads = 32, kv_heads = 8, page = 16;
  const aotinfer::KvSplit kv_split = bench::kv_split_from_env();
  const bench::Features features = bench::features_from_env();
  std::printf("\nbatch_decode: %d qo / %d kv heads, head_dim 128 unless named, page %d, NHD, kv_split %s %d, %s\n", qo_heads,
              kv_heads, page, aotinfer::kv_split_name(kv_split.mode), kv_split.tokens, features.describe().c_str());
  std::printf("time: eager run(); graph: a graph of one run(), replayed; step: per run() in a graph of 8 back to back (layers)\n");
  std::printf("%-18s %6s %7s %6s %6s %10s %10s %8s %8s %10s %8s %8s %10s %8s %8s\n", "variant", "batch", "kv_len", "split", "ctas",
              "MB moved", "time us", "GB/s", "of copy", "graph us", "GB/s", "of copy", "step us", "GB/s", "of copy");
  std::vector<Case> cases;
  for (auto kv : {aotinfer::DType::bf16, aotinfer::DType::e4m3})
    for (int batch : {1, 16, 64, 256})
      for (int len : {1024, 4096, 32768}) cases.push_back({batch, len, kv});
  // The variants beside the main rows (RoPE, head_dim 96 and 256, an f16 cache under bf16 q) at
  // bs64 x 4k; rows whose variant the package lacks are skipped.
  for (auto kv : {aotinfer::DType::bf16, aotinfer::DType::e4m3, aotinfer::DType::f16})
    for (int head_dim : {96, 128, 256})
      for (auto pe : {aotinfer::PosEncoding::none, aotinfer::PosEncoding::rope_llama})
        if (head_dim != 128 || pe != aotinfer::PosEncoding::none || kv == aotinfer::DType::f16)
          cases.push_back({64, 4096, kv, head_dim, pe});

  if (features.rope)
    for (Case& c : cases) c.pos_encoding = aotinfer::PosEncoding::rope_llama;
  // AOTINFER_BENCH_ONLY="bf16:64:4096,e4m3 rope_llama:64:4096" runs those rows only (bench_util.hpp).
  const bench::OnlyRows only;
  for (const Case& c : cases) {
    const int head_dim = c.head_dim;
    const std::string name = c.variant() + ":" + std::to_string(c.batch) + ":" + std::to_string(c.kv_len);
    if (only.skips(name)) continue;
    aotinfer::BatchDecodeConfig cfg;
    cfg.dtype_q = cfg.dtype_o = aotinfer::DType::bf16;
    cfg.dtype_kv = c.kv;
    cfg.head_dim = head_dim;
    cfg.pos_encoding = c.pos_encoding;
    if (!bench::has_variant<aotinfer::BatchDecode>(pkg, cfg)) {
      std::printf("%-18s %6d %7d  (not in the package: skipped)\n", c.variant().c_str(), c.batch, c.kv_len);
      continue;
    }
    cfg.num_qo_heads = qo_heads;
    cfg.num_kv_heads = kv_heads;
    cfg.page_size = page;
    cfg.kv_split = kv_split;
    cfg.window_left = features.window_left;
    cfg.max_kv_len = c.kv_len;  // sizes a fixed split's CUDA-graph grid

    const int pages_per_req = (c.kv_len + page - 1) / page;
    const int num_pages = c.batch * pages_per_req;
    const size_t elem = aotinfer::dtype_size(c.kv);
    const size_t pool_bytes = size_t(num_pages) * page * kv_heads * head_dim * elem;
    const size_t q_bytes = size_t(c.batch) * qo_heads * head_dim * 2;
    const size_t moved = 2 * pool_bytes + 2 * q_bytes;
    // Rotate among copies of the KV pools so that L2 never serves a run.
    const int sets = int(std::min<size_t>(16, std::max<size_t>(1, 3 * size_t(prop.l2CacheSize) / (2 * pool_bytes) + 1)));

    std::vector<int> indptr(c.batch + 1), last(c.batch), indices(num_pages);
    for (int i = 0; i <= c.batch; ++i) indptr[i] = i * pages_per_req;
    for (int i = 0; i < c.batch; ++i) last[i] = c.kv_len - (pages_per_req - 1) * page;
    for (int i = 0; i < num_pages; ++i) indices[i] = i;
    std::shuffle(indices.begin(), indices.end(), std::mt19937(7));  // pages scattered as in a real pool

    int *d_indptr, *d_last, *d_indices;
    check(cudaMalloc(&d_indptr, indptr.size() * 4), "malloc");
    check(cudaMalloc(&d_last, last.size() * 4), "malloc");
    check(cudaMalloc(&d_indices, indices.size() * 4), "malloc");
    cudaMemcpy(d_indptr, indptr.data(), indptr.size() * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(d_last, last.data(), last.size() * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(d_indices, indices.data(), indices.size() * 4, cudaMemcpyHostToDevice);

    std::vector<void*> k(sets), v(sets);
    void *q, *o;
    bool fits = true;
    for (int s = 0; s < sets && fits; ++s)
      fits = cudaMalloc(&k[s], pool_bytes) == cudaSuccess && cudaMalloc(&v[s], pool_bytes) == cudaSuccess;
    if (!fits) {
      std::printf("%-18s %6d %7d  (does not fit in device memory: skipped)\n", c.variant().c_str(), c.batch, c.kv_len);
      cudaGetLastError();
      for (int s = 0; s < sets; ++s) cudaFree(k[s]), cudaFree(v[s]);
      continue;
    }
    for (int s = 0; s < sets; ++s) fill(k[s], pool_bytes, elem == 1), fill(v[s], pool_bytes, elem == 1);
    check(cudaMalloc(&q, q_bytes), "malloc");
    check(cudaMalloc(&o, q_bytes), "malloc");
    fill(q, q_bytes, false);

    aotinfer::DecodeRunArgs args;
    args.batch = c.batch;
    args.q = q;
    args.kv_indptr = d_indptr;
    args.kv_indices = d_indices;
    args.kv_last_page_len = d_last;
    args.o = o;
    args.logits_soft_cap = features.soft_cap;

    // Eager: plan, then one run() per timed call (host launch included, as an eager engine sees it).
    aotinfer::BatchDecode decode(pkg, cfg);
    Workspace ws(decode.workspace_sizes(c.batch, c.kv_len));
    decode.plan(indptr, last, indices, num_pages, ws.ws, nullptr);
    const double us = median_us(5, 30, [&](int i) {
      args.k_pages = k[i % sets];
      args.v_pages = v[i % sets];
      decode.run(args, nullptr);
    });
    check(cudaGetLastError(), "decode");
    const auto& plan = decode.work_plan();

    // CUDA graph, as engines run decode: a graph-mode decode for this batch, captured once per KV
    // pool copy and replayed.
    cfg.cuda_graph = true;
    cfg.max_batch = c.batch;
    aotinfer::BatchDecode graph_decode(pkg, cfg);
    Workspace graph_ws(graph_decode.workspace_sizes(c.batch, c.kv_len));
    cudaStream_t stream;
    check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
    graph_decode.plan(indptr, last, indices, num_pages, graph_ws.ws, stream);
    std::vector<cudaGraphExec_t> graphs(sets);
    for (int s = 0; s < sets; ++s) {
      args.k_pages = k[s];
      args.v_pages = v[s];
      cudaGraph_t graph;
      check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "capture");
      graph_decode.run(args, stream);
      check(cudaStreamEndCapture(stream, &graph), "capture");
      check(cudaGraphInstantiate(&graphs[s], graph, 0), "instantiate");
      cudaGraphDestroy(graph);
    }
    const double graph_us = median_us(5, 30, [&](int i) { cudaGraphLaunch(graphs[i % sets], stream); }, stream);
    check(cudaGetLastError(), "decode graph");
    for (auto g : graphs) cudaGraphExecDestroy(g);

    // A decode step of a model: kLayers calls back to back in one graph, each on its own KV pool
    // copy (its layer); per call. Successive graphs take the next pool copies, so that L2 serves
    // no call here either.
    constexpr int kLayers = 8;
    std::vector<cudaGraphExec_t> steps((sets + kLayers - 1) / kLayers);
    for (size_t g = 0; g < steps.size(); ++g) {
      cudaGraph_t graph;
      check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "capture");
      for (int layer = 0; layer < kLayers; ++layer) {
        const int s = int(g * kLayers + layer) % sets;
        args.k_pages = k[s];
        args.v_pages = v[s];
        graph_decode.run(args, stream);
      }
      check(cudaStreamEndCapture(stream, &graph), "capture");
      check(cudaGraphInstantiate(&steps[g], graph, 0), "instantiate");
      cudaGraphDestroy(graph);
    }
    const double step_us =
        median_us(3, 15, [&](int i) { cudaGraphLaunch(steps[i % steps.size()], stream); }, stream) / kLayers;
    check(cudaGetLastError(), "decode step graph");
    for (auto g : steps) cudaGraphExecDestroy(g);
    cudaStreamDestroy(stream);

    const double gbs = moved / us / 1e3, graph_gbs = moved / graph_us / 1e3, step_gbs = moved / step_us / 1e3;
    const std::string kv_name(aotinfer::dtype_name(c.kv));
    std::printf("%-18s %6d %7d %6s %6d %10.1f %10.1f %8.0f %7.0f%% %10.1f %8.0f %7.0f%% %10.1f %8.0f %7.0f%%\n", c.variant().c_str(),
                c.batch, c.kv_len, plan.split ? "yes" : "no", plan.padded_work * kv_heads, moved / 1e6, us, gbs, 100 * gbs / copy_gbs,
                graph_us, graph_gbs, 100 * graph_gbs / copy_gbs, step_us, step_gbs, 100 * step_gbs / copy_gbs);
    results << "{\"kv\": \"" << kv_name << "\", \"variant\": \"" << c.variant() << "\", \"batch\": " << c.batch << ", \"kv_len\": " << c.kv_len
            << ", \"us\": " << us << ", \"graph_us\": " << graph_us << ", \"step_us\": " << step_us << ", \"bytes\": " << moved
            << "}\n";

    for (int s = 0; s < sets; ++s) cudaFree(k[s]), cudaFree(v[s]);
    cudaFree(q), cudaFree(o);
    cudaFree(d_indptr), cudaFree(d_last), cudaFree(d_indices);
  }

  if (only) return 0;
  // plan() host time: CSR validation, work partition, staging and the async copy.
  std::printf("\nplan() host time (kv_len 4096, page 16; median of 200)\n%-6s %10s\n", "batch", "us");
  aotinfer::BatchDecodeConfig cfg;
  cfg.num_qo_heads = qo_heads;
  cfg.num_kv_heads = kv_heads;
  if (!bench::has_variant<aotinfer::BatchDecode>(pkg, cfg)) {
    std::printf("(its variant is not in the package: skipped)\n");
    return 0;
  }
  aotinfer::BatchDecode decode(pkg, cfg);
  Workspace ws(decode.workspace_sizes(1024));
  for (int batch : {1, 16, 64, 256, 1024}) {
    std::vector<int> indptr(batch + 1), last(batch, 16);
    for (int i = 0; i <= batch; ++i) indptr[i] = i * 256;
    std::vector<double> times;
    for (int r = 0; r < 220; ++r) {
      // An engine plans once per step, long after the previous plan's copy finished.
      check(cudaDeviceSynchronize(), "sync");
      auto t0 = std::chrono::steady_clock::now();
      decode.plan(indptr, last, {}, 0, ws.ws, nullptr);
      auto t1 = std::chrono::steady_clock::now();
      if (r >= 20) times.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    }
    std::sort(times.begin(), times.end());
    std::printf("%-6d %10.2f\n", batch, times[times.size() / 2]);
    results << "{\"plan_batch\": " << batch << ", \"plan_us\": " << times[times.size() / 2] << "}\n";
  }
  return 0;
}
