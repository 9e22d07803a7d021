"""fp.expf_short, the softmax's shorter path to tf.c's expf, against fp.expf bit for bit: on a GPU
every one of the 2^32 float32 bit patterns (NaNs, infinities, subnormals and the inputs that fall
back to expf included); in the simulator, runs of consecutive floats at the edges of its range
and inputs whose exp lies next to a float's rounding boundary."""
import numpy as np
import pytest
from numba import config, cuda

from cudakit.devmath import bits_float, float_bits
from tf_numba import fp

THREADS = 32 if config.ENABLE_CUDASIM else 256
# float32 inputs whose double exp lies within 64 units of the 29 bits below float precision of a
# rounding boundary (found by tools/experiments/expf_model.py's fast() over the 2^26 floats from
# -0.5 down), so that expf_short must hand them to expf
NEAR_BOUNDARY = (0xBF157C82, 0xBF76FD92, 0xBF81EADF, 0xBFAB7CE4, 0xC0781533, 0xC13D6631)


@cuda.jit
def mismatches(first, n, found, where):
    """found[0] += the bit patterns first, first + 1, ... (n of them, mod 2^32) whose expf_short is
    not expf's float; the first where.size of them in where."""
    exp2_16 = cuda.shared.array(16, np.float64)
    for j in range(cuda.threadIdx.x, 16, cuda.blockDim.x):
        exp2_16[j] = fp.EXP2_16[j]
    cuda.syncthreads()
    for i in range(cuda.grid(1), n, cuda.gridsize(1)):
        bits = np.uint32((first + i) & 0xFFFFFFFF)
        x = bits_float(np.int32(bits))
        if float_bits(fp.expf_short(x, exp2_16)) != float_bits(fp.expf(x)):
            k = cuda.atomic.add(found, 0, 1)
            if k < where.size:
                where[k] = bits


def check(first, n, blocks):
    found = cuda.to_device(np.zeros(1, np.int64))
    where = cuda.to_device(np.zeros(8, np.uint32))
    mismatches[blocks, THREADS](np.int64(first), np.int64(n), found, where)
    count = int(found.copy_to_host()[0])
    assert count == 0, [hex(b) for b in where.copy_to_host()[:min(count, 8)]]


def f32_bits(x):
    return int(np.float32(x).view(np.uint32))


@pytest.mark.skipif(not config.ENABLE_CUDASIM, reason="the simulator's sample; a GPU checks every float")
@pytest.mark.parametrize("first", [
    f32_bits(-0.0), f32_bits(0.0) - 40,  # -0 and the negatives after it; NaNs, +0, subnormals
    f32_bits(fp.EXP_SHORT_MIN) - 100,  # both sides of the range's end at -87
    f32_bits(-1e-8), f32_bits(-0.3), f32_bits(-17.25), f32_bits(-np.inf) - 20,  # -inf and NaNs
] + [b - 2 for b in NEAR_BOUNDARY])
def test_expf_short_is_expf_simulator(first):
    check(first, 200, 1)


@pytest.mark.gpu
def test_expf_short_is_expf_every_float():
    step = 1 << 30
    for first in range(0, 1 << 32, step):
        check(first, step, 132 * 8)
