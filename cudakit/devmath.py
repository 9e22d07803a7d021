"""Float32 device arithmetic with one source for the GPU and the CUDA simulator.

A port that must reproduce a C program's bits has to say, for every product, whether it fuses
with the add that follows. On the GPU Numba lets NVVM contract a plain `a * b + c` into an fma,
so the exact operations are written out: `mul` (a product rounded on its own, which the compiler
cannot fuse), `fma` (one rounding), `mad(fused, a, b, c)` (either, by a flag). In the simulator
these run as Python, exactly: there `cuda.fma` is unfused and libdevice does not exist.

`float_bits` and `bits_float` reinterpret a float32 as its int32 bits and back. For doubles:
`dfma` (one rounding), `double_hi` and `double_lo` (the high and low 32 bits as int32) and
`hilo_double` (back).

libdevice's `expf` and `rsqrtf` (what nvcc's device code calls) exist only on the GPU. The
simulator gets numpy float32 stand-ins, which are close but not libdevice's bits: results that
depend on them are compared bit for bit only on a GPU.
"""
import math
from fractions import Fraction

import numpy as np
from numba import config, cuda

from . import simulator

simulator.install()

if config.ENABLE_CUDASIM:
    # Plain Python: the simulator's device-function wrapper costs more than these bodies.
    def device(f):
        return f

    def mul(a, b):
        return np.float32(a) * np.float32(b)

    def fma(a, b, c):
        # The product of two float32 is exact in float64, so the double sum s is off the exact
        # sum by at most half a double ulp; rounding s to float32 is then right unless s sits
        # exactly on a float32 tie, where the sum's error term (TwoSum) says which way to go.
        p = float(a) * float(b)
        c = float(c)
        s = p + c
        r = np.float32(s)
        d = s - float(r)
        if d != 0.0 and abs(d) == math.ldexp(1.0, max(math.frexp(s)[1] - 25, -150)):
            t = s - p
            err = (p - (s - t)) + (c - t)
            if err != 0.0 and (err > 0.0) == (d > 0.0):
                r = np.float32(s + d)  # the exact sum lies beyond the tie: the other neighbour
        return r

    def expf(x):
        return np.exp(np.float32(x))

    def rsqrtf(x):
        return np.float32(1.0) / np.sqrt(np.float32(x))

    def float_bits(x):
        return int(np.float32(x).view(np.int32))

    def bits_float(b):
        return np.int32(b).view(np.float32)

    def dfma(a, b, c):
        # exact as fractions, then one rounding: CPython's int / int is correctly rounded
        return float(Fraction(float(a)) * Fraction(float(b)) + Fraction(float(c)))

    def double_hi(x):
        return np.int32(np.array([x], np.float64).view(np.int32)[1])

    def double_lo(x):
        return np.int32(np.array([x], np.float64).view(np.int32)[0])

    def hilo_double(hi, lo):
        return float(np.array([lo, hi], np.int32).view(np.float64)[0])

else:
    from numba.cuda import libdevice

    device = cuda.jit(device=True)

    @device
    def mul(a, b):
        return libdevice.fmul_rn(a, b)

    @device
    def fma(a, b, c):
        return libdevice.fmaf_rn(a, b, c)

    @device
    def expf(x):
        return libdevice.expf(x)

    @device
    def rsqrtf(x):
        return libdevice.rsqrtf(x)

    @device
    def float_bits(x):
        return libdevice.float_as_int(x)

    @device
    def bits_float(b):
        return libdevice.int_as_float(b)

    # libdevice's own, called directly
    dfma, double_hi, double_lo = libdevice.fma, libdevice.double2hiint, libdevice.double2loint
    hilo_double = libdevice.hiloint2double


@device
def mad(fused, a, b, c):
    """a * b + c: one rounding when `fused`, else two."""
    if fused:
        return fma(a, b, c)
    return mul(a, b) + c


@device
def sqrtf(x):
    # IEEE in both worlds: sqrt.rn.f32 on the GPU; in the simulator the double square root of a
    # float, which rounds to the correctly rounded float square root.
    return np.float32(math.sqrt(x))
