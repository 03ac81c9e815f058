// Package queries, verification and the checks that run before any driver call, on a fake
// package built in a temp dir. Nothing here needs a GPU or libcuda.
#include "catch.hpp"

#include "test_util.hpp"

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "aotinfer/aotinfer.h"
#include "aotinfer/files.hpp"
#include "aotinfer/package.hpp"
#include "aotinfer/sha256.hpp"
#include "loading/driver.hpp"

namespace fs = std::filesystem;
using aotinfer::Error;
using aotinfer::ErrorCode;
using aotinfer::ManifestVariant;
using aotinfer::VariantKey;
using aotinfer_test::Contains;

namespace {

using aotinfer::test::TempDir;
using aotinfer::test::error_of;


// A package directory: manifest.json plus one small file per variant under kernels/, with the
// sizes and checksums recorded as the generator would.
struct FakePackage {
  TempDir tmp;
  fs::path dir = tmp.path / "package";
  aotinfer::Manifest manifest;

  FakePackage() {
    manifest.generator = "aotinfer-gen 0.1.0";
    manifest.package_name = "fake-kernels";
    manifest.package_version = "0.0.1";
    manifest.spec_file = "fake.aotinfer.json";
    manifest.spec_sha256 = aotinfer::sha256_hex("spec");
    manifest.archs = {"sm_80", "sm_90a"};
    add({"merge_state", {{"dtype", "bf16"}, {"head_dim", "64"}}}, {"sm_80"});
    add({"merge_state", {{"dtype", "bf16"}, {"head_dim", "128"}}}, {"sm_80", "sm_90a"});
    add({"merge_state", {{"dtype", "f16"}, {"head_dim", "64"}}}, {"sm_80"});
    add({"merge_state", {{"dtype", "f16"}, {"head_dim", "128"}}}, {"sm_80"});
    add({"merge_state", {{"dtype", "f16"}, {"head_dim", "256"}}}, {"sm_90a"});
    add({"rms_norm", {{"dtype", "bf16"}, {"hidden", "4096"}}}, {"sm_80"}, "norm");
    aotinfer::write_file_atomic(dir / "manifest.json", manifest.dump());
  }

  void add(VariantKey key, std::vector<std::string> archs, const std::string& entry = "merge") {
    ManifestVariant v;
    v.entries = {{entry, aotinfer::entry_symbol(key, entry), aotinfer::launch_symbol(key, entry)}};
    v.file = "kernels/" + key.uri() + ".fatbin";
    const std::string content = "not really a fatbin: " + key.uri() + "\n";
    aotinfer::write_file_atomic(dir / v.file, content);
    v.size = content.size();
    v.sha256 = aotinfer::sha256_hex(content);
    v.archs = std::move(archs);
    v.key = std::move(key);
    manifest.variants.push_back(std::move(v));
  }

  fs::path file(const std::string& uri) const { return dir / ("kernels/" + uri + ".fatbin"); }

  // Same size, one byte different.
  void flip_byte(const std::string& uri) const {
    std::string bytes = aotinfer::read_file(file(uri));
    bytes[3] ^= 0x20;
    std::ofstream(file(uri), std::ios::binary | std::ios::trunc) << bytes;
  }
};

std::vector<std::string> uris(const std::vector<const ManifestVariant*>& vs) {
  std::vector<std::string> out;
  for (auto* v : vs) out.push_back(v->key.uri());
  return out;
}

}  // namespace

TEST_CASE("Package::open of a missing package says how to build one", "[package]") {
  TempDir tmp;
  const fs::path dir = tmp.path / "no-package-here";
  Error e = error_of([&] { aotinfer::Package::open(dir); });
  CHECK(e.code() == ErrorCode::not_found);
  CHECK_THAT(e.what(), Contains(dir.string()) && Contains("manifest.json") && Contains("aotinfer-gen build"));
}

TEST_CASE("Package::open of a damaged manifest is corrupt_package", "[package]") {
  FakePackage fake;
  std::ofstream(fake.dir / "manifest.json", std::ios::trunc) << "{\"format\": 1, \"generator\": ";
  Error e = error_of([&] { aotinfer::Package::open(fake.dir); });
  CHECK(e.code() == ErrorCode::corrupt_package);
  CHECK_THAT(e.what(), Contains((fake.dir / "manifest.json").string()));
}

TEST_CASE("Package::open reads the manifest", "[package]") {
  FakePackage fake;
  auto pkg = aotinfer::Package::open(fake.dir);
  CHECK(pkg.path() == fake.dir);
  CHECK(pkg.manifest() == fake.manifest);
  CHECK(pkg.manifest().variants.size() == 6);
  CHECK(pkg.manifest().spec_file == "fake.aotinfer.json");
}

TEST_CASE("Package::variants filters by family and axis values", "[package]") {
  FakePackage fake;
  auto pkg = aotinfer::Package::open(fake.dir);
  using V = std::vector<std::string>;

  CHECK(pkg.variants().size() == 6);
  CHECK(uris(pkg.variants("rms_norm")) == V{"rms_norm.dtype-bf16.hidden-4096"});
  CHECK(pkg.variants("merge_state").size() == 5);
  CHECK(pkg.variants("merge").empty());
  CHECK(uris(pkg.variants("merge_state", {{"dtype", "f16"}})) ==
        V{"merge_state.dtype-f16.head_dim-64", "merge_state.dtype-f16.head_dim-128", "merge_state.dtype-f16.head_dim-256"});
  CHECK(uris(pkg.variants("merge_state", {{"head_dim", "64"}})) ==
        V{"merge_state.dtype-bf16.head_dim-64", "merge_state.dtype-f16.head_dim-64"});
  CHECK(uris(pkg.variants("merge_state", {{"head_dim", "128"}, {"dtype", "bf16"}})) == V{"merge_state.dtype-bf16.head_dim-128"});
  CHECK(pkg.variants("merge_state", {{"head_dim", "512"}}).empty());
  CHECK(pkg.variants("merge_state", {{"hidden", "4096"}}).empty());  // an axis the family lacks
  // No family: every family whose axes match.
  CHECK(uris(pkg.variants({}, {{"dtype", "bf16"}})) ==
        V{"merge_state.dtype-bf16.head_dim-64", "merge_state.dtype-bf16.head_dim-128", "rms_norm.dtype-bf16.hidden-4096"});
  CHECK(uris(pkg.variants({}, {{"hidden", "4096"}})) == V{"rms_norm.dtype-bf16.hidden-4096"});
}

TEST_CASE("Package::find by full and by unique partial key", "[package]") {
  FakePackage fake;
  auto pkg = aotinfer::Package::open(fake.dir);
  const auto& variants = pkg.manifest().variants;

  const ManifestVariant& full = pkg.find("merge_state.dtype-bf16.head_dim-128");
  CHECK(&full == &variants[1]);
  CHECK(full.archs == std::vector<std::string>{"sm_80", "sm_90a"});
  CHECK(&pkg.find(VariantKey{"merge_state", {{"dtype", "f16"}, {"head_dim", "64"}}}) == &variants[2]);
  // Axes may be given in any order.
  CHECK(&pkg.find(VariantKey{"merge_state", {{"head_dim", "64"}, {"dtype", "f16"}}}) == &variants[2]);

  CHECK(&pkg.find("merge_state.head_dim-256") == &variants[4]);
  CHECK(&pkg.find("rms_norm") == &variants[5]);
  CHECK(&pkg.find("rms_norm.hidden-4096") == &variants[5]);
}

TEST_CASE("Package::find of an ambiguous partial key lists the candidates", "[package]") {
  FakePackage fake;
  auto pkg = aotinfer::Package::open(fake.dir);
  Error e = error_of([&] { pkg.find("merge_state.head_dim-64"); });
  CHECK(e.code() == ErrorCode::invalid_argument);
  CHECK_THAT(e.what(), Contains("matches 2 variants") && Contains("merge_state.dtype-bf16.head_dim-64") &&
                           Contains("merge_state.dtype-f16.head_dim-64") && Contains("name more axes"));
  CHECK_THAT(std::string(e.what()), !Contains("head_dim-128"));

  Error all = error_of([&] { pkg.find("merge_state"); });
  CHECK(all.code() == ErrorCode::invalid_argument);
  CHECK_THAT(all.what(), Contains("matches 5 variants"));
}

TEST_CASE("Package::find of a missing variant names it, the nearest ones and the spec", "[package]") {
  FakePackage fake;
  auto pkg = aotinfer::Package::open(fake.dir);
  Error e = error_of([&] { pkg.find("merge_state.dtype-f16.head_dim-96"); });
  CHECK(e.code() == ErrorCode::not_found);
  const std::string msg = e.what();
  INFO(msg);
  CHECK_THAT(msg, Contains("fake-kernels") && Contains(fake.dir.string()));
  CHECK_THAT(msg, Contains("merge_state{dtype=f16, head_dim=96}"));
  CHECK_THAT(msg, Contains("nearest: merge_state.dtype-f16.head_dim-64, merge_state.dtype-f16.head_dim-128, "
                           "merge_state.dtype-f16.head_dim-256"));
  CHECK_THAT(msg, !Contains("dtype-bf16"));  // farther away than the three f16 variants
  CHECK_THAT(msg, Contains("fake.aotinfer.json") && Contains("include"));
  CHECK_THAT(msg, Contains(R"({"dtype":"f16","head_dim":96})"));  // typed: head_dim is a number

  Error by_dtype = error_of([&] { pkg.find(VariantKey{"merge_state", {{"dtype", "e4m3"}, {"head_dim", "256"}}}); });
  CHECK(by_dtype.code() == ErrorCode::not_found);
  CHECK_THAT(by_dtype.what(), Contains("nearest: merge_state.dtype-f16.head_dim-256,"));

  // A partial key that matches nothing is a miss too.
  Error partial = error_of([&] { pkg.find("merge_state.head_dim-512"); });
  CHECK(partial.code() == ErrorCode::not_found);
  CHECK_THAT(partial.what(), Contains("merge_state{head_dim=512}") && Contains("include"));
}

TEST_CASE("Package::find of an unknown family lists the families", "[package]") {
  FakePackage fake;
  auto pkg = aotinfer::Package::open(fake.dir);
  Error e = error_of([&] { pkg.find("softmax.dtype-f16"); });
  CHECK(e.code() == ErrorCode::not_found);
  // The spec has no entry for the family, and an entry needs a matrix: the advice names one.
  CHECK_THAT(e.what(), Contains("no 'softmax' family") && Contains("families: merge_state, rms_norm") &&
                           Contains("put \"softmax\": {\"matrix\": {\"dtype\":\"f16\"}} in \"families\" of fake.aotinfer.json"));

  Error bad = error_of([&] { pkg.find("Softmax"); });
  CHECK(bad.code() == ErrorCode::invalid_argument);
  CHECK_THAT(bad.what(), Contains("'Softmax'"));
}

TEST_CASE("Package::verify reports each damaged file by URI", "[package]") {
  FakePackage fake;
  auto pkg = aotinfer::Package::open(fake.dir);
  CHECK(pkg.verify().empty());

  const std::string uri = "merge_state.dtype-f16.head_dim-128";
  SECTION("modified, same size") {
    fake.flip_byte(uri);
    auto problems = pkg.verify();
    REQUIRE(problems.size() == 1);
    CHECK_THAT(problems[0], Contains(uri) && Contains("sha256"));
  }
  SECTION("grown") {
    std::ofstream(fake.file(uri), std::ios::binary | std::ios::app) << "x";
    const auto size = fake.manifest.variants[3].size;
    auto problems = pkg.verify();
    REQUIRE(problems.size() == 1);
    CHECK_THAT(problems[0], Contains(uri) && Contains("has " + std::to_string(size + 1) + " bytes") &&
                                Contains("says " + std::to_string(size)));
  }
  SECTION("missing") {
    fs::remove(fake.file(uri));
    auto problems = pkg.verify();
    REQUIRE(problems.size() == 1);
    CHECK_THAT(problems[0], Contains(uri) && Contains(fake.file(uri).string()));
  }
  SECTION("two damaged files, two lines") {
    fake.flip_byte(uri);
    fs::remove(fake.file("rms_norm.dtype-bf16.hidden-4096"));
    auto problems = pkg.verify();
    REQUIRE(problems.size() == 2);
    CHECK_THAT(problems[0], Contains(uri));
    CHECK_THAT(problems[1], Contains("rms_norm.dtype-bf16.hidden-4096"));
  }
}

TEST_CASE("Package::kernel checks the file before the driver", "[package]") {
  FakePackage fake;
  auto pkg = aotinfer::Package::open(fake.dir);
  const std::string uri = "merge_state.dtype-bf16.head_dim-64";

  SECTION("a modified file is corrupt_package") {
    fake.flip_byte(uri);
    Error e = error_of([&] { pkg.kernel(uri, "merge"); });
    CHECK(e.code() == ErrorCode::corrupt_package);
    CHECK_THAT(e.what(), Contains(fake.file(uri).string()) && Contains("does not match the manifest"));
    // Also through a partial key.
    Error again = error_of([&] { pkg.kernel(VariantKey{"merge_state", {{"head_dim", "64"}, {"dtype", "bf16"}}}, "merge"); });
    CHECK(again.code() == ErrorCode::corrupt_package);
  }
  SECTION("a missing file is named") {
    fs::remove(fake.file(uri));
    Error e = error_of([&] { pkg.kernel(uri, "merge"); });
    CHECK(e.code() == ErrorCode::io_error);
    CHECK_THAT(e.what(), Contains(fake.file(uri).string()));
  }
  SECTION("an unknown entry point lists the entries") {
    Error e = error_of([&] { pkg.kernel("rms_norm.dtype-bf16.hidden-4096", "merge"); });
    CHECK(e.code() == ErrorCode::not_found);
    CHECK_THAT(e.what(), Contains("no entry point 'merge'") && Contains("its entries: norm"));
  }
  SECTION("a missing variant is not_found") {
    Error e = error_of([&] { pkg.kernel("merge_state.dtype-f16.head_dim-96", "merge"); });
    CHECK(e.code() == ErrorCode::not_found);
    CHECK_THAT(e.what(), Contains("nearest"));
  }
  SECTION("fake code never loads") {
    // Without libcuda: no_driver; with a GPU: refused for its arch or by cuModuleLoadData.
    Error e = error_of([&] { pkg.kernel(uri, "merge"); });
    CHECK((e.code() == ErrorCode::no_driver || e.code() == ErrorCode::no_device ||
           e.code() == ErrorCode::unsupported_arch || e.code() == ErrorCode::cuda_error));
  }
}

TEST_CASE("check_device_arch applies the arch rules to a variant", "[package]") {
  ManifestVariant v;
  v.key = VariantKey{"merge_state", {{"dtype", "bf16"}, {"head_dim", "128"}}};

  v.archs = {"sm_80"};
  CHECK_NOTHROW(aotinfer::check_device_arch(v, 8, 0));
  CHECK_NOTHROW(aotinfer::check_device_arch(v, 8, 6));
  CHECK_NOTHROW(aotinfer::check_device_arch(v, 8, 9));
  Error on_hopper = error_of([&] { aotinfer::check_device_arch(v, 9, 0); });
  CHECK(on_hopper.code() == ErrorCode::unsupported_arch);
  CHECK_THAT(on_hopper.what(), Contains("merge_state.dtype-bf16.head_dim-128") && Contains("holds code for sm_80") &&
                                   Contains("(sm_90)") && Contains("\"sm_90\""));

  v.archs = {"sm_90a"};
  CHECK_NOTHROW(aotinfer::check_device_arch(v, 9, 0));
  Error on_ampere = error_of([&] { aotinfer::check_device_arch(v, 8, 0); });
  CHECK(on_ampere.code() == ErrorCode::unsupported_arch);
  CHECK_THAT(on_ampere.what(), Contains("holds code for sm_90a") && Contains("(sm_80)"));
  CHECK(error_of([&] { aotinfer::check_device_arch(v, 10, 0); }).code() == ErrorCode::unsupported_arch);

  v.archs = {"sm_86", "sm_90a"};
  CHECK_NOTHROW(aotinfer::check_device_arch(v, 8, 9));
  CHECK_NOTHROW(aotinfer::check_device_arch(v, 9, 0));
  Error listed = error_of([&] { aotinfer::check_device_arch(v, 8, 0); });
  CHECK_THAT(listed.what(), Contains("sm_86, sm_90a"));

  v.archs = {"sm_999", "compute_90"};  // names it does not know run nowhere
  CHECK(error_of([&] { aotinfer::check_device_arch(v, 9, 0); }).code() == ErrorCode::unsupported_arch);
  v.archs = {};
  CHECK(error_of([&] { aotinfer::check_device_arch(v, 9, 0); }).code() == ErrorCode::unsupported_arch);

  // SASS first; PTX where no SASS runs and the driver can compile it; else refused naming both.
  v.archs = {"sm_80", "sm_90"};
  v.ptx = {"compute_80"};
  CHECK(aotinfer::check_device_arch(v, 9, 0) == aotinfer::DeviceCode::sass);
  CHECK(aotinfer::check_device_arch(v, 8, 6) == aotinfer::DeviceCode::sass);
  CHECK(aotinfer::check_device_arch(v, 12, 0) == aotinfer::DeviceCode::ptx);
  CHECK(aotinfer::check_device_arch(v, 10, 0) == aotinfer::DeviceCode::ptx);
  Error on_turing = error_of([&] { aotinfer::check_device_arch(v, 7, 5); });
  CHECK(on_turing.code() == ErrorCode::unsupported_arch);
  CHECK_THAT(on_turing.what(), Contains("holds code for sm_80, sm_90 and PTX compute_80") && Contains("(sm_75)"));
  v.ptx = {"compute_90a"};  // arch-specific PTX compiles for its own chip only
  CHECK(error_of([&] { aotinfer::check_device_arch(v, 10, 0); }).code() == ErrorCode::unsupported_arch);
}

TEST_CASE("Driver::open of a missing library is no_driver naming it", "[package][driver]") {
  Error e = error_of([] { aotinfer::detail::Driver::open("libaotinfer-no-such-driver.so"); });
  CHECK(e.code() == ErrorCode::no_driver);
  CHECK_THAT(e.what(), Contains("libaotinfer-no-such-driver.so") && Contains("NVIDIA driver"));
}

// ---------------------------------------------------------------------------------------------
// C API

TEST_CASE("C API: open, count, uri, find, close", "[package][c_api]") {
  FakePackage fake;
  aotinfer_package* pkg = nullptr;
  REQUIRE(aotinfer_package_open(fake.dir.c_str(), &pkg) == AOTINFER_OK);
  REQUIRE(pkg != nullptr);
  CHECK(std::string(aotinfer_last_error()).empty());

  REQUIRE(aotinfer_package_variant_count(pkg) == 6);
  for (std::size_t i = 0; i < 6; ++i) {
    const char* uri = aotinfer_package_variant_uri(pkg, i);
    REQUIRE(uri != nullptr);
    CHECK(std::string(uri) == fake.manifest.variants[i].key.uri());
    CHECK(aotinfer_package_find(pkg, uri) == AOTINFER_OK);
  }
  CHECK(aotinfer_package_variant_uri(pkg, 6) == nullptr);
  CHECK(aotinfer_package_find(pkg, "merge_state.head_dim-256") == AOTINFER_OK);

  CHECK(aotinfer_package_find(pkg, "merge_state.dtype-f16.head_dim-96") == AOTINFER_NOT_FOUND);
  CHECK_THAT(aotinfer_last_error(), Contains("merge_state{dtype=f16, head_dim=96}") &&
                                        Contains("nearest: merge_state.dtype-f16.head_dim-64") && Contains("include"));
  CHECK(aotinfer_package_find(pkg, "merge_state.head_dim-64") == AOTINFER_INVALID_ARGUMENT);
  CHECK_THAT(aotinfer_last_error(), Contains("matches 2 variants"));
  CHECK(aotinfer_package_find(pkg, "Merge_state") == AOTINFER_INVALID_ARGUMENT);
  CHECK_THAT(aotinfer_last_error(), Contains("invalid variant URI"));

  // A success clears the message.
  CHECK(aotinfer_package_find(pkg, "rms_norm") == AOTINFER_OK);
  CHECK(std::string(aotinfer_last_error()).empty());

  // The message is per thread.
  std::string other_thread;
  std::thread([&] {
    aotinfer_package_find(pkg, "softmax");
    other_thread = aotinfer_last_error();
  }).join();
  CHECK_THAT(other_thread, Contains("no 'softmax' family"));
  CHECK(std::string(aotinfer_last_error()).empty());

  aotinfer_package_close(pkg);
  aotinfer_package_close(nullptr);  // allowed
}

TEST_CASE("C API: a missing package", "[package][c_api]") {
  TempDir tmp;
  const std::string dir = (tmp.path / "absent").string();
  aotinfer_package* pkg = reinterpret_cast<aotinfer_package*>(0x1);
  CHECK(aotinfer_package_open(dir.c_str(), &pkg) == AOTINFER_NOT_FOUND);
  CHECK(pkg == nullptr);
  CHECK_THAT(aotinfer_last_error(), Contains(dir) && Contains("aotinfer-gen build"));
}

TEST_CASE("C API: NULL arguments are AOTINFER_INVALID_ARGUMENT", "[package][c_api]") {
  FakePackage fake;
  aotinfer_package* pkg = nullptr;
  REQUIRE(aotinfer_package_open(fake.dir.c_str(), &pkg) == AOTINFER_OK);

  CHECK(aotinfer_package_open(nullptr, &pkg) == AOTINFER_INVALID_ARGUMENT);
  CHECK_THAT(aotinfer_last_error(), Contains("dir must not be NULL"));
  CHECK(aotinfer_package_open(fake.dir.c_str(), nullptr) == AOTINFER_INVALID_ARGUMENT);
  CHECK_THAT(aotinfer_last_error(), Contains("out must not be NULL"));
  CHECK(aotinfer_package_find(nullptr, "rms_norm") == AOTINFER_INVALID_ARGUMENT);
  CHECK_THAT(aotinfer_last_error(), Contains("package"));
  CHECK(aotinfer_package_find(pkg, nullptr) == AOTINFER_INVALID_ARGUMENT);
  CHECK_THAT(aotinfer_last_error(), Contains("uri"));
  CHECK(aotinfer_package_variant_count(nullptr) == 0);
  CHECK(aotinfer_package_variant_uri(nullptr, 0) == nullptr);

  const uint32_t grid[3] = {1, 1, 1};
  aotinfer_merge_state_params params{};
  CHECK(aotinfer_launch(nullptr, "rms_norm", "norm", grid, &params, sizeof params, nullptr) == AOTINFER_INVALID_ARGUMENT);
  CHECK(aotinfer_launch(pkg, nullptr, "norm", grid, &params, sizeof params, nullptr) == AOTINFER_INVALID_ARGUMENT);
  CHECK(aotinfer_launch(pkg, "rms_norm", nullptr, grid, &params, sizeof params, nullptr) == AOTINFER_INVALID_ARGUMENT);
  CHECK(aotinfer_launch(pkg, "rms_norm", "norm", nullptr, &params, sizeof params, nullptr) == AOTINFER_INVALID_ARGUMENT);
  CHECK(aotinfer_launch(pkg, "rms_norm", "norm", grid, nullptr, sizeof params, nullptr) == AOTINFER_INVALID_ARGUMENT);
  CHECK_THAT(aotinfer_last_error(), Contains("must not be NULL"));
  CHECK(aotinfer_merge_state(nullptr, "f16", 64, &params, nullptr) == AOTINFER_INVALID_ARGUMENT);
  CHECK(aotinfer_merge_state(pkg, nullptr, 64, &params, nullptr) == AOTINFER_INVALID_ARGUMENT);
  CHECK(aotinfer_merge_state(pkg, "f16", 64, nullptr, nullptr) == AOTINFER_INVALID_ARGUMENT);
  CHECK_THAT(aotinfer_last_error(), Contains("must not be NULL"));

  aotinfer_package_close(pkg);
}

TEST_CASE("C API: errors before the driver map onto statuses", "[package][c_api]") {
  FakePackage fake;
  aotinfer_package* pkg = nullptr;
  REQUIRE(aotinfer_package_open(fake.dir.c_str(), &pkg) == AOTINFER_OK);
  aotinfer_merge_state_params params{};

  CHECK(aotinfer_merge_state(pkg, "f64", 64, &params, nullptr) == AOTINFER_INVALID_ARGUMENT);
  CHECK_THAT(aotinfer_last_error(), Contains("unknown dtype 'f64'"));
  CHECK(aotinfer_merge_state(pkg, "f16", 96, &params, nullptr) == AOTINFER_NOT_FOUND);
  CHECK_THAT(aotinfer_last_error(), Contains("merge_state{dtype=f16, head_dim=96}"));

  fake.flip_byte("merge_state.dtype-bf16.head_dim-64");
  CHECK(aotinfer_merge_state(pkg, "bf16", 64, &params, nullptr) == AOTINFER_CORRUPT_PACKAGE);
  CHECK_THAT(aotinfer_last_error(), Contains("does not match the manifest"));
  const uint32_t grid[3] = {1, 1, 1};
  CHECK(aotinfer_launch(pkg, "merge_state.dtype-bf16.head_dim-64", "merge", grid, &params, sizeof params, nullptr) ==
        AOTINFER_CORRUPT_PACKAGE);
  CHECK(aotinfer_launch(pkg, "rms_norm", "nope", grid, &params, sizeof params, nullptr) == AOTINFER_NOT_FOUND);
  CHECK_THAT(aotinfer_last_error(), Contains("no entry point 'nope'"));

  aotinfer_package_close(pkg);
}
