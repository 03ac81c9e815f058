"""Describing tensors of any framework to the runtime (aotinfer/tensor.h). Internal.

The per-call path is in C (_ext.c): PyTorch GPU tensors (and plan()'s CPU int32 metadata) are
read there directly once bind_torch() has run; everything else comes here: other PyTorch tensors,
and any object exposing DLPack or __cuda_array_interface__ (CuPy, NumPy, ...). Only the pointer,
dtype, device, shape and strides (in elements) are read; nothing is copied or kept."""
import ctypes
import sys
from collections import namedtuple

from . import _ext

# aotinfer_dtype and aotinfer_device_type (aotinfer/tensor.h).
F16, BF16, E4M3, E5M2, F32, I32, U8, OTHER = 0, 1, 2, 3, 4, 5, 6, 255
DTYPE_NAMES = {F16: "f16", BF16: "bf16", E4M3: "e4m3", E5M2: "e5m2", F32: "f32", I32: "i32", U8: "u8"}
DTYPE_SIZES = {F16: 2, BF16: 2, E4M3: 1, E5M2: 1, F32: 4, I32: 4, U8: 1}
CPU, CUDA, CUDA_HOST, CUDA_MANAGED = 1, 2, 3, 13

Tensor = namedtuple("Tensor", "ptr dtype device_type device_id shape strides dtype_name")
Tensor.on_gpu = property(lambda t: t.device_type in (CUDA, CUDA_MANAGED))
Tensor.nbytes = property(lambda t: _numel(t.shape) * DTYPE_SIZES.get(t.dtype, 1))


def _numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def tensor(x, name="tensor"):
    """How x is described to the runtime, as a Tensor (TypeError if it is not a tensor)."""
    return Tensor(*_ext.tensor(x, name))


def contiguous_strides(shape):
    strides, step = [], 1
    for n in reversed(shape):
        strides.insert(0, step)
        step *= n
    return tuple(strides)


# --- PyTorch -------------------------------------------------------------------------------

def _is_torch(x):
    return type(x).__module__.startswith("torch") and "torch" in sys.modules and \
        isinstance(x, sys.modules["torch"].Tensor)


def _bind_torch(torch):
    """Hands torch's tensor type, dtypes and current-stream query to the C fast path."""
    dtypes = {torch.float16: F16, torch.bfloat16: BF16, torch.float32: F32, torch.int32: I32, torch.uint8: U8}
    for name, code in (("float8_e4m3fn", E4M3), ("float8_e5m2", E5M2)):
        if hasattr(torch, name):
            dtypes[getattr(torch, name)] = code
    raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw_stream is None:
        def raw_stream(device):
            return torch.cuda.current_stream(device).cuda_stream
    # DLPack's C exchange API (PyTorch 2.10+) reads a tensor without allocating; older PyTorch
    # is read through its attributes.
    _ext.bind_torch(torch.Tensor, dtypes, raw_stream, getattr(torch.Tensor, "__dlpack_c_exchange_api__", None))
    return dtypes


_torch_dtypes = None


def _describe_torch(x, name):
    global _torch_dtypes
    torch = sys.modules["torch"]
    if _torch_dtypes is None:
        _torch_dtypes = _bind_torch(torch)
    device = x.device
    if device.type == "cuda":
        kind, index = CUDA, device.index if device.index is not None else torch.cuda.current_device()
    elif device.type == "cpu":
        kind, index = (CUDA_HOST if x.is_pinned() else CPU), 0
    else:
        kind, index = 0, 0  # meta, xpu, ...: refused as "not GPU memory"
    code = _torch_dtypes.get(x.dtype, OTHER)
    return (x.data_ptr() if device.type != "meta" else 0, code, kind, index, tuple(x.shape), tuple(x.stride()),
            str(x.dtype).replace("torch.", "") if code == OTHER else "")


# --- DLPack and __cuda_array_interface__ ---------------------------------------------------

class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32), ("dtype", _DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


# (DLPack type code, bits) -> aotinfer_dtype; float8 codes are DLPack 1.1's kDLFloat8_e4m3fn
# and kDLFloat8_e5m2 (as _ext.c's dtype_of).
_DLPACK_DTYPES = {(2, 16): F16, (4, 16): BF16, (2, 32): F32, (0, 32): I32, (1, 8): U8, (10, 8): E4M3, (12, 8): E5M2}
_CAI_DTYPES = {"<f2": F16, "<f4": F32, "<i4": I32, "|u1": U8}

_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype, _capsule_pointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]


def _describe_dlpack(x):
    capsule = x.__dlpack__()
    # DLManagedTensor starts with its DLTensor; the capsule keeps ownership (we only borrow).
    t = _DLTensor.from_address(_capsule_pointer(capsule, b"dltensor"))
    shape = tuple(t.shape[i] for i in range(t.ndim))
    strides = tuple(t.strides[i] for i in range(t.ndim)) if t.strides else contiguous_strides(shape)
    key = (t.dtype.code, t.dtype.bits)
    code = _DLPACK_DTYPES.get(key, OTHER)
    return ((t.data or 0) + t.byte_offset, code, t.device.device_type, t.device.device_id, shape, strides,
            f"dlpack({key[0]},{key[1]})" if code == OTHER else "")


def _describe_cai(cai):
    shape = tuple(cai["shape"])
    typestr = cai["typestr"]
    itemsize = int(typestr[2:])
    strides = tuple(s // itemsize for s in cai["strides"]) if cai.get("strides") else contiguous_strides(shape)
    code = _CAI_DTYPES.get(typestr, OTHER)
    # The interface does not name the GPU: described like managed memory, whose device is not
    # compared with the plan's.
    return cai["data"][0], code, CUDA_MANAGED, 0, shape, strides, typestr if code == OTHER else ""


def describe(x, name):
    """(data, dtype, device_type, device_id, shape, strides, dtype_name) of x for _ext.c, or
    TypeError naming the argument and what is accepted."""
    if _is_torch(x):
        return _describe_torch(x, name)
    if hasattr(x, "__dlpack__"):
        return _describe_dlpack(x)
    cai = getattr(x, "__cuda_array_interface__", None)
    if cai is not None:
        return _describe_cai(cai)
    raise TypeError(f"{name}: expected a tensor exposing __dlpack__ or __cuda_array_interface__ "
                    f"(PyTorch, CuPy, ...), got {type(x).__name__}")


def stream_handle(stream):
    """A CUDA stream as an integer handle: an int, or an object with .cuda_stream
    (torch.cuda.Stream) or .ptr (CuPy). None is resolved by _ext.c (current torch stream)."""
    if stream is None:
        return 0
    if isinstance(stream, int):
        return stream
    for attribute in ("cuda_stream", "ptr", "handle"):
        if hasattr(stream, attribute):
            return int(getattr(stream, attribute))
    raise TypeError(f"stream: expected None, an int handle or a stream object, got {type(stream).__name__}")
