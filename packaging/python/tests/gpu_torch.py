"""The installed wheel on a GPU with PyTorch: merge_state, append_paged_kv and BatchDecode through
the Python API on torch tensors, checked against torch references in float64, and one decode
timed against SDPA. Run on a GPU machine after `pip install aotinfer-*.whl`."""
import math
import random
import sys

import torch

import aotinfer

seed = random.randrange(1 << 30)
torch.manual_seed(seed)
print(f"seed {seed}")
pkg = aotinfer.Package()
print(pkg, len(pkg.variants()), "variants")
failures = []


def check(name, got, want, tol):
    err = ((got.double() - want.double()).norm() / want.double().norm()).item()
    ok = err < tol and math.isfinite(err)
    print(f"{'ok  ' if ok else 'FAIL'} {name}: relative error {err:.2e} (tolerance {tol:g})")
    if not ok:
        failures.append(name)


# merge_state: two states of one key set, merged, equal attention over the whole set.
rows, dim = 3000, 128
v_a, v_b = (torch.randn(rows, dim, device="cuda", dtype=torch.bfloat16) for _ in range(2))
s_a, s_b = (torch.randn(rows, device="cuda") * 4 for _ in range(2))
v_out, s_out = torch.full_like(v_a, float("nan")), torch.full_like(s_a, float("nan"))
aotinfer.merge_state(pkg, v_a, s_a, v_b, s_b, v_out, s_out, stream=torch.cuda.current_stream())
s_ref = torch.logaddexp(s_a.double(), s_b.double())
v_ref = v_a.double() * (s_a.double() - s_ref).exp()[:, None] + v_b.double() * (s_b.double() - s_ref).exp()[:, None]
torch.cuda.synchronize()
check("merge_state v", v_out, v_ref, 1e-2)
check("merge_state lse", s_out, s_ref, 1e-5)

# A paged cache (NHD, random page order) filled with append_paged_kv, then one decode step.
batch, qo_heads, kv_heads, page = 7, 32, 8, 16
lens = [random.randint(1, 3000) for _ in range(batch)]
pages = [math.ceil(n / page) for n in lens]
indptr = [0]
for p in pages:
    indptr.append(indptr[-1] + p)
num_pages = indptr[-1] + 5
indices = random.sample(range(num_pages), indptr[-1])
last = [n - (p - 1) * page for n, p in zip(lens, pages)]
k_pages = torch.zeros(num_pages, page, kv_heads, dim, device="cuda", dtype=torch.bfloat16)
v_pages = torch.zeros_like(k_pages)
k_new = torch.randn(sum(lens), kv_heads, dim, device="cuda", dtype=torch.bfloat16)
v_new = torch.randn_like(k_new)
batch_indices = torch.tensor([i for i, n in enumerate(lens) for _ in range(n)], device="cuda", dtype=torch.int32)
positions = torch.tensor([j for n in lens for j in range(n)], device="cuda", dtype=torch.int32)
dev = lambda xs: torch.tensor(xs, device="cuda", dtype=torch.int32)  # noqa: E731
d_indptr, d_indices, d_last = dev(indptr), dev(indices), dev(last)
aotinfer.append_paged_kv(pkg, k_new, v_new, batch_indices, positions, k_pages, v_pages, d_indptr, d_indices, d_last)

decode = aotinfer.BatchDecode(pkg, qo_heads, kv_heads, dim, page)
float_bytes, int_bytes = decode.workspace_sizes(batch)
float_ws = torch.empty(float_bytes, device="cuda", dtype=torch.uint8)
int_ws = torch.empty(int_bytes, device="cuda", dtype=torch.uint8)
decode.plan(indptr, last, float_ws, int_ws, kv_indices=indices, num_pages=num_pages)
q = torch.randn(batch, qo_heads, dim, device="cuda", dtype=torch.bfloat16)
o = torch.full_like(q, float("nan"))
lse = torch.full((batch, qo_heads), float("nan"), device="cuda")
decode.run(q, k_pages, v_pages, d_indptr, d_indices, d_last, o, lse)
torch.cuda.synchronize()

o_ref, lse_ref, start = [], [], 0
for i, n in enumerate(lens):
    k = k_new[start:start + n].double().transpose(0, 1).repeat_interleave(qo_heads // kv_heads, 0)  # [heads, n, dim]
    v = v_new[start:start + n].double().transpose(0, 1).repeat_interleave(qo_heads // kv_heads, 0)
    scores = torch.einsum("hd,hnd->hn", q[i].double(), k) / math.sqrt(dim)
    o_ref.append(torch.einsum("hn,hnd->hd", scores.softmax(-1), v))
    lse_ref.append(scores.logsumexp(-1))
    start += n
check("append + batch_decode o", o, torch.stack(o_ref), 1e-2)
check("append + batch_decode lse", lse, torch.stack(lse_ref), 1e-4)

# One decode timed against SDPA (cuDNN, then flash) on the same shapes, dense KV.
lens = [4096] * 64
pages = [n // page for n in lens]
indptr = [i * pages[0] for i in range(len(lens) + 1)]
last = [page] * len(lens)
num_pages = indptr[-1]
k_pages = torch.randn(num_pages, page, kv_heads, dim, device="cuda", dtype=torch.bfloat16)
v_pages = torch.randn_like(k_pages)
perm = torch.randperm(num_pages, device="cuda", dtype=torch.int32)
decode = aotinfer.BatchDecode(pkg, qo_heads, kv_heads, dim, page)
float_bytes, int_bytes = decode.workspace_sizes(len(lens))
float_ws = torch.empty(max(float_bytes, 1), device="cuda", dtype=torch.uint8)
int_ws = torch.empty(int_bytes, device="cuda", dtype=torch.uint8)
decode.plan(indptr, last, float_ws, int_ws)
q = torch.randn(len(lens), qo_heads, dim, device="cuda", dtype=torch.bfloat16)
o = torch.empty_like(q)
d_indptr, d_last = dev(indptr), dev(last)


def time_us(fn, iters=30):
    for _ in range(5):
        fn()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(iters):
        start.record(); fn(); stop.record(); stop.synchronize()
        times.append(start.elapsed_time(stop) * 1e3)
    return sorted(times)[len(times) // 2]


ours = time_us(lambda: decode.run(q, k_pages, v_pages, d_indptr, perm, d_last, o))
k_dense = k_pages.view(len(lens), -1, kv_heads, dim).transpose(1, 2).contiguous()
v_dense = v_pages.view(len(lens), -1, kv_heads, dim).transpose(1, 2).contiguous()
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402
peers = {}
for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
    try:
        with sdpa_kernel([backend]):
            peers[name] = time_us(lambda: torch.nn.functional.scaled_dot_product_attention(
                q[:, :, None], k_dense, v_dense, enable_gqa=True))
    except RuntimeError as e:
        peers[name] = None
moved = 2 * k_pages.numel() * 2 + 2 * q.numel() * 2
print(f"decode bs64 x 4k, 32/8 heads, hd 128, bf16 (through Python): aotinfer {ours:.1f} us ({moved / ours / 1e3:.0f} GB/s); "
      + ", ".join(f"SDPA {n} {t:.1f} us" if t else f"SDPA {n} n/a" for n, t in peers.items()))

print("python GPU checks:", "FAILED " + ", ".join(failures) if failures else "all passed")
sys.exit(1 if failures else 0)
