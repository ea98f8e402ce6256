#!/usr/bin/env python3
"""PyTorch rows for kiln-bench (run by tools/bench/*.c through torch.c where python3 has torch).

  torch_ref.py reduce REPEATS ROWS COLS AXIS ...  sum over AXIS (0, 1; 2: softmax over axis 1)
                                                  of [ROWS, COLS] f32, at 1 and 2 threads:
                                                  "reduce CASE THREADS 0 <median GB/s>"
  torch_ref.py train REPEATS STEPS BATCH HIDDEN ...  the example MLP's step (16 features, Adam):
                                                  one line "train BATCH HIDDEN 0 <median ms>" per size
  torch_ref.py classifier REPEATS STEPS           examples/classify.c's step (2-64-3, CE, Adam,
                                                  batch 64): "classifier 64 64 0 <median ms>"
  torch_ref.py fusion REPEATS N OPS               OPS dependent ops (alternately * 1.0001 and
                                                  + 0.001) on N f32, read back: one line
                                                  "fusion N OPS 0 <median us per op>", then
                                                  the same in numpy: "fusion N OPS 1 <us>"
  torch_ref.py conv REPEATS N C H W O K STRIDE PAD GROUPS ...  conv2d f32 per case (the
                                                  inputs kiln-bench uses), at 1 and 2 threads:
                                                  "conv CASE THREADS 0 <median ms>" (forward) and
                                                  "conv CASE THREADS 1 <median ms>" (forward, sum,
                                                  backward to the weight)
  torch_ref.py cnnstep REPEATS STEPS BATCH       a training step of examples/cnn_digits's model
                                                  (Adam, cross-entropy) on a fixed batch, at 1
                                                  and 2 threads: "cnnstep BATCH THREADS 2 <ms>"
  torch_ref.py rnn REPEATS T B H KIND ...         a one-layer nn.LSTM (KIND 0) or nn.GRU (KIND 1)
                                                  with input size = hidden size H over x [T, B, H]
                                                  f32 (the x kiln-bench uses), at 1 and 2 threads:
                                                  "rnn CASE THREADS 0 <median ms>" (forward, under
                                                  torch.no_grad) and "rnn CASE THREADS 1 <median
                                                  ms>" (forward, y.sum().backward() to every
                                                  parameter)
  torch_ref.py safetensors REPEATS PATH          safetensors.torch.load_file(PATH) with one byte
                                                  of every page read: "safetensors 0 0 0 <median s>"
  torch_ref.py serve                              a worker for kiln-bench's interleaved rows: after
                                                  the first line, reads requests "THREADS WHAT
                                                  REPEATS ARGS..." (WHAT and its arguments as
                                                  above) from stdin, runs each with torch at
                                                  THREADS threads, answers with its lines, then
                                                  "end"
First line: "torch <version> <threads>". Exit status 3 without torch (the caller notes a skip).
"""
import sys
import time

try:
    import numpy
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
    for idx, (rows, cols, axis) in enumerate(cases):
        x = torch.arange(rows * cols, dtype=torch.float32).remainder(1000).mul(0.01).sub(5.0)
        x = x.reshape(rows, cols)
        if axis == 2:
            out = torch.empty(rows, cols, dtype=torch.float32)
            def once():
                torch.softmax(x, dim=1, out=out)
        else:
            out = torch.empty(cols if axis == 0 else rows, dtype=torch.float32)
            def once():
                torch.sum(x, dim=axis, out=out)
        iters = max(4, (16 << 20) // (rows * cols))  # about 64 MiB read per sample
        for threads in (1, 2):
            torch.set_num_threads(threads)
            once()
            rates = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                for _ in range(iters):
                    once()
                rates.append(rows * cols * 4 * iters / (time.perf_counter() - t0) * 1e-9)
            print(f"reduce {idx} {threads} 0 {median(rates):.6g}", flush=True)


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


def bench_classifier(repeats, steps):
    """examples/classify.c's step: Linear(2, 64), ReLU, Linear(64, 3), cross-entropy, Adam
    (lr 0.01), batch 64 of 3000 points, the loss read each step."""
    g = torch.Generator().manual_seed(1)
    n, batch = 3000, 64
    x_all = torch.rand(n, 2, generator=g) * 2 - 1
    y_all = torch.randint(0, 3, (n,), generator=g)
    torch.manual_seed(42)
    model = torch.nn.Sequential(torch.nn.Linear(2, 64), torch.nn.ReLU(), torch.nn.Linear(64, 3))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    batches = n // batch

    def step(b):
        i = b % batches * batch
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x_all[i:i + batch]), y_all[i:i + batch])
        loss.backward()
        opt.step()
        return loss.item()

    b = 0
    for _ in range(2):  # warm-up, as kiln-bench does
        step(b)
        b += 1
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(steps):
            step(b)
            b += 1
        times.append((time.perf_counter() - t0) / steps * 1e3)
    print(f"classifier {batch} 64 0 {median(times):.6g}", flush=True)


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
    # numpy, the host library a C programmer's small-array code is compared with (issue 27)
    xn = x.numpy()
    add, mul = numpy.float32(0.001), numpy.float32(1.0001)
    times = []
    for r in range(repeats + 1):
        t0 = time.perf_counter()
        y = xn
        for op in range(ops):
            y = y + add if op % 2 else y * mul
        if r:
            times.append((time.perf_counter() - t0) * 1e6 / ops)
    print(f"fusion {n} {ops} 1 {median(times):.6g}", flush=True)


def timed(repeats, fn, inner=1):
    fn()  # warm-up, as kiln-bench does
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        times.append((time.perf_counter() - t0) / inner * 1e3)
    return median(times)


def bench_conv(repeats, cases):
    for idx, (n, c, h, w, o, k, stride, pad, groups) in enumerate(cases):
        i = torch.arange(n * c * h * w, dtype=torch.int64)
        x = ((i * 7919).remainder(1000).float() / 500.0 - 1.0).reshape(n, c, h, w)
        j = torch.arange(o * (c // groups) * k * k, dtype=torch.int64)
        wt = ((j * 104729).remainder(1000).float() / 5000.0 - 0.1).reshape(o, c // groups, k, k)
        b = torch.zeros(o)
        wg = wt.clone().requires_grad_()
        for threads in (1, 2):
            torch.set_num_threads(threads)
            with torch.no_grad():
                fwd = timed(repeats, lambda: torch.nn.functional.conv2d(
                    x, wt, b, stride=stride, padding=pad, groups=groups))

            def fwd_bwd():
                wg.grad = None
                torch.nn.functional.conv2d(x, wg, b, stride=stride, padding=pad,
                                           groups=groups).sum().backward()
            both = timed(repeats, fwd_bwd)
            print(f"conv {idx} {threads} 0 {fwd:.6g}", flush=True)
            print(f"conv {idx} {threads} 1 {both:.6g}", flush=True)


def cnn_digits_model():
    nn = torch.nn
    return nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32),
                         nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(32 * 2 * 2, 10))


def bench_cnnstep(repeats, steps, batch):
    i = torch.arange(batch * 64, dtype=torch.int64)
    x = ((i * 7919).remainder(17).float() / 16.0).reshape(batch, 1, 8, 8)
    y = torch.arange(batch, dtype=torch.int64).remainder(10)
    torch.manual_seed(1)
    model = cnn_digits_model()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        loss.item()
    for threads in (1, 2):
        torch.set_num_threads(threads)
        print(f"cnnstep {batch} {threads} 2 {timed(repeats, step, steps):.6g}", flush=True)


def bench_rnn(repeats, cases):
    for idx, (t, b, h, kind) in enumerate(cases):
        i = torch.arange(t * b * h, dtype=torch.int64)
        x = ((i * 7919).remainder(1000).float() / 500.0 - 1.0).reshape(t, b, h)
        torch.manual_seed(1)
        model = (torch.nn.GRU if kind else torch.nn.LSTM)(h, h)
        for threads in (1, 2):
            torch.set_num_threads(threads)
            with torch.no_grad():
                fwd = timed(repeats, lambda: model(x))

            def fwd_bwd():
                model.zero_grad(set_to_none=True)
                model(x)[0].sum().backward()
            both = timed(repeats, fwd_bwd)
            print(f"rnn {idx} {threads} 0 {fwd:.6g}", flush=True)
            print(f"rnn {idx} {threads} 1 {both:.6g}", flush=True)


def bench_safetensors(repeats, path):
    try:
        from safetensors.torch import load_file
    except ImportError:
        print("no safetensors module", file=sys.stderr)
        return
    times = []
    for r in range(repeats + 1):  # the first is a warm-up, as in kiln-bench
        t0 = time.perf_counter()
        total = 0.0
        for t in load_file(path).values():
            flat = t.reshape(-1).view(torch.uint8)
            total += float(flat[::4096].sum())  # one byte of every page
        if r:
            times.append(time.perf_counter() - t0)
    print(f"safetensors 0 0 0 {median(times):.6g}", flush=True)


def serve():
    print(f"torch {torch.__version__} {torch.get_num_threads()}", flush=True)
    for line in sys.stdin:
        parts = line.split()
        if len(parts) >= 3:
            torch.set_num_threads(int(parts[0]))
            run(parts[1], int(parts[2]), [int(a) for a in parts[3:]])
        print("end", flush=True)
    return 0


def main(argv):
    if len(argv) == 2 and argv[1] == "serve":
        return serve()
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    if argv[1] == "safetensors" and len(argv) == 4:
        print(f"torch {torch.__version__} {torch.get_num_threads()}", flush=True)
        bench_safetensors(int(argv[2]), argv[3])
        return 0
    print(f"torch {torch.__version__} {torch.get_num_threads()}", flush=True)
    return run(argv[1], int(argv[2]), [int(a) for a in argv[3:]])


def run(what, repeats, rest):
    if what == "reduce" and len(rest) % 3 == 0 and all(a in (0, 1, 2) for a in rest[2::3]):
        bench_reduce(repeats, [tuple(rest[k:k + 3]) for k in range(0, len(rest), 3)])
    elif what == "train" and len(rest) >= 1 and (len(rest) - 1) % 2 == 0:
        bench_train(repeats, rest[0], [tuple(rest[k:k + 2]) for k in range(1, len(rest), 2)])
    elif what == "conv" and len(rest) % 9 == 0:
        bench_conv(repeats, [tuple(rest[k:k + 9]) for k in range(0, len(rest), 9)])
    elif what == "rnn" and len(rest) % 4 == 0 and all(k in (0, 1) for k in rest[3::4]):
        bench_rnn(repeats, [tuple(rest[k:k + 4]) for k in range(0, len(rest), 4)])
    elif what == "cnnstep" and len(rest) == 2:
        bench_cnnstep(repeats, rest[0], rest[1])
    elif what == "fusion" and len(rest) == 2:
        bench_fusion(repeats, rest[0], rest[1])
    elif what == "classifier" and len(rest) == 1:
        bench_classifier(repeats, rest[0])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
