"""PyTorch SDPA (flash and cuDNN backends) on the shapes of bench_prefill (dense
[batch, heads, len, head_dim] bf16 tensors; GQA through enable_gqa, or K/V repeated per group when
a backend refuses it), and the combined table with aotinfer's numbers from the same run.
Usage: python3 prefill_torch.py RESULTS.jsonl"""
import json
import sys

import torch
from torch_timing import median_us
from torch.nn.attention import SDPBackend, sdpa_kernel
import torch.nn.functional as F

rows = [json.loads(line) for line in open(sys.argv[1])]
copy_gbs = next(r["copy_gbs"] for r in rows if "copy_gbs" in r)
ours = {(r["kv"], r["causal"], r["batch"], r["len"], r["kv_heads"], r.get("head_dim", 128)): r for r in rows if "kv" in r}
plans = [r for r in rows if "plan_batch" in r]




def peer_us(batch, length, kv_heads, causal, backend, d):
    qo = 32
    q = torch.randn(batch, qo, length, d, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(batch, kv_heads, length, d, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(batch, kv_heads, length, d, device="cuda", dtype=torch.bfloat16)
    try:
        with sdpa_kernel([backend]):
            try:
                return median_us(lambda i: F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=kv_heads != qo), iters=20, warmup=3)
            except RuntimeError:
                if kv_heads == qo:
                    raise
                kr, vr = k.repeat_interleave(qo // kv_heads, 1), v.repeat_interleave(qo // kv_heads, 1)
                return median_us(lambda i: F.scaled_dot_product_attention(q, kr, vr, is_causal=causal), iters=20, warmup=3)
    except RuntimeError:
        return None
    finally:
        torch.cuda.empty_cache()


print(f"\nbatch_prefill vs PyTorch {torch.__version__} SDPA (bf16, 32 qo heads, qo_len = kv_len; TF/s, "
      f"causal counts half; copy bandwidth {copy_gbs:.0f} GB/s)")
print(f"{'mask':6} {'batch':>5} {'len':>6} {'kvh':>4} {'hd':>4} {'ragged':>7} {'paged':>7} {'pg/rg':>6} {'flash':>7} {'cuDNN':>7} "
      f"{'rg/flash':>8} {'rg/cuDNN':>8}")
for (kv, causal, batch, length, kv_heads, d), r in ours.items():
    if kv != "ragged":
        continue
    tf = lambda row: row["flops"] / row["us"] / 1e6
    ragged = tf(r)
    paged_row = ours.get(("paged", causal, batch, length, kv_heads, d))
    paged = tf(paged_row) if paged_row else None
    peers = {}
    for name, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
        us = peer_us(batch, length, kv_heads, causal, backend, d)
        peers[name] = None if us is None else r["flops"] / us / 1e6
    fmt = lambda x: f"{x:7.1f}" if x else "    n/a"
    ratio = lambda a, b: f"{a / b:7.2f}x" if a and b else "       -"
    print(f"{'causal' if causal else 'none':6} {batch:5d} {length:6d} {kv_heads:4d} {d:4d} {ragged:7.1f} {fmt(paged)} "
          f"{(paged / ragged if paged else 0):6.3f} {fmt(peers['flash'])} {fmt(peers['cudnn'])} "
          f"{ratio(ragged, peers['flash'])} {ratio(ragged, peers['cudnn'])}")
print("\nplan() host time: " + ", ".join(f"batch {p['plan_batch']}: {p['plan_us']:.1f} us" for p in plans))
