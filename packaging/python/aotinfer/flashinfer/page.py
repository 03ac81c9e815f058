"""FlashInfer's append_paged_kv_cache over aotinfer.append_paged_kv, and the two index helpers
engines use with it (get_batch_indices_positions, get_seq_lens), in PyTorch."""
from .. import append_paged_kv as _append
from . import _args, _base


def _rows(x):
    """x [nnz, heads, head_dim] whose tokens may be strided (a slice of a fused qkv) but whose
    heads are dense, as aotinfer reads it."""
    return x if x.stride(-1) == 1 and x.stride(-2) == x.shape[-1] else x.contiguous()


def append_paged_kv_cache(append_key, append_value, batch_indices, positions, paged_kv_cache, kv_indices, kv_indptr,
                          kv_last_page_len, kv_layout="NHD", *, package=None):
    """Writes append_key/append_value [nnz, num_kv_heads, head_dim] into the pages: token j goes to
    request batch_indices[j] at position positions[j]. The metadata must already count the new tokens."""
    layout = _args.layout("append_paged_kv_cache", kv_layout)
    torch = _base.need_torch()
    k_cache, v_cache = _base.split_cache(paged_kv_cache, kv_layout)
    if append_key.dtype != k_cache.dtype or append_value.dtype != v_cache.dtype:
        raise ValueError(f"aotinfer.flashinfer append_paged_kv_cache: append_key/append_value are "
                         f"{append_key.dtype}/{append_value.dtype}, the cache {k_cache.dtype}")
    ints = [x if x.dtype == torch.int32 else x.int() for x in (batch_indices, positions, kv_indptr, kv_indices,
                                                                 kv_last_page_len)]
    _base.call("append_paged_kv", _append, package or _base.shared_package(), _rows(append_key), _rows(append_value),
               ints[0], ints[1], k_cache, v_cache, ints[2], ints[3], ints[4], layout=layout)


def get_seq_lens(kv_indptr, kv_last_page_len, page_size):
    """KV lengths [batch] of a paged cache: full pages but the last, plus the last's tokens."""
    torch = _base.need_torch()
    return torch.clamp(kv_indptr[1:] - kv_indptr[:-1] - 1, min=0) * page_size + kv_last_page_len


def get_batch_indices_positions(append_indptr, seq_lens, nnz, batch_indices=None, positions=None):
    """For each of nnz appended tokens (ragged by append_indptr [batch + 1]), its request and its
    position in the request's KV of seq_lens (the new tokens are the last ones). Tokens past
    append_indptr[-1] get request -1, position 0. int32 [nnz] each, on append_indptr's device."""
    torch = _base.need_torch()
    device = append_indptr.device
    indptr = append_indptr.to(torch.int64)
    batch = int(indptr.shape[0]) - 1
    token = torch.arange(nnz, device=device, dtype=torch.int64)
    if batch < 1:
        request, position = torch.full_like(token, -1), torch.zeros_like(token)
    else:
        found = torch.searchsorted(indptr[1:].contiguous(), token, right=True)
        valid = found < batch
        r = found.clamp(max=batch - 1)
        start, end = indptr[r], indptr[r + 1]
        lens = seq_lens.to(device=device, dtype=torch.int64)[r]
        request = torch.where(valid, found, -1)
        position = torch.where(valid, lens - (end - start) + (token - start), 0)
    result = []
    for given, value, name in ((batch_indices, request, "batch_indices"), (positions, position, "positions")):
        if given is None:
            result.append(value.to(torch.int32))
            continue
        if given.dtype != torch.int32 or tuple(given.shape) != (nnz,):
            raise ValueError(f"aotinfer.flashinfer get_batch_indices_positions: {name} must be torch.int32 [{nnz}]")
        result.append(given.copy_(value))
    return tuple(result)
