// What attention kernels need to know about a model, read from its Hugging Face config.json.
#pragma once
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace aotinfer::coverage {

// A config.json that cannot be read, is not JSON, or has a field of the wrong kind. The message
// names the file, the field and what was expected.
struct ConfigError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct ModelConfig {
  std::string source;      // the file, for messages
  std::string model_type;  // "llama", "gemma2", ...; empty when absent
  int num_qo_heads = 0;    // num_attention_heads
  int num_kv_heads = 0;    // num_key_value_heads, else num_attention_heads
  int head_dim = 0;        // head_dim, else hidden_size / num_attention_heads; MLA: the query/key width
  std::string torch_dtype; // as written ("bfloat16"); empty when absent

  // Multi-head latent attention (DeepSeek-V2/V3, Kimi K2: kv_lora_rank), named for messages:
  // "multi-head latent attention (kv_lora_rank 512, qk_rope_head_dim 64)"; empty for attention
  // over per-head K and V. Its widths: the latent (kv_lora_rank), the shared RoPE key
  // (qk_rope_head_dim) and the values of its prefill (v_head_dim; 0 when absent).
  std::string latent_attention;
  int latent_rank = 0, latent_rope_dim = 0, latent_v_dim = 0;

  // Which attention the layers use: some attend to the whole context, some through a window
  // (both for alternating models such as Gemma 2 and gpt-oss).
  bool full_layers = false;
  bool sliding_layers = false;
  std::vector<std::string> other_layer_types;  // layer_types besides those two ("chunked_attention")
  std::optional<std::int64_t> sliding_window;

  std::optional<double> soft_cap;  // attn_logit_softcapping
  std::optional<double> query_pre_attn_scalar;
  std::optional<double> sm_scale;  // the softmax scale itself, where config.json gives it (Granite's attention_multiplier)
  bool attention_sinks = false;

  // ALiBi (BLOOM, MPT with attn_config.alibi, Falcon with alibi, JAIS): a per-head linear bias
  // by distance instead of RoPE. alibi_bias_max sets the slopes, 2^(-alibi_bias_max (h + 1) / n).
  bool alibi = false;
  double alibi_bias_max = 8;

  double rope_theta = 10000;
  std::string rope_type;  // rope_scaling's rope_type (or type); empty for plain RoPE
  std::optional<double> rope_factor;
  double partial_rotary_factor = 1;
  int no_rope_layers = 0;  // layers that apply no RoPE at all (SmolLM3's NoPE layers)
};

// `source` names the document in messages. Throws ConfigError.
ModelConfig parse_model_config(const nlohmann::json& config, const std::string& source);
ModelConfig load_model_config(const std::filesystem::path& file);

}  // namespace aotinfer::coverage
