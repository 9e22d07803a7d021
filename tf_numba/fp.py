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
"""
import math

import numpy as np

from cudakit.devmath import device

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
