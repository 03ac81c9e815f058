// The template scanner against fixtures (tests/fixtures/scanner) and the real templates.
// Each scan is one Clang parse (~0.5 s), so fixtures are small and scanned once per test.
#include <stdlib.h>

#include <algorithm>
#include "catch.hpp"
#include <filesystem>
#include <fstream>
#include <sstream>

#include "scanner.hpp"
#include "spec.hpp"

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

TEST_CASE("scanner: an integer default naming an earlier integer parameter follows it", "[scanner]") {
  TempCopy copy(kFixtures / "good");
  fs::path header = copy.dir / "attention.cuh";
  std::string text = read(header);
  const std::string params = "int head_dim = 128>", values = "AOTINFER_VALUES(\"head_dim\", 64, 128, 256) attention {";
  REQUIRE(text.find(params) != std::string::npos);
  REQUIRE(text.find(values) != std::string::npos);
  auto with_default = [&](const std::string& default_text) {
    std::string t = text;
    t.replace(t.find(params), params.size(), "int head_dim = 128, int head_dim_vo = " + default_text + ">");
    t.replace(t.find(values), values.size(),
              "AOTINFER_VALUES(\"head_dim\", 64, 128, 256) AOTINFER_VALUES(\"head_dim_vo\", 64, 128) attention {");
    std::ofstream(header) << t;
  };

  SECTION("`int head_dim_vo = head_dim`: follows, with no default value of its own") {
    with_default("head_dim");
    auto families = scan_templates(options(copy.dir));
    REQUIRE(families.size() == 2);
    FamilySchema expected = expected_attention();
    expected.axes.push_back(axis("head_dim_vo", AxisKind::integer, {"64", "128"}, 27));
    expected.axes.back().follows = "head_dim";
    expected.axes.back().cpp_type = "int";
    CHECK(families[0] == expected);
    CHECK_FALSE(families[0].axes.back().required());
  }
  SECTION("a constant default stays a default value") {
    with_default("64");
    auto families = scan_templates(options(copy.dir));
    REQUIRE(families.size() == 2);
    CHECK_FALSE(families[0].axes.back().follows);
    CHECK(families[0].axes.back().default_value == "64");
  }
  SECTION("a default naming a bool parameter is refused") {
    with_default("causal");
    std::string message;
    try {
      scan_templates(options(copy.dir));
    } catch (const ScanError& e) {
      message = e.what();
    }
    CHECK_THAT(message, aotinfer_test::StartsWith("attention.cuh:27: "));
    CHECK_THAT(message, aotinfer_test::Contains("the default of 'head_dim_vo' names 'causal', which is not an integer parameter"));
  }
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

  // The prefill families' last axis, the width of V and o rows, follows head_dim.
  for (const char* name : {"batch_prefill_paged", "batch_prefill_ragged"}) {
    INFO(name);
    auto prefill = std::find_if(families.begin(), families.end(), [&](auto& f) { return f.name == name; });
    REQUIRE(prefill != families.end());
    const Axis& vo = prefill->axes.back();
    CHECK(vo.name == "head_dim_vo");
    CHECK(vo.kind == AxisKind::integer);
    CHECK(vo.follows == std::optional<std::string>("head_dim"));
    CHECK_FALSE(vo.default_value);
  }
  // A spec leaving head_dim_vo out gets head_dim's value; head_dim 192 (MLA's q.k) must name it.
  auto spec = [&](const std::string& entry) {
    return parse_spec(R"({"format": 1, "package": {"name": "p", "version": "1"}, "archs": ["sm_90"], "families": {"batch_prefill_ragged": )" +
                          entry + "}}",
                      "spec.json", families);
  };
  const Spec s = spec(R"({"matrix": {"dtype_q": "bf16", "head_dim": 128}, "include": [{"dtype_q": "bf16", "head_dim": 192, "head_dim_vo": 128}]})");
  REQUIRE(s.variants.size() == 2);
  CHECK(s.variants[0].uri() == "batch_prefill_ragged.dtype_q-bf16.head_dim-128.dtype_kv-bf16.dtype_o-bf16.pos_encoding-none.head_dim_vo-128");
  CHECK(s.variants[1].uri() == "batch_prefill_ragged.dtype_q-bf16.head_dim-192.dtype_kv-bf16.dtype_o-bf16.pos_encoding-none.head_dim_vo-128");
  try {
    spec(R"({"matrix": {"dtype_q": "bf16", "head_dim": 192}})");
    FAIL("head_dim 192 without head_dim_vo was accepted");
  } catch (const SpecError& e) {
    CHECK_THAT(e.what(), aotinfer_test::Contains("'head_dim_vo' follows 'head_dim' = 192, which 'head_dim_vo' does not allow"));
  }
}
