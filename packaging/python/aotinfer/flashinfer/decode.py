"""FlashInfer's BatchDecodeWithPagedKVCacheWrapper over aotinfer.BatchDecode, q_len_per_req > 1
(speculative verification: each request's last tokens, causal among themselves) included: the
decode kernel packs a request's tokens with its GQA heads into one CTA's rows, so each KV byte is
read once for all of them. With a sliding window, or more rows (tokens times the group) than a
decode CTA holds, such a plan runs as a paged prefill, as FlashInfer's tensor-core decode path
does."""
import functools

from .. import BatchDecode
from . import _args, _base
from .prefill import DECODE_ROWS, BatchPrefillWithPagedKVCacheWrapper

_NAME = "BatchDecodeWithPagedKVCacheWrapper"
_PLAN, _RUN, _FORWARD = _NAME + ".plan", _NAME + ".run", _NAME + ".forward"


class BatchDecodeWithPagedKVCacheWrapper(_base.Wrapper):
    """Decode (one query token per request) over a paged KV cache, plan once per batch, run once
    per layer. package= (keyword only, aotinfer's addition) picks the kernel package; default
    the shared aotinfer.Package()."""

    def __init__(self, float_workspace_buffer, kv_layout="NHD", use_cuda_graph=False, use_tensor_cores=False,
                 paged_kv_indptr_buffer=None, paged_kv_indices_buffer=None, paged_kv_last_page_len_buffer=None,
                 backend="auto", jit_args=None, *, package=None):
        self._layout = _args.constructor(_NAME, kv_layout, backend, jit_args)
        self._fixed_batch_size = 0
        if use_cuda_graph:
            self._fixed_batch_size = _args.graph_batch(
                _NAME, [("paged_kv_last_page_len_buffer", paged_kv_last_page_len_buffer, 0),
                        ("paged_kv_indptr_buffer", paged_kv_indptr_buffer, 1)],
                [("paged_kv_indices_buffer", paged_kv_indices_buffer)])
        self._setup(float_workspace_buffer, kv_layout, use_cuda_graph, package)
        self._use_tensor_cores = use_tensor_cores  # accepted; aotinfer picks its decode kernel itself
        self._backend = backend
        self._paged_kv_indptr_buf = paged_kv_indptr_buffer
        self._paged_kv_indices_buf = paged_kv_indices_buffer
        self._paged_kv_last_page_len_buf = paged_kv_last_page_len_buffer
        self._verify, self._q_len = None, 1  # the paged prefill serving q_len_per_req > 1 with a window
        self._verifying = False  # the last plan is that prefill's
        self._graph_q_len = None  # CUDA-graph mode: q_len_per_req is part of the captured shape

    @property
    def use_tensor_cores(self):
        return self._use_tensor_cores

    def plan(self, indptr, indices, last_page_len, num_qo_heads, num_kv_heads, head_dim, page_size,
             pos_encoding_mode="NONE", window_left=-1, logits_soft_cap=None, q_data_type="float16",
             kv_data_type=None, o_data_type=None, data_type=None, sm_scale=None, rope_scale=None, rope_theta=None,
             non_blocking=True, block_tables=None, seq_lens=None, fixed_split_size=None, disable_split_kv=False,
             q_len_per_req=1, *, window_right=0, is_causal=None):
        """indptr [batch + 1], indices [indptr[-1]], last_page_len [batch] (int32, on any device).
        window_left (>= 0: a sliding window; -1: none) is fixed here, as it shapes the plan (one
        core object per distinct window, kept); logits_soft_cap is kept for run(). q_len_per_req > 1:
        q holds that many tokens per request, the last ones of its KV, each seeing the keys up to
        its own (is_causal=False: every key); needs use_tensor_cores=True, as in FlashInfer."""
        self._plan_call = _base.arguments(locals())
        q_len = 1 if q_len_per_req is None else int(q_len_per_req)
        if self._use_cuda_graph and self._graph_q_len not in (None, q_len):
            raise ValueError(f"aotinfer.flashinfer {_PLAN}: q_len_per_req is part of the frozen cudagraph shape: this "
                             f"wrapper was planned with {self._graph_q_len}, got {q_len}; use one wrapper per "
                             "q_len_per_req")
        self._q_len, self._verifying = 1, False
        if q_len != 1:
            self._check_q_len(q_len)
            windowed = window_left is not None and int(window_left) >= 0
            if windowed or q_len * (int(num_qo_heads) // max(int(num_kv_heads), 1)) > DECODE_ROWS:
                return self._plan_verify(q_len, is_causal, indptr, indices, last_page_len, num_qo_heads, num_kv_heads,
                                         head_dim, page_size, pos_encoding_mode, window_left, logits_soft_cap,
                                         q_data_type, kv_data_type, o_data_type, data_type, sm_scale, rope_scale,
                                         rope_theta, non_blocking, block_tables, seq_lens, fixed_split_size,
                                         disable_split_kv, window_right)
        config, features, scalars = _args.decode_plan(
            num_qo_heads, num_kv_heads, head_dim, page_size, pos_encoding_mode, window_left, logits_soft_cap,
            q_data_type, kv_data_type, o_data_type, data_type, sm_scale, rope_scale, rope_theta, block_tables,
            seq_lens, fixed_split_size, disable_split_kv, 1 if q_len != 1 else q_len_per_req, window_right,
            None if q_len != 1 else is_causal)
        config["layout"] = self._layout
        if q_len != 1:
            config.update(q_len=q_len, causal=is_causal is not False)
            self._check_keys(q_len, indptr, last_page_len, page_size)
        _base.need_torch()
        self._core = None  # a failed plan leaves nothing runnable
        indptr_host, last_host = _base.host_int32(indptr), _base.host_int32(last_page_len)
        batch = int(last_host.shape[0])
        if self._use_cuda_graph:  # run() reads the caller's buffers, the graph's addresses
            if batch != self._fixed_batch_size:
                raise ValueError(f"aotinfer.flashinfer {_PLAN}: the batch size is fixed in cudagraph mode: "
                                 f"{self._fixed_batch_size} from the buffers, {batch} now")
            for name, buffer, x in (("paged_kv_indptr_buffer", self._paged_kv_indptr_buf, indptr),
                                    ("paged_kv_last_page_len_buffer", self._paged_kv_last_page_len_buf, last_page_len),
                                    ("paged_kv_indices_buffer", self._paged_kv_indices_buf, indices)):
                _base.copy_into(_PLAN, name, buffer, x, non_blocking)
            config.update(cuda_graph=True, max_batch=self._fixed_batch_size)
            if config["kv_split"] == "fixed":  # the grid holds what the float workspace holds
                config["max_kv_len"] = _base.graph_max_kv_len(
                    self._float_workspace_buffer, self._fixed_batch_size * q_len, config["kv_split_tokens"],
                    num_qo_heads * head_dim * 4 + num_qo_heads * 4, _PLAN)
        else:
            self._paged_kv_indptr_buf, self._paged_kv_indices_buf, self._paged_kv_last_page_len_buf = \
                _base.device_int32s((indptr, indices, last_page_len), self.device, non_blocking)
        core = self._core_for(BatchDecode, config)
        _, int_bytes = core.workspace_sizes(max(batch, 1), _base.longest_request(config, indptr_host, page_size))
        core.plan(indptr_host, last_host, self._float_workspace_buffer, self._int_workspace(int_bytes))
        self._batch_size, self._q_len = batch, q_len
        self._graph_q_len = q_len if self._use_cuda_graph else None
        self._keep(core, config, features, scalars)

    begin_forward = plan

    def _check_q_len(self, q_len):
        """FlashInfer's rules for q_len_per_req > 1 (its multi-token decode is the fa2 tensor-core path)."""
        if q_len < 1:
            _args.refuse(_PLAN, "q_len_per_req", q_len, "at least 1 query token per request")
        if not self._use_tensor_cores:
            raise ValueError(f"aotinfer.flashinfer {_PLAN}: q_len_per_req={q_len} needs use_tensor_cores=True "
                             "(as in FlashInfer: several query tokens per request run on the prefill path)")
        if self._backend not in ("auto", "fa2"):
            raise NotImplementedError(f"aotinfer.flashinfer {_PLAN}: q_len_per_req={q_len} is served on the fa2 "
                                      f"path (backend 'auto' or 'fa2'), not backend={self._backend!r}")

    @staticmethod
    def _check_keys(q_len, indptr, last_page_len, page_size):
        last = _base.host_int32(last_page_len).tolist()
        for i, keys in enumerate(_base.paged_kv_lengths(_base.host_int32(indptr).tolist(), last, int(page_size))):
            if keys < q_len:  # as FlashInfer: the first query token would see no key
                raise ValueError(f"aotinfer.flashinfer {_PLAN}: request {i} has {keys} keys, fewer than "
                                 f"q_len_per_req={q_len}: its first query tokens would have an empty KV range")

    def _plan_verify(self, q_len, is_causal, indptr, indices, last_page_len, num_qo_heads, num_kv_heads, head_dim,
                     page_size, pos_encoding_mode, window_left, logits_soft_cap, q_data_type, kv_data_type, o_data_type,
                     data_type, sm_scale, rope_scale, rope_theta, non_blocking, block_tables, seq_lens,
                     fixed_split_size, disable_split_kv, window_right):
        """plan() with q_len_per_req > 1 and a window, or more rows than a decode CTA holds: a
        paged prefill over the same pages (its CUDA-graph buffers the decode
        wrapper's), q_len query tokens per request."""
        # The decode checks first (the same arguments refused by the same names).
        _args.decode_plan(num_qo_heads, num_kv_heads, head_dim, page_size, pos_encoding_mode, window_left,
                          logits_soft_cap, q_data_type, kv_data_type, o_data_type, data_type, sm_scale, rope_scale,
                          rope_theta, block_tables, seq_lens, fixed_split_size, disable_split_kv, 1, window_right)
        if data_type is not None:
            q_data_type = data_type if q_data_type is None else q_data_type
            kv_data_type = data_type if kv_data_type is None else kv_data_type
        _base.need_torch()
        self._core = None
        batch = int(_base.host_int32(last_page_len).shape[0])
        self._check_keys(q_len, indptr, last_page_len, page_size)
        if self._verify is None or (self._use_cuda_graph and self._verify_q_len != q_len):
            qo_indptr = _base.torch.arange(0, (batch + 1) * q_len, q_len, dtype=_base.torch.int32, device=self.device)
            self._verify = BatchPrefillWithPagedKVCacheWrapper(
                self._float_workspace_buffer, self._kv_layout, self._use_cuda_graph, qo_indptr_buf=qo_indptr,
                paged_kv_indptr_buf=self._paged_kv_indptr_buf, paged_kv_indices_buf=self._paged_kv_indices_buf,
                paged_kv_last_page_len_buf=self._paged_kv_last_page_len_buf, package=self._package)
            self._verify_q_len = q_len
        qo_indptr = [i * q_len for i in range(batch + 1)]
        self._verify.plan(qo_indptr, indptr, indices, last_page_len, num_qo_heads, num_kv_heads, head_dim, page_size,
                          causal=is_causal is not False, pos_encoding_mode=pos_encoding_mode, window_left=window_left,
                          logits_soft_cap=logits_soft_cap, sm_scale=sm_scale, rope_scale=rope_scale,
                          rope_theta=rope_theta, q_data_type=q_data_type, kv_data_type=kv_data_type,
                          o_data_type=o_data_type, non_blocking=non_blocking, fixed_split_size=fixed_split_size,
                          disable_split_kv=disable_split_kv)
        self._batch_size, self._q_len, self._verifying = batch, q_len, True
        self._graph_q_len = q_len if self._use_cuda_graph else None

    def run(self, q, paged_kv_cache, *args, q_scale=None, k_scale=None, v_scale=None, out=None, lse=None,
            return_lse=False, enable_pdl=None, window_left=None, sinks=None, q_len_per_req=None,
            skip_softmax_threshold_scale_factor=None, kv_cache_sf=None):
        """q [batch, num_qo_heads, head_dim]; paged_kv_cache a (k, v) tuple or one [pages, 2, ...]
        tensor; sinks per-head attention sink logits, float32 [num_qo_heads] (the core checks them).
        Returns out, or (out, lse) with return_lse (lse base 2, float32 [batch, heads])."""
        if args or kv_cache_sf is not None or skip_softmax_threshold_scale_factor is not None:
            _args.unserved(_RUN, args, kv_cache_sf=kv_cache_sf,
                           skip_softmax_threshold_scale_factor=skip_softmax_threshold_scale_factor)
        if q_len_per_req not in (None, self._q_len):
            raise ValueError(f"aotinfer.flashinfer {_RUN}: q_len_per_req={q_len_per_req} differs from plan()'s "
                             f"{self._q_len}")
        if self._q_len != 1 and q.shape[0] != self._batch_size * self._q_len:
            raise ValueError(f"aotinfer.flashinfer {_RUN}: q has {q.shape[0]} tokens; the plan's q_len_per_req "
                             f"{self._q_len} x batch {self._batch_size} needs {self._batch_size * self._q_len}")
        if self._verifying:
            return self._run_verify(q, paged_kv_cache, q_scale, k_scale, v_scale, out, lse, return_lse, window_left,
                                    sinks)
        if self._core is None or window_left is not None:
            self._planned(_RUN, window_left)
        k, v = _base.split_cache(paged_kv_cache, self._kv_layout)
        if not q.is_contiguous():
            q = _base.token_strided(q)
        if out is not None and lse is None and not return_lse and out.is_contiguous():
            o, lse_rows = out, None  # the common case, without _outputs' call; the core checks out
        else:
            o, lse_rows, _ = self._outputs(_RUN, q, out, lse, return_lse, "NH")
        # The call into the core (its custom op inside torch.compile), written out: this is the
        # per-layer path, where each Python call costs a tenth of a microsecond.
        s = self._scalars
        run = _base.traced("batch_decode_run") if _base.torch.compiler.is_compiling() else BatchDecode.run
        run(self._core, q, k, v, self._paged_kv_indptr_buf, self._paged_kv_indices_buf,
            self._paged_kv_last_page_len_buf, o, lse_rows, None, s[0] if q_scale is None else s[0] * float(q_scale),
            s[1], s[2], s[3], 1.0 if k_scale is None else float(k_scale), 1.0 if v_scale is None else float(v_scale),
            sinks=sinks)
        return o if o is out and lse_rows is None else self._deliver(o, out, lse_rows, return_lse)

    run_return_lse = functools.partialmethod(run, return_lse=True)

    def _run_verify(self, q, paged_kv_cache, q_scale, k_scale, v_scale, out, lse, return_lse, window_left, sinks):
        return self._verify.run(q, paged_kv_cache, q_scale=q_scale, k_scale=k_scale, v_scale=v_scale, out=out, lse=lse,
                                return_lse=return_lse, window_left=window_left, sinks=sinks)

    def _run_ln(self, q, paged_kv_cache):
        """(o, lse) with the core's natural-log LSE, for the cascade's merges (no base-2 rescale)."""
        self._planned(_RUN, None)
        k, v = _base.split_cache(paged_kv_cache, self._kv_layout)
        o = _base.torch.empty(q.shape, dtype=self._o_dtype, device=q.device)
        lse = _base.torch.empty(q.shape[:2], dtype=_base.torch.float32, device=q.device)
        s = self._scalars
        _base.call("batch_decode_run", BatchDecode.run, self._core, q, k, v, self._paged_kv_indptr_buf,
                   self._paged_kv_indices_buf, self._paged_kv_last_page_len_buf, o, lse, None, s[0], s[1], s[2], s[3],
                   1.0, 1.0)
        return o, lse

    def forward(self, q, paged_kv_cache, pos_encoding_mode="NONE", q_scale=None, k_scale=None, v_scale=None,
                window_left=-1, logits_soft_cap=None, sm_scale=None, rope_scale=None, rope_theta=None):
        """Deprecated in FlashInfer: run() with per-call settings (another window plans again)."""
        self._forward(pos_encoding_mode, window_left, logits_soft_cap, sm_scale, rope_scale, rope_theta)
        return self.run(q, paged_kv_cache, q_scale=q_scale, k_scale=k_scale, v_scale=v_scale)

    def forward_return_lse(self, q, paged_kv_cache, pos_encoding_mode="NONE", q_scale=None, k_scale=None,
                           v_scale=None, window_left=-1, logits_soft_cap=None, sm_scale=None, rope_scale=None,
                           rope_theta=None):
        self._forward(pos_encoding_mode, window_left, logits_soft_cap, sm_scale, rope_scale, rope_theta)
        return self.run(q, paged_kv_cache, q_scale=q_scale, k_scale=k_scale, v_scale=v_scale, return_lse=True)

    def _forward(self, pos_encoding_mode, window_left, logits_soft_cap, sm_scale, rope_scale, rope_theta):
        pos, window, cap = _args.features(_FORWARD, pos_encoding_mode, window_left, logits_soft_cap)
        self._replan(pos, **({"window_left": window} if window != self._window_left else {}))  # as FlashInfer's
        self._override(_FORWARD, (pos,), sm_scale, rope_scale, rope_theta, cap, window)


# FlashInfer's flashinfer.decode also holds its CUDA-graph helpers (decode_graph.py).
from .decode_graph import CUDAGraphBatchDecodeWithPagedKVCacheWrapper, fast_decode_plan  # noqa: E402,F401
