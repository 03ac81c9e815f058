"""CUDA-event timing shared by the PyTorch peer scripts of bench/run.sh."""
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
