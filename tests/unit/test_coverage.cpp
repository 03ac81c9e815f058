// aotinfer coverage's logic: reading config.json, the variants a model needs, and whether a
// package (or the plan of specs/default.json) serves them. The CLI's own tests are in
// test_coverage_cli.cpp.
#include "catch.hpp"

#include "coverage_util.hpp"
#include "test_util.hpp"

#include <algorithm>
#include <fstream>

#include "aotinfer/batch_decode.hpp"
#include "aotinfer/batch_prefill.hpp"
#include "aotinfer/files.hpp"
#include "coverage/check.hpp"
#include "coverage/model_config.hpp"
#include "coverage/needs.hpp"
#include "coverage/report.hpp"
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

const Need& need_of(const Needs& n, Op op) {
  for (const auto& need : n.needs)
    if (need.op == op) return need;
  FAIL("no need for " << op_name(op));
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
                                       {"Llama-3.2-1B", 32, 8, 64, "bfloat16", true, false, {}, "llama3", false},
                                       {"Gemma-3-27B-it", 32, 16, 128, "bfloat16", true, true, {}, "linear", false},
                                       {"Qwen3-32B", 64, 8, 128, "bfloat16", true, false, {}, "", false},
                                       {"Qwen2.5-72B", 64, 8, 128, "bfloat16", true, false, {}, "", false},
                                       {"Llama-3.3-70B-Instruct", 64, 8, 128, "bfloat16", true, false, {}, "llama3", false},
                                       {"Mistral-Small-24B-Instruct-2501", 32, 8, 128, "bfloat16", true, false, {}, "", false},
                                       {"Phi-4", 40, 10, 128, "bfloat16", true, false, {}, "", false},
                                       {"gpt-oss-120b", 64, 8, 64, "", true, true, {}, "yarn", true},
                                       {"SmolLM3-3B", 16, 4, 128, "bfloat16", true, false, {}, "", false},
                                       {"Granite-3.3-8B-instruct", 32, 8, 128, "bfloat16", true, false, {}, "", false},
                                       {"OLMo-2-1124-7B-Instruct", 32, 32, 128, "bfloat16", true, false, {}, "", false},
                                       {"BLOOM-560m", 16, 16, 64, "", true, false, {}, "", false},
                                       {"MPT-7B", 32, 32, 128, "bfloat16", true, false, {}, "", false},
                                       {"DeepSeek-V3", 128, 128, 192, "bfloat16", true, false, {}, "yarn", false}}) {
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
  // Gemma 3's published config leaves the period of its full layers (6), their theta and the soft
  // cap (none) to Gemma3TextConfig's defaults; its rope_scaling is the full layers'.
  const ModelConfig gemma3 = fixture_model("Gemma-3-27B-it");
  CHECK((gemma3.sliding_window == 1024 && gemma3.query_pre_attn_scalar == 168.0 && gemma3.rope_theta == 1e6 && gemma3.rope_factor == 8.0));
  CHECK(fixture_model("Mistral-Small-24B-Instruct-2501").head_dim != 5120 / 32);  // head_dim given outright
  CHECK(fixture_model("Granite-3.3-8B-instruct").sm_scale == 0.0078125);         // attention_multiplier, 1/128
  CHECK(fixture_model("Llama-3.1-8B").sm_scale == std::nullopt);
  CHECK(fixture_model("SmolLM3-3B").no_rope_layers == 9);                        // every 4th of 36
  CHECK(fixture_model("Qwen3-32B").no_rope_layers == 0);
  CHECK(fixture_model("gpt-oss-120b").sliding_window == 128);
  CHECK(fixture_model("DeepSeek-V3").latent_attention == "multi-head latent attention (kv_lora_rank 512, qk_rope_head_dim 64)");
  // ALiBi: BLOOM by its model type, MPT by attn_config.alibi; the others use RoPE.
  CHECK((fixture_model("BLOOM-560m").alibi && fixture_model("MPT-7B").alibi && fixture_model("MPT-7B").alibi_bias_max == 8));
  for (const char* name : {"Llama-3.1-8B", "Gemma-2-9B", "gpt-oss-20b", "DeepSeek-V3"}) CHECK_FALSE(fixture_model(name).alibi);
  for (const char* name : {"Llama-3.3-70B-Instruct", "Qwen2.5-72B", "Phi-4", "OLMo-2-1124-7B-Instruct", "gpt-oss-120b"})
    CHECK(fixture_model(name).latent_attention.empty());
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
                           "batch_decode.dtype_q-bf16.dtype_kv-bf16.head_dim-128.dtype_o-bf16.pos_encoding-none",
                           "batch_prefill_paged.dtype_q-bf16.head_dim-128.dtype_kv-bf16.dtype_o-bf16.pos_encoding-none.head_dim_vo-128",
                           "batch_prefill_ragged.dtype_q-bf16.head_dim-128.dtype_kv-bf16.dtype_o-bf16.pos_encoding-none.head_dim_vo-128",
                           "append_paged_kv.dtype-bf16.head_dim-128", "merge_state.dtype-bf16.head_dim-128"});
  for (const auto& n : llama.needs) CHECK(n.refusals.empty());
  CHECK_THAT(llama.notes.at(0), Contains("page size 16: a run-time value") && Contains("not a variant axis"));

  SECTION("alternating layers and a soft cap need no variants of their own: both are run-time values") {
    const Needs gemma = model_needs(fixture_model("Gemma-2-9B"), with_dtype(DType::bf16));
    CHECK(gemma.needs.size() == 5);
    for (const auto& n : gemma.needs) {
      CHECK(n.key.find("sliding_window") == nullptr);
      CHECK(n.key.find("soft_cap") == nullptr);
    }
    CHECK(*need_of(gemma, Op::merge).key.find("head_dim") == "256");
    const std::string notes = nlohmann::json(gemma.notes).dump();
    CHECK_THAT(notes, Contains("sliding_window 4096: a run-time value (window_left, 4095 for these layers)") &&
                          Contains("attn_logit_softcapping 50: a run-time value (logits_soft_cap)"));
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
  SECTION("ALiBi: decode's alibi variants, prefill's none variants (a run-time bias), no fused RoPE") {
    const Needs mpt = model_needs(fixture_model("MPT-7B"), {});
    CHECK(*need_of(mpt, Op::decode).key.find("pos_encoding") == "alibi");
    CHECK(*need_of(mpt, Op::prefill_paged).key.find("pos_encoding") == "none");
    CHECK(*need_of(mpt, Op::prefill_ragged).key.find("pos_encoding") == "none");
    for (const auto& n : mpt.needs) CHECK(n.refusals.empty());
    CHECK_THAT(nlohmann::json(mpt.notes).dump(), Contains("ALiBi positions (pos_encoding alibi)") && !Contains("RoPE applied by the engine"));
    Options fused = with_dtype(DType::f16);
    fused.fused_rope = true;
    const Needs bloom = model_needs(fixture_model("BLOOM-560m"), fused);
    CHECK(*need_of(bloom, Op::decode).key.find("pos_encoding") == "alibi");
    CHECK_THAT(need_of(bloom, Op::decode).refusals.at(0), Contains("--fused-rope on an ALiBi model: it has no RoPE"));
    ModelConfig steep = fixture_model("MPT-7B");
    steep.alibi_bias_max = 16;
    CHECK_THAT(need_of(model_needs(steep, {}), Op::prefill_paged).refusals.at(0),
               Contains("ALiBi with alibi_bias_max 16: the kernels' slopes are 2^(-8 (h + 1) / n)"));
  }
  SECTION("attention sinks are a run-time argument: no refusal, a note") {
    const Needs oss = model_needs(fixture_model("gpt-oss-20b"), with_dtype(DType::bf16));
    CHECK(oss.needs.size() == 5);
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

  // A value no template takes: a float32 cache.
  Options f32;
  f32.kv_dtype = DType::f32;
  const auto with_f32 = check_needs(m, model_needs(fixture_model("Llama-3.1-8B"), f32).needs, sm_90);
  REQUIRE(with_f32.size() == 5);
  CHECK(with_f32[1].need.key.family == "batch_prefill_paged");
  CHECK(with_f32[1].status == S::unsupported);
  CHECK(with_f32[1].reasons ==
        std::vector<std::string>{"dtype_kv f32: the batch_prefill_paged template takes f16, bf16, e4m3, e5m2"});

  SECTION("a family recorded without an axis the need names: a package from older templates") {
    for (auto& family : m.families)
      if (family.name == "batch_prefill_paged")
        std::erase_if(family.axes, [](const ManifestAxis& axis) { return axis.name == "head_dim_vo"; });
    const auto old = check_needs(m, n.needs, sm_90);
    CHECK(old[1].need.key.family == "batch_prefill_paged");
    CHECK(old[1].status == S::unsupported);
    CHECK(old[1].reasons == std::vector<std::string>{"the batch_prefill_paged template has no head_dim_vo axis: the package was "
                                                     "built from older templates; rebuild it from its spec"});
  }

  SECTION("a manifest without families: unknown, unless its variants show the template lacks an axis") {
    m.families.clear();
    CHECK(statuses(check_needs(m, n.needs, sm_86)) == std::vector<S>{S::present, S::wrong_arch, S::unknown, S::present, S::unknown});
    Need odd = n.needs[0];
    odd.key.axes.push_back({"sinks", "true"});
    const Finding f = check_needs(m, {odd}, sm_86).at(0);
    CHECK(f.status == S::unsupported);
    CHECK(f.reasons == std::vector<std::string>{"the batch_decode template has no sinks axis: the package was built from older "
                                                 "templates; rebuild it from its spec"});
  }
}

TEST_CASE("coverage: multi-head latent attention needs batch_mla_decode, prefill at head_dim 192 / head_dim_vo 128, and names its missing append", "[coverage][needs]") {
  const std::string mla = "multi-head latent attention (kv_lora_rank 512, qk_rope_head_dim 64)";
  // Kimi K2's attention: 64 heads over hidden_size 7168 would read as head_dim 112.
  const ModelConfig kimi = parse_model_config(nlohmann::json::parse(R"({"num_attention_heads": 64, "num_key_value_heads": 64,
      "hidden_size": 7168, "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
      "v_head_dim": 128})"), "m/config.json");
  CHECK((kimi.head_dim == 192 && kimi.latent_attention == mla));
  CHECK((kimi.latent_rank == 512 && kimi.latent_rope_dim == 64 && kimi.latent_v_dim == 128));
  CHECK_THAT(config_error(R"({"num_attention_heads": 16, "hidden_size": 2048, "kv_lora_rank": 512})"),
             Contains("qk_rope_head_dim: expected a positive integer: kv_lora_rank makes it multi-head latent attention, got nothing"));

  const ModelConfig deepseek = fixture_model("DeepSeek-V3");
  CHECK(deepseek.head_dim == 192);  // queries and keys; hidden_size / num_attention_heads is 56
  const Needs n = model_needs(deepseek, {});
  CHECK(uris(n) == std::vector<std::string>{
                       "batch_mla_decode.dtype-bf16.dtype_kv-bf16", "merge_state.dtype-bf16.head_dim-512",
                       "batch_prefill_paged.dtype_q-bf16.head_dim-192.dtype_kv-bf16.dtype_o-bf16.pos_encoding-none.head_dim_vo-128",
                       "batch_prefill_ragged.dtype_q-bf16.head_dim-192.dtype_kv-bf16.dtype_o-bf16.pos_encoding-none.head_dim_vo-128",
                       "append_paged_kv.dtype-bf16.head_dim-512", "merge_state.dtype-bf16.head_dim-128"});
  REQUIRE(n.needs.size() == 6);
  const std::vector<Op> ops = {Op::latent_decode, Op::merge, Op::prefill_paged, Op::prefill_ragged, Op::append, Op::merge};
  for (std::size_t i = 0; i < ops.size(); ++i) CHECK(n.needs[i].op == ops[i]);
  // Multi-head attention over the up-projected K and V: the front-end's own key for that config.
  BatchPrefillConfig ragged;
  ragged.kv_storage = KvStorage::ragged;
  ragged.head_dim = 192, ragged.head_dim_vo = 128, ragged.num_qo_heads = ragged.num_kv_heads = 128;
  CHECK(n.needs[3].key == BatchPrefill::variant_key(ragged));
  for (std::size_t i : {0, 1, 2, 3, 5}) CHECK(n.needs[i].refusals.empty());
  CHECK(n.needs[4].refusals ==
        std::vector<std::string>{mla + " cache append (a 512-wide latent and a 64-wide key per token): no template implements it yet"});
  const std::string notes = nlohmann::json(n.notes).dump();
  CHECK_THAT(notes, Contains("head_dim 192 (qk_nope_head_dim + qk_rope_head_dim) for q.k, head_dim_vo 128 (v_head_dim) for v and its merge") &&
                        Contains("the engine applies RoPE to the 64-wide part (pos_encoding none)") && !Contains("not served"));

  // Against the templates alone (no variant built): all but the append are a spec entry away,
  // and the spec entries name head_dim_vo, which the spec reader turns into exactly the variants.
  Manifest m;
  m.spec_file = "mine.json";
  m.families = template_families();
  const Arch sm_90{9, 0, false};
  const auto findings = check_needs(m, n.needs, sm_90);
  CHECK(statuses(findings) == std::vector<Status>{Status::missing, Status::missing, Status::missing, Status::missing,
                                                  Status::unsupported, Status::missing});
  CHECK(findings[4].reasons.size() == 1);
  const Report report{deepseek, n, m, "pkg", sm_90, findings};
  const std::string model_line = "deepseek_v3, 128 query / 128 KV heads (GQA group 1), head_dim 192, full attention, " + mla + ";";
  CHECK_THAT(report_text(report), Contains(model_line) && !Contains("head_dim 56"));
  const auto j = report_json(report);
  CHECK(j["model"]["latent_attention"] == mla);
  const auto entry = nlohmann::ordered_json::parse(
      R"({"dtype_q": "bf16", "head_dim": 192, "dtype_kv": "bf16", "dtype_o": "bf16", "pos_encoding": "none", "head_dim_vo": 128})");
  CHECK(j["needs"][2]["spec_entry"] == entry);
  CHECK(j["spec_patch"]["families"]["batch_prefill_ragged"]["matrix"] == entry);
  CHECK(j["spec_patch"]["families"]["merge_state"]["include"].size() == 1);  // 128 beside the matrix's 512
  const gen::Spec spec = gen::parse_spec(
      R"({"format": 1, "package": {"name": "p", "version": "1"}, "archs": ["sm_90a"], "families": )" +
          j["spec_patch"]["families"].dump() + "}",
      "spec.json", aotinfer::test::scanned_templates());
  std::vector<std::string> planned_uris;
  for (const auto& v : spec.variants) planned_uris.push_back(v.uri());
  for (std::size_t i : {0, 1, 2, 3, 5})
    CHECK(std::find(planned_uris.begin(), planned_uris.end(), n.needs[i].key.uri()) != planned_uris.end());
  CHECK(planned_uris.size() == 5);
  CHECK(fixture_model("Llama-3.1-8B").latent_attention.empty());

  SECTION("widths the prefill kernels do not pair are unsupported, naming the dims, and so is their merge") {
    const ModelConfig narrow = parse_model_config(nlohmann::json::parse(R"({"num_attention_heads": 16, "hidden_size": 2048,
        "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 64, "torch_dtype": "bfloat16"})"),
                                                  "m/config.json");
    const Needs v64 = model_needs(narrow, {});
    const std::string why = mla + " prefill at head_dim 192 (qk_nope_head_dim + qk_rope_head_dim) and head_dim_vo 64 (v_head_dim): "
                                  "the prefill templates pair head_dim 192 with head_dim_vo 128 only";
    for (Op op : {Op::prefill_paged, Op::prefill_ragged}) {
      CHECK(need_of(v64, op).refusals == std::vector<std::string>{why});
      CHECK(*need_of(v64, op).key.find("head_dim_vo") == "64");
    }
    CHECK(v64.needs.back().key.uri() == "merge_state.dtype-bf16.head_dim-64");
    CHECK(v64.needs.back().refusals == std::vector<std::string>{why});
    CHECK(need_of(v64, Op::latent_decode).refusals.empty());  // decode does not read v_head_dim
    for (const auto& f : check_needs(m, v64.needs, sm_90)) {
      INFO(f.need.key.uri());
      if (f.need.op == Op::latent_decode || f.need.key.uri() == "merge_state.dtype-bf16.head_dim-512") {
        CHECK(f.status == Status::missing);
      } else {
        CHECK(f.status == Status::unsupported);
        CHECK(f.reasons.size() == 1);  // the model's reason, not also "head_dim_vo 64" of a template
      }
    }

    ModelConfig no_v = deepseek;
    no_v.latent_v_dim = 0;
    CHECK_THAT(need_of(model_needs(no_v, {}), Op::prefill_ragged).refusals.at(0),
               Contains("head_dim_vo unknown (config.json has no v_head_dim): the prefill templates pair head_dim 192 with head_dim_vo 128 only"));
    ModelConfig wide = deepseek;
    wide.head_dim = 256;  // qk_nope_head_dim 192
    CHECK_THAT(need_of(model_needs(wide, {}), Op::prefill_paged).refusals.at(0),
               Contains("prefill at head_dim 256 (qk_nope_head_dim + qk_rope_head_dim) and head_dim_vo 128 (v_head_dim)"));
  }
  SECTION("other latent widths, an fp8 cache and fused RoPE") {
    ModelConfig other = deepseek;
    other.latent_rank = 256;
    CHECK_THAT(model_needs(other, {}).needs[0].refusals.at(0), Contains("built for kv_lora_rank 512 and qk_rope_head_dim 64"));
    Options fp8;
    fp8.kv_dtype = DType::e4m3;
    const Needs cached = model_needs(deepseek, fp8);
    // The latent cache in e4m3 is served (per-tensor scales at run time); in e5m2 it is not.
    CHECK(cached.needs[0].refusals.empty());
    CHECK(*cached.needs[0].key.find("dtype_kv") == "e4m3");
    Options e5m2;
    e5m2.kv_dtype = DType::e5m2;
    CHECK_THAT(model_needs(deepseek, e5m2).needs[0].refusals.at(0),
               Contains("dtype_kv (the cache) must be dtype (bf16) or e4m3, got e5m2"));
    // Paged prefill reads the cache, which the kernels take in 16 bits at these widths; ragged
    // prefill reads the step's own K and V.
    CHECK(*need_of(cached, Op::prefill_paged).key.find("dtype_kv") == "e4m3");
    CHECK_THAT(need_of(cached, Op::prefill_paged).refusals.at(0), Contains("served with 16-bit K/V and pos_encoding none, got dtype_kv e4m3"));
    CHECK(need_of(cached, Op::prefill_ragged).refusals.empty());
    Options fused;
    fused.fused_rope = true;
    const Needs rope = model_needs(deepseek, fused);
    for (Op op : {Op::latent_decode, Op::prefill_paged, Op::prefill_ragged}) {
      CHECK(need_of(rope, op).refusals ==
            std::vector<std::string>{"--fused-rope on " + mla + ": the model rotates the 64-wide RoPE part of q and k itself, "
                                     "rope_llama all of head_dim; leave out --fused-rope"});
    }
    CHECK(*need_of(rope, Op::prefill_paged).key.find("pos_encoding") == "none");
  }
}

TEST_CASE("coverage: specs/default.json serves every fixture model the templates support, on every arch", "[coverage][default]") {
  const Manifest& plan = default_plan();
  using S = Status;
  std::vector<Arch> archs;
  for (const auto& a : plan.archs) archs.push_back(*Arch::parse(a));
  archs.push_back({8, 6, false});    // sm_80 code serves the 8.x chips
  archs.push_back({8, 9, false});
  archs.push_back({12, 1, false});   // consumer Blackwell's later chip: its sm_120 code
  archs.push_back({10, 3, false});   // sm_100a code is for 10.0 only: PTX serves 10.3
  std::vector<std::string> models;
  for (const auto& entry : fs::directory_iterator(AOTINFER_SOURCE_DIR "/tests/fixtures/models"))
    if (entry.is_directory()) models.push_back(entry.path().filename().string());
  std::sort(models.begin(), models.end());
  REQUIRE(models.size() >= 19);
  int served = 0;
  for (const std::string& name : models) {
    const ModelConfig model = fixture_model(name);
    for (const DType activations : {DType::bf16, DType::f16})
      for (const Arch& arch : archs) {
        INFO(name << " with " << dtype_name(activations) << " on " << arch.name());
        Options options = with_dtype(activations);
        const auto findings = check_needs(plan, model_needs(model, options).needs, arch);
        if (!model.latent_attention.empty()) {
          // Latent decode, prefill at 192 / 128 and both merges are served; the latent cache's
          // append has no template yet, which its finding names.
          for (const auto& f : findings) {
            INFO(f.need.key.uri());
            if (f.need.op == Op::append)
              CHECK((f.status == S::unsupported && f.reasons.at(0).find(model.latent_attention) == 0));
            else
              CHECK(f.status == S::present);
          }
          continue;
        }
        for (const auto& f : findings) {
          INFO(f.need.key.uri());
          CHECK(f.status == S::present);
        }
        // An fp8 cache: decode, paged prefill, append and merge are all there, except paged
        // prefill at head_dim 96 (Phi-3) and ALiBi decode (BLOOM, MPT) over fp8, which the default
        // leaves a spec entry away to stay within its build time.
        for (const DType cache : {DType::e4m3, DType::e5m2}) {
          options.kv_dtype = cache;
          for (const auto& f : check_needs(plan, model_needs(model, options).needs, arch)) {
            INFO(f.need.key.uri());
            const bool left_out = (f.need.key.family == "batch_prefill_paged" && *f.need.key.find("head_dim") == "96") ||
                                  (f.need.op == Op::decode && model.alibi);
            CHECK(f.status == (left_out ? S::missing : S::present));
          }
        }
        ++served;
      }
  }
  CHECK(served >= 18 * 2 * int(archs.size()));
  const Arch sm_90{9, 0, false};
  SECTION("RoPE inside attention, for the models whose RoPE is plain") {
    Options fused;
    fused.fused_rope = true;
    for (const char* name : {"Qwen2.5-7B", "Mistral-7B-v0.1", "Gemma-2-9B", "Phi-3-mini-4k-instruct"}) {
      INFO(name);
      fused.dtype = DType::bf16;
      CHECK(statuses(check_needs(plan, model_needs(fixture_model(name), fused).needs, sm_90)) == std::vector<S>(5, S::present));
    }
  }
  SECTION("what no spec edit adds: fused llama3 RoPE") {
    Options fused;
    fused.fused_rope = true;
    const auto llama = check_needs(plan, model_needs(fixture_model("Llama-3.2-1B"), fused).needs, sm_90);
    CHECK(statuses(llama) == std::vector<S>{S::unsupported, S::unsupported, S::unsupported, S::present, S::present});
  }
  SECTION("page size, windows and soft caps are run-time values: no template has such an axis") {
    for (const auto& f : plan.families)
      for (const char* axis : {"page_size", "sliding_window", "soft_cap", "window_left"}) CHECK(f.axis(axis) == nullptr);
  }
}

