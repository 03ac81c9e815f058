"""FlashInfer's BatchPrefillWithPagedKVCacheWrapper and BatchPrefillWithRaggedKVCacheWrapper over
aotinfer.BatchPrefill (kv_storage "paged" / "ragged"). A paged plan whose requests all verify the
same few tokens (speculative decoding) runs on aotinfer.BatchDecode instead, which reads each KV
byte once for all of a request's tokens (_decode_form)."""
import functools

from .. import BatchDecode, BatchPrefill, InvalidArgument, NotFound
from . import _args, _base, _masks

# The decode kernel's query rows per CTA: a paged plan runs on it when a request's tokens times
# the GQA group fill at most one CTA's rows, so that each KV byte is read once (more rows take
# several CTAs, each reading the keys again: the prefill kernels' larger tiles do better there).
DECODE_ROWS = 16

_PAGED, _RAGGED = "BatchPrefillWithPagedKVCacheWrapper", "BatchPrefillWithRaggedKVCacheWrapper"


class _Prefill(_base.Wrapper):
    """The plan and run steps both prefill wrappers share."""

    def _prefill_setup(self, float_workspace_buffer, kv_layout, use_cuda_graph, package, backend, sized, unsized):
        self._fixed_batch_size = _args.graph_batch(self._name, sized, unsized) if use_cuda_graph else 0
        self._setup(float_workspace_buffer, kv_layout, use_cuda_graph, package)
        self._backend = backend
        self._max_total_num_rows = None  # CUDA-graph mode: the first plan's, as FlashInfer
        for name, buffer, *_ in list(sized) + list(unsized):
            setattr(self, "_" + name, buffer)

    def _plan_on_device(self, config, features, scalars, qo_indptr, kv_indptr, metadata, non_blocking, masks,
                        **paged):
        """metadata: (buffer name, array) pairs run() reads from the device; masks: plan()'s
        (custom_mask, packed_custom_mask, multi-item scoring: _args.multi_items); paged:
        kv_last_page_len for the planner (host)."""
        where = self._name + ".plan"
        self._core = None  # a failed plan leaves nothing runnable
        qo_host, kv_host = _base.host_int32(qo_indptr), _base.host_int32(kv_indptr)
        batch, total_q = int(qo_host.shape[0]) - 1, int(qo_host[-1]) if qo_host.shape[0] else 0
        if self._use_cuda_graph:
            if batch != self._fixed_batch_size:
                raise ValueError(f"aotinfer.flashinfer {where}: the batch size is fixed in cudagraph mode: "
                                 f"{self._fixed_batch_size} from the buffers, {batch} now")
            if self._max_total_num_rows is None:
                self._max_total_num_rows = total_q
            elif total_q > self._max_total_num_rows:
                raise ValueError(f"aotinfer.flashinfer {where}: {total_q} query tokens exceed the "
                                 f"{self._max_total_num_rows} of the first plan in cudagraph mode")
            for name, x in metadata:
                _base.copy_into(where, name, getattr(self, "_" + name), x, non_blocking)
            config.update(cuda_graph=True, max_batch=batch, max_total_q=max(self._max_total_num_rows, 1))
            if config["kv_split"] == "fixed":  # the grids hold what the float workspace holds
                config["max_kv_len"] = _base.graph_max_kv_len(
                    self._float_workspace_buffer, config["max_total_q"] * config["num_qo_heads"],
                    config["kv_split_tokens"], config["head_dim_vo"] * 4 + 4, where)  # a state: o row and lse
        else:
            copies = _base.device_int32s([x for _, x in metadata], self.device, non_blocking)
            for (name, _), copy in zip(metadata, copies):
                setattr(self, "_" + name, copy)
        paged = {k: _base.host_int32(x) for k, x in paged.items()}
        self._decoding = False
        decode = self._decode_form(config, qo_host, kv_host, paged)
        if decode is not None:
            try:
                core = self._core_for(BatchDecode, decode)
                self._decoding = True
            except (NotFound, InvalidArgument):  # no decode variant for these types, or a GQA group over
                pass                             # decode's 64: the prefill serves it
        if self._decoding:
            _, int_bytes = core.workspace_sizes(max(batch, 1))
            core.plan(kv_host, paged["kv_last_page_len"], self._float_workspace_buffer, self._int_workspace(int_bytes))
        else:
            core = self._core_for(BatchPrefill, config)
            keys_per_entry = config.get("page_size", 1) if config["kv_storage"] == "paged" else 1
            _, int_bytes = core.workspace_sizes(max(total_q, 1), max(batch, 1),
                                                _base.longest_request(config, kv_host, keys_per_entry))
            core.plan(qo_host, kv_host, self._float_workspace_buffer, self._int_workspace(int_bytes), **paged)
        self._mask_bits = self._mask_offsets = None
        if config["mask"] == "custom":
            self._mask_bits, self._mask_offsets = self._custom_masks(where, masks, qo_host, kv_host, config, paged)
        self._qo_indptr_last = total_q
        self._batch_size = batch
        self._keep(core, config, features, scalars)

    def _decode_form(self, config, qo_host, kv_host, paged):
        """BatchDecode's config for a paged plan that is speculative verification, else None:
        every request has the same few query tokens, whose rows (tokens times the GQA group) fit
        one decode CTA, causal (with at least as many keys), unmasked or under a custom mask (a
        speculative tree: the decode kernel reads its bits with the keys), with no window,
        adaptive KV splits (a batch-invariant plan must not change kernels with the batch's
        shape) and no CUDA graph (whose captured kernel must serve every later plan); V as wide as
        K (decode has one width)."""
        if (config.get("kv_storage") != "paged" or self._use_cuda_graph or config["window_left"] >= 0
                or config["kv_split"] != "adaptive" or qo_host.shape[0] < 2
                or config["head_dim_vo"] != config["head_dim"]):
            return None
        q_len = int(qo_host[1] - qo_host[0])
        group = config["num_qo_heads"] // config["num_kv_heads"]
        if not 1 <= q_len * group <= DECODE_ROWS or bool(((qo_host[1:] - qo_host[:-1]) != q_len).any()):
            return None
        causal = config["mask"] == "causal"
        if causal:
            keys = _base.paged_kv_lengths(kv_host.tolist(), paged["kv_last_page_len"].tolist(), config["page_size"])
            if min(keys) < q_len:
                return None
        decode = {k: config[k] for k in ("num_qo_heads", "num_kv_heads", "head_dim", "page_size", "dtype_q",
                                         "dtype_kv", "dtype_o", "pos_encoding", "layout", "kv_split")}
        decode.update(q_len=q_len, causal=causal, custom_mask=config["mask"] == "custom")
        return decode

    def _multi_items(self, where, *arguments):
        """_args.multi_items, refused in cudagraph mode (the mask is formed at plan time, into no
        buffer the graph holds) before anything is touched."""
        items = _args.multi_items(where, *arguments)
        if items is not None and self._use_cuda_graph:
            _args.refuse(where, "prefix_len_ptr", items[0], "multi-item scoring is served without use_cuda_graph")
        return items

    def _custom_masks(self, where, masks, qo_host, kv_host, config, paged):
        """The packed masks and their byte offsets on the device (in CUDA-graph mode, in the
        constructor's custom_mask_buf and mask_indptr_buf, as FlashInfer)."""
        qo, kv = qo_host.tolist(), kv_host.tolist()
        qo_lens = [b - a for a, b in zip(qo, qo[1:])]
        if config["kv_storage"] == "paged":
            kv_lens = _base.paged_kv_lengths(kv, paged["kv_last_page_len"].tolist(), config["page_size"])
        else:
            kv_lens = [b - a for a, b in zip(kv, kv[1:])]
        into = None
        if self._use_cuda_graph:
            if self._custom_mask_buf is None or self._mask_indptr_buf is None:
                raise ValueError(f"aotinfer.flashinfer {where}: a custom mask in cudagraph mode needs custom_mask_buf "
                                 "and mask_indptr_buf in the constructor (their addresses are captured)")
            into = (self._custom_mask_buf, self._mask_indptr_buf)
        return _masks.custom_masks(where, *masks, qo_lens, kv_lens, self.device, into)

    def _attend(self, where, q, k, v, sm_scale, v_scale, out, lse, return_lse, lse_base, lse_layout, sinks):
        if q.shape[0] != self._qo_indptr_last:
            raise ValueError(f"aotinfer.flashinfer {where}: q has {q.shape[0]} tokens, qo_indptr[-1] is "
                             f"{self._qo_indptr_last}")
        if not q.is_contiguous():
            q = _base.token_strided(q)
        if out is not None and lse is None and not return_lse and out.is_contiguous():
            o, lse_rows, lse_dest = out, None, None  # the common case, without _outputs' call; the core checks out
        else:
            o, lse_rows, lse_dest = self._outputs(where, q, out, lse, return_lse, lse_layout)
        self._launch(q, k, v, o, lse_rows, sm_scale, sinks)
        if v_scale is not None and not (isinstance(v_scale, float) and v_scale == 1.0):
            o.mul_(v_scale)  # as FlashInfer: after the kernel, the LSE unchanged
        if o is out and lse_rows is None:
            return o
        return self._deliver(o, out, lse_rows, return_lse, lse_base, lse_layout, lse_dest)

    def _forward(self, where, causal, pos_encoding_mode, use_fp16_qk_reduction, window_left, logits_soft_cap,
                 sm_scale, rope_scale, rope_theta):
        _args.defaults_only(where, [("use_fp16_qk_reduction", use_fp16_qk_reduction, False,
                                     "scores accumulate in fp32")])
        pos, window, cap = _args.features(where, pos_encoding_mode, window_left, logits_soft_cap)
        # As FlashInfer's forward(): its causal (a custom mask stays, over it) and window replace plan()'s.
        planned = self._features[1] if self._features else None
        mask = "custom" if planned == "custom" else "causal" if causal else "none"
        self._replan(pos, **({"causal": causal} if mask != planned else {}),
                     **({"window_left": window} if window != self._window_left else {}))
        self._override(where, (pos, mask), sm_scale, rope_scale, rope_theta, cap, window)


class BatchPrefillWithPagedKVCacheWrapper(_Prefill):
    """Prefill / append / chunked prefill over a paged KV cache: query tokens ragged by qo_indptr,
    each request's KV in pages. A causal mask aligns the queries with the end of the request's KV.
    package= (keyword only, aotinfer's addition) picks the kernel package."""
    _name = _PAGED

    def __init__(self, float_workspace_buffer, kv_layout="NHD", use_cuda_graph=False, qo_indptr_buf=None,
                 paged_kv_indptr_buf=None, paged_kv_indices_buf=None, paged_kv_last_page_len_buf=None,
                 custom_mask_buf=None, mask_indptr_buf=None, backend="auto", jit_args=None, jit_kwargs=None,
                 variant_owns_mask=False, *, package=None):
        self._layout = _args.constructor(_PAGED, kv_layout, backend, jit_args, jit_kwargs, variant_owns_mask)
        self._custom_mask_buf, self._mask_indptr_buf = custom_mask_buf, mask_indptr_buf  # CUDA-graph mode's mask buffers
        self._prefill_setup(float_workspace_buffer, kv_layout, use_cuda_graph, package, backend,
                            [("qo_indptr_buf", qo_indptr_buf, 1), ("paged_kv_indptr_buf", paged_kv_indptr_buf, 1),
                             ("paged_kv_last_page_len_buf", paged_kv_last_page_len_buf, 0)],
                            [("paged_kv_indices_buf", paged_kv_indices_buf)])

    def plan(self, qo_indptr, paged_kv_indptr, paged_kv_indices, paged_kv_last_page_len, num_qo_heads, num_kv_heads,
             head_dim_qk, page_size, head_dim_vo=None, custom_mask=None, packed_custom_mask=None, causal=False,
             pos_encoding_mode="NONE", use_fp16_qk_reduction=False, sm_scale=None, window_left=-1,
             logits_soft_cap=None, rope_scale=None, rope_theta=None, q_data_type="float16", kv_data_type=None,
             o_data_type=None, non_blocking=True, prefix_len_ptr=None, token_pos_in_items_ptr=None,
             token_pos_in_items_len=0, max_item_len_ptr=None, seq_lens=None, seq_lens_q=None, block_tables=None,
             max_token_per_sequence=None, max_sequence_kv=None, fixed_split_size=None, disable_split_kv=False,
             uniform_q_len=None):
        """qo_indptr [batch + 1] in tokens; paged_kv_indptr [batch + 1] in pages, paged_kv_indices,
        paged_kv_last_page_len [batch] (int32, on any device). window_left is fixed here (one core
        object per distinct window), logits_soft_cap kept for run()."""
        self._plan_call = _base.arguments(locals())
        items = self._multi_items(_PAGED + ".plan", prefix_len_ptr, token_pos_in_items_ptr, token_pos_in_items_len,
                                  max_item_len_ptr)
        config, features, scalars = _args.prefill_plan(
            _PAGED + ".plan", num_qo_heads, num_kv_heads, head_dim_qk, head_dim_vo, custom_mask, packed_custom_mask,
            causal, pos_encoding_mode, use_fp16_qk_reduction, sm_scale, window_left, logits_soft_cap, rope_scale,
            rope_theta, q_data_type, kv_data_type, o_data_type, items, seq_lens, seq_lens_q, block_tables,
            fixed_split_size, disable_split_kv, keys_per_split_unit=int(page_size))
        config.update(kv_storage="paged", page_size=int(page_size), layout=self._layout)
        _base.need_torch()
        self._plan_on_device(config, features, scalars, qo_indptr, paged_kv_indptr,
                             [("qo_indptr_buf", qo_indptr), ("paged_kv_indptr_buf", paged_kv_indptr),
                              ("paged_kv_indices_buf", paged_kv_indices),
                              ("paged_kv_last_page_len_buf", paged_kv_last_page_len)],
                             non_blocking, (custom_mask, packed_custom_mask, items),
                             kv_last_page_len=paged_kv_last_page_len)

    begin_forward = plan

    def run(self, q, paged_kv_cache, *args, q_scale=None, k_scale=None, v_scale=None, out=None, lse=None,
            return_lse=False, lse_base="log2", lse_layout="NH", enable_pdl=None, window_left=None, sinks=None,
            kv_cache_sf=None, skip_softmax_threshold_scale_factor=None, use_fp16_softmax=None, uses_spcompress=None):
        """q [qo_indptr[-1], num_qo_heads, head_dim_qk]; paged_kv_cache a (k, v) tuple (v's rows
        head_dim_vo wide) or one [pages, 2, ...] tensor (equal widths); sinks per-head attention
        sink logits, float32 [num_qo_heads] (the core checks them). Returns out
        [qo_indptr[-1], num_qo_heads, head_dim_vo], or (out, lse) with return_lse."""
        where = _PAGED + ".run"
        if args or kv_cache_sf is not None or skip_softmax_threshold_scale_factor is not None:
            _args.unserved(where, args, kv_cache_sf=kv_cache_sf,
                           skip_softmax_threshold_scale_factor=skip_softmax_threshold_scale_factor)
        if lse_base != "log2" or lse_layout != "NH":
            _args.lse_options(where, lse_base, lse_layout)
        if self._core is None or window_left is not None:
            self._planned(where, window_left)
        k, v = _base.split_cache(paged_kv_cache, self._kv_layout)
        sm_scale = self._sm_scale if q_scale is None and k_scale is None else self._sm(q_scale, k_scale)
        return self._attend(where, q, k, v, sm_scale, v_scale, out, lse, return_lse, lse_base, lse_layout, sinks)

    def _sm(self, q_scale, k_scale):
        sm = self._sm_scale
        if q_scale is not None:
            sm *= float(q_scale)
        if k_scale is not None:
            sm *= float(k_scale)
        return sm

    def _launch(self, q, k, v, o, lse, sm_scale, sinks):
        """The call into the core (its custom op inside torch.compile)."""
        s = self._scalars
        if self._decoding:
            run = _base.traced("batch_decode_run") if _base.torch.compiler.is_compiling() else BatchDecode.run
            run(self._core, q, k, v, self._paged_kv_indptr_buf, self._paged_kv_indices_buf,
                self._paged_kv_last_page_len_buf, o, lse, None, sm_scale, s[1], s[2], s[3], 1.0, 1.0, sinks=sinks,
                custom_mask=self._mask_bits, mask_indptr=self._mask_offsets)
            return
        run = _base.traced("batch_prefill_run") if _base.torch.compiler.is_compiling() else BatchPrefill.run
        run(self._core, q, k, v, self._qo_indptr_buf, self._paged_kv_indptr_buf, o, self._paged_kv_indices_buf,
            self._paged_kv_last_page_len_buf, lse, sm_scale, s[1], s[2], s[3], sinks=sinks, custom_mask=self._mask_bits,
            mask_indptr=self._mask_offsets)

    run_return_lse = functools.partialmethod(run, return_lse=True)

    def forward(self, q, paged_kv_cache, causal=False, pos_encoding_mode="NONE", use_fp16_qk_reduction=False,
                k_scale=None, v_scale=None, window_left=-1, logits_soft_cap=None, sm_scale=None, rope_scale=None,
                rope_theta=None):
        """Deprecated in FlashInfer: run() with per-call settings (another mask or window plans again)."""
        self._forward(_PAGED + ".forward", causal, pos_encoding_mode, use_fp16_qk_reduction, window_left,
                      logits_soft_cap, sm_scale, rope_scale, rope_theta)
        return self.run(q, paged_kv_cache, k_scale=k_scale, v_scale=v_scale)

    def forward_return_lse(self, q, paged_kv_cache, causal=False, pos_encoding_mode="NONE",
                           use_fp16_qk_reduction=False, k_scale=None, v_scale=None, window_left=-1,
                           logits_soft_cap=None, sm_scale=None, rope_scale=None, rope_theta=None):
        self._forward(_PAGED + ".forward_return_lse", causal, pos_encoding_mode, use_fp16_qk_reduction, window_left,
                      logits_soft_cap, sm_scale, rope_scale, rope_theta)
        return self.run(q, paged_kv_cache, k_scale=k_scale, v_scale=v_scale, return_lse=True)


class BatchPrefillWithRaggedKVCacheWrapper(_Prefill):
    """Prefill over ragged K/V tensors [kv_indptr[-1], num_kv_heads, head_dim_qk / head_dim_vo] (NHD only):
    query tokens ragged by qo_indptr, keys by kv_indptr. package= picks the kernel package."""
    _name = _RAGGED

    def __init__(self, float_workspace_buffer, kv_layout="NHD", use_cuda_graph=False, qo_indptr_buf=None,
                 kv_indptr_buf=None, custom_mask_buf=None, mask_indptr_buf=None, backend="auto", jit_args=None,
                 jit_kwargs=None, variant_owns_mask=False, *, package=None):
        self._layout = _args.constructor(_RAGGED, kv_layout, backend, jit_args, jit_kwargs, variant_owns_mask,
                                         layouts=("NHD",))
        self._custom_mask_buf, self._mask_indptr_buf = custom_mask_buf, mask_indptr_buf  # CUDA-graph mode's mask buffers
        self._prefill_setup(float_workspace_buffer, kv_layout, use_cuda_graph, package, backend,
                            [("qo_indptr_buf", qo_indptr_buf, 1), ("kv_indptr_buf", kv_indptr_buf, 1)], [])

    def plan(self, qo_indptr, kv_indptr, num_qo_heads, num_kv_heads, head_dim_qk, head_dim_vo=None, custom_mask=None,
             packed_custom_mask=None, causal=False, pos_encoding_mode="NONE", use_fp16_qk_reduction=False,
             window_left=-1, logits_soft_cap=None, sm_scale=None, rope_scale=None, rope_theta=None,
             q_data_type="float16", kv_data_type=None, o_data_type=None, non_blocking=True, prefix_len_ptr=None,
             token_pos_in_items_ptr=None, token_pos_in_items_len=0, max_item_len_ptr=None, fixed_split_size=None,
             disable_split_kv=False, seq_lens=None, seq_lens_q=None, max_token_per_sequence=None,
             max_sequence_kv=None, v_indptr=None, o_indptr=None, uniform_q_len=None):
        """qo_indptr and kv_indptr [batch + 1], in tokens (int32, on any device). window_left and
        logits_soft_cap as the paged wrapper's."""
        self._plan_call = _base.arguments(locals())
        items = self._multi_items(_RAGGED + ".plan", prefix_len_ptr, token_pos_in_items_ptr, token_pos_in_items_len,
                                  max_item_len_ptr)
        config, features, scalars = _args.prefill_plan(
            _RAGGED + ".plan", num_qo_heads, num_kv_heads, head_dim_qk, head_dim_vo, custom_mask, packed_custom_mask,
            causal, pos_encoding_mode, use_fp16_qk_reduction, sm_scale, window_left, logits_soft_cap, rope_scale,
            rope_theta, q_data_type, kv_data_type, o_data_type, items, seq_lens, seq_lens_q, None, fixed_split_size,
            disable_split_kv, v_indptr, o_indptr)
        config.update(kv_storage="ragged", layout="nhd")
        _base.need_torch()
        self._plan_on_device(config, features, scalars, qo_indptr, kv_indptr,
                             [("qo_indptr_buf", qo_indptr), ("kv_indptr_buf", kv_indptr)], non_blocking,
                             (custom_mask, packed_custom_mask, items))

    begin_forward = plan

    def run(self, q, k, v, *args, q_scale=None, k_scale=None, v_scale=None, o_scale=None, out=None, lse=None,
            return_lse=False, lse_base="log2", lse_layout="NH", enable_pdl=None, kv_cache_sf=None):
        """q [qo_indptr[-1], num_qo_heads, head_dim_qk], k [kv_indptr[-1], num_kv_heads, head_dim_qk],
        v [kv_indptr[-1], num_kv_heads, head_dim_vo] (each may be a token-strided view); out
        [qo_indptr[-1], num_qo_heads, head_dim_vo]. k_scale and v_scale are ignored, fp8 K/V
        included, as FlashInfer's ragged wrapper ignores them."""
        where = _RAGGED + ".run"
        if args or kv_cache_sf is not None:
            _args.unserved(where, args, kv_cache_sf=kv_cache_sf)
        if lse_base != "log2" or lse_layout != "NH":
            _args.lse_options(where, lse_base, lse_layout)
        if self._core is None:  # k, v may be token-strided views (of a fused qkv): the core reads them so
            self._planned(where, None)
        return self._attend(where, q, k, v, self._sm_scale, None, out, lse, return_lse, lse_base, lse_layout, None)

    def _launch(self, q, k, v, o, lse, sm_scale, sinks):
        """The call into the core (its custom op inside torch.compile)."""
        s = self._scalars
        run = _base.traced("batch_prefill_run") if _base.torch.compiler.is_compiling() else BatchPrefill.run
        run(self._core, q, k, v, self._qo_indptr_buf, self._kv_indptr_buf, o, None, None, lse, sm_scale, s[1], s[2],
            s[3], sinks=sinks, custom_mask=self._mask_bits, mask_indptr=self._mask_offsets)

    run_return_lse = functools.partialmethod(run, return_lse=True)

    def forward(self, q, k, v, causal=False, pos_encoding_mode="NONE", use_fp16_qk_reduction=False, window_left=-1,
                logits_soft_cap=None, sm_scale=None, rope_scale=None, rope_theta=None):
        """Deprecated in FlashInfer: run() with per-call settings (another mask or window plans again)."""
        self._forward(_RAGGED + ".forward", causal, pos_encoding_mode, use_fp16_qk_reduction, window_left,
                      logits_soft_cap, sm_scale, rope_scale, rope_theta)
        return self.run(q, k, v)

    def forward_return_lse(self, q, k, v, causal=False, pos_encoding_mode="NONE", use_fp16_qk_reduction=False,
                           window_left=-1, logits_soft_cap=None, sm_scale=None, rope_scale=None, rope_theta=None):
        self._forward(_RAGGED + ".forward_return_lse", causal, pos_encoding_mode, use_fp16_qk_reduction,
                      window_left, logits_soft_cap, sm_scale, rope_scale, rope_theta)
        return self.run(q, k, v, return_lse=True)
