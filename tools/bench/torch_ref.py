#!/usr/bin/env python3
"""PyTorch rows for kiln-bench (run by tools/bench/reduce.c and train.c where python3 has torch).

  torch_ref.py reduce REPEATS ROWS COLS AXIS ...  sum over AXIS of [ROWS, COLS] f32: one line
                                                  "reduce ROWS COLS AXIS <median GB/s>" per case
  torch_ref.py train REPEATS STEPS BATCH HIDDEN ...  the example MLP's step (16 features, Adam):
                                                  one line "train BATCH HIDDEN 0 <median ms>" per size
  torch_ref.py fusion REPEATS N OPS               OPS dependent ops (alternately * 1.0001 and
                                                  + 0.001) on N f32, read back: one line
                                                  "fusion N OPS 0 <median us per op>"
First line: "torch <version> <threads>". Exit status 3 without torch (the caller notes a skip).
"""
import sys
import time

try:
    import torch
except ImportError:
    print("no torch", file=sys.stderr)
    sys.exit(3)

NFEAT = 16


def median(v):
    v = sorted(v)
    n = len(v)
    return v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])


def bench_reduce(repeats, cases):
    for rows, cols, axis in cases:
        x = torch.arange(rows * cols, dtype=torch.float32).remainder(1000).mul(0.01).sub(5.0)
        x = x.reshape(rows, cols)
        out = torch.empty(cols if axis == 0 else rows, dtype=torch.float32)
        iters = max(4, (16 << 20) // (rows * cols))  # about 64 MiB read per sample
        torch.sum(x, dim=axis, out=out)
        rates = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            for _ in range(iters):
                torch.sum(x, dim=axis, out=out)
            rates.append(rows * cols * 4 * iters / (time.perf_counter() - t0) * 1e-9)
        print(f"reduce {rows} {cols} {axis} {median(rates):.6g}", flush=True)


def bench_train(repeats, steps, sizes):
    for batch, hidden in sizes:
        i = torch.arange(batch * NFEAT, dtype=torch.float64)
        x = ((i * 7919).remainder(1000) / 500.0 - 1.0).float().reshape(batch, NFEAT)
        y = (x[:, :1] * 0.5 + 0.25).contiguous()
        g = torch.Generator().manual_seed(1)
        w1 = (torch.randn(NFEAT, hidden, generator=g) * (2.0 / NFEAT) ** 0.5).requires_grad_()
        b1 = torch.zeros(hidden, requires_grad=True)
        w2 = (torch.randn(hidden, 1, generator=g) * (1.0 / hidden) ** 0.5).requires_grad_()
        b2 = torch.zeros(1, requires_grad=True)
        opt = torch.optim.Adam([w1, b1, w2, b2], lr=1e-3, betas=(0.9, 0.999), eps=1e-8)

        def step():
            opt.zero_grad(set_to_none=True)
            pred = torch.relu(x @ w1 + b1) @ w2 + b2
            loss = torch.nn.functional.mse_loss(pred, y)
            loss.backward()
            opt.step()
            return loss

        for _ in range(2):  # warm-up, as kiln-bench does
            step()
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            for _ in range(steps):
                step()
            times.append((time.perf_counter() - t0) / steps * 1e3)
        print(f"train {batch} {hidden} 0 {median(times):.6g}", flush=True)


def bench_fusion(repeats, n, ops):
    x = torch.arange(n, dtype=torch.float32).remainder(1000).mul(0.001)
    times = []
    for r in range(repeats + 1):  # the first is a warm-up, as in kiln-bench
        t0 = time.perf_counter()
        y = x
        for op in range(ops):
            y = y + 0.001 if op % 2 else y * 1.0001
        y.numpy()
        if r:
            times.append((time.perf_counter() - t0) * 1e6 / ops)
    print(f"fusion {n} {ops} 0 {median(times):.6g}", flush=True)


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    what, repeats, rest = argv[1], int(argv[2]), [int(a) for a in argv[3:]]
    print(f"torch {torch.__version__} {torch.get_num_threads()}", flush=True)
    if what == "reduce" and len(rest) % 3 == 0:
        bench_reduce(repeats, [tuple(rest[k:k + 3]) for k in range(0, len(rest), 3)])
    elif what == "train" and len(rest) >= 1 and (len(rest) - 1) % 2 == 0:
        bench_train(repeats, rest[0], [tuple(rest[k:k + 2]) for k in range(1, len(rest), 2)])
    elif what == "fusion" and len(rest) == 2:
        bench_fusion(repeats, rest[0], rest[1])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
