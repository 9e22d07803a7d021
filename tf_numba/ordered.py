"""tf.c's ordered float32 sum of many non-negative terms, bit for bit, by a whole block.

tf.c's softmax adds its 50,257 exps into one float, one after another: each add rounds, so the
sum is a chain of 50,257 dependent adds, about 0.13 ms on the GPU, and it cannot be split or
reassociated. But while the running sum s stays inside one binade, every float there is a whole
number k of one unit u (2^-23 of the binade's bottom), and adding a term x >= 0 gives k + q, q
being x / u rounded to the nearest whole unit. Only at an exact half does s itself matter: the
tie goes to the even one of the two, so by k's parity. Each term is therefore a map from k's
parity to an increment, maps compose, and a block can scan them: every thread takes a run of
terms, the block scans the runs' maps, and each thread walks its run from the k it starts at, to
find the first term after which s leaves the binade (k reaches 2^24 units). That term is added as
the C adds it, with a float add; the sum then sits in a higher binade, and the block goes on from
the next term. Since the terms are non-negative, s only grows: the binade changes a few dozen times
in a sum (each time s doubles), and the first `head` terms, where it doubles most often, one
thread adds alone.

Every step is exact integer arithmetic on the floats' bits, and every rounding the C does is the
one computed, so the sum has the chain's bits, whatever the terms (zeros, subnormals, ties,
terms larger than the sum so far). A term that is negative, infinite or NaN sends the block to the
plain chain (tf.c's softmax never makes one).

Increments past 2^25 units leave any binade at once, so they are kept at 2^25: every number fits
an int32.
"""
import numpy as np
from numba import config, cuda

from cudakit.devmath import bits_float, float_bits

from . import kernels as K  # its staged_sum, found when a kernel compiles (kernels imports this)

I = np.int32  # every number here fits one: 32-bit arithmetic, no 64-bit pairs
U = np.uint32  # the packing loop's indices: unsigned, so that none is checked for being negative
BINADE = I(1 << 24)  # k at the top of a binade: 2^24 units of its spacing
SAT = I(1 << 25)  # what an increment past any binade is kept at
TIE = I(1 << 30)  # a packed term's flag: exactly half a unit past q
UNITS = I((1 << 30) - 1)  # a packed term's q

if config.ENABLE_CUDASIM:  # few threads and short runs: the simulator pays per thread and per barrier
    THREADS, PER, GROUPS, HEAD = 8, 2, 2, 3
else:  # the fastest of 9 geometries timed (tools/experiments/softmax_probe.py, docs/results/2026-12-02-h200-warp):
    # 120.8 us for 64 rows of normal logits, against 147.4 with 256 threads, runs of 32, 16 groups
    THREADS, PER, GROUPS, HEAD = 512, 16, 32, 2048


def layout(threads, per, groups):
    """(GROUP, WINDOW) of a block of `threads`, runs of `per` terms, `groups` scan groups: the
    threads whose maps one thread of the scan composes, and the terms a round of the scan covers."""
    assert threads % groups == 0, "the scan's groups split the block evenly"
    return threads // groups, threads * per


GROUP, WINDOW = layout(THREADS, PER, GROUPS)


# Numba widens 32-bit integer arithmetic to 64 bits; each result cast back to int32 lets the GPU
# compiler narrow the operation itself (one instruction, not a pair).


@cuda.jit(device=True)
def split(s):
    """(E, k): s >= 0 is k units of 2^(E - 150), E being s's biased exponent (1 for zero and the
    subnormals, which share the first binade's unit), k < 2^24 (2^24 only at the top of one)."""
    b = float_bits(s)
    E = I(max(I(b >> I(23)), I(1)))
    return E, I(b - I((E - I(1)) << I(23)))


@cuda.jit(device=True)
def joined(E, k):
    """The float of k units of 2^(E - 150) (split's inverse)."""
    return bits_float(I(I((E - I(1)) << I(23)) + k))


@cuda.jit(device=True)
def packed(x, E):
    """The finite x >= 0 in units of 2^(E - 150), rounded to the nearest unit, or the unit below
    with TIE set when exactly half a unit is left over; SAT when x leaves the binade by itself.
    Without branches (a warp's terms take every path at once): a shift past 25 leaves less than
    half a unit, which rounds to nothing, so shifts stop at 30."""
    F, m = split(x)
    sh = I(E - F)
    s = I(min(I(max(sh, I(0))), I(30)))
    q = I(m >> s)
    rem = I(m - I(q << s))
    half = I(I(I(1) << s) >> I(1))
    term = I(q + I(1)) if rem > half else q
    term = I(q | TIE) if rem == half and s > I(0) else term
    return SAT if sh < I(0) else term


@cuda.jit(device=True)
def step(k, term):
    """k units plus a packed term, rounded as the float add rounds: at a tie, to the even one."""
    kq = I(k + I(term & UNITS))
    return I(kq + I(I(I(term >> I(30)) & kq) & I(1)))


@cuda.jit(device=True)
def compose(a0, a1, b0, b1):
    """The map of a run of terms, then another, as (increment from an even k, from an odd k): b
    applies at the parity a leaves."""
    return I(min(I(a0 + (b1 if I(a0 & I(1)) else b0)), SAT)), I(min(I(a1 + (b0 if I(a1 & I(1)) else b1)), SAT))


@cuda.jit(device=True)
def ordered_sum(s, x, n, t, head, maps0, maps1, groups0, groups1, ctrl):
    """s + x[0] + x[1] + ... + x[n - 1] in float32, each add rounded in this order, for x >= 0 in
    shared memory, s >= +0: called by every thread t of a block of THREADS, each of which gets the sum.
    The first `head` terms are one thread's chain. Scratch, in shared memory: maps0 and maps1
    (int32, THREADS), groups0 and groups1 (int32, GROUPS), ctrl (int32, 4)."""
    if t == 0:
        ctrl[3] = 1 if float_bits(s) < I(0) else 0
    cuda.syncthreads()
    # a term the scan does not take (the C's softmax makes none)
    for v in range(np.uint64(t), np.uint64(n), np.uint64(THREADS)):
        if float_bits(x[v]) < I(0) or not x[v] < np.inf:  # negative (-0 too), infinite or NaN
            ctrl[3] = 1
    cuda.syncthreads()
    if ctrl[3] != 0:
        head = n
    if head > 0:
        if t == 0:
            ctrl[2] = float_bits(K.staged_sum(s, x, np.uint64(0), min(head, n)))
        cuda.syncthreads()
        s = bits_float(ctrl[2])
    pos = min(head, n)
    terms = cuda.local.array(PER, np.int32)
    while pos < n:
        E, k0 = split(s)
        if E == 255:  # s is infinite: it stays so
            break
        # each thread's run of PER terms, packed, and its map
        base = pos + t * PER
        at, last = U(base), U(n - 1)
        c0, c1 = I(0), I(0)
        for j in range(PER):  # a term past the end reads the last one and counts as zero: no branch
            v = U(at + U(j))
            term = packed(x[U(min(v, last))], E)
            term = term if v <= last else I(0)
            terms[j] = term
            c0 = I(min(step(c0, term), SAT))
            c1 = I(min(I(step(I(c1 + I(1)), term) - I(1)), SAT))
        maps0[t] = c0
        maps1[t] = c1
        cuda.syncthreads()
        # the scan: GROUPS threads compose their group's maps, one thread scans the groups, and
        # the GROUPS threads turn their group's maps into each thread's exclusive prefix
        if t < GROUPS:
            a0, a1 = I(0), I(0)
            for u in range(np.uint64(t * GROUP), np.uint64((t + 1) * GROUP)):
                a0, a1 = compose(a0, a1, maps0[u], maps1[u])
            groups0[t] = a0
            groups1[t] = a1
        cuda.syncthreads()
        if t == 0:
            a0, a1 = I(0), I(0)
            for g in range(GROUPS):
                b0, b1 = groups0[g], groups1[g]
                groups0[g] = a0
                groups1[g] = a1
                a0, a1 = compose(a0, a1, b0, b1)
            ctrl[0] = n  # no term leaves the binade, so far
        cuda.syncthreads()
        if t < GROUPS:
            a0, a1 = groups0[t], groups1[t]
            for u in range(np.uint64(t * GROUP), np.uint64((t + 1) * GROUP)):
                b0, b1 = maps0[u], maps1[u]
                maps0[u] = a0
                maps1[u] = a1
                a0, a1 = compose(a0, a1, b0, b1)
        cuda.syncthreads()
        # each thread walks its run from where the scan puts it: the first term that takes k to
        # the top of the binade, if any
        k = I(k0 + (maps1[t] if I(k0 & I(1)) else maps0[t]))
        before = k
        cross = -1
        for j in range(PER):  # terms past the end are zero
            if k < BINADE:
                before = k
                k = step(k, terms[j])
                if k >= BINADE:
                    cross = base + j
        if cross >= 0:
            cuda.atomic.min(ctrl, 0, np.int32(cross))
        cuda.syncthreads()
        first = ctrl[0]
        if first < n:
            if cross == first:  # that term as the C adds it, to the sum before it
                ctrl[2] = float_bits(joined(E, before) + x[first])
                ctrl[1] = first + 1
        elif t == THREADS - 1:
            ctrl[2] = float_bits(joined(E, k))
            ctrl[1] = min(pos + WINDOW, n)
        cuda.syncthreads()
        s = bits_float(ctrl[2])
        pos = ctrl[1]
    return s
