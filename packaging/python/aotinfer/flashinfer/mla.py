"""FlashInfer's BatchMLAPagedAttentionWrapper (multi-head latent attention, DeepSeek-V3/R1 and Kimi
K2, in the absorbed form) over aotinfer.BatchMlaDecode: the flat CSR plan (qo_indptr, kv_indptr,
kv_indices, kv_len_arr) and the split run (q_nope, q_pe, ckv_cache, kpe_cache), as engines call
them. Served: f16/bf16 q and cache, or an fp8 e4m3 cache with per-tensor ckv_scale and kpe_scale
(scale_mode "kv-per-tensor"), head_dim_ckv 512 and head_dim_kpe 64, the same 1..4 query tokens
in every request (decode and multi-token prediction), causal among them, eagerly or in
CUDA-graph mode."""
import functools
import math

from .. import BatchMlaDecode
from . import _args, _base

_NAME = "BatchMLAPagedAttentionWrapper"
_PLAN, _RUN = _NAME + ".plan", _NAME + ".run"
_MAX_Q_LEN = 4  # aotinfer's MLA decode: the decoded token and up to three speculative ones


class BatchMLAPagedAttentionWrapper(_base.Wrapper):
    """MLA over a paged latent cache, plan once per batch, run once per layer. package= (keyword
    only, aotinfer's addition) picks the kernel package.

    use_cuda_graph=True (with the four metadata buffers, as FlashInfer's): plan() copies the
    metadata into the buffers, whose sizes bound every plan (kv_len_arr: the most requests,
    kv_indices: the most pages), and run() reads the page ids from kv_indices' buffer, so a graph
    captured once replays later plans. The first plan fixes the query tokens per request."""

    def __init__(self, float_workspace_buffer, use_cuda_graph=False, qo_indptr=None, kv_indptr=None, kv_indices=None,
                 kv_len_arr=None, backend="auto", *, package=None):
        if backend not in ("auto", "fa2", "fa3"):
            _args.refuse(_NAME, "backend", backend, "'auto', 'fa2' or 'fa3' (aotinfer picks its kernel itself)")
        self._graph_buffers = None
        if use_cuda_graph:
            buffers = dict(qo_indptr=qo_indptr, kv_indptr=kv_indptr, kv_indices=kv_indices, kv_len_arr=kv_len_arr)
            missing = [name for name, value in buffers.items() if value is None]
            if missing:
                raise ValueError(f"aotinfer.flashinfer {_NAME}: CUDA-graph mode needs the qo_indptr, kv_indptr, "
                                 f"kv_indices and kv_len_arr buffers; missing: {', '.join(missing)}")
            self._graph_buffers = buffers
        self._setup(float_workspace_buffer, "NHD", use_cuda_graph, package)
        self._graph_q_len = None  # CUDA-graph mode: the first plan's query tokens per request
        self._mla = None  # (core, batch, q_len, kv_indices on the device) of the last plan

    def plan(self, qo_indptr=None, kv_indptr=None, kv_indices=None, kv_len_arr=None, num_heads=None, head_dim_ckv=None,
             head_dim_kpe=None, page_size=None, causal=None, sm_scale=None, q_data_type=None, kv_data_type=None,
             use_profiler=False, *, metadata=None, cum_seq_lens_q=None, block_tables=None, seq_lens=None,
             max_q_len=None, query_layout=None, kv_cache_layout=None, lse_mode="none", output_dtype=None,
             output_scale="none", scale_mode="default", skip_softmax=False, enable_pdl=None, use_sinks=False):
        """qo_indptr [batch + 1] in tokens (every request the same 1..4), kv_indptr [batch + 1] in
        pages, kv_indices the page ids, kv_len_arr [batch] each request's keys (int32, on any
        device); sm_scale the softmax scale (MLA's: 1 / sqrt(qk_nope_head_dim + qk_rope_head_dim))."""
        _args.defaults_only(_PLAN, [
            ("metadata", metadata, None, "the flat CSR form (qo_indptr, kv_indptr, kv_indices, kv_len_arr)"),
            ("cum_seq_lens_q", cum_seq_lens_q, None, "the flat CSR form"),
            ("block_tables", block_tables, None, "the flat CSR form"),
            ("seq_lens", seq_lens, None, "the flat CSR form"),
            ("use_profiler", use_profiler, False, "no profiler"),
            ("output_scale", output_scale, "none", "unscaled outputs"),
            ("skip_softmax", skip_softmax, False, "every key's softmax"),
            ("use_sinks", use_sinks, False, "no attention sinks in MLA"),
        ])
        for name, value in (("query_layout", query_layout), ("kv_cache_layout", kv_cache_layout)):
            if value not in (None, "split"):
                _args.refuse(_PLAN, name, value, "'split' (separate nope and rope tensors)")
        if lse_mode not in ("none", "base2", "basee"):
            raise ValueError(f"aotinfer.flashinfer {_PLAN}: lse_mode must be 'none', 'base2' or 'basee', got {lse_mode!r}")
        for name, value in (("qo_indptr", qo_indptr), ("kv_indptr", kv_indptr), ("kv_indices", kv_indices),
                            ("kv_len_arr", kv_len_arr), ("num_heads", num_heads), ("head_dim_ckv", head_dim_ckv),
                            ("head_dim_kpe", head_dim_kpe), ("page_size", page_size), ("sm_scale", sm_scale)):
            if value is None:
                raise TypeError(f"aotinfer.flashinfer {_PLAN}: {name} is required")
        if int(head_dim_ckv) != 512 or int(head_dim_kpe) != 64:
            _args.refuse(_PLAN, "head_dim_ckv, head_dim_kpe", (head_dim_ckv, head_dim_kpe),
                         "512 and 64 (DeepSeek-V3/R1, Kimi K2: kv_lora_rank 512, qk_rope_head_dim 64)")
        q_type = _args.dtype(_PLAN, "q_data_type", q_data_type or "bfloat16", ("f16", "bf16"))
        kv_type = q_type if kv_data_type is None else _args.dtype(_PLAN, "kv_data_type", kv_data_type,
                                                                  ("f16", "bf16", "e4m3"))
        if kv_type not in (q_type, "e4m3"):
            _args.refuse(_PLAN, "kv_data_type", kv_data_type, f"the queries' type ({q_type}) or torch.float8_e4m3fn")
        # As FlashInfer's: an fp8 cache takes per-tensor scales at run time ("default" means so).
        fp8 = kv_type == "e4m3"
        if scale_mode not in ("default", "kv-per-tensor") or (scale_mode == "kv-per-tensor" and not fp8):
            _args.refuse(_PLAN, "scale_mode", scale_mode, "'default', or 'kv-per-tensor' with an fp8 e4m3 cache")
        if output_dtype is not None and _args.dtype(_PLAN, "output_dtype", output_dtype, ("f16", "bf16")) != q_type:
            _args.refuse(_PLAN, "output_dtype", output_dtype, f"the queries' type ({q_type})")
        _base.need_torch()
        self._mla = None  # a failed plan leaves nothing runnable
        qo, kv = _base.host_int32(qo_indptr).tolist(), _base.host_int32(kv_indptr).tolist()
        lens = _base.host_int32(kv_len_arr).tolist()
        batch, page = len(qo) - 1, int(page_size)
        if batch < 0 or len(kv) != batch + 1 or len(lens) != batch:
            raise ValueError(f"aotinfer.flashinfer {_PLAN}: qo_indptr has {len(qo)} entries, kv_indptr {len(kv)} and "
                             f"kv_len_arr {len(lens)}; expected batch + 1, batch + 1 and batch")
        q_lens = {b - a for a, b in zip(qo, qo[1:])}
        q_len = q_lens.pop() if len(q_lens) == 1 else 1
        if q_lens or not 1 <= q_len <= _MAX_Q_LEN:
            _args.refuse(_PLAN, "qo_indptr", qo[:8], f"the same 1..{_MAX_Q_LEN} query tokens in every request")
        if causal is False and q_len > 1:
            _args.refuse(_PLAN, "causal", causal, "causal among a request's query tokens (one token: either)")
        last = []
        for i, (a, b, n) in enumerate(zip(kv, kv[1:], lens)):
            if n < 0 or b - a != (n + page - 1) // page:
                raise ValueError(f"aotinfer.flashinfer {_PLAN}: request {i} has {n} keys in {b - a} pages of {page}")
            last.append(n - (b - a - 1) * page if n else 0)  # the runtime's CSR view: keys of the last page
        indices = _base.device_int32(kv_indices, self.device, True)
        config = dict(num_heads=int(num_heads), page_size=page, dtype=q_type, dtype_kv=kv_type)
        if self._use_cuda_graph:
            config.update(cuda_graph=True, max_batch=self._graph_capacity(batch, indices), q_len=self._graph_q_len or q_len)
            if q_len != config["q_len"]:
                raise ValueError(f"aotinfer.flashinfer {_PLAN}: {q_len} query tokens per request, but this CUDA-graph "
                                 f"wrapper's are frozen at {config['q_len']} by its first plan (its captured grid "
                                 f"holds them); use one wrapper per token count")
        core = self._core_for(BatchMlaDecode, config)
        _, int_bytes = core.workspace_sizes(max(batch, 1), q_len)
        core.plan(kv, last, q_len, self._float_workspace_buffer, self._int_workspace(int_bytes))
        if self._use_cuda_graph:
            indices = self._fill_graph_buffers(qo_indptr, kv_indptr, indices, kv_len_arr)
            self._graph_q_len = q_len
        # lse_mode is FlashInfer's promise about run(): the flat plan lets run() ask for either base.
        self._mla = (core, batch, q_len, indices, float(sm_scale), getattr(_base.torch, _args.TORCH_NAMES[q_type]), fp8)

    begin_forward = plan

    def _graph_capacity(self, batch, kv_indices):
        """The most requests of this CUDA-graph wrapper (kv_len_arr's buffer), checked against the
        plan's batch and pages."""
        buffers = self._graph_buffers
        max_batch = buffers["kv_len_arr"].numel()
        if batch > max_batch or buffers["kv_indptr"].numel() < batch + 1 or buffers["qo_indptr"].numel() < batch + 1:
            raise ValueError(f"aotinfer.flashinfer {_PLAN}: {batch} requests exceed this CUDA-graph wrapper's buffers "
                             f"(kv_len_arr {max_batch}, kv_indptr {buffers['kv_indptr'].numel()}, qo_indptr "
                             f"{buffers['qo_indptr'].numel()} entries)")
        if kv_indices.numel() > buffers["kv_indices"].numel():
            raise ValueError(f"aotinfer.flashinfer {_PLAN}: {kv_indices.numel()} page ids exceed this CUDA-graph "
                             f"wrapper's kv_indices buffer ({buffers['kv_indices'].numel()})")
        return max_batch

    def _fill_graph_buffers(self, qo_indptr, kv_indptr, kv_indices, kv_len_arr):
        """The plan's metadata into the CUDA-graph buffers (their leading entries), on the current
        stream; returns kv_indices' buffer, which the captured launches read."""
        buffers = self._graph_buffers
        for name, given in (("qo_indptr", qo_indptr), ("kv_indptr", kv_indptr), ("kv_indices", kv_indices),
                            ("kv_len_arr", kv_len_arr)):
            target = buffers[name]
            if target.dtype != _base.torch.int32 or target.device != self.device:
                raise ValueError(f"aotinfer.flashinfer {_PLAN}: the CUDA-graph {name} buffer must be int32 on "
                                 f"{self.device}, got {target.dtype} on {target.device}")
            if given is not target:
                source = _base.device_int32(given, self.device, True).reshape(-1)
                target[:source.numel()].copy_(source, non_blocking=True)
        return buffers["kv_indices"]

    def run(self, q_nope=None, q_pe=None, ckv_cache=None, kpe_cache=None, out=None, lse=None, return_lse=False,
            profiler_buffer=None, kv_len=None, page_table=None, return_lse_base_on_e=False, o_scale=None, *,
            query=None, kv_cache=None, ckv_scale=None, ckv_scale_arr=None, kpe_scale=None, sinks=None,
            skip_softmax_threshold_scale_factor=None, bmm1_scale=None, bmm2_scale=None):
        """q_nope [tokens, heads, 512], q_pe [tokens, heads, 64], ckv_cache [pages, page_size, 512],
        kpe_cache [pages, page_size, 64]. Returns out, or (out, lse) with return_lse (lse base 2,
        or e with return_lse_base_on_e)."""
        _args.defaults_only(_RUN, [
            ("query", query, None, "q_nope and q_pe"), ("kv_cache", kv_cache, None, "ckv_cache and kpe_cache"),
            ("profiler_buffer", profiler_buffer, None, "no profiler"),
            ("kv_len", kv_len, None, "the plan's kv_len_arr"), ("page_table", page_table, None, "the plan's kv_indices"),
            ("o_scale", o_scale, None, "unscaled outputs"),
            ("ckv_scale_arr", ckv_scale_arr, None, "per-tensor scales (ckv_scale) for an fp8 cache"),
            ("sinks", sinks, None, "no attention sinks in MLA"),
            ("skip_softmax_threshold_scale_factor", skip_softmax_threshold_scale_factor, None, "every key's softmax"),
            ("bmm1_scale", bmm1_scale, None, "the plan's sm_scale"), ("bmm2_scale", bmm2_scale, None, "unscaled"),
        ])
        if self._mla is None:
            raise RuntimeError(f"aotinfer.flashinfer {_RUN}: call plan() first")
        for name, value in (("q_nope", q_nope), ("q_pe", q_pe), ("ckv_cache", ckv_cache), ("kpe_cache", kpe_cache)):
            if value is None:
                raise TypeError(f"aotinfer.flashinfer {_RUN}: {name} is required")
        core, batch, q_len, indices, sm_scale, o_dtype, fp8 = self._mla
        if fp8 and (ckv_scale is None or kpe_scale is None):
            raise ValueError(f"aotinfer.flashinfer {_RUN}: ckv_scale and kpe_scale are required when kv_data_type is FP8")
        if not fp8 and (ckv_scale is not None or kpe_scale is not None):
            raise ValueError(f"aotinfer.flashinfer {_RUN}: ckv_scale and kpe_scale are only valid when kv_data_type is FP8")
        scales = (float(ckv_scale), float(kpe_scale)) if fp8 else (1.0, 1.0)
        if not all(math.isfinite(x) and x > 0 for x in scales):
            raise ValueError(f"aotinfer.flashinfer {_RUN}: ckv_scale and kpe_scale must be finite and positive, got "
                             f"{scales[0]} and {scales[1]}")
        torch = _base.torch
        o = out if out is not None and out.is_contiguous() else torch.empty(q_nope.shape, dtype=o_dtype,
                                                                            device=q_nope.device)
        want_lse = return_lse or lse is not None
        lse_rows = None
        if want_lse:
            lse_rows = torch.empty(q_nope.shape[:2], dtype=torch.float32, device=q_nope.device)
        if q_nope.shape[0] != batch * q_len:
            raise ValueError(f"aotinfer.flashinfer {_RUN}: q_nope has {q_nope.shape[0]} tokens; the plan's "
                             f"{batch} requests of {q_len} need {batch * q_len}")
        # A cache stored as [pages, page_size, heads 1, dim] (a KV-head axis of one) is read as is.
        ckv, kpe = (x.squeeze(2) if x.dim() == 4 and x.shape[2] == 1 else x for x in (ckv_cache, kpe_cache))
        core.run(_base.token_strided(q_nope), _base.token_strided(q_pe), ckv, kpe, indices, o, lse_rows, sm_scale,
                 ckv_scale=scales[0], kpe_scale=scales[1])
        if out is not None and o is not out:
            out.copy_(o)
            o = out
        if not want_lse:
            return o
        if not return_lse_base_on_e:
            lse_rows.mul_(_base.LOG2E)
        if lse is not None:
            lse.copy_(lse_rows)
            lse_rows = lse
        return (o, lse_rows) if return_lse else o

    run_return_lse = functools.partialmethod(run, return_lse=True)
