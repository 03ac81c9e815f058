// Kernel resources at build time: seal reads registers, shared memory, stack and launch info
// from each cubin into the manifest (and records PTX), and refuses code that cannot launch on a
// chip it runs on, naming variant, entry, arch, chip and limit. Real nvcc builds of tiny specs.
#include "catch.hpp"
#include "test_util.hpp"

#include <cstdlib>
#include <filesystem>
#include <string>

#include "aotinfer/files.hpp"
#include "aotinfer/manifest.hpp"
#include "aotinfer/package.hpp"

#ifdef AOTINFER_GEN_EXE

namespace fs = std::filesystem;
using aotinfer::read_file;
using aotinfer::write_file_atomic;
using aotinfer::test::TempDir;
using aotinfer_test::Contains;

namespace {

// A family whose one entry asks for `smem_kib` KiB of dynamic shared memory per CTA.
constexpr const char* kBigSmemFamily = R"(#pragma once
#include "aotinfer/abi.h"
#include "aotinfer/annotate.h"
#include "aotinfer/params/merge_state.h"

namespace aotinfer {
template <int smem_kib>
struct AOTINFER_FAMILY("big_smem") AOTINFER_VALUES("smem_kib", 64, 120) big_smem {
  static constexpr aotinfer_launch_info fill_launch = make_launch_info<aotinfer_merge_state_params>(128, smem_kib * 1024);
  AOTINFER_ENTRY static __device__ void fill(const aotinfer_merge_state_params& p) {
    extern __shared__ float staged[];
    staged[threadIdx.x] = p.s_a[threadIdx.x];
    __syncthreads();
    p.s_out[threadIdx.x] = staged[127 - threadIdx.x];
  }
};
}  // namespace aotinfer
)";

struct Built {
  int status;
  std::string output;
};

Built gen_build(const fs::path& spec, const fs::path& out, const std::string& extra = "") {
  const fs::path log = out.string() + ".log";
  const std::string cmd = std::string("'") + AOTINFER_GEN_EXE + "' build '" + spec.string() + "' -o '" + out.string() + "' -j 2 " +
                          extra + " > '" + log.string() + "' 2>&1";
  const int raw = std::system(cmd.c_str());
  return {WIFEXITED(raw) ? WEXITSTATUS(raw) : -1, read_file(log)};
}

}  // namespace

TEST_CASE("seal records PTX and each arch's registers, threads and shared memory per entry", "[build][slow][resources]") {
  TempDir tmp;
  const fs::path spec = tmp.path / "spec.json";
  write_file_atomic(spec, R"({"format": 1, "package": {"name": "res", "version": "0.1.0"}, "archs": ["sm_80", "sm_89"],
    "ptx": "compute_80", "families": {"merge_state": {"matrix": {"dtype": "bf16", "head_dim": 128}}}})");
  const Built b = gen_build(spec, tmp.path / "out");
  INFO(b.output);
  REQUIRE(b.status == 0);
  const aotinfer::Package pkg = aotinfer::Package::open(tmp.path / "out" / "package");
  CHECK(pkg.manifest().ptx == "compute_80");
  REQUIRE(pkg.manifest().variants.size() == 1);
  const aotinfer::ManifestVariant& v = pkg.manifest().variants[0];
  CHECK(v.archs == std::vector<std::string>{"sm_80", "sm_89"});
  CHECK(v.ptx == std::vector<std::string>{"compute_80"});
  REQUIRE(v.resources.size() == 2);
  for (std::size_t i = 0; i < 2; ++i) {
    INFO(v.resources[i].arch);
    CHECK(v.resources[i].arch == v.archs[i]);
    REQUIRE(v.resources[i].kernels.size() == v.entries.size());
    for (std::size_t k = 0; k < v.entries.size(); ++k) {
      const aotinfer::KernelResources& r = v.resources[i].kernels[k];
      CHECK(r.entry == v.entries[k].name);
      CHECK(r.threads == 128);  // merge_state's CTA (templates/merge_state.cuh)
      CHECK(r.dynamic_smem == 0);
      CHECK((r.registers >= 8 && r.registers <= 255));
    }
  }
  // The manifest round-trips them, and the package is whole.
  CHECK(aotinfer::Manifest::load(tmp.path / "out" / "package" / "manifest.json") == pkg.manifest());
  CHECK(pkg.verify().empty());
}

TEST_CASE("seal refuses code whose shared memory exceeds a chip it runs on, naming variant, arch, chip and limit",
          "[build][slow][resources]") {
  TempDir tmp;
  const fs::path templates = tmp.path / "templates";
  fs::create_directories(templates);
  fs::copy(AOTINFER_SOURCE_DIR "/templates/aotinfer", templates / "aotinfer", fs::copy_options::recursive);
  write_file_atomic(templates / "big_smem.cuh", kBigSmemFamily);
  const std::string with_templates = "--templates '" + templates.string() + "'";

  // 120 KiB fits sm_80 (163 KiB) and sm_90, but sm_80 code also runs on the 99 KiB chips 8.6-8.9.
  const fs::path spec = tmp.path / "big.json";
  write_file_atomic(spec, R"({"format": 1, "package": {"name": "big", "version": "0.1.0"}, "archs": ["sm_80", "sm_90"],
    "families": {"big_smem": {"matrix": {"smem_kib": [64, 120]}}}})");
  const Built refused = gen_build(spec, tmp.path / "out", with_templates);
  INFO(refused.output);
  CHECK(refused.status == 1);
  CHECK_THAT(refused.output, Contains("this package holds code that cannot launch on a chip it runs on (3 cases)") &&
                                 Contains("variant big_smem.smem_kib-120: entry 'fill' (sm_80 code) needs 122880 bytes") &&
                                 Contains("sm_89 allows at most 101376 bytes (99 KiB), and its sm_80 code is what runs there") &&
                                 Contains("sm_86 allows") && Contains("The package was not sealed"));
  CHECK_FALSE(refused.output.find("smem_kib-64:") != std::string::npos);  // 64 KiB fits every chip
  CHECK_FALSE(fs::exists(tmp.path / "out" / "package" / "manifest.json"));

  // The limit itself is allowed: 64 KiB is exactly what Turing gives a CTA.
  write_file_atomic(spec, R"({"format": 1, "package": {"name": "big", "version": "0.1.0"}, "archs": ["sm_75"],
    "families": {"big_smem": {"matrix": {"smem_kib": 64}}}})");
  const Built turing = gen_build(spec, tmp.path / "out75", with_templates);
  INFO(turing.output);
  CHECK(turing.status == 0);
  const aotinfer::Package pkg = aotinfer::Package::open(tmp.path / "out75" / "package");
  REQUIRE(pkg.manifest().variants.at(0).resources.size() == 1);
  CHECK(pkg.manifest().variants[0].resources[0].kernels.at(0).dynamic_smem == 65536);
}

#endif  // AOTINFER_GEN_EXE
