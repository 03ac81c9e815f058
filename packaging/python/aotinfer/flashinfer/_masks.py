"""Custom masks as the prefill wrappers' plan() takes them, in FlashInfer's two forms, made into
what aotinfer.BatchPrefill.run reads with mask="custom": each request's [qo_len, kv_len] bits
row-major, packed little-endian and padded to whole bytes, from byte mask_indptr[i] on, in a
buffer of a multiple of 4 bytes (the kernels read aligned words; templates/aotinfer/params/
batch_prefill.h).

- custom_mask: booleans, the requests' masks flattened and concatenated (sum of qo_len * kv_len);
- packed_custom_mask: uint8, those bits already packed per request (FlashInfer's segment_packbits
  layout), as FlashInfer's plan() also takes them."""
from . import _base


def mask_layout(qo_lens, kv_lens):
    """(bits per request, byte offsets [batch + 1]) of the packed masks of these lengths."""
    bits = [int(q) * int(k) for q, k in zip(qo_lens, kv_lens)]
    offsets = [0]
    for n in bits:
        offsets.append(offsets[-1] + (n + 7) // 8)
    return bits, offsets


def _pack(where, custom_mask, bits, offsets, device):
    """The booleans packed per request: each request's bits start a new byte."""
    torch = _base.torch
    flat = custom_mask.reshape(-1)
    if flat.numel() != sum(bits):
        raise ValueError(f"aotinfer.flashinfer {where}: custom_mask has {flat.numel()} elements; the batch's "
                         f"requests need sum(qo_len * kv_len) = {sum(bits)}")
    # Element e of request i goes to bit 8 * offsets[i] + (e - first element of i).
    padded_bits = 8 * offsets[-1]
    shift = torch.tensor([8 * offsets[i] - sum(bits[:i]) for i in range(len(bits))], dtype=torch.int64)
    dest = torch.arange(flat.numel(), device=device) + torch.repeat_interleave(
        shift, torch.tensor(bits, dtype=torch.int64)).to(device)
    unpacked = torch.zeros(padded_bits, dtype=torch.uint8, device=device)
    unpacked[dest] = (flat.to(device) != 0).to(torch.uint8)
    weights = torch.tensor([1 << b for b in range(8)], dtype=torch.int32, device=device)
    return (unpacked.view(-1, 8).to(torch.int32) * weights).sum(1).to(torch.uint8)


def custom_masks(where, custom_mask, packed_custom_mask, qo_lens, kv_lens, device, into=None):
    """(packed bits, mask_indptr int32 [batch + 1]) on the device for the run. into: the wrapper's
    CUDA-graph buffers (bits, indptr), written in place, which must be large enough."""
    torch = _base.torch
    bits, offsets = mask_layout(qo_lens, kv_lens)
    total = offsets[-1]
    if packed_custom_mask is not None:
        packed = packed_custom_mask.reshape(-1)
        if packed.dtype != torch.uint8 or packed.numel() < total:
            raise ValueError(f"aotinfer.flashinfer {where}: packed_custom_mask must be uint8 with at least {total} "
                             f"bytes (each request's qo_len * kv_len bits, padded to whole bytes), got "
                             f"{packed.dtype} with {packed.numel()}")
        packed = packed[:total].to(device)
    else:
        packed = _pack(where, custom_mask, bits, offsets, device)
    need = max(4, (total + 3) // 4 * 4)
    indptr = torch.tensor(offsets, dtype=torch.int32)
    if into is None:
        out = torch.empty(need, dtype=torch.uint8, device=device)
        out[:total] = packed
        return out, indptr.to(device)
    out, offsets_out = into
    if out.numel() * out.element_size() < need or offsets_out.numel() < len(offsets):
        raise ValueError(f"aotinfer.flashinfer {where}: in cudagraph mode the masks go to custom_mask_buf and "
                         f"mask_indptr_buf, which must hold {need} bytes (the packed masks rounded up to 4) and "
                         f"{len(offsets)} int32; got {out.numel() * out.element_size()} bytes and "
                         f"{offsets_out.numel()}")
    out.view(torch.uint8).reshape(-1)[:total].copy_(packed)
    offsets_out[:len(offsets)].copy_(indptr)
    return out, offsets_out
