#!/usr/bin/env python3
"""gpu-torch-bench.py [--quick] - the baseline half of scripts/gpu-check.sh: the work kiln-bench
measures, done through PyTorch on the same NVIDIA GPU, with result names that match kiln-bench's
("add f32 16 Mi", "sgemm 1024", "h2d 256 MiB") so that the report can put the two side by side.

Prints one JSON object per line, each as soon as it is measured (a run killed half-way keeps the
rows it printed): first {"torch_version", "cuda", "device", ...}, then one
{"name", "unit", "torch", "timing"} per result. "timing" says how the figure was timed: "device"
(CUDA events around the GPU work: add, sgemm) or "wall" (host clock around a synchronised copy:
h2d, d2h, as kiln-bench times its transfers). Each figure is the median of several timed runs
after a warm-up. SGEMM is plain fp32 (TF32 off), as CLBlast and kiln's built-in kernel compute.
Exits 77, with the reason as its last line, where python3 has no torch or torch sees no CUDA
device (gpu-check.sh reports the step as skipped).
"""
import json
import statistics
import sys
import time

try:
    import torch
except Exception as e:  # noqa: BLE001 - ImportError, or a torch that fails to load its libraries
    print('no PyTorch in %s: %s' % (sys.executable, str(e).splitlines()[0] if str(e) else e))
    sys.exit(77)


def emit(obj):
    print(json.dumps(obj), flush=True)


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
    if not torch.cuda.is_available():
        print('PyTorch %s sees no CUDA device (torch.cuda.is_available() is False)' %
              torch.__version__)
        return 77
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device('cuda:0')
    props = torch.cuda.get_device_properties(0)
    emit({'torch_version': torch.__version__, 'cuda': torch.version.cuda, 'device': props.name,
          'multiprocessors': props.multi_processor_count, 'memory_bytes': props.total_memory})

    def add(name, unit, value, timing):
        emit({'name': name, 'unit': unit, 'torch': value, 'timing': timing})

    # kiln-bench elementwise: 16 Mi and, on GPUs, 256 Mi f32 (--quick: 1 Mi).
    for mi in ([1] if quick else [16, 256]):
        n = mi << 20
        a = torch.rand(n, device=dev)
        b = torch.rand(n, device=dev)
        out = torch.empty_like(a)
        ms = median_ms(lambda: torch.add(a, b, out=out), 20)
        add(f'add f32 {mi} Mi', 'GB/s', 3 * n * 4 / (ms * 1e-3) * 1e-9, 'device')
        del a, b, out

    # kiln-bench matmul on a GPU: n = 1024 ... 8192 (--quick: 256, 512).
    for n in ([256, 512] if quick else [1024, 2048, 4096, 8192]):
        a = torch.rand(n, n, device=dev)
        b = torch.rand(n, n, device=dev)
        c = torch.empty(n, n, device=dev)
        ms = median_ms(lambda: torch.matmul(a, b, out=c), 5 if n >= 4096 else 10)
        add(f'sgemm {n}', 'GFLOP/s', 2.0 * n ** 3 / (ms * 1e-3) * 1e-9, 'device')
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
        add(f'h2d {label}{suffix}', 'GB/s', size / (ms * 1e-3) * 1e-9, 'wall')
        ms = wall_ms(lambda: host.copy_(gpu, non_blocking=pinned), 10)
        add(f'd2h {label}{suffix}', 'GB/s', size / (ms * 1e-3) * 1e-9, 'wall')
        del host, gpu
    return 0


if __name__ == '__main__':
    sys.exit(main())
