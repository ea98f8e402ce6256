#!/usr/bin/env python3
"""test-torch.py HELPER [SPEC] - kiln's CNN modules against PyTorch's own (issue 23), through
checkpoints in both directions, with tests/torch-helper.c on kiln's side:

1. kiln -> PyTorch: the helper's model (trained two forwards, so batch norm's running buffers
   moved; then evaluation mode) saves its kiln_module_state, x and y = model(x). PyTorch's
   nn.Sequential(Conv2d, BatchNorm2d, ReLU, MaxPool2d, Flatten, Linear) loads that state with
   strict=True (every name and shape must be PyTorch's) and must give y from x.
2. PyTorch -> kiln: a PyTorch model trained three forwards saves its state_dict, x and its y;
   the helper loads it into a kiln model of other weights and must give y, and
   num_batches_tracked 3.
3. bf16 (issue 25): f32 values around every bf16 rounding boundary cast by kiln must equal
   PyTorch's .to(torch.bfloat16) bit for bit; every bf16 bit pattern must load and save
   unchanged and widen to f32 as PyTorch's .float() does; kiln's bf16 matmul and sum (f32
   accumulation, one rounding) and linear (the product rounded, then the bias added and rounded)
   within one bf16 ulp of the f32 results rounded so; matmul and sum no further from the f32
   result than PyTorch's own bf16 ops are (PyTorch's CPU bf16 matmul is the less exact; linear,
   rounded twice, can be up to 2 ulps off where PyTorch's rounds once: printed, not asserted).

Safetensors files are read and written here with the standard library and torch alone. Exits 77
(skipped), saying why, where Python has no torch (Debian: apt-get install python3-torch)."""
import json
import os
import struct
import subprocess
import sys
import tempfile

helper = sys.argv[1]
spec = sys.argv[2] if len(sys.argv) > 2 else 'auto'
try:
    import torch
    from torch import nn
except ImportError:
    print('SKIP: no PyTorch in this Python (apt-get install python3-torch)')
    sys.exit(77)

DT = {'F32': torch.float32, 'F64': torch.float64, 'I64': torch.int64, 'BF16': torch.bfloat16}
NAME = {v: k for k, v in DT.items()}


def read(path):
    with open(path, 'rb') as f:
        raw = f.read()
    (n,) = struct.unpack('<Q', raw[:8])
    head = json.loads(raw[8:8 + n])
    out = {}
    for name, e in head.items():
        if name == '__metadata__':
            continue
        a, b = e['data_offsets']
        buf = bytearray(raw[8 + n + a:8 + n + b])
        t = torch.frombuffer(buf, dtype=DT[e['dtype']]) if buf else torch.empty(0, dtype=DT[e['dtype']])
        out[name] = t.reshape(e['shape']).clone()
    return out


def write(path, tensors):
    head, data = {}, b''
    for name, t in tensors.items():
        raw = t.contiguous().view(torch.int16) if t.dtype == torch.bfloat16 else t.contiguous()
        b = raw.numpy().tobytes() if t.numel() else b''  # numpy has no bf16: its bits
        head[name] = {'dtype': NAME[t.dtype], 'shape': list(t.shape),
                      'data_offsets': [len(data), len(data) + len(b)]}
        data += b
    h = json.dumps(head).encode()
    h += b' ' * (-len(h) % 8)
    with open(path, 'wb') as f:
        f.write(struct.pack('<Q', len(h)) + h + data)


def model():
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Flatten(), nn.Linear(16, 3))


def helper_run(*args):
    p = subprocess.run([helper, spec] + list(args), capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        sys.exit(f'FAIL: torch-helper {" ".join(args)}: exit {p.returncode}\n{p.stderr}')


failed = 0
with tempfile.TemporaryDirectory() as tmp:
    # 1. kiln -> PyTorch
    helper_run('save', f'{tmp}/kiln.safetensors')
    got = read(f'{tmp}/kiln.safetensors')
    x, y = got.pop('x'), got.pop('y')
    m = model()
    m.load_state_dict(got, strict=True)  # raises on any name or shape PyTorch does not have
    m.eval()
    with torch.no_grad():
        ty = m(x)
    d = (ty - y).abs().max().item()
    ok = d <= 1e-5 and int(got['1.num_batches_tracked']) == 2
    print(f'{"ok" if ok else "FAIL"}: kiln -> PyTorch: {len(got)} state entries load strictly; '
          f'max |y_torch - y_kiln| = {d:.3g}; num_batches_tracked {int(got["1.num_batches_tracked"])}')
    failed += not ok

    # 2. PyTorch -> kiln
    torch.manual_seed(3)
    m = model()
    for _ in range(3):
        m(torch.randn(2, 1, 4, 4))
    m.eval()
    x = torch.randn(2, 1, 4, 4)
    with torch.no_grad():
        y = m(x)
    state = dict(m.state_dict())
    state['x'] = x
    write(f'{tmp}/torch.safetensors', state)
    helper_run('load', f'{tmp}/torch.safetensors', f'{tmp}/back.safetensors')
    back = read(f'{tmp}/back.safetensors')
    d = (back['y'] - y).abs().max().item()
    ok = d <= 1e-5 and int(back['num_batches_tracked']) == 3
    print(f'{"ok" if ok else "FAIL"}: PyTorch -> kiln: max |y_kiln - y_torch| = {d:.3g}; '
          f'num_batches_tracked {int(back["num_batches_tracked"])}')
    failed += not ok

    # 3. bf16
    torch.manual_seed(11)
    lo = torch.arange(0, 0x7f80, dtype=torch.int32)  # every finite bf16 magnitude
    mids = ((lo << 16) + 0x8000).view(torch.float32)  # the midpoints to the next, exact in f32
    steps = torch.tensor([-2, -1, 0, 1, 2], dtype=torch.int32)
    near = ((mids.view(torch.int32)[:, None] + steps).reshape(-1)).view(torch.float32)
    x = torch.cat([near, -near, torch.tensor([float('inf'), -float('inf'), 0.0, -0.0,
                                              3.4028234663852886e38])])
    h = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(torch.bfloat16)
    a = torch.randn(7, 33).to(torch.bfloat16)
    b = torch.randn(33, 5).to(torch.bfloat16)
    w = torch.randn(4, 33).to(torch.bfloat16)
    bias = torch.randn(4).to(torch.bfloat16)
    write(f'{tmp}/bf16.safetensors', {'x': x, 'h': h, 'a': a, 'b': b, 'w': w, 'bias': bias})
    helper_run('bf16', f'{tmp}/bf16.safetensors', f'{tmp}/bf16-out.safetensors')
    got = read(f'{tmp}/bf16-out.safetensors')
    bits = lambda t: t.contiguous().view(torch.int16)  # noqa: E731
    cast_ok = torch.equal(bits(got['x_bf16']), bits(x.to(torch.bfloat16)))
    keep_ok = torch.equal(bits(got['h']), bits(h))
    wide = h.float()
    widen_ok = torch.equal(got['h_f32'].isnan(), wide.isnan()) and \
        torch.equal(got['h_f32'][~wide.isnan()], wide[~wide.isnan()])
    ulp = lambda t: (t.float().abs().clamp(min=2 ** -126).log2().floor() - 7).exp2()  # noqa: E731
    bf = lambda t: t.to(torch.bfloat16).float()  # noqa: E731
    prod = a.float() @ w.float().T
    err, rounded_ok, no_worse = {}, True, True
    for name, f32, as_kiln, torch_bf16 in (
            ('ab', a.float() @ b.float(), bf(a.float() @ b.float()), a @ b),
            ('lin', prod + bias.float(), bf(bf(prod) + bias.float()),
             torch.nn.functional.linear(a, w, bias)),
            ('sum', a.float().sum(1), bf(a.float().sum(1)), a.sum(1))):
        k = got[name].float()
        # f32 sums in another order may differ in the last f32 bit, which can move a result on
        # a bf16 midpoint by one bf16 ulp
        rounded_ok &= bool(((k - as_kiln).abs() <= ulp(f32)).all())
        ek = ((k - f32).abs() / ulp(f32)).max().item()
        et = ((torch_bf16.float() - f32).abs() / ulp(f32)).max().item()
        err[name] = (ek, et)
        no_worse &= name == 'lin' or ek <= max(et, 1.0)
    ok = cast_ok and keep_ok and widen_ok and rounded_ok and no_worse
    print(f'{"ok" if ok else "FAIL"}: bf16: {x.numel()} f32 values cast bit-identical to '
          f'PyTorch: {cast_ok}; 65536 patterns kept: {keep_ok}, widened as PyTorch: {widen_ok}; '
          f'matmul/linear/sum rounded as stated: {rounded_ok}; largest error in bf16 ulps of the '
          'f32 result, kiln vs PyTorch: ' +
          ', '.join(f'{n} {ek:.2f} vs {et:.2f}' for n, (ek, et) in err.items()))
    failed += not ok
sys.exit(1 if failed else 0)
