#!/usr/bin/python3
"""Which BLAS the peer (Debian's python3-torch) runs on: the library mapped into this process
after a matrix product, beside torch's build setting and the libblas.so.3 alternatives link.
Debian builds torch against the generic libblas.so.3, so the alternatives system picks the
library; the reference BLAS makes PyTorch 4-20x slower and would flatter any comparison.
Prints one line; exits 2 when the peer runs on the reference BLAS."""
import os
import re
import sys

import torch

torch.ones(64, 64) @ torch.ones(64, 64)
mapped = sorted({line.split()[-1] for line in open("/proc/self/maps")
                 if re.search(r"blas|lapack", line.split()[-1] if line.split() else "")})
config = re.search(r"BLAS_INFO=([^,\s]+)", torch.__config__.show())
link = os.path.realpath("/usr/lib/x86_64-linux-gnu/libblas.so.3")
openblas = any("openblas" in m for m in mapped)
reference = not openblas and any(m.endswith("/blas/libblas.so.3") or "/blas/libblas.so.3." in m for m in mapped)
kind = "OpenBLAS" if openblas else "reference BLAS" if reference else "unknown"
print(f"peer BLAS: {kind} (torch {torch.__version__}, BLAS_INFO={config.group(1) if config else '?'}, "
      f"libblas.so.3 -> {link}, mapped: {', '.join(mapped) or 'none'})")
sys.exit(2 if reference else 0)
