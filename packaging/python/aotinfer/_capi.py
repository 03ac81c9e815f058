"""ctypes bindings of the runtime's C API (aotinfer/aotinfer.h). Internal.

The structs mirrored here are checked on import against the layout the library reports
(aotinfer_abi_layout), so a header change cannot silently shift a field: a mismatch is an
ImportError naming the struct and field. The per-call entry points are reached through _ext.c,
which is compiled against the header itself."""
import ctypes
import json
import os

_here = os.path.dirname(os.path.abspath(__file__))
_library = os.environ.get("AOTINFER_LIBRARY") or os.path.join(_here, "libaotinfer.so")
lib = ctypes.CDLL(_library)

c_int32, c_size, c_void, c_char = ctypes.c_int32, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_char_p
c_int32_p = ctypes.POINTER(ctypes.c_int32)


class DecodeConfig(ctypes.Structure):
    _fields_ = [("dtype_q", c_char), ("dtype_kv", c_char), ("dtype_o", c_char), ("head_dim", c_int32),
                ("num_qo_heads", c_int32), ("num_kv_heads", c_int32), ("page_size", c_int32), ("layout", c_char),
                ("pos_encoding", c_char), ("sliding_window", c_int32), ("window_left", c_int32),
                ("cuda_graph", c_int32), ("max_batch", c_int32), ("kv_split", c_char), ("kv_split_tokens", c_int32),
                ("max_kv_len", ctypes.c_int64), ("q_len", c_int32), ("non_causal", c_int32),
                ("custom_mask", c_int32)]


class PrefillConfig(ctypes.Structure):
    _fields_ = [("dtype_q", c_char), ("dtype_kv", c_char), ("dtype_o", c_char), ("head_dim", c_int32),
                ("num_qo_heads", c_int32), ("num_kv_heads", c_int32), ("kv_storage", c_char), ("page_size", c_int32),
                ("layout", c_char), ("mask", c_char), ("pos_encoding", c_char), ("sliding_window", c_int32),
                ("window_left", c_int32), ("cuda_graph", c_int32), ("max_batch", c_int32), ("max_total_q", ctypes.c_int64),
                ("kv_split", c_char), ("kv_split_tokens", c_int32), ("max_kv_len", ctypes.c_int64),
                ("head_dim_vo", c_int32)]


# C struct name -> its mirror.
MIRRORS = {"aotinfer_batch_decode_config": DecodeConfig, "aotinfer_batch_prefill_config": PrefillConfig}


def _declare(name, restype, *argtypes):
    fn = getattr(lib, name)
    fn.restype, fn.argtypes = restype, list(argtypes)


_status = ctypes.c_int
_declare("aotinfer_abi_layout", c_char)
_declare("aotinfer_last_error", c_char)
_declare("aotinfer_package_open", _status, c_char, ctypes.POINTER(c_void))
_declare("aotinfer_package_close", None, c_void)
_declare("aotinfer_package_variant_count", c_size, c_void)
_declare("aotinfer_package_variant_uri", c_char, c_void, c_size)
_declare("aotinfer_package_find", _status, c_void, c_char)
_declare("aotinfer_batch_decode_create", _status, c_void, ctypes.POINTER(DecodeConfig), ctypes.POINTER(c_void))
_declare("aotinfer_batch_decode_destroy", None, c_void)
_declare("aotinfer_batch_decode_workspace_sizes", _status, c_void, c_int32, ctypes.c_int64, ctypes.POINTER(c_size),
         ctypes.POINTER(c_size))
_declare("aotinfer_batch_decode_plan", _status, c_void, c_int32_p, c_int32, c_int32_p, c_int32_p, c_int32, c_int32,
         c_void, c_size, c_void, c_size, c_void)
_declare("aotinfer_batch_prefill_create", _status, c_void, ctypes.POINTER(PrefillConfig), ctypes.POINTER(c_void))
_declare("aotinfer_batch_prefill_destroy", None, c_void)
_declare("aotinfer_batch_prefill_workspace_sizes", _status, c_void, ctypes.c_int64, c_int32, ctypes.c_int64,
         ctypes.POINTER(c_size), ctypes.POINTER(c_size))
_declare("aotinfer_batch_prefill_plan_paged", _status, c_void, c_int32_p, c_int32_p, c_int32, c_int32_p, c_int32_p,
         c_int32, c_int32, c_void, c_size, c_void, c_size, c_void)
_declare("aotinfer_batch_prefill_plan_ragged", _status, c_void, c_int32_p, c_int32_p, c_int32, c_void, c_size, c_void,
         c_size, c_void)


# --- Cascade (aotinfer/cascade.hpp): set-up and run through ctypes, with described tensors ----

class Tensor(ctypes.Structure):  # aotinfer_tensor
    _fields_ = [("data", c_void), ("shape", ctypes.c_int64 * 4), ("strides", ctypes.c_int64 * 4), ("ndim", c_int32),
                ("dtype", c_int32), ("device_type", c_int32), ("device_id", c_int32), ("dtype_name", ctypes.c_char * 16)]


class Scalars(ctypes.Structure):  # aotinfer_attention_scalars
    _fields_ = [("sm_scale", ctypes.c_float), ("logits_soft_cap", ctypes.c_float), ("rope_scale", ctypes.c_float),
                ("rope_theta", ctypes.c_float), ("k_scale", ctypes.c_float), ("v_scale", ctypes.c_float)]


class CascadeConfig(ctypes.Structure):
    _fields_ = [("level", PrefillConfig), ("num_levels", c_int32)]


class CascadeTensors(ctypes.Structure):
    _fields_ = [("q", Tensor), ("k_pages", Tensor), ("v_pages", Tensor), ("o", Tensor), ("lse", Tensor),
                ("sinks", Tensor), ("qo_indptr", ctypes.POINTER(Tensor)), ("kv_indptr", ctypes.POINTER(Tensor)),
                ("kv_indices", ctypes.POINTER(Tensor)), ("kv_last_page_len", ctypes.POINTER(Tensor))]


MIRRORS.update({"aotinfer_tensor": Tensor, "aotinfer_attention_scalars": Scalars,
                "aotinfer_cascade_config": CascadeConfig, "aotinfer_cascade_tensors": CascadeTensors})

c_int32_pp = ctypes.POINTER(c_int32_p)
_declare("aotinfer_cascade_create", _status, c_void, ctypes.POINTER(CascadeConfig), ctypes.POINTER(c_void))
_declare("aotinfer_cascade_destroy", None, c_void)
_declare("aotinfer_cascade_workspace_sizes", _status, c_void, ctypes.c_int64, c_int32, ctypes.c_int64, ctypes.POINTER(c_size),
         ctypes.POINTER(c_size))
_declare("aotinfer_cascade_plan", _status, c_void, c_int32, c_int32_p, c_int32_pp, c_int32_pp, c_int32_pp, c_int32_pp,
         c_int32_p, c_int32, c_void, c_size, c_void, c_size, c_void)
_declare("aotinfer_cascade_tensors_run", _status, c_void, ctypes.POINTER(CascadeTensors), ctypes.POINTER(Scalars), c_void)


# --- Multi-head latent attention decode (aotinfer/batch_mla_decode.hpp), through ctypes ---------

class MlaDecodeConfig(ctypes.Structure):
    _fields_ = [("dtype", c_char), ("num_heads", c_int32), ("page_size", c_int32), ("cuda_graph", c_int32),
                ("max_batch", c_int32), ("q_len", c_int32), ("dtype_kv", c_char)]


class MlaDecodeTensors(ctypes.Structure):
    _fields_ = [(name, Tensor) for name in ("q_nope", "q_pe", "ckv", "kpe", "kv_indices", "o", "lse")]


class MlaScalars(ctypes.Structure):
    _fields_ = [(name, ctypes.c_float) for name in ("sm_scale", "ckv_scale", "kpe_scale")]


MIRRORS.update({"aotinfer_batch_mla_decode_config": MlaDecodeConfig,
                "aotinfer_batch_mla_decode_tensors": MlaDecodeTensors, "aotinfer_mla_scalars": MlaScalars})
_declare("aotinfer_batch_mla_decode_create", _status, c_void, ctypes.POINTER(MlaDecodeConfig), ctypes.POINTER(c_void))
_declare("aotinfer_batch_mla_decode_destroy", None, c_void)
_declare("aotinfer_batch_mla_decode_workspace_sizes", _status, c_void, c_int32, c_int32, ctypes.POINTER(c_size),
         ctypes.POINTER(c_size))
_declare("aotinfer_batch_mla_decode_plan", _status, c_void, c_int32_p, c_int32, c_int32_p, c_int32_p, c_int32, c_int32,
         c_int32, c_void, c_size, c_void, c_size, c_void)
_declare("aotinfer_batch_mla_decode_tensors_run", _status, c_void, ctypes.POINTER(MlaDecodeTensors),
         ctypes.POINTER(MlaScalars), c_void)


def entry_address(name):
    """The address of a C API function, for _ext.c."""
    return ctypes.cast(getattr(lib, name), c_void).value


def layout_mismatches():
    """Differences between the mirrors above and the library's structs, as readable lines."""
    reported = json.loads(lib.aotinfer_abi_layout().decode())
    problems = []
    for c_name, mirror in MIRRORS.items():
        want = reported.get(c_name)
        if want is None:
            problems.append(f"{c_name}: not reported by {_library}")
            continue
        if ctypes.sizeof(mirror) != want["size"]:
            problems.append(f"{c_name}: {want['size']} bytes in the library, {ctypes.sizeof(mirror)} in _capi.py")
        mirrored = {name: getattr(mirror, name).offset for name, _ in mirror._fields_}
        for field in sorted(set(want["fields"]) | set(mirrored)):
            if want["fields"].get(field) != mirrored.get(field):
                problems.append(f"{c_name}.{field}: offset {want['fields'].get(field)} in the library, "
                                f"{mirrored.get(field)} in _capi.py")
    return problems


_problems = layout_mismatches()
if _problems:
    raise ImportError(f"aotinfer: {_library} does not match this Python layer's C structs:\n  " + "\n  ".join(_problems))
