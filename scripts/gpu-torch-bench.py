#!/usr/bin/env python3
"""gpu-torch-bench.py [--quick] - the baseline half of scripts/gpu-check.sh: the work kiln-bench
measures, done through PyTorch on the same NVIDIA GPU, printed as one JSON document whose result
names match kiln-bench's ("add f32 16 Mi", "sgemm 1024", "h2d 256 MiB") so that the report can
put the two side by side.

Each figure is the median of several timed runs after a warm-up, timed with CUDA events around
the GPU work (host<->device copies: wall clock around a synchronised copy, as kiln-bench does).
SGEMM is plain fp32 (TF32 off), as CLBlast and kiln's built-in kernel compute.
"""
import json
import statistics
import sys
import time

import torch


def median_ms(fn, reps):
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def wall_ms(fn, reps):
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main():
    quick = '--quick' in sys.argv[1:]
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device('cuda:0')
    results = []

    def add(name, unit, value):
        results.append({'name': name, 'unit': unit, 'torch': value})

    for mi in ([1] if quick else [16, 256]):
        n = mi << 20
        a = torch.rand(n, device=dev)
        b = torch.rand(n, device=dev)
        out = torch.empty_like(a)
        ms = median_ms(lambda: torch.add(a, b, out=out), 20)
        add(f'add f32 {mi} Mi', 'GB/s', 3 * n * 4 / (ms * 1e-3) * 1e-9)
        del a, b, out

    for n in ([256, 512] if quick else [1024, 2048, 4096, 8192]):
        a = torch.rand(n, n, device=dev)
        b = torch.rand(n, n, device=dev)
        c = torch.empty(n, n, device=dev)
        ms = median_ms(lambda: torch.matmul(a, b, out=c), 5 if n >= 4096 else 10)
        add(f'sgemm {n}', 'GFLOP/s', 2.0 * n ** 3 / (ms * 1e-3) * 1e-9)
        del a, b, c

    size = (1 << 20) if quick else (256 << 20)
    label = '1 MiB' if quick else '256 MiB'
    n = size // 4
    for pinned in (False, True):
        host = torch.empty(n, dtype=torch.float32, pin_memory=pinned)
        host.uniform_()
        gpu = torch.empty(n, dtype=torch.float32, device=dev)
        suffix = ' pinned' if pinned else ''
        ms = wall_ms(lambda: gpu.copy_(host, non_blocking=pinned), 10)
        add(f'h2d {label}{suffix}', 'GB/s', size / (ms * 1e-3) * 1e-9)
        ms = wall_ms(lambda: host.copy_(gpu, non_blocking=pinned), 10)
        add(f'd2h {label}{suffix}', 'GB/s', size / (ms * 1e-3) * 1e-9)
        del host, gpu

    props = torch.cuda.get_device_properties(0)
    json.dump({'torch_version': torch.__version__, 'cuda': torch.version.cuda,
               'device': props.name, 'multiprocessors': props.multi_processor_count,
               'memory_bytes': props.total_memory, 'results': results}, sys.stdout, indent=1)
    print()


if __name__ == '__main__':
    main()
