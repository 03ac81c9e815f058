#!/usr/bin/env python3
"""Shared-prefix decode: a two-level cascade against plain batch decode of the same batch, on
the GPU machine with the wheel installed (tests/gpu/python.sh puts it on PYTHONPATH).

64 requests share an 8192-token prefix and own 512 tokens each (bf16, 32/8 heads, head_dim 128,
page 16, pages shuffled in one pool). Plain decode reads the prefix once per request; the cascade
reads it once per batch. Timing as ../shared/peers' FlashInfer rows: CUDA events around each
call, 5 warm-up calls, median of 20 (eager: host launch included); and the same call replayed
from a CUDA graph. "of floor" compares with reading the prefix, the own KV, q and o once at the
device's copy bandwidth (read + write of a large buffer, measured here).
"""
import math
import sys

import torch

from torch_timing import median_s

from aotinfer import flashinfer

DEV = torch.device("cuda:0")
BF16 = torch.bfloat16
PAGE, HEAD_DIM = 16, 128
WS = torch.empty(512 << 20, dtype=torch.uint8, device=DEV)


def graph_of(fn):
    fn()
    torch.cuda.synchronize()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph.replay


def copy_bandwidth():
    a = torch.empty(1 << 30, dtype=torch.uint8, device=DEV)
    b = torch.empty_like(a)
    t = median_s(lambda: b.copy_(a))
    return 2 * a.numel() / t


def main(batch=64, prefix=8192, own=512, qo_heads=32, kv_heads=8):
    prefix_pages, own_pages = prefix // PAGE, own // PAGE
    total = prefix_pages + batch * own_pages
    kv = torch.randn(total, 2, PAGE, kv_heads, HEAD_DIM, dtype=BF16, device=DEV)
    perm = torch.randperm(total, device=DEV).to(torch.int32)
    prefix_idx, own_idx = perm[:prefix_pages].contiguous(), perm[prefix_pages:].contiguous()
    q = torch.randn(batch, qo_heads, HEAD_DIM, dtype=BF16, device=DEV)
    i32 = dict(dtype=torch.int32, device=DEV)
    sm_scale = 1 / math.sqrt(HEAD_DIM)

    plain = flashinfer.BatchDecodeWithPagedKVCacheWrapper(WS, "NHD")
    indices = torch.cat([prefix_idx.unsqueeze(0).expand(batch, -1), own_idx.view(batch, own_pages)], 1).reshape(-1)
    plain.plan(torch.arange(batch + 1, **i32) * (prefix_pages + own_pages), indices.contiguous(),
               torch.full((batch,), PAGE, **i32), qo_heads, kv_heads, HEAD_DIM, PAGE, sm_scale=sm_scale,
               q_data_type=BF16, kv_data_type=BF16)
    out = torch.empty_like(q)

    cascade = flashinfer.MultiLevelCascadeAttentionWrapper(2, WS, "NHD")
    cascade.plan([torch.tensor([0, batch], **i32), torch.arange(batch + 1, **i32)],
                 [torch.tensor([0, prefix_pages], **i32), torch.arange(batch + 1, **i32) * own_pages],
                 [prefix_idx, own_idx], [torch.tensor([PAGE], **i32), torch.full((batch,), PAGE, **i32)],
                 qo_heads, kv_heads, HEAD_DIM, PAGE, sm_scale=sm_scale, q_data_type=BF16, kv_data_type=BF16)

    # The two agree (both are exact attention over the same keys).
    want = plain.run(q, kv)
    got = cascade.run(q, kv)
    err = ((got.float() - want.float()).abs().max() / want.float().abs().max()).item()

    copy = copy_bandwidth()
    elem = 2
    floor_bytes = 2 * (prefix + batch * own) * kv_heads * HEAD_DIM * elem + 2 * batch * qo_heads * HEAD_DIM * elem
    plain_bytes = 2 * batch * (prefix + own) * kv_heads * HEAD_DIM * elem + 2 * batch * qo_heads * HEAD_DIM * elem
    floor = floor_bytes / copy
    print(f"cascade bench: {batch} requests x ({prefix} shared + {own} own), bf16 {qo_heads}/{kv_heads} heads, "
          f"head_dim {HEAD_DIM}, page {PAGE}; copy bandwidth {copy / 1e9:.0f} GB/s; max rel. difference {err:.2e}")
    print(f"floor (prefix + own KV + q + o once at copy bandwidth): {floor * 1e6:.1f} us")
    print(f"{'path':<44s} {'eager us':>9s} {'graph us':>9s} {'GB/s':>7s} {'vs plain':>9s} {'of floor':>9s}")
    rows = {}
    for name, fn, moved in (("plain batch decode (prefix per request)", lambda: plain.run(q, kv, out=out), plain_bytes),
                            ("2-level cascade (prefix once)", lambda: cascade.run(q, kv), floor_bytes)):
        eager = median_s(fn)
        graph = median_s(graph_of(fn))
        rows[name] = graph
        base = rows.get("plain batch decode (prefix per request)", graph)
        print(f"{name:<44s} {eager * 1e6:9.1f} {graph * 1e6:9.1f} {moved / graph / 1e9:7.0f} {base / graph:8.2f}x "
              f"{floor / graph:8.2f}")
    # Where the cascade's time goes: each level alone (graph), the merge is the rest.
    for i, name in ((0, "  level 0 alone: the prefix, one group"), (1, "  level 1 alone: own pages, 64 groups")):
        t = median_s(graph_of(lambda: cascade._level_run(i, q, kv)))
        print(f"{name:<44s} {'':>9s} {t * 1e6:9.1f}")
    return 0 if err < 2e-2 else 1


if __name__ == "__main__":
    sys.exit(main())
