// The kernel variants a model needs: one per op (and per kind of attention layer), as the
// runtime's front-ends would load them for the model.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "aotinfer/dtype.hpp"
#include "aotinfer/variant.hpp"
#include "coverage/model_config.hpp"

namespace aotinfer::coverage {

// What the engine decides rather than config.json (aotinfer coverage's options).
struct Options {
  std::optional<DType> dtype;     // the activation dtype; nullopt: torch_dtype's
  std::optional<DType> kv_dtype;  // the KV cache's; nullopt: the activation dtype
  int page_size = 16;
  bool fused_rope = false;        // RoPE applied inside attention (pos_encoding rope_llama)
};

enum class Op { decode, prefill_paged, prefill_ragged, append, merge, latent_decode };
std::string_view op_name(Op op);  // "decode", "prefill paged", ..., "latent decode"

struct Need {
  Op op = Op::decode;
  VariantKey key;  // what the op's front-end loads (BatchDecode::variant_key, ...); every layer's
  // Why no package can serve it, whatever its spec: model features no template implements, or
  // what the front-end refuses in the model's config (BatchDecode::check_config).
  std::vector<std::string> refusals;
};

struct Needs {
  DType activation = DType::bf16;
  DType kv_cache = DType::bf16;
  std::vector<Need> needs;
  std::vector<std::string> notes;  // run-time values the engine passes, and how options were read
};

// Throws ConfigError when the activation dtype is neither given nor in config.json.
Needs model_needs(const ModelConfig& model, const Options& options);

}  // namespace aotinfer::coverage
