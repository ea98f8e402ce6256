#!/usr/bin/env python3
"""make-vendors.py DIR OCLGRIND_ICD_LIB [POCL_ICD_FILE]

Write an ICD vendors directory listing Oclgrind (a simulated GPU-type device on its own platform)
beside PoCL, for OCL_ICD_VENDORS: the closest thing to a GPU + CPU machine that runs here.
Also writes DIR-empty, an empty vendors directory (the no-platform case), and DIR-gpuonly,
listing Oclgrind alone: the shape of a GPU-only machine (the NVIDIA machines have no PoCL).
"""
import os
import sys

out, oclgrind = sys.argv[1], sys.argv[2]
pocl = sys.argv[3] if len(sys.argv) > 3 else '/etc/OpenCL/vendors/pocl.icd'
os.makedirs(out, exist_ok=True)
os.makedirs(out + '-empty', exist_ok=True)
os.makedirs(out + '-gpuonly', exist_ok=True)
for d in (out, out + '-gpuonly'):
    with open(os.path.join(d, 'oclgrind.icd'), 'w') as f:
        f.write(oclgrind + '\n')
if os.path.exists(pocl):
    with open(pocl) as src, open(os.path.join(out, 'pocl.icd'), 'w') as dst:
        dst.write(src.read())
