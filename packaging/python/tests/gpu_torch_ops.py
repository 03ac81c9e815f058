"""aotinfer.torch_ops on a GPU with PyTorch: the custom ops under torch.compile(fullgraph=True)
and CUDA-graph capture, against eager runs and float64 references computed here.

  (a) a decode "attention layer" (q projection, torch_ops.batch_decode_run, o projection) and a
      prefill layer (q/k/v projections, torch_ops.append_paged_kv of the new tokens behind a
      random past, batch_prefill_run over the pages and, with attention sinks, over the ragged
      new tokens, o projection), and merge_state in a compiled function: compiled output ==
      eager output, zero graph breaks (torch._dynamo.explain and dynamo's counters), eager ==
      reference;
  (b) decode captured in a torch.cuda.CUDAGraph (plan outside): replay after new q contents and
      after a re-plan of the same batch with new lengths and pages (cuda_graph=True), against an
      eager run and the reference;
  plus the ops' schemas (sinks is an optional Tensor?) and the registry's error for an object
  that was garbage-collected.

Shapes are drawn fresh each run (the seed is printed). Run after `pip install aotinfer-*.whl`:
    python3 packaging/python/tests/gpu_torch_ops.py
"""
import gc
import math
import random
import sys
import time

import torch

import aotinfer
import aotinfer.torch_ops as ops
from gpu_common import paged_layout, softmax_with_sinks

seed = random.randrange(1 << 30)
random.seed(seed)
torch.manual_seed(seed)
print(f"seed {seed}")
DEV, BF16 = "cuda", torch.bfloat16
failures = []


def report(ok, line):
    print(f"{'ok  ' if ok else 'FAIL'} {line}")
    if not ok:
        failures.append(line.split(":")[0])


def check(name, got, want, tol):
    err = ((got.double() - want.double()).norm() / want.double().norm().clamp_min(1e-30)).item()
    report(err < tol and math.isfinite(err), f"{name}: relative error {err:.2e} (tolerance {tol:g})")


def dev_i32(xs):
    return torch.tensor(xs, dtype=torch.int32, device=DEV)


def workspaces(core, *size_args):
    f, i = core.workspace_sizes(*size_args)
    return (torch.empty(max(f, 1), dtype=torch.uint8, device=DEV), torch.empty(max(i, 1), dtype=torch.uint8, device=DEV))


def graph_breaks(fn, *args):
    """(graph breaks reported by torch._dynamo.explain, graphs) for fn(*args)."""
    explanation = torch._dynamo.explain(fn)(*args)
    return explanation.graph_break_count, explanation.graph_count


def compiled_run(fn, *args):
    """fn compiled with fullgraph=True and run; returns (outputs, graph breaks counted by dynamo)."""
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    out = torch.compile(fn, fullgraph=True)(*args)
    return out, sum(torch._dynamo.utils.counters["graph_break"].values())


def request_kv(pool, indptr, indices, r, n):
    """Request r's first n tokens of a [pages, page, heads, dim] pool, as [n, heads, dim]."""
    ids = torch.tensor(indices[indptr[r]:indptr[r + 1]], device=DEV, dtype=torch.long)
    return pool[ids].reshape(-1, pool.shape[2], pool.shape[3])[:n]


def attention_ref(q, k, v, causal, sinks=None):
    """float64 attention of q [nq, H, D] over k, v [nk, Hkv, D]; query t sits at nk - nq + t;
    sinks [H]: attention-sink logits."""
    group = q.shape[1] // k.shape[1]
    k = k.double().repeat_interleave(group, 1)
    v = v.double().repeat_interleave(group, 1)
    scores = torch.einsum("qhd,khd->hqk", q.double(), k) / math.sqrt(q.shape[2])
    if causal:
        nq, nk = q.shape[0], k.shape[0]
        t = torch.arange(nq, device=DEV)[:, None]
        j = torch.arange(nk, device=DEV)[None, :]
        scores = scores.masked_fill(j > nk - nq + t, float("-inf"))
    p, lse = softmax_with_sinks(scores, sinks)
    return torch.einsum("hqk,khd->qhd", p, v), lse.transpose(0, 1)


pkg = aotinfer.Package()
KV_HEADS = random.choice([2, 4, 8])
HEADS = KV_HEADS * random.choice([1, 4, 8])
DIM, HIDDEN = 128, 1024
PAGE = random.choice([16, 32, 64])
print(f"heads {HEADS}/{KV_HEADS}, head_dim {DIM}, page_size {PAGE}, bf16, {torch.cuda.get_device_name()}")


# --- (a) torch.compile(fullgraph=True) ------------------------------------------------------

class DecodeLayer(torch.nn.Module):
    def __init__(self, decode):
        super().__init__()
        self.q_proj = torch.nn.Linear(HIDDEN, HEADS * DIM, bias=False, device=DEV, dtype=BF16)
        self.o_proj = torch.nn.Linear(HEADS * DIM, HIDDEN, bias=False, device=DEV, dtype=BF16)
        self.decode = decode

    def forward(self, x, k_pages, v_pages, kv_indptr, kv_indices, kv_last_page_len):
        q = self.q_proj(x).view(-1, HEADS, DIM)
        o = torch.empty_like(q)
        lse = torch.empty(q.shape[0], HEADS, dtype=torch.float32, device=q.device)
        ops.batch_decode_run(self.decode, q, k_pages, v_pages, kv_indptr, kv_indices, kv_last_page_len, o, lse)
        return self.o_proj(o.view(-1, HEADS * DIM)), o, lse


def decode_layer_checks():
    batch = random.randint(3, 12)
    lens = [random.randint(1, 2000) for _ in range(batch)]
    indptr, indices, last, num_pages = paged_layout(lens, PAGE)
    k_pages = torch.randn(num_pages, PAGE, KV_HEADS, DIM, device=DEV, dtype=BF16)
    v_pages = torch.randn_like(k_pages)
    decode = aotinfer.BatchDecode(pkg, HEADS, KV_HEADS, DIM, PAGE)
    decode.plan(indptr, last, *workspaces(decode, batch), kv_indices=indices, num_pages=num_pages)
    layer = DecodeLayer(decode)
    args = (torch.randn(batch, HIDDEN, device=DEV, dtype=BF16), k_pages, v_pages, dev_i32(indptr), dev_i32(indices),
            dev_i32(last))
    print(f"decode layer: batch {batch}, KV lengths {min(lens)}..{max(lens)}")
    with torch.no_grad():
        y, o, lse = layer(*args)
        q = layer.q_proj(args[0]).view(-1, HEADS, DIM)
        refs = [attention_ref(q[r:r + 1], request_kv(k_pages, indptr, indices, r, n),
                              request_kv(v_pages, indptr, indices, r, n), False) for r, n in enumerate(lens)]
        check("decode layer eager: o vs float64", o, torch.cat([r[0] for r in refs]), 1e-2)
        check("decode layer eager: lse vs float64", lse, torch.cat([r[1] for r in refs]), 1e-3)
        breaks, graphs = graph_breaks(layer, *args)
        report(breaks == 0, f"decode layer: torch._dynamo.explain: {breaks} graph breaks, {graphs} graph(s)")
        (yc, oc, lsec), counted = compiled_run(layer, *args)
        report(counted == 0, f"decode layer compiled(fullgraph): dynamo counted {counted} graph breaks")
        check("decode layer compiled vs eager: output", yc, y, 2e-2)
        check("decode layer compiled vs eager: o", oc, o, 1e-2)
        check("decode layer compiled vs eager: lse", lsec, lse, 1e-4)


class PrefillLayer(torch.nn.Module):
    """New tokens of each request go behind its past KV (append_paged_kv), then causal prefill
    over the pages (past + new) and, for comparison, over the new tokens alone (ragged)."""

    def __init__(self, paged, ragged):
        super().__init__()
        self.register_buffer("sinks", torch.rand(HEADS, device=DEV) * 8 - 2)  # the ragged run's, float32
        self.q_proj = torch.nn.Linear(HIDDEN, HEADS * DIM, bias=False, device=DEV, dtype=BF16)
        self.k_proj = torch.nn.Linear(HIDDEN, KV_HEADS * DIM, bias=False, device=DEV, dtype=BF16)
        self.v_proj = torch.nn.Linear(HIDDEN, KV_HEADS * DIM, bias=False, device=DEV, dtype=BF16)
        self.o_proj = torch.nn.Linear(HEADS * DIM, HIDDEN, bias=False, device=DEV, dtype=BF16)
        self.paged, self.ragged = paged, ragged

    def forward(self, x, k_pages, v_pages, qo_indptr, kv_indptr, kv_indices, kv_last_page_len, batch_indices,
                positions):
        q = self.q_proj(x).view(-1, HEADS, DIM)
        k, v = self.k_proj(x).view(-1, KV_HEADS, DIM), self.v_proj(x).view(-1, KV_HEADS, DIM)
        ops.append_paged_kv(pkg, k, v, batch_indices, positions, k_pages, v_pages, kv_indptr, kv_indices,
                            kv_last_page_len)
        o_paged, o_ragged = torch.empty_like(q), torch.empty_like(q)
        ops.batch_prefill_run(self.paged, q, k_pages, v_pages, qo_indptr, kv_indptr, o_paged, kv_indices,
                              kv_last_page_len)
        ops.batch_prefill_run(self.ragged, q, k, v, qo_indptr, qo_indptr, o_ragged, sinks=self.sinks)
        return self.o_proj(o_paged.view(-1, HEADS * DIM)), o_paged, o_ragged


def prefill_layer_checks():
    batch = random.randint(2, 6)
    qo_lens = [random.randint(1, 300) for _ in range(batch)]
    past = [random.randint(0, 700) for _ in range(batch)]
    kv_lens = [p + n for p, n in zip(past, qo_lens)]
    indptr, indices, last, num_pages = paged_layout(kv_lens, PAGE)
    qo_indptr = [0]
    for n in qo_lens:
        qo_indptr.append(qo_indptr[-1] + n)
    total_q = qo_indptr[-1]
    k_pages = torch.zeros(num_pages, PAGE, KV_HEADS, DIM, device=DEV, dtype=BF16)
    v_pages = torch.zeros_like(k_pages)
    for r, p in enumerate(past):  # the past: random KV in the first p slots of each request
        for pool in (k_pages, v_pages):
            for t0 in range(0, p, PAGE):
                page = indices[indptr[r] + t0 // PAGE]
                n = min(PAGE, p - t0)
                pool[page, :n] = torch.randn(n, KV_HEADS, DIM, device=DEV, dtype=BF16)
    paged = aotinfer.BatchPrefill(pkg, HEADS, KV_HEADS, DIM, kv_storage="paged", page_size=PAGE)
    paged.plan(qo_indptr, indptr, *workspaces(paged, total_q, batch), kv_last_page_len=last, kv_indices=indices,
               num_pages=num_pages)
    ragged = aotinfer.BatchPrefill(pkg, HEADS, KV_HEADS, DIM, kv_storage="ragged")
    ragged.plan(qo_indptr, qo_indptr, *workspaces(ragged, total_q, batch))
    layer = PrefillLayer(paged, ragged)
    batch_indices = dev_i32([r for r, n in enumerate(qo_lens) for _ in range(n)])
    positions = dev_i32([p + j for p, n in zip(past, qo_lens) for j in range(n)])
    args = (torch.randn(total_q, HIDDEN, device=DEV, dtype=BF16), k_pages, v_pages, dev_i32(qo_indptr), dev_i32(indptr),
            dev_i32(indices), dev_i32(last), batch_indices, positions)
    print(f"prefill layer: batch {batch}, query lengths {qo_lens}, past {past}")
    with torch.no_grad():
        y, o_paged, o_ragged = layer(*args)
        q = layer.q_proj(args[0]).view(-1, HEADS, DIM)
        k_new = layer.k_proj(args[0]).view(-1, KV_HEADS, DIM)
        v_new = layer.v_proj(args[0]).view(-1, KV_HEADS, DIM)
        ref_paged, ref_ragged = [], []
        for r in range(batch):
            rows = slice(qo_indptr[r], qo_indptr[r + 1])
            k_all = request_kv(k_pages, indptr, indices, r, kv_lens[r])
            v_all = request_kv(v_pages, indptr, indices, r, kv_lens[r])
            ref_paged.append(attention_ref(q[rows], k_all, v_all, True)[0])
            ref_ragged.append(attention_ref(q[rows], k_new[rows], v_new[rows], True, layer.sinks)[0])
            if r == 0:  # append_paged_kv put the new tokens behind the past
                check("prefill layer eager: appended K in the pages", k_all[past[0]:], k_new[rows], 1e-6)
        check("prefill layer eager: paged o vs float64", o_paged, torch.cat(ref_paged), 1e-2)
        check("prefill layer eager: ragged o (sinks) vs float64", o_ragged, torch.cat(ref_ragged), 1e-2)
        breaks, graphs = graph_breaks(layer, *args)
        report(breaks == 0, f"prefill layer: torch._dynamo.explain: {breaks} graph breaks, {graphs} graph(s)")
        k_pages.zero_(), v_pages.zero_()  # the compiled layer must append again (the past is gone: refs below)
        (yc, opc, orc), counted = compiled_run(layer, *args)
        report(counted == 0, f"prefill layer compiled(fullgraph): dynamo counted {counted} graph breaks")
        check("prefill layer compiled vs eager: ragged o (sinks)", orc, o_ragged, 1e-2)
        ref_nopast = []
        for r in range(batch):
            rows = slice(qo_indptr[r], qo_indptr[r + 1])
            k_all = request_kv(k_pages, indptr, indices, r, kv_lens[r])
            v_all = request_kv(v_pages, indptr, indices, r, kv_lens[r])
            ref_nopast.append(attention_ref(q[rows], k_all, v_all, True)[0])
        check("prefill layer compiled: paged o (pools appended in the graph) vs float64", opc, torch.cat(ref_nopast), 1e-2)
        report(k_pages.abs().sum().item() > 0, "prefill layer compiled: append_paged_kv wrote the caller's pools")


def merge_checks():
    rows = random.randint(100, 3000)
    v_a, v_b = (torch.randn(rows, HEADS, DIM, device=DEV, dtype=BF16) for _ in range(2))
    s_a, s_b = (torch.randn(rows, HEADS, device=DEV) * 4 for _ in range(2))

    def merged(v_a, s_a, v_b, s_b):
        v_out, s_out = torch.empty_like(v_a), torch.empty_like(s_a)
        ops.merge_state(pkg, v_a, s_a, v_b, s_b, v_out, s_out)
        return v_out * 1, s_out + 0  # used by later graph ops

    s_ref = torch.logaddexp(s_a.double(), s_b.double())
    v_ref = v_a.double() * (s_a.double() - s_ref).exp()[..., None] + v_b.double() * (s_b.double() - s_ref).exp()[..., None]
    breaks, _ = graph_breaks(merged, v_a, s_a, v_b, s_b)
    (v_out, s_out), counted = compiled_run(merged, v_a, s_a, v_b, s_b)
    report(breaks == 0 and counted == 0, f"merge_state compiled(fullgraph): {breaks} graph breaks (explain), "
                                         f"{counted} (counters)")
    check("merge_state compiled: v vs float64", v_out, v_ref, 1e-2)
    check("merge_state compiled: lse vs float64", s_out, s_ref, 1e-5)


# --- (b) CUDA-graph capture of decode run() ---------------------------------------------------

def graph_checks():
    batch = random.randint(4, 16)
    max_len = 1500
    pool_pages = batch * math.ceil(max_len / PAGE) + 8
    k_pages = torch.randn(pool_pages, PAGE, KV_HEADS, DIM, device=DEV, dtype=BF16)
    v_pages = torch.randn_like(k_pages)
    decode = aotinfer.BatchDecode(pkg, HEADS, KV_HEADS, DIM, PAGE, cuda_graph=True, max_batch=batch)
    float_ws, int_ws = workspaces(decode, batch)
    q = torch.empty(batch, HEADS, DIM, device=DEV, dtype=BF16)
    o = torch.empty_like(q)
    lse = torch.empty(batch, HEADS, device=DEV)
    d_indptr = torch.zeros(batch + 1, dtype=torch.int32, device=DEV)
    d_last = torch.zeros(batch, dtype=torch.int32, device=DEV)
    d_indices = torch.zeros(pool_pages, dtype=torch.int32, device=DEV)

    def plan(lens):
        pages = [math.ceil(n / PAGE) for n in lens]
        indptr = [0]
        for p in pages:
            indptr.append(indptr[-1] + p)
        indices = random.sample(range(pool_pages), indptr[-1])
        last = [n - (p - 1) * PAGE for n, p in zip(lens, pages)]
        d_indptr.copy_(dev_i32(indptr))
        d_last.copy_(dev_i32(last))
        d_indices[:len(indices)].copy_(dev_i32(indices))
        decode.plan(indptr, last, float_ws, int_ws, kv_indices=indices, num_pages=pool_pages,
                    stream=torch.cuda.current_stream())
        return indptr, indices

    def verify(label, lens, indptr, indices):
        o.fill_(float("nan")), lse.fill_(float("nan"))
        graph.replay()
        o_eager, lse_eager = torch.empty_like(o), torch.empty_like(lse)
        decode.run(q, k_pages, v_pages, d_indptr, d_indices, d_last, o_eager, lse_eager)
        torch.cuda.synchronize()
        refs = [attention_ref(q[r:r + 1], request_kv(k_pages, indptr, indices, r, n),
                              request_kv(v_pages, indptr, indices, r, n), False) for r, n in enumerate(lens)]
        check(f"CUDA graph decode {label}: replay vs eager o", o, o_eager, 1e-3)
        check(f"CUDA graph decode {label}: replay vs eager lse", lse, lse_eager, 1e-5)
        check(f"CUDA graph decode {label}: replay vs float64 o", o, torch.cat([r[0] for r in refs]), 1e-2)
        check(f"CUDA graph decode {label}: replay vs float64 lse", lse, torch.cat([r[1] for r in refs]), 1e-3)

    lens = [random.randint(1, max_len) for _ in range(batch)]
    indptr, indices = plan(lens)
    q.copy_(torch.randn_like(q))
    side = torch.cuda.Stream()  # warm up outside the capture, as PyTorch recommends
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        ops.batch_decode_run(decode, q, k_pages, v_pages, d_indptr, d_indices, d_last, o, lse)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        ops.batch_decode_run(decode, q, k_pages, v_pages, d_indptr, d_indices, d_last, o, lse)
    print(f"CUDA graph decode: batch {batch}, captured with KV lengths {min(lens)}..{max(lens)}")

    q.copy_(torch.randn_like(q))
    verify("new q", lens, indptr, indices)
    lens = [random.randint(1, max_len) for _ in range(batch)]
    indptr, indices = plan(lens)
    q.copy_(torch.randn_like(q))
    verify(f"re-planned (KV lengths {min(lens)}..{max(lens)})", lens, indptr, indices)


def registry_checks():
    for name in ("batch_decode_run", "batch_prefill_run"):
        schema = str(getattr(torch.ops.aotinfer, name).default._schema)
        report("Tensor? sinks" in schema, f"{name} schema: {schema}")
    decode = aotinfer.BatchDecode(pkg, HEADS, KV_HEADS, DIM, PAGE)
    oid = ops.handle(decode)
    report(ops.handle(decode) == oid, f"registry: a planned object keeps its id ({oid})")
    del decode
    gc.collect()
    q = torch.zeros(1, HEADS, DIM, device=DEV, dtype=BF16)
    pool = torch.zeros(1, PAGE, KV_HEADS, DIM, device=DEV, dtype=BF16)
    try:
        torch.ops.aotinfer.batch_decode_run(oid, q, pool, pool, dev_i32([0, 1]), dev_i32([0]), dev_i32([1]),
                                            torch.empty_like(q), None, None, None, 0.0, 0.0, 1.0, 1e4, 1.0, 1.0)
        report(False, "registry: an op naming a collected object raised nothing")
    except aotinfer.InvalidArgument as e:
        report("no longer exists" in str(e), f"registry: collected object: {e}")


def main():
    start = time.perf_counter()
    for checks in (decode_layer_checks, prefill_layer_checks, merge_checks, graph_checks, registry_checks):
        try:
            checks()
        except Exception as e:  # report and go on with the other checks
            import traceback
            traceback.print_exc()
            report(False, f"{checks.__name__}: {type(e).__name__}: {e}")
    print(f"torch_ops checks ({time.perf_counter() - start:.0f} s):",
          "FAILED " + ", ".join(failures) if failures else "all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
