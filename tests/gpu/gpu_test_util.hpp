// Helpers shared by GPU tests: the package under test, checked CUDA calls, device buffers,
// host-side half/bfloat16 conversion, the error norm every comparison uses, the run-time features
// every attention variant serves (windows, soft caps) and a package as an older version built it.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "catch.hpp"
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "aotinfer/attention.hpp"
#include "aotinfer/dtype.hpp"
#include "aotinfer/package.hpp"

namespace gpu_test {

#define CUDA_CHECK(expr)                                                                   \
  do {                                                                                     \
    cudaError_t err_ = (expr);                                                             \
    if (err_ != cudaSuccess) FAIL(#expr << ": " << cudaGetErrorString(err_));               \
  } while (0)

// The package to test: $AOTINFER_TEST_PACKAGE (tests/gpu/run.sh sets it).
inline const aotinfer::Package& package() {
  static aotinfer::Package pkg = [] {
    const char* dir = std::getenv("AOTINFER_TEST_PACKAGE");
    if (!dir) throw std::runtime_error("set AOTINFER_TEST_PACKAGE to a built package folder");
    return aotinfer::Package::open(dir);
  }();
  return pkg;
}

// A seed per run, printed so that a failure can be replayed with AOTINFER_TEST_SEED.
inline std::uint64_t fresh_seed() {
  if (const char* s = std::getenv("AOTINFER_TEST_SEED")) return std::strtoull(s, nullptr, 10);
  return std::random_device{}() ^ (std::uint64_t(std::random_device{}()) << 32);
}

// Declares `rng`, seeded by fresh_seed(), and names the seed in every failure report of the
// enclosing test case (Catch's INFO lasts to the end of the scope).
#define SEEDED_RNG(rng)                                                   \
  const std::uint64_t rng##_seed = fresh_seed();                          \
  INFO("seed " << rng##_seed << " (AOTINFER_TEST_SEED replays it)");       \
  std::mt19937_64 rng(rng##_seed)

template <typename T>
struct DeviceBuffer {
  T* ptr = nullptr;
  std::size_t count = 0;
  explicit DeviceBuffer(std::size_t n) : count(n) {
    if (cudaMalloc(&ptr, std::max<std::size_t>(n, 1) * sizeof(T)) != cudaSuccess) throw std::bad_alloc();
  }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(DeviceBuffer&& other) noexcept : ptr(other.ptr), count(other.count) { other.ptr = nullptr; }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void upload(const std::vector<T>& host) { REQUIRE(cudaMemcpy(ptr, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice) == cudaSuccess); }
  std::vector<T> download() const {
    std::vector<T> host(count);
    REQUIRE(cudaMemcpy(host.data(), ptr, count * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess);
    return host;
  }
  // All-ones bytes: NaN in every float format, so an unwritten element fails any comparison.
  void poison() { REQUIRE(cudaMemset(ptr, 0xff, std::max<std::size_t>(count, 1) * sizeof(T)) == cudaSuccess); }
};

// A device copy of a host vector (a one-element allocation when it is empty).
template <typename T>
DeviceBuffer<T> on_device(const std::vector<T>& host) {
  DeviceBuffer<T> b(host.size());
  if (!host.empty()) b.upload(host);
  return b;
}

// Device workspaces of the sizes a front-end's workspace_sizes() gives.
struct Workspace {
  DeviceBuffer<std::uint8_t> floats, ints;
  aotinfer::Workspace ws;
  explicit Workspace(aotinfer::WorkspaceSizes s) : floats(s.float_bytes), ints(s.int_bytes) {
    ws = {floats.ptr, s.float_bytes, ints.ptr, s.int_bytes};
  }
};

// 16-bit element storage with host conversion for the dtypes the tests use.
inline std::uint16_t to_bits(double x, aotinfer::DType t) {
  if (t == aotinfer::DType::f16) { __half h = __double2half(x); return *reinterpret_cast<std::uint16_t*>(&h); }
  __nv_bfloat16 b = __float2bfloat16(float(x));
  return *reinterpret_cast<std::uint16_t*>(&b);
}
inline double from_bits(std::uint16_t bits, aotinfer::DType t) {
  if (t == aotinfer::DType::f16) return __half2float(*reinterpret_cast<__half*>(&bits));
  return __bfloat162float(*reinterpret_cast<__nv_bfloat16*>(&bits));
}
// x rounded to the 16-bit type t (f16 or bf16).
inline double round_to(double x, aotinfer::DType t) { return from_bits(to_bits(x, t), t); }

// ||out - ref|| / ||ref|| over all elements; NaN if any output is NaN.
inline double relative_error(const std::vector<double>& out, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < out.size(); ++i) {
    num += (out[i] - ref[i]) * (out[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

inline double tolerance(aotinfer::DType t) { return t == aotinfer::DType::bf16 ? 1e-2 / 2 : 1e-3; }

// A sliding window's window_left (plan-time: the configs' window_left) in its three regimes: 0
// (the last key or a query's own only), small (1-64: the window's start falls inside one KV
// tile) and medium (65 to `medium`: long requests still split inside it).
inline std::int32_t random_window_left(std::mt19937_64& rng, std::int32_t medium = 3000) {
  switch (std::uniform_int_distribution<int>(0, 2)(rng)) {
    case 0: return 0;
    case 1: return std::uniform_int_distribution<std::int32_t>(1, 64)(rng);
    default: return std::uniform_int_distribution<std::int32_t>(65, std::max(65, medium))(rng);
  }
}

// A logits soft cap (a run-time argument), log-uniform from 1 (squashes most scores) to 50
// (barely touches them).
inline float random_soft_cap(std::mt19937_64& rng) {
  return float(std::exp(std::uniform_real_distribution<double>(0, std::log(50.0))(rng)));
}

// A package as an aotinfer version before kernel ABI 2 built it, when sliding_window and soft_cap
// were variant axes: the package under test's manifest with those two axes (false in every
// variant) added to the given families, alone in a fresh folder. The ops must refuse such a
// family before they load any kernel, so the manifest is all it needs. `made` is false (and the
// folder empty) when the package under test records none of the given families without those
// axes (a manifest from before families were recorded, or from before kernel ABI 2).
struct OldAxesPackage {
  std::filesystem::path dir;
  bool made = false;

  // `axes`: the former axes' names, each with its values (the first is every variant's).
  explicit OldAxesPackage(const std::vector<std::string>& families,
                          const std::vector<std::pair<std::string, std::vector<std::string>>>& axes = {
                              {"sliding_window", {"false", "true"}}, {"soft_cap", {"false", "true"}}}) {
    dir = std::filesystem::temp_directory_path() / ("aotinfer-old-axes-" + std::to_string(std::random_device{}()));
    std::filesystem::create_directories(dir);
    aotinfer::Manifest m = package().manifest();
    const auto listed = [&](const std::string& name) { return std::find(families.begin(), families.end(), name) != families.end(); };
    for (aotinfer::ManifestFamily& f : m.families) {
      if (!listed(f.name)) continue;
      bool has_one = false;
      for (const auto& axis : axes) has_one |= f.axis(axis.first) != nullptr;
      if (has_one) continue;
      for (const auto& [name, values] : axes)
        f.axes.push_back({name, values[0] == "false" ? "bool" : "enum", values, values[0], {}});
      made = true;
    }
    if (!made) return;
    for (aotinfer::ManifestVariant& v : m.variants)
      if (listed(v.key.family))
        for (const auto& [name, values] : axes) v.key.axes.push_back({name, values[0]});
    std::ofstream(dir / "manifest.json") << m.dump();
  }
  ~OldAxesPackage() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  OldAxesPackage(const OldAxesPackage&) = delete;
  OldAxesPackage& operator=(const OldAxesPackage&) = delete;
};

}  // namespace gpu_test
