"""The floating-point model: which float32 products fuse with the add that follows.

tf.c's checkpoints depend on how its compiler rounded. Under `fma` (clang -ffp-contract=on on
an FMA target) a fixed list of C statements is one fused multiply-add; under `nofma` every
multiply and add is rounded on its own (REFERENCE.md, "what bit-exact means"). Every kernel
takes a `fused` flag and writes those statements as `mad(fused, a, b, c)`; every other product
goes through `mul`, so the GPU compiler has no plain multiply it could contract into an add.

expf, erff and logf are correctly rounded binary32, computed in double and rounded to float,
as the oracle builds tf.c; sqrtf the same way (IEEE in both worlds).

One source serves the GPU and the CUDA simulator: the simulator has no libdevice (its
functions return None) and its `cuda.fma` is unfused, so there the functions are exact
float32 emulations, chosen at import time.
"""
import math

import numpy as np
from numba import config, cuda

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
def mad(fused, a, b, c):
    """a * b + c: one rounding when `fused`, else two."""
    if fused:
        return fma(a, b, c)
    return mul(a, b) + c


@device
def expf(x):
    return np.float32(math.exp(np.float64(x)))


@device
def erff(x):
    return np.float32(math.erf(np.float64(x)))


@device
def logf(x):
    return np.float32(math.log(np.float64(x)))


@device
def sqrtf(x):
    # the double square root of a float rounds to the correctly rounded float square root
    return np.float32(math.sqrt(np.float64(x)))


FP_MODELS = ("fma", "nofma")


def is_fused(fp_model: str) -> bool:
    """The kernels' `fused` flag for an fp model name."""
    return fp_model == "fma"
