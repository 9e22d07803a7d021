"""How often tf_ln's two ordered sums leave their binade: the question for scanning them as
tf_numba/ordered.py scans the softmax's sum, which needs the running sum to stay in one binade
(and, for its terms, one sign) for long stretches. Numpy, float32 as tf.c adds: the mean's sum
of D terms (standard normal plus an offset), and the variance's sum of squared differences
(tf.c's nofma rounding of each square; with fma the square is exact, which moves no binade
change by more than a term).

    python3 tools/experiments/ln_binades.py [ROWS [D]]      (no GPU)
"""
import sys

import numpy as np

RUN = 16  # terms a thread packs in ordered.py's rounds


def changes(terms):
    """(binade or sign changes of the running float32 sum, runs of RUN terms holding one, the
    index of each change)."""
    s, key, at = np.float32(0.0), None, []
    for i, x in enumerate(terms):
        s = np.float32(s + x)
        k = (int(np.float32(abs(s)).view(np.uint32) >> 23), bool(s < 0))
        if k != key:
            at.append(i)
        key = k
    return len(at), len({i // RUN for i in at}), at


def main():
    rows = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    D = int(sys.argv[2]) if len(sys.argv) > 2 else 768
    rng = np.random.default_rng(0)
    for offset in (0.0, 0.3, 3.0):
        mean_counts, var_counts, var_early = [], [], []
        for _ in range(rows):
            x = (rng.standard_normal(D) + offset).astype(np.float32)
            n, runs, _ = changes(x)
            mean_counts.append((n, runs))
            m = np.float32(np.add.accumulate(x, dtype=np.float32)[-1] / np.float32(D))
            d = (x - m).astype(np.float32)
            n, _, at = changes((d * d).astype(np.float32))
            var_counts.append(n)
            var_early.append(sum(i < 128 for i in at))
        mean_counts = np.array(mean_counts)
        print(f"offset {offset}: the mean's sum {mean_counts[:, 0].mean():.1f} changes, in "
              f"{mean_counts[:, 1].mean():.1f} of {-(-D // RUN)} runs; the variance's "
              f"{np.mean(var_counts):.1f} changes, {np.mean(var_early):.1f} in its first 128 terms")


if __name__ == "__main__":
    main()
