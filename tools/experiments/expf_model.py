"""A cheaper double-precision path for tf.c's expf, modelled in numpy and checked against the
expf the port has (fp.expf: exp in double, rounded to float) on every float32 input of its range.

tf.c's expf is a double exp rounded to float; on the GPU that is libdevice's exp, about 80
instructions a term in the softmax's scan kernel (11 of them DFMA; ncu, docs/results/
2026-12-07-h100-softmax-banks). The model: for -87 <= x <= 0, k = x * 16 / ln2 rounded to a whole
number, r = x - k * ln2 / 16 (the product exact, ln2 / 16 in two parts), exp(r) by a degree-6
polynomial (|r| <= ln2 / 32), times 2^((k mod 16) / 16) from a table of 16 doubles and 2^(k div
16) exactly: every operation a double multiply or add, rounded on its own (as dmul_rn / dadd_rn
on the GPU, so no fma; numpy does the same here). The double y it gives is then rounded to float
unless its 29 bits below float precision lie within 2^WINDOW units of the half (a float's rounding
boundary), where the port would fall back to today's exp. The check counts, over all 1,118,699,521
floats in [-87, -0], the fallbacks and every input whose fast float differs from
float32(np.exp(double(x))) without one.

    python3 tools/experiments/expf_model.py [WINDOW]      (CPU; about 80 s)

On 2026-12-07 (x86-64, numpy 2.x): largest relative error 2^-47.97 on 10^7 random inputs; with a
window of 2^9 units, 519 fallbacks and 0 mismatches; with 2^3, 4 fallbacks and 0 mismatches. The
port's version is tf_numba.fp.expf_short: the same reduction, table and window, with the
polynomial and the reduction in fmas (fewer roundings than this model), checked on a GPU against
fp.expf itself on every float32 (tests/tf/test_tf_fp.py).
"""
import math
import sys
import time

import numpy as np

N = 16  # table entries: 2^(j / N)
TABLE = np.array([2.0 ** (j / N) for j in range(N)], np.float64)
INV = np.float64(N / math.log(2.0))
C1 = np.float64(float.fromhex("0x1.62e42fefa0000p-5"))  # ln2 / 16, 41 bits: k * C1 exact for |k| < 2^11
C2 = np.float64(math.log(2.0) / N - float(C1))
SHIFT = np.float64(1.5 * 2.0 ** 52)  # adding and subtracting it rounds to a whole number
COEF = [np.float64(1.0 / math.factorial(i)) for i in range(7)]
LOW = 29  # a double's fraction bits below a float's


def fast(x):
    """The model's double exp of float32 x (-87 <= x <= 0)."""
    xd = x.astype(np.float64)
    kd = (xd * INV + SHIFT) - SHIFT
    k = kd.astype(np.int64)
    r = (xd - kd * C1) - kd * C2
    p = COEF[5] + r * COEF[6]
    for c in COEF[4::-1]:
        p = c + r * p
    y = TABLE[k & (N - 1)] * p
    return y * np.ldexp(np.ones_like(y), k >> 4)


def rounded(y, window):
    """(float32 of y, whether y lies within 2^window units of a float's rounding boundary)."""
    low = (y.view(np.uint64) & np.uint64((1 << LOW) - 1)).astype(np.int64)
    return y.astype(np.float32), np.abs(low - (1 << (LOW - 1))) <= (1 << window)


def main(argv):
    window = int(argv[0]) if argv else 9
    lo, hi = 0x80000000, int(np.float32(-87.0).view(np.uint32))  # -0.0 .. -87.0
    chunk, start = 1 << 22, lo
    fallbacks = mismatches = total = 0
    t0 = time.time()
    while start <= hi:
        x = np.arange(start, min(start + chunk, hi + 1), dtype=np.uint64).astype(np.uint32).view(np.float32)
        f, near = rounded(fast(x), window)
        want = np.exp(x.astype(np.float64)).astype(np.float32)
        bad = (f.view(np.uint32) != want.view(np.uint32)) & ~near
        fallbacks += int(near.sum())
        mismatches += int(bad.sum())
        total += x.size
        if bad.any():
            i = np.flatnonzero(bad)[:3]
            print("mismatch:", x[i], f[i], want[i], flush=True)
        start += chunk
    print(f"window 2^{window}: {total} inputs, {fallbacks} fallbacks, {mismatches} mismatches, "
          f"{time.time() - t0:.0f} s")
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
