"""Borrowing device tensors from any framework: DLPack first, then __cuda_array_interface__.
Internal. Only the pointer, shape, strides (in elements) and dtype name are read."""
import ctypes
from dataclasses import dataclass


@dataclass
class TensorView:
    ptr: int
    shape: tuple
    strides: tuple  # elements
    dtype: str      # aotinfer dtype name
    on_gpu: bool

    def is_contiguous(self):
        return all(s == e for s, e, n in zip(self.strides, _contiguous_strides(self.shape), self.shape) if n > 1)


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32), ("dtype", _DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


_DLPACK_DTYPES = {(2, 16): "f16", (4, 16): "bf16", (2, 32): "f32", (0, 32): "i32", (1, 8): "u8"}
_DLPACK_FP8 = {(6, 8): "e4m3", (8, 8): "e5m2"}  # float8 codes of DLPack 1.1 (e4m3fn, e5m2)
_CAI_DTYPES = {"<f2": "f16", "<f4": "f32", "<i4": "i32", "|u1": "u8"}
_kDLCUDA, _kDLCUDAManaged = 2, 13

def _contiguous_strides(shape):
    strides, step = [], 1
    for n in reversed(shape):
        strides.insert(0, step)
        step *= n
    return tuple(strides)


_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype, _capsule_pointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]


def view(x, name="tensor"):
    """A TensorView of x, or TypeError naming what is accepted."""
    if hasattr(x, "__dlpack__"):
        capsule = x.__dlpack__()
        # DLManagedTensor starts with its DLTensor; the capsule keeps ownership (we only borrow).
        t = _DLTensor.from_address(_capsule_pointer(capsule, b"dltensor"))
        shape = tuple(t.shape[i] for i in range(t.ndim))
        strides = tuple(t.strides[i] for i in range(t.ndim)) if t.strides else _contiguous_strides(shape)
        key = (t.dtype.code, t.dtype.bits)
        dtype = _DLPACK_DTYPES.get(key) or _DLPACK_FP8.get(key) or f"dlpack({t.dtype.code},{t.dtype.bits})"
        return TensorView((t.data or 0) + t.byte_offset, shape, strides, dtype,
                          t.device.device_type in (_kDLCUDA, _kDLCUDAManaged))
    cai = getattr(x, "__cuda_array_interface__", None)
    if cai is not None:
        shape = tuple(cai["shape"])
        itemsize = int(cai["typestr"][2:])
        strides = tuple(s // itemsize for s in cai["strides"]) if cai.get("strides") else _contiguous_strides(shape)
        return TensorView(cai["data"][0], shape, strides, _CAI_DTYPES.get(cai["typestr"], cai["typestr"]), True)
    raise TypeError(f"{name}: expected a GPU tensor exposing __dlpack__ or __cuda_array_interface__ "
                    f"(PyTorch, CuPy, ...), got {type(x).__name__}")


def stream_handle(stream):
    """A CUDA stream as an integer handle: None (default stream), an int, or an object with
    .cuda_stream (torch.cuda.Stream) or .ptr (cupy)."""
    if stream is None:
        return None
    if isinstance(stream, int):
        return stream
    for attribute in ("cuda_stream", "ptr", "handle"):
        if hasattr(stream, attribute):
            return int(getattr(stream, attribute))
    raise TypeError(f"stream: expected None, an int handle or a stream object, got {type(stream).__name__}")
