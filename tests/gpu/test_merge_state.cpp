// merge_state on the GPU, loaded by URI from the package under test, against the fp64 CPU
// reference on freshly drawn shapes and values.
#include "aotinfer/aotinfer.h"
#include "aotinfer/merge_state.hpp"
#include "gpu_test_util.hpp"
#include "reference/attention_reference.hpp"

using namespace gpu_test;
using aotinfer::DType;
namespace ref64 = aotinfer::reference;

namespace {

struct Inputs {
  std::int64_t rows = 0;
  int head_dim = 0;
  DType dtype = DType::f16;
  std::vector<std::uint16_t> v_a, v_b;
  std::vector<float> s_a, s_b;
};

// Values in [-2, 2]; lse mostly finite with a wide spread, and some rows empty on one or both
// sides (-inf), the cases split-KV produces for short requests.
Inputs draw(std::mt19937_64& rng, DType dtype, int head_dim, std::int64_t rows) {
  Inputs in{rows, head_dim, dtype, {}, {}, {}, {}};
  std::uniform_real_distribution<double> value(-2, 2), lse(-20, 20);
  std::uniform_int_distribution<int> kind(0, 9);
  for (std::int64_t i = 0; i < rows * head_dim; ++i) {
    in.v_a.push_back(to_bits(value(rng), dtype));
    in.v_b.push_back(to_bits(value(rng), dtype));
  }
  for (std::int64_t r = 0; r < rows; ++r) {
    int k = kind(rng);
    in.s_a.push_back(k == 0 || k == 2 ? -INFINITY : float(lse(rng)));
    in.s_b.push_back(k == 1 || k == 2 ? -INFINITY : float(lse(rng)));
  }
  return in;
}

struct Reference {
  std::vector<double> v, s;
};

Reference merged_reference(const Inputs& in) {
  Reference ref;
  for (std::int64_t r = 0; r < in.rows; ++r) {
    ref64::State a{{}, in.s_a[r]}, b{{}, in.s_b[r]};
    for (int d = 0; d < in.head_dim; ++d) {
      a.v.push_back(from_bits(in.v_a[r * in.head_dim + d], in.dtype));
      b.v.push_back(from_bits(in.v_b[r * in.head_dim + d], in.dtype));
    }
    ref64::State m = ref64::merge(a, b);
    ref.v.insert(ref.v.end(), m.v.begin(), m.v.end());
    ref.s.push_back(m.lse);
  }
  return ref;
}

void check_lse(const std::vector<float>& out, const std::vector<double>& ref) {
  for (std::size_t r = 0; r < ref.size(); ++r) {
    INFO("row " << r);
    if (std::isinf(ref[r])) {
      REQUIRE(std::isinf(out[r]));
      REQUIRE(out[r] < 0);
    } else {
      REQUIRE(std::abs(out[r] - ref[r]) <= 1e-5 * std::max(1.0, std::abs(ref[r])));
    }
  }
}

std::vector<const aotinfer::ManifestVariant*> merge_variants() {
  auto variants = package().variants("merge_state");
  REQUIRE(!variants.empty());
  return variants;
}

}  // namespace

TEST_CASE("merge_state matches the fp64 reference for every variant in the package", "[gpu]") {
  SEEDED_RNG(rng);
  std::uniform_int_distribution<std::int64_t> row_count(1, 3000);

  for (const auto* variant : merge_variants()) {
    const DType dtype = *aotinfer::parse_dtype(*variant->key.find("dtype"));
    const int head_dim = std::stoi(*variant->key.find("head_dim"));
    // Loaded by URI, as an engine would.
    aotinfer::Kernel kernel = package().kernel(variant->key.uri(), "merge");
    REQUIRE(kernel.launch_info().block[0] > 0);

    for (int trial = 0; trial < 3; ++trial) {
      const std::int64_t rows = trial == 0 ? 1 : row_count(rng);
      INFO(variant->key.uri() << ", rows " << rows);
      Inputs in = draw(rng, dtype, head_dim, rows);
      DeviceBuffer<std::uint16_t> v_a(in.v_a.size()), v_b(in.v_b.size()), v_out(in.v_a.size());
      DeviceBuffer<float> s_a(rows), s_b(rows), s_out(rows);
      v_a.upload(in.v_a); v_b.upload(in.v_b); s_a.upload(in.s_a); s_b.upload(in.s_b);
      v_out.poison(); s_out.poison();

      aotinfer_merge_state_params p{v_a.ptr, s_a.ptr, v_b.ptr, s_b.ptr, v_out.ptr, s_out.ptr, rows};
      const std::uint32_t tile = kernel.launch_info().tile[0];
      kernel.launch(aotinfer::Grid{unsigned((rows + tile - 1) / tile)}, p, nullptr);
      CUDA_CHECK(cudaGetLastError());
      CUDA_CHECK(cudaDeviceSynchronize());

      Reference ref = merged_reference(in);
      std::vector<double> out;
      for (auto bits : v_out.download()) out.push_back(from_bits(bits, dtype));
      const double err = relative_error(out, ref.v);
      INFO("relative error " << err);
      REQUIRE(err < tolerance(dtype));
      check_lse(s_out.download(), ref.s);
    }
  }
}

TEST_CASE("merge_state front-end: in place, without lse output, empty, and through the C API", "[gpu]") {
  SEEDED_RNG(rng);
  const auto* variant = merge_variants().front();
  const DType dtype = *aotinfer::parse_dtype(*variant->key.find("dtype"));
  const int head_dim = std::stoi(*variant->key.find("head_dim"));
  const std::int64_t rows = std::uniform_int_distribution<std::int64_t>(100, 5000)(rng);
  Inputs in = draw(rng, dtype, head_dim, rows);
  Reference ref = merged_reference(in);

  DeviceBuffer<std::uint16_t> v_a(in.v_a.size()), v_b(in.v_b.size());
  DeviceBuffer<float> s_a(rows), s_b(rows);
  v_a.upload(in.v_a); v_b.upload(in.v_b); s_a.upload(in.s_a); s_b.upload(in.s_b);

  aotinfer::MergeState op(package(), dtype, head_dim);
  // In place into v_a, no lse output.
  op.run({v_a.ptr, s_a.ptr, v_b.ptr, s_b.ptr, v_a.ptr, nullptr, rows}, nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<double> out;
  for (auto bits : v_a.download()) out.push_back(from_bits(bits, dtype));
  CHECK(relative_error(out, ref.v) < tolerance(dtype));
  CHECK(s_a.download() == in.s_a);  // untouched

  // Zero rows launch nothing; bad arguments are refused before any launch.
  op.run({nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0}, nullptr);
  CHECK_THROWS_AS(op.run({v_a.ptr, s_a.ptr, nullptr, s_b.ptr, v_a.ptr, nullptr, rows}, nullptr), aotinfer::Error);
  CHECK_THROWS_AS(aotinfer::MergeState(package(), dtype, 80), aotinfer::Error);

  // The C API runs the same kernel.
  aotinfer_package* c_pkg = nullptr;
  REQUIRE(aotinfer_package_open(package().path().c_str(), &c_pkg) == AOTINFER_OK);
  DeviceBuffer<std::uint16_t> v_a2(in.v_a.size()), v_out(in.v_a.size());
  DeviceBuffer<float> s_out(rows);
  v_a2.upload(in.v_a); v_out.poison(); s_out.poison();
  aotinfer_merge_state_params p{v_a2.ptr, s_a.ptr, v_b.ptr, s_b.ptr, v_out.ptr, s_out.ptr, rows};
  std::string dtype_name(aotinfer::dtype_name(dtype));
  REQUIRE(aotinfer_merge_state(c_pkg, dtype_name.c_str(), head_dim, &p, nullptr) == AOTINFER_OK);
  CUDA_CHECK(cudaDeviceSynchronize());
  out.clear();
  for (auto bits : v_out.download()) out.push_back(from_bits(bits, dtype));
  CHECK(relative_error(out, ref.v) < tolerance(dtype));
  check_lse(s_out.download(), ref.s);
  CHECK(aotinfer_merge_state(c_pkg, dtype_name.c_str(), 80, &p, nullptr) == AOTINFER_NOT_FOUND);
  CHECK(std::string(aotinfer_last_error()).find("head_dim=80") != std::string::npos);
  aotinfer_package_close(c_pkg);
}
