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

DT = {'F32': torch.float32, 'F64': torch.float64, 'I64': torch.int64}
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
        b = t.contiguous().numpy().tobytes() if t.numel() else b''
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
sys.exit(1 if failed else 0)
