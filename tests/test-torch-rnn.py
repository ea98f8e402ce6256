#!/usr/bin/env python3
"""test-torch-rnn.py HELPER [SPEC] - kiln's recurrent layers against PyTorch's own (issue 24),
with tests/rnn-helper.c on kiln's side, for nn.RNN (tanh, relu), nn.LSTM and nn.GRU in 1 and 2
layers, one and two directions, batch_first both ways, with and without ragged lengths and
initial states:

1. PyTorch -> kiln: PyTorch draws a layer, x, lengths (in no sorted order; run through
   pack_padded_sequence(enforce_sorted=False) and pad_packed_sequence), h0/c0 and the upstream
   gradients gy, ghn, gcn; saves them with its state_dict; kiln loads them into a layer of other
   weights and must give y, h_n, c_n within 1e-5 (relative, f32) and the gradients of x, h0, c0
   and every parameter within 1e-4.
2. kiln -> PyTorch: kiln's layer (its own weights) saves its state_dict with x and y; PyTorch
   loads it with strict=True (every name and shape must be PyTorch's) and must give y.

Exits 77 (skipped), saying why, where Python has no torch (Debian: apt-get install
python3-torch)."""
import json
import struct
import subprocess
import sys
import tempfile

helper = sys.argv[1]
spec = sys.argv[2] if len(sys.argv) > 2 else 'auto'
try:
    import torch
    from torch import nn
    from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
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
        out[name] = torch.frombuffer(buf, dtype=DT[e['dtype']]).reshape(e['shape']).clone()
    return out


def write(path, tensors):
    head, data = {}, b''
    for name, t in tensors.items():
        b = t.detach().contiguous().numpy().tobytes()
        head[name] = {'dtype': NAME[t.dtype], 'shape': list(t.shape),
                      'data_offsets': [len(data), len(data) + len(b)]}
        data += b
    h = json.dumps(head).encode()
    h += b' ' * (-len(h) % 8)
    with open(path, 'wb') as f:
        f.write(struct.pack('<Q', len(h)) + h + data)


def make(kind, inp, hid, layers, bidir, bf):
    args = dict(num_layers=layers, bidirectional=bool(bidir), batch_first=bool(bf))
    if kind == 'lstm':
        return nn.LSTM(inp, hid, **args)
    if kind == 'gru':
        return nn.GRU(inp, hid, **args)
    return nn.RNN(inp, hid, nonlinearity=kind[4:], **args)


def run_torch(m, kind, x, lengths, h0, c0, bf):
    T = x.shape[1 if bf else 0]
    state = None if h0 is None else ((h0, c0) if kind == 'lstm' else h0)
    if lengths is not None:
        packed = pack_padded_sequence(x, lengths, batch_first=bool(bf), enforce_sorted=False)
        out, st = m(packed, state)
        y, _ = pad_packed_sequence(out, batch_first=bool(bf), total_length=T)
    else:
        y, st = m(x, state)
    hn, cn = st if kind == 'lstm' else (st, None)
    return y, hn, cn


def rel(a, b):
    return ((a - b).abs() / b.abs().clamp(min=1)).max().item()


def helper_run(cfg, *args):
    p = subprocess.run([helper, spec] + [str(c) for c in cfg] + list(args), capture_output=True,
                       text=True, timeout=300)
    if p.returncode != 0:
        sys.exit(f'FAIL: rnn-helper {cfg} {" ".join(args)}: exit {p.returncode}\n{p.stderr}')


cases = []
for kind in ['lstm', 'gru', 'rnn_tanh', 'rnn_relu']:
    for layers, bidir, bf, ragged, states in [(1, 0, 0, False, False), (2, 1, 1, True, True),
                                               (2, 0, 0, True, False), (1, 1, 0, False, True)]:
        cases.append((kind, layers, bidir, bf, ragged, states))

failed = 0
torch.manual_seed(1)
with tempfile.TemporaryDirectory() as tmp:
    for kind, layers, bidir, bf, ragged, states in cases:
        inp, hid, T, B = 3, 5, 6, 4
        cfg = (kind, inp, hid, layers, bidir, bf)
        m = make(kind, inp, hid, layers, bidir, bf)
        D = 2 if bidir else 1
        x = torch.randn((B, T, inp) if bf else (T, B, inp), requires_grad=True)
        lengths = torch.tensor([3, 6, 1, 4]) if ragged else None
        h0 = torch.randn(layers * D, B, hid, requires_grad=True) if states else None
        c0 = torch.randn(layers * D, B, hid, requires_grad=True) if states and kind == 'lstm' else None
        y, hn, cn = run_torch(m, kind, x, lengths, h0, c0, bf)
        gy, ghn = torch.randn_like(y), torch.randn_like(hn)
        gcn = torch.randn_like(cn) if cn is not None else None
        loss = (y * gy).sum() + (hn * ghn).sum() + ((cn * gcn).sum() if cn is not None else 0)
        loss.backward()
        save = dict(m.state_dict())
        save.update(x=x, gy=gy, ghn=ghn)
        if gcn is not None:
            save['gcn'] = gcn
        if lengths is not None:
            save['lengths'] = lengths.to(torch.int64)
        if h0 is not None:
            save['h0'] = h0
        if c0 is not None:
            save['c0'] = c0
        write(f'{tmp}/in.safetensors', save)
        helper_run(cfg, 'run', f'{tmp}/in.safetensors', f'{tmp}/out.safetensors')
        got = read(f'{tmp}/out.safetensors')
        want = {'y': y, 'h_n': hn, 'grad.x': x.grad}
        if cn is not None:
            want['c_n'] = cn
        if h0 is not None:
            want['grad.h0'] = h0.grad
        if c0 is not None:
            want['grad.c0'] = c0.grad
        for name, p in m.named_parameters():
            want['grad.' + name] = p.grad
        worst, where = 0.0, ''
        for name, w in want.items():
            if name not in got:
                worst, where = float('inf'), f'{name} missing'
                break
            e = rel(got[name], w.detach())
            tol = 1e-5 if not name.startswith('grad.') else 1e-4
            if e / tol > worst:
                worst, where = e / tol, f'{name} off by {e:.3g}'
        ok = worst <= 1
        label = f'{kind} layers {layers} {"bidirectional" if bidir else "one direction"}' \
                f'{" batch_first" if bf else ""}{" ragged" if ragged else ""}' \
                f'{" h0" if states else ""}'
        print(f'{"ok" if ok else "FAIL"}: PyTorch -> kiln: {label}: {len(want)} tensors; '
              f'worst {where} ({worst:.2g} of its tolerance)')
        failed += not ok

        # kiln -> PyTorch
        helper_run(cfg, 'save', f'{tmp}/kiln.safetensors')
        got = read(f'{tmp}/kiln.safetensors')
        kx, ky = got.pop('x'), got.pop('y')
        m2 = make(kind, inp, hid, layers, bidir, bf)
        m2.load_state_dict(got, strict=True)  # raises on a name or shape PyTorch lacks
        with torch.no_grad():
            ty, _, _ = run_torch(m2, kind, kx, None, None, None, bf)
        e = rel(ky, ty)
        ok = e <= 1e-5
        print(f'{"ok" if ok else "FAIL"}: kiln -> PyTorch: {label.split(" ragged")[0]}: '
              f'{len(got)} entries load strictly; y off by {e:.3g}')
        failed += not ok
sys.exit(1 if failed else 0)
