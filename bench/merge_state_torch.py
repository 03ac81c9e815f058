"""The PyTorch peer of bench_merge_state: the same merge as composite torch ops, same shapes."""
import torch
from torch_timing import median_us

def merge(va, sa, vb, sb):
    m = torch.maximum(sa, sb)
    wa, wb = torch.exp(sa - m), torch.exp(sb - m)
    total = wa + wb
    v = (va.float() * (wa / total)[..., None] + vb.float() * (wb / total)[..., None]).to(va.dtype)
    return v, m + torch.log(total)


print(f"{'torch composite merge (same shapes)':34} {'MB moved':>10} {'time us':>10} {'GB/s':>10}")
heads, head_dim = 32, 128
for tokens in (512, 4096, 32768):
    rows = tokens * heads
    va, vb = (torch.randn(rows, head_dim, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    sa, sb = (torch.randn(rows, device="cuda") for _ in range(2))
    moved = 3 * rows * head_dim * 2 + 3 * rows * 4
    us = median_us(lambda i: merge(va, sa, vb, sb))
    print(f"{'tokens ' + str(tokens):34} {moved / 1e6:10.1f} {us:10.1f} {moved / us / 1e3:10.0f}")
