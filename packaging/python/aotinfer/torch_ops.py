"""aotinfer's run-time entry points as PyTorch custom ops (torch.library), for torch.compile and
CUDA graphs.

    import aotinfer, aotinfer.torch_ops as ops      # importing this module registers the ops
    decode = aotinfer.BatchDecode(pkg, 32, 8, 128, page_size=16)
    decode.plan(indptr, last_page_len, float_ws, int_ws)          # eager, outside any graph
    ops.batch_decode_run(decode, q, k_pages, v_pages, d_indptr, d_indices, d_last, o)   # in any graph

The functions here take the arguments of the core methods they stand for (BatchDecode.run,
BatchPrefill.run, merge_state, append_paged_kv; the planned object or the package first) and
call torch.ops.aotinfer.<op>, which

  - names the planned object by an integer id from a process-wide registry of weak references
    (handle(obj); an op whose object was garbage-collected raises aotinfer.InvalidArgument), so
    that every op argument is a tensor or a scalar;
  - writes its outputs in place into the caller's tensors (o, lse, v_out, s_out, the page pools),
    declared in mutates_args; the fake (meta) implementations return None, so torch.compile
    traces the ops without graph breaks;
  - runs the core with stream=None: the kernels go to the current PyTorch stream, which is the
    capturing stream inside torch.cuda.graph(), so run() can be captured (plan() stays outside
    the graph: it is host work, and in the core's cuda_graph mode a later plan of the same bounds
    is what a replay then computes). Eager callers may still pass stream=: the op then runs
    under torch.cuda.stream(stream); compiled code must leave it None.

handle() also works inside traced code (the registration then happens while dynamo traces, so
the compiled graph finds the object on its first run). compiling() tells a wrapper when to call
these functions instead of the core (as aotinfer.flashinfer's run() is meant to under torch.compile).

Importing aotinfer itself stays framework-free; only this module imports torch. register() is
idempotent and runs on import.
"""
import ctypes
import functools
import threading
import weakref
from typing import Optional

import torch

import aotinfer

__all__ = ["register", "handle", "compiling", "batch_decode_run", "batch_prefill_run", "merge_state",
           "append_paged_kv"]

_NAMESPACE = "aotinfer"
_ATTRIBUTE = "_aotinfer_torch_op_id"  # set on each registered object: its id

# The registry: id -> weakref.ref(object); ids are never reused, so a stale id cannot name
# another object. Kept on the aotinfer package, so that a reloaded torch_ops shares it with the
# ops already defined. The lock is reentrant: a weakref callback may run inside _register_object.
_registry = aotinfer.__dict__.setdefault("_torch_ops_registry", ({}, [0], threading.RLock()))
_objects, _last_id, _lock = _registry


def compiling():
    """True while torch.compile (dynamo) traces the caller: the moment a wrapper such as
    aotinfer.flashinfer's should call the functions of this module instead of the core."""
    return torch.compiler.is_compiling()


def _forget(oid):
    with _lock:
        _objects.pop(oid, None)


def _register_object(obj):
    with _lock:
        oid = getattr(obj, _ATTRIBUTE, None)
        if oid is None:
            _last_id[0] += 1
            oid = _last_id[0]
            _objects[oid] = weakref.ref(obj, lambda _ref, oid=oid: _forget(oid))
            setattr(obj, _ATTRIBUTE, oid)
    return oid


@torch.compiler.assume_constant_result
def _register_while_tracing(address):
    """Runs for real while dynamo traces handle() (its result becomes a graph constant), so the
    object is registered before the compiled graph first runs; a traced registration would be
    replayed only after the graph. address is id(obj) of an object the traced frame holds."""
    return _register_object(ctypes.cast(address, ctypes.py_object).value)


def handle(obj):
    """The registry id of obj (an aotinfer.BatchDecode, BatchPrefill or Package), assigned on
    first use (also inside code torch.compile traces) and kept on the object."""
    oid = getattr(obj, _ATTRIBUTE, None)
    if oid is None:
        oid = _register_while_tracing(id(obj)) if torch.compiler.is_compiling() else _register_object(obj)
    return oid


def _lookup(oid, kinds, op):
    ref = _objects.get(oid)
    obj = ref() if ref is not None else None
    if obj is None:
        raise aotinfer.InvalidArgument(
            f"torch.ops.aotinfer.{op}: object #{oid} no longer exists: the {' / '.join(k.__name__ for k in kinds)} "
            f"it named was garbage-collected. Keep a reference to it for as long as compiled code or captured "
            f"CUDA graphs use it.", 1)
    if not isinstance(obj, kinds):
        raise aotinfer.InvalidArgument(
            f"torch.ops.aotinfer.{op}: object #{oid} is a {type(obj).__name__}, expected "
            f"{' or '.join(k.__name__ for k in kinds)}", 1)
    return obj


# --- the ops (eager implementations call the core on the current PyTorch stream) ----------------

def _decode_run(decode_id: int, q: torch.Tensor, k_pages: torch.Tensor, v_pages: torch.Tensor,
                kv_indptr: torch.Tensor, kv_indices: torch.Tensor, kv_last_page_len: torch.Tensor,
                o: torch.Tensor, lse: Optional[torch.Tensor], q_positions: Optional[torch.Tensor],
                sinks: Optional[torch.Tensor], custom_mask: Optional[torch.Tensor],
                mask_indptr: Optional[torch.Tensor], sm_scale: float, logits_soft_cap: float, rope_scale: float,
                rope_theta: float, k_scale: float, v_scale: float) -> None:
    decode = _lookup(decode_id, (aotinfer.BatchDecode,), "batch_decode_run")
    decode.run(q, k_pages, v_pages, kv_indptr, kv_indices, kv_last_page_len, o, lse, q_positions, sm_scale,
               logits_soft_cap, rope_scale, rope_theta, k_scale, v_scale, None, sinks, custom_mask, mask_indptr)


def _prefill_run(prefill_id: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, qo_indptr: torch.Tensor,
                 kv_indptr: torch.Tensor, o: torch.Tensor, kv_indices: Optional[torch.Tensor],
                 kv_last_page_len: Optional[torch.Tensor], lse: Optional[torch.Tensor],
                 sinks: Optional[torch.Tensor], custom_mask: Optional[torch.Tensor],
                 mask_indptr: Optional[torch.Tensor], sm_scale: float, logits_soft_cap: float, rope_scale: float,
                 rope_theta: float, k_scale: float, v_scale: float) -> None:
    prefill = _lookup(prefill_id, (aotinfer.BatchPrefill,), "batch_prefill_run")
    prefill.run(q, k, v, qo_indptr, kv_indptr, o, kv_indices, kv_last_page_len, lse, sm_scale, logits_soft_cap,
                rope_scale, rope_theta, None, sinks, k_scale, v_scale, custom_mask, mask_indptr)


def _merge_state(package_id: int, v_a: torch.Tensor, s_a: torch.Tensor, v_b: torch.Tensor, s_b: torch.Tensor,
                 v_out: torch.Tensor, s_out: Optional[torch.Tensor]) -> None:
    package = _lookup(package_id, (aotinfer.Package,), "merge_state")
    aotinfer.merge_state(package, v_a, s_a, v_b, s_b, v_out, s_out, None)


def _append_paged_kv(package_id: int, k: torch.Tensor, v: torch.Tensor, batch_indices: torch.Tensor,
                     positions: torch.Tensor, k_pages: torch.Tensor, v_pages: torch.Tensor, kv_indptr: torch.Tensor,
                     kv_indices: torch.Tensor, kv_last_page_len: torch.Tensor, layout: str) -> None:
    package = _lookup(package_id, (aotinfer.Package,), "append_paged_kv")
    aotinfer.append_paged_kv(package, k, v, batch_indices, positions, k_pages, v_pages, kv_indptr, kv_indices,
                             kv_last_page_len, layout, None)


# name -> (eager implementation, mutated arguments)
_SPECS = {
    "batch_decode_run": (_decode_run, ("o", "lse")),
    "batch_prefill_run": (_prefill_run, ("o", "lse")),
    "merge_state": (_merge_state, ("v_out", "s_out")),
    "append_paged_kv": (_append_paged_kv, ("k_pages", "v_pages")),
}
_ops = {}  # name -> CustomOpDef; kept alive here (and on the aotinfer package across reloads)


def _fake_for(fn):
    """The fake (meta) implementation: every op writes into caller tensors and returns None."""
    @functools.wraps(fn)
    def fake(*args, **kwargs):
        return None
    return fake


def register():
    """Defines torch.ops.aotinfer.{batch_decode_run, batch_prefill_run, merge_state,
    append_paged_kv}. Idempotent; runs on import of this module (also a reloaded one: ops
    already defined in this process are kept)."""
    with _lock:
        defined = aotinfer.__dict__.setdefault("_torch_ops_defined", {})
        for name, (fn, mutates) in _SPECS.items():
            if name not in defined:
                # needs_exact_strides: inductor hands the op tensors with eager's strides (the
                # core checks them: q and o dense, pools in their layout, ...).
                op = torch.library.custom_op(f"{_NAMESPACE}::{name}", fn, mutates_args=mutates,
                                             tags=(torch.Tag.needs_exact_strides,))
                op.register_fake(_fake_for(fn))
                defined[name] = op
            _ops[name] = defined[name]


# --- the functions callers use: the core signatures, dispatched through torch.ops ------------

def _call(op, args, stream, where):
    """op(*args) on the current PyTorch stream, or (eagerly) on stream: a torch.cuda.Stream, a
    raw handle (int) or an object with .cuda_stream."""
    if stream is None:
        op(*args)
        return
    if torch.compiler.is_compiling():
        raise aotinfer.InvalidArgument(
            f"aotinfer.torch_ops.{where}: stream must be None in compiled code (the op runs on the current "
            f"PyTorch stream)", 1)
    if not isinstance(stream, torch.cuda.Stream):
        stream = torch.cuda.ExternalStream(stream if isinstance(stream, int) else int(stream.cuda_stream))
    with torch.cuda.stream(stream):
        op(*args)


def batch_decode_run(decode, q, k_pages, v_pages, kv_indptr, kv_indices, kv_last_page_len, o, lse=None,
                     q_positions=None, sm_scale=0.0, logits_soft_cap=0.0, rope_scale=1.0, rope_theta=1e4,
                     k_scale=1.0, v_scale=1.0, stream=None, sinks=None, custom_mask=None, mask_indptr=None):
    """aotinfer.BatchDecode.run(...) as torch.ops.aotinfer.batch_decode_run: writes o (and lse). The
    sliding window is the decode object's (fixed when it was made), the soft cap a run value."""
    _call(torch.ops.aotinfer.batch_decode_run,
          (handle(decode), q, k_pages, v_pages, kv_indptr, kv_indices, kv_last_page_len, o, lse, q_positions, sinks,
           custom_mask, mask_indptr, float(sm_scale), float(logits_soft_cap), float(rope_scale), float(rope_theta), float(k_scale),
           float(v_scale)), stream, "batch_decode_run")


def batch_prefill_run(prefill, q, k, v, qo_indptr, kv_indptr, o, kv_indices=None, kv_last_page_len=None, lse=None,
                      sm_scale=0.0, logits_soft_cap=0.0, rope_scale=1.0, rope_theta=1e4, stream=None, sinks=None,
                      k_scale=1.0, v_scale=1.0, custom_mask=None, mask_indptr=None):
    """aotinfer.BatchPrefill.run(...) (paged or ragged, as the object was configured) as
    torch.ops.aotinfer.batch_prefill_run: writes o (and lse). The window is the object's."""
    _call(torch.ops.aotinfer.batch_prefill_run,
          (handle(prefill), q, k, v, qo_indptr, kv_indptr, o, kv_indices, kv_last_page_len, lse, sinks, custom_mask,
           mask_indptr, float(sm_scale), float(logits_soft_cap), float(rope_scale), float(rope_theta), float(k_scale),
           float(v_scale)), stream, "batch_prefill_run")


def merge_state(package, v_a, s_a, v_b, s_b, v_out, s_out=None, stream=None):
    """aotinfer.merge_state(...) as torch.ops.aotinfer.merge_state: writes v_out (and s_out)."""
    _call(torch.ops.aotinfer.merge_state, (handle(package), v_a, s_a, v_b, s_b, v_out, s_out), stream,
          "merge_state")


def append_paged_kv(package, k, v, batch_indices, positions, k_pages, v_pages, kv_indptr, kv_indices,
                    kv_last_page_len, layout="nhd", stream=None):
    """aotinfer.append_paged_kv(...) as torch.ops.aotinfer.append_paged_kv: writes into the pools."""
    _call(torch.ops.aotinfer.append_paged_kv,
          (handle(package), k, v, batch_indices, positions, k_pages, v_pages, kv_indptr, kv_indices,
           kv_last_page_len, str(layout)), stream, "append_paged_kv")


register()
