"""aotinfer attention for Hugging Face transformers' continuous batching (generate_batch,
init_continuous_batching, continuous_batching_context_manager; written against transformers
5.17).

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
  - Per forward step, the first attention layer plans (host metadata from cu_seq_lens_q/k: one
    small device-to-host read; page ids gathered on the GPU; one host-to-device copy) and every
    later layer of the step reuses the plan: a step change is noticed when the layer index does
    not increase (or the step's input tensors change), which costs no GPU work.
  - Decode-only steps (one query token per request) run aotinfer.BatchDecode; prefill, chunked
    prefill and mixed steps run aotinfer.BatchPrefill (paged, causal: query token t of a request
    with q_len queries and kv_len keys sits at kv_len - q_len + t, as in transformers).
  - Sliding-window layers (transformers keeps a rolling buffer per request, whose slots are not
    in token order and cannot be read as pages) use transformers' own gather (cache.update) and
    aotinfer.BatchPrefill over ragged KV with window_left = sliding_window - 1; this needs a
    batch_prefill_ragged variant with sliding_window (not in the default package: aotinfer
    raises NotFound naming the spec entry that adds it).

Honoured: scaling (sm_scale), logits soft cap ("softcap" kwarg, soft_cap variants), sliding
windows, GQA, attention sinks (gpt-oss: the "s_aux" kwarg, else module.sinks, one logit per
query head, passed as float32 sinks to every BatchDecode / BatchPrefill run of the layer).
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
# Plans made, by kind ("decode", "prefill", "ragged"), and attention calls served: a cheap way to
# see which kernels a run used.
STATS = {"decode": 0, "prefill": 0, "ragged": 0, "calls": 0}


def register(name=NAME, package=None):
    """Registers the attention implementation "paged|<name>" with transformers'
    AttentionInterface and returns that string (pass it as attn_implementation). package: an
    aotinfer.Package (default: aotinfer.Package(), the wheel's package). Idempotent."""
    global _package
    from transformers import AttentionInterface

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
    """One planned step of one kind of layer: what run() needs for every layer of the step."""
    __slots__ = ("key", "kind", "core", "stream", "batch", "total_q", "qo_indptr", "kv_indptr", "kv_indices",
                 "kv_last_page_len")


class _CacheState:
    """aotinfer's state for one transformers PagedAttentionCache: core objects per
    configuration, workspaces (grown on demand) and the plans of the current step. Plans that are
    live in the same step (full and sliding layers of a hybrid model) need their own workspaces;
    one slot's plans of successive steps share theirs (stream order keeps them apart)."""

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


def _plan_paged(state, key, q_host, k_host, slots, slots_are_reads, block_size, num_pages, config, stream):
    """Plans one step over the paged pools: decode when every request has one query token,
    prefill otherwise. slots: transformers' read_index (every request's KV slots, request i from
    cu_seq_lens_k[i]) or, when no request reads past KV, write_index (from cu_seq_lens_q[i])."""
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
    if positions and positions[-1] >= slots.shape[0]:
        raise ValueError(f"paged|{NAME}: the KV slot index has {slots.shape[0]} entries, the batch needs "
                         f"{positions[-1] + 1}")

    plan = _Plan()
    plan.key, plan.batch, plan.total_q = key, batch, q_host[batch]
    decode = batch > 0 and all(n == 1 for n in qo_lens)
    plan.kind = "decode" if decode else "prefill"
    # One host-to-device copy of all int32 metadata, then the page ids gathered on the GPU.
    plan.qo_indptr, plan.kv_indptr, plan.kv_last_page_len, gather = _to_device(
        (q_host, pages_indptr, last, positions), slots.device)
    plan.kv_indices = torch.div(slots.index_select(0, gather), block_size, rounding_mode="floor").to(torch.int32)

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
    softcap = kwargs.get("softcap")
    softcap = float(softcap) if softcap else 0.0
    sm_scale = float(scaling) if scaling is not None else float(getattr(module, "scaling", 1.0 / math.sqrt(head_dim)))
    sinks = kwargs.get("s_aux")
    if sinks is None:
        sinks = getattr(module, "sinks", None)
    if sinks is not None:  # a bf16 nn.Parameter in gpt-oss: the kernels read float32 logits, without autograd
        sinks = sinks.detach().to(torch.float32).contiguous()

    layer_idx = module.layer_idx
    group, layer_in_group = cache.layer_index_to_group_indices[layer_idx]
    window = cache.sliding_windows.get(layer_idx, 1)
    sliding = window != 1
    layer_type = "sliding_attention" if sliding else "full_attention"
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
        if query.is_cuda:
            # Continuous batching fills its input tensors (cu_seq_lens, read/write indices) on
            # the default stream and computes on its own: order our reads of them after those.
            current, default = torch.cuda.current_stream(query.device), torch.cuda.default_stream(query.device)
            if current != default:
                current.wait_stream(default)
    state.last_layer = layer_idx

    config = dict(num_qo_heads=num_qo_heads, num_kv_heads=num_kv_heads, head_dim=head_dim, dtype_q=dtype,
                  soft_cap=softcap > 0, sliding_window=sliding)
    fingerprint = (cu_q.data_ptr(), cu_q.shape[0], cu_k.data_ptr(), tokens, read_index.data_ptr(),
                   read_index.shape[0], write_index.data_ptr(), write_index.shape[0])
    key_ = (layer_type, tuple(sorted(config.items())), fingerprint)
    plan = state.plans.get(key_)

    k_new = key.transpose(1, 2).squeeze(0)  # [tokens, kv_heads, dim], a view
    v_new = value.transpose(1, 2).squeeze(0)
    if sliding:
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
        if sliding:
            plan = _plan_ragged(state, key_, q_host, k_host, config, stream, query.device)
        else:
            reads = read_index.shape[0] > 0
            plan = _plan_paged(state, key_, q_host, k_host, read_index if reads else write_index, reads,
                               cache.block_size, k_all.shape[0], config, stream)
        state.plans[key_] = plan
        STATS[plan.kind] += 1
    STATS["calls"] += 1

    q = query.transpose(1, 2).squeeze(0)  # [tokens, heads, dim]
    if not q.is_contiguous():
        q = q.contiguous()
    o = torch.empty((tokens, num_qo_heads, head_dim), dtype=query.dtype, device=query.device)
    n = plan.total_q
    if n < tokens:  # padding tokens (static shapes): their rows are ignored by transformers; keep them finite
        o[n:].zero_()
    if n > 0:
        window_left = window - 1 if sliding else -1
        if plan.kind == "decode":
            plan.core.run(q[:n], k_all, v_all, plan.kv_indptr, plan.kv_indices, plan.kv_last_page_len, o[:n],
                          sm_scale=sm_scale, logits_soft_cap=softcap, window_left=window_left, stream=plan.stream,
                          sinks=sinks)
        else:
            plan.core.run(q[:n], k_all, v_all, plan.qo_indptr, plan.kv_indptr, o[:n], kv_indices=plan.kv_indices,
                          kv_last_page_len=plan.kv_last_page_len, sm_scale=sm_scale, logits_soft_cap=softcap,
                          window_left=window_left, stream=plan.stream, sinks=sinks)
    return o.unsqueeze(0), None
