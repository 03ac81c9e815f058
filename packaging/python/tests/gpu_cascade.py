"""aotinfer.Cascade on a GPU with PyTorch: shared-prefix attention in two and three levels against
a float64 reference over the union of each query row's keys (the causal mask on the last level
only), with K/V as separate pools and as views of one [pages, 2, ...] tensor, a CUDA graph
captured once and replayed after a later plan, and refusals of bad tensors naming the argument.
Run on a GPU machine after `pip install aotinfer-*.whl` (default package)."""
import random
import sys

import torch

import aotinfer

seed = random.randrange(1 << 30)
torch.manual_seed(seed)
random.seed(seed)
print(f"seed {seed}")
pkg = aotinfer.Package()
failures = []
dev, bf16 = "cuda", torch.bfloat16
H, KVH, D, P = 8, 2, 128, 16


def result(name, ok, detail=""):
    print(f"{'ok  ' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}")
    if not ok:
        failures.append(name)


def pages(n):
    return (n + P - 1) // P


def make_levels(qo_lens, level_groups, kv_lens):
    """level_groups[l]: requests per group; kv_lens[l]: keys per group. Returns the host metadata
    per level, the pool as [pages, 2, P, KVH, D] (NaN spare pages) and each group's K and V."""
    used = sum(pages(n) for lens in kv_lens for n in lens)
    num_pages = used + 3
    perm = random.sample(range(num_pages), num_pages)
    kv = torch.full((num_pages, 2, P, KVH, D), float("nan"), dtype=bf16, device=dev)
    levels, at = [], 0
    for groups, lens in zip(level_groups, kv_lens):
        qo, kv_indptr, last, ids, kvs, r = [0], [0], [], [], [], 0
        for members, n in zip(groups, lens):
            qo.append(qo[-1] + sum(qo_lens[r:r + members]))
            r += members
            seg = perm[at:at + pages(n)]
            at += pages(n)
            kv_indptr.append(kv_indptr[-1] + len(seg))
            last.append(n - (len(seg) - 1) * P if seg else 0)
            ids += seg
            k, v = torch.randn(n, KVH, D, dtype=bf16, device=dev), torch.randn(n, KVH, D, dtype=bf16, device=dev)
            for j in range(n):
                kv[seg[j // P], 0, j % P], kv[seg[j // P], 1, j % P] = k[j], v[j]
            kvs.append((k, v))
        levels.append(dict(qo=qo, kv=kv_indptr, last=last, ids=ids, groups=kvs))
    return levels, kv, num_pages


def reference(q, levels, causal):
    """o, lse of every row: one softmax over the keys of its groups in all levels."""
    o, lse = torch.zeros(q.shape, dtype=torch.float64, device=dev), torch.full(q.shape[:2], float("-inf"), device=dev,
                                                                              dtype=torch.float64)
    for t in range(q.shape[0]):
        scores, values = [], []
        for l, level in enumerate(levels):
            g = max(i for i in range(len(level["qo"]) - 1) if level["qo"][i] <= t < level["qo"][i + 1])
            k, v = (x.double().repeat_interleave(H // KVH, 1) for x in level["groups"][g])
            s = torch.einsum("hd,khd->hk", q[t].double(), k) / D ** 0.5
            qo_len = level["qo"][g + 1] - level["qo"][g]
            if causal and l == len(levels) - 1:  # the requests' own KV: keys up to the token's position
                s[:, k.shape[0] - qo_len + (t - level["qo"][g]) + 1:] = float("-inf")
            scores.append(s), values.append(v)
        s, v = torch.cat(scores, 1), torch.cat(values, 0)
        if s.shape[1] and torch.isfinite(s).any():
            o[t] = torch.einsum("hk,khd->hd", s.softmax(-1), v)
            lse[t] = s.logsumexp(-1)
    return o, lse


def device_lists(levels, capacity=None):
    """The four per-level int32 device lists run() takes (padded to capacity for CUDA graphs)."""
    def tensor(x, n):
        t = torch.zeros(max(n or len(x), 1), dtype=torch.int32, device=dev)
        t[:len(x)] = torch.tensor(x, dtype=torch.int32)
        return t[:len(x)] if n is None else t
    return [[tensor(level[name], capacity and capacity[name]) for level in levels] for name in ("qo", "kv", "ids", "last")]


def check(name, o, lse, want_o, want_lse, rows):
    err = ((o[:rows].double() - want_o).norm() / want_o.norm()).item()
    both_inf = torch.isinf(lse[:rows]) & torch.isinf(want_lse)
    lse_err = (lse[:rows].double() - want_lse).masked_fill(both_inf, 0).abs().max().item()
    result(name, err < 5e-3 and lse_err < 2e-2 and torch.isfinite(o[:rows]).all().item(),
           f"relative error {err:.2e}, lse {lse_err:.2e}")


def run_levels(name, qo_lens, level_groups, kv_lens, causal, strided):
    levels, kv, num_pages = make_levels(qo_lens, level_groups, kv_lens)
    total_q = sum(qo_lens)
    q = torch.randn(total_q, H, D, dtype=bf16, device=dev)
    c = aotinfer.Cascade(pkg, len(levels), H, KVH, D, page_size=P, mask="causal" if causal else "none")
    fb, ib = c.workspace_sizes(total_q, max(len(g) for g in level_groups))
    fw, iw = torch.empty(fb, dtype=torch.uint8, device=dev), torch.empty(ib, dtype=torch.uint8, device=dev)
    c.plan([lv["qo"] for lv in levels], [lv["kv"] for lv in levels], [lv["last"] for lv in levels], fw, iw,
           kv_indices_list=[lv["ids"] for lv in levels], num_pages=num_pages)
    k_pages, v_pages = (kv[:, 0], kv[:, 1]) if strided else (kv[:, 0].contiguous(), kv[:, 1].contiguous())
    o = torch.full((total_q, H, D), float("nan"), dtype=bf16, device=dev)
    lse = torch.full((total_q, H), float("nan"), device=dev)
    meta = device_lists(levels)
    c.run(q, k_pages, v_pages, *meta, o, lse)
    check(name, o, lse, *reference(q, levels, causal), total_q)
    return c, q, k_pages, v_pages, meta, o, lse


# Parallel sampling: a 700-key prompt shared by 4 samples, each with its own KV.
run_levels("two levels, causal, separate pools", [5, 9, 1, 6], [[4], [1, 1, 1, 1]], [[700], [30, 12, 1, 40]], True, False)
# Beam-search-like: a system prompt, two shared conversation prefixes, each request's own KV.
run_levels("three levels, not causal, views of one [pages, 2, ...] tensor", [7, 3, 4, 8, 2],
           [[5], [2, 3], [1, 1, 1, 1, 1]], [[300], [45, 0], [9, 3, 20, 8, 33]], False, True)
c, q, k_pages, v_pages, meta, o, lse = run_levels("refusal set-up", [4, 6], [[2], [1, 1]], [[64], [10, 6]], True, False)


def refused(name, call, *words):
    try:
        call()
    except aotinfer.InvalidArgument as e:
        result(name, all(w in str(e) for w in words), str(e))
        torch.cuda.synchronize()
        return
    result(name, False, "not refused")


refused("o of another dtype", lambda: c.run(q, k_pages, v_pages, *meta, o.float(), lse), "cascade.run: o:", "bf16")
refused("a level's kv_indptr of another length",
        lambda: c.run(q, k_pages, v_pages, meta[0], [meta[1][0], meta[1][0]], *meta[2:], o, lse), "level 1 kv_indptr")
refused("q on the CPU", lambda: c.run(q.cpu(), k_pages, v_pages, *meta, o, lse), "cascade.run: q:", "CPU")
refused("metadata of one level only", lambda: c.run(q, k_pages, v_pages, meta[0][:1], *meta[1:], o, lse),
        "qo_indptr_list must be a list of 2 entries")
refused("levels of different query totals", lambda: c.plan([[0, 10], [0, 4, 9]], [[0, 4], [0, 1, 2]], [[16], [10, 6]],
                                                          torch.empty(1 << 20, dtype=torch.uint8, device=dev),
                                                          torch.empty(1 << 20, dtype=torch.uint8, device=dev)),
        "level 1 qo_indptr[-1] = 9 but total_q is 10")

# CUDA graph: captured once on the current stream, replayed after a plan of another shape.
max_total_q, max_groups, pool_pages = 64, 4, 200
g = aotinfer.Cascade(pkg, 2, H, KVH, D, page_size=P, mask="causal", cuda_graph=True, max_batch=max_groups,
                     max_total_q=max_total_q)
fw, iw = (torch.empty(n, dtype=torch.uint8, device=dev) for n in g.workspace_sizes(max_total_q, max_groups))
capacity = dict(qo=max_groups + 1, kv=max_groups + 1, ids=pool_pages, last=max_groups)
q_buf = torch.zeros(max_total_q, H, D, dtype=bf16, device=dev)
kv_buf = torch.full((pool_pages, 2, P, KVH, D), float("nan"), dtype=bf16, device=dev)
o_buf = torch.zeros(max_total_q, H, D, dtype=bf16, device=dev)
lse_buf = torch.zeros(max_total_q, H, device=dev)
meta_buf = None
graph = torch.cuda.CUDAGraph()
for step, (qo_lens, groups, kv_lens) in enumerate([([3, 8, 5], [[3], [1, 1, 1]], [[900], [10, 20, 5]]),
                                                   ([12, 1], [[2], [1, 1]], [[40], [12, 70]])]):
    levels, kv, num_pages = make_levels(qo_lens, groups, kv_lens)
    total_q = sum(qo_lens)
    q_buf[:total_q] = torch.randn(total_q, H, D, dtype=bf16, device=dev)
    kv_buf[:num_pages] = kv
    meta = device_lists(levels, capacity)
    if meta_buf is None:
        meta_buf = meta
    else:
        for bufs, new in zip(meta_buf, meta):
            for b, n in zip(bufs, new):
                b.copy_(n)
    g.plan([lv["qo"] for lv in levels], [lv["kv"] for lv in levels], [lv["last"] for lv in levels], fw, iw,
           kv_indices_list=[lv["ids"] for lv in levels], num_pages=pool_pages)
    if step == 0:  # the capture freezes these views' addresses; later plans rewrite the buffers behind them
        views = [[b[:len(level[name])] for b, level in zip(bufs, levels)] for bufs, name in zip(meta_buf, ("qo", "kv", "ids", "last"))]
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            g.run(q_buf, kv_buf[:, 0], kv_buf[:, 1], *views, o_buf, lse_buf)  # warm-up outside the capture
        torch.cuda.current_stream().wait_stream(side)
        with torch.cuda.graph(graph):
            g.run(q_buf, kv_buf[:, 0], kv_buf[:, 1], *views, o_buf, lse_buf)
    o_buf.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    check(f"CUDA graph replay after plan {step}", o_buf, lse_buf, *reference(q_buf[:total_q], levels, True), total_q)

print(f"{len(failures)} failures" + (": " + ", ".join(failures) if failures else ""))
sys.exit(1 if failures else 0)
