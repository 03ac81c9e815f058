"""Bad tensors on a GPU with PyTorch: every class of mistake is refused with aotinfer.InvalidArgument
naming the argument, nothing is launched, and the CUDA context stays usable (each refusal is
followed by a synchronize, and the last step runs correct calls and checks their results against
float64 references). Also checks the strided inputs the checks let through: K/V as views of one
[pages, 2, ...] tensor, and ragged K/V as views of a fused QKV tensor.
Run on a GPU machine after `pip install aotinfer-*.whl` (default package)."""
import math
import random
import sys

import torch

import aotinfer
from gpu_common import paged_layout, softmax_with_sinks

seed = random.randrange(1 << 30)
torch.manual_seed(seed)
random.seed(seed)
print(f"seed {seed}")
pkg = aotinfer.Package()
failures = []
dev = "cuda"
bf16 = torch.bfloat16


def result(name, ok, detail=""):
    print(f"{'ok  ' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}")
    if not ok:
        failures.append(name)


def close(name, got, want, tol):
    err = ((got.double() - want.double()).norm() / want.double().norm()).item()
    result(name, err < tol and math.isfinite(err), f"relative error {err:.2e} (tolerance {tol:g})")


def refused(name, call, *words):
    """call() must raise InvalidArgument mentioning every word; the context must still work."""
    try:
        call()
        result(name, False, "accepted")
    except aotinfer.InvalidArgument as e:
        message = str(e)
        missing = [w for w in words if w not in message]
        result(name, not missing, message if not missing else f"{message!r} lacks {missing}")
    except Exception as e:  # noqa: BLE001 - any other failure is a finding
        result(name, False, f"{type(e).__name__}: {e}")
    torch.cuda.synchronize()  # raises if a launch faulted


def i32(xs):
    return torch.tensor(xs, device=dev, dtype=torch.int32)


def attention_reference(q, k, v, causal_offset=None, sinks=None):
    """q [n, hq, d], k/v [m, hk, d] -> o [n, hq, d] in float64 (GQA; causal aligned to the end;
    sinks [hq]: attention-sink logits)."""
    group = q.shape[1] // k.shape[1]
    k = k.double().repeat_interleave(group, 1)
    v = v.double().repeat_interleave(group, 1)
    s = torch.einsum("nhd,mhd->hnm", q.double(), k) / math.sqrt(q.shape[-1])
    if causal_offset is not None:
        n, m = q.shape[0], k.shape[0]
        keep = torch.arange(m, device=dev)[None, :] <= torch.arange(n, device=dev)[:, None] + (m - n)
        s = s.masked_fill(~keep, float("-inf"))
    return torch.einsum("hnm,mhd->nhd", softmax_with_sinks(s, sinks)[0], v)


# --- decode: a paged cache (NHD), K and V interleaved in one [pages, 2, page, heads, dim] tensor
batch, hq, hk, dim, page = random.randint(2, 6), 32, 8, 128, 16
lens = [random.randint(1, 700) for _ in range(batch)]
indptr, indices, last, num_pages = paged_layout(lens, page, spare_pages=3)
cache = torch.randn(num_pages, 2, page, hk, dim, device=dev, dtype=bf16)
k_pages, v_pages = cache[:, 0], cache[:, 1]
d_indptr, d_indices, d_last = i32(indptr), i32(indices), i32(last)

decode = aotinfer.BatchDecode(pkg, hq, hk, dim, page)
fb, ib = decode.workspace_sizes(batch)
fws, iws = torch.empty(fb, device=dev, dtype=torch.uint8), torch.empty(ib, device=dev, dtype=torch.uint8)
decode.plan(indptr, last, fws, iws, kv_indices=indices, num_pages=num_pages)
q = torch.randn(batch, hq, dim, device=dev, dtype=bf16)
o = torch.empty_like(q)


def run(**changes):
    args = dict(q=q, k_pages=k_pages, v_pages=v_pages, kv_indptr=d_indptr, kv_indices=d_indices,
                kv_last_page_len=d_last, o=o)
    args.update(changes)
    decode.run(**args)


def decode_reference(sinks=None):
    out = []
    for i, n in enumerate(lens):
        rows = [(indices[indptr[i] + t // page], t % page) for t in range(n)]
        k = torch.stack([k_pages[p, s] for p, s in rows])
        v = torch.stack([v_pages[p, s] for p, s in rows])
        out.append(attention_reference(q[i:i + 1], k, v, sinks=sinks)[0])
    return torch.stack(out)


sinks = torch.rand(hq, device=dev) * 8 - 2  # attention-sink logits, one per query head


refused("decode: float16 q for a bf16 decode", lambda: run(q=q.half()), "q:", "expected dtype bf16", "got f16")
refused("decode: o with too few rows", lambda: run(o=o[:-1]), "o:", f"[{batch}, {hq}, {dim}]", f"[{batch - 1}, {hq}, {dim}]")
refused("decode: q with the wrong head_dim", lambda: run(q=torch.randn(batch, hq, 64, device=dev, dtype=bf16)),
        "q:", "head_dim")
refused("decode: a KV pool left on the CPU", lambda: run(k_pages=k_pages.cpu()), "k_pages:", "CPU")
refused("decode: a KV pool in pinned host memory", lambda: run(v_pages=v_pages.cpu().pin_memory()), "v_pages:", "pinned")
refused("decode: metadata on the CPU", lambda: run(kv_indices=d_indices.cpu()), "kv_indices:", "CPU")
refused("decode: int64 metadata", lambda: run(kv_indptr=d_indptr.long()), "kv_indptr:", "i32", "int64")
refused("decode: a transposed q", lambda: run(q=q.transpose(0, 1).contiguous().transpose(0, 1)), "q:", "contiguous")
refused("decode: a misaligned q", lambda: run(q=torch.empty(q.numel() + 1, device=dev, dtype=bf16)[1:].view_as(q)),
        "q:", "16-byte aligned")
refused("decode: float16 lse", lambda: run(lse=torch.empty(batch, hq, device=dev, dtype=torch.float16)), "lse:", "f32")
refused("decode: a pool with fewer pages than the plan's page ids", lambda: run(k_pages=k_pages[:-4], v_pages=v_pages[:-4]),
        "k_pages:", f">= {num_pages}")
refused("decode: a pool in the other layout", lambda: run(k_pages=k_pages.transpose(1, 2)), "k_pages:")
refused("decode: a 5-dimensional tensor", lambda: run(q=q[None, None]), "q:", "5 dimensions")
refused("decode: a float64 q", lambda: run(q=q.double()), "q:", "float64")
refused("decode: bf16 sinks", lambda: run(sinks=sinks.to(bf16)), "sinks:", "f32", "bf16")
refused("decode: sinks of the KV heads' count", lambda: run(sinks=sinks[:hk]), "sinks:", f"[{hq}]", "num_qo_heads")
refused("decode: sinks on the CPU", lambda: run(sinks=sinks.cpu()), "sinks:", "CPU")
refused("decode: strided sinks", lambda: run(sinks=torch.rand(2 * hq, device=dev)[::2]), "sinks:", "contiguous")

o.fill_(float("nan"))
run()
torch.cuda.synchronize()
close("decode after every refusal (K/V interleaved in one tensor)", o, decode_reference(), 1e-2)
o.fill_(float("nan"))
run(sinks=sinks)
torch.cuda.synchronize()
close("decode with sinks", o, decode_reference(sinks), 1e-2)


# plan(): host metadata as lists (above), CPU int32 tensors (read in place) or int64 tensors
# (converted); what the runtime cannot check itself (it takes pointers) is refused by name.
def plan(**changes):
    args = dict(kv_indptr=indptr, kv_last_page_len=last, float_workspace=fws, int_workspace=iws, kv_indices=indices,
                num_pages=num_pages)
    args.update(changes)
    decode.plan(**args)


refused("plan: metadata on the GPU", lambda: plan(kv_indptr=d_indptr), "kv_indptr:", "host metadata")
refused("plan: int32 metadata on the GPU", lambda: plan(kv_indices=d_indices), "kv_indices:", "host metadata")
refused("plan: a workspace on the CPU", lambda: plan(int_workspace=iws.cpu()), "int_workspace:", "GPU memory")
refused("plan: a strided workspace", lambda: plan(float_workspace=fws[::2]), "float_workspace:", "contiguous")
refused("plan: kv_last_page_len of another batch", lambda: plan(kv_last_page_len=last[:-1]), "kv_last_page_len",
        f"the batch is {batch}")
refused("plan: an entry outside int32", lambda: plan(kv_indices=indices[:-1] + [2**31]), "kv_indices:", "int32")
host = lambda xs, dtype=torch.int32: torch.tensor(xs, dtype=dtype)  # noqa: E731
for name, changes in (("CPU int32 tensors", dict(kv_indptr=host(indptr), kv_last_page_len=host(last),
                                                  kv_indices=host(indices))),
                      ("CPU int64 tensors", dict(kv_indptr=host(indptr, torch.int64),
                                                 kv_last_page_len=host(last, torch.int64))),
                      ("pinned int32 tensors", dict(kv_indptr=host(indptr).pin_memory(), kv_indices=host(indices)[:]))):
    plan(**changes)
    o.fill_(float("nan"))
    run()
    torch.cuda.synchronize()
    close(f"decode planned from {name}", o, decode_reference(), 1e-2)

# --- prefill, ragged: K and V are token-strided views of a fused QKV tensor --------------------
qo_lens = [random.randint(1, 300) for _ in range(3)]
kv_lens = [n + random.randint(0, 200) for n in qo_lens]
qo_indptr, kv_indptr = [0], [0]
for a, b in zip(qo_lens, kv_lens):
    qo_indptr.append(qo_indptr[-1] + a)
    kv_indptr.append(kv_indptr[-1] + b)
fused = torch.randn(kv_indptr[-1], hq + 2 * hk, dim, device=dev, dtype=bf16)
k_ragged, v_ragged = fused[:, hq:hq + hk], fused[:, hq + hk:]
pq = torch.randn(qo_indptr[-1], hq, dim, device=dev, dtype=bf16)
po = torch.empty_like(pq)
prefill = aotinfer.BatchPrefill(pkg, hq, hk, dim, kv_storage="ragged", mask="causal")
fb, ib = prefill.workspace_sizes(qo_indptr[-1], 3)
pf, pi = torch.empty(fb, device=dev, dtype=torch.uint8), torch.empty(ib, device=dev, dtype=torch.uint8)
prefill.plan(qo_indptr, kv_indptr, pf, pi)
d_qo, d_kv = i32(qo_indptr), i32(kv_indptr)


def prun(**changes):
    args = dict(q=pq, k=k_ragged, v=v_ragged, qo_indptr=d_qo, kv_indptr=d_kv, o=po)
    args.update(changes)
    prefill.run(**args)


refused("prefill: q with fewer rows than planned", lambda: prun(q=pq[:-1]), "q:", f">= {qo_indptr[-1]}")
refused("prefill: ragged k with the wrong head count", lambda: prun(k=fused[:, :hk + 1]), "k:", "num_kv_heads")
refused("prefill: ragged k on the CPU", lambda: prun(k=k_ragged.cpu()), "k:", "CPU")
refused("prefill: qo_indptr of the wrong length", lambda: prun(qo_indptr=d_qo[:-1]), "qo_indptr:", "batch + 1")
refused("prefill: f16 o for a bf16 prefill", lambda: prun(o=po.half()), "o:", "bf16")
refused("prefill: sinks [1, num_qo_heads]", lambda: prun(sinks=sinks[None]), "sinks:", f"[{hq}]")
refused("prefill: float16 sinks", lambda: prun(sinks=sinks.half()), "sinks:", "f32")
for label, sink in (("", None), (" with sinks", sinks)):
    po.fill_(float("nan"))
    prun(sinks=sink)
    torch.cuda.synchronize()
    want = torch.cat([attention_reference(pq[qo_indptr[i]:qo_indptr[i + 1]], k_ragged[kv_indptr[i]:kv_indptr[i + 1]],
                                          v_ragged[kv_indptr[i]:kv_indptr[i + 1]], causal_offset=True, sinks=sink)
                      for i in range(3)])
    close("ragged prefill on views of a fused QKV tensor" + label, po, want, 1e-2)

# --- merge_state and append_paged_kv ---------------------------------------------------------
rows = 257
v_a, v_b = (torch.randn(rows, hq, dim, device=dev, dtype=bf16) for _ in range(2))
s_a, s_b = (torch.randn(rows, hq, device=dev) for _ in range(2))
v_out = torch.empty_like(v_a)
refused("merge_state: s_a on the CPU", lambda: aotinfer.merge_state(pkg, v_a, s_a.cpu(), v_b, s_b, v_out), "s_a:", "CPU")
refused("merge_state: float32 values", lambda: aotinfer.merge_state(pkg, v_a.float(), s_a, v_b, s_b, v_out), "v_a:", "f16 or bf16")
refused("merge_state: v_b of another shape", lambda: aotinfer.merge_state(pkg, v_a, s_a, v_b[:-1], s_b, v_out), "v_b:")
aotinfer.merge_state(pkg, v_a, s_a, v_b, s_b, v_out)
torch.cuda.synchronize()
s_ref = torch.logaddexp(s_a.double(), s_b.double())
close("merge_state after the refusals", v_out,
      v_a.double() * (s_a.double() - s_ref).exp()[..., None] + v_b.double() * (s_b.double() - s_ref).exp()[..., None], 1e-2)

new_k = torch.randn(batch, hk, dim, device=dev, dtype=bf16)
new_v = torch.randn(batch, hk, dim, device=dev, dtype=bf16)
positions = i32([n - 1 for n in lens])  # overwrite each request's last token
batch_indices = i32(list(range(batch)))


def append(**changes):
    args = dict(k=new_k, v=new_v, batch_indices=batch_indices, positions=positions, k_pages=k_pages,
                v_pages=v_pages, kv_indptr=d_indptr, kv_indices=d_indices, kv_last_page_len=d_last)
    args.update(changes)
    aotinfer.append_paged_kv(pkg, **args)


refused("append: f16 keys into a bf16 cache", lambda: append(k=new_k.half()), "k:", "bf16")
refused("append: int64 positions", lambda: append(positions=positions.long()), "positions:", "i32")
refused("append: positions of the wrong length", lambda: append(positions=positions[:-1]), "positions:")
append()
torch.cuda.synchronize()
slots = [(indices[indptr[i] + (n - 1) // page], (n - 1) % page) for i, n in enumerate(lens)]
close("append_paged_kv into the interleaved cache (k)", torch.stack([k_pages[p, s] for p, s in slots]), new_k, 1e-6)
close("append_paged_kv into the interleaved cache (v)", torch.stack([v_pages[p, s] for p, s in slots]), new_v, 1e-6)
o.fill_(float("nan"))
run()
torch.cuda.synchronize()
close("decode after the append", o, decode_reference(), 1e-2)

print(f"{len(failures)} failure(s)" if failures else "all checks passed")
sys.exit(1 if failures else 0)
