"""The installed wheel on a GPU with PyTorch: merge_state, append_paged_kv, BatchDecode and
BatchPrefill (ragged and paged, each also with attention sinks) through the Python API on torch
tensors, checked against torch references in float64, and one decode timed against SDPA. Run on
a GPU machine after `pip install aotinfer-*.whl`."""
import math
import random
import sys

import torch

import aotinfer
from gpu_common import paged_layout, softmax_with_sinks

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
indptr, indices, last, num_pages = paged_layout(lens, page, spare_pages=5)
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
sinks = torch.rand(qo_heads, device="cuda") * 12 - 2  # per-head sink logits, from negligible to dominant
o_sinks, lse_sinks = torch.full_like(o, float("nan")), torch.full_like(lse, float("nan"))
decode.run(q, k_pages, v_pages, d_indptr, d_indices, d_last, o_sinks, lse_sinks, sinks=sinks)
torch.cuda.synchronize()

refs = {None: ([], []), "sinks": ([], [])}
start = 0
for i, n in enumerate(lens):
    k = k_new[start:start + n].double().transpose(0, 1).repeat_interleave(qo_heads // kv_heads, 0)  # [heads, n, dim]
    v = v_new[start:start + n].double().transpose(0, 1).repeat_interleave(qo_heads // kv_heads, 0)
    scores = torch.einsum("hd,hnd->hn", q[i].double(), k) / math.sqrt(dim)
    for key, sink in ((None, None), ("sinks", sinks)):
        p, s = softmax_with_sinks(scores, sink)
        refs[key][0].append(torch.einsum("hn,hnd->hd", p, v))
        refs[key][1].append(s)
    start += n
check("append + batch_decode o", o, torch.stack(refs[None][0]), 1e-2)
check("append + batch_decode lse", lse, torch.stack(refs[None][1]), 1e-4)
check("batch_decode with sinks o", o_sinks, torch.stack(refs["sinks"][0]), 1e-2)
check("batch_decode with sinks lse", lse_sinks, torch.stack(refs["sinks"][1]), 1e-4)


def prefill_checks():
    """BatchPrefill, ragged and paged (NHD pool, shuffled page order), on one small mixed batch of
    causal requests against a float64 reference of params/batch_prefill.h: query token t of a
    request sees keys j <= kv_len - qo_len + t; query head h reads KV head h // group. Each also
    with attention sinks."""
    qo_lens, kv_lens = [1, 37, 200], [5, 300, 200]
    h_qo, h_kv, d, page_size = 8, 2, 128, 16
    group, batch = h_qo // h_kv, len(qo_lens)
    qo_indptr, kv_indptr = [0], [0]
    for nq, nk in zip(qo_lens, kv_lens):
        qo_indptr.append(qo_indptr[-1] + nq)
        kv_indptr.append(kv_indptr[-1] + nk)
    total_q = qo_indptr[-1]
    q = torch.randn(total_q, h_qo, d, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(kv_indptr[-1], h_kv, d, device="cuda", dtype=torch.bfloat16)
    v = torch.randn_like(k)
    sinks = torch.rand(h_qo, device="cuda") * 8 - 2

    refs = {None: ([], []), "sinks": ([], [])}
    for i, (nq, nk) in enumerate(zip(qo_lens, kv_lens)):
        qi = q[qo_indptr[i]:qo_indptr[i + 1]].double().transpose(0, 1)                           # [h_qo, nq, d]
        ki = k[kv_indptr[i]:kv_indptr[i + 1]].double().transpose(0, 1).repeat_interleave(group, 0)  # [h_qo, nk, d]
        vi = v[kv_indptr[i]:kv_indptr[i + 1]].double().transpose(0, 1).repeat_interleave(group, 0)
        scores = qi @ ki.transpose(1, 2) / math.sqrt(d)                                           # [h_qo, nq, nk]
        t = torch.arange(nq, device="cuda")[:, None]
        j = torch.arange(nk, device="cuda")[None, :]
        scores = scores.masked_fill(j > nk - nq + t, float("-inf"))
        for key, sink in ((None, None), ("sinks", sinks)):
            p, s = softmax_with_sinks(scores, sink)
            refs[key][0].append((p @ vi).transpose(0, 1))  # [nq, h_qo, d]
            refs[key][1].append(s.transpose(0, 1))         # [nq, h_qo]

    # The same K/V in a page pool: request i's pages in a random order, spare pages left zero.
    pages = [math.ceil(n / page_size) for n in kv_lens]
    page_indptr = [0]
    for p in pages:
        page_indptr.append(page_indptr[-1] + p)
    num_pages = page_indptr[-1] + 3
    indices = random.sample(range(num_pages), page_indptr[-1])
    last = [n - (p - 1) * page_size for n, p in zip(kv_lens, pages)]
    k_pages = torch.zeros(num_pages, page_size, h_kv, d, device="cuda", dtype=torch.bfloat16)
    v_pages = torch.zeros_like(k_pages)
    for i, n in enumerate(kv_lens):
        ids = torch.tensor(indices[page_indptr[i]:page_indptr[i + 1]], device="cuda", dtype=torch.long)
        for pool, src in ((k_pages, k), (v_pages, v)):
            padded = torch.zeros(pages[i] * page_size, h_kv, d, device="cuda", dtype=torch.bfloat16)
            padded[:n] = src[kv_indptr[i]:kv_indptr[i + 1]]
            pool[ids] = padded.view(pages[i], page_size, h_kv, d)

    to_dev = lambda xs: torch.tensor(xs, device="cuda", dtype=torch.int32)  # noqa: E731
    d_qo, d_kv, d_pages, d_indices, d_last = (to_dev(x) for x in (qo_indptr, kv_indptr, page_indptr, indices, last))
    for kv_storage in ("ragged", "paged"):
        try:
            prefill = aotinfer.BatchPrefill(pkg, h_qo, h_kv, d, kv_storage=kv_storage, page_size=page_size,
                                            dtype_q="bf16", mask="causal")
        except aotinfer.NotFound as e:
            print(f"skip batch_prefill {kv_storage}: the package lacks the variant ({e})")
            continue
        float_bytes, int_bytes = prefill.workspace_sizes(total_q, batch)
        float_ws = torch.empty(max(float_bytes, 1), device="cuda", dtype=torch.uint8)
        int_ws = torch.empty(max(int_bytes, 1), device="cuda", dtype=torch.uint8)
        if kv_storage == "ragged":
            prefill.plan(qo_indptr, kv_indptr, float_ws, int_ws)
        else:
            prefill.plan(qo_indptr, page_indptr, float_ws, int_ws, kv_last_page_len=last, kv_indices=indices,
                         num_pages=num_pages)
        for key, sink in ((None, None), ("sinks", sinks)):
            o = torch.full_like(q, float("nan"))
            lse = torch.full((total_q, h_qo), float("nan"), device="cuda")
            if kv_storage == "ragged":
                prefill.run(q, k, v, d_qo, d_kv, o, lse=lse, sinks=sink)
            else:
                prefill.run(q, k_pages, v_pages, d_qo, d_pages, o, kv_indices=d_indices, kv_last_page_len=d_last,
                            lse=lse, sinks=sink)
            torch.cuda.synchronize()
            label = f"batch_prefill {kv_storage}" + (" with sinks" if sink is not None else "")
            check(f"{label} o", o, torch.cat(refs[key][0]), 1e-2)
            check(f"{label} lse", lse, torch.cat(refs[key][1]), 1e-3)


prefill_checks()

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
