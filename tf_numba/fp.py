"""The floating-point model: which float32 products fuse with the add that follows, and tf.c's libm.

tf.c's checkpoints depend on how its compiler rounded. Under `fma` (clang -ffp-contract=on on an
FMA target) a fixed list of C statements is one fused multiply-add; under `nofma` (x86-64's
default build) every multiply and add is rounded on its own. Every kernel takes a `fused` flag
and writes those statements as `mad(fused, a, b, c)`; every other product goes through `mul`
(cudakit.devmath), so the GPU compiler has no plain multiply it could contract into an add.

The statements clang fuses, each one fma under `fma`: `*out += *in * *weight` (tf_fc);
`*dL_dweight += *dL_dout * *in`, `dot += *dL_dout * *weight` (tf_fc_back); `total_diff_squared
+= diff * diff`, `*out = n * *weight + *bias` (tf_ln); `*dL_dweight += *dL_dout * in_norm`,
`var_partial += dL_din_norm * in_norm`, `dL_din_ -= var_partial * in_norm` (tf_ln_back); `dot +=
*q * *k`, `*z += softmax_i * *v` (attention); `dot += *weight * *in` (unembedding);
`*dL_dweight += (*dL_dout * *in) * r_input_size`, `*dL_din += *dL_dout * *weight` (unembedding
backward); `phi + (*in * C) * expf(...)` (gelu backward); `*dL_dv += *dL_dout * *a`, `dot +=
*dL_dout * *v`, `row_sum += *a * dot`, `*dL_dq += (dL_ds * *k) * rsqrt_d_k`, `*dL_dk += (dL_ds *
*q) * rsqrt_d_k` (attention backward).

tf.c's expf, erff and logf, as the oracle builds it (tools/tf_oracle.py), are correctly rounded
binary32: computed in double and rounded to float, here too. (These are not libdevice's expf
and logf, which cudakit.devmath has for microgpt.) sqrtf and `/` are IEEE in both worlds.

`expf_short` is the same float as `expf` by a shorter double path, for the softmax's scan, where
libdevice's exp was a quarter of the kernel (docs/tf.md); tests/tf/test_tf_fp.py holds it to
`expf` on every float32 on a GPU.
"""
import math

import numpy as np

from cudakit.devmath import device, dfma, double_hi, double_lo, hilo_double

FP_MODELS = ("fma", "nofma")


def is_fused(fp_model: str) -> bool:
    """The kernels' `fused` flag for an fp model name."""
    return fp_model == "fma"


@device
def expf(x):
    return np.float32(math.exp(np.float64(x)))


@device
def erff(x):
    return np.float32(math.erf(np.float64(x)))


@device
def logf(x):
    return np.float32(math.log(np.float64(x)))


# expf_short's constants: 2^(j / 16) (its table, staged in shared memory by the kernel that calls
# it: lanes read different entries, which constant memory would serve one address at a time), and
# the reduction x = (k + j / 16) ln2 + r, |r| <= ln2 / 32
EXP2_16 = np.array([2.0 ** (j / 16) for j in range(16)], np.float64)
R_LN2_16 = 16 / math.log(2.0)
LN2_16_HI = float.fromhex("0x1.62e42fefa0000p-5")  # ln2 / 16 to 41 bits: k * LN2_16_HI is exact
LN2_16_LO = math.log(2.0) / 16 - LN2_16_HI
ROUND = 1.5 * 2.0 ** 52  # x + ROUND - ROUND rounds x to a whole number, the low word of x + ROUND
C2, C3, C4, C5, C6 = (1 / math.factorial(i) for i in range(2, 7))
EXP_SHORT_MIN = np.float32(-87.0)  # exp(-87) is a normal float: no subnormal result to round
NEAR = 1 << 9  # double units from a float's rounding boundary where expf_short asks expf instead
HALF_LOW = 1 << 28  # a float's rounding boundary in the 29 bits of a double below it


@device
def expf_short(x, exp2_16):
    """expf(x), the same float, by expf_or_nan, or by expf where that gives NaN."""
    e = expf_or_nan(x, exp2_16)
    return e if e == e else expf(x)


@device
def expf_or_nan(x, exp2_16):
    """expf(x), the same float, for x in [EXP_SHORT_MIN, 0], or NaN, which leaves x to expf: x out
    of that range, or one whose exp lies within NEAR units (2^-43 of it) of a float's rounding
    boundary (519 of the 1.1 billion floats in the range in tools/experiments/expf_model.py).
    The double exp here (a degree-6 polynomial on |r| <= ln2 / 32) is off by under 2^-47.9 of
    itself in that model, which rounds every step where this fuses, and libdevice's by about
    2^-52, so elsewhere the two round to the same float; test_tf_fp checks every float32.
    exp2_16: EXP2_16 in shared memory. No branch: the loop that calls it stays unrolled."""
    inside = x >= EXP_SHORT_MIN and x <= np.float32(0)  # not NaN either
    xd = np.float64(x if inside else np.float32(0))
    shifted = dfma(xd, R_LN2_16, ROUND)
    k = double_lo(shifted)  # round(x * 16 / ln2), >= -2,009
    kd = shifted - ROUND
    r = dfma(-kd, LN2_16_HI, xd)
    r = dfma(-kd, LN2_16_LO, r)
    p = dfma(r, C6, C5)
    p = dfma(r, p, C4)
    p = dfma(r, p, C3)
    p = dfma(r, p, C2)
    p = dfma(r, p, 1.0)
    p = dfma(r, p, 1.0)
    y = exp2_16[np.uint32(k) & np.uint32(15)] * p  # 2^(j / 16) exp(r), in [0.7, 1.5)
    lo = double_lo(y)
    # |low 29 bits - HALF_LOW| <= NEAR, as one unsigned compare
    near = np.uint32(np.int32(lo & np.int32(HALF_LOW * 2 - 1)) - np.int32(HALF_LOW - NEAR)) <= np.uint32(2 * NEAR)
    # times 2^(k div 16) in the exponent field: exact, the result stays a normal double
    e = np.float32(hilo_double(np.int32(double_hi(y) + ((k >> np.int32(4)) << np.int32(20))), lo))
    return e if inside and not near else np.float32(np.nan)
