"""aotinfer: ahead-of-time attention kernels, loaded from a prebuilt kernel package.

    import aotinfer
    pkg = aotinfer.Package()                       # the package inside this wheel
    pkg.variants("batch_decode", head_dim=128)     # which variants exist
    aotinfer.merge_state(pkg, v_a, s_a, v_b, s_b, v_out, s_out)

Tensors are PyTorch tensors or any GPU arrays exposing DLPack or __cuda_array_interface__
(CuPy, ...). Every tensor is checked before anything is launched (device, dtype, shape against
the config and the plan, strides, alignment): a mistake raises aotinfer.InvalidArgument naming
the argument, and the CUDA context stays usable. Streams are None (the current PyTorch stream
when PyTorch tensors are given, else the default stream), an int handle or a stream object.
Errors raise aotinfer.Error subclasses carrying the runtime's message. Importing needs neither a
compiler nor PyTorch; running kernels needs the NVIDIA driver.

Every attention variant serves sliding windows and logits soft caps: BatchDecode and
BatchPrefill take window_left at creation (the plan clamps each request's work to its window,
so layers with different windows need one object each), run() takes logits_soft_cap (> 0 caps
the scores; layers may differ freely).

The FlashInfer-compatible API is aotinfer.flashinfer; PyTorch custom ops (torch.compile, CUDA
graphs) are in aotinfer.torch_ops.
"""
import array
import ctypes

from . import _capi, _ext, _tensor

__version__ = "0.1.0"


class Error(RuntimeError):
    """Base of every aotinfer error; .status is the C API's aotinfer_status."""

    def __init__(self, message, status=99):
        super().__init__(message)
        self.status = status


class InvalidArgument(Error, ValueError):
    """A caller passed something the contract forbids."""


class NotFound(Error, LookupError):
    """No such variant, file or entry point."""


class CorruptPackage(Error):
    """A checksum mismatch or an unreadable manifest."""


class NoDriver(Error):
    """The NVIDIA driver (libcuda) could not be loaded."""


class NoDevice(Error):
    """No GPU is visible."""


class UnsupportedArch(Error):
    """The package holds no code for this GPU."""


class CudaError(Error):
    """A CUDA driver call failed."""


# aotinfer_status (aotinfer/aotinfer.h) -> exception class
_ERRORS = {1: InvalidArgument, 2: NotFound, 3: CorruptPackage, 4: NoDriver, 5: NoDevice, 6: UnsupportedArch,
           7: CudaError, 8: Error}


def _raise(status):
    raise _ERRORS.get(status, Error)(_capi.lib.aotinfer_last_error().decode(), status)


def _check(status):
    if status != 0:
        _raise(status)


_ext.bind(_capi.entry_address("aotinfer_batch_decode_tensors_run"),
          _capi.entry_address("aotinfer_batch_prefill_tensors_run"),
          _capi.entry_address("aotinfer_merge_state_tensors_run"),
          _capi.entry_address("aotinfer_append_paged_kv_tensors_run"),
          _tensor.describe, _tensor.stream_handle, InvalidArgument)
_decode_run, _prefill_run, _merge_state, _append_paged_kv = _ext.decode_run, _ext.prefill_run, _ext.merge_state, _ext.append_paged_kv


def _uri(family, axes):
    """A (possibly partial) variant key as a URI: family.axis-value..."""
    def text(v):
        return ("true" if v else "false") if isinstance(v, bool) else str(v)
    return ".".join([family] + [f"{k}-{text(v)}" for k, v in axes.items()])


class Variant:
    """One variant of a package: its URI, family and axis values (as text)."""

    def __init__(self, uri):
        self.uri = uri
        self.family, *parts = uri.split(".")
        self.axes = dict(p.split("-", 1) for p in parts)

    def __repr__(self):
        return f"Variant({self.uri!r})"


class Package:
    """A kernel package. Package() opens the default one ($AOTINFER_PACKAGE, or the one shipped
    in this wheel); Package(path) opens a package folder."""

    def __init__(self, path=None):
        if path is None:
            import os
            path = os.environ.get("AOTINFER_PACKAGE") or os.path.join(os.path.dirname(_capi.__file__), "package")
        self.path = str(path)
        handle = ctypes.c_void_p()
        _check(_capi.lib.aotinfer_package_open(self.path.encode(), ctypes.byref(handle)))
        self._handle, self._address = handle, handle.value

    def __del__(self):
        if getattr(self, "_handle", None):
            _capi.lib.aotinfer_package_close(self._handle)
            self._handle = None

    def variants(self, family=None, **axes):
        """Variants of `family` (all when None) whose axes equal the given values."""
        lib, out = _capi.lib, []
        for i in range(lib.aotinfer_package_variant_count(self._handle)):
            v = Variant(lib.aotinfer_package_variant_uri(self._handle, i).decode())
            wanted = Variant(_uri(v.family, axes)).axes
            if (family is None or v.family == family) and all(v.axes.get(k) == x for k, x in wanted.items()):
                out.append(v)
        return out

    def find(self, family, **axes):
        """The one variant matching the given axes; NotFound names the nearest ones and the spec
        entry that would add it."""
        _check(_capi.lib.aotinfer_package_find(self._handle, _uri(family, axes).encode()))
        return self.variants(family, **axes)[0]

    def __repr__(self):
        return f"Package({self.path!r})"


def merge_state(package, v_a, s_a, v_b, s_b, v_out, s_out=None, stream=None):
    """Merges two attention states row by row (params/merge_state.h): v_* [rows, head_dim] or
    [tokens, heads, head_dim] f16/bf16, s_* float32 log-sum-exp with one value per row. v_out may
    be v_a (in place); s_out may be None."""
    status = _merge_state(package._address, v_a, s_a, v_b, s_b, v_out, s_out, stream)
    if status:
        _raise(status)


def append_paged_kv(package, k, v, batch_indices, positions, k_pages, v_pages, kv_indptr, kv_indices,
                    kv_last_page_len, layout="nhd", stream=None):
    """Writes new tokens k, v [nnz, num_kv_heads, head_dim] into their pages (params/append_paged_kv.h);
    k_pages/v_pages are the pools [pages, page_size, heads, dim] (nhd) or [pages, heads, page_size, dim]
    (hnd), possibly views of one [pages, 2, ...] tensor; the metadata is int32 on the GPU."""
    status = _append_paged_kv(package._address, k, v, batch_indices, positions, k_pages, v_pages, kv_indptr,
                              kv_indices, kv_last_page_len, layout, stream)
    if status:
        _raise(status)


def _host_int32(values, name):
    """plan()'s host metadata that _ext does not read itself (PyTorch CPU int32 tensors and lists
    of ints it does): NumPy arrays, int64 tensors, NumPy integers, ... as (address, count,
    keepalive) of the array itself when it is int32 and dense, else of an int32 copy."""
    if hasattr(values, "__dlpack__") or hasattr(values, "__cuda_array_interface__"):
        t = _tensor.tensor(values, name)
        if t.device_type not in (_tensor.CPU, _tensor.CUDA_HOST):
            raise InvalidArgument(f"{name}: plan() reads host metadata: pass a CPU tensor, array or list "
                                  f"(run() takes the GPU copies)", 1)
        if len(t.shape) != 1:
            raise InvalidArgument(f"{name}: expected a 1-D array, got shape {list(t.shape)}", 1)
        if t.dtype == _tensor.I32 and (t.shape[0] <= 1 or t.strides[0] == 1):
            return t.ptr, t.shape[0], values
        values = values.tolist()
    try:
        copy = array.array("i", [int(x) for x in values])  # C int: int32_t on every platform served
    except OverflowError:
        raise InvalidArgument(f"{name}: an entry is outside int32", 1) from None
    return copy.buffer_info()[0], len(copy), copy


# plan() goes through _ext too: its host metadata is read without a Python object per entry.
_ext.bind_plan(_capi.entry_address("aotinfer_batch_decode_plan"),
               _capi.entry_address("aotinfer_batch_prefill_plan_paged"),
               _capi.entry_address("aotinfer_batch_prefill_plan_ragged"), _host_int32)
_decode_plan, _prefill_plan = _ext.decode_plan, _ext.prefill_plan


def _text(value, name, allowed):
    if value not in allowed:
        raise InvalidArgument(f"{name} must be one of {', '.join(allowed)}, got {value!r}", 1)
    return value.encode()


_DTYPES = ("f16", "bf16", "e4m3", "e5m2")
# How plans cut each request's keys: "adaptive" (fills the GPU), or batch-invariant "fixed"
# (kv_split_tokens per chunk) and "none" (aotinfer/attention.hpp: KvSplit).
_KV_SPLITS = ("adaptive", "fixed", "none")
_POSITIONS = ("none", "rope_llama", "alibi")


def _window(window_left, where):
    """The C configs' (sliding_window, window_left) of a window_left argument: < 0 is no window
    (the flag off), >= 0 a window of that many keys before each query's own. Fixed at creation:
    the planner gives each request's work only the keys its window keeps."""
    if isinstance(window_left, bool) or not hasattr(type(window_left), "__index__"):
        raise InvalidArgument(f"{where}: window_left must be an int (< 0: no window, >= 0: the keys each query sees "
                              f"before its own), got {window_left!r}; the sliding_window and soft_cap flags are "
                              f"gone: every variant serves windows and soft caps", 1)
    window_left = window_left.__index__()
    if window_left >= 2**31:
        raise InvalidArgument(f"{where}: window_left {window_left} is outside int32", 1)
    return (1, window_left) if window_left >= 0 else (0, 0)


class BatchDecode:
    """Batch decode over a paged KV cache, plan/run (aotinfer/batch_decode.hpp).

    window_left: a sliding window, fixed here because plans depend on it: each request's query
    sees its last key and the window_left keys before it (keys t < kv_len - 1 - window_left are
    dropped, whatever q_positions says); < 0 (the default): every key. The logits soft cap is a
    run() value instead: any variant serves both, so layers of one model with different windows
    need one object (and plan) per distinct window, and any cap.

    q_len: query tokens per request (1..16; speculative verification), the request's newest,
    whose keys the cache already holds; q, o and lse then hold batch * q_len token rows.
    causal=True: token t of a request of n keys sees keys 0 .. n - q_len + t (each request needs
    at least q_len keys); False: every key. A window takes q_len 1. custom_mask=True: run()'s
    custom_mask says which keys each token sees instead (a speculative tree, say)."""

    def __init__(self, package, num_qo_heads, num_kv_heads, head_dim, page_size, dtype_q="bf16", dtype_kv=None,
                 dtype_o=None, layout="nhd", pos_encoding="none", window_left=-1, cuda_graph=False, max_batch=0,
                 kv_split="adaptive", kv_split_tokens=0, max_kv_len=0, q_len=1, causal=True, custom_mask=False):
        self.package, self.layout, self.page_size = package, layout, page_size
        self.q_len, self.causal, self.custom_mask = q_len, bool(causal), bool(custom_mask)
        self.num_qo_heads, self.num_kv_heads, self.head_dim = num_qo_heads, num_kv_heads, head_dim
        sliding, window = _window(window_left, "batch_decode")
        self.window_left = window if sliding else -1
        config = _capi.DecodeConfig(_text(dtype_q, "dtype_q", _DTYPES[:2]), _text(dtype_kv or dtype_q, "dtype_kv", _DTYPES),
                                    _text(dtype_o, "dtype_o", _DTYPES[:2]) if dtype_o else None,
                                    head_dim, num_qo_heads, num_kv_heads, page_size, _text(layout, "layout", ("nhd", "hnd")),
                                    _text(pos_encoding, "pos_encoding", _POSITIONS),
                                    sliding, window, int(cuda_graph), max_batch,
                                    _text(kv_split, "kv_split", _KV_SPLITS), kv_split_tokens, max_kv_len,
                                    q_len, 0 if causal else 1, int(bool(custom_mask)))
        handle = ctypes.c_void_p()
        _check(_capi.lib.aotinfer_batch_decode_create(package._handle, ctypes.byref(config), ctypes.byref(handle)))
        self._handle, self._address, self._batch = handle, handle.value, None

    def __del__(self):
        if getattr(self, "_handle", None):
            _capi.lib.aotinfer_batch_decode_destroy(self._handle)
            self._handle = self._address = None

    def workspace_sizes(self, max_batch, max_kv_len=0):
        """(float_bytes, int_bytes) of device workspace for plans of up to max_batch requests;
        kv_split="fixed" also needs the longest request's keys, max_kv_len."""
        f, i = ctypes.c_size_t(), ctypes.c_size_t()
        _check(_capi.lib.aotinfer_batch_decode_workspace_sizes(self._handle, max_batch, max_kv_len, ctypes.byref(f),
                                                               ctypes.byref(i)))
        return f.value, i.value

    def plan(self, kv_indptr, kv_last_page_len, float_workspace, int_workspace, kv_indices=None, num_pages=0,
             stream=None):
        """Host metadata: kv_indptr [batch + 1], kv_last_page_len [batch] (lists, numpy arrays or
        CPU tensors; int32 ones are read in place); workspaces are device buffers (uint8
        tensors), kept alive by this object until the next plan. stream=None: the current
        PyTorch stream, as run(). With kv_indices and num_pages, page ids are checked and run()
        checks that the pools hold num_pages pages."""
        status, batch = _decode_plan(self._address, kv_indptr, kv_last_page_len, kv_indices, num_pages,
                                     float_workspace, int_workspace, stream)
        if status:
            _raise(status)
        # run() reads the plan from these buffers: they live as long as the plan.
        self._batch, self._workspaces = batch, (float_workspace, int_workspace)

    def run(self, q, k_pages, v_pages, kv_indptr, kv_indices, kv_last_page_len, o, lse=None, q_positions=None,
            sm_scale=0.0, logits_soft_cap=0.0, rope_scale=1.0, rope_theta=1e4, k_scale=1.0, v_scale=1.0,
            stream=None, sinks=None, custom_mask=None, mask_indptr=None):
        """Runs the last plan. q, o [batch * q_len, num_qo_heads, head_dim]; lse [batch * q_len,
        num_qo_heads] float32 or None; k_pages, v_pages the pools in the config's layout (views of one
        [pages, 2, ...] tensor are fine); kv_indptr, kv_indices, kv_last_page_len (and
        q_positions) int32 device copies of what plan saw. logits_soft_cap > 0 caps the scaled
        scores (cap * tanh(score / cap)); <= 0: no cap. The window is the constructor's. sinks:
        attention-sink logits, float32 [num_qo_heads] on the GPU, or None: each head's softmax
        also holds its sink logit (in the units of the scaled scores, not soft-capped) with a zero
        value row, so e^sinks[h] joins the denominator and lse includes it. custom_mask=True in the
        constructor only: custom_mask and mask_indptr as BatchPrefill.run's, each request's mask
        [q_len, kv_len]."""
        status = _decode_run(self._address, q, k_pages, v_pages, kv_indptr, kv_indices, kv_last_page_len, o, lse,
                             q_positions, sinks, custom_mask, mask_indptr, sm_scale, logits_soft_cap, rope_scale, rope_theta, k_scale, v_scale,
                             stream)
        if status:
            _raise(status)


class BatchPrefill:
    """Batch prefill (many query tokens per request) over a paged or ragged KV cache, plan/run
    (aotinfer/batch_prefill.hpp). Query token t of a request with qo_len queries and kv_len keys
    sits at position kv_len - qo_len + t; mask="causal" lets it see keys 0 .. kv_len - qo_len + t,
    mask="custom" the keys its request's mask sets (run()'s custom_mask).

    window_left: a sliding window, fixed here because plans depend on it: query token t sees keys
    from kv_len - qo_len + t - window_left on (and, causal, none after its own); < 0 (the
    default): no window. The logits soft cap is a run() value, as for BatchDecode.
    pos_encoding="alibi" adds ALiBi biases at run time, on the variant without RoPE.

    head_dim is the width of q and K rows, head_dim_vo (None: head_dim) that of V and o rows;
    they differ only for MLA models' prefill (DeepSeek-V3, Kimi K2: 192 and 128), which is
    served with 16-bit K/V and pos_encoding="none"."""

    def __init__(self, package, num_qo_heads, num_kv_heads, head_dim, kv_storage="paged", page_size=16,
                 dtype_q="bf16", dtype_kv=None, dtype_o=None, layout="nhd", mask="causal", pos_encoding="none",
                 window_left=-1, cuda_graph=False, max_batch=0, max_total_q=0, kv_split="adaptive",
                 kv_split_tokens=0, max_kv_len=0, head_dim_vo=None):
        self.package, self.kv_storage, self.layout, self.page_size = package, kv_storage, layout, page_size
        self.num_qo_heads, self.num_kv_heads, self.head_dim = num_qo_heads, num_kv_heads, head_dim
        self.head_dim_vo = head_dim if head_dim_vo is None else head_dim_vo
        sliding, window = _window(window_left, "batch_prefill")
        self.window_left = window if sliding else -1
        config = _capi.PrefillConfig(_text(dtype_q, "dtype_q", _DTYPES[:2]),
                                     _text(dtype_kv or dtype_q, "dtype_kv", _DTYPES),
                                     _text(dtype_o, "dtype_o", _DTYPES[:2]) if dtype_o else None, head_dim,
                                     num_qo_heads, num_kv_heads, _text(kv_storage, "kv_storage", ("paged", "ragged")),
                                     page_size, _text(layout, "layout", ("nhd", "hnd")),
                                     _text(mask, "mask", ("none", "causal", "custom")),
                                     _text(pos_encoding, "pos_encoding", _POSITIONS), sliding, window,
                                     int(cuda_graph), max_batch, max_total_q,
                                     _text(kv_split, "kv_split", _KV_SPLITS), kv_split_tokens, max_kv_len,
                                     0 if head_dim_vo is None else head_dim_vo)
        handle = ctypes.c_void_p()
        _check(_capi.lib.aotinfer_batch_prefill_create(package._handle, ctypes.byref(config), ctypes.byref(handle)))
        self._handle, self._address, self._batch, self._total_q = handle, handle.value, None, None

    def __del__(self):
        if getattr(self, "_handle", None):
            _capi.lib.aotinfer_batch_prefill_destroy(self._handle)
            self._handle = self._address = None

    def workspace_sizes(self, max_total_q, max_batch, max_kv_len=0):
        """(float_bytes, int_bytes) of device workspace for plans of up to max_total_q query tokens
        in max_batch requests (the config's bounds in CUDA-graph mode); kv_split="fixed" also
        needs the longest request's keys, max_kv_len."""
        f, i = ctypes.c_size_t(), ctypes.c_size_t()
        _check(_capi.lib.aotinfer_batch_prefill_workspace_sizes(self._handle, max_total_q, max_batch, max_kv_len,
                                                                ctypes.byref(f), ctypes.byref(i)))
        return f.value, i.value

    def plan(self, qo_indptr, kv_indptr, float_workspace, int_workspace, kv_last_page_len=None, kv_indices=None,
             num_pages=0, stream=None):
        """Host metadata (lists, numpy arrays or CPU tensors; int32 ones are read in place):
        qo_indptr [batch + 1] in tokens, kv_indptr [batch + 1] in pages (paged, with
        kv_last_page_len [batch] and optionally kv_indices, then checked against num_pages) or in
        tokens (ragged); workspaces are device buffers (uint8 tensors), kept alive by this object
        until the next plan. stream=None: the current PyTorch stream, as run()."""
        self._batch = self._total_q = None
        status, batch, total_q = _prefill_plan(self._address, self.kv_storage == "paged", qo_indptr, kv_indptr,
                                               kv_last_page_len, kv_indices, num_pages, float_workspace, int_workspace,
                                               stream)
        if status:
            _raise(status)
        # run() reads the plan from these buffers: they live as long as the plan.
        self._batch, self._total_q, self._workspaces = batch, total_q, (float_workspace, int_workspace)

    def run(self, q, k, v, qo_indptr, kv_indptr, o, kv_indices=None, kv_last_page_len=None, lse=None, sm_scale=0.0,
            logits_soft_cap=0.0, rope_scale=1.0, rope_theta=1e4, stream=None, sinks=None, k_scale=1.0, v_scale=1.0,
            custom_mask=None, mask_indptr=None):
        """Runs the last plan. q [total_q, num_qo_heads, head_dim], o [total_q, num_qo_heads,
        head_dim_vo] (at least the planned total_q rows); lse [rows of o, num_qo_heads] float32 or
        None; k, v the page pools [pages, page_size, heads, dim] (nhd) or [pages, heads,
        page_size, dim] (hnd) when paged, [total_kv, num_kv_heads, dim] when ragged, dim head_dim
        for k and head_dim_vo for v (page- or token-strided views, of a fused QKV tensor say, are
        fine: each one's stride is read from it); qo_indptr, kv_indptr, kv_indices and
        kv_last_page_len are int32 device copies of what plan saw (the last two paged only).
        logits_soft_cap > 0 caps the scores, <= 0: no cap; the window is the constructor's. sinks:
        attention-sink logits, float32 [num_qo_heads] on the GPU, or None (as BatchDecode.run).
        k_scale, v_scale dequantise K and V (fp8 caches: scores use k * k_scale, values
        v * v_scale). mask="custom" only: custom_mask, uint8 on the GPU, holds each request's
        [qo_len, kv_len] mask as row-major bits packed little-endian (pack_custom_mask,
        FlashInfer's packed_custom_mask) from byte mask_indptr[i] on (int32 [batch + 1] on the
        GPU); it must hold at least its bytes rounded up to 4."""
        status = _prefill_run(self._address, q, k, v, qo_indptr, kv_indptr, kv_indices, kv_last_page_len, o, lse,
                              sinks, custom_mask, mask_indptr, sm_scale, logits_soft_cap, rope_scale, rope_theta,
                              k_scale, v_scale, stream)
        if status:
            _raise(status)


# --- Cascade: shared-prefix attention (aotinfer/cascade.hpp) ---------------------------------
# Set-up and run go through ctypes; run() describes its tensors, and the runtime checks each of
# them before anything is launched.


def _per_level(name, values, num_levels):
    if not isinstance(values, (list, tuple)) or len(values) != num_levels:
        got = f"{len(values)} entries" if isinstance(values, (list, tuple)) else type(values).__name__
        raise InvalidArgument(f"cascade: {name} must be a list of {num_levels} entries, one per level, got {got}", 1)
    return list(values)


def _level_int32(values, name):
    """Host metadata of one level as an int32 array of its own (the C call takes one pointer per
    level), with _host_int32's checks."""
    address, count, _keep = _host_int32(values, "cascade: " + name)
    return array.array("i", (ctypes.c_int32 * count).from_address(address)) if count else array.array("i")


def _level_pointers(arrays):
    return (_capi.c_int32_p * len(arrays))(*[ctypes.cast(a.buffer_info()[0], _capi.c_int32_p) for a in arrays])


def _device_buffer(buffer, name, where="cascade"):
    """(pointer, bytes) of a contiguous device workspace."""
    t = _tensor.tensor(buffer, name)
    if not t.on_gpu:
        raise InvalidArgument(f"{where}: {name}: the workspace must be GPU memory", 1)
    if t.strides != _tensor.contiguous_strides(t.shape) and t.nbytes > _tensor.DTYPE_SIZES.get(t.dtype, 1):
        raise InvalidArgument(f"{where}: {name}: the workspace must be contiguous", 1)
    return t.ptr, t.nbytes


def _stream(stream, like):
    """stream as a handle; None: the current PyTorch stream of like's device when like is a
    PyTorch GPU tensor (what CUDA-graph capture needs), else the default stream."""
    if stream is None and type(like).__module__.startswith("torch") and getattr(like, "is_cuda", False):
        import torch
        return torch.cuda.current_stream(like.device).cuda_stream
    return _tensor.stream_handle(stream)


def _described(x, name, where="cascade.run"):
    """x as an aotinfer_tensor (zeroed for None: the argument is absent)."""
    out = _capi.Tensor()
    if x is None:
        return out
    t = _tensor.tensor(x, name)
    if len(t.shape) > 4:
        raise InvalidArgument(f"{where}: {name}: expected at most 4 dimensions, got shape {list(t.shape)}", 1)
    out.data, out.ndim, out.dtype, out.device_type, out.device_id = t.ptr, len(t.shape), t.dtype, t.device_type, t.device_id
    for i, (size, stride) in enumerate(zip(t.shape, t.strides)):
        out.shape[i], out.strides[i] = size, stride
    out.dtype_name = t.dtype_name.encode()[:15]
    return out


class Cascade:
    """Cascade attention for requests sharing KV prefixes (aotinfer/cascade.hpp): num_levels paged
    batch prefills over one page pool, level 0 the most shared. Level l groups the same query
    tokens by its own qo_indptr and gives each group its own pages; each row attends to the
    union of its groups' keys, the levels' states merged. mask applies to the last level only
    (earlier levels are seen whole); sinks join the last level only. In CUDA-graph mode max_batch
    bounds each level's groups, and o (and lse) need max_total_q rows. window_left must stay < 0:
    a window counts positions, which restart in each level, so the runtime refuses one (by
    name); the logits soft cap is a run() value."""

    def __init__(self, package, num_levels, num_qo_heads, num_kv_heads, head_dim, page_size=16, dtype_q="bf16",
                 dtype_kv=None, dtype_o=None, layout="nhd", mask="causal", window_left=-1, cuda_graph=False,
                 max_batch=0, max_total_q=0, kv_split="adaptive", kv_split_tokens=0, max_kv_len=0):
        self.package, self.num_levels, self.layout, self.page_size = package, num_levels, layout, page_size
        self.num_qo_heads, self.num_kv_heads, self.head_dim = num_qo_heads, num_kv_heads, head_dim
        sliding, window = _window(window_left, "cascade")
        level = _capi.PrefillConfig(_text(dtype_q, "dtype_q", _DTYPES[:2]),
                                    _text(dtype_kv or dtype_q, "dtype_kv", _DTYPES[:2]),
                                    _text(dtype_o, "dtype_o", _DTYPES[:2]) if dtype_o else None, head_dim,
                                    num_qo_heads, num_kv_heads, b"paged", page_size,
                                    _text(layout, "layout", ("nhd", "hnd")), _text(mask, "mask", ("none", "causal")),
                                    b"none", sliding, window, int(cuda_graph), max_batch, max_total_q,
                                    _text(kv_split, "kv_split", _KV_SPLITS), kv_split_tokens, max_kv_len)
        config = _capi.CascadeConfig(level, num_levels)
        handle = ctypes.c_void_p()
        _check(_capi.lib.aotinfer_cascade_create(package._handle, ctypes.byref(config), ctypes.byref(handle)))
        self._handle, self._total_q = handle, None

    def __del__(self):
        if getattr(self, "_handle", None):
            _capi.lib.aotinfer_cascade_destroy(self._handle)
            self._handle = None

    def workspace_sizes(self, max_total_q, max_groups, max_kv_len=0):
        """(float_bytes, int_bytes) of device workspace for plans of up to max_total_q query tokens
        and max_groups groups in every level (the config's bounds in CUDA-graph mode);
        kv_split="fixed" also needs the longest group's keys, max_kv_len."""
        f, i = ctypes.c_size_t(), ctypes.c_size_t()
        _check(_capi.lib.aotinfer_cascade_workspace_sizes(self._handle, max_total_q, max_groups, max_kv_len,
                                                          ctypes.byref(f), ctypes.byref(i)))
        return f.value, i.value

    def plan(self, qo_indptr_list, kv_indptr_list, kv_last_page_len_list, float_workspace, int_workspace,
             kv_indices_list=None, num_pages=0, stream=None):
        """Host metadata, one entry per level (lists, NumPy arrays or CPU tensors): qo_indptr
        [groups + 1] in tokens (every level from 0 to the same total_q), kv_indptr [groups + 1] in
        pages, kv_last_page_len [groups], and optionally kv_indices (page ids, then checked
        against num_pages). Workspaces are device buffers (uint8 tensors), kept alive by this
        object until the next plan. stream=None: the current PyTorch stream, as run()."""
        self._total_q = None
        n = self.num_levels
        qo, kv, last = ([_level_int32(x, f"{name}[{l}]") for l, x in enumerate(_per_level(name, values, n))]
                        for name, values in (("qo_indptr_list", qo_indptr_list), ("kv_indptr_list", kv_indptr_list),
                                             ("kv_last_page_len_list", kv_last_page_len_list)))
        for l in range(n):  # the C call reads groups + 1 / groups entries of each
            if len(qo[l]) < 1:
                raise InvalidArgument(f"cascade: level {l} qo_indptr must have groups + 1 entries, got an empty array", 1)
            if len(kv[l]) != len(qo[l]) or len(last[l]) != len(qo[l]) - 1:
                raise InvalidArgument(f"cascade: level {l} has {len(qo[l])} qo_indptr, {len(kv[l])} kv_indptr and "
                                      f"{len(last[l])} kv_last_page_len entries; expected groups + 1, groups + 1, groups", 1)
        indices = None if kv_indices_list is None else [
            _level_int32(x, f"kv_indices_list[{l}]") for l, x in enumerate(_per_level("kv_indices_list", kv_indices_list, n))]
        num_groups = (ctypes.c_int32 * n)(*[len(a) - 1 for a in qo])
        num_indices = None if indices is None else (ctypes.c_int32 * n)(*[len(a) for a in indices])
        workspaces = (*_device_buffer(float_workspace, "float_workspace"), *_device_buffer(int_workspace, "int_workspace"))
        _check(_capi.lib.aotinfer_cascade_plan(self._handle, n, num_groups, _level_pointers(qo), _level_pointers(kv),
                                               _level_pointers(last), None if indices is None else _level_pointers(indices),
                                               num_indices, num_pages, *workspaces,
                                               _stream(stream, int_workspace)))
        # run() reads the plans from these buffers: they live as long as the plan.
        self._total_q, self._workspaces = qo[0][-1], (float_workspace, int_workspace)

    def run(self, q, k_pages, v_pages, qo_indptr_list, kv_indptr_list, kv_indices_list, kv_last_page_len_list, o,
            lse=None, sm_scale=0.0, logits_soft_cap=0.0, stream=None, sinks=None):
        """Runs the last plan. q, o [total_q, num_qo_heads, head_dim] (CUDA-graph mode: o with
        max_total_q rows); lse [rows of o, num_qo_heads] float32 or None; k_pages, v_pages the
        shared pools in the config's layout (views of one [pages, 2, ...] tensor are fine); the
        four lists hold each level's int32 device copies of what plan saw. logits_soft_cap > 0
        caps the scores, <= 0: no cap. sinks: float32 [num_qo_heads] attention-sink logits on the
        GPU, or None."""
        n = self.num_levels
        levels = [(_capi.Tensor * n)(*[_described(x, f"{name}[{l}]") for l, x in enumerate(_per_level(name, values, n))])
                  for name, values in (("qo_indptr_list", qo_indptr_list), ("kv_indptr_list", kv_indptr_list),
                                       ("kv_indices_list", kv_indices_list),
                                       ("kv_last_page_len_list", kv_last_page_len_list))]
        pointer = ctypes.POINTER(_capi.Tensor)
        tensors = _capi.CascadeTensors(_described(q, "q"), _described(k_pages, "k_pages"), _described(v_pages, "v_pages"),
                                       _described(o, "o"), _described(lse, "lse"), _described(sinks, "sinks"),
                                       *[ctypes.cast(arrays, pointer) for arrays in levels])
        scalars = _capi.Scalars(sm_scale, logits_soft_cap, 1.0, 1e4, 1.0, 1.0)
        _check(_capi.lib.aotinfer_cascade_tensors_run(self._handle, ctypes.byref(tensors), ctypes.byref(scalars),
                                                      _stream(stream, q)))


class BatchMlaDecode:
    """Multi-head latent attention decode (DeepSeek-V3/R1, Kimi K2) over a paged latent cache,
    plan/run (aotinfer/batch_mla_decode.hpp). Every query head attends to the cache's rows: scores
    (q_nope . ckv + q_pe . kpe) * sm_scale, values the ckv rows. Each request brings q_len (1..4)
    new tokens, the last of its cache, causal among themselves (multi-token prediction).

    dtype is the queries' and the output's type; dtype_kv the cache's: None (dtype) or "e4m3", an
    fp8 cache whose run() takes per-tensor ckv_scale and kpe_scale.

    cuda_graph=True fixes the grids for graph capture: every plan has at most max_batch requests of
    q_len tokens, and a graph captured once replays later plans (their page ids in the same
    kv_indices buffer)."""

    def __init__(self, package, num_heads, page_size=64, dtype="bf16", cuda_graph=False, max_batch=0, q_len=0,
                 dtype_kv=None):
        self.package, self.num_heads, self.page_size, self.dtype = package, num_heads, page_size, dtype
        self.dtype_kv = dtype if dtype_kv is None else dtype_kv
        config = _capi.MlaDecodeConfig(_text(dtype, "dtype", _DTYPES[:2]), num_heads, page_size, int(cuda_graph),
                                       max_batch, q_len, None if dtype_kv is None else _text(dtype_kv, "dtype_kv",
                                                                                             _DTYPES[:3]))
        handle = ctypes.c_void_p()
        _check(_capi.lib.aotinfer_batch_mla_decode_create(package._handle, ctypes.byref(config), ctypes.byref(handle)))
        self._handle, self._q_len = handle, None

    def __del__(self):
        if getattr(self, "_handle", None):
            _capi.lib.aotinfer_batch_mla_decode_destroy(self._handle)
            self._handle = None

    def workspace_sizes(self, max_batch, max_q_len=4):
        """(float_bytes, int_bytes) of device workspace for plans of up to max_batch requests of up
        to max_q_len new tokens."""
        f, i = ctypes.c_size_t(), ctypes.c_size_t()
        _check(_capi.lib.aotinfer_batch_mla_decode_workspace_sizes(self._handle, max_batch, max_q_len, ctypes.byref(f),
                                                                   ctypes.byref(i)))
        return f.value, i.value

    def plan(self, kv_indptr, kv_last_page_len, q_len, float_workspace, int_workspace, kv_indices=None, num_pages=0,
             stream=None):
        """Host metadata: kv_indptr [batch + 1] in pages, kv_last_page_len [batch] (lists, NumPy
        arrays or CPU tensors); q_len the new tokens of every request (1..4). Workspaces are
        device buffers (uint8 tensors), kept alive by this object until the next plan. With
        kv_indices and num_pages, page ids are checked and run() checks that the pools hold
        num_pages pages. stream=None: the current PyTorch stream, as run()."""
        self._q_len = None
        indptr, n_indptr, keep_indptr = _host_int32(kv_indptr, "batch_mla_decode: kv_indptr")
        last, n_last, keep_last = _host_int32(kv_last_page_len, "batch_mla_decode: kv_last_page_len")
        if n_indptr != n_last + 1:
            raise InvalidArgument(f"batch_mla_decode: kv_indptr has {n_indptr} entries and kv_last_page_len "
                                  f"{n_last}; expected batch + 1 and batch", 1)
        indices, n_indices, keep_indices = (None, 0, None) if kv_indices is None else _host_int32(
            kv_indices, "batch_mla_decode: kv_indices")
        as_int32 = lambda address: ctypes.cast(address, _capi.c_int32_p) if address else None
        workspaces = (*_device_buffer(float_workspace, "float_workspace", "batch_mla_decode"),
                      *_device_buffer(int_workspace, "int_workspace", "batch_mla_decode"))
        _check(_capi.lib.aotinfer_batch_mla_decode_plan(self._handle, as_int32(indptr), n_last, as_int32(last),
                                                        as_int32(indices), n_indices, num_pages, q_len, *workspaces,
                                                        _stream(stream, int_workspace)))
        del keep_indptr, keep_last, keep_indices  # read by the call above: the plan holds its own copy
        self._q_len, self._workspaces = q_len, (float_workspace, int_workspace)

    def run(self, q_nope, q_pe, ckv, kpe, kv_indices, o, lse=None, sm_scale=0.0, stream=None, ckv_scale=1.0,
            kpe_scale=1.0):
        """Runs the last plan. q_nope [batch * q_len, num_heads, 512] and q_pe [batch * q_len,
        num_heads, 64] (token rows may be strided); ckv [pages, page_size, 512] and kpe [pages,
        page_size, 64] (pages may be strided: views of one [pages, page_size, 576] tensor);
        kv_indices the int32 device copy of the page ids plan saw; o [batch * q_len, num_heads,
        512]; lse float32 [batch * q_len, num_heads] (natural log) or None. sm_scale > 0 is
        required: MLA scales by the head_dim before absorption (1 / sqrt(192) for DeepSeek-V3).
        ckv_scale and kpe_scale dequantise an e4m3 cache (real values scale * stored); a 16-bit
        cache takes 1."""
        where = "batch_mla_decode.run"
        tensors = _capi.MlaDecodeTensors(*[_described(x, name, where) for x, name in (
            (q_nope, "q_nope"), (q_pe, "q_pe"), (ckv, "ckv"), (kpe, "kpe"), (kv_indices, "kv_indices"), (o, "o"),
            (lse, "lse"))])
        scalars = _capi.MlaScalars(float(sm_scale), float(ckv_scale), float(kpe_scale))
        _check(_capi.lib.aotinfer_batch_mla_decode_tensors_run(self._handle, ctypes.byref(tensors), ctypes.byref(scalars),
                                                               _stream(stream, o)))
