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

Run on a GPU machine with torch and transformers 5.x after `pip install aotinfer-*.whl`:
    python3 packaging/python/tests/gpu_transformers.py
"""
import random
import sys
import time

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
    with torch.device(DEVICE):
        model = LlamaForCausalLM(config).to(torch.bfloat16).eval()
    with torch.no_grad():
        embed = model.model.embed_tokens.weight
        embed.normal_(0.0, 2.0)
        unit = embed.float() / embed.float().norm(dim=1, keepdim=True)
        perm = torch.randperm(VOCAB, device=embed.device)
        head = torch.empty_like(unit)
        head[perm] = unit  # lm_head row perm[t] = t's unit embedding: greedy next token of t is perm[t]
        model.lm_head.weight.copy_(head)
    return model


class Recorder:
    """Records lm_head outputs (logits) and every layer's attention output per forward step."""

    def __init__(self, model):
        self.logits, self.attn = [], {i: [] for i in range(LAYERS)}
        self.handles = [model.lm_head.register_forward_hook(
            lambda mod, args, out: self.logits.append(out.detach().float().reshape(-1, out.shape[-1]).clone()))]
        for i, layer in enumerate(model.model.layers):
            self.handles.append(layer.self_attn.o_proj.register_forward_pre_hook(
                lambda mod, args, i=i: self.attn[i].append(args[0].detach().reshape(-1, args[0].shape[-1]).clone())))

    def remove(self):
        for h in self.handles:
            h.remove()


def generate(model, implementation, prompts, setup, record):
    model.set_attn_implementation(implementation)
    generation = GenerationConfig(max_new_tokens=NEW_TOKENS, do_sample=False, eos_token_id=-1, pad_token_id=0)
    blocks_per_request = -(-(MAX_PROMPT + NEW_TOKENS) // setup["block_size"])
    cb = ContinuousBatchingConfig(num_blocks=2 * PROMPTS * blocks_per_request + 8,
                                  block_size=setup["block_size"], max_batch_tokens=setup["max_batch_tokens"],
                                  use_cuda_graph=False, use_async_batching=False)
    recorder = Recorder(model) if record else None
    sync()
    start = time.perf_counter()
    try:
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
        agree_until = NEW_TOKENS
        for a, b in zip(ref["tokens"], ours["tokens"]):
            for j, (x, y) in enumerate(zip(a, b)):
                if x != y:
                    agree_until = min(agree_until, j)
                    break
        steps = len(rec_ref.logits) if agree_until == NEW_TOKENS else 1
        worst_logits = max(rel_err(rec_ours.logits[s], rec_ref.logits[s]) for s in range(steps))
        report(worst_logits < TOLERANCE, f"[{label}] logits of {steps} steps: worst relative error {worst_logits:.2e}")
        worst_attn, where = 0.0, None
        for layer in range(LAYERS):
            for s in range(min(steps, len(rec_ref.attn[layer]), len(rec_ours.attn[layer]))):
                a, b = rec_ours.attn[layer][s], rec_ref.attn[layer][s]
                if a.shape != b.shape:
                    worst_attn, where = float("inf"), (layer, s, "shape")
                    break
                e = rel_err(a, b)
                if e > worst_attn:
                    worst_attn, where = e, (layer, s)
        report(worst_attn < TOLERANCE, f"[{label}] attention outputs of {LAYERS} layers x {steps} steps: worst "
                                       f"relative error {worst_attn:.2e} at (layer, step) {where}")

    total = sum(len(t) for t in ref["tokens"])
    same = sum(x == y for a, b in zip(ref["tokens"], ours["tokens"]) for x, y in zip(a, b))
    report(total > 0 and same / total >= AGREEMENT, f"[{label}] greedy tokens agree on {same}/{total} positions "
                                                   f"({100.0 * same / max(total, 1):.1f}%, need {100 * AGREEMENT:.0f}%)")
    speeds = {name: sum(len(t) for t in run["timed"]["tokens"]) / run["timed"]["seconds"] for name, run in runs.items()}
    print(f"     [{label}] generate_batch: " + ", ".join(f"{n} {v:.0f} tokens/s" for n, v in speeds.items()))


def main():
    t0 = time.perf_counter()
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
    print(f"transformers checks ({time.perf_counter() - t0:.0f} s):",
          "FAILED " + "; ".join(failures) if failures else "all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
