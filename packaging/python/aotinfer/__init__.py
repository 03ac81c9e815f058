"""aotinfer: ahead-of-time attention kernels, loaded from a prebuilt kernel package.

    import aotinfer
    pkg = aotinfer.Package()                       # the package inside this wheel
    pkg.variants("batch_decode", head_dim=128)     # which variants exist
    aotinfer.merge_state(pkg, v_a, s_a, v_b, s_b, v_out, s_out)

Tensors are any GPU arrays exposing DLPack or __cuda_array_interface__ (PyTorch, CuPy);
streams are None (default stream), an int handle or a stream object. Errors raise
aotinfer.Error subclasses carrying the runtime's message. Importing needs neither a compiler
nor PyTorch; running kernels needs the NVIDIA driver.
"""
import ctypes
import math

from . import _capi
from ._tensor import stream_handle, view

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


def _check(status):
    if status != 0:
        raise _ERRORS.get(status, Error)(_capi.lib.aotinfer_last_error().decode(), status)


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
        self._handle = handle

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


def _ptr(x):
    return None if x is None else x.ptr


def _require(cond, message):
    if not cond:
        raise InvalidArgument(message, 1)


def merge_state(package, v_a, s_a, v_b, s_b, v_out, s_out=None, stream=None):
    """Merges two attention states row by row (params/merge_state.h): v_* [..., head_dim]
    f16/bf16, s_* [...] float32 log-sum-exp. v_out may be v_a (in place)."""
    va, sa, vb, sb, vo = (view(x, n) for x, n in ((v_a, "v_a"), (s_a, "s_a"), (v_b, "v_b"), (s_b, "s_b"), (v_out, "v_out")))
    so = view(s_out, "s_out") if s_out is not None else None
    for t, n in ((va, "v_a"), (vb, "v_b"), (vo, "v_out")):
        _require(t.shape == va.shape and t.dtype == va.dtype and t.is_contiguous(),
                 f"merge_state: {n} must be contiguous with v_a's shape {va.shape} and dtype {va.dtype}")
    rows = math.prod(va.shape[:-1])
    for t, n in ((sa, "s_a"), (sb, "s_b"), (so, "s_out")):
        _require(t is None or (t.dtype == "f32" and math.prod(t.shape) == rows and t.is_contiguous()),
                 f"merge_state: {n} must be contiguous float32 with {rows} elements")
    p = _capi.MergeStateParams(va.ptr, sa.ptr, vb.ptr, sb.ptr, vo.ptr, _ptr(so), rows)
    _check(_capi.lib.aotinfer_merge_state(package._handle, va.dtype.encode(), va.shape[-1], ctypes.byref(p),
                                          stream_handle(stream)))


def _kv_strides(layout, page_size, num_kv_heads, head_dim):
    if layout not in ("nhd", "hnd"):
        raise InvalidArgument(f'layout must be "nhd" or "hnd", got {layout!r}', 1)
    page = page_size * num_kv_heads * head_dim
    return (page, num_kv_heads * head_dim, head_dim) if layout == "nhd" else (page, head_dim, page_size * head_dim)


def append_paged_kv(package, k, v, batch_indices, positions, k_pages, v_pages, kv_indptr, kv_indices,
                    kv_last_page_len, layout="nhd", stream=None):
    """Writes new tokens k, v [nnz, num_kv_heads, head_dim] into their pages (params/append_paged_kv.h);
    k_pages/v_pages are the pools [pages, page_size, heads, dim] (nhd) or [pages, heads, page_size, dim] (hnd)."""
    kt, vt, kp = view(k, "k"), view(v, "v"), view(k_pages, "k_pages")
    _require(len(kt.shape) == 3 and vt.shape == kt.shape, "append_paged_kv: k and v must be [nnz, num_kv_heads, head_dim]")
    nnz, heads, dim = kt.shape
    page_size = kp.shape[1] if layout == "nhd" else kp.shape[2]
    kv = _capi.PagedKv(kp.ptr, view(v_pages, "v_pages").ptr, view(kv_indptr).ptr, view(kv_indices).ptr,
                       view(kv_last_page_len).ptr, *_kv_strides(layout, page_size, heads, dim), page_size, heads)
    p = _capi.AppendParams(kt.ptr, vt.ptr, kt.strides[0], vt.strides[0], view(batch_indices).ptr, view(positions).ptr, kv, nnz)
    _check(_capi.lib.aotinfer_append_paged_kv(package._handle, kt.dtype.encode(), dim, ctypes.byref(p), stream_handle(stream)))


def _int32_array(values, name):
    values = [int(x) for x in (values.tolist() if hasattr(values, "tolist") else values)]
    return (ctypes.c_int32 * max(1, len(values)))(*values), len(values)


class BatchDecode:
    """Batch decode over a paged KV cache, plan/run (aotinfer/batch_decode.hpp)."""

    def __init__(self, package, num_qo_heads, num_kv_heads, head_dim, page_size, dtype_q="bf16", dtype_kv=None,
                 dtype_o=None, layout="nhd", pos_encoding="none", sliding_window=False, soft_cap=False,
                 cuda_graph=False, max_batch=0):
        self.package, self.layout, self.page_size = package, layout, page_size
        self.num_kv_heads, self.head_dim = num_kv_heads, head_dim
        config = _capi.DecodeConfig(dtype_q.encode(), (dtype_kv or dtype_q).encode(), dtype_o.encode() if dtype_o else None,
                                    head_dim, num_qo_heads, num_kv_heads, page_size, layout.encode(),
                                    pos_encoding.encode(), int(sliding_window), int(soft_cap), int(cuda_graph), max_batch)
        handle = ctypes.c_void_p()
        _check(_capi.lib.aotinfer_batch_decode_create(package._handle, ctypes.byref(config), ctypes.byref(handle)))
        self._handle, self._batch = handle, None

    def __del__(self):
        if getattr(self, "_handle", None):
            _capi.lib.aotinfer_batch_decode_destroy(self._handle)
            self._handle = None

    def workspace_sizes(self, max_batch):
        """(float_bytes, int_bytes) of device workspace for plans of up to max_batch requests."""
        f, i = ctypes.c_size_t(), ctypes.c_size_t()
        _check(_capi.lib.aotinfer_batch_decode_workspace_sizes(self._handle, max_batch, ctypes.byref(f), ctypes.byref(i)))
        return f.value, i.value

    def plan(self, kv_indptr, kv_last_page_len, float_workspace, int_workspace, kv_indices=None, num_pages=0,
             stream=None):
        """Host metadata (lists, numpy or CPU tensors); workspaces are device buffers (uint8 tensors)."""
        indptr, n = _int32_array(kv_indptr, "kv_indptr")
        last, _ = _int32_array(kv_last_page_len, "kv_last_page_len")
        indices, count = _int32_array(kv_indices, "kv_indices") if kv_indices is not None else (None, 0)
        fw, iw = view(float_workspace, "float_workspace"), view(int_workspace, "int_workspace")
        _check(_capi.lib.aotinfer_batch_decode_plan(
            self._handle, indptr, n - 1, last, indices, count, num_pages, fw.ptr, math.prod(fw.shape) * _itemsize(fw),
            iw.ptr, math.prod(iw.shape) * _itemsize(iw), stream_handle(stream)))
        self._batch = n - 1

    def run(self, q, k_pages, v_pages, kv_indptr, kv_indices, kv_last_page_len, o, lse=None, q_positions=None,
            sm_scale=0.0, logits_soft_cap=0.0, rope_scale=1.0, rope_theta=1e4, k_scale=1.0, v_scale=1.0,
            window_left=-1, stream=None):
        """q, o [batch, num_qo_heads, head_dim]; lse [batch, num_qo_heads] float32 or None."""
        qt = view(q, "q")
        args = _capi.DecodeRunArgs(qt.shape[0], qt.ptr, view(k_pages, "k_pages").ptr, view(v_pages, "v_pages").ptr,
                                   view(kv_indptr).ptr, view(kv_indices).ptr, view(kv_last_page_len).ptr,
                                   view(o, "o").ptr, _ptr(view(lse) if lse is not None else None),
                                   _ptr(view(q_positions) if q_positions is not None else None), sm_scale,
                                   logits_soft_cap, rope_scale, rope_theta, k_scale, v_scale, window_left)
        _check(_capi.lib.aotinfer_batch_decode_run(self._handle, ctypes.byref(args), stream_handle(stream)))


class BatchPrefill:
    """Batch prefill (many query tokens per request) over a paged or ragged KV cache, plan/run
    (aotinfer/batch_prefill.hpp). Query token t of a request with qo_len queries and kv_len keys
    sits at position kv_len - qo_len + t; mask="causal" lets it see keys 0 .. kv_len - qo_len + t."""

    def __init__(self, package, num_qo_heads, num_kv_heads, head_dim, kv_storage="paged", page_size=16,
                 dtype_q="bf16", dtype_kv=None, dtype_o=None, layout="nhd", mask="causal", pos_encoding="none",
                 sliding_window=False, soft_cap=False, cuda_graph=False, max_batch=0, max_total_q=0):
        self.package, self.kv_storage, self.layout, self.page_size = package, kv_storage, layout, page_size
        self.num_qo_heads, self.num_kv_heads, self.head_dim = num_qo_heads, num_kv_heads, head_dim
        config = _capi.PrefillConfig(dtype_q.encode(), (dtype_kv or dtype_q).encode(),
                                     dtype_o.encode() if dtype_o else None, head_dim, num_qo_heads, num_kv_heads,
                                     kv_storage.encode(), page_size, layout.encode(), mask.encode(),
                                     pos_encoding.encode(), int(sliding_window), int(soft_cap), int(cuda_graph),
                                     max_batch, max_total_q)
        handle = ctypes.c_void_p()
        _check(_capi.lib.aotinfer_batch_prefill_create(package._handle, ctypes.byref(config), ctypes.byref(handle)))
        self._handle, self._batch, self._total_q = handle, None, None

    def __del__(self):
        if getattr(self, "_handle", None):
            _capi.lib.aotinfer_batch_prefill_destroy(self._handle)
            self._handle = None

    def workspace_sizes(self, max_total_q, max_batch):
        """(float_bytes, int_bytes) of device workspace for plans of up to max_total_q query tokens
        in max_batch requests (the config's bounds in CUDA-graph mode)."""
        f, i = ctypes.c_size_t(), ctypes.c_size_t()
        _check(_capi.lib.aotinfer_batch_prefill_workspace_sizes(self._handle, max_total_q, max_batch, ctypes.byref(f),
                                                                ctypes.byref(i)))
        return f.value, i.value

    def plan(self, qo_indptr, kv_indptr, float_workspace, int_workspace, kv_last_page_len=None, kv_indices=None,
             num_pages=0, stream=None):
        """Host metadata (lists, numpy or CPU tensors): qo_indptr [batch + 1] in tokens, kv_indptr
        [batch + 1] in pages (paged, with kv_last_page_len [batch] and optionally kv_indices, then
        checked against num_pages) or in tokens (ragged); workspaces are device buffers (uint8 tensors)."""
        self._batch = self._total_q = None
        qo, n = _int32_array(qo_indptr, "qo_indptr")
        kv, n_kv = _int32_array(kv_indptr, "kv_indptr")
        _require(n >= 1, "batch_prefill: qo_indptr must have batch + 1 entries, got an empty array")
        _require(n_kv == n, f"batch_prefill: qo_indptr has {n} entries, kv_indptr {n_kv}; both need batch + 1")
        fw, iw = view(float_workspace, "float_workspace"), view(int_workspace, "int_workspace")
        ws = (fw.ptr, math.prod(fw.shape) * _itemsize(fw), iw.ptr, math.prod(iw.shape) * _itemsize(iw))
        if self.kv_storage == "paged":
            _require(kv_last_page_len is not None, "batch_prefill: paged KV needs kv_last_page_len")
            last, n_last = _int32_array(kv_last_page_len, "kv_last_page_len")
            _require(n_last == n - 1, f"batch_prefill: kv_last_page_len has {n_last} entries, the batch is {n - 1}")
            indices, count = _int32_array(kv_indices, "kv_indices") if kv_indices is not None else (None, 0)
            _check(_capi.lib.aotinfer_batch_prefill_plan_paged(self._handle, qo, kv, n - 1, last, indices, count,
                                                               num_pages, *ws, stream_handle(stream)))
        else:
            _check(_capi.lib.aotinfer_batch_prefill_plan_ragged(self._handle, qo, kv, n - 1, *ws,
                                                                stream_handle(stream)))
        self._batch, self._total_q = n - 1, qo[n - 1]

    def run(self, q, k, v, qo_indptr, kv_indptr, o, kv_indices=None, kv_last_page_len=None, lse=None, sm_scale=0.0,
            logits_soft_cap=0.0, rope_scale=1.0, rope_theta=1e4, window_left=-1, stream=None):
        """Runs the last plan. q, o [total_q, num_qo_heads, head_dim] (at least the planned total_q
        rows); lse [total_q, num_qo_heads] float32 or None; k, v the page pools
        [pages, page_size, heads, dim] (nhd) or [pages, heads, page_size, dim] (hnd) when paged,
        [total_kv, num_kv_heads, head_dim] when ragged; qo_indptr, kv_indptr, kv_indices and
        kv_last_page_len are device int32 copies of what plan saw (the last two paged only)."""
        _require(self._batch is not None, "batch_prefill: run() needs a successful plan first")
        qt, ot = view(q, "q"), view(o, "o")
        for t, n in ((qt, "q"), (ot, "o")):
            _require(len(t.shape) == 3 and t.shape[1:] == (self.num_qo_heads, self.head_dim) and
                     t.shape[0] >= self._total_q,
                     f"batch_prefill: {n} must be [total_q >= {self._total_q}, {self.num_qo_heads}, {self.head_dim}], "
                     f"got {list(t.shape)}")
        args = _capi.PrefillRunArgs(self._batch, self._total_q, qt.ptr, view(qo_indptr, "qo_indptr").ptr,
                                    view(k, "k").ptr, view(v, "v").ptr, view(kv_indptr, "kv_indptr").ptr,
                                    _ptr(view(kv_indices, "kv_indices") if kv_indices is not None else None),
                                    _ptr(view(kv_last_page_len, "kv_last_page_len")
                                         if kv_last_page_len is not None else None),
                                    ot.ptr, _ptr(view(lse, "lse") if lse is not None else None), sm_scale,
                                    logits_soft_cap, rope_scale, rope_theta, window_left)
        _check(_capi.lib.aotinfer_batch_prefill_run(self._handle, ctypes.byref(args), stream_handle(stream)))


def _itemsize(t):
    return {"f16": 2, "bf16": 2, "f32": 4, "i32": 4, "u8": 1, "e4m3": 1, "e5m2": 1}.get(t.dtype, 1)
