"""ctypes bindings of the runtime's C API (aotinfer/aotinfer.h). Internal."""
import ctypes
import os

_here = os.path.dirname(os.path.abspath(__file__))
_library = os.environ.get("AOTINFER_LIBRARY") or os.path.join(_here, "libaotinfer.so")
lib = ctypes.CDLL(_library)

c_int32, c_size, c_void, c_char = ctypes.c_int32, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_char_p
c_float, c_int32_p, c_float_p = ctypes.c_float, ctypes.POINTER(ctypes.c_int32), ctypes.POINTER(ctypes.c_float)


class MergeStateParams(ctypes.Structure):
    _fields_ = [("v_a", c_void), ("s_a", c_void), ("v_b", c_void), ("s_b", c_void),
                ("v_out", c_void), ("s_out", c_void), ("rows", ctypes.c_int64)]


class PagedKv(ctypes.Structure):
    _fields_ = [("k_pages", c_void), ("v_pages", c_void), ("indptr", c_void), ("indices", c_void),
                ("last_page_len", c_void), ("stride_page", ctypes.c_int64), ("stride_token", ctypes.c_int64),
                ("stride_head", ctypes.c_int64), ("page_size", c_int32), ("num_kv_heads", c_int32)]


class AppendParams(ctypes.Structure):
    _fields_ = [("k", c_void), ("v", c_void), ("k_stride_token", ctypes.c_int64), ("v_stride_token", ctypes.c_int64),
                ("batch_indices", c_void), ("positions", c_void), ("kv", PagedKv), ("nnz", ctypes.c_int64)]


class DecodeConfig(ctypes.Structure):
    _fields_ = [("dtype_q", c_char), ("dtype_kv", c_char), ("dtype_o", c_char), ("head_dim", c_int32),
                ("num_qo_heads", c_int32), ("num_kv_heads", c_int32), ("page_size", c_int32), ("layout", c_char),
                ("pos_encoding", c_char), ("sliding_window", c_int32), ("soft_cap", c_int32),
                ("cuda_graph", c_int32), ("max_batch", c_int32)]


class DecodeRunArgs(ctypes.Structure):
    _fields_ = [("batch", c_int32), ("q", c_void), ("k_pages", c_void), ("v_pages", c_void),
                ("kv_indptr", c_void), ("kv_indices", c_void), ("kv_last_page_len", c_void), ("o", c_void),
                ("lse", c_void), ("q_positions", c_void), ("sm_scale", c_float), ("logits_soft_cap", c_float),
                ("rope_scale", c_float), ("rope_theta", c_float), ("k_scale", c_float), ("v_scale", c_float),
                ("window_left", c_int32)]


class PrefillConfig(ctypes.Structure):
    _fields_ = [("dtype_q", c_char), ("dtype_kv", c_char), ("dtype_o", c_char), ("head_dim", c_int32),
                ("num_qo_heads", c_int32), ("num_kv_heads", c_int32), ("kv_storage", c_char), ("page_size", c_int32),
                ("layout", c_char), ("mask", c_char), ("pos_encoding", c_char), ("sliding_window", c_int32),
                ("soft_cap", c_int32), ("cuda_graph", c_int32), ("max_batch", c_int32), ("max_total_q", ctypes.c_int64)]


class PrefillRunArgs(ctypes.Structure):
    _fields_ = [("batch", c_int32), ("total_q", ctypes.c_int64), ("q", c_void), ("qo_indptr", c_void), ("k", c_void),
                ("v", c_void), ("kv_indptr", c_void), ("kv_indices", c_void), ("kv_last_page_len", c_void),
                ("o", c_void), ("lse", c_void), ("sm_scale", c_float), ("logits_soft_cap", c_float),
                ("rope_scale", c_float), ("rope_theta", c_float), ("window_left", c_int32)]


def _declare(name, restype, *argtypes):
    fn = getattr(lib, name)
    fn.restype, fn.argtypes = restype, list(argtypes)


_status = ctypes.c_int
_declare("aotinfer_last_error", c_char)
_declare("aotinfer_package_open", _status, c_char, ctypes.POINTER(c_void))
_declare("aotinfer_package_close", None, c_void)
_declare("aotinfer_package_variant_count", c_size, c_void)
_declare("aotinfer_package_variant_uri", c_char, c_void, c_size)
_declare("aotinfer_package_find", _status, c_void, c_char)
_declare("aotinfer_merge_state", _status, c_void, c_char, ctypes.c_int, ctypes.POINTER(MergeStateParams), c_void)
_declare("aotinfer_append_paged_kv", _status, c_void, c_char, ctypes.c_int, ctypes.POINTER(AppendParams), c_void)
_declare("aotinfer_batch_decode_create", _status, c_void, ctypes.POINTER(DecodeConfig), ctypes.POINTER(c_void))
_declare("aotinfer_batch_decode_destroy", None, c_void)
_declare("aotinfer_batch_decode_workspace_sizes", _status, c_void, c_int32, ctypes.POINTER(c_size), ctypes.POINTER(c_size))
_declare("aotinfer_batch_decode_plan", _status, c_void, c_int32_p, c_int32, c_int32_p, c_int32_p, c_int32, c_int32,
         c_void, c_size, c_void, c_size, c_void)
_declare("aotinfer_batch_decode_run", _status, c_void, ctypes.POINTER(DecodeRunArgs), c_void)
_declare("aotinfer_batch_prefill_create", _status, c_void, ctypes.POINTER(PrefillConfig), ctypes.POINTER(c_void))
_declare("aotinfer_batch_prefill_destroy", None, c_void)
_declare("aotinfer_batch_prefill_workspace_sizes", _status, c_void, ctypes.c_int64, c_int32, ctypes.POINTER(c_size),
         ctypes.POINTER(c_size))
_declare("aotinfer_batch_prefill_plan_paged", _status, c_void, c_int32_p, c_int32_p, c_int32, c_int32_p, c_int32_p,
         c_int32, c_int32, c_void, c_size, c_void, c_size, c_void)
_declare("aotinfer_batch_prefill_plan_ragged", _status, c_void, c_int32_p, c_int32_p, c_int32, c_void, c_size, c_void,
         c_size, c_void)
_declare("aotinfer_batch_prefill_run", _status, c_void, ctypes.POINTER(PrefillRunArgs), c_void)
