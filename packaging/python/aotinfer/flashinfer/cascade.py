"""FlashInfer's cascade module: merge_state, merge_state_in_place and merge_states over
aotinfer.merge_state, and the cascade wrappers, compositions of the batch wrappers whose
per-level states (o, lse) are merged. FlashInfer's LSE is base 2 and aotinfer's kernel merges
natural-log states: the functions rescale the LSEs around the kernel (elementwise, on the current
stream); the wrappers ask their levels for natural-log LSEs and merge those as they are."""
from .. import merge_state as _merge
from . import _args, _base
from .decode import BatchDecodeWithPagedKVCacheWrapper
from .prefill import BatchPrefillWithPagedKVCacheWrapper, BatchPrefillWithRaggedKVCacheWrapper

_MULTI = "MultiLevelCascadeAttentionWrapper"
_DECODE = "BatchDecodeWithSharedPrefixPagedKVCacheWrapper"
_PREFILL = "BatchPrefillWithSharedPrefixPagedKVCacheWrapper"


def _dense(x):
    return x if x.is_contiguous() else x.contiguous()


def _natural(s):
    """A base-2 LSE as a new contiguous float32 natural-log one."""
    return _dense(s.to(_base.torch.float32) * _base.LN2)


def merge_state(v_a, s_a, v_b, s_b, *, package=None):
    """The state of attention over the union of two key sets: v_* [seq_len, num_heads, head_dim]
    (f16/bf16), s_* [seq_len, num_heads] base-2 LSE. Returns (v, s), new tensors."""
    torch = _base.need_torch()
    v = torch.empty(v_a.shape, dtype=v_a.dtype, device=v_a.device)
    s = torch.empty(s_a.shape, dtype=torch.float32, device=s_a.device)
    _base.call("merge_state", _merge, package or _base.shared_package(), _dense(v_a), _natural(s_a), _dense(v_b),
               _natural(s_b), v, s)
    s.mul_(_base.LOG2E)
    return v, s


def merge_states(v, s, *, package=None):
    """The state of attention over the union of num_states key sets, row by row: v [seq_len,
    num_states, num_heads, head_dim] (f16/bf16), s [seq_len, num_states, num_heads] base-2 LSE.
    Returns (v [seq_len, num_heads, head_dim], s [seq_len, num_heads] float32), new tensors. The
    states merge pairwise in a balanced tree, one merge_state launch a level, so a row's values
    are rounded to v's type ceil(log2(num_states)) times rather than num_states - 1."""
    torch = _base.need_torch()
    if v.dim() != 4 or s.dim() != 3 or tuple(s.shape) != tuple(v.shape[:3]):
        raise ValueError(f"aotinfer.flashinfer merge_states: v must be [seq_len, num_states, num_heads, head_dim] and "
                         f"s [seq_len, num_states, num_heads], got shapes {list(v.shape)} and {list(s.shape)}")
    seq_len, n, heads, dim = v.shape
    if n < 1:
        raise ValueError("aotinfer.flashinfer merge_states: num_states must be >= 1, got 0")
    package = package or _base.shared_package()
    s_ln = _natural(s)
    merged = False  # v is still the caller's tensor
    while n > 1:
        pairs = n // 2
        v_out = torch.empty((seq_len, pairs, heads, dim), dtype=v.dtype, device=v.device)
        s_out = torch.empty((seq_len, pairs, heads), dtype=torch.float32, device=v.device)
        even, odd = slice(0, 2 * pairs, 2), slice(1, 2 * pairs, 2)
        _base.call("merge_state", _merge, package, _dense(v[:, even]).view(-1, heads, dim),
                   _dense(s_ln[:, even]).view(-1, heads), _dense(v[:, odd]).view(-1, heads, dim),
                   _dense(s_ln[:, odd]).view(-1, heads), v_out.view(-1, heads, dim), s_out.view(-1, heads))
        if n % 2:  # the last state goes up a level as it is
            v_out, s_out = torch.cat((v_out, v[:, n - 1:]), dim=1), torch.cat((s_out, s_ln[:, n - 1:]), dim=1)
        v, s_ln, n, merged = v_out, s_out, n - pairs, True
    if merged:
        v_merged = _dense(v[:, 0])
    else:  # one state: itself, but a row without keys (lse -inf) is zeros, as any merge gives it
        v_merged = v[:, 0].masked_fill(torch.isneginf(s_ln[:, 0])[..., None], 0)
    return v_merged, s_ln[:, 0] * _base.LOG2E


def merge_state_in_place(v, s, v_other, s_other, mask=None, *, package=None):
    """Merges (v_other, s_other) into (v, s) in place; mask [seq_len] bool leaves the rows where
    it is False untouched (they merge with an empty state)."""
    torch = _base.need_torch()
    s_a, s_b = _natural(s), _natural(s_other)
    if mask is not None:
        keep = mask.to(device=s_b.device, dtype=torch.bool).reshape((-1,) + (1,) * (s_b.dim() - 1))
        s_b.masked_fill_(~keep, float("-inf"))
    target = _dense(v)
    merged = torch.empty_like(s_a)
    _base.call("merge_state", _merge, package or _base.shared_package(), target, s_a, _dense(v_other), s_b, target,
               merged)
    if target is not v:
        v.copy_(target)
    torch.mul(merged, _base.LOG2E, out=s)


def _merge_ln(package, v, s, v_other, s_other, s_out=None):
    """Merges (v_other, s_other) into v in place; natural-log LSEs. The merged LSE goes to s_out
    (None: dropped), which must be another tensor than s and s_other: the kernel reads those row
    by row while it writes."""
    _base.call("merge_state", _merge, package or _base.shared_package(), v, s, v_other, s_other, v, s_out)


def _per_level(where, name, arrays, num_levels):
    """A list (or tuple) of num_levels entries, one per level (FlashInfer zips them strictly)."""
    if not isinstance(arrays, (list, tuple)):
        raise ValueError(f"aotinfer.flashinfer {where}: {name} must be a list of {num_levels} entries, one per "
                         f"level, got {_args.show(arrays)}")
    if len(arrays) != num_levels:
        raise ValueError(f"aotinfer.flashinfer {where}: {name} has {len(arrays)} entries for {num_levels} levels")
    return list(arrays)


class MultiLevelCascadeAttentionWrapper:
    """Attention over KV kept in levels of one paged pool (a prefix many requests share, ..., each
    request's own pages). Level i is a paged prefill of the query tokens grouped by
    qo_indptr_arr[i] against that level's pages, non-causal except the last level, which takes
    plan()'s causal (FlashInfer's rule); run() merges the levels' states.

    One BatchPrefillWithPagedKVCacheWrapper per level, as in FlashInfer; outside CUDA-graph mode a
    level with one query per group (each request's own pages at decode time) runs on a
    BatchDecodeWithPagedKVCacheWrapper instead, whose kernel streams KV at the copy bandwidth
    where the prefill kernel's query tiles would be mostly empty. Each keeps its own int
    workspace, which holds its plan until its next plan(); all share the float workspace, which
    the core touches only inside run() (split-KV partial states, merged before run() returns)
    while the levels run one after another on the stream. package= (keyword only) picks the
    kernel package, as for the other wrappers."""

    def __init__(self, num_levels, float_workspace_buffer, kv_layout="NHD", use_cuda_graph=False,
                 qo_indptr_buf_arr=None, paged_kv_indptr_buf_arr=None, paged_kv_indices_buf_arr=None,
                 paged_kv_last_page_len_buf_arr=None, *, package=None):
        if isinstance(num_levels, bool) or not isinstance(num_levels, int) or num_levels < 1:
            raise ValueError(f"aotinfer.flashinfer {_MULTI}: num_levels must be an int >= 1, got "
                             f"{_args.show(num_levels)}")
        _args.layout(_MULTI, kv_layout)
        buffers = [{}] * num_levels
        if use_cuda_graph:  # each level's wrapper reads its own buffers: the graph's addresses
            arrays = [_per_level(_MULTI, name, given, num_levels) for name, given in (
                ("qo_indptr_buf_arr", qo_indptr_buf_arr), ("paged_kv_indptr_buf_arr", paged_kv_indptr_buf_arr),
                ("paged_kv_indices_buf_arr", paged_kv_indices_buf_arr),
                ("paged_kv_last_page_len_buf_arr", paged_kv_last_page_len_buf_arr))]
            buffers = [dict(qo_indptr_buf=a, paged_kv_indptr_buf=b, paged_kv_indices_buf=c,
                            paged_kv_last_page_len_buf=d) for a, b, c, d in zip(*arrays)]
        self._batch_prefill_wrappers = [
            BatchPrefillWithPagedKVCacheWrapper(float_workspace_buffer, kv_layout, use_cuda_graph=bool(use_cuda_graph),
                                                package=package, **level) for level in buffers]
        self._num_levels, self._kv_layout, self._use_cuda_graph = num_levels, kv_layout, bool(use_cuda_graph)
        self._package = package
        self._float_workspace_buffer = float_workspace_buffer
        self._decode_wrappers = {}  # level -> decode wrapper, made when a level is decode-shaped
        self._by_decode = [False] * num_levels  # the last plan's choice per level
        self._planned = False

    @property
    def is_cuda_graph_enabled(self):
        return self._use_cuda_graph

    def reset_workspace_buffer(self, float_workspace_buffer, int_workspace_buffers):
        """New workspaces for the next plan(): the float one for every level, one int workspace per
        level (None: allocated by aotinfer). Levels cannot share an int workspace: it holds their
        plans."""
        where = _MULTI + ".reset_workspace_buffer"
        ints = _per_level(where, "int_workspace_buffers", int_workspace_buffers, self._num_levels)
        given = [x.data_ptr() if hasattr(x, "data_ptr") else id(x) for x in ints if x is not None]
        if len(set(given)) != len(given):
            raise ValueError(f"aotinfer.flashinfer {where}: each level needs its own int workspace (it holds the "
                             "level's plan); int_workspace_buffers repeats one")
        for wrapper, int_workspace_buffer in zip(self._batch_prefill_wrappers, ints):
            wrapper.reset_workspace_buffer(float_workspace_buffer, int_workspace_buffer)
        self._float_workspace_buffer = float_workspace_buffer
        self._decode_wrappers = {}  # remade on the next plan, over the new float workspace
        self._planned = False

    def plan(self, qo_indptr_arr, paged_kv_indptr_arr, paged_kv_indices_arr, paged_kv_last_page_len, num_qo_heads,
             num_kv_heads, head_dim, page_size, causal=False, pos_encoding_mode="NONE", use_fp16_qk_reduction=False,
             sm_scale=None, window_left=-1, logits_soft_cap=None, rope_scale=None, rope_theta=None,
             q_data_type="float16", kv_data_type=None):
        """Per level (lists of num_levels entries): qo_indptr [batch_i + 1] in tokens, each ending at
        the number of query tokens; paged_kv_indptr [batch_i + 1] in pages; paged_kv_indices;
        paged_kv_last_page_len [batch_i]. The other arguments hold for every level, as in the
        paged prefill wrapper's plan(), except window_left, which must be -1: a query's window
        counts its keys over all levels, while each level's plan would count from its own end
        (aotinfer.Cascade refuses windows for the same reason). logits_soft_cap applies to every
        level's scores."""
        where = _MULTI + ".plan"
        self._planned = False  # a failed plan leaves nothing runnable
        levels = [_per_level(where, name, given, self._num_levels) for name, given in (
            ("qo_indptr_arr", qo_indptr_arr), ("paged_kv_indptr_arr", paged_kv_indptr_arr),
            ("paged_kv_indices_arr", paged_kv_indices_arr), ("paged_kv_last_page_len", paged_kv_last_page_len))]
        settings = dict(pos_encoding_mode=pos_encoding_mode, use_fp16_qk_reduction=use_fp16_qk_reduction,
                        sm_scale=sm_scale, window_left=window_left, logits_soft_cap=logits_soft_cap,
                        rope_scale=rope_scale, rope_theta=rope_theta, q_data_type=q_data_type,
                        kv_data_type=kv_data_type)
        _args.prefill_plan(where, num_qo_heads, num_kv_heads, head_dim, causal=causal, **settings)  # refusals name us
        if pos_encoding_mode != "NONE":
            _args.refuse(where, "pos_encoding_mode", pos_encoding_mode,
                         "served: 'NONE': positions restart in each level (rotate q and K before caching them)")
        if kv_data_type is not None:  # the levels' fp8 scales have no place in run()
            _args.dtype(where, "kv_data_type", kv_data_type, ("f16", "bf16"))
        if window_left != -1:
            _args.refuse(where, "window_left", window_left,
                         "served: -1 (no window): a window counts a query's keys over all levels, which each level's "
                         "plan cannot see (its positions restart); plan the model's windowed layers on a "
                         "BatchPrefillWithPagedKVCacheWrapper / BatchDecodeWithPagedKVCacheWrapper")
        last = self._num_levels - 1
        tokens = []
        _base.need_torch()
        for i, (wrapper, qo_indptr, *level) in enumerate(zip(self._batch_prefill_wrappers, *levels)):
            qo_host = _base.host_int32(qo_indptr)
            tokens.append(int(qo_host[-1]) if qo_host.numel() else 0)
            self._by_decode[i] = (not self._use_cuda_graph and qo_host.numel() > 1
                                  and bool(((qo_host[1:] - qo_host[:-1]) == 1).all()))
            if self._by_decode[i]:  # one query per group, at the end of its KV: causal or not, it sees all
                self._by_decode[i] = self._plan_decode(i, level, num_qo_heads, num_kv_heads, head_dim, page_size,
                                                       settings)
            if not self._by_decode[i]:
                wrapper.plan(qo_indptr, *level, num_qo_heads, num_kv_heads, head_dim, page_size,
                             causal=bool(causal) and i == last, **settings)
        if len(set(tokens)) > 1:  # run() gives every level the same queries
            raise ValueError(f"aotinfer.flashinfer {where}: every level's qo_indptr must end at the number of query "
                             f"tokens; the levels end at {tokens}")
        self._planned = True

    begin_forward = plan

    def _plan_decode(self, i, level, num_qo_heads, num_kv_heads, head_dim, page_size, settings):
        """Plans level i on a decode wrapper; False when the package lacks its decode variant (the
        level then runs on its prefill wrapper)."""
        from .. import NotFound
        wrapper = self._decode_wrappers.get(i)
        if wrapper is None:
            wrapper = self._decode_wrappers[i] = BatchDecodeWithPagedKVCacheWrapper(
                self._float_workspace_buffer, self._kv_layout, package=self._package)
        try:
            wrapper.plan(*level, num_qo_heads, num_kv_heads, head_dim, page_size,
                         **{k: v for k, v in settings.items() if k != "use_fp16_qk_reduction"})
        except NotFound:
            return False
        return True

    def _level_run(self, i, q, paged_kv_cache):
        """Level i's (o, natural-log lse)."""
        if self._by_decode[i]:
            return self._decode_wrappers[i]._run_ln(q, paged_kv_cache)
        return self._batch_prefill_wrappers[i].run(q, paged_kv_cache, return_lse=True, lse_base="ln")

    def run(self, q, paged_kv_cache):
        """q [tokens, num_qo_heads, head_dim]; paged_kv_cache a (k, v) tuple or one [pages, 2, ...]
        tensor holding every level's pages. Returns out [tokens, num_qo_heads, head_dim]."""
        if not self._planned:
            raise RuntimeError(f"aotinfer.flashinfer {_MULTI}.run: call plan() first")
        last = self._num_levels - 1
        if last == 0:
            return self._level_run(0, q, paged_kv_cache)[0]
        if not q.is_contiguous():  # once, not once per level
            q = q.contiguous()
        out, lse = self._level_run(last, q, paged_kv_cache)
        spare = None
        upper = range(last)
        for i in upper:  # FlashInfer's order: the last level, then the others from the top
            o_i, lse_i = self._level_run(i, q, paged_kv_cache)
            if i == len(upper) - 1:
                _merge_ln(self._package, out, lse, o_i, lse_i)  # run() returns no LSE
                break
            spare = _base.torch.empty_like(lse) if spare is None else spare
            _merge_ln(self._package, out, lse, o_i, lse_i, spare)
            lse, spare = spare, lse
        return out

    forward = run


class _SharedPrefix:
    """The shared prefix of the older cascade wrappers: every query token against all of the dense
    k_shared / v_shared, one non-causal ragged prefill (qo_indptr [0, tokens], kv_indptr [0,
    prefix]). Planned by the first forward() and again only when the token count, the prefix
    length, the dtypes or the scalars change, so the layers of a step share one plan."""

    def __init__(self, float_workspace_buffer, kv_layout, package):
        self._wrapper = BatchPrefillWithRaggedKVCacheWrapper(float_workspace_buffer, "NHD", package=package)
        self._hnd = kv_layout == "HND"
        self._key = None

    def reset(self, float_workspace_buffer):
        self._wrapper.reset_workspace_buffer(float_workspace_buffer, None)  # its own int workspace, made at its plan
        self._key = None

    def attend(self, q, k, v, heads, sm_scale, rope_scale, rope_theta):
        """(o, natural-log lse [tokens, num_qo_heads]); heads = (num_qo_heads, num_kv_heads, head_dim)."""
        if self._hnd:  # [heads, prefix, dim]: ragged K/V are token-major with dense heads, so a copy
            k, v = k.transpose(0, 1).contiguous(), v.transpose(0, 1).contiguous()
        key = (q.shape[0], k.shape[0], q.dtype, k.dtype, heads, sm_scale, rope_scale, rope_theta)
        if key != self._key:
            self._key = None
            self._wrapper.plan([0, q.shape[0]], [0, k.shape[0]], *heads, causal=False, sm_scale=sm_scale,
                               rope_scale=rope_scale, rope_theta=rope_theta, q_data_type=q.dtype, kv_data_type=k.dtype)
            self._key = key
        return self._wrapper.run(q, k, v, return_lse=True, lse_base="ln")


class BatchDecodeWithSharedPrefixPagedKVCacheWrapper:
    """Decode over a prefix every request shares, held in dense k_shared / v_shared, plus each
    request's own pages (FlashInfer's older cascade API; MultiLevelCascadeAttentionWrapper is the
    newer one). forward(): the batch's queries against the prefix, a paged decode against the
    requests' own pages, the two states merged. package= as for the other wrappers."""

    def __init__(self, float_workspace_buffer, kv_layout="NHD", *, package=None):
        _args.layout(_DECODE, kv_layout)
        self._batch_decode_wrapper = BatchDecodeWithPagedKVCacheWrapper(float_workspace_buffer, kv_layout,
                                                                        package=package)
        self._prefix = _SharedPrefix(float_workspace_buffer, kv_layout, package)
        self._kv_layout, self._package, self._heads = kv_layout, package, None

    def reset_workspace_buffer(self, float_workspace_buffer, int_workspace_buffer):
        """New workspaces for the next begin_forward(); the int one goes to the decode of the
        requests' own pages (the prefix's prefill allocates its own)."""
        self._heads = None
        self._batch_decode_wrapper.reset_workspace_buffer(float_workspace_buffer, int_workspace_buffer)
        self._prefix.reset(float_workspace_buffer)

    def begin_forward(self, unique_kv_indptr, unique_kv_indices, unique_kv_last_page_len, num_qo_heads, num_kv_heads,
                      head_dim, page_size, data_type="float16"):
        """Plans the decode of the requests' own pages (data_type as the decode wrapper's
        data_type); forward() plans the prefix."""
        self._heads = None
        self._batch_decode_wrapper.plan(unique_kv_indptr, unique_kv_indices, unique_kv_last_page_len, num_qo_heads,
                                        num_kv_heads, head_dim, page_size, pos_encoding_mode="NONE",
                                        data_type=data_type)
        self._heads = (int(num_qo_heads), int(num_kv_heads), int(head_dim))

    def forward(self, q, k_shared, v_shared, unique_kv_cache):
        """q [batch, num_qo_heads, head_dim]; k_shared, v_shared [prefix, num_kv_heads, head_dim]
        (NHD) or [num_kv_heads, prefix, head_dim] (HND); unique_kv_cache as the decode wrapper's
        run() takes it. Returns out [batch, num_qo_heads, head_dim]."""
        if self._heads is None:
            raise RuntimeError(f"aotinfer.flashinfer {_DECODE}.forward: call begin_forward() first")
        out, lse = self._prefix.attend(q, k_shared, v_shared, self._heads, None, None, None)  # plan's defaults
        o_unique, lse_unique = self._batch_decode_wrapper.run(q, unique_kv_cache, return_lse=True)
        lse_unique.mul_(_base.LN2)  # the decode wrapper's LSE is base 2
        _merge_ln(self._package, out, lse, o_unique, lse_unique)
        return out


class BatchPrefillWithSharedPrefixPagedKVCacheWrapper:
    """Prefill / append over a prefix every request shares, held in dense k_shared / v_shared,
    plus each request's own pages (FlashInfer's older cascade API). forward(): every query token
    against the prefix (non-causal), a paged prefill against the requests' own pages (causal as
    asked: aligned to the end of each request's own keys), the two states merged."""

    def __init__(self, float_workspace_buffer, kv_layout="NHD", *, package=None):
        _args.layout(_PREFILL, kv_layout)
        self._batch_prefill_wrapper = BatchPrefillWithPagedKVCacheWrapper(float_workspace_buffer, kv_layout,
                                                                          package=package)
        self._prefix = _SharedPrefix(float_workspace_buffer, kv_layout, package)
        self._kv_layout, self._package = kv_layout, package
        self._plan_args = self._causal = None

    def reset_workspace_buffer(self, float_workspace_buffer, int_workspace_buffer):
        """As BatchDecodeWithSharedPrefixPagedKVCacheWrapper's."""
        self._plan_args = None
        self._batch_prefill_wrapper.reset_workspace_buffer(float_workspace_buffer, int_workspace_buffer)
        self._prefix.reset(float_workspace_buffer)

    def begin_forward(self, qo_indptr, paged_kv_indptr, paged_kv_indices, paged_kv_last_page_len, num_qo_heads,
                      num_kv_heads, head_dim, page_size):
        """Plans the prefill of the requests' own pages, non-causal as FlashInfer's; forward()
        plans the prefix, and plans the own pages again when its causal differs (the mask is a
        kernel variant in aotinfer)."""
        self._plan_args = None
        args = (qo_indptr, paged_kv_indptr, paged_kv_indices, paged_kv_last_page_len, num_qo_heads, num_kv_heads,
                head_dim, page_size)
        self._batch_prefill_wrapper.plan(*args, causal=False)
        self._plan_args, self._causal = args, False

    def forward(self, q, k_shared, v_shared, unique_kv_cache, causal=False, use_fp16_qk_reduction=False, sm_scale=None,
                rope_scale=None, rope_theta=None):
        """q [qo_indptr[-1], num_qo_heads, head_dim]; k_shared, v_shared as the decode variant's;
        unique_kv_cache as the paged prefill wrapper's run() takes it. Returns out."""
        where = _PREFILL + ".forward"
        _args.defaults_only(where, [("use_fp16_qk_reduction", use_fp16_qk_reduction, False,
                                     "scores accumulate in fp32")])
        if self._plan_args is None:
            raise RuntimeError(f"aotinfer.flashinfer {where}: call begin_forward() first")
        unique = self._batch_prefill_wrapper
        if bool(causal) != self._causal:  # host work: keep causal the same across a step's layers
            self._causal = None
            unique.plan(*self._plan_args, causal=bool(causal))
            self._causal = bool(causal)
        heads = tuple(int(x) for x in self._plan_args[4:7])
        out, lse = self._prefix.attend(q, k_shared, v_shared, heads, sm_scale, rope_scale, rope_theta)
        o_unique, lse_unique = unique.forward_return_lse(q, unique_kv_cache, causal=causal, sm_scale=sm_scale,
                                                         rope_scale=rope_scale, rope_theta=rope_theta)
        lse_unique.mul_(_base.LN2)  # the prefill wrapper's forward returns a base-2 LSE
        _merge_ln(self._package, out, lse, o_unique, lse_unique)
        return out
