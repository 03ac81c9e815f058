// Timing helpers shared by the benchmark programs.
#pragma once
#include <cuda_runtime.h>

#include "aotinfer/attention.hpp"
#include "aotinfer/error.hpp"
#include "aotinfer/package.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace bench {

// AOTINFER_BENCH_ONLY: the rows to run, by name, separated by commas (for profilers and A/B
// runs); unset, every row runs.
struct OnlyRows {
  const char* names = std::getenv("AOTINFER_BENCH_ONLY");
  explicit operator bool() const { return names != nullptr; }
  bool skips(const std::string& name) const {
    if (!names) return false;
    const std::string list = std::string(",") + names + ",";
    return list.find("," + name + ",") == std::string::npos;
  }
};

// AOTINFER_BENCH_KV_SPLIT: the plans' KV split, "adaptive" (unset), "none" or "fixed:<tokens>"
// (batch-invariant modes, aotinfer/attention.hpp), printed in the table's title line.
inline aotinfer::KvSplit kv_split_from_env() {
  const char* text = std::getenv("AOTINFER_BENCH_KV_SPLIT");
  const std::string s = text ? text : "adaptive";
  if (s == "adaptive") return {};
  if (s == "none") return {aotinfer::KvSplit::Mode::none, 0};
  if (s.rfind("fixed:", 0) == 0 && std::atoi(s.c_str() + 6) > 0) return {aotinfer::KvSplit::Mode::fixed, std::atoi(s.c_str() + 6)};
  std::fprintf(stderr, "AOTINFER_BENCH_KV_SPLIT must be adaptive, none or fixed:<tokens>, got %s\n", s.c_str());
  std::exit(2);
}

// Features every row takes: AOTINFER_BENCH_WINDOW=<window_left> (a sliding window; the plan
// reads only its keys), AOTINFER_BENCH_CAP=<logits soft cap>, AOTINFER_BENCH_ROPE=1 (the RoPE
// variants, rotating q and k in the kernel) and AOTINFER_BENCH_ALIBI=1 (ALiBi biases; prefill
// only). Unset: none of them.
struct Features {
  std::int32_t window_left = -1;
  float soft_cap = 0;
  bool rope = false;
  bool alibi = false;
  std::string describe() const {
    return "window_left " + std::to_string(window_left) + ", soft cap " + std::to_string(soft_cap).substr(0, 5) +
           (rope ? ", RoPE in the kernel" : "") + (alibi ? ", ALiBi" : "");
  }
};
inline Features features_from_env() {
  Features f;
  if (const char* w = std::getenv("AOTINFER_BENCH_WINDOW")) f.window_left = std::atoi(w);
  if (const char* c = std::getenv("AOTINFER_BENCH_CAP")) f.soft_cap = float(std::atof(c));
  if (const char* r = std::getenv("AOTINFER_BENCH_ROPE")) f.rope = std::string(r) == "1";
  if (const char* a = std::getenv("AOTINFER_BENCH_ALIBI")) f.alibi = std::string(a) == "1";
  return f;
}

// Whether the package holds the variant an operation (BatchDecode, BatchPrefill) needs for
// `config`: a benchmark skips the rows of the others, so it runs on any package.
template <typename Op, typename Config>
bool has_variant(const aotinfer::Package& pkg, const Config& config) {
  try {
    pkg.find(Op::variant_key(config));
    return true;
  } catch (const aotinfer::Error&) {
    return false;
  }
}

inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

// The median of a run's per-call times.
inline double median_of(std::vector<double> times) {
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// Median of `iters` event-timed calls of body(i), after `warmup` untimed ones, in microseconds.
// The events go on `stream` (the default stream unless given). Each call starts on an idle GPU
// (the host waits for the one before), so its time includes its launches' latency.
template <typename Body>
double median_us(int warmup, int iters, Body&& body, cudaStream_t stream = nullptr) {
  for (int i = 0; i < warmup; ++i) body(i);
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  std::vector<double> times;
  for (int i = 0; i < iters; ++i) {
    cudaEventRecord(start, stream);
    body(i);
    cudaEventRecord(stop, stream);
    check(cudaEventSynchronize(stop), "timed region");
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    times.push_back(ms * 1e3);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return median_of(std::move(times));
}

// The same, with the calls queued back to back and the host waiting once at the end, as a
// model's layers run and as FlashInfer's benchmarks time (events around each call, one
// synchronization): a call's launches overlap the call before, so its time is the GPU's alone.
template <typename Body>
double median_us_queued(int warmup, int iters, Body&& body, cudaStream_t stream = nullptr) {
  for (int i = 0; i < warmup; ++i) body(i);
  check(cudaStreamSynchronize(stream), "warmup");
  std::vector<cudaEvent_t> events(2 * iters);
  for (cudaEvent_t& e : events) cudaEventCreate(&e);
  for (int i = 0; i < iters; ++i) {
    cudaEventRecord(events[2 * i], stream);
    body(i);
    cudaEventRecord(events[2 * i + 1], stream);
  }
  check(cudaStreamSynchronize(stream), "timed region");
  std::vector<double> times;
  for (int i = 0; i < iters; ++i) {
    float ms = 0;
    cudaEventElapsedTime(&ms, events[2 * i], events[2 * i + 1]);
    times.push_back(ms * 1e3);
  }
  for (cudaEvent_t e : events) cudaEventDestroy(e);
  return median_of(std::move(times));
}

// The device's copy bandwidth: a 1 GiB device-to-device copy, counting bytes read plus written.
inline double copy_bandwidth_gbs() {
  const size_t bytes = size_t(1) << 30;
  void *src = nullptr, *dst = nullptr;
  check(cudaMalloc(&src, bytes), "malloc");
  check(cudaMalloc(&dst, bytes), "malloc");
  check(cudaMemset(src, 1, bytes), "memset");
  const double us = median_us(3, 20, [&](int) { cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice); });
  cudaFree(src);
  cudaFree(dst);
  return 2.0 * bytes / us / 1e3;
}

// The start of every benchmark program, `PROG PACKAGE_DIR RESULTS.jsonl`: opens both, prints the
// device and its copy bandwidth (every bandwidth row's yardstick) and records it first.
struct Session {
  aotinfer::Package pkg;
  std::ofstream results;
  cudaDeviceProp prop{};
  double copy_gbs = 0;
};
inline Session start(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s PACKAGE_DIR RESULTS.jsonl\n", argv[0]);
    std::exit(2);
  }
  Session s{aotinfer::Package::open(argv[1]), std::ofstream(argv[2])};
  check(cudaGetDeviceProperties(&s.prop, 0), "device properties");
  check(cudaFree(nullptr), "context");
  s.copy_gbs = copy_bandwidth_gbs();
  std::printf("device %s, %d SMs, L2 %.0f MB; copy bandwidth %.0f GB/s (read + write)\n", s.prop.name,
              s.prop.multiProcessorCount, s.prop.l2CacheSize / 1e6, s.copy_gbs);
  s.results << "{\"copy_gbs\": " << s.copy_gbs << "}\n";
  return s;
}

}  // namespace bench
