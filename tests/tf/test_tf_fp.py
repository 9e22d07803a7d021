"""The simulator's float32 fused multiply-add is exact: one rounding of a*b + c, ties included.
The reference is exact rational arithmetic (fractions), rounded to nearest-even float32."""
from fractions import Fraction

import numpy as np
import pytest
from numba import config

from tf_numba import fp

pytestmark = pytest.mark.skipif(not config.ENABLE_CUDASIM, reason="host-callable only in the simulator; the GPU has fma.rn")


def rounded(a, b, c):
    x = Fraction(float(a)) * Fraction(float(b)) + Fraction(float(c))
    f = np.float32(float(x))  # within one float32 ulp of the answer
    candidates = [f, np.nextafter(f, np.float32(np.inf)), np.nextafter(f, np.float32(-np.inf))]
    return min(candidates, key=lambda y: (abs(Fraction(float(y)) - x), int(np.array(y).view(np.uint32)) & 1))


def cases(n):
    rng = np.random.default_rng(7)
    for i in range(n):
        a, b = rng.standard_normal(2).astype(np.float32)
        kind = i % 4
        if kind == 0:
            c = np.float32(rng.standard_normal())
        elif kind == 1:  # cancellation: c close to -a*b
            c = np.float32(-(float(a) * float(b)) + float(np.float32(rng.standard_normal() * 1e-7)))
        elif kind == 2:  # a*b exactly halfway between floats, nudged by a tiny c: the tie cases
            a = np.float32(1 + 2.0**-23)
            b = np.float32(1 + 2.0**-23 * int(rng.integers(1, 4)))
            c = np.float32(float(rng.choice([-1.0, 1.0])) * 2.0 ** -int(rng.integers(20, 50)))
        else:  # subnormal results
            a, b = np.float32(rng.standard_normal() * 1e-20), np.float32(rng.standard_normal() * 1e-20)
            c = np.float32(rng.standard_normal() * 1e-39)
        yield a, b, c


def test_simulator_fma_is_correctly_rounded():
    bad = [(a, b, c) for a, b, c in cases(4000) if fp.fma(a, b, c) != rounded(a, b, c)]
    assert not bad


def test_mad_profiles():
    a, b, c = np.float32(1 + 2.0**-23), np.float32(1 - 2.0**-23), np.float32(-1.0)
    assert fp.mad(True, a, b, c) == np.float32(-(2.0**-46))  # one rounding keeps the tail
    assert fp.mad(False, a, b, c) == np.float32(0.0)  # the product rounds to 1 first
