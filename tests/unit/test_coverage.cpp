// aotinfer coverage's logic: reading config.json, the variants a model needs, and whether a
// package (or the plan of specs/default.json) serves them. The CLI's own tests are in
// test_coverage_cli.cpp.
#include "catch.hpp"

#include "coverage_util.hpp"
#include "test_util.hpp"

#include <algorithm>
#include <fstream>

#include "aotinfer/batch_decode.hpp"
#include "aotinfer/files.hpp"
#include "coverage/check.hpp"
#include "coverage/model_config.hpp"
#include "coverage/needs.hpp"
#include "emit.hpp"
#include "spec.hpp"

namespace fs = std::filesystem;
using namespace aotinfer;
using namespace aotinfer::coverage;
using aotinfer::test::TempDir;
using aotinfer::test::fixture_model;
using aotinfer::test::template_families;
using aotinfer_test::Contains;

namespace {

std::vector<std::string> uris(const Needs& n) {
  std::vector<std::string> out;
  for (const auto& need : n.needs) out.push_back(need.key.uri());
  return out;
}

const Need& need_of(const Needs& n, Op op, const std::string& layers = "") {
  for (const auto& need : n.needs)
    if (need.op == op && need.layers == layers) return need;
  FAIL("no need for " << op_name(op) << " " << layers);
  return n.needs.front();
}

Options with_dtype(DType dtype) {
  Options o;
  o.dtype = dtype;
  return o;
}

std::string config_error(const std::string& text) {
  try {
    parse_model_config(nlohmann::json::parse(text), "m/config.json");
  } catch (const ConfigError& e) {
    return e.what();
  }
  FAIL("no ConfigError for " << text);
  return {};
}

// A shipped spec as the generator plans it, with the archs and PTX seal would record (it
// refuses a fatbin that lacks one of the spec's): building the real package takes too long here.
Manifest planned(const std::string& spec) {
  Manifest m = gen::package_plan(gen::load_spec(AOTINFER_SOURCE_DIR "/specs/" + spec, aotinfer::test::scanned_templates()),
                                 aotinfer::test::scanned_templates());
  for (auto& v : m.variants) {
    v.archs = m.archs;
    if (!m.ptx.empty()) v.ptx = {m.ptx};
  }
  return m;
}

const Manifest& default_plan() {
  static const Manifest plan = planned("default.json");
  return plan;
}

std::vector<Status> statuses(const std::vector<Finding>& findings) {
  std::vector<Status> out;
  for (const auto& f : findings) out.push_back(f.status);
  return out;
}

}  // namespace

TEST_CASE("coverage: the fixtures' config.json files read as their models are", "[coverage][config]") {
  struct Row {
    const char* name;
    int qo, kv, head_dim;
    const char* dtype;
    bool full, sliding;
    std::optional<double> soft_cap;
    const char* rope_type;
    bool sinks;
  };
  for (const Row& r : std::vector<Row>{{"Llama-3.1-8B", 32, 8, 128, "bfloat16", true, false, {}, "llama3", false},
                                       {"Qwen2.5-7B", 28, 4, 128, "bfloat16", true, false, {}, "", false},
                                       {"Mistral-7B-v0.1", 32, 8, 128, "bfloat16", false, true, {}, "", false},
                                       {"Gemma-2-9B", 16, 8, 256, "float32", true, true, 50.0, "", false},
                                       {"Phi-3-mini-4k-instruct", 32, 32, 96, "bfloat16", false, true, {}, "", false},
                                       {"gpt-oss-20b", 64, 8, 64, "", true, true, {}, "yarn", true},
                                       {"Llama-3.2-1B", 32, 8, 64, "bfloat16", true, false, {}, "llama3", false}}) {
    INFO(r.name);
    const ModelConfig m = fixture_model(r.name);
    CHECK(m.num_qo_heads == r.qo);
    CHECK(m.num_kv_heads == r.kv);
    CHECK(m.head_dim == r.head_dim);
    CHECK(m.torch_dtype == r.dtype);
    CHECK(m.full_layers == r.full);
    CHECK(m.sliding_layers == r.sliding);
    CHECK(m.soft_cap == r.soft_cap);  // Gemma 2's final_logit_softcapping is not attention's
    CHECK(m.rope_type == r.rope_type);
    CHECK(m.attention_sinks == r.sinks);
    CHECK(m.other_layer_types.empty());
  }
  CHECK(fixture_model("Llama-3.2-1B").rope_factor == 32.0);
  CHECK(fixture_model("Gemma-2-9B").query_pre_attn_scalar == 256.0);
  CHECK(fixture_model("gpt-oss-20b").sliding_window == 128);
}

TEST_CASE("coverage: layer kinds from layer_types, use_sliding_window, max_window_layers and text_config", "[coverage][config]") {
  auto parse = [](const std::string& text) { return parse_model_config(nlohmann::json::parse(text), "m/config.json"); };
  const std::string heads = R"("num_attention_heads": 8, "head_dim": 64, )";
  ModelConfig m = parse("{" + heads + R"("sliding_window": 512, "layer_types": ["full_attention", "chunked_attention"]})");
  CHECK((m.full_layers && !m.sliding_layers && m.other_layer_types == std::vector<std::string>{"chunked_attention"}));
  m = parse("{" + heads + R"("sliding_window": 4096, "use_sliding_window": true, "max_window_layers": 20, "num_hidden_layers": 28})");
  CHECK((m.full_layers && m.sliding_layers));
  m = parse("{" + heads + R"("sliding_window": 4096, "use_sliding_window": true, "max_window_layers": 0, "num_hidden_layers": 28})");
  CHECK((!m.full_layers && m.sliding_layers));
  m = parse("{" + heads + R"("sliding_window": 1024, "sliding_window_pattern": 6})");
  CHECK((m.full_layers && m.sliding_layers));
  m = parse("{" + heads + R"("sliding_window": null, "attn_logit_softcapping": null})");
  CHECK((m.full_layers && !m.sliding_layers && !m.soft_cap));
  m = parse(R"({"torch_dtype": "bfloat16", "text_config": {"num_attention_heads": 16, "num_key_value_heads": 4, "hidden_size": 2048}})");
  CHECK((m.num_qo_heads == 16 && m.num_kv_heads == 4 && m.head_dim == 128 && m.torch_dtype == "bfloat16"));
  m = parse("{" + heads + R"("dtype": "float16", "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0}})");
  CHECK((m.torch_dtype == "float16" && m.rope_type.empty() && m.rope_theta == 1e6));
  m = parse("{" + heads + R"("rope_scaling": {"type": "linear", "factor": 4.0}})");
  CHECK((m.rope_type == "linear" && m.rope_factor == 4.0));
}

TEST_CASE("coverage: a config.json that is not what it should be names the file, the field and what was expected", "[coverage][config]") {
  CHECK_THAT(config_error("[1, 2]"), Contains("m/config.json: expected a JSON object (a Hugging Face config.json), got array"));
  CHECK_THAT(config_error("{}"), Contains("m/config.json: num_attention_heads: expected a positive integer, got nothing (the field is missing)"));
  CHECK_THAT(config_error(R"({"num_attention_heads": "32"})"),
             Contains("num_attention_heads: expected a positive integer below 2^31, got \"32\""));
  CHECK_THAT(config_error(R"({"num_attention_heads": 32, "head_dim": -64})"),
             Contains("head_dim: expected a positive integer below 2^31, got -64"));
  CHECK_THAT(config_error(R"({"num_attention_heads": 32})"),
             Contains("head_dim: expected a positive integer, or hidden_size to derive it from, got nothing"));
  CHECK_THAT(config_error(R"({"num_attention_heads": 32, "hidden_size": 3000})"),
             Contains("hidden_size: expected a multiple of num_attention_heads (32) when head_dim is absent, got 3000"));
  const std::string ok = R"("num_attention_heads": 32, "head_dim": 128, )";
  CHECK_THAT(config_error("{" + ok + R"("layer_types": "alternating"})"),
             Contains("layer_types: expected an array of layer types such as \"full_attention\" and \"sliding_attention\", got \"alternating\""));
  CHECK_THAT(config_error("{" + ok + R"("layer_types": ["sliding_attention"]})"),
             Contains("sliding_window: expected a positive integer: layer_types has sliding_attention layers, got nothing"));
  CHECK_THAT(config_error("{" + ok + R"("rope_scaling": {"factor": 8.0}})"),
             Contains("rope_scaling.rope_type: expected the name of the RoPE scaling"));
  CHECK_THAT(config_error("{" + ok + R"("rope_scaling": "llama3"})"), Contains("rope_scaling: expected an object naming rope_type, or null"));
  CHECK_THAT(config_error("{" + ok + R"("attn_logit_softcapping": 0})"),
             Contains("attn_logit_softcapping: expected a positive number or null, got 0"));
  CHECK_THAT(config_error("{" + ok + R"("use_sliding_window": "yes", "sliding_window": 8})"),
             Contains("use_sliding_window: expected true or false, got \"yes\""));
  CHECK_THAT(config_error(R"({"text_config": {"num_attention_heads": 0}})"),
             Contains("text_config.num_attention_heads: expected a positive integer below 2^31, got 0"));

  TempDir tmp;
  auto load_error = [](const fs::path& file) {
    try {
      load_model_config(file);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  write_file_atomic(tmp.path / "bad.json", "{\"num_attention_heads\": 32,");
  CHECK_THAT(load_error(tmp.path / "bad.json"), Contains((tmp.path / "bad.json").string() + ": not valid JSON"));
  CHECK_THAT(load_error(tmp.path / "none.json"), Contains("cannot read " + (tmp.path / "none.json").string()));
  CHECK_THAT(load_error(tmp.path), Contains(tmp.path.string() + ": expected a config.json file, got a directory"));
}

TEST_CASE("coverage: a model needs what the front-ends would load for it", "[coverage][needs]") {
  const Needs llama = model_needs(fixture_model("Llama-3.1-8B"), {});
  BatchDecodeConfig decode;  // the front-end's own defaults are Llama-3.1-8B's shape
  CHECK(llama.needs.size() == 5);
  CHECK(need_of(llama, Op::decode).key == BatchDecode::variant_key(decode));
  CHECK(uris(llama) == std::vector<std::string>{
                           "batch_decode.dtype_q-bf16.dtype_kv-bf16.head_dim-128.dtype_o-bf16.pos_encoding-none.sliding_window-false.soft_cap-false",
                           "batch_prefill_paged.dtype_q-bf16.head_dim-128.mask-causal.dtype_kv-bf16.dtype_o-bf16.pos_encoding-none.sliding_window-false.soft_cap-false",
                           "batch_prefill_ragged.dtype_q-bf16.head_dim-128.mask-causal.dtype_kv-bf16.dtype_o-bf16.pos_encoding-none.sliding_window-false.soft_cap-false",
                           "append_paged_kv.dtype-bf16.head_dim-128", "merge_state.dtype-bf16.head_dim-128"});
  for (const auto& n : llama.needs) CHECK(n.refusals.empty());
  CHECK_THAT(llama.notes.at(0), Contains("page size 16: a run-time value") && Contains("not a variant axis"));

  SECTION("alternating layers need a full and a windowed variant of each attention op, with the soft cap") {
    const Needs gemma = model_needs(fixture_model("Gemma-2-9B"), with_dtype(DType::bf16));
    CHECK(gemma.needs.size() == 8);
    CHECK(*need_of(gemma, Op::decode, "full").key.find("sliding_window") == "false");
    CHECK(*need_of(gemma, Op::prefill_ragged, "window").key.find("sliding_window") == "true");
    CHECK(*need_of(gemma, Op::prefill_paged, "window").key.find("soft_cap") == "true");
    CHECK(*need_of(gemma, Op::merge).key.find("head_dim") == "256");
  }
  SECTION("an fp8 KV cache: decode, paged prefill and append read or write it; ragged prefill reads activations") {
    Options o;
    o.kv_dtype = DType::e4m3;
    const Needs n = model_needs(fixture_model("Llama-3.1-8B"), o);
    CHECK(*need_of(n, Op::decode).key.find("dtype_kv") == "e4m3");
    CHECK(*need_of(n, Op::prefill_paged).key.find("dtype_kv") == "e4m3");
    CHECK(*need_of(n, Op::prefill_ragged).key.find("dtype_kv") == "bf16");
    CHECK(*need_of(n, Op::append).key.find("dtype") == "e4m3");
    CHECK(*need_of(n, Op::merge).key.find("dtype") == "bf16");
  }
  SECTION("fused RoPE: rope_llama variants; llama3 scaling is refused, linear scaling is a run-time value") {
    Options fused;
    fused.fused_rope = true;
    const Needs n = model_needs(fixture_model("Llama-3.1-8B"), fused);
    CHECK(*need_of(n, Op::decode).key.find("pos_encoding") == "rope_llama");
    for (Op op : {Op::decode, Op::prefill_paged, Op::prefill_ragged})
      CHECK_THAT(need_of(n, op).refusals.at(0), Contains("fused RoPE with llama3 scaling: rope_llama computes plain frequencies"));
    CHECK(need_of(n, Op::append).refusals.empty());
    ModelConfig linear = fixture_model("Qwen2.5-7B");
    linear.rope_type = "linear", linear.rope_factor = 4.0;
    const Needs ok = model_needs(linear, fused);
    CHECK(need_of(ok, Op::decode).refusals.empty());
    CHECK_THAT(ok.notes.at(1), Contains("pass rope_theta 1000000, rope_scale 4 at run time"));
  }
  SECTION("what the decode constructor refuses: a GQA group above 64, heads that do not divide") {
    ModelConfig m = fixture_model("Llama-3.1-8B");
    m.num_qo_heads = 96, m.num_kv_heads = 1;
    const Needs wide = model_needs(m, {});
    CHECK_THAT(need_of(wide, Op::decode).refusals.at(0), Contains("batch_decode: the GQA group size num_qo_heads / num_kv_heads is 96; at most 64"));
    CHECK(need_of(wide, Op::prefill_paged).refusals.empty());
    m.num_qo_heads = 30, m.num_kv_heads = 8;
    const Needs uneven = model_needs(m, {});
    CHECK_THAT(need_of(uneven, Op::prefill_ragged).refusals.at(0), Contains("num_qo_heads (30) must be a multiple of num_kv_heads (8)"));
  }
  SECTION("the activation dtype: float32 is noted and checked as f32; a config without one needs --dtype") {
    const Needs f32 = model_needs(fixture_model("Gemma-2-9B"), {});
    CHECK(f32.activation == DType::f32);
    CHECK_THAT(f32.notes.at(0), Contains("torch_dtype is float32") && Contains("pass --dtype bf16"));
    CHECK(model_needs(fixture_model("Gemma-2-9B"), with_dtype(DType::f16)).activation == DType::f16);
    try {
      model_needs(fixture_model("gpt-oss-20b"), {});
      FAIL("no ConfigError");
    } catch (const ConfigError& e) {
      CHECK_THAT(e.what(), Contains("gpt-oss-20b/config.json: torch_dtype: expected") && Contains("--dtype"));
    }
  }
  SECTION("attention sinks are a run-time argument: no refusal, a note") {
    const Needs oss = model_needs(fixture_model("gpt-oss-20b"), with_dtype(DType::bf16));
    CHECK(oss.needs.size() == 8);
    CHECK(std::all_of(oss.needs.begin(), oss.needs.end(), [](const Need& n) { return n.refusals.empty(); }));
    CHECK(std::any_of(oss.notes.begin(), oss.notes.end(), [](const std::string& s) {
      return s.find("attention sinks") != std::string::npos && s.find("run-time argument") != std::string::npos;
    }));
  }
}

TEST_CASE("coverage: present, wrong arch, missing, unsupported, and unknown without recorded families", "[coverage][check]") {
  const Needs n = model_needs(fixture_model("Llama-3.1-8B"), {});
  Manifest m;
  m.spec_file = "mine.json";
  m.families = template_families();
  auto hold = [&](std::size_t i, std::vector<std::string> archs) {
    ManifestVariant v;
    v.key = n.needs[i].key;
    v.file = "kernels/" + std::to_string(i);
    v.size = 1;
    v.archs = std::move(archs);
    m.variants.push_back(std::move(v));
  };
  hold(0, {"sm_80"});
  hold(1, {"sm_90a"});
  hold(3, {"sm_80", "sm_90"});
  const Arch sm_86{8, 6, false}, sm_90{9, 0, false};
  using S = Status;
  CHECK(statuses(check_needs(m, n.needs, sm_86)) == std::vector<S>{S::present, S::wrong_arch, S::missing, S::present, S::missing});
  // Arch-specific code runs on exactly its chip; sm_80 code runs on no sm_90.
  CHECK(statuses(check_needs(m, n.needs, sm_90)) == std::vector<S>{S::wrong_arch, S::present, S::missing, S::present, S::missing});
  CHECK(check_needs(m, n.needs, sm_90)[0].archs == std::vector<std::string>{"sm_80"});
  // With PTX, code for sm_80 serves a Blackwell GPU too (the driver compiles it), and says so.
  m.variants[0].ptx = {"compute_80"};
  const Arch sm_120{12, 0, false};
  const auto from_ptx = check_needs(m, n.needs, sm_120);
  CHECK(statuses(from_ptx) == std::vector<S>{S::present, S::wrong_arch, S::missing, S::wrong_arch, S::missing});
  CHECK(from_ptx[0].ptx == std::vector<std::string>{"compute_80"});
  CHECK(check_needs(m, n.needs, sm_86)[0].ptx.empty());  // its SASS runs there
  m.variants[0].ptx.clear();

  // A value no template takes: no paged prefill template reads an fp8 cache.
  Options fp8;
  fp8.kv_dtype = DType::e4m3;
  const auto with_fp8 = check_needs(m, model_needs(fixture_model("Llama-3.1-8B"), fp8).needs, sm_90);
  REQUIRE(with_fp8.size() == 5);
  CHECK(with_fp8[1].need.key.family == "batch_prefill_paged");
  CHECK(with_fp8[1].status == S::unsupported);
  CHECK(with_fp8[1].reasons == std::vector<std::string>{"dtype_kv e4m3: the batch_prefill_paged template takes f16, bf16"});

  SECTION("a manifest without families: unknown, unless its variants show the template lacks an axis") {
    m.families.clear();
    CHECK(statuses(check_needs(m, n.needs, sm_86)) == std::vector<S>{S::present, S::wrong_arch, S::unknown, S::present, S::unknown});
    Need odd = n.needs[0];
    odd.key.axes.push_back({"sinks", "true"});
    const Finding f = check_needs(m, {odd}, sm_86).at(0);
    CHECK(f.status == S::unsupported);
    CHECK(f.reasons == std::vector<std::string>{"the batch_decode template has no sinks axis"});
  }
}

TEST_CASE("coverage: specs/default.json's plan serves the models it should", "[coverage][default]") {
  const Manifest& plan = default_plan();
  using S = Status;
  for (const char* name : {"Llama-3.1-8B", "Qwen2.5-7B", "Llama-3.2-1B"})
    for (const auto& arch : plan.archs) {
      INFO(name << " on " << arch);
      const Needs n = model_needs(fixture_model(name), {});
      CHECK(statuses(check_needs(plan, n.needs, *Arch::parse(arch))) == std::vector<S>(5, S::present));
      Options fp8;
      fp8.kv_dtype = DType::e4m3;
      const auto findings = check_needs(plan, model_needs(fixture_model(name), fp8).needs, *Arch::parse(arch));
      CHECK(statuses(findings) == std::vector<S>{S::present, S::unsupported, S::present, S::present, S::present});
    }
  const Arch sm_90{9, 0, false};
  SECTION("what it lacks for windowed models is a spec edit away") {
    const auto mistral = check_needs(plan, model_needs(fixture_model("Mistral-7B-v0.1"), {}).needs, sm_90);
    CHECK(statuses(mistral) == std::vector<S>{S::present, S::present, S::missing, S::present, S::present});
    const auto gemma = statuses(check_needs(plan, model_needs(fixture_model("Gemma-2-9B"), with_dtype(DType::bf16)).needs, sm_90));
    CHECK(std::count(gemma.begin(), gemma.end(), S::unsupported) == 0);
    CHECK(std::count(gemma.begin(), gemma.end(), S::missing) == 4);
  }
  SECTION("gpt-oss: its windowed layers are spec entries away (sinks need no variant)") {
    const auto oss = check_needs(plan, model_needs(fixture_model("gpt-oss-20b"), with_dtype(DType::bf16)).needs, sm_90);
    CHECK(statuses(oss) == std::vector<S>{S::present, S::missing, S::present, S::missing, S::present, S::missing,
                                          S::present, S::present});
  }
  SECTION("Phi-3-mini (head_dim 96, every layer windowed): spec entries away") {
    CHECK(statuses(check_needs(plan, model_needs(fixture_model("Phi-3-mini-4k-instruct"), {}).needs, sm_90)) ==
          std::vector<S>(5, S::missing));
  }
  SECTION("what no spec edit adds: fused llama3 RoPE") {
    Options fused;
    fused.fused_rope = true;
    const auto llama = check_needs(plan, model_needs(fixture_model("Llama-3.2-1B"), fused).needs, sm_90);
    CHECK(statuses(llama) == std::vector<S>{S::unsupported, S::unsupported, S::unsupported, S::present, S::present});
  }
  SECTION("page size is a run-time value: no template has a page_size axis") {
    for (const auto& f : plan.families) CHECK(f.axis("page_size") == nullptr);
  }
}

TEST_CASE("coverage: specs/release.json serves every fixture model the templates support, on every arch", "[coverage][release]") {
  const Manifest plan = planned("release.json");
  using S = Status;
  const std::vector<std::pair<const char*, Options>> served = {
      {"Llama-3.1-8B", {}}, {"Qwen2.5-7B", {}}, {"Mistral-7B-v0.1", {}}, {"Llama-3.2-1B", {}},
      {"Gemma-2-9B", with_dtype(DType::bf16)}, {"gpt-oss-20b", with_dtype(DType::bf16)}, {"Phi-3-mini-4k-instruct", {}}};
  std::vector<Arch> archs;
  for (const auto& a : plan.archs) archs.push_back(*Arch::parse(a));
  archs.push_back({12, 1, false});   // consumer Blackwell's later chip: its sm_120 code
  archs.push_back({10, 3, false});   // sm_100a code is for 10.0 only: PTX serves 10.3
  for (auto [name, options] : served)
    for (const DType activations : {DType::bf16, DType::f16})
      for (const Arch& arch : archs) {
        options.dtype = activations;
        INFO(name << " with " << dtype_name(activations) << " on " << arch.name());
        const Needs n = model_needs(fixture_model(name), options);
        const auto findings = check_needs(plan, n.needs, arch);
        CHECK(std::all_of(findings.begin(), findings.end(), [](const Finding& f) { return f.status == S::present; }));
        // An fp8 cache: decode, append and merge are there; paged prefill has no fp8 template yet.
        Options fp8 = options;
        fp8.kv_dtype = DType::e4m3;
        const auto with_fp8 = check_needs(plan, model_needs(fixture_model(name), fp8).needs, arch);
        for (const auto& f : with_fp8) {
          INFO(f.need.key.uri());
          CHECK(f.status == (f.need.key.family == "batch_prefill_paged" ? S::unsupported : S::present));
        }
      }
}
