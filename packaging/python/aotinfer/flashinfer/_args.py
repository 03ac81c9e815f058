"""FlashInfer arguments -> aotinfer configurations, in plain Python (no torch, no driver).

Everything aotinfer does not serve is refused here, before a tensor or the GPU is touched:
NotImplementedError naming the argument, its value and what is served. Tensors are only looked
at for their .shape and .dtype attributes (CUDA-graph buffers), so stand-in objects do."""
import math
import operator

DTYPES = {"float16": "f16", "half": "f16", "bfloat16": "bf16", "float8_e4m3fn": "e4m3", "float8_e5m2": "e5m2"}
TORCH_NAMES = {"f16": "float16", "bf16": "bfloat16", "e4m3": "float8_e4m3fn", "e5m2": "float8_e5m2"}
LAYOUTS = {"NHD": "nhd", "HND": "hnd"}
BACKENDS = ("auto", "fa2", "fa3")  # accepted and ignored: aotinfer runs its own kernels for all three
POSITIONS = {"NONE": "none", "ROPE_LLAMA": "rope_llama", "ALIBI": "alibi"}
_ITEMS = "served with prefix_len_ptr, which turns multi-item scoring on"
_PREBUILT = "aotinfer serves the variants of its prebuilt kernel package"


def show(value):
    """A value for a message; tensors by type only (their repr would copy them to the host)."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return repr(value)
    return str(value) if type(value).__name__ == "dtype" else f"<{type(value).__name__}>"


def refuse(where, name, value, served):
    raise NotImplementedError(f"aotinfer.flashinfer {where}: {name}={show(value)} is not supported; {served}")


def defaults_only(where, checks):
    """checks: (name, value, default, what is served) each; any value but the default is refused."""
    for name, value, default, served in checks:
        if (value is not None) if default is None else (value != default):
            refuse(where, name, value, served)


def dtype(where, name, value, allowed):
    """aotinfer's name ("f16", ...) of a torch.dtype or of its name as FlashInfer accepts it ("float16")."""
    if isinstance(value, str):
        text = value
    elif type(value).__name__ == "dtype":  # torch.dtype, whose str() is "torch.float16"
        text = str(value)
    else:
        raise TypeError(f"aotinfer.flashinfer {where}: {name} must be a torch.dtype or its name, "
                        f"got {type(value).__name__}")
    short = DTYPES.get(text[6:] if text.startswith("torch.") else text)
    if short not in allowed:
        refuse(where, name, value, "served: " + ", ".join(f"torch.{TORCH_NAMES[a]}" for a in allowed))
    return short


def layout(where, kv_layout, layouts=("NHD", "HND")):
    """aotinfer's name of a FlashInfer kv_layout."""
    if kv_layout not in layouts:
        refuse(where, "kv_layout", kv_layout, "served: " + ", ".join(map(repr, layouts)))
    return LAYOUTS[kv_layout]


def constructor(where, kv_layout, backend, jit_args=None, jit_kwargs=None, variant_owns_mask=False,
                layouts=("NHD", "HND")):
    """The constructors' checks; returns aotinfer's layout name."""
    name = layout(where, kv_layout, layouts)
    if backend not in BACKENDS:
        refuse(where, "backend", backend, 'served: "auto", "fa2", "fa3" (each runs aotinfer\'s kernels)')
    defaults_only(where, [("jit_args", jit_args, None, _PREBUILT), ("jit_kwargs", jit_kwargs, None, _PREBUILT),
                          ("variant_owns_mask", variant_owns_mask, False, "masks are causal or none")])
    return name


def graph_batch(where, sized, unsized=()):
    """FlashInfer's checks of CUDA-graph buffers. sized: (name, buffer, extra) with
    len(buffer) == batch + extra (the first one gives the batch); unsized: (name, buffer).
    aotinfer reads int32 metadata. Returns the batch size."""
    batch = None
    for name, buffer, extra in list(sized) + [(n, b, None) for n, b in unsized]:
        if buffer is None:
            raise ValueError(f"aotinfer.flashinfer {where}: {name} must be a torch.Tensor in cudagraph mode")
        if not str(getattr(buffer, "dtype", "")).endswith("int32"):
            refuse(where, f"{name}.dtype", str(getattr(buffer, "dtype", None)), "CUDA-graph buffers are torch.int32")
        if extra is None:
            continue
        length = int(buffer.shape[0])
        if batch is None:
            batch = length - extra
        elif length != batch + extra:
            raise ValueError(f"aotinfer.flashinfer {where}: {name} must have {batch + extra} entries "
                             f"(batch size {batch} + {extra}), got {length}")
    return batch


def features(where, pos_encoding_mode, window_left, logits_soft_cap):
    """(pos_encoding, window_left, cap): the position encoding (RoPE a variant axis, ALiBi a variant
    axis of decode and a run-time bias of prefill), the sliding
    window (plan time: the core object's config; -1 for none) and the logits soft cap (a run
    value; 0.0 for none). Every variant serves windows and caps."""
    if pos_encoding_mode not in POSITIONS:
        refuse(where, "pos_encoding_mode", pos_encoding_mode, "served: " + ", ".join(map(repr, POSITIONS)))
    if isinstance(window_left, bool) or not isinstance(window_left, int) or not -1 <= window_left < 2**31:
        refuse(where, "window_left", window_left, "served: -1 (no window) or a window of >= 0 keys (int32)")
    cap = float(logits_soft_cap) if logits_soft_cap is not None and logits_soft_cap > 0 else 0.0
    return POSITIONS[pos_encoding_mode], window_left, cap


def kv_split(where, fixed_split_size, disable_split_kv, keys_per_unit):
    """FlashInfer's batch-invariant options as aotinfer.BatchDecode / BatchPrefill keywords:
    disable_split_kv keeps each request's keys in one work item; fixed_split_size > 0 cuts them
    every fixed_split_size units (pages for a paged cache, tokens for ragged K/V); otherwise the
    planner splits to fill the GPU."""
    if disable_split_kv:
        return dict(kv_split="none")
    if fixed_split_size is None or (isinstance(fixed_split_size, int) and fixed_split_size <= 0):
        return dict(kv_split="adaptive")
    if isinstance(fixed_split_size, bool) or not isinstance(fixed_split_size, int):
        refuse(where, "fixed_split_size", fixed_split_size, "served: None, or an int (pages; tokens for ragged K/V)")
    return dict(kv_split="fixed", kv_split_tokens=min(int(fixed_split_size) * keys_per_unit, 2**31 - 1))


def scalars(head_dim, sm_scale, rope_scale, rope_theta, cap):
    """The run arguments FlashInfer fixes at plan time: (sm_scale, cap, rope_scale, rope_theta).
    (The window is no run argument: it is the core object's, from the config.)"""
    return (1.0 / math.sqrt(head_dim) if sm_scale is None else float(sm_scale), cap,
            1.0 if rope_scale is None else float(rope_scale), 1e4 if rope_theta is None else float(rope_theta))


def decode_plan(num_qo_heads, num_kv_heads, head_dim, page_size, pos_encoding_mode="NONE", window_left=-1,
                logits_soft_cap=None, q_data_type="float16", kv_data_type=None, o_data_type=None, data_type=None,
                sm_scale=None, rope_scale=None, rope_theta=None, block_tables=None, seq_lens=None,
                fixed_split_size=None, disable_split_kv=False, q_len_per_req=1, window_right=0, is_causal=None):
    """BatchDecodeWithPagedKVCacheWrapper.plan's arguments -> (aotinfer.BatchDecode keyword
    arguments (window_left among them: one core object per window), features (the settings
    forward() may not change: (pos_encoding,)), run scalars)."""
    where = "BatchDecodeWithPagedKVCacheWrapper.plan"
    defaults_only(where, [
        ("block_tables", block_tables, None, "pages come from indptr/indices/last_page_len"),
        ("seq_lens", seq_lens, None, "KV lengths come from indptr and last_page_len"),
        ("q_len_per_req", q_len_per_req, 1,
         "decode serves one query token per request "
         "(BatchPrefillWithPagedKVCacheWrapper with causal=True serves more)"),
        ("window_right", window_right, 0, "decode has no keys right of the query"),
    ])
    if is_causal:
        refuse(where, "is_causal", is_causal, "one query token per request needs no mask")
    if data_type is not None:  # FlashInfer 0.7 fills only the types left as None
        q_data_type = data_type if q_data_type is None else q_data_type
        kv_data_type = data_type if kv_data_type is None else kv_data_type
    q = dtype(where, "q_data_type", q_data_type, ("f16", "bf16"))
    kv = q if kv_data_type is None else dtype(where, "kv_data_type", kv_data_type, ("f16", "bf16", "e4m3", "e5m2"))
    o = q if o_data_type is None else dtype(where, "o_data_type", o_data_type, ("f16", "bf16"))
    pos, window, cap = features(where, pos_encoding_mode, window_left, logits_soft_cap)
    config = dict(num_qo_heads=int(num_qo_heads), num_kv_heads=int(num_kv_heads), head_dim=int(head_dim),
                  page_size=int(page_size), dtype_q=q, dtype_kv=kv, dtype_o=o, pos_encoding=pos, window_left=window,
                  **kv_split(where, fixed_split_size, disable_split_kv, int(page_size)))
    return config, (pos,), scalars(head_dim, sm_scale, rope_scale, rope_theta, cap)


def prefill_plan(where, num_qo_heads, num_kv_heads, head_dim_qk, head_dim_vo=None, custom_mask=None,
                 packed_custom_mask=None, causal=False, pos_encoding_mode="NONE", use_fp16_qk_reduction=False,
                 sm_scale=None, window_left=-1, logits_soft_cap=None, rope_scale=None, rope_theta=None,
                 q_data_type="float16", kv_data_type=None, o_data_type=None, items=None, seq_lens=None,
                 seq_lens_q=None, block_tables=None, fixed_split_size=None, disable_split_kv=False, v_indptr=None,
                 o_indptr=None, keys_per_split_unit=1):
    """The prefill wrappers' plan arguments -> (aotinfer.BatchPrefill keyword arguments (with
    window_left), features (those forward() may not change: (pos_encoding, mask)), run scalars).
    A custom mask makes the mask "custom", and so does multi-item scoring (items: what
    multi_items below returns); the wrapper packs it (_masks.custom_masks).
    The wrappers take FlashInfer's hints (max_token_per_sequence,
    max_sequence_kv, uniform_q_len) and ignore them, as FlashInfer's fa2/fa3 backends do.
    keys_per_split_unit: fixed_split_size's unit in keys (the page size for a paged cache).
    head_dim_vo (None: head_dim_qk) goes to the config as it is: the package holds the pairs it
    was built for (MLA prefill's 192 / 128 in the default one), and plan() raises aotinfer.NotFound
    for any other."""
    defaults_only(where, [
        ("use_fp16_qk_reduction", use_fp16_qk_reduction, False, "scores accumulate in fp32"),
        ("seq_lens", seq_lens, None, "KV lengths come from the indptr arrays"),
        ("seq_lens_q", seq_lens_q, None, "query lengths come from qo_indptr"),
        ("block_tables", block_tables, None, "pages come from the CSR arrays"),
        ("v_indptr", v_indptr, None, "V shares kv_indptr"),
        ("o_indptr", o_indptr, None, "the output shares qo_indptr"),
    ])
    q = dtype(where, "q_data_type", q_data_type, ("f16", "bf16"))
    kv = q if kv_data_type is None else dtype(where, "kv_data_type", kv_data_type, ("f16", "bf16", "e4m3", "e5m2"))
    o = q if o_data_type is None else dtype(where, "o_data_type", o_data_type, ("f16", "bf16"))
    pos, window, cap = features(where, pos_encoding_mode, window_left, logits_soft_cap)
    try:
        vo = int(head_dim_qk) if head_dim_vo is None else operator.index(head_dim_vo)
    except TypeError:
        vo = 0
    if isinstance(head_dim_vo, bool) or vo < 1:
        refuse(where, "head_dim_vo", head_dim_vo, "served: None (head_dim_qk) or a width >= 1")
    # The runtime's rule for unequal widths (aotinfer.BatchPrefill's config check), said here
    # before the GPU is touched.
    if vo != int(head_dim_qk) and (pos == "rope_llama" or kv in ("e4m3", "e5m2")):
        refuse(where, "head_dim_vo", head_dim_vo, f"head_dim_vo != head_dim_qk ({head_dim_qk}; MLA prefill, 192/128) is "
               "served with 16-bit K/V (kv_data_type float16 or bfloat16) and pos_encoding_mode 'NONE' or 'ALIBI'")
    # As FlashInfer: a custom mask, packed or not, replaces causal, and multi-item scoring
    # (prefix_len_ptr), which the wrappers make into a custom mask, replaces both.
    custom = items is not None or custom_mask is not None or packed_custom_mask is not None
    mask = "custom" if custom else "causal" if causal else "none"
    config = dict(num_qo_heads=int(num_qo_heads), num_kv_heads=int(num_kv_heads), head_dim=int(head_dim_qk),
                  head_dim_vo=vo, dtype_q=q, dtype_kv=kv, dtype_o=o, mask=mask, pos_encoding=pos, window_left=window,
                  **kv_split(where, fixed_split_size, disable_split_kv, keys_per_split_unit))
    return config, (pos, mask), scalars(head_dim_qk, sm_scale, rope_scale, rope_theta, cap)


def multi_items(where, prefix_len_ptr, token_pos_in_items_ptr, token_pos_in_items_len, max_item_len_ptr):
    """FlashInfer's multi-item scoring arguments -> None, or (prefix_len_ptr,
    token_pos_in_items_ptr, token_pos_in_items_len) for the wrapper's mask (_masks.multi_item_bits).
    As in FlashInfer, prefix_len_ptr turns it on; max_item_len_ptr, FlashInfer's bound for
    skipping key tiles, is not needed: the kernels skip the tiles no query token sees from the
    mask's bits."""
    if prefix_len_ptr is None:
        defaults_only(where, [
            ("token_pos_in_items_ptr", token_pos_in_items_ptr, None, _ITEMS),
            ("token_pos_in_items_len", token_pos_in_items_len, 0, _ITEMS),
            ("max_item_len_ptr", max_item_len_ptr, None, _ITEMS),
        ])
        return None
    if token_pos_in_items_ptr is None:
        raise ValueError(f"aotinfer.flashinfer {where}: multi-item scoring (prefix_len_ptr) needs "
                         "token_pos_in_items_ptr, each query token's position in its item")
    if isinstance(token_pos_in_items_len, bool) or not isinstance(token_pos_in_items_len, int) or \
            token_pos_in_items_len < 0:
        raise ValueError(f"aotinfer.flashinfer {where}: token_pos_in_items_len must be an int >= 0 (the entries of "
                         f"token_pos_in_items_ptr per request), got {show(token_pos_in_items_len)}")
    return prefix_len_ptr, token_pos_in_items_ptr, token_pos_in_items_len


def unserved(where, args, **named):
    """run()'s slow path, taken only when one of these is set: refuses *args or the first
    named argument that is not None (kv_cache_sf, ...)."""
    if args:
        refuse(where, "*args", args, "custom-kernel arguments are not served")
    for name, value in named.items():
        if value is not None:
            refuse(where, name, value, "not served")


def lse_options(where, lse_base, lse_layout):
    if lse_base not in ("log2", "ln"):
        raise ValueError(f'aotinfer.flashinfer {where}: lse_base must be "log2" or "ln", got {lse_base!r}')
    if lse_layout not in ("NH", "HN"):
        raise ValueError(f'aotinfer.flashinfer {where}: lse_layout must be "NH" or "HN", got {lse_layout!r}')


def window_changed(where, window_left, planned):
    raise ValueError(f"aotinfer.flashinfer {where}: window_left={window_left} differs from plan()'s {planned}; "
                     "plan again with it (the window is fixed at plan time: the plan gives each request only the "
                     "keys its window keeps)")
