// aotinfer coverage run as a program on fake packages: the exit status, the report, the spec
// entries it prints for missing variants (which the spec reader takes), and usage errors.
#include "catch.hpp"

#include "coverage_util.hpp"
#include "test_util.hpp"

#include <algorithm>
#include <optional>

#include "aotinfer/json.hpp"
#include "aotinfer/package.hpp"
#include "coverage/needs.hpp"
#include "spec.hpp"

#ifdef AOTINFER_CLI_EXE
namespace fs = std::filesystem;
using namespace aotinfer;
using namespace aotinfer::coverage;
using aotinfer::test::cli;
using aotinfer::test::FakePackage;
using aotinfer::test::fixture_config;
using aotinfer::test::fixture_model;
using aotinfer::test::Run;
using aotinfer::test::TempDir;
using aotinfer_test::Contains;

namespace {

std::string quoted(const fs::path& p) { return "'" + p.string() + "'"; }

std::string coverage_of(const FakePackage& fake, const std::string& model, const std::string& options) {
  return "coverage " + quoted(fake.dir) + " --model " + quoted(fixture_config(model)) + " " + options;
}

// A package holding what Llama-3.1-8B needs (bf16, head_dim 128), but for `leave_out`.
void llama_package(FakePackage& fake, std::optional<Op> leave_out = {}) {
  std::vector<VariantKey> keys;
  for (const auto& n : model_needs(fixture_model("Llama-3.1-8B"), {}).needs)
    if (n.op != leave_out) keys.push_back(n.key);
  aotinfer::test::hold_variants(fake, keys, {"sm_80", "sm_90"});
}

// The JSON the report prints after its "spec entries" line.
nlohmann::json printed_patch(const std::string& output) {
  const auto line = output.find("spec entries that add the missing variants");
  REQUIRE(line != std::string::npos);
  return nlohmann::json::parse(output.substr(output.find('\n', line) + 1));
}

}  // namespace

TEST_CASE("aotinfer coverage: a package with every variant the model needs exits 0", "[coverage][cli]") {
  FakePackage fake;
  llama_package(fake);
  const Run r = cli(coverage_of(fake, "Llama-3.1-8B", "--arch sm_90 --page-size 4096"));
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK_THAT(r.output, Contains("32 query / 8 KV heads (GQA group 4), head_dim 128, full attention; activations bf16, KV cache bf16"));
  CHECK_THAT(r.output, Contains("page size 4096: a run-time value") && Contains("5 variants needed: 5 present. fake-kernels serves this model on sm_90"));
  CHECK_THAT(r.output, !Contains("spec entries"));

  const Run json = cli(coverage_of(fake, "Llama-3.1-8B", "--arch sm_86 --json"));  // sm_80 code runs on sm_86
  CHECK(json.status == 0);
  const auto j = nlohmann::json::parse(json.output);
  CHECK(j["serves"] == true);
  CHECK(j["arch"] == "sm_86");
  CHECK(j["needs"].size() == 5);
  for (const auto& n : j["needs"]) CHECK(n["status"] == "present");
  CHECK(j["needs"][1]["op"] == "prefill_paged");
  CHECK_FALSE(j.contains("spec_patch"));
}

TEST_CASE("aotinfer coverage: missing variants exit 1 with spec entries the spec reader turns into them", "[coverage][cli]") {
  FakePackage fake;
  llama_package(fake);  // the spec's families: one matrix variant each, Llama-3.1-8B's
  // Mistral's windowed layers need no variant of their own; RoPE inside attention does.
  const Run r = cli(coverage_of(fake, "Mistral-7B-v0.1", "--arch sm_90 --fused-rope"));
  INFO(r.output);
  CHECK(r.status == 1);
  const std::string decode = "batch_decode.dtype_q-bf16.dtype_kv-bf16.head_dim-128.dtype_o-bf16.pos_encoding-rope_llama";
  CHECK_THAT(r.output, Contains("decode          missing      " + decode));
  CHECK_THAT(r.output, Contains("to add it, put {\"dtype_q\":\"bf16\",\"dtype_kv\":\"bf16\",\"head_dim\":128,") &&
                           Contains("in \"families\": {\"batch_decode\": {\"include\": [...]}} of fake.aotinfer.json"));
  CHECK_THAT(r.output, Contains("5 variants needed: 2 present, 3 missing. fake-kernels does not serve this model on sm_90"));

  const nlohmann::json patch = printed_patch(r.output);
  REQUIRE(patch["families"].size() == 3);
  CHECK(patch["families"]["batch_decode"]["include"] == nlohmann::json::parse(R"([{"dtype_q": "bf16", "dtype_kv": "bf16",
        "head_dim": 128, "dtype_o": "bf16", "pos_encoding": "rope_llama"}])"));
  // Merged into the package's spec, the printed entries add exactly the missing variants.
  nlohmann::json families = nlohmann::json::object();
  for (const auto& v : fake.manifest.variants) families[v.key.family]["matrix"] = spec_include_entry(v.key);
  for (const auto& [family, entry] : patch["families"].items()) families[family]["include"] = entry["include"];
  const gen::Spec spec = gen::parse_spec(
      R"({"format": 1, "package": {"name": "p", "version": "1"}, "archs": ["sm_90"], "families": )" + families.dump() + "}",
      "spec.json", aotinfer::test::scanned_templates());
  const Package pkg = Package::open(fake.dir);
  std::vector<std::string> added;
  for (const auto& v : spec.variants)
    if (pkg.variants(v.family, v.axes).empty()) added.push_back(v.uri());
  CHECK(added.size() == 3);
  CHECK(std::find(added.begin(), added.end(), decode) != added.end());

  const Run json = cli(coverage_of(fake, "Mistral-7B-v0.1", "--arch sm_90 --fused-rope --json"));
  CHECK(json.status == 1);
  const auto j = nlohmann::json::parse(json.output);
  CHECK(j["spec_patch"] == patch);
  CHECK(j["needs"][0]["status"] == "missing");
  CHECK(j["needs"][0]["spec_entry"] == patch["families"]["batch_decode"]["include"][0]);
}

TEST_CASE("aotinfer coverage: a family the package lacks entirely gets a one-variant matrix", "[coverage][cli]") {
  FakePackage fake;
  llama_package(fake, Op::prefill_ragged);
  const Run r = cli(coverage_of(fake, "Llama-3.1-8B", "--arch sm_90"));
  INFO(r.output);
  CHECK(r.status == 1);
  CHECK_THAT(r.output, Contains("to add it, put \"batch_prefill_ragged\": {\"matrix\": {\"dtype_q\":\"bf16\",") &&
                           Contains("} in \"families\" of fake.aotinfer.json and rebuild the package"));
  const nlohmann::json patch = printed_patch(r.output);
  const gen::Spec spec = gen::parse_spec(
      R"({"format": 1, "package": {"name": "p", "version": "1"}, "archs": ["sm_90"], "families": )" + patch["families"].dump() + "}",
      "spec.json", aotinfer::test::scanned_templates());
  REQUIRE(spec.variants.size() == 1);
  CHECK(spec.variants[0].uri() ==
        "batch_prefill_ragged.dtype_q-bf16.head_dim-128.dtype_kv-bf16.dtype_o-bf16.pos_encoding-none.head_dim_vo-128");
}

TEST_CASE("aotinfer coverage: an MLA model's prefill is missing at head_dim 192 / head_dim_vo 128, and the spec entries say so", "[coverage][cli]") {
  FakePackage fake;
  llama_package(fake);  // prefill at head_dim 128 only
  const Run r = cli(coverage_of(fake, "DeepSeek-V3", "--arch sm_90"));
  INFO(r.output);
  CHECK(r.status == 1);
  const std::string paged = "batch_prefill_paged.dtype_q-bf16.head_dim-192.dtype_kv-bf16.dtype_o-bf16.pos_encoding-none.head_dim_vo-128";
  CHECK_THAT(r.output, Contains("prefill paged   missing      " + paged));
  CHECK_THAT(r.output, Contains("to add it, put {\"dtype_q\":\"bf16\",\"head_dim\":192,\"dtype_kv\":\"bf16\",\"dtype_o\":\"bf16\","
                                "\"pos_encoding\":\"none\",\"head_dim_vo\":128} in \"families\": {\"batch_prefill_paged\""));
  CHECK_THAT(r.output, Contains("merge           present      merge_state.dtype-bf16.head_dim-128"));
  const nlohmann::json patch = printed_patch(r.output);
  for (const char* family : {"batch_prefill_paged", "batch_prefill_ragged"}) {
    INFO(family);
    REQUIRE(patch["families"][family]["include"].size() == 1);
    CHECK(patch["families"][family]["include"][0]["head_dim"] == 192);
    CHECK(patch["families"][family]["include"][0]["head_dim_vo"] == 128);
  }
}

TEST_CASE("aotinfer coverage: code for other archs says which arch to add to the spec", "[coverage][cli]") {
  FakePackage fake;
  llama_package(fake);
  const Run r = cli(coverage_of(fake, "Llama-3.1-8B", "--arch sm_100"));
  INFO(r.output);
  CHECK(r.status == 1);
  CHECK_THAT(r.output, Contains("wrong-arch") && Contains("its code is for sm_80, sm_90: add \"sm_100\" to \"archs\" of fake.aotinfer.json"));
  CHECK_THAT(r.output, Contains("5 variants needed: 5 wrong-arch."));
}

TEST_CASE("aotinfer coverage: features no template has are unsupported, with no spec entry (attention sinks are not one)", "[coverage][cli]") {
  FakePackage fake;
  llama_package(fake);
  // An fp8 cache has templates everywhere: a spec edit away from this package, not unsupported.
  const Run fp8 = cli(coverage_of(fake, "Llama-3.1-8B", "--arch sm_90 --kv-dtype e4m3"));
  INFO(fp8.output);
  CHECK(fp8.status == 1);
  CHECK_THAT(fp8.output, Contains("missing") && Contains("e4m3") && !Contains("unsupported"));
  const Run fused = cli(coverage_of(fake, "Llama-3.1-8B", "--arch sm_90 --fused-rope"));
  INFO(fused.output);
  CHECK(fused.status == 1);
  CHECK_THAT(fused.output, Contains("3 unsupported") && Contains("llama3"));
  CHECK_THAT(fused.output, !Contains("spec entries") && !Contains("to add it"));

  const Run oss = cli(coverage_of(fake, "gpt-oss-20b", "--arch sm_90 --dtype bf16 --json"));
  CHECK(oss.status == 1);
  const auto j = nlohmann::json::parse(oss.output);
  CHECK(j["model"]["layers"] == nlohmann::json{"full", "window"});
  // Attention sinks are a run-time argument, not a feature to refuse: every head_dim 64 variant
  // is a spec edit away from this package, and a note says to pass the sinks.
  for (const auto& need : j["needs"]) CHECK(need["status"] == "missing");
  CHECK(j["needs"].size() == 5);  // windowed and full layers share every variant
  CHECK_THAT(j["notes"].dump(), Contains("attention sinks"));
  CHECK(j["spec_patch"]["families"].size() == 5);

  const Run rope = cli(coverage_of(fake, "Llama-3.1-8B", "--arch sm_90 --fused-rope"));
  CHECK(rope.status == 1);
  CHECK_THAT(rope.output, Contains("fused RoPE with llama3 scaling") && Contains("3 unsupported"));
}

TEST_CASE("aotinfer coverage: an older manifest without families cannot tell missing from unsupported", "[coverage][cli]") {
  FakePackage fake;
  llama_package(fake, Op::merge);
  fake.manifest.families.clear();
  fake.write();
  const Run r = cli(coverage_of(fake, "Llama-3.1-8B", "--arch sm_90"));
  INFO(r.output);
  CHECK(r.status == 1);
  CHECK_THAT(r.output, Contains("does not record what its templates can build") && Contains("merge           unknown"));
  CHECK_THAT(r.output, Contains("the manifest does not say whether the templates can build it; if they can, put "));
  CHECK_THAT(cli(coverage_of(fake, "Phi-3-mini-4k-instruct", "--arch sm_90")).output, Contains("5 unknown."));
}

TEST_CASE("aotinfer coverage: usage errors and unreadable inputs exit 2 saying what is wrong", "[coverage][cli]") {
  FakePackage fake;
  llama_package(fake);
  TempDir tmp;
  write_file_atomic(tmp.path / "broken.json", "{\"num_attention_heads\": 32, ");
  write_file_atomic(tmp.path / "heads.json", "{\"num_attention_heads\": \"many\", \"torch_dtype\": \"bfloat16\"}");
  const std::string pkg = quoted(fake.dir), llama = " --model " + quoted(fixture_config("Llama-3.1-8B"));
  const std::vector<std::pair<std::string, std::string>> cases = {
      {pkg + " --arch sm_90", "--model config.json is required"},
      {llama + " --arch sm_90", "expected one PACKAGE folder, got none"},
      {pkg + " " + pkg + llama, "expected one PACKAGE folder, got 2"},
      {pkg + llama + " --arch", "--arch needs a value"},
      {pkg + llama + " --arch sm_91", "--arch: expected a GPU arch (sm_75, sm_80,"},
      {pkg + llama + " --arch sm_90 --dtype f32", "--dtype: expected one of f16, bf16, got 'f32'"},
      {pkg + llama + " --arch sm_90 --kv-dtype fp4", "--kv-dtype: expected one of f16, bf16, e4m3, e5m2, auto, got 'fp4'"},
      {pkg + llama + " --arch sm_90 --page-size 0", "--page-size: expected a number of tokens per page, an integer from 1 to 2147483647, got '0'"},
      {pkg + llama + " --arch sm_90 --page-size 16k", "got '16k'"},
      {pkg + llama + " --arch sm_90 --verbose", "unknown option '--verbose' (options: --model, --arch,"},
      {pkg + " --arch sm_90 --model " + quoted(tmp.path / "broken.json"), (tmp.path / "broken.json").string() + ": not valid JSON"},
      {pkg + " --arch sm_90 --model " + quoted(tmp.path / "heads.json"),
       (tmp.path / "heads.json").string() + ": num_attention_heads: expected a positive integer below 2^31, got \"many\""},
      {pkg + " --arch sm_90 --model " + quoted(tmp.path / "none.json"), "cannot read " + (tmp.path / "none.json").string()},
      {pkg + " --arch sm_90 --model " + quoted(fixture_config("gpt-oss-20b")),
       "gpt-oss-20b/config.json: torch_dtype: expected \"bfloat16\", \"float16\" or \"float32\", got nothing (the field is missing); or pass --dtype f16|bf16"},
      {quoted(tmp.path / "no-package") + llama + " --arch sm_90", "no kernel package at " + (tmp.path / "no-package").string()},
  };
  for (const auto& [args, expected] : cases) {
    INFO(args);
    const Run r = cli("coverage " + args);
    CHECK(r.status == 2);
    CHECK_THAT(r.output, Contains("aotinfer: coverage: ") && Contains(expected));
  }
  // Without --arch the GPU's arch is used; without a GPU that is a usage error naming --arch.
  bool has_gpu = true;
  try {
    current_device_arch();
  } catch (const Error&) {
    has_gpu = false;
  }
  if (!has_gpu) {
    const Run r = cli("coverage " + pkg + llama);
    CHECK(r.status == 2);
    CHECK_THAT(r.output, Contains("no GPU to take the arch from") && Contains("pass --arch, e.g. one of fake-kernels's archs: sm_80, sm_90"));
  }
}
#endif
