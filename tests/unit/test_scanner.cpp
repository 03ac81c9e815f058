// The template scanner against fixtures (tests/fixtures/scanner) and the real templates.
// Each scan is one Clang parse (~0.5 s), so fixtures are small and scanned once per test.
#include <stdlib.h>

#include <algorithm>
#include "catch.hpp"
#include <filesystem>
#include <fstream>
#include <sstream>

#include "scanner.hpp"

namespace fs = std::filesystem;
using namespace aotinfer::gen;

// Failed comparisons print both schemas as JSON (cpp_type is not part of it, so add it).
template <>
struct Catch::StringMaker<FamilySchema> {
  static std::string convert(const FamilySchema& f) {
    auto j = to_json(f);
    for (std::size_t i = 0; i < f.axes.size(); ++i) j["axes"][i]["cpp_type"] = f.axes[i].cpp_type;
    for (std::size_t i = 0; i < f.entries.size(); ++i) j["entries"][i]["where"] = f.entries[i].where.str();
    return j.dump(1);
  }
};

namespace {

const fs::path kFixtures = fs::path(AOTINFER_TEST_FIXTURES) / "scanner";

ScanOptions options(const fs::path& dir) {
  ScanOptions o;
  o.templates_dir = dir;
  o.cuda_home = AOTINFER_CUDA_HOME;
  o.include_dirs = {fs::path(AOTINFER_SOURCE_DIR) / "templates"};  // aotinfer/annotate.h, abi.h
  return o;
}

// The message of the ScanError that scanning fixture `name` throws.
std::string scan_error(const std::string& name) {
  try {
    scan_templates(options(kFixtures / name));
  } catch (const ScanError& e) {
    return e.what();
  }
  FAIL("scanning " << name << " threw no ScanError");
  return {};
}

Axis axis(std::string name, AxisKind kind, std::vector<std::string> allowed, unsigned line) {
  Axis a;
  a.name = std::move(name);
  a.kind = kind;
  a.allowed = std::move(allowed);
  a.where = {"attention.cuh", line};
  return a;
}

FamilySchema expected_attention() {
  FamilySchema f;
  f.name = "attention";
  f.cpp_name = "fixture::attention";
  f.header = "attention.cuh";
  f.where = {"attention.cuh", 31};
  f.axes.push_back(axis("dtype_q", AxisKind::dtype, {"f16", "bf16"}, 25));
  f.axes.push_back(axis("dtype_o", AxisKind::dtype, {"bf16", "f16"}, 25));
  f.axes.back().follows = "dtype_q";
  f.axes.push_back(axis("pos_encoding", AxisKind::enumeration, {"none", "rope_llama", "alibi"}, 26));
  f.axes.back().default_value = "rope_llama";
  f.axes.back().cpp_type = "fixture::PosEncoding";
  f.axes.push_back(axis("causal", AxisKind::boolean, {"false", "true"}, 26));
  f.axes.back().default_value = "true";
  f.axes.push_back(axis("head_dim", AxisKind::integer, {"64", "128", "256"}, 27));
  f.axes.back().default_value = "128";
  f.axes.back().cpp_type = "int";
  f.entries = {{"prefill", "fixture::fixture_attention_params", {"attention.cuh", 38}},
               {"decode", "fixture::detail::decode_params", {"attention.cuh", 39}}};
  return f;
}

FamilySchema expected_rms_norm() {
  FamilySchema f;
  f.name = "rms_norm";
  f.cpp_name = "fixture::rms_norm";
  f.header = "rms_norm.cuh";
  f.where = {"rms_norm.cuh", 24};
  auto add = [&](std::string name, AxisKind kind, std::vector<std::string> allowed, std::string def,
                 std::string cpp_type, unsigned line) {
    f.axes.push_back({std::move(name),
                      kind,
                      std::move(allowed),
                      std::move(def),
                      std::nullopt,
                      std::move(cpp_type),
                      {"rms_norm.cuh", line}});
  };
  add("dtype", AxisKind::dtype, {"f16", "f32"}, "f16", "", 18);  // `= __half`
  add("mode", AxisKind::enumeration, {"mode_gated", "mode_plain"}, "mode_gated", "fixture::Mode", 18);
  add("fused", AxisKind::boolean, {"false"}, "false", "", 18);
  add("block", AxisKind::integer, {"128", "256"}, "256", "uint32_t", 19);
  f.entries = {{"run", "fixture::norm_params", {"rms_norm.cuh", 26}}};
  return f;
}

// A scratch copy of a fixture dir, removed at scope exit.
struct TempCopy {
  fs::path dir;
  explicit TempCopy(const fs::path& from) {
    std::string pattern = (fs::temp_directory_path() / "aotinfer-scanner-XXXXXX").string();
    REQUIRE(mkdtemp(pattern.data()) != nullptr);
    dir = pattern;
    fs::copy(from, dir, fs::copy_options::recursive);
  }
  ~TempCopy() { fs::remove_all(dir); }
};

std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

TEST_CASE("scanner: every axis kind, entries and locations", "[scanner]") {
  auto families = scan_templates(options(kFixtures / "good"));
  REQUIRE(families.size() == 2);  // sorted by name
  CHECK(families[0] == expected_attention());
  CHECK(families[1] == expected_rms_norm());
}

TEST_CASE("scanner: a new enumerator becomes an allowed value", "[scanner]") {
  TempCopy copy(kFixtures / "good");
  fs::path header = copy.dir / "attention.cuh";
  std::string text = read(header);
  const std::string old_enum = "none, rope_llama, alibi }";
  REQUIRE(text.find(old_enum) != std::string::npos);
  text.replace(text.find(old_enum), old_enum.size(), "none, rope_llama, alibi, sliding_window }");
  std::ofstream(header) << text;

  auto families = scan_templates(options(copy.dir));
  REQUIRE(families.size() == 2);
  FamilySchema expected = expected_attention();
  expected.axes[2].allowed.push_back("sliding_window");
  CHECK(families[0] == expected);
  CHECK(families[1] == expected_rms_norm());
}

TEST_CASE("scanner: rejected templates name file and line", "[scanner]") {
  std::string message;
  SECTION("unsupported parameter kind") {
    message = scan_error("bad_kind");
    CHECK_THAT(message, aotinfer_test::StartsWith("bad_kind.cuh:7: family 'bad_kind': parameter 'op'"));
    CHECK_THAT(message, aotinfer_test::Contains("template template parameter"));
    CHECK_THAT(message, aotinfer_test::Contains("axes are typename (dtype), enum, bool or integer"));
  }
  SECTION("integer without values") {
    message = scan_error("int_no_values");
    CHECK_THAT(message, aotinfer_test::StartsWith("int_no_values.cuh:6: "));
    CHECK_THAT(message, aotinfer_test::Contains("AOTINFER_VALUES(\"head_dim\""));
  }
  SECTION("two families of one name") {
    message = scan_error("duplicate_family");
    CHECK_THAT(message, aotinfer_test::StartsWith("b.cuh:7: family 'same' is defined twice"));
    CHECK_THAT(message, aotinfer_test::Contains("a.cuh:6"));
  }
  SECTION("AOTINFER_VALUES for a missing parameter") {
    message = scan_error("values_missing_param");
    CHECK_THAT(message, aotinfer_test::StartsWith("values_missing_param.cuh:8: "));
    CHECK_THAT(message, aotinfer_test::Contains("'head_dims'") && aotinfer_test::Contains("parameters: head_dim"));
  }
  SECTION("uppercase enumerator") {
    message = scan_error("upper_enum");
    CHECK_THAT(message, aotinfer_test::StartsWith("upper_enum.cuh:7: "));
    CHECK_THAT(message, aotinfer_test::Contains("'Gelu'") && aotinfer_test::Contains("lowercase snake_case"));
  }
  SECTION("entry without <entry>_launch") {
    message = scan_error("no_launch");
    CHECK_THAT(message, aotinfer_test::StartsWith("no_launch.cuh:9: "));
    CHECK_THAT(message, aotinfer_test::Contains("'finish_launch'"));
  }
  SECTION("syntax error: Clang's diagnostic") {
    message = scan_error("syntax_error");
    CHECK_THAT(message, aotinfer_test::StartsWith("syntax_error.cuh:7:"));
    CHECK_THAT(message, aotinfer_test::Contains("error: expected ';'"));
  }
}

TEST_CASE("scanner: the real templates", "[scanner]") {
  ScanOptions o;
  o.templates_dir = fs::path(AOTINFER_SOURCE_DIR) / "templates";
  o.cuda_home = AOTINFER_CUDA_HOME;
  auto families = scan_templates(o);
  auto it = std::find_if(families.begin(), families.end(), [](auto& f) { return f.name == "merge_state"; });
  REQUIRE(it != families.end());
  CHECK(it->cpp_name == "aotinfer::merge_state");
  CHECK(it->header == "merge_state.cuh");
  REQUIRE(it->axes.size() == 2);
  CHECK(it->axes[0].name == "dtype");
  CHECK(it->axes[0].kind == AxisKind::dtype);
  CHECK(it->axes[0].allowed == std::vector<std::string>{"f16", "bf16"});
  CHECK(it->axes[1].name == "head_dim");
  CHECK(it->axes[1].kind == AxisKind::integer);
  CHECK(it->axes[1].allowed == std::vector<std::string>{"64", "96", "128", "256", "512"});  // 512: MLA's latent
  REQUIRE(it->entries.size() == 2);
  CHECK(it->entries[0].name == "merge");
  CHECK(it->entries[0].params_type == "aotinfer_merge_state_params");
  CHECK(it->entries[1].name == "merge_varlen");
  CHECK(it->entries[1].params_type == "aotinfer_merge_varlen_params");
}
