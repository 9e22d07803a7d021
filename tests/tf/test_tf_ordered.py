"""ordered.ordered_sum (the softmax's sum of exps, scanned by a block) against the chain of float32
adds it replaces, bit for bit, on rows built to cross its edges: ties at half a unit (the only
place the running sum's parity matters), a binade left at every term, zeros, subnormals, a term
larger than everything before it, terms the scan refuses (negative, infinite, NaN), a sum that
overflows, and softmax rows as tf.c makes them. The whole softmax kernel against tf.c's loop
in numpy, and its reference kernel with tf.c's chain likewise. Short rows in the simulator (8
threads, runs of 2 terms), GPT-2's 50,257 on a GPU."""
import numpy as np
import pytest
from numba import config, cuda

from tf_numba import kernels as K
from tf_numba import ordered as O
from tf_numba import launch

CHUNK, SLOTS, WARPS = K.SOFTMAX_CHUNK, K.SOFTMAX_SLOTS, O.WARPS  # shared arrays' sizes: constants
pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # the row that overflows


@cuda.jit(**K.SOFTMAX_OPTIONS)  # a block of O.THREADS, as the softmax's
def sum_rows(rows, lengths, starts, heads, sums):
    """sums[r] = starts[r] + rows[r, 0] + ... in order, a block a row, the row staged in chunks
    (the head only in the first; term v at O.slot(v)), as tf_unembedding_softmax calls it."""
    r = cuda.blockIdx.x
    t = cuda.threadIdx.x
    chunk = cuda.shared.array(SLOTS, np.float32)
    warps0 = cuda.shared.array(WARPS, np.int32)
    warps1 = cuda.shared.array(WARPS, np.int32)
    ctrl = cuda.shared.array(2, np.int32)
    s = starts[r]
    for c0 in range(0, lengths[r], CHUNK):
        n = min(CHUNK, lengths[r] - c0)
        refusing = 0
        for v in range(t, n, O.THREADS):
            chunk[O.slot(v)] = rows[r, c0 + v]
            refusing |= O.refused(rows[r, c0 + v])
        refusing = cuda.syncthreads_or(np.int32(refusing)) != 0
        s = O.ordered_sum(s, chunk, n, t, heads[r] if c0 == 0 else 0, refusing, warps0, warps1, ctrl)
    if t == 0:
        sums[r] = s


def chain(start, row):
    """tf.c's loop: one float32 add after another."""
    s = np.float32(start)
    return np.add.accumulate(np.concatenate([[s], row]).astype(np.float32), dtype=np.float32)[-1]


def adversarial_rows(n, rng):
    """(row, start) pairs, each of n terms, at the scan's edges."""
    u = np.float32(2.0 ** -24)  # half a unit of [1, 2)
    yield np.exp(rng.uniform(-20, 0, n)).astype(np.float32), 0.0  # a softmax row's exps
    ties = rng.choice(np.array([u, 3 * u, 2 * u, u / 2, 5 * u / 2, 7 * u], np.float32), n)
    yield ties, 1.0  # exact halves of a unit, both parities, from a sum of 1
    yield (2.0 ** np.minimum(np.arange(n), 120) * 2.0 ** -140).astype(np.float32), 0.0  # a new binade every term
    yield (rng.integers(0, 4, n) * 2.0 ** -149).astype(np.float32), 0.0  # zeros and subnormals
    big = np.exp(rng.uniform(-40, -20, n)).astype(np.float32)
    big[n // 2] = 1.0
    yield big, 0.0  # one term larger than the whole sum before it
    yield np.zeros(n, np.float32), 0.0
    yield np.full(n, u, np.float32), np.float32(1.0) + 2 * u  # every term a tie: from an odd sum up, then never
    yield np.full(n, 3e38, np.float32), 0.0  # the sum overflows to infinity
    for bad in (-1.0, -0.0, np.inf, np.nan):  # terms the scan refuses: the chain adds them
        row = rng.uniform(0, 1, n).astype(np.float32)
        row[n // 3] = bad
        yield row, 0.0


def check(n, heads, rng):
    cases = list(adversarial_rows(n, rng))
    rows = np.stack([row for row, _ in cases])
    starts = np.array([start for _, start in cases], np.float32)
    sums = cuda.device_array(len(cases), np.float32)
    for head in heads:
        sum_rows[len(cases), O.THREADS](cuda.to_device(rows), cuda.to_device(np.full(len(cases), n, np.int64)),
                                        cuda.to_device(starts), cuda.to_device(np.full(len(cases), head, np.int64)),
                                        sums)
        got = sums.copy_to_host()
        want = np.array([chain(start, row) for row, start in cases], np.float32)
        # the bits, but any NaN for a NaN: the GPU's NaN is its own, not the input's
        bad = np.flatnonzero((got.view(np.uint32) != want.view(np.uint32)) & ~(np.isnan(got) & np.isnan(want)))
        assert bad.size == 0, f"head {head}, case {bad[0]}: {got[bad[0]]!r} against the chain's {want[bad[0]]!r}"


@pytest.mark.skipif(not config.ENABLE_CUDASIM, reason="simulator sizes; a GPU runs GPT-2's")
def test_ordered_sum_equals_the_chain():
    check(3 * CHUNK // 2 + 5, (0, O.HEAD), np.random.default_rng(0))  # two chunks, the second ragged


@pytest.mark.gpu
def test_ordered_sum_equals_the_chain_gpt2():
    check(50257, (0, O.HEAD), np.random.default_rng(1))


def packed_reference(x, E):
    """ordered.packed's contract in exact rational arithmetic: x in units of 2^(E - 150), rounded to
    the nearest unit, or the unit below with TIE set at exactly half a unit; SAT from 2^24 units."""
    from fractions import Fraction
    v = Fraction(float(x)) / Fraction(2) ** (int(E) - 150)
    if v >= 2 ** 24:
        return int(O.SAT)
    q = v.numerator // v.denominator
    rem = v - q
    return q + 1 if rem > Fraction(1, 2) else q | int(O.TIE) if rem == Fraction(1, 2) else q


@pytest.mark.skipif(not config.ENABLE_CUDASIM, reason="calls device functions from the host: simulator only")
def test_packed_is_the_exact_rounding():
    """ordered.packed against its contract, for sums in every binade and terms
    from far below a unit to past the binade: random mantissas, exact halves of both parities,
    whole units, the last float below a half, zeros and subnormals."""
    rng = np.random.default_rng(2)
    cases = []
    for E in list(range(1, 255, 7)) + [1, 2, 23, 24, 126, 127, 150, 151, 253, 254]:
        for F in range(max(E - 33, 0), min(E + 3, 255)):
            for m in rng.integers(0, 1 << 23, 4).tolist() + [0, (1 << 23) - 1, 1 << 22, 1]:
                cases.append((np.uint32((F << 23) | m).view(np.float32), E))
        for k in range(6):  # halves: (2k + 1) / 2 units, and whole units, where a float holds them
            for units in (k + 0.5, float(k), 2.0 ** 22 + k + 0.5, 2.0 ** 23 - 0.5 - k, 2.0 ** 23 + k):
                x = np.float32(units * 2.0 ** (E - 150))
                if x > 0 and float(x) == units * 2.0 ** (E - 150):
                    cases.append((x, E))
            cases.append((np.nextafter(np.float32((k + 0.5) * 2.0 ** (E - 150)), np.float32(0)), E))
    wrong = [(x, E) for x, E in cases
             if int(O.packed(x, *O.unit_scales(np.int32(E)))) != packed_reference(x, E)]
    assert not wrong, f"{len(wrong)} of {len(cases)}: first {wrong[0][0]!r} at E {wrong[0][1]}"


def softmax_reference(logits):
    """tf.c's softmax of a row in numpy: the max (a NaN is never greater), the exps (double,
    rounded), their sum in order, the reciprocal, the products."""
    m = np.where(np.isnan(logits), np.float32(-np.inf), logits).max()
    exps = np.exp((logits - m).astype(np.float64)).astype(np.float32)
    r = np.float32(1.0) / chain(0.0, exps)
    return exps * r


def same_floats(a, b):
    """Bit for bit, except that any NaN equals any NaN (their payloads are the GPU's or numpy's)."""
    nan = np.isnan(a)
    return np.array_equal(nan, np.isnan(b)) and np.array_equal(a[~nan].view(np.uint32), b[~nan].view(np.uint32))


@pytest.mark.parametrize("kernel", ["scan", "chain"])
@pytest.mark.parametrize("scale,nan", [(1.0, False), (30.0, False), (1.0, True)],
                         ids=["logits", "wide_logits", "nan_logit"])
def test_unembedding_softmax_equals_tf_c(scale, nan, kernel):
    """launch.unembedding_softmax (the passes' kernels: the max from the unembedding's maxima, exps
    and scaling over slices of a row, the ordered sum between) and tf_unembedding_softmax_chain (tf.c's chain, its reference, one
    block a row), each on rows of logits as forward.py launches them, against the numpy loop. The
    rows start at 1, so that a kernel that took rows[0] for 0 would fail. A NaN logit in the
    last row's second chunk: tf.c's max passes over it, its exp is NaN (a term the scan refuses),
    and so is every probability of the row."""
    V = 50257 if not config.ENABLE_CUDASIM else 3 * CHUNK // 2 + 5
    T = 4 if not config.ENABLE_CUDASIM else 2
    rng = np.random.default_rng(int(scale))
    logits = (rng.standard_normal((T + 1, V)) * scale).astype(np.float32)
    if nan:
        logits[T, CHUNK + 3] = np.float32(np.nan)
    out = cuda.to_device(logits)
    rows = cuda.to_device(np.array([1, T + 1], np.int64))
    # training's copy for the backward: rows longer than the logits', as its arena pads them
    poison = np.full((T + 1, V + 3), np.float32(-7.0))
    copy = cuda.to_device(poison)
    if kernel == "scan":  # after the unembedding's maxima of its blocks of columns (here 7 wide)
        width = 7
        blocks = -(-V // width)
        tops = np.full((T + 1, blocks + 1), np.float32(np.nan))  # row 0 and the spare column: never read
        for q in range(blocks):  # as the epilogue takes them: a NaN is never greater
            block = logits[1:, q * width:(q + 1) * width]
            tops[1:, q] = np.where(np.isnan(block), np.float32(-np.inf), block).max(axis=1)
        launch.unembedding_softmax(out, rows, T, cuda.to_device(tops), blocks, cuda.device_array(T, np.float32), copy)
    else:
        launch.blocks(K.tf_unembedding_softmax_chain, T, K.SOFTMAX_THREADS, 0, out, rows)
    got = out.copy_to_host()
    assert np.array_equal(got[0].view(np.uint32), logits[0].view(np.uint32))  # not one of the rows
    for i in range(1, T + 1):
        assert same_floats(got[i], softmax_reference(logits[i])), i
    if kernel == "scan":  # the copy: the probabilities, bit for bit, and nothing past them or outside the rows
        copied = copy.copy_to_host()
        assert same_floats(copied[1:, :V], got[1:])
        assert np.array_equal(copied[0], poison[0]) and np.array_equal(copied[:, V:], poison[:, V:])
