"""tf.c's ordered float32 sum of many non-negative terms, bit for bit, by a whole block.

tf.c's softmax adds its 50,257 exps into one float, one after another: each add rounds, so the
sum is a chain of 50,257 dependent adds, about 0.13 ms on the GPU, and it cannot be split or
reassociated. But while the running sum s stays inside one binade, every float there is a whole
number k of one unit u (2^-23 of the binade's bottom), and adding a term x >= 0 gives k + q, q
being x / u rounded to the nearest whole unit. Only at an exact half does s itself matter: the
tie goes to the even one of the two, so by k's parity. Each term is therefore a map from k's
parity to an increment, maps compose, and a block can scan them: every thread takes a run of
terms, the block scans the runs' maps (warp shuffles within each warp, then across the warps'
totals), and the one thread whose run starts below the binade's top and ends at or past it walks
its run, to find the first term after which s leaves the binade (k reaches 2^24 units). That
term is added as the C adds it, with a float add; the sum then sits in a higher binade, and the
block goes on from the next term. Since the terms are non-negative, s only grows: the binade
changes a few dozen times in a sum (each time s doubles), and the first `head` terms, where it
doubles most often, one thread adds alone.

Every step is exact (integer arithmetic on the floats' bits; each term's packing in float products
by powers of two and one rounding add, whose remainder is exact), and every rounding the C does
is the one computed, so the sum has the chain's bits, whatever the terms (zeros, subnormals, ties,
terms larger than the sum so far). A term that is negative, infinite or NaN sends the block to the
plain chain (tf.c's softmax never makes one).

Increments past 2^25 units leave any binade at once, so they are kept at 2^25: every number fits
an int32.
"""
import numpy as np
from numba import config, cuda

from cudakit.devmath import bits_float, float_bits, mul
from cudakit.warp import WARP, shfl_idx, shfl_up

I = np.int32  # every number here fits one: 32-bit arithmetic, no 64-bit pairs
U = np.uint32  # the packing loop's indices: unsigned, so that none is checked for being negative
BINADE = I(1 << 24)  # k at the top of a binade: 2^24 units of its spacing
SAT = I(1 << 25)  # what an increment past any binade is kept at
TIE = I(1 << 30)  # a packed term's flag: exactly half a unit past q
UNITS = I((1 << 30) - 1)  # a packed term's q
BINADE_HALF = I(1 << 23)  # the units from which a term in units is a whole float already
TOP, TOP_HALF = np.float32(2.0 ** 24), np.float32(2.0 ** 23)  # as floats: 2^24 units, 2^23
TOP_HALF_BITS = I(0x4B000000)  # the bits of 2^23, whose unit is 1
ZERO, HALF = np.float32(0.0), np.float32(0.5)

if config.ENABLE_CUDASIM:  # few threads and short runs: the simulator pays per thread and per barrier;
    # three (simulated) warps, so that the scan over the warps composes
    THREADS, PER, HEAD = 12, 2, 3
else:  # the fastest of the geometries timed (tools/experiments/softmax_probe.py: 9 with the scan in
    # shared memory, docs/results/2026-12-02-h200-warp; heads of 1,024 and 512 with the warp
    # shuffles, docs/results/2026-12-07-h100-warp-scan)
    THREADS, PER, HEAD = 512, 16, 2048
WARPS = -(-THREADS // WARP)  # the warps of a block
WINDOW = THREADS * PER  # the terms a round of the scan covers
assert WARPS <= WARP, "the warps' totals are scanned by one warp's lanes"
assert PER % 2 == 0, "runs of PER + 1 slots, an odd number: a warp's runs start in distinct banks"
assert THREADS % PER == 0, "term v + THREADS sits slots(THREADS) after term v (kernels.store_exps)"


def slots(n):
    """The floats of shared memory that n staged terms take (see slot)."""
    return n + n // PER


@cuda.jit(device=True)
def slot(v):
    """Where term v of the staged terms sits: after every PER terms a spare float, so that a warp's
    lanes, whose runs start PER terms apart, read PER + 1 floats apart, in distinct banks. Packed
    one after another, each of a warp's loads of its runs' terms hit two banks only, a 16-way
    conflict (ncu on an H100, 2026-12-07: 84 % of the kernel's shared-load wavefronts)."""
    return U(U(v) + U(U(v) // U(PER)))


@cuda.jit(device=True)
def head_sum(s, x, n):
    """s + the first n staged terms, in order, by one thread: 2 * PER terms at a time, whose
    slots lie at constant offsets from one address, so that all their loads issue ahead of the
    adds (as kernels.staged_sum's)."""
    base = U(0)
    k = U(0)
    while k + U(2 * PER) <= U(n):
        for u in range(PER):  # two loops, so that every offset is a constant once unrolled
            s += x[base + U(u)]
        for u in range(PER):
            s += x[base + U(PER + 1 + u)]
        base += U(2 * PER + 2)
        k += U(2 * PER)
    while k < U(n):
        s += x[slot(k)]
        k += U(1)
    return s


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
def unit_scales(E):
    """(a, b), powers of two a float holds, such that x * a * b is x in units of 2^(E - 150), each
    product exact (a product that falls below the normal floats is far below half a unit)."""
    c = I(I(150) - E)
    c1 = I(c >> I(1))
    return bits_float(I(I(c1 + I(127)) << I(23))), bits_float(I(I(I(c - c1) + I(127)) << I(23)))


@cuda.jit(device=True)
def packed(x, a, b):
    """The finite x >= 0 in units of 2^(E - 150) (unit_scales(E) = (a, b)), rounded to the nearest
    unit, or the unit below with TIE set when exactly half a unit is left over; SAT when x leaves
    the binade by itself. In float arithmetic and without branches (a warp's terms take every path
    at once): below 2^23 units, adding 2^23 rounds y to a whole number (the float add's nearest,
    ties to even) and leaves it in the sum's low bits, and what the rounding left is exact; from
    2^23 units y is whole already."""
    y = mul(mul(x, a), b)
    big = y >= TOP_HALF
    z = y if big else y + TOP_HALF
    q = I(I(float_bits(z) - TOP_HALF_BITS) + (BINADE_HALF if big else I(0)))
    r = ZERO if big else y - (z - TOP_HALF)
    q = I(q - I(1)) if r == -HALF else q  # a tie rounded up: the unit below
    term = I(q | TIE) if abs(r) == HALF else q
    return SAT if y >= TOP else term


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
def scanned(a0, a1, lane, width):
    """The inclusive scan of the maps (a0, a1) over lanes [0, width) of the warp, by shuffles:
    lane l gets the maps of lanes 0..l composed in order. Every lane of the warp calls it."""
    d = 1
    while d < width:
        p0, p1 = shfl_up(a0, d), shfl_up(a1, d)
        if lane >= d:
            a0, a1 = compose(p0, p1, a0, a1)
        d *= 2
    return a0, a1


@cuda.jit(device=True)
def refused(x):
    """Whether the scan cannot take term x: negative (-0 too), infinite or NaN. The C's softmax
    makes none; ordered_sum adds a chunk with one as a chain."""
    return float_bits(x) < I(0) or not x < np.inf


@cuda.jit(device=True)
def ordered_sum(s, x, n, t, head, any_refused, warps0, warps1, ctrl):
    """s + x[0] + x[1] + ... + x[n - 1] in float32, each add rounded in this order, for x >= 0
    staged in shared memory (term v at x[slot(v)]), s >= +0: called by every thread t of a block
    of THREADS, each of which gets the sum. The first `head` terms are one thread's chain.
    any_refused: whether refused(x[v]) for some v < n, the same in every thread; the callers
    check each term as they stage it, and their barrier after the staging
    (cuda.syncthreads_or) shares the answer, which a pass over the chunk of its own cost 10 % of
    the softmax's kernel. Scratch, in shared memory: warps0 and warps1 (int32, WARPS: the warps'
    maps), ctrl (int32, 2: where the next round starts, the sum's bits)."""
    if any_refused or float_bits(s) < I(0):
        head = n
    if head > 0:
        if t == 0:
            ctrl[1] = float_bits(head_sum(s, x, min(head, n)))
        cuda.syncthreads()
        s = bits_float(ctrl[1])
    pos = min(head, n)
    terms = cuda.local.array(PER, np.int32)
    lane, warp = t % WARP, t // WARP
    while pos < n:
        E, k0 = split(s)
        if E == 255:  # s is infinite: it stays so
            break
        a, b = unit_scales(E)
        # each thread's run of PER terms, packed, and its map
        base = pos + t * PER
        at, last = U(base), U(n - 1)
        c0, c1 = I(0), I(0)
        for j in range(PER):  # a term past the end reads the last one and counts as zero: no branch
            v = U(at + U(j))
            term = packed(x[slot(min(v, last))], a, b)
            term = term if v <= last else I(0)
            terms[j] = term
            c0 = I(min(step(c0, term), SAT))
            c1 = I(min(I(step(I(c1 + I(1)), term) - I(1)), SAT))
        # the scan: each warp scans its threads' maps, every warp then scans the warps' totals,
        # and a thread's prefix is its warp's composed with its own lanes' (before it, and to its
        # run's end)
        a0, a1 = scanned(c0, c1, lane, WARP)
        e0, e1 = shfl_up(a0, 1), shfl_up(a1, 1)
        if lane == 0:
            e0, e1 = I(0), I(0)  # the identity map
        if lane == WARP - 1 or t == THREADS - 1:
            warps0[warp] = a0
            warps1[warp] = a1
        cuda.syncthreads()
        w0, w1 = (warps0[lane], warps1[lane]) if lane < WARPS else (I(0), I(0))
        w0, w1 = scanned(w0, w1, lane, WARPS)
        b0, b1 = shfl_idx(w0, max(warp - 1, 0)), shfl_idx(w1, max(warp - 1, 0))
        if warp == 0:
            b0, b1 = I(0), I(0)
        e0, e1 = compose(b0, b1, e0, e1)
        a0, a1 = compose(b0, b1, a0, a1)
        odd = I(k0 & I(1))
        k = I(k0 + (e1 if odd else e0))
        end = I(k0 + (a1 if odd else a0))
        # k only grows, so the first term that takes it to the top of the binade is in the one
        # run that starts below the top and ends at or past it: that thread walks its run and
        # adds the term as the C does, to the sum before it
        if k < BINADE <= end:
            before = k
            cross = base
            for j in range(PER):
                if k < BINADE:
                    before = k
                    k = step(k, terms[j])
                    cross = base + j
            ctrl[1] = float_bits(joined(E, before) + x[slot(cross)])
            ctrl[0] = cross + 1
        elif t == THREADS - 1 and end < BINADE:
            ctrl[1] = float_bits(joined(E, end))
            ctrl[0] = min(pos + WINDOW, n)
        cuda.syncthreads()
        s = bits_float(ctrl[1])
        pos = ctrl[0]
    return s
