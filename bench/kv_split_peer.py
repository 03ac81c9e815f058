#!/usr/bin/env python3
"""Batch-invariant decode beside FlashInfer's, in one process: the FlashInfer-compatible wrapper
of aotinfer and FlashInfer's own BatchDecodeWithPagedKVCacheWrapper, planned adaptively, with
fixed_split_size=128 pages (2048 tokens, SGLang's deterministic decode) and with
disable_split_kv=True. bf16, 32/8 heads, head_dim 128, page 16; one run() replayed from a CUDA
graph, CUDA events, median of 20 after 5 warm-ups. Run with FlashInfer importable (the peers'
flashinfer_env.sh) and aotinfer on PYTHONPATH; a library that does not import prints n/a."""
import statistics

import torch

PAGE, QH, KH, D = 16, 32, 8, 128
DEV = torch.device("cuda:0")


def median_us(fn):
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()
    torch.cuda.current_stream().wait_stream(stream)
    with torch.cuda.graph(graph):
        fn()
    for _ in range(5):
        graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(20):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        graph.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3)
    return statistics.median(times)


def row(lib, batch, kv_len, mode):
    pages = (kv_len + PAGE - 1) // PAGE
    kv = torch.randn(batch * pages, 2, PAGE, KH, D, dtype=torch.bfloat16, device=DEV)
    indices = torch.randperm(batch * pages, device=DEV).to(torch.int32)
    indptr = torch.arange(batch + 1, dtype=torch.int32, device=DEV) * pages
    last = torch.full((batch,), kv_len - (pages - 1) * PAGE, dtype=torch.int32, device=DEV)
    q = torch.randn(batch, QH, D, dtype=torch.bfloat16, device=DEV)
    out = torch.empty_like(q)
    w = lib.BatchDecodeWithPagedKVCacheWrapper(torch.empty(256 << 20, dtype=torch.uint8, device=DEV), "NHD")
    split = dict(adaptive={}, fixed=dict(fixed_split_size=128), none=dict(disable_split_kv=True))[mode]
    w.plan(indptr, indices, last, QH, KH, D, PAGE, q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16, **split)
    return median_us(lambda: w.run(q, kv, out=out))


def main():
    libs = {}
    try:
        from aotinfer import flashinfer as ours
        libs["aotinfer"] = ours
    except Exception as e:  # noqa: BLE001
        print("aotinfer: n/a", e)
    try:
        import flashinfer as theirs
        libs["FlashInfer " + theirs.__version__] = theirs
    except Exception as e:  # noqa: BLE001
        print("FlashInfer: n/a", e)
    print(f"{'library':<24s} {'batch x kv':>12s} {'adaptive us':>12s} {'fixed 2048 us':>14s} {'none us':>9s}")
    for batch, kv_len in ((1, 1024), (1, 4096), (1, 32768), (16, 4096), (64, 4096)):
        for name, lib in libs.items():
            cells = []
            for mode in ("adaptive", "fixed", "none"):
                try:
                    cells.append(f"{row(lib, batch, kv_len, mode):.1f}")
                except Exception as e:  # noqa: BLE001
                    cells.append("err:" + type(e).__name__)
            print(f"{name:<24s} {f'{batch} x {kv_len}':>12s} {cells[0]:>12s} {cells[1]:>14s} {cells[2]:>9s}")


if __name__ == "__main__":
    main()
