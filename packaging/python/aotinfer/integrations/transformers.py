"""aotinfer attention for Hugging Face transformers' continuous batching (generate_batch,
init_continuous_batching, continuous_batching_context_manager; written against transformers
5.17). From transformers 5.19 on, continuous batching takes only its own attention
implementations by name ("paged|eager", "sdpa", flash attention) and refuses a registered one,
so register() refuses those versions, saying so.

    import aotinfer.integrations.transformers as aot_tx
    aot_tx.register()                                        # -> "paged|aotinfer"
    model = AutoModelForCausalLM.from_pretrained(..., attn_implementation="paged|aotinfer")
    # or model.set_attn_implementation("paged|aotinfer")
    outputs = model.generate_batch(prompts, generation_config)

Use the "paged|" name: a plain name is turned into "paged|<name>" by continuous batching only
after it has tried to switch to flash attention. Outside continuous batching (a plain forward or
generate()) the implementation refuses to run, as transformers' own paged ones do.

How transformers' paged cache maps onto aotinfer (transformers 5.17,
generation/continuous_batching/cache.py):

  - Each layer of a layer group owns one K and one V tensor [(num_blocks + 2) * block_size,
    num_kv_heads, head_dim], contiguous: viewed as [num_blocks + 2, block_size, heads, dim] it is
    exactly an aotinfer "nhd" page pool with page_size = block_size (page stride = one page).
    Block b of a request holds its tokens b * block_size ... in order, so a request's pages in
    order are its block table, and its KV length gives last_page_len. Nothing is copied: the
    kernels read the pools in place. (The two extra blocks are transformers' trash blocks.)
  - New tokens are written exactly as transformers does it (index_copy_ at write_index); the
    gather that transformers' sdpa/eager paths then do (index_select of the whole KV at
    read_index) is skipped. The page ids come from read_index (or write_index when no request
    has past KV): the slot of token p * block_size of request i is block_id * block_size.
  - Per forward step, the first attention layer of each kind plans (host metadata from
    cu_seq_lens_q/k: one small device-to-host read; one host-to-device copy) and every later
    layer of the step with the same window reuses the plan: a step change is noticed when the
    layer index does not increase (or the step's input tensors change), which costs no GPU work.
    The plan of paged layers holds no page ids: each layer group's page ids (its own blocks) are
    gathered on the GPU from that group's read_index once per step, so the full-attention
    groups of a hybrid model share one plan.
  - Decode-only steps (one query token per request) run aotinfer.BatchDecode; prefill, chunked
    prefill and mixed steps run aotinfer.BatchPrefill (paged, causal: query token t of a request
    with q_len queries and kv_len keys sits at kv_len - q_len + t, as in transformers).
  - Layers transformers caches as sliding-window layers (it keeps a rolling buffer per request,
    whose slots are not in token order and cannot be read as pages) use transformers' own gather
    (cache.update) and aotinfer.BatchPrefill over the gathered, ragged KV.

Sliding windows (hybrid models, no package rebuild: every variant serves any window). A layer's
window is the model's: the `sliding_window` transformers passes to the attention function (its
modules set it per layer from config.layer_types: Gemma 2/3 and gpt-oss alternate sliding and
full layers, Qwen2 with use_sliding_window windows the layers from max_window_layers on,
Mistral-style configs window every layer), else module.sliding_window, else what the cache says
(cache.sliding_windows; 1 or none: full attention). A window of W keys (transformers counts the
query's own key) is window_left = W - 1, the same on paged KV (decode: the last W keys of each
request) and on the gathered rolling buffer (query token t sees the W keys ending at its own).
The window is fixed when an aotinfer object is planned, so each step plans once per distinct
(window, KV storage): full layers share one plan, windowed layers another, never one per layer
(LAYERS says which window each layer last ran with).

Honoured: scaling (sm_scale: transformers passes `scaling`, e.g. Gemma's query_pre_attn_scalar
** -0.5), logits soft cap (the "softcap" kwarg, Gemma 2's attn_logit_softcapping; else
module.attn_logit_softcapping), sliding windows (above), GQA, attention sinks (gpt-oss: the
"s_aux" kwarg, else module.sinks, one logit per query head, passed as float32 sinks to every
BatchDecode / BatchPrefill run of the layer).
Multi-head latent attention models (DeepSeek-V3/R1, Kimi K2) do not reach this function in 5.17:
transformers' paged cache holds K and V config.head_dim (qk_rope_head_dim, 64) wide, narrower
than their 192-wide keys, so its continuous batching fails on them before attention runs
(paged|sdpa: "index_copy_(): Source/destination tensor must have same slice shapes"). Its later
versions (5.25) cache their latents, but by then refuse registered implementations. Their
attention is served through aotinfer.flashinfer's BatchMLAPagedAttentionWrapper and the
head_dim 192 / head_dim_vo 128 prefill.

Refused with an error: dropout, value head dim != query head dim, dtypes other than
float16/bfloat16, non-causal modules, transformers' block-table decode path (only enabled for
flash attention), CUDA-graph capture of the forward (continuous batching's use_cuda_graph: plans
are host work and transformers replays graphs with new metadata), and torch.compile with
fullgraph=True (the function is torch.compiler.disable'd; compile without fullgraph runs it
eagerly between graphs: ContinuousBatchingConfig(
varlen_compile_config=CompileConfig(fullgraph=False)); default_compile_level >= 1 compiles the
varlen path with fullgraph=True). By default continuous batching uses neither for an
implementation that is not flash attention.
"""
import math

import torch

import aotinfer

NAME = "aotinfer"
_DTYPES = {torch.bfloat16: "bf16", torch.float16: "f16"}
_STATE = "_aotinfer_attention_state"  # attribute of the PagedAttentionCache holding our per-cache state

_package = None
_registered = {}
# Plans made, by kind ("decode", "prefill", "ragged"), attention calls served and forward steps
# seen: a cheap way to see which kernels a run used (and that a step plans once per window).
STATS = {"decode": 0, "prefill": 0, "ragged": 0, "calls": 0, "steps": 0}
# layer index -> (window_left, "paged" | "ragged") of the layer's last call.
LAYERS = {}


# The first transformers whose continuous batching refuses attention implementations it does
# not ship (generation/continuous_batching/continuous_api.py: "Implementation ... is not
# supported for continuous batching").
_REFUSES_REGISTERED = (5, 19)


def _version(text):
    """(major, minor) of a version string such as "5.17.0" or "5.19.0.dev0"."""
    parts = []
    for piece in text.split(".")[:2]:
        digits = "".join(ch for ch in piece if ch.isdigit()) if piece[:1].isdigit() else ""
        parts.append(int(digits) if digits else 0)
    return tuple(parts + [0] * (2 - len(parts)))


def register(name=NAME, package=None):
    """Registers the attention implementation "paged|<name>" with transformers'
    AttentionInterface and returns that string (pass it as attn_implementation). package: an
    aotinfer.Package (default: aotinfer.Package(), the wheel's package). Idempotent. Raises
    RuntimeError on transformers 5.19 and later, whose continuous batching refuses registered
    implementations."""
    global _package
    import transformers
    from transformers import AttentionInterface

    if _version(transformers.__version__) >= _REFUSES_REGISTERED:
        raise RuntimeError(
            f"transformers {transformers.__version__}: its continuous batching runs only the attention "
            f"implementations it ships ('paged|eager', 'sdpa', flash attention) and refuses a registered one such as "
            f"paged|{name}; aotinfer's integration serves transformers 5.17 and 5.18 (install transformers<5.19), or "
            f"call aotinfer (or aotinfer.flashinfer) from your own engine")

    if package is not None:
        _package = package
    key = f"paged|{name}"
    if key not in _registered:
        AttentionInterface.register(key, paged_attention_forward)
        _registered[key] = True
    return key


def _shared_package():
    global _package
    if _package is None:
        _package = aotinfer.Package()
    return _package


class _Plan:
    """One planned step of one kind of layer (a KV storage and a window): what run() needs for
    every layer of the step. Paged plans keep the gather positions of the page ids; kv_indices
    holds each layer group's page ids, gathered from its read or write index on first use."""
    __slots__ = ("key", "kind", "core", "stream", "batch", "total_q", "qo_indptr", "kv_indptr", "kv_indices",
                 "kv_last_page_len", "gather", "reads", "last_slot")


class _CacheState:
    """aotinfer's state for one transformers PagedAttentionCache: core objects per
    configuration (the window included: it is fixed at plan time), workspaces (grown on demand)
    and the plans of the current step. Plans that are live in the same step (layers of a hybrid
    model with different windows) need their own core objects and workspaces; one slot's plans
    of successive steps share theirs (stream order keeps them apart)."""

    def __init__(self, device):
        self.device = device
        self.cores = {}
        self.buffers = {}  # slot -> [float workspace, int workspace]
        self.plans = {}
        self.last_layer = None
        self.host = {}  # layer type -> (fingerprint, host cu_seq_lens_q, host cu_seq_lens_k) of this step

    def core(self, kind, **config):
        key = (kind, tuple(sorted(config.items())))
        core = self.cores.get(key)
        if core is None:
            if kind == "decode":
                core = aotinfer.BatchDecode(_shared_package(), **config)
            else:
                core = aotinfer.BatchPrefill(_shared_package(), **config)
            self.cores[key] = core
        return core

    def workspaces(self, slot, float_bytes, int_bytes):
        buffers = self.buffers.setdefault(slot, [None, None])
        for i, need in enumerate((float_bytes, int_bytes)):
            if buffers[i] is None or buffers[i].numel() < need:
                buffers[i] = torch.empty(_round_up(need), dtype=torch.uint8, device=self.device)
        return buffers[0], buffers[1]


def _round_up(n):
    return max(1 << 20, 1 << (max(int(n), 1) - 1).bit_length())


def _refuse(what):
    raise NotImplementedError(f"attn_implementation paged|{NAME}: {what}")


def _stream():
    return torch.cuda.current_stream()


def _host_lengths(state, layer_type, cu_q, cu_k, fingerprint):
    """Host copies of cu_seq_lens_q and cu_seq_lens_k (one device-to-host read per step and
    layer type), without the padding requests transformers appends (zero queries, zero keys)."""
    cached = state.host.get(layer_type)
    if cached is not None and cached[0] == fingerprint:
        return cached[1], cached[2]
    n = cu_q.shape[0]
    if cu_k.shape[0] != n:
        raise ValueError(f"paged|{NAME}: cu_seq_lens_q has {n} entries, cu_seq_lens_k {cu_k.shape[0]}")
    both = torch.cat((cu_q.to(torch.int32), cu_k.to(torch.int32))).tolist()
    q, k = both[:n], both[n:]
    while n > 1 and q[n - 1] == q[n - 2] and k[n - 1] == k[n - 2]:
        n -= 1
    q, k = q[:n], k[:n]
    state.host[layer_type] = (fingerprint, q, k)
    return q, k


def _to_device(arrays, device):
    """int32 device copies of host int lists, made with one copy: slices of one buffer, each
    starting on a 16-byte boundary."""
    offsets, flat = [], []
    for a in arrays:
        flat.extend([0] * (-len(flat) % 4))
        offsets.append(len(flat))
        flat.extend(a)
    host = torch.tensor(flat, dtype=torch.int32)
    if device.type == "cuda":
        host = host.pin_memory()
    meta = host.to(device, non_blocking=True)
    return [meta[o:o + len(a)] for o, a in zip(offsets, arrays)]


def _plan_paged(state, key, q_host, k_host, slots_are_reads, block_size, num_pages, config, stream, device):
    """Plans one step over the paged pools: decode when every request has one query token,
    prefill otherwise. The page ids come later, per layer group (_page_ids): the slots of token
    p * block_size of request i are read from transformers' read_index (every request's KV
    slots, request i from cu_seq_lens_k[i]) or, when no request reads past KV, its write_index
    (from cu_seq_lens_q[i]); plan.gather holds those positions."""
    batch = len(q_host) - 1
    qo_lens = [q_host[i + 1] - q_host[i] for i in range(batch)]
    kv_lens = [k_host[i + 1] - k_host[i] for i in range(batch)]
    base = k_host if slots_are_reads else q_host
    pages_indptr, last, positions = [0], [], []
    for i in range(batch):
        n = kv_lens[i]
        if n < qo_lens[i]:
            raise ValueError(f"paged|{NAME}: request {i} has {qo_lens[i]} query tokens but {n} keys")
        if not slots_are_reads and n != qo_lens[i]:
            raise ValueError(f"paged|{NAME}: request {i} reads past KV ({n} keys for {qo_lens[i]} queries) "
                             f"but transformers passed no read_index")
        pages = -(-n // block_size)
        pages_indptr.append(pages_indptr[-1] + pages)
        last.append(n - (pages - 1) * block_size if pages else 0)
        positions.extend(range(base[i], base[i] + pages * block_size, block_size))

    plan = _Plan()
    plan.key, plan.batch, plan.total_q = key, batch, q_host[batch]
    decode = batch > 0 and all(n == 1 for n in qo_lens)
    plan.kind = "decode" if decode else "prefill"
    # One host-to-device copy of all int32 metadata; the page ids are gathered on the GPU.
    plan.qo_indptr, plan.kv_indptr, plan.kv_last_page_len, plan.gather = _to_device(
        (q_host, pages_indptr, last, positions), device)
    plan.reads, plan.last_slot, plan.kv_indices = slots_are_reads, positions[-1] if positions else -1, {}

    if decode:
        core = state.core("decode", page_size=block_size, **config)
        float_bytes, int_bytes = core.workspace_sizes(batch)
        fw, iw = state.workspaces(key[:2], float_bytes, int_bytes)
        core.plan(pages_indptr, last, fw, iw, num_pages=num_pages, stream=stream)
    else:
        core = state.core("prefill", kv_storage="paged", page_size=block_size, mask="causal", **config)
        float_bytes, int_bytes = core.workspace_sizes(max(plan.total_q, 1), max(batch, 1))
        fw, iw = state.workspaces(key[:2], float_bytes, int_bytes)
        core.plan(q_host, pages_indptr, fw, iw, kv_last_page_len=last, num_pages=num_pages, stream=stream)
    plan.core, plan.stream = core, stream
    return plan


def _page_ids(plan, group, slots, block_size):
    """The page ids of one layer group under a paged plan: its slots (read_index or write_index)
    gathered at the plan's positions, divided by the block size. Once per group and step."""
    ids_key = (group, slots.data_ptr(), slots.shape[0])
    ids = plan.kv_indices.get(ids_key)
    if ids is None:
        if plan.last_slot >= slots.shape[0]:
            raise ValueError(f"paged|{NAME}: the KV slot index of layer group {group} has {slots.shape[0]} entries, "
                             f"the batch needs {plan.last_slot + 1}")
        ids = torch.div(slots.index_select(0, plan.gather), block_size, rounding_mode="floor").to(torch.int32)
        plan.kv_indices[ids_key] = ids
    return ids


def _layer_window(module, kwargs, cache, layer_idx):
    """(window_left, rolling): the layer's sliding window as aotinfer's window_left (-1: full
    attention) and whether transformers keeps the layer's KV as a rolling buffer (its sliding
    layer groups) rather than in token order. The window is the model's (the sliding_window
    transformers passes, else the module's), else the cache's; transformers' window of W keys
    counts the query's own, so window_left = W - 1."""
    cached = getattr(cache, "sliding_windows", None) or {}
    cache_window = cached.get(layer_idx, 1)
    rolling = cache_window is not None and cache_window > 1  # transformers: 1 = full attention
    window = kwargs["sliding_window"] if "sliding_window" in kwargs else getattr(module, "sliding_window", None)
    if isinstance(window, bool) or (window is not None and not isinstance(window, int)):
        raise ValueError(f"paged|{NAME}: layer {layer_idx}: sliding_window must be an int or None, got {window!r}")
    if window is None or window <= 0:
        window = cache_window if rolling else None
    if rolling and window > cache_window:
        _refuse(f"layer {layer_idx} has a sliding window of {window} keys, but transformers' cache keeps only "
                f"{cache_window} for it")
    return (window - 1 if window else -1), rolling


def _plan_ragged(state, key, q_host, k_host, config, stream, device):
    """Plans one step over gathered (ragged) KV: request i's keys are rows k_host[i] .. of K."""
    batch = len(q_host) - 1
    plan = _Plan()
    plan.key, plan.kind, plan.batch, plan.total_q = key, "ragged", batch, q_host[batch]
    plan.qo_indptr, plan.kv_indptr = _to_device((q_host, k_host), device)
    plan.kv_indices = plan.kv_last_page_len = None
    core = state.core("prefill", kv_storage="ragged", mask="causal", **config)
    float_bytes, int_bytes = core.workspace_sizes(max(plan.total_q, 1), max(batch, 1))
    fw, iw = state.workspaces(key[:2], float_bytes, int_bytes)
    core.plan(q_host, k_host, fw, iw, stream=stream)
    plan.core, plan.stream = core, stream
    return plan


@torch.compiler.disable(reason=f"paged|{NAME} plans each forward step on the host; it runs between compiled graphs, "
                                "so compile continuous batching's paths with fullgraph=False")
def paged_attention_forward(module, query, key, value, attention_mask=None, scaling=None, dropout=0.0, **kwargs):
    """transformers attention function for continuous batching: query [1, num_heads, tokens,
    head_dim], key/value [1, num_kv_heads, tokens, head_dim] (this step's tokens, all requests
    packed); returns ([1, tokens, num_heads, head_dim], None)."""
    cache = kwargs.get("cache")
    if cache is None:
        raise ValueError(f"`paged|{NAME}` was called without a paged attention cache: it serves transformers' "
                         f"continuous batching (generate_batch, init_continuous_batching) only")
    if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
        _refuse("CUDA-graph capture of the forward is not supported (aotinfer plans each step on the host and "
                "transformers replays graphs with new metadata): use ContinuousBatchingConfig(use_cuda_graph=False)")
    if kwargs.get("block_table") is not None:
        _refuse("transformers' block-table decode path (max_blocks_per_request > 0) is not supported")
    if dropout:
        _refuse(f"attention dropout ({dropout}) is not supported")
    if not getattr(module, "is_causal", True):
        _refuse("non-causal attention is not supported")
    if query.dim() != 4 or query.shape[0] != 1:
        raise ValueError(f"paged|{NAME}: expected query [1, heads, tokens, head_dim], got {list(query.shape)}")
    _, num_qo_heads, tokens, head_dim = query.shape
    num_kv_heads = key.shape[1]
    if value.shape[-1] != head_dim or key.shape[-1] != head_dim:
        _refuse(f"key/value head dims {key.shape[-1]}/{value.shape[-1]} differ from the query's {head_dim}")
    dtype = _DTYPES.get(query.dtype)
    if dtype is None or key.dtype != query.dtype or cache.dtype != query.dtype:
        _refuse(f"dtypes must be float16 or bfloat16 and equal (query {query.dtype}, key {key.dtype}, "
                f"cache {cache.dtype})")
    softcap = kwargs["softcap"] if "softcap" in kwargs else getattr(module, "attn_logit_softcapping", None)
    softcap = float(softcap) if softcap else 0.0  # a run value: any cap, any layer
    sm_scale = float(scaling) if scaling is not None else float(getattr(module, "scaling", 1.0 / math.sqrt(head_dim)))
    sinks = kwargs.get("s_aux")
    if sinks is None:
        sinks = getattr(module, "sinks", None)
    if sinks is not None:  # a bf16 nn.Parameter in gpt-oss: the kernels read float32 logits, without autograd
        sinks = sinks.detach().to(torch.float32).contiguous()

    layer_idx = module.layer_idx
    group, layer_in_group = cache.layer_index_to_group_indices[layer_idx]
    window_left, rolling = _layer_window(module, kwargs, cache, layer_idx)
    layer_type = "sliding_attention" if rolling else "full_attention"  # the cache's group type
    cu_q = kwargs["cu_seq_lens_q"]
    cu_k = kwargs["cu_seq_lens_k"]
    if isinstance(cu_k, dict):
        cu_k = cu_k[layer_type]
    read_index = kwargs["read_index"][group]
    write_index = kwargs["write_index"][group]

    state = getattr(cache, _STATE, None)
    if state is None:
        state = _CacheState(query.device)
        setattr(cache, _STATE, state)
    if state.last_layer is None or layer_idx <= state.last_layer:  # a new forward step
        state.plans.clear()
        state.host.clear()
        STATS["steps"] += 1
        if query.is_cuda:
            # Continuous batching fills its input tensors (cu_seq_lens, read/write indices) on
            # the default stream and computes on its own: order our reads of them after those.
            current, default = torch.cuda.current_stream(query.device), torch.cuda.default_stream(query.device)
            if current != default:
                current.wait_stream(default)
    state.last_layer = layer_idx

    # The window is part of the configuration (plan time); the soft cap, scale and sinks are not.
    config = dict(num_qo_heads=num_qo_heads, num_kv_heads=num_kv_heads, head_dim=head_dim, dtype_q=dtype,
                  window_left=window_left)
    fingerprint = (cu_q.data_ptr(), cu_q.shape[0], cu_k.data_ptr(), cu_k.shape[0], tokens)
    # Paged plans also depend on where the page ids are read (read_index, or write_index when no
    # request has past KV), not on which group's index: every group of a kind shares the plan.
    reads = None if rolling else read_index.shape[0] > 0
    key_ = (layer_type, tuple(sorted(config.items())), fingerprint, reads)
    plan = state.plans.get(key_)

    k_new = key.transpose(1, 2).squeeze(0)  # [tokens, kv_heads, dim], a view
    v_new = value.transpose(1, 2).squeeze(0)
    if rolling:
        # transformers' rolling buffer is not in token order: let it gather (and write) the KV.
        k_all, v_all = cache.update(key_states=key, value_states=value, layer_idx=layer_idx,
                                    read_index=kwargs["read_index"], write_index=kwargs["write_index"])
        k_all, v_all = k_all.contiguous(), v_all.contiguous()
    else:
        k_cache, v_cache = cache.key_cache[layer_in_group], cache.value_cache[layer_in_group]
        k_cache.index_copy_(0, write_index, k_new)
        v_cache.index_copy_(0, write_index, v_new)
        block_size = cache.block_size
        k_all = k_cache.view(-1, block_size, num_kv_heads, head_dim)
        v_all = v_cache.view(-1, block_size, num_kv_heads, head_dim)

    if plan is None:
        q_host, k_host = _host_lengths(state, layer_type, cu_q, cu_k, fingerprint)
        stream = _stream() if query.is_cuda else None
        if rolling:
            plan = _plan_ragged(state, key_, q_host, k_host, config, stream, query.device)
        else:
            plan = _plan_paged(state, key_, q_host, k_host, reads, cache.block_size, k_all.shape[0], config, stream,
                               query.device)
        # A core object holds one plan: another key of this step planned on it is stale now.
        for other in [k for k, p in state.plans.items() if p.core is plan.core]:
            del state.plans[other]
        state.plans[key_] = plan
        STATS[plan.kind] += 1
    STATS["calls"] += 1
    LAYERS[layer_idx] = (window_left, "ragged" if rolling else "paged")

    q = query.transpose(1, 2).squeeze(0)  # [tokens, heads, dim]
    if not q.is_contiguous():
        q = q.contiguous()
    o = torch.empty((tokens, num_qo_heads, head_dim), dtype=query.dtype, device=query.device)
    n = plan.total_q
    if n < tokens:  # padding tokens (static shapes): their rows are ignored by transformers; keep them finite
        o[n:].zero_()
    if n > 0:
        if rolling:
            plan.core.run(q[:n], k_all, v_all, plan.qo_indptr, plan.kv_indptr, o[:n], sm_scale=sm_scale,
                          logits_soft_cap=softcap, stream=plan.stream, sinks=sinks)
        else:
            kv_indices = _page_ids(plan, group, read_index if plan.reads else write_index, cache.block_size)
            if plan.kind == "decode":
                plan.core.run(q[:n], k_all, v_all, plan.kv_indptr, kv_indices, plan.kv_last_page_len, o[:n],
                              sm_scale=sm_scale, logits_soft_cap=softcap, stream=plan.stream, sinks=sinks)
            else:
                plan.core.run(q[:n], k_all, v_all, plan.qo_indptr, plan.kv_indptr, o[:n], kv_indices=kv_indices,
                              kv_last_page_len=plan.kv_last_page_len, sm_scale=sm_scale, logits_soft_cap=softcap,
                              stream=plan.stream, sinks=sinks)
    return o.unsqueeze(0), None
