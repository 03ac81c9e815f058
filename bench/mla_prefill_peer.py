#!/usr/bin/env python3
"""FlashInfer 0.7.2 as the peer of bench_prefill's MLA prefill rows (DeepSeek-V3 / Kimi K2):
causal, 4 requests x 4096 tokens (qo_len = kv_len), 128 query heads = 128 KV heads, head_dim 192
for q and k, head_dim_vo 128 for v and o, bf16, sm_scale 1/sqrt(192).

Rows: BatchPrefillWithRaggedKVCacheWrapper (q [16384, 128, 192], k [16384, 128, 192],
v [16384, 128, 128]) and BatchPrefillWithPagedKVCacheWrapper (page 64, NHD, pages shuffled) with
K and V pools of their own widths ("paged", as aotinfer's row) and with V's pages a [..., :128]
view of a 192-wide pool ("paged-vwide": fa3's paged kernel refuses unequal K and V page strides),
each with backend "fa3" and "fa2"; a row that fails prints its error and the rest go on. Before them, each configuration's first plan+run (its JIT compile unless
cached).
TF/s = 2 (192 + 128) x causal pairs x heads / time, the pairs half the score matrix
(batch x len^2 / 2), as bench_prefill and prefill_torch.py count them.
Timing as ../shared/peers/flashinfer_peer.py: CUDA events around each call, 5 warm-up calls, then
the median of 20.

Run on the GPU machine with FlashInfer importable (the peers' flashinfer_env.sh, which bench/run.sh
sources from .peers/ when that copy of ../shared/peers was carried):
    source .peers/flashinfer_env.sh && python3 bench/mla_prefill_peer.py [PREFILL_RESULTS.jsonl]
With bench_prefill's results file, aotinfer's MLA rows are printed beside them, with the ratios.
MLA_PEER_BACKENDS (default "fa3,fa2") and MLA_PEER_KV (default "ragged,paged,paged-vwide") pick rows.
If FlashInfer does not import, every row reads n/a with the reason.
"""
import functools
import json
import math
import os
import sys
import time
import traceback

print = functools.partial(print, flush=True)  # noqa: A001 - PYTHONUNBUFFERED semantics

import torch  # noqa: E402
from torch_timing import median_s  # noqa: E402

BATCH, LEN, HEADS, D_QK, D_VO, PAGE = 4, 4096, 128, 192, 128, 64
SM_SCALE = 1.0 / math.sqrt(D_QK)
BF16 = torch.bfloat16
WARMUP, ITERS = 5, 20
WS_BYTES = 512 * 1024 * 1024
DEV = torch.device("cuda:0")
# 2 (d_qk + d_vo) flops per (query, key) pair and head: q.k over 192, p.v over 128; causal keeps
# half the pairs.
PAIRS = BATCH * LEN * LEN / 2
FLOPS = 2.0 * (D_QK + D_VO) * PAIRS * HEADS

try:
    T0 = time.perf_counter()
    import flashinfer  # noqa: E402

    IMPORT_S, IMPORT_ERROR = time.perf_counter() - T0, None
except Exception as e:  # noqa: BLE001 - no FlashInfer: rows read n/a
    flashinfer, IMPORT_S, IMPORT_ERROR = None, 0.0, f"{type(e).__name__}: {e}"

_WS = None


def workspace():
    global _WS
    if _WS is None:
        _WS = torch.empty(WS_BYTES, dtype=torch.uint8, device=DEV)
    return _WS


def row(name, fn):
    try:
        print(f"{name:<58s} {fn()}")
    except Exception as e:  # noqa: BLE001 - keep going
        err = f"{type(e).__name__}: {e}".replace("\n", " ")[:300]
        print(f"{name:<58s} ERROR {err}")
        if os.environ.get("PEER_TRACEBACK"):
            traceback.print_exc()
    finally:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def ragged_planned(backend, batch, length):
    q = torch.randn(batch * length, HEADS, D_QK, dtype=BF16, device=DEV)
    k = torch.randn(batch * length, HEADS, D_QK, dtype=BF16, device=DEV)
    v = torch.randn(batch * length, HEADS, D_VO, dtype=BF16, device=DEV)
    out = torch.empty(batch * length, HEADS, D_VO, dtype=BF16, device=DEV)
    indptr = torch.arange(0, batch + 1, dtype=torch.int32, device=DEV) * length
    w = flashinfer.BatchPrefillWithRaggedKVCacheWrapper(workspace(), "NHD", backend=backend)
    w.plan(
        indptr,
        indptr,
        HEADS,
        HEADS,
        D_QK,
        head_dim_vo=D_VO,
        causal=True,
        sm_scale=SM_SCALE,
        q_data_type=BF16,
        kv_data_type=BF16,
    )
    return lambda: w.run(q, k, v, out=out)


def paged_planned(backend, batch, length, v_in_k_wide_pool=False):
    """v_in_k_wide_pool: V's pages as a [..., :128] view of a 192-wide pool, so that K's and V's page
    strides are equal (fa3's paged kernel takes one page stride for both)."""
    pages_per_req = (length + PAGE - 1) // PAGE
    total = batch * pages_per_req
    k_pages = torch.randn(total, PAGE, HEADS, D_QK, dtype=BF16, device=DEV)
    if v_in_k_wide_pool:
        v_pages = torch.randn(total, PAGE, HEADS, D_QK, dtype=BF16, device=DEV)[..., :D_VO]
    else:
        v_pages = torch.randn(total, PAGE, HEADS, D_VO, dtype=BF16, device=DEV)
    indices = torch.randperm(total, device=DEV).to(torch.int32)  # pages scattered as in a real pool
    kv_indptr = torch.arange(0, batch + 1, dtype=torch.int32, device=DEV) * pages_per_req
    last = torch.full((batch,), length - (pages_per_req - 1) * PAGE, dtype=torch.int32, device=DEV)
    q = torch.randn(batch * length, HEADS, D_QK, dtype=BF16, device=DEV)
    out = torch.empty(batch * length, HEADS, D_VO, dtype=BF16, device=DEV)
    qo_indptr = torch.arange(0, batch + 1, dtype=torch.int32, device=DEV) * length
    w = flashinfer.BatchPrefillWithPagedKVCacheWrapper(workspace(), "NHD", backend=backend)
    w.plan(
        qo_indptr,
        kv_indptr,
        indices,
        last,
        HEADS,
        HEADS,
        D_QK,
        PAGE,
        head_dim_vo=D_VO,
        causal=True,
        sm_scale=SM_SCALE,
        q_data_type=BF16,
        kv_data_type=BF16,
    )
    return lambda: w.run(q, (k_pages, v_pages), out=out)


PLANNED = {"ragged": ragged_planned, "paged": paged_planned,
           "paged-vwide": functools.partial(paged_planned, v_in_k_wide_pool=True)}
# Row kinds: paged-vwide is the paged row with V's pages in a K-wide pool (equal page strides).
KIND_NAMES = {"ragged": "ragged", "paged": f"paged p{PAGE}", "paged-vwide": f"paged p{PAGE} (V in a {D_QK}-wide pool)"}
OURS_KIND = {"ragged": "ragged", "paged": "paged", "paged-vwide": "paged"}


def ours_rows(path):
    """aotinfer's MLA rows of bench_prefill's results: {"ragged": (us, tflops), "paged": ...}."""
    found = {}
    if not path or not os.path.exists(path):
        return found
    for line in open(path):
        r = json.loads(line)
        if r.get("head_dim_vo") == D_VO and r.get("head_dim") == D_QK and r.get("causal") and r.get("batch") == BATCH \
                and r.get("len") == LEN and r.get("kv_heads") == HEADS:
            found[r["kv"]] = (r["us"], r["flops"] / r["us"] / 1e6)
    return found


def main():
    backends = [b.strip() for b in os.environ.get("MLA_PEER_BACKENDS", "fa3,fa2").split(",") if b.strip()]
    kinds = [k.strip() for k in os.environ.get("MLA_PEER_KV", "ragged,paged,paged-vwide").split(",") if k.strip() in PLANNED]
    ours = ours_rows(sys.argv[1] if len(sys.argv) > 1 else None)
    print(f"\nMLA prefill beside FlashInfer: causal {BATCH} x {LEN}, {HEADS} qo = kv heads, head_dim {D_QK} / head_dim_vo {D_VO}, "
          f"bf16, paged page {PAGE} NHD;\nTF/s = 2 ({D_QK} + {D_VO}) x causal pairs (batch x len^2 / 2) x heads / time; "
          f"CUDA events, median of {ITERS} after {WARMUP} warm-ups")
    if flashinfer is None:
        print(f"{'flashinfer':<58s} n/a ({IMPORT_ERROR}; source .peers/flashinfer_env.sh)")
    else:
        print(f"{'flashinfer.__version__':<58s} {flashinfer.__version__}  (import {IMPORT_S:.2f} s)")
    print(f"{'torch / CUDA':<58s} {torch.__version__} / {torch.version.cuda}")
    for kind in dict.fromkeys(OURS_KIND[k] for k in kinds):
        name = f"aotinfer {KIND_NAMES[kind]}"
        if kind in ours:
            us, tf = ours[kind]
            print(f"{name:<58s} {us / 1e3:10.3f} ms  {tf:8.1f} TFLOP/s")
        else:
            print(f"{name:<58s} n/a (no such row in the results file)")
    if flashinfer is None:
        for kind in kinds:
            for backend in backends:
                print(f"{'mla prefill ' + KIND_NAMES[kind] + ' ' + backend:<58s} n/a (FlashInfer does not import)")
        return

    # First plan+run of each configuration: its JIT compile (fa2 ~25 s, fa3 ~80-100 s) unless cached
    # (paged-vwide shares paged's modules).
    for kind in (k for k in kinds if k != "paged-vwide" or "paged" not in kinds):
        for backend in backends:
            def jit(kind=kind, backend=backend):
                t0 = time.perf_counter()
                PLANNED[kind](backend, 1, 128)()
                torch.cuda.synchronize()
                return f"{time.perf_counter() - t0:9.1f} s (first plan+run, includes JIT compile unless cached)"

            row(f"JIT mla prefill {KIND_NAMES[kind]} {backend} bf16 {D_QK}/{D_VO}", jit)

    for kind in kinds:
        for backend in backends:
            def bench(kind=kind, backend=backend):
                t = median_s(PLANNED[kind](backend, BATCH, LEN), WARMUP, ITERS)
                tf = FLOPS / t / 1e12
                mine = ours.get(OURS_KIND[kind])
                ratio = f"  (aotinfer / this: {mine[1] / tf:5.2f}x)" if mine else ""
                return f"{t * 1e3:10.3f} ms  {tf:8.1f} TFLOP/s{ratio}"

            row(f"mla prefill {KIND_NAMES[kind]} {backend} bf16 {HEADS}/{HEADS} heads causal {BATCH}x{LEN}", bench)


if __name__ == "__main__":
    if not torch.cuda.is_available():
        print("CUDA not available", file=sys.stderr)
        sys.exit(1)
    main()
