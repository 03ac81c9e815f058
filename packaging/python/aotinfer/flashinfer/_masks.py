"""Custom masks as the prefill wrappers' plan() takes them, in FlashInfer's two forms, made into
what aotinfer.BatchPrefill.run reads with mask="custom": each request's [qo_len, kv_len] bits
row-major, packed little-endian and padded to whole bytes, from byte mask_indptr[i] on, in a
buffer of a multiple of 4 bytes (the kernels read aligned words; templates/aotinfer/params/
batch_prefill.h).

- custom_mask: booleans, the requests' masks flattened and concatenated (sum of qo_len * kv_len);
- packed_custom_mask: uint8, those bits already packed per request (FlashInfer's segment_packbits
  layout), as FlashInfer's plan() also takes them;
- multi-item scoring (prefix_len_ptr, token_pos_in_items_ptr): the mask it stands for, made into
  bits here (multi_item_bits), which replaces the other two as it does in FlashInfer."""
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


STEP_BITS = 1 << 23  # multi_item_bits forms about this many bits (a byte each, a few times over) per step


def _int64(torch, t, device):
    """An integer tensor as int64 on device; FlashInfer's uint16 / uint32 arrays through their
    signed views (PyTorch converts few of its unsigned types)."""
    unsigned = {getattr(torch, "uint16", None): (torch.int16, 0xFFFF),
                getattr(torch, "uint32", None): (torch.int32, 0xFFFFFFFF)}
    t = t.reshape(-1).to(device)
    if t.dtype in unsigned:
        signed, bits = unsigned[t.dtype]
        return t.view(signed).to(torch.int64) & bits
    return t.to(torch.int64)


def multi_item_bits(where, items, qo_lens, kv_lens, device):
    """FlashInfer's multi-item scoring as packed mask bits, laid out as mask_layout says, built on
    the device. A request's query token j sits at position a = j + kv_len - qo_len. Inside the
    request's prefix (a < prefix_len) it sees every key up to itself; past it, the prefix and the
    keys after a - t up to itself, where t = token_pos_in_items[a - prefix_len] is its position
    in its item: its item so far, without the delimiter (t = 0) that opens the item, so a
    delimiter sees the prefix only. Request i's positions start at entry i * token_pos_in_items_len.
    items: _args.multi_items's tuple. Rows go in steps of about STEP_BITS bits, a multiple of 8
    rows each, so that a step's bits fill whole bytes and long requests need no more memory."""
    torch = _base.torch
    prefix_len_ptr, token_pos, stride = items
    prefix = _int64(torch, prefix_len_ptr, "cpu").tolist()
    if len(prefix) < len(qo_lens):
        raise ValueError(f"aotinfer.flashinfer {where}: prefix_len_ptr has {len(prefix)} entries for "
                         f"{len(qo_lens)} requests")
    positions = _int64(torch, token_pos, device)
    weights = torch.tensor([1 << b for b in range(8)], dtype=torch.uint8, device=device)
    parts = []
    for i, (m, n) in enumerate(zip(qo_lens, kv_lens)):
        p = prefix[i]
        read = max(0, n - max(p, 0))  # the entries of positions a >= p, a < kv_len
        if i * stride + read > positions.numel():
            raise ValueError(f"aotinfer.flashinfer {where}: request {i} (prefix {p}, {n} keys) reads "
                             f"token_pos_in_items_ptr up to entry {i * stride + read}, which holds "
                             f"{positions.numel()} (token_pos_in_items_len {stride} entries per request)")
        keys = torch.arange(n, device=device)[None, :]
        step = max(8, STEP_BITS // max(n, 1) // 8 * 8)
        for first in range(0, m, step):
            a = torch.arange(first, min(m, first + step), device=device) + (n - m)
            past = a >= p
            t = torch.zeros_like(a) if read == 0 else \
                torch.where(past, positions[i * stride + (a - p).clamp(0, read - 1)], 0)
            rows = a[:, None]
            sees = (keys <= rows) & ((keys < p) | ~past[:, None] | (keys > rows - t[:, None]))
            flat = sees.reshape(-1)
            if flat.numel() % 8:  # the request's last chunk: its last byte padded with zeros
                flat = torch.cat([flat, flat.new_zeros(8 - flat.numel() % 8)])
            parts.append((flat.view(-1, 8).to(torch.uint8) * weights).sum(1, dtype=torch.uint8))
    return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.uint8, device=device)


def custom_masks(where, custom_mask, packed_custom_mask, items, qo_lens, kv_lens, device, into=None):
    """(packed bits, mask_indptr int32 [batch + 1]) on the device for the run. items: multi-item
    scoring (_args.multi_items), which replaces the masks given. into: the wrapper's CUDA-graph
    buffers (bits, indptr), written in place, which must be large enough."""
    torch = _base.torch
    bits, offsets = mask_layout(qo_lens, kv_lens)
    total = offsets[-1]
    if items is not None:
        packed = multi_item_bits(where, items, qo_lens, kv_lens, device)
    elif packed_custom_mask is not None:
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
        out[total:] = 0  # the word padding: no byte of the buffer left unset
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
