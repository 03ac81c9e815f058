// merge_state benchmark: achieved bandwidth against the device's own copy bandwidth, measured
// in the same run. Prints a table; bench/run.sh adds the PyTorch peer.
// Usage: aotinfer_bench PACKAGE_DIR
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "aotinfer/merge_state.hpp"

namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

// Median of `iters` timings of `body(i)` after `warmup` untimed calls.
template <typename Body>
double median_us(int warmup, int iters, Body&& body) {
  for (int i = 0; i < warmup; ++i) body(i);
  std::vector<double> times;
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  for (int i = 0; i < iters; ++i) {
    cudaEventRecord(start);
    body(i);
    cudaEventRecord(stop);
    check(cudaEventSynchronize(stop), "timed region");
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    times.push_back(ms * 1e3);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s PACKAGE_DIR\n", argv[0]);
    return 2;
  }
  aotinfer::Package pkg = aotinfer::Package::open(argv[1]);
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "device properties");
  const size_t l2 = size_t(prop.l2CacheSize);

  // The ceiling: a large device-to-device copy, counting bytes read plus bytes written.
  const size_t copy_bytes = size_t(1) << 30;
  void *src = nullptr, *dst = nullptr;
  check(cudaMalloc(&src, copy_bytes), "malloc");
  check(cudaMalloc(&dst, copy_bytes), "malloc");
  check(cudaMemset(src, 1, copy_bytes), "memset");
  const double copy_us = median_us(3, 20, [&](int) { cudaMemcpyAsync(dst, src, copy_bytes, cudaMemcpyDeviceToDevice); });
  const double copy_gbs = 2.0 * copy_bytes / copy_us / 1e3;
  cudaFree(src);
  cudaFree(dst);
  std::printf("device %s, %d SMs, L2 %.0f MB; copy bandwidth %.0f GB/s (read + write)\n\n", prop.name,
              prop.multiProcessorCount, l2 / 1e6, copy_gbs);

  std::printf("%-34s %10s %10s %10s %8s\n", "merge_state (bf16, 32 heads, hd 128)", "MB moved", "time us", "GB/s", "of copy");
  const int heads = 32, head_dim = 128;
  aotinfer::MergeState op(pkg, aotinfer::DType::bf16, head_dim);
  for (long tokens : {512L, 4096L, 32768L}) {
    const long rows = tokens * heads;
    const size_t v_bytes = size_t(rows) * head_dim * 2, s_bytes = size_t(rows) * 4;
    const size_t moved = 3 * v_bytes + 3 * s_bytes;
    // Enough input sets that consecutive runs never find their data in L2.
    const int sets = int(std::max<size_t>(2, (3 * l2) / moved + 1));
    std::vector<aotinfer_merge_state_params> params;
    std::vector<void*> buffers;
    for (int s = 0; s < sets; ++s) {
      void *va, *vb, *vo, *sa, *sb, *so;
      for (auto [ptr, bytes] : {std::pair{&va, v_bytes}, {&vb, v_bytes}, {&vo, v_bytes}, {&sa, s_bytes}, {&sb, s_bytes}, {&so, s_bytes}}) {
        check(cudaMalloc(ptr, bytes), "malloc");
        check(cudaMemset(*ptr, 0x3c, bytes), "memset");  // 0x3c3c: a normal bf16 (~0.011) and float
        buffers.push_back(*ptr);
      }
      params.push_back({va, (float*)sa, vb, (float*)sb, vo, (float*)so, rows});
    }
    const double us = median_us(5, 50, [&](int i) { op.run(params[i % sets], nullptr); });
    check(cudaGetLastError(), "merge_state");
    char name[64];
    std::snprintf(name, sizeof name, "tokens %ld", tokens);
    const double gbs = moved / us / 1e3;
    std::printf("%-34s %10.1f %10.1f %10.0f %7.0f%%\n", name, moved / 1e6, us, gbs, 100 * gbs / copy_gbs);
    for (void* p : buffers) cudaFree(p);
  }
  return 0;
}
