"""CUDA-event timing shared by the PyTorch peer scripts of bench/run.sh."""
import statistics

import torch


def median_us(fn, warmup=5, iters=50):
    """Median of `iters` event-timed calls of fn(i), after `warmup` untimed ones, in microseconds."""
    for i in range(warmup):
        fn(i)
    times = []
    for i in range(iters):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(); fn(i); stop.record(); stop.synchronize()
        times.append(start.elapsed_time(stop) * 1e3)
    return sorted(times)[len(times) // 2]


def median_s(fn, warmup=5, iters=20):
    """Median seconds of fn() with CUDA events around each call, the calls back to back (no sync
    between them): ../shared/peers/flashinfer_peer.py's method, for rows set beside its numbers."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for i in range(iters):
        starts[i].record()
        fn()
        ends[i].record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends)) / 1e3
