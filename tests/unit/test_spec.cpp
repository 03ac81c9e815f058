// Spec reading, validation and expansion, against hand-built schemas (independent of the
// scanner): every error class names the file and the JSON pointer (or line:column).
#include "catch.hpp"

#include "spec.hpp"
#include "unit/toy_families.hpp"

using namespace aotinfer;
using namespace aotinfer::gen;
using aotinfer_test::Contains;
using aotinfer::test::toy_families;

namespace {

std::string spec_with(const std::string& families) {
  return R"({"format": 1, "package": {"name": "p", "version": "1"}, "archs": ["sm_90"], "families": )" + families + "}";
}

Spec parse(const std::string& text) { return parse_spec(text, "specs/test.json", toy_families()); }

std::vector<std::string> uris(const Spec& s) {
  std::vector<std::string> out;
  for (const auto& v : s.variants) out.push_back(v.uri());
  return out;
}

}  // namespace

TEST_CASE("a matrix expands in template-parameter order with defaults and followers filled in") {
  Spec s = parse(spec_with(R"({"toy": {"matrix": {"head_dim": [64, 128], "dtype": ["f16", "bf16"]}}})"));
  CHECK(s.package_name == "p");
  CHECK(s.archs == std::vector<std::string>{"sm_90"});
  CHECK(uris(s) == std::vector<std::string>{
                       "toy.dtype-f16.dtype_o-f16.mask-none.soft_cap-false.head_dim-64",
                       "toy.dtype-f16.dtype_o-f16.mask-none.soft_cap-false.head_dim-128",
                       "toy.dtype-bf16.dtype_o-bf16.mask-none.soft_cap-false.head_dim-64",
                       "toy.dtype-bf16.dtype_o-bf16.mask-none.soft_cap-false.head_dim-128",
                   });
}

TEST_CASE("explicit values override defaults and followers and scalars count as one value") {
  Spec s = parse(spec_with(
      R"({"toy": {"matrix": {"dtype": "bf16", "dtype_o": "f32", "mask": ["none", "causal"], "soft_cap": true, "head_dim": 256}}})"));
  CHECK(uris(s) == std::vector<std::string>{
                       "toy.dtype-bf16.dtype_o-f32.mask-none.soft_cap-true.head_dim-256",
                       "toy.dtype-bf16.dtype_o-f32.mask-causal.soft_cap-true.head_dim-256",
                   });
}

TEST_CASE("exclusions remove matching variants and inclusions add single variants") {
  Spec s = parse(spec_with(R"({"toy": {
      "matrix": {"dtype": ["f16", "bf16"], "head_dim": [64, 128, 256]},
      "exclude": [{"dtype": "f16", "head_dim": [128, 256]}],
      "include": [{"dtype": "f16", "head_dim": 128, "mask": "causal"}]}})"));
  CHECK(uris(s) == std::vector<std::string>{
                       "toy.dtype-f16.dtype_o-f16.mask-none.soft_cap-false.head_dim-64",
                       "toy.dtype-bf16.dtype_o-bf16.mask-none.soft_cap-false.head_dim-64",
                       "toy.dtype-bf16.dtype_o-bf16.mask-none.soft_cap-false.head_dim-128",
                       "toy.dtype-bf16.dtype_o-bf16.mask-none.soft_cap-false.head_dim-256",
                       "toy.dtype-f16.dtype_o-f16.mask-causal.soft_cap-false.head_dim-128",
                   });
}

TEST_CASE("an integer axis that follows an earlier one takes its value unless the spec sets it") {
  // As the prefill families' head_dim_vo follows head_dim: 192 pairs with 128 only.
  std::vector<FamilySchema> families = toy_families({"64", "128", "192"});
  FamilySchema& toy = families[1];
  REQUIRE(toy.name == "toy");
  toy.axes.push_back({"head_dim_vo", AxisKind::integer, {"64", "128"}, {}, "head_dim", "int", {"toy.cuh", 16}});
  auto parse_toy = [&](const std::string& text) { return parse_spec(spec_with(text), "specs/test.json", families); };

  Spec s = parse_toy(R"({"toy": {"matrix": {"dtype": "f16", "head_dim": [64, 128]},
                                 "include": [{"dtype": "f16", "head_dim": 192, "head_dim_vo": 128}]}})");
  CHECK(uris(s) == std::vector<std::string>{
                       "toy.dtype-f16.dtype_o-f16.mask-none.soft_cap-false.head_dim-64.head_dim_vo-64",
                       "toy.dtype-f16.dtype_o-f16.mask-none.soft_cap-false.head_dim-128.head_dim_vo-128",
                       "toy.dtype-f16.dtype_o-f16.mask-none.soft_cap-false.head_dim-192.head_dim_vo-128",
                   });
  try {
    parse_toy(R"({"toy": {"matrix": {"dtype": "f16", "head_dim": 192}}})");
    FAIL("head_dim 192 without head_dim_vo was accepted");
  } catch (const SpecError& e) {
    CHECK_THAT(e.what(), Contains("/families/toy/matrix:") &&
                             Contains("axis 'head_dim_vo' follows 'head_dim' = 192, which 'head_dim_vo' does not allow") &&
                             Contains("set 'head_dim_vo' explicitly") && Contains("allowed: 64, 128"));
  }
}

TEST_CASE("the spec hash ignores formatting but not content") {
  Spec a = parse(spec_with(R"({"toy": {"matrix": {"dtype": "f16", "head_dim": 64}}})"));
  Spec b = parse("\n\n" + spec_with(R"({ "toy" : { "matrix" : { "head_dim" : 64, "dtype" : "f16" } } })"));
  Spec c = parse(spec_with(R"({"toy": {"matrix": {"dtype": "f16", "head_dim": 128}}})"));
  CHECK(a.sha256 == b.sha256);
  CHECK(a.sha256 != c.sha256);
  CHECK(a.sha256.size() == 64);
}

TEST_CASE("malformed JSON reports line and column") {
  std::string text = "{\n  \"format\": 1,\n  \"package\": {\"name\": \"p\",, \"version\": \"1\"}\n}";
  REQUIRE_THROWS_AS(parse(text), SpecError);
  CHECK_THROWS_WITH(parse(text), Contains("specs/test.json:3:") && Contains("malformed JSON"));
  CHECK_THROWS_WITH(parse(text), Contains("specs/test.json:3:27"));
}

TEST_CASE("each bad-spec class names the file, the JSON pointer and what is allowed") {
  struct Case {
    const char* what;
    std::string text;
    std::vector<std::string> expected;  // substrings of the message
  };
  const std::vector<Case> cases = {
      {"unknown family", spec_with(R"({"nope": {"matrix": {}}})"),
       {"specs/test.json: /families/nope:", "unknown family 'nope'", "toy (toy.cuh:10)", "narrow"}},
      {"unknown axis", spec_with(R"({"toy": {"matrix": {"dtype": "f16", "head_dim": 64, "hd": 64}}})"),
       {"/families/toy/matrix/hd:", "no axis 'hd'", "dtype, dtype_o, mask, soft_cap, head_dim"}},
      {"unknown value", spec_with(R"({"toy": {"matrix": {"dtype": "f16", "head_dim": [64, 96]}}})"),
       {"/families/toy/matrix/head_dim/1:", "value 96 is not allowed", "allowed: 64, 128, 256 (toy.cuh:15)"}},
      {"unknown enumerator", spec_with(R"({"toy": {"matrix": {"dtype": "f16", "head_dim": 64, "mask": "sliding"}}})"),
       {"/families/toy/matrix/mask:", "\"sliding\" is not allowed", "allowed: none, causal"}},
      {"wrong type (string for int)", spec_with(R"({"toy": {"matrix": {"dtype": "f16", "head_dim": ["64"]}}})"),
       {"/families/toy/matrix/head_dim/0:", "takes an integer, got string", "allowed: 64, 128, 256"}},
      {"wrong type (int for bool)", spec_with(R"({"toy": {"matrix": {"dtype": "f16", "head_dim": 64, "soft_cap": 1}}})"),
       {"/families/toy/matrix/soft_cap:", "takes a boolean"}},
      {"wrong type (matrix not an object)", spec_with(R"({"toy": {"matrix": []}})"),
       {"/families/toy/matrix:", "expected an object, got array"}},
      {"empty value list", spec_with(R"({"toy": {"matrix": {"dtype": [], "head_dim": 64}}})"),
       {"/families/toy/matrix/dtype:", "empty list", "allowed: f16, bf16"}},
      {"no families", spec_with("{}"), {"/families:", "no families"}},
      {"missing required axis", spec_with(R"({"toy": {"matrix": {"dtype": "f16"}}})"),
       {"/families/toy/matrix:", "missing required axis 'head_dim'"}},
      {"follower not allowed", spec_with(R"({"narrow": {"matrix": {"dtype": "bf16", "head_dim": 64}}})"),
       {"/families/narrow/matrix:", "'dtype_o' follows 'dtype' = bf16", "set 'dtype_o' explicitly"}},
      {"unknown arch",
       R"({"format": 1, "package": {"name": "p", "version": "1"}, "archs": ["sm_90", "sm_91"], "families": {}})",
       {"/archs/1:", "unknown arch 'sm_91'", "sm_80", "sm_90a"}},
      {"empty arch list", R"({"format": 1, "package": {"name": "p", "version": "1"}, "archs": [], "families": {}})",
       {"/archs:", "non-empty list"}},
      {"duplicate arch",
       R"({"format": 1, "package": {"name": "p", "version": "1"}, "archs": ["sm_90", "sm_90"], "families": {}})",
       {"/archs/1:", "duplicate arch"}},
      {"duplicate value", spec_with(R"({"toy": {"matrix": {"dtype": ["f16", "f16"], "head_dim": 64}}})"),
       {"/families/toy/matrix/dtype/1:", "duplicate value \"f16\""}},
      {"duplicate variant (include repeats the matrix)",
       spec_with(R"({"toy": {"matrix": {"dtype": "f16", "head_dim": 64}, "include": [{"dtype": "f16", "head_dim": 64}]}})"),
       {"/families/toy/include/0:", "duplicate variant toy.dtype-f16", "/families/toy/matrix already produces it"}},
      {"exclusion matching nothing",
       spec_with(R"({"toy": {"matrix": {"dtype": "f16", "head_dim": 64}, "exclude": [{"head_dim": 128}]}})"),
       {"/families/toy/exclude/0:", "matches no variant"}},
      {"exclusions removing everything",
       spec_with(R"({"toy": {"matrix": {"dtype": "f16", "head_dim": 64}, "exclude": [{"dtype": "f16"}]}})"),
       {"/families/toy:", "remove every variant"}},
      {"unknown top-level key", R"({"format": 1, "pkg": {}})", {"specs/test.json: /pkg:", "unknown key 'pkg'", "allowed: $schema, format"}},
      {"unknown family key", spec_with(R"({"toy": {"matrix": {"dtype": "f16", "head_dim": 64}, "exlude": []}})"),
       {"/families/toy/exlude:", "allowed: matrix, exclude, include"}},
      {"missing package", R"({"format": 1, "archs": ["sm_90"], "families": {}})", {"specs/test.json: /:", "missing required key 'package'"}},
      {"bad package name", R"({"format": 1, "package": {"name": "My Pkg", "version": "1"}})", {"/package/name:", "not a package name"}},
      {"unsupported format", R"({"format": 2})", {"/format:", "format 2 is not supported"}},
      {"list in an inclusion", spec_with(R"({"toy": {"matrix": {"dtype": "f16", "head_dim": 64}, "include": [{"dtype": "bf16", "head_dim": [64]}]}})"),
       {"/families/toy/include/0/head_dim:", "one value per axis"}},
  };
  for (const auto& c : cases) {
    INFO(c.what);
    try {
      parse(c.text);
      FAIL("accepted a bad spec: " << c.what);
    } catch (const SpecError& e) {
      for (const auto& s : c.expected) CHECK_THAT(e.what(), Contains(s));
    }
  }
}

TEST_CASE("a missing spec file is a clear error") {
  CHECK_THROWS_WITH(load_spec("/nonexistent/spec.json", toy_families()), Contains("/nonexistent/spec.json"));
}
