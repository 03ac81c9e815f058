"""Host time per call of the Python layer: how long one call keeps the CPU before it returns.

Each op runs on a tiny shape (its kernel takes a few microseconds) in loops of CALLS calls with no
synchronisation inside; host time per call = loop wall time / CALLS, median of ROUNDS loops. The
same is measured for one torch.nn.functional.scaled_dot_product_attention call on a tiny shape
(the cost of any PyTorch op), and for the FlashInfer-compatible wrappers. plan() is timed call by
call after a synchronize, as an engine plans once per step (bench_decode's C++ plan() rows do the
same), at batch 64 x 4k keys. FlashInfer's own wrappers are timed in the same process when
`import flashinfer` works (source .peers/flashinfer_env.sh), else their rows read n/a. Run on a
GPU machine after `pip install aotinfer-*.whl` (default package)."""
import statistics
import sys
import time

import torch

import aotinfer

CALLS, ROUNDS = 200, 40
dev, bf16 = "cuda", torch.bfloat16


def host_us(call):
    for _ in range(50):
        call()
    torch.cuda.synchronize()
    samples = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        for _ in range(CALLS):
            call()
        samples.append((time.perf_counter() - start) / CALLS * 1e6)
        torch.cuda.synchronize()
    return statistics.median(samples)


def plan_us(call):
    """Host time of one plan-like call, each after a synchronize (median of ROUNDS * 5)."""
    samples = []
    for i in range(ROUNDS * 5 + 20):
        torch.cuda.synchronize()
        start = time.perf_counter()
        call()
        if i >= 20:
            samples.append((time.perf_counter() - start) * 1e6)
    return statistics.median(samples)


def peer_row(name, measure):
    """A row of FlashInfer itself: n/a when it is not importable or the call fails."""
    if peer is None:
        return name, None
    try:
        return name, measure()
    except Exception as e:  # noqa: BLE001 - another FlashInfer version's API: reported, not fatal
        print(f"({name}: {type(e).__name__}: {e})")
        return name, None


def i32(xs):
    return torch.tensor(xs, device=dev, dtype=torch.int32)


try:
    import flashinfer as peer
    PEER = f"FlashInfer {peer.__version__}"
except Exception as e:  # noqa: BLE001 - not installed, or not loadable here: its rows read n/a
    print(f"(FlashInfer not importable: {type(e).__name__}: {e})")
    peer, PEER = None, "FlashInfer"

pkg = aotinfer.Package()
hq, hk, dim, page = 32, 8, 128, 16
rows = []

# The machine's pace: an empty call into a C extension (aotinfer._ext) and reading the five
# attributes aotinfer reads of a tensor, from Python. Host times vary between machines and runs.
from aotinfer import _ext  # noqa: E402

probe = torch.empty(16, device=dev)
rows.append(("(pace) empty C-extension call", host_us(_ext.torch_path)))
rows.append(("(pace) data_ptr, get_device, dtype, shape, stride() of one tensor",
             host_us(lambda: (probe.data_ptr(), probe.get_device(), probe.dtype, probe.shape, probe.stride()))))

# SDPA on one query token against 16 keys.
sq = torch.randn(1, hq, 1, dim, device=dev, dtype=bf16)
sk = torch.randn(1, hq, 16, dim, device=dev, dtype=bf16)
sdpa = host_us(lambda: torch.nn.functional.scaled_dot_product_attention(sq, sk, sk))
rows.append(("torch SDPA, 1 query x 16 keys (peer)", sdpa))

# Decode: one request of 16 tokens (one page).
k_pages = torch.randn(4, page, hk, dim, device=dev, dtype=bf16)
v_pages = torch.randn_like(k_pages)
decode = aotinfer.BatchDecode(pkg, hq, hk, dim, page)
fb, ib = decode.workspace_sizes(1)
fws, iws = torch.empty(fb, device=dev, dtype=torch.uint8), torch.empty(ib, device=dev, dtype=torch.uint8)
decode.plan([0, 1], [16], fws, iws)
d_indptr, d_indices, d_last = i32([0, 1]), i32([2]), i32([16])
q = torch.randn(1, hq, dim, device=dev, dtype=bf16)
o = torch.empty_like(q)
rows.append(("BatchDecode.run, 1 x 16 tokens",
             host_us(lambda: decode.run(q, k_pages, v_pages, d_indptr, d_indices, d_last, o))))

# Prefill: one request of 16 query tokens over 16 keys, ragged.
pq = torch.randn(16, hq, dim, device=dev, dtype=bf16)
pk, pv = torch.randn(16, hk, dim, device=dev, dtype=bf16), torch.randn(16, hk, dim, device=dev, dtype=bf16)
po = torch.empty_like(pq)
prefill = aotinfer.BatchPrefill(pkg, hq, hk, dim, kv_storage="ragged")
fb, ib = prefill.workspace_sizes(16, 1)
pf, pi = torch.empty(fb, device=dev, dtype=torch.uint8), torch.empty(ib, device=dev, dtype=torch.uint8)
prefill.plan([0, 16], [0, 16], pf, pi)
d_qo = i32([0, 16])
rows.append(("BatchPrefill.run, 16 x 16 tokens", host_us(lambda: prefill.run(pq, pk, pv, d_qo, d_qo, po))))

# merge_state: 16 rows.
v_a, v_b = torch.randn(16, dim, device=dev, dtype=bf16), torch.randn(16, dim, device=dev, dtype=bf16)
s_a, s_b = torch.randn(16, device=dev), torch.randn(16, device=dev)
v_out, s_out = torch.empty_like(v_a), torch.empty_like(s_a)
rows.append(("merge_state, 16 rows", host_us(lambda: aotinfer.merge_state(pkg, v_a, s_a, v_b, s_b, v_out, s_out))))

# append_paged_kv: one token.
nk, nv = torch.randn(1, hk, dim, device=dev, dtype=bf16), torch.randn(1, hk, dim, device=dev, dtype=bf16)
bi, pos = i32([0]), i32([15])
rows.append(("append_paged_kv, 1 token",
             host_us(lambda: aotinfer.append_paged_kv(pkg, nk, nv, bi, pos, k_pages, v_pages, d_indptr, d_indices, d_last))))

# plan() at batch 64, 4096 keys (256 pages) a request; prefill with 16 query tokens a request.
B, PAGES, QO = 64, 256, 16
b_indptr = torch.arange(0, (B + 1) * PAGES, PAGES, dtype=torch.int32)
b_last = torch.full((B,), page, dtype=torch.int32)
b_indices = torch.arange(B * PAGES, dtype=torch.int32)
b_qo = torch.arange(0, (B + 1) * QO, QO, dtype=torch.int32)
u8 = lambda n: torch.empty(max(n, 1), device=dev, dtype=torch.uint8)  # noqa: E731
decode64 = aotinfer.BatchDecode(pkg, hq, hk, dim, page)
d64_ws = [u8(n) for n in decode64.workspace_sizes(B)]
rows.append(("BatchDecode.plan, batch 64 x 4k, CPU int32 tensors",
             plan_us(lambda: decode64.plan(b_indptr, b_last, *d64_ws))))
l_indptr, l_last = b_indptr.tolist(), b_last.tolist()
rows.append(("BatchDecode.plan, batch 64 x 4k, lists", plan_us(lambda: decode64.plan(l_indptr, l_last, *d64_ws))))
prefill64 = aotinfer.BatchPrefill(pkg, hq, hk, dim, kv_storage="paged", page_size=page)
p64_ws = [u8(n) for n in prefill64.workspace_sizes(B * QO, B)]
rows.append(("BatchPrefill.plan (paged), batch 64 x 16 queries x 4k, CPU int32 tensors",
             plan_us(lambda: prefill64.plan(b_qo, b_indptr, *p64_ws, kv_last_page_len=b_last))))

# The FlashInfer-compatible wrappers on the same shapes.
try:
    from aotinfer import flashinfer as fi
except ImportError as e:  # the compat layer is optional for this table
    print(f"(aotinfer.flashinfer not importable: {e})")
    fi = None
if fi is not None:
    wrapper = fi.BatchDecodeWithPagedKVCacheWrapper(torch.empty(128 << 20, device=dev, dtype=torch.uint8))
    wrapper.plan(d_indptr, d_indices, d_last, hq, hk, dim, page, q_data_type=bf16)
    rows.append(("flashinfer.BatchDecodeWithPagedKVCacheWrapper.run (out given)",
                 host_us(lambda: wrapper.run(q, (k_pages, v_pages), out=o))))
    rows.append(("flashinfer.BatchDecodeWithPagedKVCacheWrapper.run (allocates out)",
                 host_us(lambda: wrapper.run(q, (k_pages, v_pages)))))
    ragged = fi.BatchPrefillWithRaggedKVCacheWrapper(torch.empty(128 << 20, device=dev, dtype=torch.uint8))
    ragged.plan(d_qo, d_qo, hq, hk, dim, causal=True, q_data_type=bf16)
    rows.append(("flashinfer.BatchPrefillWithRaggedKVCacheWrapper.run (out given)",
                 host_us(lambda: ragged.run(pq, pk, pv, out=po))))
    # plan() at batch 64 from CPU int32 tensors, as the core's rows: each also copies the
    # metadata run() reads to the GPU.
    decode64_fi = fi.BatchDecodeWithPagedKVCacheWrapper(u8(128 << 20))
    rows.append(("flashinfer.BatchDecodeWithPagedKVCacheWrapper.plan, batch 64 x 4k",
                 plan_us(lambda: decode64_fi.plan(b_indptr, b_indices, b_last, hq, hk, dim, page, q_data_type=bf16))))
    paged64_fi = fi.BatchPrefillWithPagedKVCacheWrapper(u8(128 << 20))
    rows.append(("flashinfer.BatchPrefillWithPagedKVCacheWrapper.plan, batch 64 x 16 queries x 4k",
                 plan_us(lambda: paged64_fi.plan(b_qo, b_indptr, b_indices, b_last, hq, hk, dim, page, causal=True,
                                                 q_data_type=bf16))))

# FlashInfer itself on the same calls, in this process (n/a when it is not importable).
def peer_wrapper(cls):
    return getattr(peer, cls)(u8(128 << 20), "NHD")


def peer_decode_run():
    w = peer_wrapper("BatchDecodeWithPagedKVCacheWrapper")
    w.plan(d_indptr, d_indices, d_last, hq, hk, dim, page, q_data_type=bf16, kv_data_type=bf16)
    return host_us(lambda: w.run(q, (k_pages, v_pages), out=o))


def peer_ragged_run():
    w = peer_wrapper("BatchPrefillWithRaggedKVCacheWrapper")
    w.plan(d_qo, d_qo, hq, hk, dim, causal=True, q_data_type=bf16, kv_data_type=bf16)
    return host_us(lambda: w.run(pq, pk, pv, out=po))


def peer_decode_plan():
    w = peer_wrapper("BatchDecodeWithPagedKVCacheWrapper")
    return plan_us(lambda: w.plan(b_indptr, b_indices, b_last, hq, hk, dim, page, q_data_type=bf16,
                                  kv_data_type=bf16))


def peer_prefill_plan():
    w = peer_wrapper("BatchPrefillWithPagedKVCacheWrapper")
    return plan_us(lambda: w.plan(b_qo, b_indptr, b_indices, b_last, hq, hk, dim, page, causal=True,
                                  q_data_type=bf16, kv_data_type=bf16))


rows.append(peer_row(f"{PEER} BatchDecodeWithPagedKVCacheWrapper.run (out given, peer)", peer_decode_run))
rows.append(peer_row(f"{PEER} BatchPrefillWithRaggedKVCacheWrapper.run (out given, peer)", peer_ragged_run))
rows.append(peer_row(f"{PEER} BatchDecodeWithPagedKVCacheWrapper.plan, batch 64 x 4k (peer)", peer_decode_plan))
rows.append(peer_row(f"{PEER} BatchPrefillWithPagedKVCacheWrapper.plan, batch 64 x 16 queries x 4k (peer)",
                     peer_prefill_plan))

torch.cuda.synchronize()
print(f"aotinfer._ext reads PyTorch GPU tensors through: {_ext.torch_path() or 'Python (not bound)'}")
print(f"\nHost time per call (median of {ROUNDS} loops of {CALLS} calls; plan rows: median of single calls after "
      f"a synchronize), {torch.cuda.get_device_name()}")
print("| op | us/call | vs SDPA call |\n|---|---|---|")
for name, us in rows:
    print(f"| {name} | {us:.1f} | {us / sdpa:.2f}x |" if us is not None else f"| {name} | n/a | n/a |")
ours = {name: us for name, us in rows if "peer" not in name and "pace" not in name}
worst = max(us for name, us in ours.items() if "allocates" not in name and "plan" not in name)
print(f"slowest aotinfer per-call op: {worst:.1f} us (target <= 10)")
core_plans = [us for name, us in ours.items() if name.startswith("Batch") and ".plan" in name]
print(f"slowest core plan() at batch 64: {max(core_plans):.1f} us (target <= 15)")
fi_decode = ours.get("flashinfer.BatchDecodeWithPagedKVCacheWrapper.run (out given)")
if fi_decode is not None:
    print(f"flashinfer decode run (out given): {fi_decode:.1f} us (target <= 8)")
sys.exit(0)
