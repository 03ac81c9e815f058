"""Hugging Face transformers' continuous batching (generate_batch) with aotinfer attention
(aotinfer.integrations.transformers, attn_implementation="paged|aotinfer") against transformers'
own "paged|sdpa", on one randomly initialised Llama (4 layers, 32 query / 8 KV heads, head_dim
128, bf16; built from a config, nothing downloaded).

Checked, for two continuous-batching setups (block_size 32 with a 512-token budget: chunked
prefill, mixed prefill/decode steps, many pages per request; block_size 256 with a 4096-token
budget: every prompt prefilled in the first step):
  - the logits of the first step, and of every step (both runs schedule the same batches: no
    EOS, the same lengths), relative error < 2e-2;
  - every layer's attention output (o_proj input) at every step, relative error < 2e-2;
  - the greedy tokens agree on >= 95% of positions; every request finishes without error;
  - aotinfer served the run (its plans: prefill and decode steps).
Tokens/s of both are printed (a tiny batch: mostly Python overhead).

The model: random weights, except that the embedding is larger (std 2) and lm_head row pi(t) is
t's normalised embedding for a random permutation pi. The residual stream then leans on the
current token, so greedy decoding picks pi(t) with a wide margin, while attention (over the whole
cache) still moves the logits and every hidden state. A plain random model has near-ties that the
bf16 noise of two correct attention implementations flips (measured at these sizes with 2e-3
relative noise on each attention output: 1% of argmaxes flip, and a free-running comparison of
32 tokens would then measure luck); with this one the top-2 margin is > 1000x that noise, and a
wrong KV cache or mask (an off-by-one in the KV length) still moves the logits by ~0.3 relative
and the attention outputs by O(1).

Hybrid models (per-layer sliding windows, soft caps, query_pre_attn_scalar scales, sinks), served
by the default package with no rebuild: small random bf16 models built from configs, each with a
sliding window (WINDOW keys) shorter than every prompt, through continuous batching (block_size
16, a 256-token budget: chunked prefill, mixed steps; transformers keeps the sliding layers'
KV in rolling buffers):
  - Qwen2, use_sliding_window with max_window_layers < num_hidden_layers (full layers first,
    windowed layers after);
  - Gemma 2: alternating windowed / full layers, attn_logit_softcapping (the "softcap" kwarg),
    query_pre_attn_scalar != head_dim (transformers' `scaling`);
  - Gemma 3 (text): three windowed layers per full one (so several layer groups share a plan),
    query_pre_attn_scalar;
  - gpt-oss: alternating windows and per-head attention sinks (skipped when transformers lacks it).
Checked for each, as above (logits per step, every layer's attention output per step, greedy
tokens), against transformers' own paged implementations where they compute what the model
needs (paged|sdpa; transformers' paged paths drop the soft cap, and paged|sdpa the sinks: then
paged|eager when it honours the sinks) and always against a float32 reference registered here
("paged|fp32_reference": transformers' cache.update gathers the KV as its paged paths do, then
plain PyTorch with the scale, cap, sinks, causal mask and window per request). Also: every layer
ran with the window its config gives it (window - 1 on windowed layers, none on full ones), and
each forward step planned at most once per distinct (window, KV storage), never once per layer.
A model class missing from transformers skips its case (pytest.skip, or a "skip" line).

Run on a GPU machine with torch and transformers 5.x after `pip install aotinfer-*.whl`:
    python3 packaging/python/tests/gpu_transformers.py [llama|hybrid]
(or pytest on this file: its test_hybrid_* functions run the hybrid cases).
"""
import inspect
import random
import sys
import time
import unittest

import torch
from transformers import ContinuousBatchingConfig, GenerationConfig, LlamaConfig, LlamaForCausalLM

import aotinfer.integrations.transformers as aot_tx

DEVICE = "cuda"
LAYERS, HEADS, KV_HEADS, HEAD_DIM, INTERMEDIATE, VOCAB = 4, 32, 8, 128, 8192, 32000
PROMPTS, MIN_PROMPT, MAX_PROMPT, NEW_TOKENS = 8, 5, 300, 32
SETUPS = [dict(block_size=32, max_batch_tokens=512), dict(block_size=256, max_batch_tokens=4096)]
TOLERANCE, AGREEMENT = 2e-2, 0.95

seed = random.randrange(1 << 30)
random.seed(seed)
torch.manual_seed(seed)
print(f"seed {seed}")
failures = []


def sync():
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def report(ok, line):
    print(f"{'ok  ' if ok else 'FAIL'} {line}")
    if not ok:
        failures.append(line)


def rel_err(got, want):
    got, want = got.double(), want.double()
    return ((got - want).norm() / want.norm().clamp_min(1e-30)).item()


def build_model():
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=HEADS * HEAD_DIM, intermediate_size=INTERMEDIATE,
                         num_hidden_layers=LAYERS, num_attention_heads=HEADS, num_key_value_heads=KV_HEADS,
                         head_dim=HEAD_DIM, max_position_embeddings=4096, tie_word_embeddings=False)
    return instantiate(LlamaForCausalLM, config)


def worst_attention(rec_ours, rec_ref, layers, steps):
    """The largest relative error of the recorded attention outputs over the first `steps` steps
    of every layer (inf where shapes differ), and its (layer, step)."""
    worst, where = 0.0, None
    for layer in range(layers):
        for s in range(min(steps, len(rec_ref.attn[layer]), len(rec_ours.attn[layer]))):
            a, b = rec_ours.attn[layer][s], rec_ref.attn[layer][s]
            e = float("inf") if a.shape != b.shape else rel_err(a, b)
            if e > worst:
                worst, where = e, (layer, s)
    return worst, where


def tokens_agree(ref_tokens, our_tokens, new_tokens):
    """Whether two runs generated the same first new_tokens tokens for every request (then every
    step of both saw the same inputs, and all their steps are comparable)."""
    return all(x == y for a, b in zip(ref_tokens, our_tokens) for j, (x, y) in enumerate(zip(a, b)) if j < new_tokens)


def instantiate(model_class, config):
    """A random bf16 model whose greedy decoding has wide margins (see the module docstring)."""
    with torch.device(DEVICE):
        model = model_class(config).to(torch.bfloat16).eval()
    vocab = config.vocab_size
    with torch.no_grad():
        embed = model.model.embed_tokens.weight
        embed.normal_(0.0, 2.0)
        unit = embed.float() / embed.float().norm(dim=1, keepdim=True)
        perm = torch.randperm(vocab, device=embed.device)
        head = torch.empty_like(unit)
        head[perm] = unit  # lm_head row perm[t] = t's unit embedding: greedy next token of t is perm[t]
        model.lm_head.weight.copy_(head)
    return model


class Recorder:
    """Records lm_head outputs (logits) and every layer's attention output per forward step."""

    def __init__(self, model):
        self.logits, self.attn = [], {i: [] for i in range(len(model.model.layers))}
        self.handles = [model.lm_head.register_forward_hook(
            lambda mod, args, out: self.logits.append(out.detach().float().reshape(-1, out.shape[-1]).clone()))]
        for i, layer in enumerate(model.model.layers):
            self.handles.append(layer.self_attn.o_proj.register_forward_pre_hook(
                lambda mod, args, i=i: self.attn[i].append(args[0].detach().reshape(-1, args[0].shape[-1]).clone())))

    def remove(self):
        for h in self.handles:
            h.remove()


def generate(model, implementation, prompts, setup, record, new_tokens=NEW_TOKENS, queued=False):
    """generate_batch, or with queued every request queued before the manager's loop starts:
    generate_batch starts the loop and then adds the requests, so the first steps' batches depend
    on that race (seen on CPU); queued ones are the same in every run, so runs compare step by
    step."""
    model.set_attn_implementation(implementation)
    generation = GenerationConfig(max_new_tokens=new_tokens, do_sample=False, eos_token_id=-1, pad_token_id=0)
    blocks_per_request = -(-(max(len(p) for p in prompts) + new_tokens) // setup["block_size"])
    cb = ContinuousBatchingConfig(num_blocks=2 * len(prompts) * blocks_per_request + 8,
                                  block_size=setup["block_size"], max_batch_tokens=setup["max_batch_tokens"],
                                  use_cuda_graph=False, use_async_batching=False)
    recorder = Recorder(model) if record else None
    sync()
    start = time.perf_counter()
    try:
        if queued:
            outputs = generate_queued(model, prompts, generation, cb, new_tokens)
        else:
            outputs = model.generate_batch(prompts, generation_config=generation, continuous_batching_config=cb,
                                           warmup=False)
    finally:
        sync()
        if recorder:
            recorder.remove()
    seconds = time.perf_counter() - start
    results = list(outputs.values())
    errors = [r.error[:300] for r in results if r.error is not None]
    tokens = [list(r.generated_tokens) for r in results]
    return dict(tokens=tokens, errors=errors, seconds=seconds, recorder=recorder, count=len(results))


def generate_queued(model, prompts, generation, cb, new_tokens, seconds=600):
    """generate_batch's loop with every request added before the manager starts: {id: output}."""
    manager = model.init_continuous_batching(generation_config=generation, continuous_batching_config=cb)
    try:
        ids = manager.add_requests(inputs=prompts, max_new_tokens=new_tokens)
        manager.start()
        results, deadline = {}, time.perf_counter() + seconds
        while len(results) < len(ids) and time.perf_counter() < deadline:
            result = manager.get_result(timeout=1)
            if result is not None:
                if result.is_finished():
                    results[result.request_id] = result
            elif not manager.is_running():
                break
    finally:
        manager.stop(block=True, timeout=30)
        manager.destroy()
    return {i: results[i] for i in ids if i in results}


def compare(setup, prompts, model, aotinfer_name):
    label = f"block_size {setup['block_size']}, max_batch_tokens {setup['max_batch_tokens']}"
    runs = {}
    for name in ("paged|sdpa", aotinfer_name):
        before = dict(aot_tx.STATS)
        runs[name] = generate(model, name, prompts, setup, record=True)
        runs[name]["plans"] = {k: aot_tx.STATS[k] - before[k] for k in before}
        runs[name]["timed"] = generate(model, name, prompts, setup, record=False)
    ref, ours = runs["paged|sdpa"], runs[aotinfer_name]

    for name, run in runs.items():
        complete = run["count"] == PROMPTS and not run["errors"] and all(len(t) == NEW_TOKENS for t in run["tokens"])
        report(complete, f"[{label}] {name}: {run['count']} requests, errors {run['errors'][:2]}, "
                         f"{sum(len(t) for t in run['tokens'])} tokens")
    plans = ours["plans"]
    report(plans["prefill"] > 0 and plans["decode"] > 0 and plans["calls"] > 0,
           f"[{label}] aotinfer served the run: {plans['prefill']} prefill and {plans['decode']} decode plans, "
           f"{plans['calls']} attention calls; paged|sdpa run made {runs['paged|sdpa']['plans']['calls']} aotinfer calls")

    rec_ref, rec_ours = ref["recorder"], ours["recorder"]
    same_steps = len(rec_ref.logits) == len(rec_ours.logits) and len(rec_ref.logits) > 0
    report(same_steps, f"[{label}] forward steps: paged|sdpa {len(rec_ref.logits)}, aotinfer {len(rec_ours.logits)}")
    if same_steps:
        first = rel_err(rec_ours.logits[0], rec_ref.logits[0])
        report(first < TOLERANCE, f"[{label}] first-step logits ({list(rec_ref.logits[0].shape)}): relative error "
                                  f"{first:.2e} (tolerance {TOLERANCE:g})")
        # Steps are comparable while the tokens fed back agree (then both runs see the same inputs).
        steps = len(rec_ref.logits) if tokens_agree(ref["tokens"], ours["tokens"], NEW_TOKENS) else 1
        worst_logits = max(rel_err(rec_ours.logits[s], rec_ref.logits[s]) for s in range(steps))
        report(worst_logits < TOLERANCE, f"[{label}] logits of {steps} steps: worst relative error {worst_logits:.2e}")
        worst_attn, where = worst_attention(rec_ours, rec_ref, LAYERS, steps)
        report(worst_attn < TOLERANCE, f"[{label}] attention outputs of {LAYERS} layers x {steps} steps: worst "
                                       f"relative error {worst_attn:.2e} at (layer, step) {where}")

    total = sum(len(t) for t in ref["tokens"])
    same = sum(x == y for a, b in zip(ref["tokens"], ours["tokens"]) for x, y in zip(a, b))
    report(total > 0 and same / total >= AGREEMENT, f"[{label}] greedy tokens agree on {same}/{total} positions "
                                                   f"({100.0 * same / max(total, 1):.1f}%, need {100 * AGREEMENT:.0f}%)")
    speeds = {name: sum(len(t) for t in run["timed"]["tokens"]) / run["timed"]["seconds"] for name, run in runs.items()}
    print(f"     [{label}] generate_batch: " + ", ".join(f"{n} {v:.0f} tokens/s" for n, v in speeds.items()))


def main_llama():
    model = build_model()
    print(f"model: Llama {LAYERS} layers, {HEADS}/{KV_HEADS} heads, head_dim {HEAD_DIM}, hidden {HEADS * HEAD_DIM}, "
          f"vocab {VOCAB}, bf16 on {torch.cuda.get_device_name() if DEVICE == 'cuda' else DEVICE}")
    name = aot_tx.register()
    prompts = [[random.randrange(VOCAB) for _ in range(random.randint(MIN_PROMPT, MAX_PROMPT))] for _ in range(PROMPTS)]
    print(f"{PROMPTS} prompts of {sorted(len(p) for p in prompts)} tokens, {NEW_TOKENS} new tokens each; "
          f"attn_implementation {name!r}")
    for setup in SETUPS:
        try:
            compare(setup, prompts, model, name)
        except Exception as e:  # keep going: the other setup still says something
            import traceback
            traceback.print_exc()
            report(False, f"setup {setup}: {type(e).__name__}: {e}")
    del model
    torch.cuda.empty_cache()

# --- Hybrid models: per-layer windows, soft caps, query_pre_attn_scalar scales, sinks ----------

WINDOW = 32  # keys, the query's own included (transformers' sliding_window): shorter than every prompt
HYBRID_PROMPTS, HYBRID_MIN_PROMPT, HYBRID_MAX_PROMPT, HYBRID_NEW_TOKENS = 6, 48, 160, 8
HYBRID_SETUP = dict(block_size=16, max_batch_tokens=256)
HYBRID_VOCAB = 8192
REFERENCE = "paged|fp32_reference"

try:
    import pytest
    SKIPS = (unittest.SkipTest, pytest.skip.Exception)
except ImportError:  # run as a script without pytest
    pytest = None
    SKIPS = (unittest.SkipTest,)


def skip(reason):
    """Skips the current case: pytest.skip under pytest, else unittest.SkipTest (main prints it)."""
    if pytest is not None:
        pytest.skip(reason)
    raise unittest.SkipTest(reason)


def model_classes(config_name, model_name):
    import transformers
    missing = [n for n in (config_name, model_name) if not hasattr(transformers, n)]
    if missing:
        skip(f"transformers {transformers.__version__} has no {' / '.join(missing)}")
    return getattr(transformers, config_name), getattr(transformers, model_name)


def sharpen(model, factor=4.0):
    """Scales every q_proj so that scores spread over a few units: attention then leans on a few
    keys, so a key outside the window, or a cap not applied, moves the outputs by O(1)."""
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.q_proj.weight.mul_(factor)


def hybrid_model(config_name, model_name, **config):
    """A 4-layer model of transformers' classes config_name/model_name with random, sharpened
    weights: the shared settings, then the model's own."""
    config_class, model_class = model_classes(config_name, model_name)
    shared = dict(vocab_size=HYBRID_VOCAB, num_hidden_layers=4, num_attention_heads=8, sliding_window=WINDOW,
                  max_position_embeddings=4096, tie_word_embeddings=False)
    model = instantiate(model_class, config_class(**shared, **config))
    sharpen(model)
    return model


def build_qwen2():
    model = hybrid_model("Qwen2Config", "Qwen2ForCausalLM", hidden_size=1024, intermediate_size=2048,
                         num_key_value_heads=2, use_sliding_window=True, max_window_layers=2)
    return model, dict(softcap=False, sinks=False)


def build_gemma2():
    model = hybrid_model("Gemma2Config", "Gemma2ForCausalLM", hidden_size=1024, intermediate_size=2048,
                         num_key_value_heads=4, head_dim=256, query_pre_attn_scalar=64, attn_logit_softcapping=2.0,
                         final_logit_softcapping=None)
    return model, dict(softcap=True, sinks=False)


def build_gemma3():
    model = hybrid_model("Gemma3TextConfig", "Gemma3ForCausalLM", hidden_size=1024, intermediate_size=2048,
                         num_key_value_heads=4, head_dim=128, query_pre_attn_scalar=64, final_logit_softcapping=None,
                         attn_logit_softcapping=None, layer_types=["sliding_attention"] * 3 + ["full_attention"])
    return model, dict(softcap=False, sinks=False)


def build_gpt_oss():
    model = hybrid_model("GptOssConfig", "GptOssForCausalLM", hidden_size=512, intermediate_size=512,
                         num_key_value_heads=2, head_dim=64, num_local_experts=4, num_experts_per_tok=2)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.sinks.uniform_(-2.0, 6.0)  # from negligible to dominant, as gpu_flashinfer.py's
            # A fixed routing (zero weights, spread biases): the bf16 noise of two correct attention
            # implementations would otherwise flip top-k expert choices, whose jumps in the hidden
            # states measure the router, not attention.
            layer.mlp.router.weight.zero_()
            layer.mlp.router.bias.copy_(torch.arange(model.config.num_local_experts, dtype=torch.float32) * 4.0)
    return model, dict(softcap=False, sinks=True)


HYBRIDS = {"qwen2": build_qwen2, "gemma2": build_gemma2, "gemma3": build_gemma3, "gpt-oss": build_gpt_oss}


def layer_windows(config):
    """Each layer's window as its config gives it, in aotinfer's terms (window_left: -1 for a full
    layer), and whether transformers' cache keeps it as a rolling buffer ("ragged" KV for us)."""
    types = getattr(config, "layer_types", None)
    if types is None:
        types = ["sliding_attention" if config.sliding_window else "full_attention"] * config.num_hidden_layers
    return {i: (config.sliding_window - 1, "ragged") if t == "sliding_attention" else (-1, "paged")
            for i, t in enumerate(types)}


def transformers_references(needs):
    """The first of transformers' paged implementations (paged|sdpa, paged|eager) that computes
    what the model needs. They take kwargs they do not use, so a name that runs is no proof:
    none applies the soft cap (the "softcap" kwarg is dropped); the sinks are honoured where the
    implementation's source reads them (paged|eager since gpt-oss came)."""
    if needs["softcap"]:
        return []
    for name, module in (("paged|sdpa", "sdpa_paged"), ("paged|eager", "eager_paged")):
        if not needs["sinks"]:
            return [name]
        try:
            source = inspect.getsource(__import__(f"transformers.integrations.{module}", fromlist=["_"]))
        except Exception:  # noqa: BLE001 (another layout of transformers: not a reference here)
            continue
        if "sinks" in source:
            return [name]
    return []


def _gathered(cache, key, value, layer_idx, kwargs):
    """transformers' own gather of a layer's KV (as its paged paths do it): [kv tokens, heads, dim]."""
    return cache.update(key_states=key, value_states=value, layer_idx=layer_idx, read_index=kwargs["read_index"],
                        write_index=kwargs["write_index"])


def fp32_reference_attention(module, query, key, value, attention_mask=None, scaling=None, dropout=0.0, **kwargs):
    """The float32 reference: transformers' cache gathers the KV of the layer (its rolling buffer
    for sliding layers, whose window is transformers' cache.sliding_windows), then per request a
    causal mask aligned to the end of its keys (query token t of q_len sits at kv_len - q_len + t),
    the window (keys within W of the query, its own included), the scale, soft cap and sinks as
    transformers' eager attention applies them."""
    cache = kwargs["cache"]
    layer_idx = module.layer_idx
    k_all, v_all = _gathered(cache, key, value, layer_idx, kwargs)
    window = cache.sliding_windows.get(layer_idx, 1)
    cu_k = kwargs["cu_seq_lens_k"]
    if isinstance(cu_k, dict):
        cu_k = cu_k["full_attention" if window == 1 else "sliding_attention"]
    qs, ks = kwargs["cu_seq_lens_q"].tolist(), cu_k.tolist()
    _, heads, tokens, dim = query.shape
    group = heads // k_all.shape[1]
    softcap = kwargs.get("softcap")
    sinks = kwargs.get("s_aux")
    if sinks is None:
        sinks = getattr(module, "sinks", None)
    if scaling is None:
        scaling = module.scaling
    q = query[0].float()  # [heads, tokens, dim]
    out = torch.zeros(tokens, heads, dim, dtype=torch.float32, device=query.device)
    for i in range(len(qs) - 1):
        q0, q1, k0, k1 = qs[i], qs[i + 1], ks[i], ks[i + 1]
        if q1 <= q0:
            continue
        k = k_all[k0:k1].float().repeat_interleave(group, dim=1).transpose(0, 1)  # [heads, keys, dim]
        v = v_all[k0:k1].float().repeat_interleave(group, dim=1).transpose(0, 1)
        s = q[:, q0:q1] @ k.transpose(1, 2) * scaling
        if softcap:
            s = softcap * torch.tanh(s / softcap)
        pos = torch.arange(q1 - q0, device=s.device)[:, None] + (k1 - k0) - (q1 - q0)
        keys = torch.arange(k1 - k0, device=s.device)[None, :]
        keep = keys <= pos
        if window > 1:
            keep &= keys > pos - window
        s = s.masked_fill(~keep, float("-inf"))
        if sinks is not None:
            sink = sinks.float().view(heads, 1, 1).expand(heads, q1 - q0, 1)
            p = torch.cat([s, sink], -1).softmax(-1)[..., :-1]
        else:
            p = s.softmax(-1)
        out[q0:q1] = (p @ v).transpose(0, 1)
    return out.to(query.dtype).unsqueeze(0), None


def hybrid_case(name):
    """One hybrid model against its references; returns its failure lines (also reported)."""
    first_failure = len(failures)
    model, needs = HYBRIDS[name]()
    config = model.config
    expected = layer_windows(config)
    kinds = set(expected.values())
    if len(kinds) < 2:
        report(False, f"[{name}] the config is not hybrid: layer windows {expected}")
    from transformers import AttentionInterface
    AttentionInterface.register(REFERENCE, fp32_reference_attention)
    wanted = [w for w, flag in (("soft cap", needs["softcap"]), ("sinks", needs["sinks"])) if flag]
    references = transformers_references(needs) + [REFERENCE]
    prompts = [[random.randrange(HYBRID_VOCAB) for _ in range(random.randint(HYBRID_MIN_PROMPT, HYBRID_MAX_PROMPT))]
               for _ in range(HYBRID_PROMPTS)]
    print(f"hybrid {name}: {type(model).__name__}, {len(expected)} layers, windows (window_left, KV) "
          f"{[expected[i] for i in sorted(expected)]}, scaling {model.model.layers[0].self_attn.scaling:.4g}"
          f"{', soft cap ' + str(config.attn_logit_softcapping) if needs['softcap'] else ''}"
          f"{', sinks' if needs['sinks'] else ''}; prompts {sorted(len(p) for p in prompts)} tokens (window "
          f"{WINDOW}); references {references}" + ("" if len(references) > 1 else
                                                    f" (transformers' paged paths drop the {'/'.join(wanted)})"))
    name_ours = aot_tx.register()
    runs = {}
    for implementation in [name_ours] + references:
        before = dict(aot_tx.STATS)
        aot_tx.LAYERS.clear()
        runs[implementation] = generate(model, implementation, prompts, HYBRID_SETUP, record=True,
                                        new_tokens=HYBRID_NEW_TOKENS, queued=True)
        runs[implementation]["plans"] = {k: aot_tx.STATS[k] - before[k] for k in before}
        if implementation == name_ours:
            runs[implementation]["layers"] = dict(aot_tx.LAYERS)
    ours = runs[name_ours]
    label = f"[{name}]"
    for implementation, run in runs.items():
        complete = (run["count"] == len(prompts) and not run["errors"]
                    and all(len(t) == HYBRID_NEW_TOKENS for t in run["tokens"]))
        complete = complete and run["count"] == len(prompts)
        report(complete, f"{label} {implementation}: {run['count']} requests, errors {run['errors'][:2]}, "
                         f"{sum(len(t) for t in run['tokens'])} tokens")
    report(ours["layers"] == expected, f"{label} per-layer windows served (window_left, KV): "
                                       f"{[ours['layers'].get(i) for i in sorted(expected)]}")
    plans = ours["plans"]
    planned = plans["decode"] + plans["prefill"] + plans["ragged"]
    report(plans["steps"] > 0 and plans["steps"] <= planned <= plans["steps"] * len(kinds),
           f"{label} {planned} plans ({plans['prefill']} prefill, {plans['decode']} decode, {plans['ragged']} ragged) "
           f"for {plans['steps']} steps of {len(expected)} layers: at most {len(kinds)} per step (one per window)")
    for reference in references:
        # paged|eager rounds its probabilities to bf16 before the value product: twice sdpa's noise.
        tolerance = 1.5 * TOLERANCE if reference == "paged|eager" else TOLERANCE
        compare_recorded(f"{label} vs {reference}", runs[reference], ours, len(expected), HYBRID_NEW_TOKENS,
                         tolerance)
    del model
    torch.cuda.empty_cache()
    return failures[first_failure:]


def compare_recorded(label, ref, ours, layers, new_tokens, tolerance=TOLERANCE):
    """Logits of every step (while the fed-back tokens agree), every layer's attention output, and
    greedy agreement, as compare() checks the Llama runs."""
    rec_ref, rec_ours = ref["recorder"], ours["recorder"]
    same_steps = len(rec_ref.logits) == len(rec_ours.logits) and len(rec_ref.logits) > 0
    report(same_steps, f"{label} forward steps: reference {len(rec_ref.logits)}, aotinfer {len(rec_ours.logits)}")
    if same_steps:
        steps = len(rec_ref.logits) if tokens_agree(ref["tokens"], ours["tokens"], new_tokens) else 1
        worst_logits = max(rel_err(rec_ours.logits[s], rec_ref.logits[s]) for s in range(steps))
        report(worst_logits < tolerance, f"{label} logits of {steps} steps: worst relative error {worst_logits:.2e} "
                                         f"(tolerance {tolerance:g})")
        worst_attn, where = worst_attention(rec_ours, rec_ref, layers, steps)
        report(worst_attn < tolerance, f"{label} attention outputs of {layers} layers x {steps} steps: worst "
                                       f"relative error {worst_attn:.2e} at (layer, step) {where}")
    total = sum(len(t) for t in ref["tokens"])
    same = sum(x == y for a, b in zip(ref["tokens"], ours["tokens"]) for x, y in zip(a, b))
    report(total > 0 and same / total >= AGREEMENT, f"{label} greedy tokens agree on {same}/{total} positions")


def _pytest_case(name):
    aot_tx.register()
    lines = hybrid_case(name)
    assert not lines, "; ".join(lines)


def test_hybrid_qwen2():
    _pytest_case("qwen2")


def test_hybrid_gemma2():
    _pytest_case("gemma2")


def test_hybrid_gemma3():
    _pytest_case("gemma3")


def test_hybrid_gpt_oss():
    _pytest_case("gpt-oss")

def main(argv=()):
    t0 = time.perf_counter()
    parts = set(argv) or {"llama", "hybrid"}
    if "llama" in parts:
        main_llama()
    if "hybrid" in parts:
        aot_tx.register()
        for name in HYBRIDS:
            try:
                hybrid_case(name)
            except SKIPS as e:
                print(f"skip {name}: {e}")
            except Exception as e:  # keep going: the other models still say something
                import traceback
                traceback.print_exc()
                report(False, f"hybrid {name}: {type(e).__name__}: {e}")
    print(f"transformers checks ({time.perf_counter() - t0:.0f} s):",
          "FAILED " + "; ".join(failures) if failures else "all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
