"""aotinfer.flashinfer on a GPU: every wrapper and function against float64 PyTorch references,
on freshly drawn shapes. Run on a GPU machine with PyTorch after `pip install aotinfer-*.whl`
(the default package):

    python3 packaging/python/tests/gpu_flashinfer.py [SEED]

Prints the seed, one ok/FAIL line per check, and exits nonzero on any failure. Outputs are
poisoned with NaN before every run, and so are the cache slots no request owns (a kernel that
reads past a request's last token fails). LSE values are compared in FlashInfer's base 2."""
import bisect
import functools
import math
import random
import sys
import time

import torch

from aotinfer import flashinfer

SEED = int(sys.argv[1]) if len(sys.argv) > 1 else random.randrange(1 << 31)
random.seed(SEED)
torch.manual_seed(SEED)
print(f"seed {SEED}  (rerun with: python3 {sys.argv[0]} {SEED})")
DEV = "cuda"
NAN = float("nan")
LN2 = math.log(2.0)
DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16, "e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
WORKSPACE = torch.empty(256 << 20, dtype=torch.uint8, device=DEV)
failures = []


def check(name, got, want, tol):
    got, want = got.double(), want.double()
    if got.shape != want.shape:
        return report(name, False, f"shape {list(got.shape)}, expected {list(want.shape)}")
    # Equal infinities agree (the lse of a row that sees no key is -inf); any other infinity or
    # NaN leaves the error non-finite, which fails.
    same_inf = torch.isinf(got) & (got == want)
    got, want = got.masked_fill(same_inf, 0.0), want.masked_fill(same_inf, 0.0)
    err = ((got - want).norm() / want.norm().clamp_min(1e-30)).item()
    report(name, err < tol and math.isfinite(err), f"relative error {err:.2e} (tolerance {tol:g})")


def check_equal(name, got, want):
    same = got.shape == want.shape and bool((got == want).all())
    report(name, same, "equal" if same else "differs")


def report(name, ok, text):
    print(f"{'ok  ' if ok else 'FAIL'} {name}: {text}", flush=True)
    if not ok:
        failures.append(name)


def guarded(name, fn):
    try:
        fn()
    except Exception as e:  # a failed case is reported, the others still run
        report(name, False, f"{type(e).__name__}: {e}")


# --- float64 references ---------------------------------------------------------------------------

def rope(x, pos, theta, scale):
    """Llama RoPE ("rotate half") of x [L, H, D] at positions pos [L]."""
    half = x.shape[-1] // 2
    freq = (1.0 / scale) * theta ** (-2.0 * torch.arange(half, device=x.device, dtype=torch.float64) / x.shape[-1])
    angle = pos.double()[:, None, None] * freq
    lo, hi = x[..., :half], x[..., half:]
    return torch.cat([lo * angle.cos() - hi * angle.sin(), hi * angle.cos() + lo * angle.sin()], -1)


def alibi_slopes(heads):
    n = 2 ** math.floor(math.log2(heads))
    slopes = [2.0 ** (-8.0 * (i + 1) / n) for i in range(n)]
    slopes += [2.0 ** (-4.0 * (2 * i + 1) / n) for i in range(heads - n)]
    return torch.tensor(slopes, dtype=torch.float64, device=DEV)


def attention(q, k, v, causal=False, sm_scale=None, cap=0.0, window=-1, rope_theta=None, rope_scale=1.0,
              alibi=False, k_scale=1.0, v_scale=1.0, sinks=None, mask=None):
    """q [m, Hq, D] at positions n - m + t, k/v [n, Hk, D] at 0..n-1 -> (o [m, Hq, D], lse [m, Hq] base 2).
    sinks [Hq]: one more logit per row (after scaling, not capped) whose value is zero; mask: bool
    [m, n], the keys each row keeps (a custom mask)."""
    m, n, heads = q.shape[0], k.shape[0], q.shape[1]
    group = heads // k.shape[1]
    qd, kd, vd = q.double(), k.double() * k_scale, v.double() * v_scale
    q_pos = torch.arange(n - m, n, device=DEV)
    k_pos = torch.arange(n, device=DEV)
    if rope_theta is not None:
        qd, kd = rope(qd, q_pos, rope_theta, rope_scale), rope(kd, k_pos, rope_theta, rope_scale)
    kd, vd = kd.repeat_interleave(group, 1), vd.repeat_interleave(group, 1)
    s = torch.einsum("mhd,nhd->hmn", qd, kd) * (sm_scale if sm_scale is not None else q.shape[-1] ** -0.5)
    if cap > 0:
        s = cap * torch.tanh(s / cap)
    rel = (k_pos[None, :] - q_pos[:, None]).double()  # [m, n]
    if alibi:
        s = s + alibi_slopes(heads)[:, None, None] * rel
    keep = torch.ones_like(rel, dtype=torch.bool)
    if causal:
        keep &= rel <= 0
    if window >= 0:
        keep &= rel >= -window
    if mask is not None:
        keep &= mask
    s = s.masked_fill(~keep, -math.inf)
    if sinks is not None:
        s = torch.cat([s, sinks.double()[:, None, None].expand(heads, m, 1)], -1)
        vd = torch.cat([vd, torch.zeros_like(vd[:1])])
    lse = torch.logsumexp(s, -1)
    o = torch.einsum("hmn,nhd->mhd", torch.softmax(s, -1).nan_to_num(0.0), vd)
    return o, lse.transpose(0, 1) / LN2


# --- paged caches ---------------------------------------------------------------------------------

def random_kv(shape, dtype):
    return torch.randn(shape, device=DEV).to(DTYPES[dtype])


class Paged:
    """A paged cache with random page order; slots no request owns hold NaN."""

    def __init__(self, lens, page, heads, dim, layout, form, dtype, num_pages=None):
        self.lens, self.page, self.layout = lens, page, layout
        pages = [max(1, math.ceil(n / page)) for n in lens]
        num_pages = num_pages or sum(pages) + random.randint(0, 8)
        self.indices = torch.randperm(num_pages, device=DEV)[:sum(pages)].int()
        self.indptr = torch.tensor([0] + list(itertools_accumulate(pages)), dtype=torch.int32, device=DEV)
        self.last = torch.tensor([n - (p - 1) * page for n, p in zip(lens, pages)], dtype=torch.int32, device=DEV)
        page_shape = (page, heads, dim) if layout == "NHD" else (heads, page, dim)
        t = DTYPES[dtype]
        if form == "single":
            self.cache = torch.full((num_pages, 2) + page_shape, NAN, device=DEV).to(t)
            self.k, self.v = self.cache[:, 0], self.cache[:, 1]
        else:
            self.k = torch.full((num_pages,) + page_shape, NAN, device=DEV).to(t)
            self.v = torch.full((num_pages,) + page_shape, NAN, device=DEV).to(t)
            self.cache = (self.k, self.v)
        self.keys, self.values = [], []
        for r, n in enumerate(lens):
            self.keys.append(random_kv((n, heads, dim), dtype))
            self.values.append(random_kv((n, heads, dim), dtype))
            self.put(r, torch.arange(n, device=DEV), self.keys[r], self.values[r])

    def slots(self, r, tokens):
        return self.indices[self.indptr[r].long() + tokens // self.page].long(), tokens % self.page

    def put(self, r, tokens, k, v):
        pid, slot = self.slots(r, tokens)
        if self.layout == "NHD":
            self.k[pid, slot], self.v[pid, slot] = k, v
        else:
            self.k[pid, :, slot], self.v[pid, :, slot] = k, v

    def get(self, r, n):
        pid, slot = self.slots(r, torch.arange(n, device=DEV))
        return (self.k[pid, slot], self.v[pid, slot]) if self.layout == "NHD" else (self.k[pid, :, slot],
                                                                                      self.v[pid, :, slot])


def itertools_accumulate(xs):
    total = 0
    for x in xs:
        total += x
        yield total


def indptr_of(lengths):
    return torch.tensor([0] + list(itertools_accumulate(lengths)), dtype=torch.int32, device=DEV)


def poisoned(shape, dtype):
    return torch.full(shape, NAN, dtype=dtype, device=DEV)


# --- BatchDecodeWithPagedKVCacheWrapper -----------------------------------------------------------

def decode_case(name, group, page, layout, form, dtype="bf16", kv_dtype=None, head_dim=128, pos="NONE",
                window=-1, cap=None, sm_scale=None, rope_theta=None, rope_scale=None, k_scale=None, v_scale=None,
                strided_q=False, give_out=False, sinks=False):
    kv_dtype = kv_dtype or dtype
    kv_heads = random.choice([1, 2, 4]) if group <= 16 else 1
    heads, batch = kv_heads * group, random.randint(1, 12)
    lens = [random.randint(1, 2500) if random.random() < 0.3 else random.randint(1, 300) for _ in range(batch)]
    cache = Paged(lens, page, kv_heads, head_dim, layout, form, kv_dtype)
    wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(WORKSPACE, layout)
    wrapper.plan(cache.indptr, cache.indices, cache.last, heads, kv_heads, head_dim, page, pos_encoding_mode=pos,
                 window_left=window, logits_soft_cap=cap, q_data_type=DTYPES[dtype], kv_data_type=DTYPES[kv_dtype],
                 sm_scale=sm_scale, rope_scale=rope_scale, rope_theta=rope_theta)
    if strided_q:  # q as a slice of a fused qkv projection
        q = torch.randn(batch, (heads + 2 * kv_heads) * head_dim, device=DEV).to(DTYPES[dtype])
        q = q[:, :heads * head_dim].view(batch, heads, head_dim)
    else:
        q = torch.randn(batch, heads, head_dim, device=DEV).to(DTYPES[dtype])
    sinks = torch.rand(heads, device=DEV) * 8 - 2 if sinks else None  # per-head logits, negligible to dominant
    kw = dict(k_scale=k_scale, v_scale=v_scale, return_lse=True, sinks=sinks)
    if give_out:
        kw.update(out=poisoned((batch, heads, head_dim), DTYPES[dtype]), lse=poisoned((batch, heads), torch.float32))
    o, lse = wrapper.run(q, cache.cache, **kw)
    if give_out:
        assert o is kw["out"] and lse is kw["lse"], "run() must return the caller's out and lse"
    ref_o, ref_lse = zip(*(attention(q[r:r + 1], *cache.get(r, n), cap=cap or 0.0, window=window, sm_scale=sm_scale,
                                     rope_theta=(rope_theta or 1e4) if pos == "ROPE_LLAMA" else None,
                                     rope_scale=rope_scale or 1.0, alibi=pos == "ALIBI", k_scale=k_scale or 1.0,
                                     v_scale=v_scale or 1.0, sinks=sinks) for r, n in enumerate(lens)))
    label = (f"decode {name} [{dtype}/{kv_dtype} hd{head_dim} group {group} page {page} {layout} {form} "
             f"batch {batch} max_kv {max(lens)}]")
    torch.cuda.synchronize()
    check(label + " o", o, torch.cat(ref_o), 1e-2)
    check(label + " lse", lse, torch.cat(ref_lse), 1e-3)
    if give_out:  # the aliases, on the same plan
        o, lse = wrapper.run_return_lse(q, cache.cache, k_scale=k_scale, v_scale=v_scale, sinks=sinks)
        torch.cuda.synchronize()
        check(label + " run_return_lse lse", lse, torch.cat(ref_lse), 1e-3)
        o = wrapper.forward(q, cache.cache, k_scale=k_scale, v_scale=v_scale, window_left=window,
                            logits_soft_cap=cap, sm_scale=sm_scale)
        torch.cuda.synchronize()
        check(label + " forward o", o, torch.cat(ref_o), 1e-2)


def decode_cases():
    layouts_forms = [("NHD", "tuple"), ("HND", "single"), ("NHD", "single"), ("HND", "tuple")]
    shapes = [(1, 1, "bf16", 128), (2, 16, "f16", 64), (4, 64, "bf16", 256), (8, 16, "f16", 128),
              (16, 64, "bf16", 128), (16, 1, "f16", 256), (8, 1, "bf16", 64), (4, 16, "f16", 128),
              (2, 64, "bf16", 64), (1, 16, "bf16", 256)]
    for i, (group, page, dtype, dim) in enumerate(shapes):
        layout, form = layouts_forms[i % 4]
        guarded(f"decode {i}", lambda: decode_case("plain", group, page, layout, form, dtype, head_dim=dim))
    guarded("decode rope", lambda: decode_case("rope_llama", 4, 16, "NHD", "single", "bf16", pos="ROPE_LLAMA",
                                               rope_theta=5e5, rope_scale=2.0))
    guarded("decode softcap", lambda: decode_case("soft cap", 8, 16, "HND", "tuple", "f16", head_dim=64, cap=1.5,
                                                  sm_scale=0.3))
    guarded("decode alibi", lambda: decode_case("alibi", 8, 16, "NHD", "tuple", "bf16", head_dim=128, pos="ALIBI"))
    guarded("decode window", lambda: decode_case("sliding window", 4, 16, "HND", "single", "bf16",
                                                 window=random.randint(0, 200)))
    guarded("decode e4m3", lambda: decode_case("fp8 e4m3 KV + scales", 4, 16, "NHD", "single", "bf16", "e4m3",
                                               k_scale=0.5, v_scale=2.0))
    guarded("decode e5m2", lambda: decode_case("fp8 e5m2 KV", 2, 64, "HND", "tuple", "f16", "e5m2", head_dim=64))
    guarded("decode strided", lambda: decode_case("strided q, caller's out/lse", 4, 16, "NHD", "tuple", "bf16",
                                                  strided_q=True, give_out=True))
    guarded("decode sinks+cap", lambda: decode_case("sinks + soft cap", 8, 16, "HND", "single", "f16", head_dim=64,
                                                    cap=1.5, sm_scale=0.3, sinks=True))
    guarded("decode sinks+window", lambda: decode_case("sinks + sliding window", 4, 16, "NHD", "tuple", "bf16",
                                                       window=random.randint(0, 200), sinks=True))
    # Windows and caps on variants that had none of their own before kernel ABI 2.
    guarded("decode window+cap f16", lambda: decode_case("window + soft cap", 8, 16, "NHD", "single", "f16",
                                                         head_dim=64, window=random.randint(0, 200), cap=1.5))
    guarded("decode window e5m2", lambda: decode_case("window, fp8 e5m2 KV", 4, 16, "HND", "tuple", "bf16", "e5m2",
                                                      head_dim=256, window=random.randint(0, 200), pos="ROPE_LLAMA"))
    guarded("decode window switch", lambda: window_switch_case("decode"))


def window_switch_case(kind):
    """A hybrid model's step on one wrapper: plans alternate between full and windowed layers (and
    caps), each run checked; the wrapper keeps one aotinfer object per window, the caps share it,
    and a window other than plan's at run() is refused. kind: "decode" or "paged prefill"."""
    kv_heads, group, dim, page, layout = 2, 4, 128, 16, "NHD"
    heads, batch = kv_heads * group, random.randint(2, 6)
    lens = [random.randint(1, 400) for _ in range(batch)]
    qo = [1] * batch if kind == "decode" else [random.randint(1, min(n, 24)) for n in lens]
    cache = Paged(lens, page, kv_heads, dim, layout, "tuple", "bf16")
    q = torch.randn(sum(qo), heads, dim, device=DEV).to(torch.bfloat16)
    if kind == "decode":
        wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(WORKSPACE, layout)
    else:
        wrapper = flashinfer.BatchPrefillWithPagedKVCacheWrapper(WORKSPACE, layout)
    window = random.randint(0, 64)
    tok = [0] + list(itertools_accumulate(qo))
    for step, (w, cap) in enumerate(((-1, None), (window, None), (-1, 30.0), (window, 2.0), (window, None))):
        if kind == "decode":
            wrapper.plan(cache.indptr, cache.indices, cache.last, heads, kv_heads, dim, page, window_left=w,
                         logits_soft_cap=cap, q_data_type=torch.bfloat16)
        else:
            wrapper.plan(indptr_of(qo), cache.indptr, cache.indices, cache.last, heads, kv_heads, dim, page,
                         causal=True, window_left=w, logits_soft_cap=cap, q_data_type=torch.bfloat16)
        o = wrapper.run(q, cache.cache)
        ref = torch.cat([attention(q[tok[r]:tok[r + 1]], *cache.get(r, n), causal=True, cap=cap or 0.0, window=w)[0]
                         for r, n in enumerate(lens)])
        torch.cuda.synchronize()
        check(f"{kind} window switch {step} [window_left {w}, cap {cap}, batch {batch}] o", o, ref, 1e-2)
    report(f"{kind} window switch: objects", len(wrapper._cores) == 2,
           f"{len(wrapper._cores)} aotinfer objects for windows -1 and {window} (caps are run values)")
    try:
        wrapper.run(q, cache.cache, window_left=-1)
        report(f"{kind} window switch: run(window_left) other than plan's", False, "accepted")
    except ValueError as e:
        report(f"{kind} window switch: run(window_left) other than plan's", "plan again" in str(e), str(e))


def forward_case(kind):
    """FlashInfer's deprecated forward() on a prefill wrapper planned causal: its own causal and
    window replace the plan's (the wrapper plans again), a custom mask outlives its causal.
    kind: "paged" or "ragged"."""
    kv_heads, group, dim = 2, 4, 128
    heads, batch = kv_heads * group, random.randint(1, 5)
    kv = [random.randint(1, 400) for _ in range(batch)]
    qo = [random.randint(1, n) for n in kv]
    tok = [0] + list(itertools_accumulate(qo))
    q = torch.randn(sum(qo), heads, dim, device=DEV).to(torch.bfloat16)
    if kind == "paged":
        cache = Paged(kv, 16, kv_heads, dim, "NHD", "tuple", "bf16")
        wrapper = flashinfer.BatchPrefillWithPagedKVCacheWrapper(WORKSPACE, "NHD")
        requests = (indptr_of(qo), cache.indptr, cache.indices, cache.last, heads, kv_heads, dim, 16)
        keys, inputs = lambda r: cache.get(r, kv[r]), (cache.cache,)
    else:
        k, v = (torch.randn(sum(kv), kv_heads, dim, device=DEV).to(torch.bfloat16) for _ in range(2))
        starts = [0] + list(itertools_accumulate(kv))
        wrapper = flashinfer.BatchPrefillWithRaggedKVCacheWrapper(WORKSPACE, "NHD")
        requests = (indptr_of(qo), indptr_of(kv), heads, kv_heads, dim)
        keys, inputs = lambda r: (k[starts[r]:starts[r + 1]], v[starts[r]:starts[r + 1]]), (k, v)
    masks = [torch.rand(m, n, device=DEV) < 0.5 for m, n in zip(qo, kv)]
    window = random.randint(0, 64)
    for step, (plan_mask, causal, w) in enumerate((("causal", False, -1), ("causal", True, window), ("causal", False, window),
                                                   ("custom", True, -1))):
        custom = dict(custom_mask=torch.cat([m.reshape(-1) for m in masks])) if plan_mask == "custom" else {}
        wrapper.plan(*requests, causal=True, q_data_type=torch.bfloat16, **custom)
        o = wrapper.forward(q, *inputs, causal=causal, window_left=w)
        ref = torch.cat([attention(q[tok[r]:tok[r + 1]], *keys(r), causal=causal and not custom, window=w,
                                   mask=masks[r] if custom else None)[0] for r in range(batch)])
        torch.cuda.synchronize()
        check(f"{kind} prefill forward {step} [planned {plan_mask}, forward causal {causal} window {w}, batch {batch}] o",
              o, ref, 1e-2)


def decode_forward_case():
    """FlashInfer's deprecated forward() on the decode wrapper: its window replaces the plan's
    (the wrapper plans again), and so does the next forward()'s default, no window."""
    kv_heads, group, dim, page = 2, 4, 128, 16
    heads, batch = kv_heads * group, random.randint(1, 6)
    lens = [random.randint(1, 600) for _ in range(batch)]
    cache = Paged(lens, page, kv_heads, dim, "NHD", "tuple", "bf16")
    q = torch.randn(batch, heads, dim, device=DEV).to(torch.bfloat16)
    wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(WORKSPACE, "NHD")
    wrapper.plan(cache.indptr, cache.indices, cache.last, heads, kv_heads, dim, page, q_data_type=torch.bfloat16)
    for step, w in enumerate((random.randint(0, 200), -1)):
        o = wrapper.forward(q, cache.cache, window_left=w)
        ref = torch.cat([attention(q[r:r + 1], *cache.get(r, n), window=w)[0] for r, n in enumerate(lens)])
        torch.cuda.synchronize()
        check(f"decode forward {step} [window_left {w}, batch {batch}] o", o, ref, 1e-2)


def decode_graph():
    """CUDA-graph mode: the caller's metadata buffers, one capture, replays after later plans."""
    batch, kv_heads, group, dim, page = 5, 2, 4, 128, 16
    heads = kv_heads * group
    bufs = dict(paged_kv_indptr_buffer=torch.empty(batch + 1, dtype=torch.int32, device=DEV),
                paged_kv_indices_buffer=torch.empty(4096, dtype=torch.int32, device=DEV),
                paged_kv_last_page_len_buffer=torch.empty(batch, dtype=torch.int32, device=DEV))
    wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(WORKSPACE, "NHD", use_cuda_graph=True, **bufs)
    q = torch.empty(batch, heads, dim, dtype=torch.bfloat16, device=DEV)
    out = torch.empty_like(q)
    lse = torch.empty(batch, heads, dtype=torch.float32, device=DEV)
    graph = None
    for step in range(3):
        lens = [random.randint(1, 3000) for _ in range(batch)]
        cache = Paged(lens, page, kv_heads, dim, "NHD", "single", "bf16", num_pages=1024)
        pool = cache.cache if step == 0 else pool_again(pool, cache)
        wrapper.plan(cache.indptr, cache.indices, cache.last, heads, kv_heads, dim, page, q_data_type=torch.bfloat16)
        q.copy_(torch.randn(batch, heads, dim, device=DEV))
        out.fill_(NAN), lse.fill_(NAN)
        if graph is None:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):  # warm-up outside the capture
                wrapper.run(q, pool, out=out, lse=lse, return_lse=True)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                wrapper.run(q, pool, out=out, lse=lse, return_lse=True)
            out.fill_(NAN), lse.fill_(NAN)
        graph.replay()
        torch.cuda.synchronize()
        ref_o, ref_lse = zip(*(attention(q[r:r + 1], *cache.get(r, n)) for r, n in enumerate(lens)))
        check(f"decode cuda graph replay {step} [batch {batch} max_kv {max(lens)}] o", out, torch.cat(ref_o), 1e-2)
        check(f"decode cuda graph replay {step} lse", lse, torch.cat(ref_lse), 1e-3)


def pool_again(pool, cache):
    """A captured graph keeps its pool pointer: the new cache's contents go into the captured pool."""
    pool.copy_(cache.cache)
    cache.cache, cache.k, cache.v = pool, pool[:, 0], pool[:, 1]
    return pool


# --- BatchPrefillWithPagedKVCacheWrapper ----------------------------------------------------------

def prefill_lengths(batch, causal, max_kv=700):
    kv = [random.randint(1, max_kv) for _ in range(batch)]
    qo = [random.randint(1, n if causal else 300) for n in kv]
    return qo, kv


def packbits_little(bits):
    """A flat bool tensor as bytes, bit b of byte i being element 8 i + b (numpy's
    packbits(bitorder="little")), padded with zeros to whole bytes."""
    padded = torch.zeros((bits.numel() + 7) // 8 * 8, dtype=torch.uint8, device=bits.device)
    padded[:bits.numel()] = bits.to(torch.uint8)
    weights = torch.tensor([1 << b for b in range(8)], dtype=torch.int32, device=bits.device)
    return (padded.view(-1, 8).to(torch.int32) * weights).sum(1).to(torch.uint8)


def multi_items(batch):
    """Requests for multi-item scoring: cached keys, the prefix's tail among the query tokens,
    then items of 1-40 tokens, each opened by a delimiter. Returns (qo, kv, the plan's arguments,
    the masks): the masks are formed from item numbers, not from the positions the wrapper reads.
    A token sees the prefix (the cached keys and the tail) and its own item up to itself, less
    the delimiter; a delimiter sees the prefix only, a token of the tail the keys up to itself."""
    qo, kv, prefix, rows, masks = [], [], [], [], []
    for _ in range(batch):
        cached, tail = random.randint(0, 300), random.randint(0, 20)
        items = [random.randint(1, 40) for _ in range(random.randint(1, 5))]
        m = tail + sum(items)
        number = torch.tensor([0] * tail + [i + 1 for i, n in enumerate(items) for _ in range(n)], device=DEV)
        opens = torch.tensor([False] * tail + [j == 0 for n in items for j in range(n)], device=DEV)
        key_number = torch.cat([torch.zeros(cached, dtype=torch.long, device=DEV), number])
        key_opens = torch.cat([torch.zeros(cached, dtype=torch.bool, device=DEV), opens])
        at = torch.arange(m, device=DEV)[:, None] + cached
        own = (key_number[None, :] == number[:, None]) & (number[:, None] > 0) & ~key_opens[None, :]
        masks.append((torch.arange(cached + m, device=DEV)[None, :] <= at) & ((key_number[None, :] == 0) | own))
        qo.append(m), kv.append(cached + m), prefix.append(cached + tail)
        rows.append([j for n in items for j in range(n)])
    stride = max(map(len, rows)) + random.randint(0, 7)
    positions = torch.zeros(batch * stride, dtype=torch.int32)
    for i, r in enumerate(rows):
        positions[i * stride:i * stride + len(r)] = torch.tensor(r, dtype=torch.int32)
    args = dict(prefix_len_ptr=torch.tensor(prefix, dtype=torch.int64).to(torch.uint32).to(DEV),
                token_pos_in_items_ptr=positions.to(torch.uint16).to(DEV), token_pos_in_items_len=stride,
                max_item_len_ptr=torch.tensor([max(r) for r in rows], dtype=torch.int32).to(torch.uint16).to(DEV))
    return qo, kv, args, masks


def reference_prefill(q, qo, kv_get, masks=None, **kw):
    out, lse, start = [], [], 0
    for r, m in enumerate(qo):
        o, s = attention(q[start:start + m], *kv_get(r), mask=None if masks is None else masks[r], **kw)
        out.append(o), lse.append(s)
        start += m
    return torch.cat(out), torch.cat(lse)


def paged_prefill_case(name, group, page, layout, form, dtype="bf16", head_dim=128, causal=True, pos="NONE",
                       window=-1, cap=None, o_dtype=None, lse_base="log2", lse_layout="NH", give_out=False,
                       sinks=False, kv_dtype=None, k_scale=None, v_scale=None, custom=None):
    """custom: "bool" or "packed", a random custom mask per request (FlashInfer's custom_mask or
    packed_custom_mask; it replaces causal), or "items", multi-item scoring (prefix_len_ptr, ...)."""
    kv_dtype = kv_dtype or dtype
    kv_heads = random.choice([1, 2, 4])
    heads, batch = kv_heads * group, random.randint(1, 6)
    qo, kv = prefill_lengths(batch, causal)
    mask_args, masks = {}, None
    if custom == "items":
        qo, kv, mask_args, masks = multi_items(batch)
    elif custom:
        masks = [torch.rand(m, n, device=DEV) < random.uniform(0.1, 0.9) for m, n in zip(qo, kv)]
    cache = Paged(kv, page, kv_heads, head_dim, layout, form, kv_dtype)
    if custom == "bool":
        mask_args["custom_mask"] = torch.cat([m.reshape(-1) for m in masks])
    elif custom == "packed":
        mask_args["packed_custom_mask"] = torch.cat([packbits_little(m.reshape(-1)) for m in masks])
    wrapper = flashinfer.BatchPrefillWithPagedKVCacheWrapper(WORKSPACE, layout)
    wrapper.plan(indptr_of(qo), cache.indptr, cache.indices, cache.last, heads, kv_heads, head_dim, page, **mask_args,
                 causal=causal, pos_encoding_mode=pos, window_left=window, logits_soft_cap=cap,
                 q_data_type=DTYPES[dtype], kv_data_type=DTYPES[kv_dtype],
                 o_data_type=DTYPES[o_dtype] if o_dtype else None)
    q = torch.randn(sum(qo), heads, head_dim, device=DEV).to(DTYPES[dtype])
    sinks = torch.rand(heads, device=DEV) * 8 - 2 if sinks else None
    kw = dict(return_lse=True, lse_base=lse_base, lse_layout=lse_layout, sinks=sinks, k_scale=k_scale, v_scale=v_scale)
    if give_out:  # a non-contiguous out (written through a temporary) and the caller's lse
        kw["out"] = poisoned((heads, sum(qo), head_dim), DTYPES[o_dtype or dtype]).transpose(0, 1)
        kw["lse"] = poisoned((heads, sum(qo)) if lse_layout == "HN" else (sum(qo), heads), torch.float32)
    o, lse = wrapper.run(q, cache.cache, **kw)
    if give_out:
        assert o is kw["out"] and lse is kw["lse"], "run() must return the caller's out and lse"
    ref_o, ref_lse = reference_prefill(q, qo, lambda r: cache.get(r, kv[r]), causal=causal and not custom,
                                       window=window, cap=cap or 0.0, rope_theta=1e4 if pos == "ROPE_LLAMA" else None,
                                       alibi=pos == "ALIBI", sinks=sinks, k_scale=k_scale or 1.0, v_scale=v_scale or 1.0, masks=masks)
    if lse_base == "ln":
        ref_lse = ref_lse * LN2
    if lse_layout == "HN":
        ref_lse = ref_lse.t()
    label = (f"paged prefill {name} [{dtype}/{kv_dtype} hd{head_dim} group {group} page {page} {layout} {form} "
             f"{'causal' if causal else 'non-causal'} qo {sum(qo)} max_kv {max(kv)}]")
    torch.cuda.synchronize()
    assert o.dtype == DTYPES[o_dtype or dtype], f"out is {o.dtype}"
    check(label + " o", o, ref_o, 1e-2)
    check(label + f" lse ({lse_base}, {lse_layout})", lse, ref_lse, 1e-3)


def decode_multi_token_case():
    """The decode wrapper with q_len_per_req > 1 (speculative verification): each request's
    last tokens, causal among themselves."""
    q_len, kv_heads, group, page = random.choice([2, 3, 4, 8, 16]), 2, 4, 16
    heads, batch = kv_heads * group, random.randint(1, 8)
    kv = [random.randint(q_len, 900) for _ in range(batch)]
    cache = Paged(kv, page, kv_heads, 128, "NHD", "single", "bf16")
    wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(WORKSPACE, "NHD", use_tensor_cores=True)
    wrapper.plan(cache.indptr, cache.indices, cache.last, heads, kv_heads, 128, page, q_data_type=torch.bfloat16,
                 q_len_per_req=q_len)
    q = torch.randn(batch * q_len, heads, 128, device=DEV).to(torch.bfloat16)
    o, lse = wrapper.run(q, cache.cache, return_lse=True)
    ref_o, ref_lse = reference_prefill(q, [q_len] * batch, lambda r: cache.get(r, kv[r]), causal=True)
    torch.cuda.synchronize()
    label = f"decode q_len_per_req {q_len} [batch {batch} max_kv {max(kv)}]"
    check(label + " o", o, ref_o, 1e-2)
    check(label + " lse", lse, ref_lse, 1e-3)


def tree_mask(q_len, kv_len):
    """A speculative tree over the last q_len keys, random parents: each token sees the prefix,
    its ancestors and itself (the bool [q_len, kv_len] FlashInfer's custom_mask takes)."""
    prefix, parent = kv_len - q_len, [-1] + [random.randint(0, t - 1) for t in range(1, q_len)]
    m = torch.zeros(q_len, kv_len, dtype=torch.bool)
    m[:, :prefix] = True
    for t in range(q_len):
        a = t
        while a >= 0:
            m[t, prefix + a] = True
            a = parent[a]
    return m.to(DEV)


def speculative_prefill_case(q_len, causal, kv_dtype="bf16", pos="NONE", sinks=False, k_scale=None, v_scale=None,
                             group=None, tree=None):
    """The paged prefill wrapper over requests that all verify q_len tokens (an engine's target
    verification): served by the decode kernel while the tokens times the group fill one decode
    CTA (16 rows), by the prefill kernels beyond; checked as any prefill. tree: "bool" or
    "packed", each request under a speculative tree (custom_mask or packed_custom_mask)."""
    kv_heads, page = random.choice([1, 2, 4]), random.choice([1, 16, 64])
    group = group or random.choice([1, 4, 8])
    heads, batch = kv_heads * group, random.randint(1, 12)
    kv = [random.randint(q_len, 2000) for _ in range(batch)]
    cache = Paged(kv, page, kv_heads, 128, "NHD", "single", kv_dtype)
    masks = [tree_mask(q_len, n) for n in kv] if tree else None
    mask_args = {}
    if tree == "bool":
        mask_args["custom_mask"] = torch.cat([m.reshape(-1) for m in masks])
    elif tree == "packed":
        mask_args["packed_custom_mask"] = torch.cat([packbits_little(m.reshape(-1)) for m in masks])
    wrapper = flashinfer.BatchPrefillWithPagedKVCacheWrapper(WORKSPACE, "NHD")
    wrapper.plan(indptr_of([q_len] * batch), cache.indptr, cache.indices, cache.last, heads, kv_heads, 128, page,
                 causal=causal, pos_encoding_mode=pos, q_data_type=torch.bfloat16, kv_data_type=DTYPES[kv_dtype],
                 **mask_args)
    assert wrapper._decoding == (q_len * group <= 16), "equal query runs of up to 16 rows run on the decode kernel"
    q = torch.randn(batch * q_len, heads, 128, device=DEV).to(torch.bfloat16)
    sinks = torch.rand(heads, device=DEV) * 8 - 2 if sinks else None
    o, lse = wrapper.run(q, cache.cache, return_lse=True, sinks=sinks, k_scale=k_scale, v_scale=v_scale)
    ref_o, ref_lse = reference_prefill(q, [q_len] * batch, lambda r: cache.get(r, kv[r]), causal=causal and not tree,
                                       rope_theta=1e4 if pos == "ROPE_LLAMA" else None, alibi=pos == "ALIBI", sinks=sinks,
                                       k_scale=k_scale or 1.0, v_scale=v_scale or 1.0, masks=masks)
    torch.cuda.synchronize()
    label = (f"paged prefill of {q_len} tokens per request on the decode kernel [{kv_dtype} {pos} "
             f"{f'{tree} tree mask' if tree else 'causal' if causal else 'non-causal'} group {group} page {page} "
             f"batch {batch} max_kv {max(kv)}]")
    check(label + " o", o, ref_o, 1e-2)
    check(label + " lse", lse, ref_lse, 1e-3)


def paged_prefill_cases():
    layouts_forms = [("HND", "tuple"), ("NHD", "single"), ("HND", "single"), ("NHD", "tuple")]
    shapes = [(1, 16, "bf16", 128, True), (2, 1, "f16", 64, False), (4, 64, "bf16", 256, True),
              (8, 16, "f16", 128, False), (16, 64, "bf16", 64, True), (16, 1, "f16", 128, True),
              (2, 16, "bf16", 256, False), (8, 64, "f16", 64, True)]
    for i, (group, page, dtype, dim, causal) in enumerate(shapes):
        layout, form = layouts_forms[i % 4]
        guarded(f"paged prefill {i}", lambda: paged_prefill_case("plain", group, page, layout, form, dtype, dim,
                                                                 causal))
    guarded("paged prefill rope", lambda: paged_prefill_case("rope_llama", 4, 16, "NHD", "single", pos="ROPE_LLAMA"))
    guarded("paged prefill alibi", lambda: paged_prefill_case("alibi", 4, 16, "NHD", "single", pos="ALIBI"))
    guarded("paged prefill window", lambda: paged_prefill_case("sliding window", 8, 16, "HND", "tuple",
                                                               window=random.randint(0, 100)))
    guarded("paged prefill window+cap", lambda: paged_prefill_case(
        "window + soft cap", 2, 64, "NHD", "tuple", head_dim=256, window=random.randint(0, 100), cap=1.5))
    guarded("paged prefill f16->bf16", lambda: paged_prefill_case(
        "f16 q, bf16 out, rope, soft cap", 4, 16, "HND", "single", "f16", 64, pos="ROPE_LLAMA", cap=2.0,
        o_dtype="bf16"))
    guarded("paged prefill lse ln HN", lambda: paged_prefill_case(
        "lse_base ln, lse_layout HN, strided out", 2, 16, "NHD", "single", lse_base="ln", lse_layout="HN",
        give_out=True))
    guarded("paged prefill caller's lse", lambda: paged_prefill_case("caller's out and lse", 4, 16, "HND", "tuple",
                                                                     give_out=True))
    guarded("paged prefill sinks", lambda: paged_prefill_case("sinks", 8, 16, "NHD", "single", sinks=True))
    guarded("paged prefill window switch", lambda: window_switch_case("paged prefill"))
    guarded("paged prefill forward", lambda: forward_case("paged"))
    guarded("ragged prefill forward", lambda: forward_case("ragged"))
    guarded("decode forward", decode_forward_case)
    guarded("paged prefill e4m3", lambda: paged_prefill_case("fp8 e4m3 KV + scales", 4, 16, "NHD", "single", "bf16",
                                                             kv_dtype="e4m3", k_scale=0.6, v_scale=1.7))
    guarded("paged prefill e5m2", lambda: paged_prefill_case("fp8 e5m2 KV, window", 2, 64, "HND", "tuple", "f16", 64,
                                                             causal=False, kv_dtype="e5m2", window=random.randint(0, 100)))
    guarded("paged prefill custom mask", lambda: paged_prefill_case("custom_mask", 4, 16, "NHD", "tuple",
                                                                    custom="bool"))
    guarded("paged prefill packed mask", lambda: paged_prefill_case(
        "packed_custom_mask, window, sinks", 2, 1, "HND", "single", "f16", 64, custom="packed",
        window=random.randint(0, 100), sinks=True))
    guarded("paged prefill multi-item scoring", lambda: paged_prefill_case(
        "multi-item scoring, rope, soft cap", 4, random.choice([1, 5, 16]), "NHD", "single", "f16", pos="ROPE_LLAMA",
        cap=30.0, custom="items"))
    guarded("paged prefill custom mask e4m3", lambda: paged_prefill_case(
        "custom_mask, fp8 e4m3 KV", 8, 64, "NHD", "single", kv_dtype="e4m3", k_scale=0.8, v_scale=1.3, custom="bool"))
    guarded("decode q_len_per_req", decode_multi_token_case)
    guarded("paged prefill speculative", lambda: speculative_prefill_case(random.choice([2, 4, 8]), True))
    guarded("paged prefill speculative non-causal", lambda: speculative_prefill_case(3, False, sinks=True))
    guarded("paged prefill speculative rope e4m3", lambda: speculative_prefill_case(  # the decode kernel's variant
        4, True, kv_dtype="e4m3", pos="ROPE_LLAMA", k_scale=0.7, v_scale=1.4, group=4))
    guarded("paged prefill speculative tree", lambda: speculative_prefill_case(
        random.choice([2, 4, 8]), True, tree="packed", group=random.choice([1, 2])))
    guarded("paged prefill speculative tree e4m3 sinks", lambda: speculative_prefill_case(
        random.choice([3, 4]), False, kv_dtype="e4m3", sinks=True, k_scale=0.9, v_scale=1.2, group=4, tree="bool"))
    guarded("paged prefill sinks+window+cap", lambda: paged_prefill_case(
        "sinks + window + soft cap", 2, 64, "HND", "tuple", head_dim=256, window=random.randint(0, 100), cap=1.5,
        sinks=True))


def paged_prefill_graph():
    batch, kv_heads, group, dim, page = 3, 2, 4, 128, 16
    heads = kv_heads * group
    bufs = dict(qo_indptr_buf=torch.empty(batch + 1, dtype=torch.int32, device=DEV),
                paged_kv_indptr_buf=torch.empty(batch + 1, dtype=torch.int32, device=DEV),
                paged_kv_indices_buf=torch.empty(4096, dtype=torch.int32, device=DEV),
                paged_kv_last_page_len_buf=torch.empty(batch, dtype=torch.int32, device=DEV))
    wrapper = flashinfer.BatchPrefillWithPagedKVCacheWrapper(WORKSPACE, "NHD", use_cuda_graph=True, **bufs)
    qo = [4] * batch  # speculative verification: a fixed number of tokens per request
    q = torch.empty(sum(qo), heads, dim, dtype=torch.bfloat16, device=DEV)
    out = torch.empty_like(q)
    graph = pool = None
    for step in range(3):
        kv = [random.randint(4, 2000) for _ in range(batch)]
        cache = Paged(kv, page, kv_heads, dim, "NHD", "single", "bf16", num_pages=512)
        pool = cache.cache if step == 0 else pool_again(pool, cache)
        wrapper.plan(indptr_of(qo), cache.indptr, cache.indices, cache.last, heads, kv_heads, dim, page, causal=True,
                     q_data_type=torch.bfloat16)
        q.copy_(torch.randn(q.shape, device=DEV))
        if graph is None:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                wrapper.run(q, pool, out=out)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                wrapper.run(q, pool, out=out)
        out.fill_(NAN)
        graph.replay()
        torch.cuda.synchronize()
        ref_o, _ = reference_prefill(q, qo, lambda r: cache.get(r, kv[r]), causal=True)
        check(f"paged prefill cuda graph replay {step} [max_kv {max(kv)}] o", out, ref_o, 1e-2)


# --- BatchPrefillWithRaggedKVCacheWrapper ---------------------------------------------------------

def ragged_case(name, group, dtype="bf16", head_dim=128, causal=True, pos="NONE", window=-1, cap=None,
                kv_dtype=None, o_dtype=None, fused=True, custom=False):
    """custom: True, a random custom_mask per request; "items", multi-item scoring."""
    kv_dtype = kv_dtype or dtype
    kv_heads = random.choice([1, 2, 4])
    heads, batch = kv_heads * group, random.randint(1, 6)
    qo, kv = prefill_lengths(batch, causal)
    if causal:
        qo = kv if random.random() < 0.5 else qo  # prompts (qo == kv) and chunked prefill
    if custom == "items":
        qo, kv, mask_args, masks = multi_items(batch)
    else:
        masks = [torch.rand(m, n, device=DEV) < 0.5 for m, n in zip(qo, kv)] if custom else None
        mask_args = dict(custom_mask=torch.cat([m.reshape(-1) for m in masks])) if custom else {}
    wrapper = flashinfer.BatchPrefillWithRaggedKVCacheWrapper(WORKSPACE, "NHD")
    wrapper.plan(indptr_of(qo), indptr_of(kv), heads, kv_heads, head_dim, **mask_args, causal=causal,
                 pos_encoding_mode=pos,
                 window_left=window, logits_soft_cap=cap, q_data_type=DTYPES[dtype],
                 kv_data_type=DTYPES[kv_dtype], o_data_type=DTYPES[o_dtype] if o_dtype else None)
    q = torch.randn(sum(qo), heads, head_dim, device=DEV).to(DTYPES[dtype])
    if fused:  # k and v as token-strided slices of one fused kv projection
        kv_proj = torch.randn(sum(kv), 2 * kv_heads * head_dim, device=DEV).to(DTYPES[kv_dtype])
        k = kv_proj[:, :kv_heads * head_dim].view(-1, kv_heads, head_dim)
        v = kv_proj[:, kv_heads * head_dim:].view(-1, kv_heads, head_dim)
    else:
        k, v = (torch.randn(sum(kv), kv_heads, head_dim, device=DEV).to(DTYPES[kv_dtype]) for _ in range(2))
    o, lse = wrapper.run(q, k, v, return_lse=True)
    starts = [0] + list(itertools_accumulate(kv))
    # The kernel's products run in kv's type: q is rounded to it when the types differ.
    q_ref = q.to(DTYPES[kv_dtype])
    ref_o, ref_lse = reference_prefill(q_ref, qo, lambda r: (k[starts[r]:starts[r + 1]], v[starts[r]:starts[r + 1]]),
                                       causal=causal and not custom, window=window, cap=cap or 0.0,
                                       rope_theta=1e4 if pos == "ROPE_LLAMA" else None, alibi=pos == "ALIBI", masks=masks)
    label = (f"ragged prefill {name} [{dtype}/{kv_dtype} hd{head_dim} group {group} "
             f"{'causal' if causal else 'non-causal'} qo {sum(qo)} kv {sum(kv)}]")
    torch.cuda.synchronize()
    check(label + " o", o, ref_o, 1e-2)
    check(label + " lse", lse, ref_lse, 1e-3)


def ragged_cases():
    shapes = [(1, "bf16", 64, True), (2, "f16", 128, False), (4, "bf16", 256, True), (8, "f16", 64, False),
              (16, "bf16", 128, True), (16, "f16", 256, False), (8, "bf16", 128, False), (4, "f16", 128, True)]
    for i, (group, dtype, dim, causal) in enumerate(shapes):
        guarded(f"ragged {i}", lambda: ragged_case("plain", group, dtype, dim, causal, fused=i % 2 == 0))
    guarded("ragged rope", lambda: ragged_case("rope_llama", 4, pos="ROPE_LLAMA"))
    guarded("ragged window+cap", lambda: ragged_case("window + soft cap", 2, causal=False,
                                                     window=random.randint(0, 100), cap=1.5))
    guarded("ragged custom mask", lambda: ragged_case("custom_mask", 8, "f16", 128, custom=True))
    guarded("ragged multi-item scoring", lambda: ragged_case("multi-item scoring, window", 2, window=20,
                                                             custom="items"))
    guarded("ragged alibi", lambda: ragged_case("alibi", 4, pos="ALIBI"))
    guarded("ragged alibi custom mask", lambda: ragged_case("alibi + custom_mask + cap", 2, "f16", 128, custom=True,
                                                            pos="ALIBI", cap=30.0))
    guarded("ragged mixed types", lambda: ragged_case("f16 q, bf16 kv, f16 out", 4, "f16", kv_dtype="bf16",
                                                      o_dtype="f16"))


# --- cascade and page -----------------------------------------------------------------------------

def merge_reference(v_a, s_a, v_b, s_b):
    s = torch.logaddexp2(s_a.double(), s_b.double())
    w_a, w_b = torch.exp2(s_a.double() - s)[..., None], torch.exp2(s_b.double() - s)[..., None]
    return v_a.double() * w_a + v_b.double() * w_b, s


def merge_cases():
    for dtype, dim in (("bf16", 128), ("f16", 64), ("bf16", 256)):
        tokens, heads = random.randint(1, 3000), random.choice([1, 8, 32])
        v_a, v_b = (torch.randn(tokens, heads, dim, device=DEV).to(DTYPES[dtype]) for _ in range(2))
        s_a, s_b = (torch.randn(tokens, heads, device=DEV) * 6 for _ in range(2))
        ref_v, ref_s = merge_reference(v_a, s_a, v_b, s_b)
        v, s = flashinfer.merge_state(v_a, s_a, v_b, s_b)
        torch.cuda.synchronize()
        check(f"merge_state [{dtype} hd{dim} {tokens}x{heads}] v", v, ref_v, 1e-2)
        check(f"merge_state [{dtype} hd{dim} {tokens}x{heads}] s", s, ref_s, 1e-3)
        mask = torch.rand(tokens, device=DEV) < 0.7
        v_in, s_in = v_a.clone(), s_a.clone()
        flashinfer.merge_state_in_place(v_in, s_in, v_b, s_b, mask=mask)
        torch.cuda.synchronize()
        m3, m2 = mask[:, None, None], mask[:, None]
        check(f"merge_state_in_place masked [{dtype} hd{dim}] v", v_in, torch.where(m3, ref_v, v_a.double()), 1e-2)
        check(f"merge_state_in_place masked [{dtype} hd{dim}] s", s_in, torch.where(m2, ref_s, s_a.double()), 1e-3)
        v_in, s_in = v_a.clone(), s_a.clone()
        flashinfer.merge_state_in_place(v_in, s_in, v_b, s_b)
        torch.cuda.synchronize()
        check(f"merge_state_in_place [{dtype} hd{dim}] v", v_in, ref_v, 1e-2)
        check(f"merge_state_in_place [{dtype} hd{dim}] s", s_in, ref_s, 1e-3)


def merge_states_cases():
    """merge_states against the fp64 merge of every state: 1-100 states a row, some of them empty
    (-inf), and a row with no state that saw a key."""
    for dtype, dim, n in (("f16", 128, 100), ("bf16", 64, 7), ("bf16", 256, 2), ("f16", 128, 1), ("bf16", 512, 33)):
        seq, heads = random.randint(1, 600), random.choice([1, 8, 32])
        v = torch.randn(seq, n, heads, dim, device=DEV).to(DTYPES[dtype])
        s = torch.randn(seq, n, heads, device=DEV) * 6
        s[torch.rand(seq, n, heads, device=DEV) < 0.1] = float("-inf")
        s[0] = float("-inf")
        s64 = s.double()
        ref_s = torch.logsumexp(s64 * math.log(2), dim=1) / math.log(2)
        w = torch.exp2(s64 - torch.where(torch.isfinite(ref_s), ref_s, torch.zeros_like(ref_s))[:, None])
        ref_v = torch.where(torch.isfinite(ref_s)[..., None], (v.double() * w[..., None]).sum(1), 0.0)
        v_in, s_in = v.clone(), s.clone()
        out_v, out_s = flashinfer.merge_states(v, s)
        torch.cuda.synchronize()
        name = f"merge_states [{dtype} hd{dim} {seq}x{n}x{heads}]"
        check(f"{name} v", out_v, ref_v, 1e-2)
        check(f"{name} s", out_s, ref_s, 1e-3)  # (equal -infs agree: the empty rows)
        empty = ~torch.isfinite(ref_s)
        report(f"{name} empty rows", bool((out_v[empty] == 0).all()), "v 0")
        report(f"{name} inputs", torch.equal(v, v_in) and torch.equal(s, s_in) and out_v.data_ptr() != v.data_ptr(),
               "untouched, outputs new")


def cascade_case():
    """A shared prefix (ragged, non-causal) and per-request suffixes (paged decode), merged with
    merge_state: equal to attention over prefix + suffix. Checks the LSE bases fit together."""
    kv_heads, group, dim, page = 2, 4, 128, 16
    heads, batch, prefix = kv_heads * group, random.randint(2, 8), random.randint(1, 500)
    pk, pv = (torch.randn(prefix, kv_heads, dim, device=DEV).to(torch.bfloat16) for _ in range(2))
    lens = [random.randint(1, 400) for _ in range(batch)]
    cache = Paged(lens, page, kv_heads, dim, "NHD", "single", "bf16")
    q = torch.randn(batch, heads, dim, device=DEV).to(torch.bfloat16)
    shared = flashinfer.BatchPrefillWithRaggedKVCacheWrapper(WORKSPACE)
    shared.plan(torch.tensor([0, batch], dtype=torch.int32), torch.tensor([0, prefix], dtype=torch.int32), heads,
                kv_heads, dim, causal=False, q_data_type=torch.bfloat16)
    o_a, s_a = shared.run(q, pk, pv, return_lse=True)
    decode = flashinfer.BatchDecodeWithPagedKVCacheWrapper(WORKSPACE, "NHD")
    decode.plan(cache.indptr, cache.indices, cache.last, heads, kv_heads, dim, page, q_data_type=torch.bfloat16)
    o_b, s_b = decode.run(q, cache.cache, return_lse=True)
    o, s = flashinfer.merge_state(o_a, s_a, o_b, s_b)
    ref = [attention(q[r:r + 1], torch.cat([pk, cache.get(r, n)[0]]), torch.cat([pv, cache.get(r, n)[1]]))
           for r, n in enumerate(lens)]
    torch.cuda.synchronize()
    check(f"cascade: ragged prefix {prefix} + paged decode, merge_state o", o, torch.cat([x[0] for x in ref]), 1e-2)
    check("cascade lse", s, torch.cat([x[1] for x in ref]), 1e-3)


def append_case(layout, form, dtype, page, dim):
    kv_heads, batch = random.choice([1, 4, 8]), random.randint(1, 8)
    old = [random.randint(0, 300) for _ in range(batch)]
    new = [random.randint(1, 100) for _ in range(batch)]
    lens = [a + b for a, b in zip(old, new)]
    cache = Paged(lens, page, kv_heads, dim, layout, form, dtype)
    keys, values = cache.keys, cache.values
    for r in range(batch):  # the appended tokens' slots start as NaN, as fresh cache pages
        nan = torch.full((new[r], kv_heads, dim), NAN, device=DEV).to(DTYPES[dtype])
        cache.put(r, torch.arange(old[r], lens[r], device=DEV), nan, nan)
    append_indptr = indptr_of(new)
    seq_lens = flashinfer.get_seq_lens(cache.indptr, cache.last, page)
    nnz = sum(new)
    batch_indices, positions = flashinfer.get_batch_indices_positions(append_indptr, seq_lens, nnz)
    want_b = torch.tensor([r for r in range(batch) for _ in range(new[r])], dtype=torch.int32, device=DEV)
    want_p = torch.tensor([old[r] + j for r in range(batch) for j in range(new[r])], dtype=torch.int32, device=DEV)
    check_equal(f"get_seq_lens [batch {batch}]", seq_lens.int(), torch.tensor(lens, dtype=torch.int32, device=DEV))
    check_equal(f"get_batch_indices_positions [nnz {nnz}] batch_indices", batch_indices, want_b)
    check_equal(f"get_batch_indices_positions [nnz {nnz}] positions", positions, want_p)
    # a fused kv projection: append_key / append_value are token-strided slices
    fused = torch.empty(nnz, 2, kv_heads, dim, device=DEV).to(DTYPES[dtype])
    fused[:, 0] = torch.cat([keys[r][old[r]:] for r in range(batch)])
    fused[:, 1] = torch.cat([values[r][old[r]:] for r in range(batch)])
    flashinfer.append_paged_kv_cache(fused[:, 0], fused[:, 1], batch_indices, positions, cache.cache, cache.indices,
                                     cache.indptr, cache.last, kv_layout=layout)
    torch.cuda.synchronize()
    got_k = torch.cat([cache.get(r, n)[0] for r, n in enumerate(lens)])
    got_v = torch.cat([cache.get(r, n)[1] for r, n in enumerate(lens)])
    label = f"append_paged_kv_cache [{dtype} hd{dim} page {page} {layout} {form} nnz {nnz}]"
    check_equal(label + " k", got_k.view(torch.uint8), torch.cat(keys).view(torch.uint8))
    check_equal(label + " v", got_v.view(torch.uint8), torch.cat(values).view(torch.uint8))


def page_cases():
    cases = [("NHD", "single", "bf16", 16, 128), ("HND", "tuple", "f16", 1, 64), ("HND", "single", "e4m3", 64, 128),
             ("NHD", "tuple", "bf16", 64, 256)]
    for i, (layout, form, dtype, page, dim) in enumerate(cases):
        guarded(f"append {i}", lambda: append_case(layout, form, dtype, page, dim))


# --- MultiLevelCascadeAttentionWrapper, the shared-prefix wrappers, fast_decode_plan --------------

def cascade_bounds(batch, levels):
    """Request boundaries per level: a tree of uneven groups (level 0 one to three groups, each next
    level cuts them further), the last level one group per request."""
    bounds = [sorted({0, batch} | set(random.sample(range(1, batch), min(batch - 1, random.randint(0, 2)))))]
    for _ in range(levels - 2):
        bounds.append(sorted(set(bounds[-1]) | set(random.sample(range(1, batch), random.randint(0, batch - 1)))))
    return (bounds if levels > 1 else []) + [list(range(batch + 1))]


def cascade_lens(bounds, qo):
    """KV lengths per level and group; a request's own keys (the last level) are at least its queries."""
    upper = [[random.randint(1, 300) for _ in level[1:]] for level in bounds[:-1]]
    return upper + [[random.randint(m, 300) for m in qo]]


def level_cache(level_lens, page, kv_heads, dim, num_pages=None):
    """One paged pool (NHD, one [pages, 2, ...] tensor) holding every level's groups, and each level's
    (kv_indptr, kv_indices, kv_last_page_len) into it."""
    cache = Paged([n for lens in level_lens for n in lens], page, kv_heads, dim, "NHD", "single", "bf16", num_pages)
    metas, first = [], 0
    for lens in level_lens:
        end = first + len(lens)
        a, b = int(cache.indptr[first]), int(cache.indptr[end])
        metas.append((cache.indptr[first:end + 1] - a, cache.indices[a:b], cache.last[first:end]))
        first = end
    return cache, metas


def cascade_reference(q, qo, bounds, level_lens, cache, causal):
    """Each request against the concatenation of its groups' keys, top level first: a causal mask
    aligned to the end of that concatenation lets every query see all upper levels."""
    tok, out = [0] + list(itertools_accumulate(qo)), []
    offsets = [0] + list(itertools_accumulate(len(lens) for lens in level_lens))
    for r in range(len(qo)):
        kv = [cache.get(offsets[i] + g, level_lens[i][g]) for i, g in
              enumerate(bisect.bisect_right(level, r) - 1 for level in bounds)]
        out.append(attention(q[tok[r]:tok[r + 1]], torch.cat([k for k, _ in kv]), torch.cat([v for _, v in kv]),
                             causal=causal)[0])
    return torch.cat(out)


def multilevel_case(levels, causal, append):
    kv_heads, group, dim, page = random.choice([1, 2, 4]), random.choice([1, 4, 8]), 128, random.choice([1, 16])
    heads, batch = kv_heads * group, random.randint(2, 7)
    qo = [random.randint(1, 8) if append else 1 for _ in range(batch)]
    bounds = cascade_bounds(batch, levels)
    level_lens = cascade_lens(bounds, qo)
    cache, metas = level_cache(level_lens, page, kv_heads, dim)
    tok = [0] + list(itertools_accumulate(qo))
    wrapper = flashinfer.MultiLevelCascadeAttentionWrapper(levels, WORKSPACE, "NHD")
    wrapper.plan([torch.tensor([tok[b] for b in level], dtype=torch.int32) for level in bounds],
                 *(list(m) for m in zip(*metas)), heads, kv_heads, dim, page, causal=causal, q_data_type=torch.bfloat16)
    q = torch.randn(sum(qo), heads, dim, device=DEV).to(torch.bfloat16)
    out = wrapper.run(q, cache.cache)
    torch.cuda.synchronize()
    groups = "/".join(str(len(level) - 1) for level in bounds)
    check(f"cascade {levels} levels [groups {groups} page {page} group {group} qo {sum(qo)} "
          f"{'causal' if causal else 'non-causal'}] o", out, cascade_reference(q, qo, bounds, level_lens, cache,
                                                                               causal), 1e-2)


def multilevel_graph():
    """CUDA-graph mode: each level's own buffers; one capture, replays after plans with new KV."""
    levels, batch, kv_heads, group, dim, page = 3, 5, 2, 4, 128, 16
    heads, qo = kv_heads * group, [random.randint(1, 4) for _ in range(batch)]
    bounds = cascade_bounds(batch, levels)
    tok = [0] + list(itertools_accumulate(qo))
    sizes = [len(level) - 1 for level in bounds]
    empty = functools.partial(torch.empty, dtype=torch.int32, device=DEV)
    bufs = dict(qo_indptr_buf_arr=[empty(n + 1) for n in sizes], paged_kv_indptr_buf_arr=[empty(n + 1) for n in sizes],
                paged_kv_indices_buf_arr=[empty(1024) for _ in sizes],
                paged_kv_last_page_len_buf_arr=[empty(n) for n in sizes])
    wrapper = flashinfer.MultiLevelCascadeAttentionWrapper(levels, WORKSPACE, "NHD", True, **bufs)
    q = torch.empty(sum(qo), heads, dim, dtype=torch.bfloat16, device=DEV)
    graph = pool = out = None
    for step in range(3):
        level_lens = cascade_lens(bounds, qo)
        cache, metas = level_cache(level_lens, page, kv_heads, dim, num_pages=1024)
        pool = cache.cache if step == 0 else pool_again(pool, cache)
        wrapper.plan([torch.tensor([tok[b] for b in level], dtype=torch.int32) for level in bounds],
                     *(list(m) for m in zip(*metas)), heads, kv_heads, dim, page, causal=True,
                     q_data_type=torch.bfloat16)
        q.copy_(torch.randn(q.shape, device=DEV))
        if graph is None:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                wrapper.run(q, pool)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                out = wrapper.run(q, pool)
        out.fill_(NAN)
        graph.replay()
        torch.cuda.synchronize()
        check(f"cascade cuda graph replay {step} [groups {'/'.join(map(str, sizes))}] o", out,
              cascade_reference(q, qo, bounds, level_lens, cache, True), 1e-2)


def multilevel_cases():
    for levels in (1, 2, 3):
        for causal, append in ((False, False), (True, True), (False, True)):
            guarded(f"cascade {levels} levels", lambda: multilevel_case(levels, causal, append))


def shared_prefix_case(stage, layout, dim):
    """The older cascade wrappers (float16, their plan's default): a dense shared prefix and paged
    own keys; two layers' prefixes on one plan, and in append both masks."""
    kv_heads, group, page = random.choice([1, 2, 4]), random.choice([1, 4]), random.choice([1, 16])
    heads, batch, prefix = kv_heads * group, random.randint(2, 9), random.randint(1, 700)
    qo = [1] * batch if stage == "decode" else [random.randint(1, 16) for _ in range(batch)]
    lens = [random.randint(m, 300) for m in qo]
    cache = Paged(lens, page, kv_heads, dim, layout, "single", "f16")
    q = torch.randn(sum(qo), heads, dim, device=DEV).to(torch.float16)
    tok = [0] + list(itertools_accumulate(qo))
    if stage == "decode":
        wrapper = flashinfer.BatchDecodeWithSharedPrefixPagedKVCacheWrapper(WORKSPACE, layout)
        wrapper.begin_forward(cache.indptr, cache.indices, cache.last, heads, kv_heads, dim, page)
    else:
        wrapper = flashinfer.BatchPrefillWithSharedPrefixPagedKVCacheWrapper(WORKSPACE, layout)
        wrapper.begin_forward(indptr_of(qo), cache.indptr, cache.indices, cache.last, heads, kv_heads, dim, page)
    for layer, causal in enumerate([False, False] + ([True] if stage == "append" else [])):
        pk, pv = (torch.randn(prefix, kv_heads, dim, device=DEV).to(torch.float16) for _ in range(2))
        shared = (pk, pv) if layout == "NHD" else (pk.transpose(0, 1).contiguous(), pv.transpose(0, 1).contiguous())
        kw = dict(causal=causal) if stage == "append" else {}
        out = wrapper.forward(q, *shared, cache.cache, **kw)
        ref = torch.cat([attention(q[tok[r]:tok[r + 1]], torch.cat([pk, cache.get(r, n)[0]]),
                                   torch.cat([pv, cache.get(r, n)[1]]), causal=causal)[0] for r, n in enumerate(lens)])
        torch.cuda.synchronize()
        check(f"shared-prefix {stage} layer {layer} [{layout} hd{dim} page {page} prefix {prefix} qo {sum(qo)} "
              f"{'causal' if causal else 'non-causal'}] o", out, ref, 1e-2)


def shared_prefix_cases():
    for stage, layout, dim in (("decode", "NHD", 128), ("decode", "HND", 64), ("append", "NHD", 128),
                               ("append", "HND", 256)):
        guarded(f"shared-prefix {stage}", lambda: shared_prefix_case(stage, layout, dim))


def fast_decode_plan_case(page):
    """fast_decode_plan gives plan()'s bytes: on plain wrappers, and on CUDA-graph wrappers whose
    buffers the engine fills on the GPU (one capture, replays after fast plans)."""
    batch, kv_heads, group, dim = 6, 2, 4, 128
    heads = kv_heads * group
    q = torch.randn(batch, heads, dim, device=DEV).to(torch.bfloat16)
    lens = [random.randint(1, 2000) for _ in range(batch)]
    cache = Paged(lens, page, kv_heads, dim, "NHD", "single", "bf16")
    ref = torch.cat([attention(q[r:r + 1], *cache.get(r, n))[0] for r, n in enumerate(lens)])
    args = (heads, kv_heads, dim, page)
    planned = flashinfer.BatchDecodeWithPagedKVCacheWrapper(WORKSPACE, "NHD")
    planned.plan(cache.indptr, cache.indices, cache.last, *args, q_data_type=torch.bfloat16)
    want = planned.run(q, cache.cache)
    fast = flashinfer.BatchDecodeWithPagedKVCacheWrapper(WORKSPACE, "NHD")
    fast.plan = functools.partial(flashinfer.fast_decode_plan, fast)
    fast.plan(cache.indptr, cache.indices, cache.last, *args, q_data_type=torch.bfloat16,
              global_override_indptr_cpu=cache.indptr.cpu())
    got = fast.run(q, cache.cache)
    torch.cuda.synchronize()
    check_equal(f"fast_decode_plan page {page} [batch {batch} max_kv {max(lens)}] = plan()", got.view(torch.uint8),
                want.view(torch.uint8))
    check(f"fast_decode_plan page {page} o", got, ref, 1e-2)

    empty = functools.partial(torch.empty, dtype=torch.int32, device=DEV)
    num_pages = batch * math.ceil(2000 / page) + 8
    graph_bufs = [(empty(batch + 1), empty(num_pages), empty(batch)) for _ in range(2)]
    planned, fast = (flashinfer.CUDAGraphBatchDecodeWithPagedKVCacheWrapper(WORKSPACE, *b) for b in graph_bufs)
    fast.begin_forward = functools.partial(flashinfer.decode.fast_decode_plan, fast)
    graph = pool = out = None
    for step in range(3):
        lens = [random.randint(1, 2000) for _ in range(batch)]
        cache = Paged(lens, page, kv_heads, dim, "NHD", "single", "bf16", num_pages=num_pages)
        pool = cache.cache if step == 0 else pool_again(pool, cache)
        indptr, indices, last = graph_bufs[1]
        indptr.copy_(cache.indptr), indices[:len(cache.indices)].copy_(cache.indices), last.copy_(cache.last)
        fast.begin_forward(indptr, indices[:len(cache.indices)], last, *args, data_type=torch.bfloat16,
                           global_override_indptr_cpu=cache.indptr.cpu())
        planned.plan(cache.indptr, cache.indices, cache.last, *args, q_data_type=torch.bfloat16)
        if graph is None:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                fast.run(q, pool)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                out = fast.run(q, pool)
        out.fill_(NAN)
        graph.replay()
        want = planned.run(q, pool)
        torch.cuda.synchronize()
        label = f"fast_decode_plan CUDA-graph wrapper page {page} replay {step} [max_kv {max(lens)}]"
        check_equal(label + " = plan()", out.view(torch.uint8), want.view(torch.uint8))
        check(label + " o", out, torch.cat([attention(q[r:r + 1], *cache.get(r, n))[0] for r, n in enumerate(lens)]),
              1e-2)


def fast_decode_plan_cases():
    for page in (1, 16):
        guarded(f"fast_decode_plan page {page}", lambda: fast_decode_plan_case(page))


def mla_data(q_len, page, heads, lens, dtype, latent_view=False, pages_at_least=0):
    """A paged latent cache holding requests of `lens` keys (a random permutation of pages, a few
    spare ones), and queries: ckv and kpe as views of one [pages, 576] cache when latent_view."""
    pages = [(n + page - 1) // page for n in lens]
    total = max(sum(pages) + 3, pages_at_least)
    if latent_view:
        cache = (torch.randn(total, page, 576, device=DEV) * 0.5).to(DTYPES[dtype])
        ckv, kpe = cache[..., :512], cache[..., 512:]
    else:
        ckv = (torch.randn(total, page, 512, device=DEV) * 0.5).to(DTYPES[dtype])
        kpe = (torch.randn(total, page, 64, device=DEV) * 0.5).to(DTYPES[dtype])
    return dict(ckv=ckv, kpe=kpe, lens=lens, indices=torch.randperm(total, device=DEV)[:sum(pages)].to(torch.int32),
                kv_indptr=torch.tensor(indptr_of(pages), dtype=torch.int32),
                qo_indptr=torch.tensor(indptr_of([q_len] * len(lens)), dtype=torch.int32),
                q_nope=torch.randn(len(lens) * q_len, heads, 512, device=DEV).to(DTYPES[dtype]),
                q_pe=torch.randn(len(lens) * q_len, heads, 64, device=DEV).to(DTYPES[dtype]))


MLA_SCALE = 1 / math.sqrt(192)


def mla_reference(d, q_len):
    """float64 (o, lse base 2) of absorbed MLA over mla_data: scores ckv . q_nope + kpe . q_pe,
    values ckv, causal among a request's q_len tokens."""
    ref_o, ref_lse = [], []
    for b, n in enumerate(d["lens"]):
        rows = d["indices"][d["kv_indptr"][b]:d["kv_indptr"][b + 1]].long()
        k_nope = d["ckv"][rows].reshape(-1, 512)[:n].double() * d.get("ckv_scale", 1.0)
        k_pe = d["kpe"][rows].reshape(-1, 64)[:n].double() * d.get("kpe_scale", 1.0)
        qn = d["q_nope"][b * q_len:(b + 1) * q_len].double()
        qp = d["q_pe"][b * q_len:(b + 1) * q_len].double()
        s = (torch.einsum("thd,nd->thn", qn, k_nope) + torch.einsum("thd,nd->thn", qp, k_pe)) * MLA_SCALE
        keys = torch.arange(n, device=DEV)
        for t in range(q_len):  # token t sees keys up to n - q_len + t
            s[t, :, keys > n - q_len + t] = -math.inf
        ref_lse.append(torch.logsumexp(s, -1) / LN2)
        ref_o.append(torch.einsum("thn,nd->thd", torch.softmax(s, -1), k_nope))
    return torch.cat(ref_o), torch.cat(ref_lse)


def mla_quantised(d):
    """mla_data's cache quantised to e4m3 with per-tensor scales (amax / 448), as engines store
    DeepSeek's latent cache; the reference reads the dequantised values."""
    out = dict(d)
    for name in ("ckv", "kpe"):
        scale = d[name].float().abs().amax().item() / 448
        out[name] = (d[name].float() / scale).to(torch.float8_e4m3fn)
        out[name + "_scale"] = scale
    return out


def mla_case(q_len, page, heads, batch, dtype, latent_view, fp8=False):
    """BatchMLAPagedAttentionWrapper (absorbed MLA) against a float64 reference; fp8: over an
    e4m3 cache with per-tensor scales."""
    d = mla_data(q_len, page, heads, [random.randint(q_len, 3000) for _ in range(batch)], dtype, latent_view)
    if fp8:
        d = mla_quantised(d)
    wrapper = flashinfer.BatchMLAPagedAttentionWrapper(WORKSPACE)
    wrapper.plan(d["qo_indptr"], d["kv_indptr"], d["indices"], torch.tensor(d["lens"], dtype=torch.int32), heads,
                 512, 64, page, True, MLA_SCALE, DTYPES[dtype], torch.float8_e4m3fn if fp8 else DTYPES[dtype])
    scales = dict(ckv_scale=d["ckv_scale"], kpe_scale=d["kpe_scale"]) if fp8 else {}
    o, lse = wrapper.run(d["q_nope"], d["q_pe"], d["ckv"], d["kpe"], return_lse=True, **scales)
    ref_o, ref_lse = mla_reference(d, q_len)
    torch.cuda.synchronize()
    label = (f"MLA {dtype} {'e4m3 cache ' if fp8 else ''}heads {heads} q_len {q_len} page {page} batch {batch} "
             f"max_kv {max(d['lens'])}{' (views of one latent cache)' if latent_view else ''}")
    check(label + " o", o, ref_o, 1e-2)
    check(label + " lse", lse, ref_lse, 1e-3)


def mla_graph_case(q_len, page, heads):
    """The MLA wrapper in CUDA-graph mode: FlashInfer's four metadata buffers, one run captured
    after a plan of the graph's batch (an engine's padded batch) and replayed after later plans
    of up to that many requests, their data copied into the captured tensors."""
    max_batch, longest = 16, 2500
    max_pages = max_batch * ((longest + page - 1) // page) + 3
    bufs = dict(qo_indptr=torch.zeros(max_batch + 1, dtype=torch.int32, device=DEV),
                kv_indptr=torch.zeros(max_batch + 1, dtype=torch.int32, device=DEV),
                kv_indices=torch.zeros(max_pages, dtype=torch.int32, device=DEV),
                kv_len_arr=torch.zeros(max_batch, dtype=torch.int32, device=DEV))
    wrapper = flashinfer.BatchMLAPagedAttentionWrapper(WORKSPACE, True, **bufs)
    static = dict(q_nope=torch.zeros(max_batch * q_len, heads, 512, dtype=torch.bfloat16, device=DEV),
                  q_pe=torch.zeros(max_batch * q_len, heads, 64, dtype=torch.bfloat16, device=DEV),
                  ckv=torch.zeros(max_pages, page, 512, dtype=torch.bfloat16, device=DEV),
                  kpe=torch.zeros(max_pages, page, 64, dtype=torch.bfloat16, device=DEV))
    graph, outputs = None, None
    for step, batch in enumerate((max_batch, 4, max_batch, 2, 9)):
        d = mla_data(q_len, page, heads, [random.randint(q_len, longest) for _ in range(batch)], "bf16")
        for name in ("ckv", "kpe"):
            static[name][:d[name].shape[0]].copy_(d[name])
        tokens = batch * q_len
        for name in ("q_nope", "q_pe"):
            static[name][:tokens].copy_(d[name])
        wrapper.plan(d["qo_indptr"], d["kv_indptr"], d["indices"], torch.tensor(d["lens"], dtype=torch.int32), heads,
                     512, 64, page, True, MLA_SCALE, torch.bfloat16, torch.bfloat16)
        if graph is None:
            args = (static["q_nope"], static["q_pe"], static["ckv"], static["kpe"])
            wrapper.run(*args, return_lse=True)  # warm up outside the capture
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                outputs = wrapper.run(*args, return_lse=True)
        graph.replay()
        ref_o, ref_lse = mla_reference(d, q_len)
        torch.cuda.synchronize()
        label = f"MLA CUDA graph replay {step} [heads {heads} q_len {q_len} page {page} batch {batch}]"
        check(label + " o", outputs[0][:tokens], ref_o, 1e-2)
        check(label + " lse", outputs[1][:tokens], ref_lse, 1e-3)


def mla_cases():
    guarded("MLA decode", lambda: mla_case(1, 64, 16, random.randint(1, 40), "bf16", False))
    guarded("MLA decode f16 page 1", lambda: mla_case(1, 1, 128, random.randint(1, 8), "f16", True))
    guarded("MLA MTP", lambda: mla_case(random.choice([2, 3, 4]), 16, random.choice([16, 64, 128]),
                                        random.randint(1, 20), "bf16", False))
    guarded("MLA decode e4m3 cache", lambda: mla_case(random.choice([1, 2]), random.choice([1, 16, 64]),
                                                     random.choice([16, 128]), random.randint(1, 30), "bf16", False, True))
    guarded("MLA CUDA graph", lambda: mla_graph_case(random.choice([1, 2]), random.choice([1, 64]),
                                                     random.choice([16, 128])))


def mla_prefill_case(kind, dtype, causal):
    """MLA models' prefill (DeepSeek-V3, Kimi K2): head_dim_qk 192, head_dim_vo 128, as engines run
    it through FlashInfer's prefill wrappers. Ragged k and v are token-strided slices of one
    projection; paged K and V are pools of their own widths."""
    heads, batch = random.choice([1, 4, 16]), random.randint(1, 5)
    qo, kv = prefill_lengths(batch, causal)
    qk, vo = 192, 128
    q = torch.randn(sum(qo), heads, qk, device=DEV).to(DTYPES[dtype])
    if kind == "ragged":
        proj = torch.randn(sum(kv), heads * (qk + vo), device=DEV).to(DTYPES[dtype])
        k, v = proj[:, :heads * qk].view(-1, heads, qk), proj[:, heads * qk:].view(-1, heads, vo)
        wrapper = flashinfer.BatchPrefillWithRaggedKVCacheWrapper(WORKSPACE, "NHD")
        wrapper.plan(indptr_of(qo), indptr_of(kv), heads, heads, qk, head_dim_vo=vo, causal=causal,
                     q_data_type=DTYPES[dtype])
        o, lse = wrapper.run(q, k, v, return_lse=True)
        starts = [0] + list(itertools_accumulate(kv))
        kv_get = lambda r: (k[starts[r]:starts[r + 1]], v[starts[r]:starts[r + 1]])  # noqa: E731
    else:
        page = random.choice([1, 16, 64])
        keys, values = Paged(kv, page, heads, qk, "NHD", "pair", dtype), Paged(kv, page, heads, vo, "NHD", "pair", dtype)
        values.indices, values.indptr, values.last = keys.indices, keys.indptr, keys.last  # one page table
        values.k = torch.full((keys.k.shape[0], page, heads, vo), NAN, device=DEV).to(DTYPES[dtype])
        for r, n in enumerate(kv):
            pid, slot = keys.slots(r, torch.arange(n, device=DEV))
            values.k[pid, slot] = values.values[r]
        wrapper = flashinfer.BatchPrefillWithPagedKVCacheWrapper(WORKSPACE, "NHD")
        wrapper.plan(indptr_of(qo), keys.indptr, keys.indices, keys.last, heads, heads, qk, page, head_dim_vo=vo,
                     causal=causal, q_data_type=DTYPES[dtype])
        o, lse = wrapper.run(q, (keys.k, values.k), return_lse=True)
        kv_get = lambda r: (keys.keys[r], values.values[r])  # noqa: E731
    ref_o, ref_lse = reference_prefill(q, qo, kv_get, causal=causal)
    label = f"MLA prefill {kind} [{dtype} 192/128 heads {heads} {'causal' if causal else 'non-causal'} qo {sum(qo)}]"
    torch.cuda.synchronize()
    assert o.shape == (sum(qo), heads, vo), f"out is {tuple(o.shape)}"
    check(label + " o", o, ref_o, 1e-2)
    check(label + " lse", lse, ref_lse, 1e-3)


def mla_prefill_cases():
    for kind in ("ragged", "paged"):
        for dtype, causal in (("bf16", True), ("f16", False)):
            guarded(f"MLA prefill {kind} {dtype}", lambda: mla_prefill_case(kind, dtype, causal))


def main():
    start = time.time()
    for section in (decode_cases, decode_graph, paged_prefill_cases, paged_prefill_graph, ragged_cases, merge_cases,
                    merge_states_cases, cascade_case, page_cases, multilevel_cases, multilevel_graph, shared_prefix_cases,
                    fast_decode_plan_cases, mla_cases, mla_prefill_cases):
        guarded(section.__name__, section)
    print(f"{len(failures)} failures; {time.time() - start:.1f} s; seed {SEED}")
    if failures:
        print("failed: " + ", ".join(failures))
        sys.exit(1)


if __name__ == "__main__":
    main()
