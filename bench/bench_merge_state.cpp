// merge_state benchmark: achieved bandwidth against the device's own copy bandwidth, measured
// in the same run. Prints a table; bench/run.sh adds the PyTorch peer.
// Usage: aotinfer_bench PACKAGE_DIR
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "bench_util.hpp"
#include "aotinfer/merge_state.hpp"

namespace {

using bench::check;
using bench::median_us;

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
  const double copy_gbs = bench::copy_bandwidth_gbs();
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
