#!/usr/bin/env python3
"""convert-digits.py [CSV_GZ] [OUT] - convert scikit-learn's copy of the UCI handwritten digits
(digits.csv.gz: 1797 rows of 64 pixels in 0..16 and a label) into examples/data/digits.bin, the
file examples/cnn_digits reads. CSV_GZ defaults to where Debian's python3-sklearn installs it.

digits.bin: the 8 bytes "KILNDIG1", then little-endian u32 count, rows, cols (1797, 8, 8), then
count * rows * cols pixel bytes (0..16, row-major, image after image), then count label bytes
(0..9). Run once; the result is committed (examples/data/README.md says why and where from).
"""
import gzip
import struct
import sys

src = sys.argv[1] if len(sys.argv) > 1 else \
    '/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz'
out = sys.argv[2] if len(sys.argv) > 2 else 'examples/data/digits.bin'
pixels, labels = bytearray(), bytearray()
with gzip.open(src, 'rt') as f:
    for line in f:
        if not line.strip():
            continue
        v = [int(float(x)) for x in line.split(',')]
        if len(v) != 65 or not all(0 <= p <= 16 for p in v[:64]) or not 0 <= v[64] <= 9:
            sys.exit(f'convert-digits.py: unexpected row: {line[:80]}')
        pixels += bytes(v[:64])
        labels.append(v[64])
n = len(labels)
with open(out, 'wb') as f:
    f.write(b'KILNDIG1' + struct.pack('<III', n, 8, 8) + pixels + labels)
print(f'{out}: {n} images')
