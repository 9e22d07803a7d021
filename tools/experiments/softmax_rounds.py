"""How many rounds ordered.ordered_sum's scan takes a row, counted in numpy (no GPU): on the rows
softmax_probe.py times (T rows of 50,257 standard-normal logits, seed 0), for a head of one
thread's chain and windows of THREADS * PER terms.

A round packs a window of terms at the running sum's binade and scans them; it ends at the first
term whose add leaves the binade (the next round starts after it) or at the window's end. Rounds
either stop at each staged chunk's end ("chunked": a chunk of one window, as main stages them)
or run on into the next chunk ("streaming": two chunks staged in a ring). The crossings are read
off the float32 chain itself; the exps are numpy's (tf.c's expf differs in a last bit here and
there, which moves no crossing that matters to a count). At a head of 2,048 the chunked count is
11.75 a row, the figure ncu gave for main's kernel on an H100 (2026-12-07).

    python3 tools/experiments/softmax_rounds.py [T [WINDOW]]
"""
import sys

import numpy as np

V = 50257  # GPT-2's vocabulary


def crossings(row):
    """The terms of the row's exps after whose add the float32 sum is in a higher binade."""
    e = np.exp((row - row.max()).astype(np.float64)).astype(np.float32)
    binade = np.add.accumulate(e, dtype=np.float32).view(np.int32) >> 23
    return np.flatnonzero(binade[1:] > binade[:-1]) + 1


def rounds(cross, window, head, streaming):
    """Rounds after a head of `head` terms, windows of `window`, chunks of one window."""
    cross = cross[cross >= head]
    pos, n = head, 0
    while pos < V:
        limit = V if streaming else min(V, (pos // window + 1) * window)
        end = min(pos + window, limit)
        c = cross[(cross >= pos) & (cross < end)]
        pos = c[0] + 1 if c.size else end
        n += 1
    return n


def main():
    T = int(sys.argv[1]) if len(sys.argv) > 1 else 64
    window = int(sys.argv[2]) if len(sys.argv) > 2 else 512 * 16
    rows = [crossings(r) for r in np.random.default_rng(0).standard_normal((T, V), dtype=np.float32)]
    print(f"{T} rows, windows of {window} terms: rounds a row (mean, max)")
    for head in (512, 1024, 2048, 3072, 4096):
        left = np.mean([np.sum(c >= head) for c in rows])
        counts = {s: [rounds(c, window, head, s) for c in rows] for s in (False, True)}
        print(f"head {head:5d}: chunked {np.mean(counts[False]):6.2f} {max(counts[False]):3d}   "
              f"streaming {np.mean(counts[True]):6.2f} {max(counts[True]):3d}   crossings after the head {left:.2f}")


if __name__ == "__main__":
    main()
