#include "coverage/model_config.hpp"

#include <algorithm>
#include <climits>
#include <initializer_list>

#include "aotinfer/error.hpp"
#include "aotinfer/files.hpp"

namespace aotinfer::coverage {

namespace {

using nlohmann::json;

// The fields of one JSON object, read with messages that name the file and the field. Hugging
// Face writes null for a feature that is off, so null reads as absent.
class Fields {
 public:
  Fields(const json& object, std::string source, std::string prefix)
      : object_(object), source_(std::move(source)), prefix_(std::move(prefix)) {}

  const json* get(const std::string& key) const {
    const auto it = object_.find(key);
    return it == object_.end() || it->is_null() ? nullptr : &*it;
  }

  [[noreturn]] void bad(const std::string& key, const std::string& expected) const {
    std::string got = "nothing (the field is missing)";
    if (const json* v = get(key)) {
      got = v->dump();
      if (got.size() > 60) got = got.substr(0, 57) + "...";
    }
    throw ConfigError(source_ + ": " + prefix_ + key + ": expected " + expected + ", got " + got);
  }

  std::optional<std::int64_t> optional_int(const std::string& key, std::int64_t min) const {
    const json* v = get(key);
    if (!v) return std::nullopt;
    if (!v->is_number_integer() || v->get<std::int64_t>() < min || v->get<std::int64_t>() > INT_MAX)
      bad(key, std::string(min > 0 ? "a positive" : "a non-negative") + " integer below 2^31");
    return v->get<std::int64_t>();
  }

  int positive_int(const std::string& key) const {
    const auto v = optional_int(key, 1);
    if (!v) bad(key, "a positive integer");
    return int(*v);
  }

  std::optional<double> optional_positive_number(const std::string& key) const {
    const json* v = get(key);
    if (!v) return std::nullopt;
    if (!v->is_number() || !(v->get<double>() > 0)) bad(key, "a positive number or null");
    return v->get<double>();
  }

  std::optional<bool> optional_bool(const std::string& key) const {
    const json* v = get(key);
    if (!v) return std::nullopt;
    if (!v->is_boolean()) bad(key, "true or false");
    return v->get<bool>();
  }

  std::string optional_string(const std::string& key) const {
    const json* v = get(key);
    if (!v) return {};
    if (!v->is_string()) bad(key, "a string");
    return v->get<std::string>();
  }

  Fields nested(const std::string& key) const { return Fields(*get(key), source_, prefix_ + key + "."); }

  // The first of `keys` the object has (older configs name a field their own way: BLOOM's
  // n_head, MPT's n_heads and d_model); the first key when none is there, for the message.
  std::string which(std::initializer_list<const char*> keys) const {
    for (const char* key : keys)
      if (get(key)) return key;
    return *keys.begin();
  }

 private:
  const json& object_;
  std::string source_, prefix_;
};

// Multi-head latent attention caches one compressed latent (kv_lora_rank wide) and one shared
// RoPE key (qk_rope_head_dim wide) per token instead of per-head K and V, so hidden_size /
// num_attention_heads is the width of nothing it attends with; its queries and keys are
// qk_nope_head_dim + qk_rope_head_dim wide.
bool read_latent_attention(ModelConfig& m, const Fields& f) {
  const auto rank = f.optional_int("kv_lora_rank", 1);
  if (!rank) return false;
  if (!f.get("qk_rope_head_dim")) f.bad("qk_rope_head_dim", "a positive integer: kv_lora_rank makes it multi-head latent attention");
  const int rope = f.positive_int("qk_rope_head_dim");
  m.head_dim = int(f.optional_int("qk_nope_head_dim", 0).value_or(0)) + rope;
  m.latent_rank = int(*rank), m.latent_rope_dim = rope;
  m.latent_v_dim = int(f.optional_int("v_head_dim", 1).value_or(0));
  m.latent_attention = "multi-head latent attention (kv_lora_rank " + std::to_string(*rank) + ", qk_rope_head_dim " +
                       std::to_string(rope) + ")";
  return true;
}

void read_heads(ModelConfig& m, const Fields& f) {
  m.num_qo_heads = f.positive_int(f.which({"num_attention_heads", "n_head", "n_heads"}));
  m.num_kv_heads = int(f.optional_int("num_key_value_heads", 1).value_or(m.num_qo_heads));
  if (read_latent_attention(m, f)) return;
  if (const auto head_dim = f.optional_int("head_dim", 1)) {
    m.head_dim = int(*head_dim);
    return;
  }
  const std::string hidden_key = f.which({"hidden_size", "d_model"});
  if (!f.get(hidden_key)) f.bad("head_dim", "a positive integer, or hidden_size to derive it from");
  const int hidden = f.positive_int(hidden_key);
  if (hidden % m.num_qo_heads != 0)
    f.bad(hidden_key, "a multiple of num_attention_heads (" + std::to_string(m.num_qo_heads) + ") when head_dim is absent");
  m.head_dim = hidden / m.num_qo_heads;
}

void read_layer_types(ModelConfig& m, const Fields& f) {
  const json& types = *f.get("layer_types");
  const std::string expected = "an array of layer types such as \"full_attention\" and \"sliding_attention\"";
  if (!types.is_array()) f.bad("layer_types", expected);
  for (const auto& t : types) {
    if (!t.is_string()) f.bad("layer_types", expected);
    const auto type = t.get<std::string>();
    if (type == "full_attention") m.full_layers = true;
    else if (type == "sliding_attention") m.sliding_layers = true;
    else if (std::find(m.other_layer_types.begin(), m.other_layer_types.end(), type) == m.other_layer_types.end())
      m.other_layer_types.push_back(type);
  }
  if (m.sliding_layers && !m.sliding_window) f.bad("sliding_window", "a positive integer: layer_types has sliding_attention layers");
}

// Which layers attend through the window. layer_types says it outright; older configs say it
// through sliding_window and the model's conventions.
void read_layers(ModelConfig& m, const Fields& f) {
  m.sliding_window = f.optional_int("sliding_window", 1);
  if (f.get("layer_types")) return read_layer_types(m, f);
  const auto use_window = f.optional_bool("use_sliding_window");
  if (!m.sliding_window || use_window == false) {
    m.full_layers = true;
    return;
  }
  // Qwen2: layers from max_window_layers on use the window, the ones before attend to everything.
  const auto window_from = f.optional_int("max_window_layers", 0), layers = f.optional_int("num_hidden_layers", 1);
  if (use_window == true && window_from && layers) {
    m.full_layers = *window_from > 0;
    m.sliding_layers = *window_from < *layers;
    return;
  }
  // Gemma 2's config does not list its layers: they alternate between the window and the whole
  // context (transformers' Gemma2Config). Gemma 3-style configs give the period of full layers;
  // Gemma 3's published ones leave it to Gemma3TextConfig's default, every 6th layer.
  const auto pattern = f.optional_int("sliding_window_pattern", 1).value_or(m.model_type == "gemma3_text" ? 6 : 1);
  m.full_layers = m.model_type == "gemma2" || pattern > 1;
  m.sliding_layers = true;
}

void read_rope(ModelConfig& m, const Fields& f) {
  // Gemma3TextConfig's default, which Gemma 3's published configs rely on (its full layers' theta;
  // the windowed ones use rope_local_base_freq).
  m.rope_theta = f.optional_positive_number("rope_theta").value_or(m.model_type == "gemma3_text" ? 1e6 : 10000);
  m.partial_rotary_factor = f.optional_positive_number("partial_rotary_factor").value_or(1);
  if (m.partial_rotary_factor > 1) f.bad("partial_rotary_factor", "a fraction of head_dim in (0, 1]");
  // transformers 5 names it rope_parameters and always writes it, with rope_type "default".
  const std::string key = f.get("rope_scaling") ? "rope_scaling" : "rope_parameters";
  if (!f.get(key)) return;
  if (!f.get(key)->is_object()) f.bad(key, "an object naming rope_type, or null");
  const Fields scaling = f.nested(key);
  m.rope_type = scaling.optional_string(scaling.get("rope_type") ? "rope_type" : "type");
  if (m.rope_type.empty()) scaling.bad("rope_type", "the name of the RoPE scaling (\"linear\", \"llama3\", \"yarn\", ...)");
  if (m.rope_type == "default") m.rope_type.clear();
  m.rope_factor = scaling.optional_positive_number("factor");
  if (const auto theta = scaling.optional_positive_number("rope_theta")) m.rope_theta = *theta;
}

// ALiBi models say so in their own ways: BLOOM always uses it; MPT in attn_config.alibi (with
// its alibi_bias_max); Falcon in alibi; JAIS in position_embedding_type.
void read_alibi(ModelConfig& m, const Fields& f) {
  if (m.model_type == "bloom" || f.optional_bool("alibi") == true || f.optional_string("position_embedding_type") == "alibi")
    m.alibi = true;
  if (const json* attn = f.get("attn_config"); attn && attn->is_object()) {
    const Fields a = f.nested("attn_config");
    if (a.optional_bool("alibi") == true) {
      m.alibi = true;
      m.alibi_bias_max = a.optional_positive_number("alibi_bias_max").value_or(8);
    }
  }
}

// SmolLM3 leaves RoPE out of some layers: no_rope_layers has a 0 for each. Without the list,
// transformers' SmolLM3Config makes every no_rope_layer_interval-th layer (default 4th) one.
void read_no_rope_layers(ModelConfig& m, const Fields& f) {
  if (const json* flags = f.get("no_rope_layers")) {
    const std::string expected = "an array of 1 (RoPE) and 0 (no RoPE), one per layer";
    if (!flags->is_array()) f.bad("no_rope_layers", expected);
    for (const auto& flag : *flags) {
      if (!flag.is_number_integer() || (flag != 0 && flag != 1)) f.bad("no_rope_layers", expected);
      m.no_rope_layers += flag == 0;
    }
    return;
  }
  const auto layers = f.optional_int("num_hidden_layers", 1);
  if (m.model_type == "smollm3" && layers) m.no_rope_layers = int(*layers / f.optional_int("no_rope_layer_interval", 1).value_or(4));
}

}  // namespace

ModelConfig parse_model_config(const json& config, const std::string& source) {
  if (!config.is_object())
    throw ConfigError(source + ": expected a JSON object (a Hugging Face config.json), got " + std::string(config.type_name()));
  const Fields top(config, source, "");
  // Multimodal configs keep the language model's fields in text_config.
  const bool nested = !config.contains("num_attention_heads") && config.contains("text_config") && config["text_config"].is_object();
  const Fields f = nested ? top.nested("text_config") : top;
  ModelConfig m;
  m.source = source;
  m.model_type = f.optional_string("model_type");
  read_heads(m, f);
  // transformers 4.56 renamed torch_dtype to dtype; a multimodal config may give it at the top only.
  for (const Fields* fields : {&f, &top})
    for (const char* key : {"torch_dtype", "dtype"})
      if (m.torch_dtype.empty()) m.torch_dtype = fields->optional_string(key);
  read_layers(m, f);
  read_rope(m, f);
  read_no_rope_layers(m, f);
  read_alibi(m, f);
  // final_logit_softcapping caps the LM head's logits, not attention scores.
  m.soft_cap = f.optional_positive_number("attn_logit_softcapping");
  m.query_pre_attn_scalar = f.optional_positive_number("query_pre_attn_scalar");
  // Granite scales scores by attention_multiplier instead of 1/sqrt(head_dim) (GraniteAttention's scaling).
  m.sm_scale = f.optional_positive_number("attention_multiplier");
  // gpt-oss's sinks are weights (self_attn.sinks) that config.json does not announce; its model type does.
  m.attention_sinks = m.model_type == "gpt_oss";
  return m;
}

ModelConfig load_model_config(const std::filesystem::path& file) {
  if (std::error_code ec; std::filesystem::is_directory(file, ec))
    throw ConfigError(file.string() + ": expected a config.json file, got a directory");
  std::string text;
  try {
    text = read_file(file);
  } catch (const Error& e) {
    throw ConfigError(e.what());
  }
  json config;
  try {
    config = json::parse(text);
  } catch (const json::exception& e) {
    throw ConfigError(file.string() + ": not valid JSON: " + e.what());
  }
  return parse_model_config(config, file.string());
}

}  // namespace aotinfer::coverage
