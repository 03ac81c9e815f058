"""FlashInfer's merge_state and merge_state_in_place over aotinfer.merge_state. FlashInfer's LSE
is base 2 and aotinfer's kernel merges natural-log states, so the LSEs are rescaled around the
kernel (elementwise, on the current stream)."""
from .. import merge_state as _merge
from . import _base


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
