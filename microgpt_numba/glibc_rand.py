"""glibc's rand() (random_r, TYPE_3) and microgpt.cu's host draws on top of it.

The host math is float, as in the C: rand_normal calls glibc's logf, sqrtf and cosf
through ctypes, so the initial weights are the C program's bits, not numpy's.
"""
import ctypes
import ctypes.util

import numpy as np

RAND_MAX = 2147483647
_DEG = 31  # TYPE_3 state words
_SEP = 3
_DISCARD = 310  # srandom_r throws away 10 * 31 outputs


def _libm_float_function(name, nargs):
    fn = getattr(ctypes.CDLL(ctypes.util.find_library("m")), name)
    fn.restype = ctypes.c_float
    fn.argtypes = [ctypes.c_float] * nargs
    return fn


logf = _libm_float_function("logf", 1)
cosf = _libm_float_function("cosf", 1)
sqrtf = _libm_float_function("sqrtf", 1)
powf = _libm_float_function("powf", 2)

_RAND_MAX_PLUS_2 = np.float32(RAND_MAX) + np.float32(2.0)
_TWO_PI = np.float32(2.0) * np.float32(np.pi)


class GlibcRand:
    """srand(seed) then rand(), bit for bit as glibc on Linux."""

    def __init__(self, seed=1):
        self.srand(seed)

    def srand(self, seed):
        seed = int(seed) & 0xFFFFFFFF
        if seed == 0:
            seed = 1
        r = [seed]
        for _ in range(1, _DEG):
            r.append((16807 * r[-1]) % 2147483647)
        for _ in range(_SEP):  # r[31..33] = r[0..2]
            r.append(r[-_DEG])
        # From r[34] on, additive feedback r[i] = r[i-31] + r[i-3]; the first 310 are discarded.
        for _ in range(_DISCARD):
            r.append((r[-_DEG] + r[-_SEP]) & 0xFFFFFFFF)
        self._r = r[-_DEG:]

    def rand(self):
        r = self._r
        word = (r[-_DEG] + r[-_SEP]) & 0xFFFFFFFF
        r.append(word)
        del r[0]
        return word >> 1


def rand_uniform(gen):
    """((float)rand() + 1.0f) / ((float)RAND_MAX + 2.0f), in (0, 1]."""
    return (np.float32(gen.rand()) + np.float32(1.0)) / _RAND_MAX_PLUS_2


def rand_normal(gen, stddev):
    """Box-Muller with two uniforms, in microgpt.cu's float operation order."""
    u1 = rand_uniform(gen)
    u2 = rand_uniform(gen)
    mag = np.float32(sqrtf(np.float32(-2.0) * np.float32(logf(u1))))
    phase = _TWO_PI * u2
    return np.float32(stddev) * mag * np.float32(cosf(phase))
