#include "coverage/needs.hpp"

#include <cstdio>

#include "aotinfer/append_paged_kv.hpp"
#include "aotinfer/batch_decode.hpp"
#include "aotinfer/batch_mla_decode.hpp"
#include "aotinfer/batch_prefill.hpp"
#include "aotinfer/merge_state.hpp"
#include "aotinfer/params/batch_mla_decode.h"

namespace aotinfer::coverage {

namespace {

std::string number(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.10g", v);
  return text;
}

DType activation_dtype(const ModelConfig& m, const Options& o, std::vector<std::string>& notes) {
  if (o.dtype) return *o.dtype;
  if (m.torch_dtype == "bfloat16") return DType::bf16;
  if (m.torch_dtype == "float16") return DType::f16;
  if (m.torch_dtype == "float32") {
    notes.push_back("torch_dtype is float32 (a float32 checkpoint) and the kernels take f16 or bf16 activations: "
                    "pass --dtype bf16 (or f16), the dtype the engine runs the model in");
    return DType::f32;
  }
  const std::string got = m.torch_dtype.empty() ? "nothing (the field is missing)" : "\"" + m.torch_dtype + "\"";
  throw ConfigError(m.source + ": torch_dtype: expected \"bfloat16\", \"float16\" or \"float32\", got " + got +
                    "; or pass --dtype f16|bf16");
}

// Model features that no attention template implements, whatever the spec asks for.
std::vector<std::string> attention_refusals(const ModelConfig& m, const Options& o) {
  std::vector<std::string> why;
  for (const auto& type : m.other_layer_types)
    why.push_back("layer type \"" + type + "\": the templates implement full_attention and sliding_attention only");
  // The kernels' ALiBi slopes (attention.cuh's alibi_slope) are 2^(-8 (h + 1) / n), n the
  // largest power of two up to the head count, BLOOM's interleaving past it.
  if (m.alibi && m.alibi_bias_max != 8)
    why.push_back("ALiBi with alibi_bias_max " + number(m.alibi_bias_max) +
                  ": the kernels' slopes are 2^(-8 (h + 1) / n) (alibi_bias_max 8)");
  if (m.alibi && o.fused_rope)
    why.push_back("--fused-rope on an ALiBi model: it has no RoPE; leave out --fused-rope");
  // MLA rotates only the qk_rope_head_dim part of q and k, and does so before attention.
  if (o.fused_rope && !m.latent_attention.empty())
    why.push_back("--fused-rope on " + m.latent_attention + ": the model rotates the " + std::to_string(m.latent_rope_dim) +
                  "-wide RoPE part of q and k itself, rope_llama all of head_dim; leave out --fused-rope");
  if (!o.fused_rope || m.alibi || !m.latent_attention.empty()) return why;
  // rope_llama (templates/aotinfer/attention.cuh, rope_rotate8) rotates by
  // pos * rope_rcp_scale * rope_rcp_theta^(2i/d): one theta and one linear scale for all frequencies.
  if (!m.rope_type.empty() && m.rope_type != "linear")
    why.push_back("fused RoPE with " + m.rope_type + " scaling: rope_llama computes plain frequencies (theta^(-2i/d) / scale), not " +
                  m.rope_type + "'s; apply RoPE in the engine (leave out --fused-rope)");
  if (m.partial_rotary_factor < 1)
    why.push_back("fused RoPE over part of head_dim (partial_rotary_factor " + number(m.partial_rotary_factor) +
                  "): rope_llama rotates all of it; apply RoPE in the engine (leave out --fused-rope)");
  return why;
}

// What a front-end's check_config refuses, in its own words.
template <typename Check>
std::vector<std::string> refusal_of(Check check) {
  try {
    check();
  } catch (const Error& e) {
    return {e.what()};
  }
  return {};
}

std::vector<std::string> notes_of(const ModelConfig& m, const Options& o) {
  std::vector<std::string> notes = {"page size " + std::to_string(o.page_size) +
                                    ": a run-time value (kv.page_size of the kernels' params), not a variant axis; "
                                    "every page size uses these variants"};
  if (!m.latent_attention.empty()) {
    const std::string vo = m.latent_v_dim > 0 ? std::to_string(m.latent_v_dim) : "v_head_dim";
    notes.push_back(m.latent_attention + ": decode attends over the latent cache (batch_mla_decode, merge at " +
                    std::to_string(AOTINFER_MLA_CKV_DIM) + "); prefill is multi-head attention over K and V up-projected "
                    "from the latent, head_dim " + std::to_string(m.head_dim) + " (qk_nope_head_dim + qk_rope_head_dim) for q.k, head_dim_vo " +
                    vo + " (v_head_dim) for v and its merge; the engine applies RoPE to the " + std::to_string(m.latent_rope_dim) +
                    "-wide part (pos_encoding none)");
  } else if (m.alibi) {
    notes.push_back("ALiBi positions (pos_encoding alibi): decode's alibi variants; prefill adds the bias at run time "
                    "(pos_encoding=\"alibi\") in its none variants");
  } else if (o.fused_rope) {
    std::string scale = m.rope_type == "linear" && m.rope_factor ? ", rope_scale " + number(*m.rope_factor) : "";
    notes.push_back("RoPE inside attention (pos_encoding rope_llama): pass rope_theta " + number(m.rope_theta) + scale + " at run time");
  } else {
    notes.push_back("RoPE applied by the engine (pos_encoding none); --fused-rope checks for rope_llama variants instead");
  }
  if (m.sliding_layers && m.sliding_window)
    notes.push_back("sliding_window " + std::to_string(*m.sliding_window) + ": a run-time value (window_left, " +
                    std::to_string(*m.sliding_window - 1) + " for these layers) that every decode and prefill variant takes; "
                    "windowed and full layers share the variants");
  if (m.attention_sinks)
    notes.push_back("attention sinks (" + m.model_type + "'s self_attn.sinks, one logit per query head): a run-time argument "
                    "(sinks) every decode and prefill variant takes");
  if (m.soft_cap)
    notes.push_back("attn_logit_softcapping " + number(*m.soft_cap) +
                    ": a run-time value (logits_soft_cap) that every decode and prefill variant takes");
  if (m.query_pre_attn_scalar)
    notes.push_back("query_pre_attn_scalar " + number(*m.query_pre_attn_scalar) + ": pass sm_scale = 1/sqrt(" +
                    number(*m.query_pre_attn_scalar) + ") at run time");
  return notes;
}

}  // namespace

std::string_view op_name(Op op) {
  switch (op) {
    case Op::decode: return "decode";
    case Op::prefill_paged: return "prefill paged";
    case Op::prefill_ragged: return "prefill ragged";
    case Op::append: return "append";
    case Op::merge: return "merge";
    case Op::latent_decode: return "latent decode";
  }
  return "?";
}

namespace {

// The prefill templates serve unequal widths for one pair only (PrefillDims in
// templates/aotinfer/prefill_work.cuh): MLA's q.k 192 (qk_nope 128 + qk_rope 64) and v 128. The
// manifest lists each axis's values, not which pairs compile, so head_dim 192 with head_dim_vo
// 64 would otherwise read as a spec entry away.
constexpr int kLatentPrefillQk = 192, kLatentPrefillVo = 128;

// Multi-head latent attention decodes in the absorbed form over the latent cache
// (batch_mla_decode) and merges split states 512 wide. Its prefill is ordinary multi-head
// attention over K and V up-projected from the latent: q.k over qk_nope + qk_rope wide heads
// (head_dim), values v_head_dim wide (head_dim_vo), with the model rotating the rope part
// itself (pos_encoding none), and split states merged head_dim_vo wide. The latent cache's
// append has no template yet, which its finding says in those words.
void add_latent_needs(const ModelConfig& m, const Options& o, const std::vector<std::string>& common, Needs& n) {
  std::vector<std::string> decode = common;
  if (m.latent_rank != AOTINFER_MLA_CKV_DIM || m.latent_rope_dim != AOTINFER_MLA_KPE_DIM)
    decode.push_back(m.latent_attention + ": batch_mla_decode is built for kv_lora_rank " + std::to_string(AOTINFER_MLA_CKV_DIM) +
                     " and qk_rope_head_dim " + std::to_string(AOTINFER_MLA_KPE_DIM));
  BatchMlaDecodeConfig d;
  d.dtype = n.activation, d.dtype_kv = n.kv_cache, d.num_heads = m.num_qo_heads, d.page_size = o.page_size;
  for (auto& why : refusal_of([&] { BatchMlaDecode::check_config(d); })) decode.push_back(why);
  n.needs.push_back({Op::latent_decode, BatchMlaDecode::variant_key(d), std::move(decode)});
  n.needs.push_back({Op::merge, MergeState::variant_key(n.activation, AOTINFER_MLA_CKV_DIM), {}});

  // Widths the kernels do not pair refuse the prefill and its merge alike: a merge_state
  // variant at v_head_dim would serve nothing. A config without v_head_dim names no width.
  const int vo = m.latent_v_dim;
  std::vector<std::string> dims;
  if (m.head_dim != kLatentPrefillQk || vo != kLatentPrefillVo)
    dims.push_back(m.latent_attention + " prefill at head_dim " + std::to_string(m.head_dim) +
                   " (qk_nope_head_dim + qk_rope_head_dim) and head_dim_vo " +
                   (vo > 0 ? std::to_string(vo) + " (v_head_dim)" : "unknown (config.json has no v_head_dim)") +
                   ": the prefill templates pair head_dim " + std::to_string(kLatentPrefillQk) + " with head_dim_vo " +
                   std::to_string(kLatentPrefillVo) + " only");
  BatchPrefillConfig p;
  for (KvStorage storage : {KvStorage::paged, KvStorage::ragged}) {
    p.dtype_q = p.dtype_o = n.activation;
    p.dtype_kv = storage == KvStorage::paged ? n.kv_cache : n.activation;
    p.head_dim = m.head_dim, p.head_dim_vo = vo, p.num_qo_heads = p.num_kv_heads = m.num_qo_heads;
    p.kv_storage = storage, p.page_size = o.page_size, p.mask = MaskMode::causal;
    std::vector<std::string> refusals = common;
    refusals.insert(refusals.end(), dims.begin(), dims.end());
    // What the front-end refuses at served widths: an fp8 cache.
    if (dims.empty())
      for (auto& why : refusal_of([&] { BatchPrefill::check_config(p); })) refusals.push_back(why);
    n.needs.push_back({storage == KvStorage::paged ? Op::prefill_paged : Op::prefill_ragged, BatchPrefill::variant_key(p),
                       std::move(refusals)});
  }
  n.needs.push_back({Op::append, AppendPagedKv::variant_key(n.kv_cache, AOTINFER_MLA_CKV_DIM),
                     {m.latent_attention + " cache append (a " + std::to_string(m.latent_rank) + "-wide latent and a " +
                      std::to_string(m.latent_rope_dim) + "-wide key per token): no template implements it yet"}});
  n.needs.push_back({Op::merge, MergeState::variant_key(p.dtype_o, p.vo_dim()), dims});  // the front-end's merge
}

}  // namespace

Needs model_needs(const ModelConfig& m, const Options& o) {
  Needs n;
  n.activation = activation_dtype(m, o, n.notes);
  n.kv_cache = o.kv_dtype.value_or(n.activation);
  const std::vector<std::string> common = attention_refusals(m, o);
  const PosEncoding pos = m.alibi ? PosEncoding::alibi : o.fused_rope ? PosEncoding::rope_llama : PosEncoding::none;
  if (!m.latent_attention.empty()) {
    add_latent_needs(m, o, common, n);
    const auto notes = notes_of(m, o);
    n.notes.insert(n.notes.end(), notes.begin(), notes.end());
    return n;
  }

  // Windowed and full layers run the same variants: the window is a run-time value.
  auto add = [&](Op op, VariantKey key, std::vector<std::string> refusals) {
    refusals.insert(refusals.begin(), common.begin(), common.end());
    n.needs.push_back({op, std::move(key), std::move(refusals)});
  };
  {
    BatchDecodeConfig d;
    d.dtype_q = d.dtype_o = n.activation;
    d.dtype_kv = n.kv_cache;
    d.head_dim = m.head_dim, d.num_qo_heads = m.num_qo_heads, d.num_kv_heads = m.num_kv_heads;
    d.page_size = o.page_size, d.pos_encoding = pos;
    add(Op::decode, BatchDecode::variant_key(d), refusal_of([&] { BatchDecode::check_config(d); }));
  }
  for (KvStorage storage : {KvStorage::paged, KvStorage::ragged}) {
      BatchPrefillConfig p;
      p.dtype_q = p.dtype_o = n.activation;
      // Paged prefill reads the KV cache; ragged prefill reads the step's own K and V, activations.
      p.dtype_kv = storage == KvStorage::paged ? n.kv_cache : n.activation;
      p.head_dim = m.head_dim, p.num_qo_heads = m.num_qo_heads, p.num_kv_heads = m.num_kv_heads;
      p.kv_storage = storage, p.page_size = o.page_size, p.mask = MaskMode::causal;
      p.pos_encoding = pos;
      add(storage == KvStorage::paged ? Op::prefill_paged : Op::prefill_ragged, BatchPrefill::variant_key(p),
          refusal_of([&] { BatchPrefill::check_config(p); }));
  }
  n.needs.push_back({Op::append, AppendPagedKv::variant_key(n.kv_cache, m.head_dim), {}});
  n.needs.push_back({Op::merge, MergeState::variant_key(n.activation, m.head_dim), {}});
  const auto notes = notes_of(m, o);
  n.notes.insert(n.notes.end(), notes.begin(), notes.end());
  return n;
}

}  // namespace aotinfer::coverage
