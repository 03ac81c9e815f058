"""PyTorch SDPA (flash and cuDNN backends) on the shapes of bench_prefill (dense
[batch, heads, len, head_dim] bf16 tensors; GQA through enable_gqa, or K/V repeated per group when
a backend refuses it), and the combined table with aotinfer's numbers from the same run.
Then MLA prefill (DeepSeek-V3 / Kimi K2): q and k [4, 128, 4096, 192], v [4, 128, 4096, 128], bf16,
causal, on the cuDNN, flash and memory-efficient backends (a backend that refuses the shape prints
"n/a (its reason)"), beside aotinfer's MLA rows (head_dim 192 / head_dim_vo 128); TF/s =
2 (192 + 128) x causal pairs (half the score matrix) x heads / time, as bench_prefill counts.
Usage: python3 prefill_torch.py RESULTS.jsonl"""
import json
import sys
import warnings

import torch
from torch_timing import median_us
from torch.nn.attention import SDPBackend, sdpa_kernel
import torch.nn.functional as F

rows = [json.loads(line) for line in open(sys.argv[1])]
copy_gbs = next(r["copy_gbs"] for r in rows if "copy_gbs" in r)
ours = {(r["kv"], r["causal"], r["batch"], r["len"], r["kv_heads"], r.get("head_dim", 128)): r
        for r in rows if "kv" in r and "head_dim_vo" not in r}
mla_rows = [r for r in rows if "kv" in r and "head_dim_vo" in r]
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


# ---- MLA prefill: head_dim 192 for q and k, 128 for v and o.
MLA_BATCH, MLA_LEN, MLA_HEADS, MLA_QK, MLA_VO = 4, 4096, 128, 192, 128


def flops_qk_vo(batch, length, heads, d_qk, d_vo, causal):
    """2 (d_qk + d_vo) flops per (query, key) pair and head; causal counts half the pairs."""
    pairs = batch * (length * length - (0.5 * length * length if causal else 0))
    return 2.0 * (d_qk + d_vo) * pairs * heads


BACKEND_WORDS = {SDPBackend.CUDNN_ATTENTION: "cudnn", SDPBackend.FLASH_ATTENTION: "flash",
                 SDPBackend.EFFICIENT_ATTENTION: "memory efficient"}


def refusal(backend, messages, error):
    """The backend's own reasons among the dispatcher's warnings, without their source locations."""
    lines = [m.split(" (Triggered internally")[0].strip() for m in messages]
    lines = [m for m in lines if m and not m.endswith("because:")]
    word = BACKEND_WORDS.get(backend, "")
    own = [m for m in lines if word and word in m.lower()] or lines
    reason = "; ".join(own[:2]) if own else (str(error).strip().splitlines() or [type(error).__name__])[0]
    return reason[:240]


def mla_peer(backend):
    """(us, None) or (None, reason) for SDPA on the MLA shape under one backend."""
    q = torch.randn(MLA_BATCH, MLA_HEADS, MLA_LEN, MLA_QK, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(MLA_BATCH, MLA_HEADS, MLA_LEN, MLA_QK, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(MLA_BATCH, MLA_HEADS, MLA_LEN, MLA_VO, device="cuda", dtype=torch.bfloat16)
    try:
        with warnings.catch_warnings(record=True) as caught, sdpa_kernel([backend]):
            warnings.simplefilter("always")
            try:
                out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                if out.shape[-1] != MLA_VO:
                    return None, f"output last dim {out.shape[-1]}"
                return median_us(lambda i: F.scaled_dot_product_attention(q, k, v, is_causal=True), iters=20, warmup=5), None
            except RuntimeError as e:
                # The dispatcher names each backend's reasons as warnings ("<backend> kernel not used
                # because:", then one warning per reason); the error itself is generic.
                return None, refusal(backend, [str(w.message) for w in caught], e)
    except Exception as e:  # noqa: BLE001 - a peer that fails prints its reason and the table goes on
        return None, f"{type(e).__name__}: {str(e).strip().splitlines()[0][:160] if str(e).strip() else ''}"
    finally:
        del q, k, v
        torch.cuda.empty_cache()


mla_flops = flops_qk_vo(MLA_BATCH, MLA_LEN, MLA_HEADS, MLA_QK, MLA_VO, True)
print(f"\nMLA prefill (DeepSeek-V3 / Kimi K2): {MLA_BATCH} x {MLA_LEN} causal, {MLA_HEADS} qo = kv heads, head_dim {MLA_QK} / "
      f"head_dim_vo {MLA_VO}, bf16; TF/s = 2 ({MLA_QK} + {MLA_VO}) x causal pairs (half) x heads / time")
print(f"{'who':28} {'time us':>10} {'TF/s':>8}")
for r in mla_rows:
    name = f"aotinfer {r['kv']}" + (f" page {r['page']}" if r["kv"] == "paged" else "")
    print(f"{name:28} {r['us']:10.1f} {r['flops'] / r['us'] / 1e6:8.1f}")
if not mla_rows:
    print(f"{'aotinfer':28} n/a (no MLA prefill row in {sys.argv[1]}: the package lacks head_dim 192 / head_dim_vo 128)")
for name, backend in (("SDPA cuDNN", SDPBackend.CUDNN_ATTENTION), ("SDPA flash", SDPBackend.FLASH_ATTENTION),
                      ("SDPA memory-efficient", SDPBackend.EFFICIENT_ATTENTION)):
    us, reason = mla_peer(backend)
    if us is None:
        print(f"{name:28} n/a ({reason})")
    else:
        print(f"{name:28} {us:10.1f} {mla_flops / us / 1e6:8.1f}")

print("\nplan() host time: " + ", ".join(f"batch {p['plan_batch']}: {p['plan_us']:.1f} us" for p in plans))
