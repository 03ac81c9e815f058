"""PyTorch SDPA (flash and cuDNN backends) on the shapes of bench_decode, dense KV with
enable_gqa, and the combined table with aotinfer's numbers from the same run.
Usage: python3 decode_torch.py RESULTS.jsonl"""
import json
import sys

import torch
from torch_timing import median_us
from torch.nn.attention import SDPBackend, sdpa_kernel

rows = [json.loads(line) for line in open(sys.argv[1])]
copy_gbs = next(r["copy_gbs"] for r in rows if "copy_gbs" in r)
ours = {(r.get("variant", r["kv"]), r["batch"], r["kv_len"]): r for r in rows if "kv" in r}
plans = [r for r in rows if "plan_batch" in r]
l2 = torch.cuda.get_device_properties(0).L2_cache_size


def peer_us(batch, kv_len, backend):
    qo, kvh, d = 32, 8, 128
    kv_bytes = 2 * batch * kvh * kv_len * d * 2
    sets = min(16, max(1, 3 * l2 // kv_bytes + 1))
    q = torch.randn(batch, qo, 1, d, device="cuda", dtype=torch.bfloat16)
    ks = [torch.randn(batch, kvh, kv_len, d, device="cuda", dtype=torch.bfloat16) for _ in range(sets)]
    vs = [torch.randn(batch, kvh, kv_len, d, device="cuda", dtype=torch.bfloat16) for _ in range(sets)]
    try:
        with sdpa_kernel([backend]):
            return median_us(lambda i: torch.nn.functional.scaled_dot_product_attention(
                q, ks[i % sets], vs[i % sets], enable_gqa=True), iters=30)
    except RuntimeError as e:
        return None
    finally:
        del ks, vs
        torch.cuda.empty_cache()

print(f"\nbatch_decode vs PyTorch SDPA (bf16 q/o, 32 qo / 8 kv heads, hd 128; copy {copy_gbs:.0f} GB/s)")
print("(aotinfer eager: one run() per call, host launch included; graph: a replayed CUDA graph)")
print(f"{'variant':18} {'batch':>5} {'kv_len':>7} {'aotinfer':>9} {'of copy':>8} {'graph':>7} {'of copy':>8} {'flash':>7} "
      f"{'cuDNN':>7} {'vs best':>8}   (GB/s)")
for (kv, batch, kv_len), r in ours.items():
    gbs = r["bytes"] / r["us"] / 1e3
    graph_gbs = r["bytes"] / r["graph_us"] / 1e3
    peers = {}
    if kv == "bf16":
        for name, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
            us = peer_us(batch, kv_len, backend)
            peers[name] = None if us is None else r["bytes"] / us / 1e3
    fmt = lambda x: f"{x:7.0f}" if x else "    n/a"
    best = max([p for p in peers.values() if p], default=None)
    ratio = f"{gbs / best:7.2f}x" if best else "       -"
    print(f"{kv:18} {batch:5d} {kv_len:7d} {gbs:9.0f} {100 * gbs / copy_gbs:7.0f}% {graph_gbs:7.0f} "
          f"{100 * graph_gbs / copy_gbs:7.0f}% {fmt(peers.get('flash'))} "
          f"{fmt(peers.get('cudnn'))} {ratio}")

bf16 = {(b, l): r for (kv, b, l), r in ours.items() if kv == "bf16"}
print("\nfp8 (e4m3) KV speed-up over bf16 KV (time ratio)")
for (kv, b, l), r in ours.items():
    if kv == "e4m3" and (b, l) in bf16:
        print(f"  batch {b:4d} kv_len {l:6d}: {bf16[(b, l)]['us'] / r['us']:.2f}x, "
              f"graph {bf16[(b, l)]['graph_us'] / r['graph_us']:.2f}x")
print("\nplan() host time: " + ", ".join(f"batch {p['plan_batch']}: {p['plan_us']:.1f} us" for p in plans))
