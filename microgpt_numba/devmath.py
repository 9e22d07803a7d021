"""Single-precision math for kernels, picked once at import so one kernel source serves both worlds.

On the GPU: libdevice's expf, logf and rsqrtf (what nvcc's are), IEEE sqrt, and fma.rn.
In the CUDA simulator libdevice functions are stubs returning None and cuda.fma is unfused, so
numpy float32 stands in, and fmaf rounds the exact float64 product plus c (a double rounding,
rarely off by one unit in the last place; the simulator's results are never compared bit for bit).
"""
import math

import numpy as np
from numba import config, cuda

if config.ENABLE_CUDASIM:
    @cuda.jit(device=True)
    def expf(x):
        return np.exp(np.float32(x))

    @cuda.jit(device=True)
    def logf(x):
        return np.log(np.float32(x))

    @cuda.jit(device=True)
    def rsqrtf(x):
        return np.float32(1.0) / np.sqrt(np.float32(x))

    @cuda.jit(device=True)
    def sqrtf(x):
        return np.sqrt(np.float32(x))

    @cuda.jit(device=True)
    def fmaf(a, b, c):
        return np.float32(np.float64(a) * np.float64(b) + np.float64(c))
else:
    from numba.cuda import libdevice

    @cuda.jit(device=True)
    def expf(x):
        return libdevice.expf(x)

    @cuda.jit(device=True)
    def logf(x):
        return libdevice.logf(x)

    @cuda.jit(device=True)
    def rsqrtf(x):
        return libdevice.rsqrtf(x)

    @cuda.jit(device=True)
    def sqrtf(x):
        return math.sqrt(x)

    @cuda.jit(device=True)
    def fmaf(a, b, c):
        return cuda.fma(a, b, c)
