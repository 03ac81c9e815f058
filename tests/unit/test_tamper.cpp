// Hostile packages and specs: damaged, swapped or crafted files are refused with the exact error
// code and a message naming the file and what is wrong. Package::open and the checks kernel()
// makes before the driver need no GPU and no libcuda, so all of this runs anywhere; on a machine
// with a driver, kernel() of an intact fake file gets further and fails at loading instead.
#include "catch.hpp"

#include "fake_package.hpp"
#include "test_util.hpp"

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <fstream>
#include <string>
#include <sys/stat.h>
#include <vector>

#include "aotinfer/aotinfer.h"
#include "aotinfer/files.hpp"
#include "aotinfer/package.hpp"
#include "spec.hpp"

namespace fs = std::filesystem;
using aotinfer::Error;
using aotinfer::ErrorCode;
using aotinfer::Package;
using aotinfer::test::error_of;
using aotinfer::test::FakePackage;
using aotinfer::test::TempDir;
using aotinfer_test::Contains;
using nlohmann::ordered_json;

namespace {

const std::string kUri = "merge_state.dtype-bf16.head_dim-64";

Error open_error(const FakePackage& fake) {
  return error_of([&] { Package::open(fake.dir); });
}

// What kernel() says about the fake file of kUri.
Error kernel_error(const FakePackage& fake) {
  const Package pkg = Package::open(fake.dir);
  return error_of([&] { pkg.kernel(kUri, "merge"); });
}

// kernel() got past every file check: it stopped at the driver, the device or the fake bytes.
bool stopped_at_driver(const Error& e) {
  return e.code() == ErrorCode::no_driver || e.code() == ErrorCode::no_device ||
         e.code() == ErrorCode::unsupported_arch || e.code() == ErrorCode::cuda_error;
}

}  // namespace

TEST_CASE("tamper: an intact fake package gets past every file check", "[tamper]") {
  FakePackage fake;
  CHECK(Package::open(fake.dir).verify().empty());
  const Error e = kernel_error(fake);
  INFO(e.what());
  CHECK(stopped_at_driver(e));
}

TEST_CASE("tamper: a truncated fatbin is corrupt_package naming the file and both sizes", "[tamper]") {
  FakePackage fake;
  const fs::path file = fake.file(kUri);
  const std::string bytes = aotinfer::read_file(file);
  std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes.substr(0, 10);

  const Error e = kernel_error(fake);
  CHECK(e.code() == ErrorCode::corrupt_package);
  CHECK_THAT(e.what(), Contains(file.string()) && Contains("does not match the manifest") && Contains("it has 10 bytes") &&
                           Contains("the manifest says " + std::to_string(bytes.size())) && Contains("rebuild or reinstall"));
  const auto problems = Package::open(fake.dir).verify();
  REQUIRE(problems.size() == 1);
  CHECK_THAT(problems[0], Contains(kUri) && Contains(file.string()) && Contains("it has 10 bytes"));

  // Empty is truncated too.
  std::ofstream(file, std::ios::binary | std::ios::trunc);
  CHECK_THAT(kernel_error(fake).what(), Contains("it has 0 bytes"));
}

TEST_CASE("tamper: a bit-flipped fatbin is corrupt_package naming the file and the sha256 mismatch", "[tamper]") {
  FakePackage fake;
  const fs::path file = fake.file(kUri);
  std::string bytes = aotinfer::read_file(file);
  bytes[5] ^= 0x01;  // one bit, same size
  std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes;

  const Error e = kernel_error(fake);
  CHECK(e.code() == ErrorCode::corrupt_package);
  CHECK_THAT(e.what(), Contains(file.string()) && Contains("does not match the manifest") &&
                           Contains("its sha256 is " + aotinfer::sha256_hex(bytes)) &&
                           Contains("the manifest says " + fake.manifest.variants[0].sha256));
  const auto problems = Package::open(fake.dir).verify();
  REQUIRE(problems.size() == 1);
  CHECK_THAT(problems[0], Contains(kUri) && Contains("sha256"));

  // The C API says the same with its status.
  aotinfer_package* pkg = nullptr;
  REQUIRE(aotinfer_package_open(fake.dir.c_str(), &pkg) == AOTINFER_OK);
  const uint32_t grid[3] = {1, 1, 1};
  const char params[8] = {};
  CHECK(aotinfer_launch(pkg, kUri.c_str(), "merge", grid, params, sizeof params, nullptr) == AOTINFER_CORRUPT_PACKAGE);
  CHECK_THAT(aotinfer_last_error(), Contains(file.string()) && Contains("sha256"));
  aotinfer_package_close(pkg);
}

TEST_CASE("tamper: a missing fatbin is io_error naming the file", "[tamper]") {
  FakePackage fake;
  fs::remove(fake.file(kUri));
  const Error e = kernel_error(fake);
  CHECK(e.code() == ErrorCode::io_error);
  CHECK_THAT(e.what(), Contains("cannot read " + fake.file(kUri).string()) && Contains("No such file"));
  const auto problems = Package::open(fake.dir).verify();
  REQUIRE(problems.size() == 1);
  CHECK_THAT(problems[0], Contains(kUri) && Contains(fake.file(kUri).string()));
}

TEST_CASE("tamper: a fatbin that links outside the package is refused even when its bytes match", "[tamper]") {
  FakePackage fake;
  const fs::path file = fake.file(kUri);
  // The same bytes outside the package: size and sha256 would pass.
  const fs::path outside = fake.tmp.path / "elsewhere.fatbin";
  fs::copy_file(file, outside);
  fs::remove(file);
  fs::create_symlink(outside, file);

  Error e = kernel_error(fake);
  CHECK(e.code() == ErrorCode::corrupt_package);
  CHECK_THAT(e.what(), Contains(file.string()) && Contains("expected a file inside the package") &&
                           Contains("a link to " + fs::canonical(outside).string()) && Contains("outside it"));
  auto problems = Package::open(fake.dir).verify();
  REQUIRE(problems.size() == 1);
  CHECK_THAT(problems[0], Contains(kUri) && Contains("expected a file inside the package"));

  SECTION("a link to a device is refused before it is read") {
    fs::remove(file);
    fs::create_symlink("/dev/zero", file);
    const Error dev = kernel_error(fake);
    CHECK(dev.code() == ErrorCode::corrupt_package);
    CHECK_THAT(dev.what(), Contains(file.string()) && Contains("a link to /dev/zero"));
  }
  SECTION("a relative link climbing out") {
    fs::remove(file);
    fs::create_symlink("../../elsewhere.fatbin", file);
    CHECK(kernel_error(fake).code() == ErrorCode::corrupt_package);
  }
  SECTION("the kernels folder itself linked outside") {
    const fs::path kernels = fake.dir / "kernels";
    const fs::path moved = fake.tmp.path / "kernels-elsewhere";
    fs::remove(file);
    fs::copy_file(outside, kernels / file.filename());
    fs::rename(kernels, moved);
    fs::create_directory_symlink(moved, kernels);
    const Error dir = kernel_error(fake);
    CHECK(dir.code() == ErrorCode::corrupt_package);
    CHECK_THAT(dir.what(), Contains("expected a file inside the package"));
  }
  SECTION("a link inside the package is fine") {
    fs::remove(file);
    fs::copy_file(outside, fake.dir / "kernels" / "shared.bin");
    fs::create_symlink("shared.bin", file);
    const Error inside = kernel_error(fake);
    INFO(inside.what());
    CHECK(stopped_at_driver(inside));
  }
}

TEST_CASE("tamper: a fatbin that is a directory or a fifo is refused without reading it", "[tamper]") {
  FakePackage fake;
  const fs::path file = fake.file(kUri);
  fs::remove(file);
  SECTION("directory") {
    fs::create_directory(file);
    const Error e = kernel_error(fake);
    CHECK(e.code() == ErrorCode::corrupt_package);
    CHECK_THAT(e.what(), Contains(file.string()) && Contains("expected a regular file, got a directory"));
  }
  SECTION("fifo (reading it would block forever)") {
    REQUIRE(::mkfifo(file.c_str(), 0600) == 0);
    const Error e = kernel_error(fake);
    CHECK(e.code() == ErrorCode::corrupt_package);
    CHECK_THAT(e.what(), Contains(file.string()) && Contains("expected a regular file, got a special file"));
    const auto problems = Package::open(fake.dir).verify();
    REQUIRE(problems.size() == 1);
    CHECK_THAT(problems[0], Contains("expected a regular file"));
  }
}

TEST_CASE("tamper: a manifest file entry outside the package is refused at open", "[tamper]") {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"../../etc/passwd", "'..' leaves the package"},
      {"kernels/../../../etc/passwd", "'..' leaves the package"},
      {"..", "'..' leaves the package"},
      {"/etc/passwd", "an absolute path"},
      {"//etc/passwd", "an absolute path"},
      {"", "empty"},
      {"kernels/", "not a file name"},
      {std::string("kernels/a\0b.fatbin", 18), "a control character"},
      {"kernels/a\nb.fatbin", "a control character"},
  };
  for (const auto& [file, why] : cases) {
    INFO(ordered_json(file).dump());
    FakePackage fake;
    ordered_json j = fake.json();
    j["variants"][2]["file"] = file;
    fake.write(j);
    const Error e = open_error(fake);
    CHECK(e.code() == ErrorCode::corrupt_package);
    CHECK_THAT(e.what(), Contains(fake.manifest_path().string()) && Contains("/variants/2/file") &&
                             Contains("expected a relative path inside the package, got " + ordered_json(file).dump()) &&
                             Contains(why));
  }
}

TEST_CASE("tamper: negative, fractional and huge sizes", "[tamper]") {
  for (const char* size : {"-1", "-9223372036854775808", "1.5", "1e30", "18446744073709551616", "\"12\"", "null", "true"}) {
    INFO(size);
    FakePackage fake;
    std::string text = fake.json().dump(2);
    const std::string was = "\"size\": " + std::to_string(fake.manifest.variants[1].size);
    const auto at = text.find(was, text.find("\"uri\": \"merge_state.dtype-bf16.head_dim-128\""));
    REQUIRE(at != std::string::npos);
    text.replace(at, was.size(), std::string("\"size\": ") + size);
    fake.write_text(text);
    const Error e = open_error(fake);
    CHECK(e.code() == ErrorCode::corrupt_package);
    CHECK_THAT(e.what(), Contains(fake.manifest_path().string()) && Contains("/variants/1/size") &&
                             Contains("expected a byte count (an integer >= 0), got"));
  }

  // The largest count is a count: open takes it, and the file check reports the mismatch
  // without reading anything of that size.
  FakePackage fake;
  ordered_json j = fake.json();
  j["variants"][0]["size"] = std::uint64_t(18446744073709551615ull);
  fake.write(j);
  const Error e = kernel_error(fake);
  CHECK(e.code() == ErrorCode::corrupt_package);
  CHECK_THAT(e.what(), Contains(fake.file(kUri).string()) && Contains("the manifest says 18446744073709551615"));
  const auto problems = Package::open(fake.dir).verify();
  REQUIRE(problems.size() == 1);
  CHECK_THAT(problems[0], Contains("the manifest says 18446744073709551615"));
}

TEST_CASE("tamper: an unknown or malformed format version", "[tamper]") {
  for (const auto& [format, expected] : std::vector<std::pair<ordered_json, std::string>>{
           {2, "manifest format 2 is not supported by this runtime (it reads format 1)"},
           {0, "manifest format 0 is not supported"},
           {-1, "manifest format -1 is not supported"},
           {"1", "/format has the wrong type (string): expected an integer manifest format (this runtime reads 1), got \"1\""},
           {1.5, "/format: expected an integer manifest format (this runtime reads 1), got 1.5"},
           {nullptr, "/format has the wrong type (null): expected an integer manifest format"}}) {
    INFO(format.dump());
    FakePackage fake;
    ordered_json j = fake.json();
    j["format"] = format;
    fake.write(j);
    const Error e = open_error(fake);
    CHECK(e.code() == ErrorCode::corrupt_package);
    CHECK_THAT(e.what(), Contains(fake.manifest_path().string()) && Contains(expected));
  }
  FakePackage fake;
  ordered_json j = fake.json();
  j.erase("format");
  fake.write(j);
  CHECK_THAT(open_error(fake).what(), Contains(fake.manifest_path().string()) && Contains("/format is missing"));
}

TEST_CASE("tamper: empty, truncated, non-object and malformed manifests", "[tamper]") {
  FakePackage good;
  const std::string text = good.json().dump(2);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "not valid JSON"},
      {"   \n", "not valid JSON"},
      {text.substr(0, text.size() / 2), "not valid JSON"},
      {text.substr(0, text.size() - 2), "not valid JSON"},
      {"{\"format\": 1,, }", "not valid JSON"},
      {text + " trailing", "not valid JSON"},
      {"{\"format\": \"\xff\xfe\"}", "not valid JSON"},  // invalid UTF-8
      {std::string("{\"format\"\0: 1}", 14), "not valid JSON"},
      {"[]", "a manifest is a JSON object: expected an object, got array []"},
      {"42", "a manifest is a JSON object: expected an object, got number 42"},
      {"null", "a manifest is a JSON object: expected an object, got null"},
      {"\"manifest\"", "a manifest is a JSON object: expected an object, got string"},
      {"{}", "/format is missing"},
  };
  for (const auto& [content, expected] : cases) {
    INFO(ordered_json(content).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    FakePackage fake;
    fake.write_text(content);
    const Error e = open_error(fake);
    CHECK(e.code() == ErrorCode::corrupt_package);
    CHECK_THAT(e.what(), Contains(fake.manifest_path().string()) && Contains(expected));
  }

  SECTION("members of the wrong shape are named by their JSON pointer") {
    const std::vector<std::pair<std::function<void(ordered_json&)>, std::string>> shapes = {
        {[](ordered_json& j) { j["variants"] = ordered_json::object(); }, "/variants: expected an array, got object"},
        {[](ordered_json& j) { j["variants"] = "all"; }, "/variants: expected an array, got string"},
        {[](ordered_json& j) { j["variants"][1] = 7; }, "/variants/1: expected a variant (a JSON object), got number 7"},
        {[](ordered_json& j) { j["variants"][1]["entries"] = "merge"; }, "/variants/1/entries: expected an array, got string"},
        {[](ordered_json& j) { j["variants"][1]["axes"] = ordered_json::array(); }, "/variants/1/axes: expected an object, got array"},
        {[](ordered_json& j) { j["variants"][1].erase("sha256"); }, "/variants/1/sha256 is missing"},
        {[](ordered_json& j) { j["variants"][1]["archs"] = "sm_80"; }, "/variants/1/archs has the wrong type (string)"},
        {[](ordered_json& j) { j["variants"][1]["uri"] = "merge_state.dtype-f16.head_dim-64"; },
         "/variants/1: uri 'merge_state.dtype-f16.head_dim-64' disagrees with family/axes"},
        {[](ordered_json& j) { j["variants"][1]["uri"] = "Merge state"; }, "/variants/1: invalid variant URI"},
        {[](ordered_json& j) { j["package"] = nullptr; }, "/package/name is missing"},
    };
    for (const auto& [mutate, expected] : shapes) {
      INFO(expected);
      FakePackage fake;
      ordered_json j = fake.json();
      mutate(j);
      fake.write(j);
      const Error e = open_error(fake);
      CHECK(e.code() == ErrorCode::corrupt_package);
      CHECK_THAT(e.what(), Contains(fake.manifest_path().string()) && Contains(expected));
    }
  }
  SECTION("a manifest.json that is a directory") {
    FakePackage fake;
    fs::remove(fake.manifest_path());
    fs::create_directory(fake.manifest_path());
    const Error e = open_error(fake);
    CHECK(e.code() == ErrorCode::corrupt_package);
    CHECK_THAT(e.what(), Contains(fake.manifest_path().string()) && Contains("expected a manifest file, got a directory"));
  }
}

TEST_CASE("tamper: a families record of the wrong shape, or one its variants contradict, is refused at open", "[tamper]") {
  // FakePackage's variants: 0 merge_state bf16/64, 1 bf16/128, 2 f16/64, 3 f16/256, 4 rms_norm bf16/4096.
  const std::vector<std::pair<std::function<void(ordered_json&)>, std::string>> cases = {
      {[](ordered_json& j) { j["families"] = "all"; }, "/families: expected an array, got string"},
      {[](ordered_json& j) { j["families"][0] = 7; }, "/families/0: expected a family (a JSON object), got number 7"},
      {[](ordered_json& j) { j["families"][0]["family"] = "Merge state"; },
       "/families/0/family: expected a lowercase snake_case name, got \"Merge state\""},
      {[](ordered_json& j) { j["families"][1]["family"] = "merge_state"; },
       "/families/1/family: family 'merge_state' is listed twice: expected each family once"},
      {[](ordered_json& j) { j["families"][0].erase("axes"); }, "/families/0/axes is missing"},
      {[](ordered_json& j) { j["families"][0]["axes"][1]["name"] = "dtype"; },
       "/families/0/axes/1/name: axis 'dtype' is listed twice in family 'merge_state': expected each axis once"},
      {[](ordered_json& j) { j["families"][0]["axes"][0]["kind"] = "float"; },
       "/families/0/axes/0/kind: expected one of dtype, enum, bool, int, got \"float\""},
      {[](ordered_json& j) { j["families"][0]["axes"][1]["allowed"] = ordered_json::array(); },
       "/families/0/axes/1/allowed: expected at least one value, got []"},
      {[](ordered_json& j) { j["families"][0]["axes"][1]["allowed"][0] = 1.5; },
       "/families/0/axes/1/allowed/0: axis values are strings, integers or booleans, not number"},
      {[](ordered_json& j) { j["families"][0]["axes"][1]["default"] = 512; },
       "/families/0/axes/1/default: expected one of the allowed values (64, 128, 256), got 512"},
      {[](ordered_json& j) { j["families"][0]["axes"][1]["follows"] = "dtype_q"; },
       "/families/0/axes/1/follows: expected an earlier axis of family 'merge_state' (dtype), got \"dtype_q\""},
      {[](ordered_json& j) { j["families"][0]["axes"][1]["allowed"] = {64, 128}; },
       "/variants/3/axes/head_dim: expected a value family 'merge_state' allows (64, 128), got 256"},
      {[](ordered_json& j) { j["families"].erase(1); },
       "/variants/4/family: expected one of the families in /families (merge_state), got 'rms_norm'"},
      {[](ordered_json& j) { std::swap(j["families"][0]["axes"][0], j["families"][0]["axes"][1]); },
       "/variants/0/axes: expected the axes of family 'merge_state' in template order (head_dim, dtype), got (dtype, head_dim)"},
  };
  for (const auto& [mutate, expected] : cases) {
    INFO(expected);
    FakePackage fake;
    fake.record_families();
    REQUIRE_NOTHROW(Package::open(fake.dir));
    ordered_json j = fake.json();
    mutate(j);
    fake.write(j);
    const Error e = open_error(fake);
    CHECK(e.code() == ErrorCode::corrupt_package);
    CHECK_THAT(e.what(), Contains(fake.manifest_path().string()) && Contains(expected));
  }
}

TEST_CASE("tamper: a URI listed twice is refused at open, naming it and both positions", "[tamper]") {
  FakePackage fake;
  ordered_json j = fake.json();
  ordered_json copy = j["variants"][1];
  copy["file"] = "kernels/copy.fatbin";  // another file: the URI alone repeats
  j["variants"].push_back(copy);
  fake.write(j);
  const Error e = open_error(fake);
  CHECK(e.code() == ErrorCode::corrupt_package);
  CHECK_THAT(e.what(), Contains(fake.manifest_path().string()) && Contains("'merge_state.dtype-bf16.head_dim-128'") &&
                           Contains("listed twice, at /variants/1 and /variants/5"));

  // The C API refuses it the same way.
  aotinfer_package* pkg = reinterpret_cast<aotinfer_package*>(0x10);
  CHECK(aotinfer_package_open(fake.dir.c_str(), &pkg) == AOTINFER_CORRUPT_PACKAGE);
  CHECK(pkg == nullptr);
  CHECK_THAT(aotinfer_last_error(), Contains("listed twice, at /variants/1 and /variants/5"));

  SECTION("two variants sharing one file") {
    ordered_json k = fake.json();
    k["variants"][3]["file"] = k["variants"][0]["file"];
    fake.write(k);
    const Error shared = open_error(fake);
    CHECK(shared.code() == ErrorCode::corrupt_package);
    CHECK_THAT(shared.what(), Contains("/variants/3/file") && Contains("is also the file of /variants/0"));
  }
}

TEST_CASE("tamper: package names that could escape a path, a shell or build.ninja are refused by the generator", "[tamper]") {
  using namespace aotinfer::gen;
  FamilySchema toy;
  toy.name = "toy";
  toy.cpp_name = "aotinfer::toy";
  toy.header = "toy.cuh";
  toy.where = {"toy.cuh", 1};
  toy.axes = {{"head_dim", AxisKind::integer, {"64"}, {}, {}, "int", {"toy.cuh", 2}}};
  toy.entries = {{"run", "toy_params", {"toy.cuh", 3}}};
  auto spec = [&](const std::string& name) {
    return R"({"format": 1, "package": {"name": )" + ordered_json(name).dump() +
           R"(, "version": "1"}, "archs": ["sm_90"], "families": {"toy": {"matrix": {"head_dim": 64}}}})";
  };
  CHECK(parse_spec(spec("ok-name_2"), "specs/x.json", {toy}).package_name == "ok-name_2");
  for (const std::string name : {"..", ".", "../evil", "a/b", "/abs", "$(touch pwned)", "`id`", "a$b", "a:b", "a b",
                                 "a\nb", "a|b", "a;b", "-rf", "", "Upper", "a.b", "a\\b"}) {
    INFO(ordered_json(name).dump());
    try {
      parse_spec(spec(name), "specs/x.json", {toy});
      FAIL("accepted");
    } catch (const SpecError& e) {
      CHECK_THAT(e.what(), Contains("specs/x.json") && Contains("/package/name") && Contains("is not a package name") &&
                               Contains("lowercase letters, digits, '-' and '_'"));
    }
  }
}

#ifdef AOTINFER_GEN_EXE
TEST_CASE("tamper: aotinfer-gen refuses a shell-injecting package name before writing anything", "[tamper]") {
  TempDir tmp;
  const fs::path spec = tmp.path / "evil.json";
  aotinfer::write_file_atomic(spec, R"json({"format": 1, "package": {"name": "$(touch pwned)", "version": "1"},
    "archs": ["sm_90"], "families": {"merge_state": {"matrix": {"dtype": "f16", "head_dim": 64}}}})json");
  const std::string command = "cd '" + tmp.path.string() + "' && " + AOTINFER_GEN_EXE + " generate evil.json > out.txt 2>&1";
  const int status = std::system(command.c_str());
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 1);
  CHECK_THAT(aotinfer::read_file(tmp.path / "out.txt"), Contains("evil.json") && Contains("/package/name") &&
                                                            Contains("is not a package name"));
  CHECK_FALSE(fs::exists(tmp.path / "pwned"));
  CHECK_FALSE(fs::exists(tmp.path / "generated"));
}
#endif
