"""One kernel per tf.c routine or loop nest, each thread owning whole output elements.

The matrix-shaped loop nests (tf_fc, tf_fc_back, the unembedding and its backward) stand here as
the plain loops they are in the C, one thread per output: the faithful kernels, which the passes
do not launch. The passes run matmul.py's register-tiled kernels instead, which sum every output
in the same order; tests/tf/test_tf_matmul.py holds each tiled kernel equal to its faithful one,
bit for bit.

Element-wise kernels walk their elements in a grid-stride loop: on the GPU the launch gives at
most one thread per element, in the simulator one thread walks them all (see launch.py).

tf.c's numbers depend on the order of every float32 accumulation, so a thread computes one
output's sum alone, in the C loop's order: dot products start from the bias (or 0) with k
ascending, gradient sums run over samples i ascending, input gradients over outputs ascending.
Nothing is split across threads; what speeds a sum up is keeping its loads in flight ahead of
its chain of adds (sequential_mad from global memory, staged_sum and staged_dot from shared
memory) and computing around it in parallel. One sum is the exception: the softmax's sum of
exps, whose terms are never negative, is scanned by its block with every rounding of the chain
reproduced (ordered.py); tf_unembedding_softmax_chain keeps the chain as its reference.
Statements that tf.c's fma build fuses are written `mad(fused, ...)`; every other product is
`mul` (see fp.py).

Shapes follow tf.c's comments: (v: rows, u: columns), row-major, Conv1D weights (in, out).
`T` is the number of samples (input_size); arrays may have more rows (d_seq), never read. The
forward kernels compute the rows `rows[0] <= i < rows[0] + n`, where `rows` is a range in device
memory: all T rows in training, or, in the decode step, the one new row, which the device itself
advances from token to token (generate.py).
"""
import functools
import math

import numpy as np
from numba import config, cuda

from cudakit.asynccopy import commit, copy_async, wait
from cudakit.devmath import mad, mul, sqrtf
from cudakit.vector import SHARED_ALIGN, vector_load

from . import ordered
from .fp import EXP2_16, erff, expf, expf_or_nan, logf

f32 = np.float32
SQRT1_2 = f32(math.sqrt(0.5))  # (float)M_SQRT1_2
R_SQRT_2PI = f32(1.0) / np.sqrt(f32(2.0) * f32(math.pi))  # 1.0f / sqrtf(2.0f * (float)M_PI)
HALF = f32(0.5)
ONE = f32(1.0)
ZERO = f32(0.0)
EPS = f32(1e-5)

# Block geometry. It decides which thread computes an output, never the order of a sum, so
# results do not depend on it; the simulator (a Python thread per CUDA thread) gets small blocks.
if config.ENABLE_CUDASIM:
    LN_THREADS, LN_BACK_THREADS, ARGMAX_THREADS = 8, 8, 8
    LOSS_THREADS = 4  # fewer than a test's samples: a thread takes several
    SOFTMAX_CHUNK = 4 * ordered.WINDOW  # exps staged in shared memory for the ordered sum
else:
    # tf_ln's block holds a thread per feature (GPT-2's 768), so each of its loops is one round
    # trip to memory: 13.3 us a launch under ncu, against 15.0 us with 128 threads (different
    # validate runs, nofma and fma). tf_ln_back measured slower so (20.6 us against 17.4) and
    # keeps 128.
    LN_THREADS, LN_BACK_THREADS, ARGMAX_THREADS = 1024, 128, 1024
    LOSS_THREADS = 256  # tf_loss's samples a round: T = 64 in one
    SOFTMAX_CHUNK = ordered.WINDOW  # exps staged in shared memory for the ordered sum (32 KiB)
SOFTMAX_THREADS, SOFTMAX_WARPS = ordered.THREADS, ordered.WARPS  # the unembedding softmax's block: the ordered sum's


def softmax_options(threads):
    """The softmax kernels' compile options for a block of `threads`: registers capped so that the
    block always launches (ptxas, sm_90, uncapped: tf_unembedding_softmax took 209 a thread with
    runs of 32 terms, 90 with the runs of 16 it has now); the simulator takes no such option."""
    return {} if config.ENABLE_CUDASIM else {"max_registers": min(255, 65536 // threads)}


SOFTMAX_OPTIONS = softmax_options(SOFTMAX_THREADS)
# tf_unembedding_softmax_chain's two exp buffers, and the threads [0, CHAIN_WARP) that leave the
# exps to the others (thread 0 adds)
CHAIN_CHUNK, CHAIN_WARP = (32, 1) if config.ENABLE_CUDASIM else (4096, 32)
SOFTMAX_LOADS = 16  # loads in flight a thread of the unembedding softmax's kernels
# The softmax's scaling (tf_unembedding_scale) runs as blocks of SOFTMAX_PASS_THREADS over at
# most SOFTMAX_PARTS slices of a row, so that it reaches every multiprocessor; the exps and their
# ordered sum (tf_unembedding_softmax) keep a block a row. The max is the unembedding's (its "max"
# epilogue, matmul.py).
SOFTMAX_PASS_THREADS, SOFTMAX_PARTS = (8, 2) if config.ENABLE_CUDASIM else (256, 16)
assert SOFTMAX_CHUNK <= SOFTMAX_THREADS * SOFTMAX_LOADS, "a chunk of exps is one load a thread's SOFTMAX_LOADS"
SOFTMAX_SLOTS = ordered.slots(SOFTMAX_CHUNK)  # the staged chunk's shared memory, spare floats and all
SOFTMAX_SLOT_STEP = ordered.slots(SOFTMAX_THREADS)  # from term v's slot to term v + SOFTMAX_THREADS's


@cuda.jit
def tf_memset(out, value):
    """memset of a flat float array (value 0, or a poison pattern for scratch)."""
    for i in range(cuda.grid(1), out.shape[0], cuda.gridsize(1)):
        out[i] = value


@cuda.jit
def tf_embedding(wte, wpe, tokens, out, rows, n):
    """out[i] = wte[tokens[i]] + wpe[i]."""
    D = out.shape[1]
    first = rows[0]
    for idx in range(cuda.grid(1), n * D, cuda.gridsize(1)):
        i, k = first + idx // D, idx % D
        out[i, k] = wte[tokens[i], k] + wpe[i, k]


@cuda.jit
def tf_add(in_1, in_2, out, rows, n):
    D = out.shape[1]
    first = rows[0]
    for idx in range(cuda.grid(1), n * D, cuda.gridsize(1)):
        i, k = first + idx // D, idx % D
        out[i, k] = in_1[i, k] + in_2[i, k]


@cuda.jit
def tf_fc(weight, bias, inp, out, T, fused):
    """out[i, j] = bias[j], then `*out += *in * *weight` over k ascending. Faithful (see above)."""
    N = out.shape[1]
    for idx in range(cuda.grid(1), T * N, cuda.gridsize(1)):
        i, j = idx // N, idx % N
        acc = bias[j]
        for k in range(weight.shape[0]):
            acc = mad(fused, inp[i, k], weight[k, j], acc)
        out[i, j] = acc


@cuda.jit
def tf_fc_back(weight, inp, dL_dout, dL_dweight, dL_dbias, dL_din, T, fused):
    """The three sets of sums tf.c interleaves: dL_dweight[k, j] and dL_dbias[j] accumulate over
    samples i ascending, dL_din[i, k] is a fresh dot over outputs j ascending. Faithful."""
    K, N = weight.shape
    for idx in range(cuda.grid(1), K * N + N + T * K, cuda.gridsize(1)):
        if idx < K * N:
            k, j = idx // N, idx % N
            acc = dL_dweight[k, j]
            for i in range(T):
                acc = mad(fused, dL_dout[i, j], inp[i, k], acc)
            dL_dweight[k, j] = acc
        elif idx < K * N + N:
            j = idx - K * N
            acc = dL_dbias[j]
            for i in range(T):
                acc += dL_dout[i, j]
            dL_dbias[j] = acc
        else:
            i, k = (idx - K * N - N) // K, (idx - K * N - N) % K
            dot = ZERO
            for j in range(N):
                dot = mad(fused, dL_dout[i, j], weight[k, j], dot)
            dL_din[i, k] = dot


UNROLL = 8  # loads a thread keeps in flight in an ordered sum
ATTN_LANES = 8 if config.ENABLE_CUDASIM else 32  # threads per attention softmax row
ATTN_THREADS = 4 if config.ENABLE_CUDASIM else 64  # threads per tf_attn block: a key and an output each at d_k 64
ATTN_T_MAX = 1024  # the longest attention row the softmax kernels stage in shared memory
# tf_attn's staging buffer, in floats: at GPT-2's heads (rows of 68 floats when wide) the query and
# 64 keys, or 65 values, a chunk, so that T = 64 takes one chunk of each (with 61 keys a chunk the
# last queries, the blocks the launch waits for, took two); at least two rows of the widest head
# (d_model <= LN_D_MAX). The simulator stages two rows a chunk, so that its small shapes take several
ATTN_KV = 65 * 68
ATTN_CHUNK_ROWS = 2 if config.ENABLE_CUDASIM else ATTN_T_MAX
wait_all = wait(0)  # every copy of this thread's has landed
copy1, copy4 = copy_async(1), copy_async(4)  # 4 or 16 bytes, global to shared memory
load4 = vector_load(4, 1)
U = np.uint64  # unsigned indices: Numba adds no negative-index fix-up to them
LN_D_MAX = 2048  # the widest d_model the layer norms stage in shared memory
LN_STAGED = 2 * LN_D_MAX  # two staged vectors (a compile-time constant for cuda.shared.array)
LN_PER_THREAD = -(-LN_D_MAX // LN_THREADS)  # the features a tf_ln thread owns
assert ATTN_KV >= 2 * (LN_D_MAX + 4), "tf_attn stages two rows of the widest head at least"


@cuda.jit(device=True)
def term(total, a, b, scale, scaled, fused):
    """One step of a dot-product chain: total + a * b, or total + (a * b) * scale when `scaled`
    (tf.c's `(dL_ds * *k) * rsqrt_d_k` terms: the product rounded, then fused with scale)."""
    if scaled:
        return mad(fused, mul(a, b), scale, total)
    return mad(fused, a, b, total)


@cuda.jit(device=True)
def sequential_mad(total, x, y, n, scale, scaled, fused):
    """total + the terms of x[k] and y[k] (see term) for k ascending, in float32, from global
    memory. Software-pipelined: the loads of the next UNROLL steps are issued before the adds of
    the current ones, so memory latency hides behind the chain of adds."""
    cur_x = cuda.local.array(UNROLL, np.float32)
    cur_y = cuda.local.array(UNROLL, np.float32)
    nxt_x = cuda.local.array(UNROLL, np.float32)
    nxt_y = cuda.local.array(UNROLL, np.float32)
    k = 0
    if n >= UNROLL:
        for u in range(UNROLL):
            cur_x[u] = x[u]
            cur_y[u] = y[u]
        k = UNROLL
        while k + UNROLL <= n:
            for u in range(UNROLL):
                nxt_x[u] = x[k + u]
                nxt_y[u] = y[k + u]
            for u in range(UNROLL):
                total = term(total, cur_x[u], cur_y[u], scale, scaled, fused)
                cur_x[u] = nxt_x[u]
                cur_y[u] = nxt_y[u]
            k += UNROLL
        for u in range(UNROLL):
            total = term(total, cur_x[u], cur_y[u], scale, scaled, fused)
    while k < n:
        total = term(total, x[k], y[k], scale, scaled, fused)
        k += 1
    return total


STAGED_UNROLL = np.uint64(32)  # steps of a staged chain between loop tests
U1 = np.uint64(1)


@cuda.jit(device=True)
def staged_dot(total, x, x0, x_step, y, y0, y_step, n, fused):
    """total + x[x0 + k * x_step] * y[y0 + k * y_step] for k < n ascending (mad: fused or not): a
    chain over values staged in shared memory. STAGED_UNROLL steps have one address plus constants
    (unsigned offsets: no negative-index fix-up), so the GPU compiler issues their loads ahead of
    the chain, vectorised where they are contiguous: a step costs about the add's latency (2.5 ns
    on the H200, tools/experiments/chain_probe.py)."""
    k = np.uint64(0)
    n = np.uint64(n)
    while k + STAGED_UNROLL <= n:
        for u in range(STAGED_UNROLL):
            total = mad(fused, x[x0 + (k + np.uint64(u)) * x_step], y[y0 + (k + np.uint64(u)) * y_step], total)
        k += STAGED_UNROLL
    while k < n:
        total = mad(fused, x[x0 + k * x_step], y[y0 + k * y_step], total)
        k += U1
    return total


@cuda.jit(device=True)
def staged_sum(total, x, x0, n):
    """total + x[x0] + x[x0 + 1] + ... (n values) in order, in float32, as staged_dot."""
    k = np.uint64(0)
    n = np.uint64(n)
    while k + STAGED_UNROLL <= n:
        for u in range(STAGED_UNROLL):
            total += x[x0 + k + np.uint64(u)]
        k += STAGED_UNROLL
    while k < n:
        total += x[x0 + k]
        k += U1
    return total


@cuda.jit(device=True)
def staged_squared_differences(total, x, m, n, fused):
    """total + (x[k] - m) * (x[k] - m) for k < n ascending (mad: fused or not), as staged_dot:
    tf_ln's variance, each difference rounded on its own as tf.c's `diff` is."""
    k = np.uint64(0)
    n = np.uint64(n)
    while k + STAGED_UNROLL <= n:
        for u in range(STAGED_UNROLL):
            d = x[k + np.uint64(u)] - m
            total = mad(fused, d, d, total)
        k += STAGED_UNROLL
    while k < n:
        d = x[k] - m
        total = mad(fused, d, d, total)
        k += U1
    return total


@cuda.jit
def tf_ln(weight, bias, inp, r_std, mean, out, rows, fused):
    """Layer norm, one block per sample from rows[0]: the block stages the row in shared memory,
    one thread sums it in tf.c's order (the mean, then the squared differences, each difference
    taken as its term is added), every thread writes outputs from its own differences. Each
    thread loads its features, weights and biases at the start, so that their latency hides
    behind the two sums."""
    i = rows[0] + cuda.blockIdx.x
    t = cuda.threadIdx.x
    D = inp.shape[1]
    row = cuda.shared.array(LN_D_MAX, np.float32)
    stats = cuda.shared.array(2, np.float32)
    x = cuda.local.array(LN_PER_THREAD, np.float32)
    w = cuda.local.array(LN_PER_THREAD, np.float32)
    b = cuda.local.array(LN_PER_THREAD, np.float32)
    for r in range(LN_PER_THREAD):
        k = t + r * LN_THREADS
        if k < D:
            x[r] = inp[i, k]
            row[k] = x[r]
            w[r] = weight[k]
            b[r] = bias[k]
    cuda.syncthreads()
    if t == 0:
        m = staged_sum(ZERO, row, np.uint64(0), D) / f32(D)
        variance = staged_squared_differences(ZERO, row, m, D, fused) / f32(D)
        r_s = ONE / sqrtf(variance + EPS)
        stats[0] = m
        stats[1] = r_s
        mean[i] = m
        r_std[i] = r_s
    cuda.syncthreads()
    m, r_s = stats[0], stats[1]
    for r in range(LN_PER_THREAD):
        k = t + r * LN_THREADS
        if k < D:
            n = mul(x[r] - m, r_s)
            out[i, k] = mad(fused, n, w[r], b[r])


@cuda.jit
def tf_ln_back(weight, inp, r_std, mean, dL_dout, dL_dweight, dL_dbias, dL_din, T, fused, res, extra, add):
    """tf_ln_back. Blocks [0, T) take one sample each: the block stages dL/din_norm and in_norm
    in shared memory, the first and the last thread (different warps, so the two chains run
    side by side) form the two partial sums in order, every thread writes input gradients.
    The blocks after them own the weight and bias gradients (ln_back_parameters). With `add`,
    each input gradient also goes into the tf_add that tf.c runs next: extra = res + it."""
    t = cuda.threadIdx.x
    D = inp.shape[1]
    staged = cuda.shared.array(LN_STAGED, np.float32)  # D values dL/din_norm, then D in_norm
    if cuda.blockIdx.x >= T:
        ln_back_parameters(inp, r_std, mean, dL_dout, dL_dweight, dL_dbias, T, fused, staged, t,
                           cuda.blockIdx.x - T)
        return
    i = cuda.blockIdx.x
    r, m = r_std[i], mean[i]
    partial = cuda.shared.array(2, np.float32)
    for k in range(t, D, LN_BACK_THREADS):
        staged[k] = mul(dL_dout[i, k], weight[k])
        staged[D + k] = mul(inp[i, k] - m, r)
    cuda.syncthreads()
    if t == 0:
        partial[0] = staged_sum(ZERO, staged, np.uint64(0), D) / f32(D)
    if t == LN_BACK_THREADS - 1:
        partial[1] = staged_dot(ZERO, staged, np.uint64(0), U1, staged, np.uint64(D), U1, D, fused) / f32(D)
    cuda.syncthreads()
    mean_partial, var_partial = partial[0], partial[1]
    for k in range(t, D, LN_BACK_THREADS):
        acc = ZERO + staged[k]
        acc -= mean_partial
        acc = mad(fused, -var_partial, staged[D + k], acc)
        v = mul(acc, r)
        dL_din[i, k] = v
        if add:
            extra[i, k] = res[i, k] + v


# tf_ln_back's parameter blocks: LN_BACK_FEATURES features a block, whose threads load
# LN_BACK_SAMPLES samples of them at a time in LN_BACK_GROUPS interleaved groups, each thread's
# loads in flight together, into two tiles of `staged`; then one group adds the weight
# gradients' chains from the tiles, and another the bias gradients'. The simulator stages few
# samples at a time, so that its small shapes take several rounds
LN_BACK_GROUPS = 2 if config.ENABLE_CUDASIM else 4
LN_BACK_FEATURES = LN_BACK_THREADS // LN_BACK_GROUPS
LN_BACK_SAMPLES = 4 if config.ENABLE_CUDASIM else LN_STAGED // (2 * LN_BACK_FEATURES)
LN_BACK_LOADS = LN_BACK_SAMPLES // LN_BACK_GROUPS  # samples a thread loads at a time
assert 2 * LN_BACK_SAMPLES * LN_BACK_FEATURES <= LN_STAGED and LN_BACK_GROUPS >= 2


def ln_back_parameter_blocks(D):
    """The parameter blocks tf_ln_back's launch adds after its T sample blocks."""
    return -(-D // LN_BACK_FEATURES)


@cuda.jit(device=True)
def ln_back_parameters(inp, r_std, mean, dL_dout, dL_dweight, dL_dbias, T, fused, staged, t, block):
    """Block `block`'s features' weight and bias gradients: sums over samples i ascending from
    the zeroed gradient, of dL_dout * in_norm and of dL_dout. A thread a feature with UNROLL
    loads in flight waited on memory eight times in a 64-sample sum, and these blocks made
    tf_ln_back 17.7 us under ncu, where its sample blocks take 10.2."""
    D = inp.shape[1]
    f, g = t % LN_BACK_FEATURES, t // LN_BACK_FEATURES
    k = block * LN_BACK_FEATURES + f
    TILE = LN_BACK_SAMPLES * LN_BACK_FEATURES  # where the in_norm tile starts
    dout = cuda.local.array(LN_BACK_LOADS, np.float32)
    x = cuda.local.array(LN_BACK_LOADS, np.float32)
    dw = ZERO
    db = ZERO
    for i0 in range(0, T, LN_BACK_SAMPLES):
        if k < D:
            for u in range(LN_BACK_LOADS):
                i = i0 + g + u * LN_BACK_GROUPS
                if i < T:
                    dout[u] = dL_dout[i, k]
                    x[u] = mul(inp[i, k] - mean[i], r_std[i])
            for u in range(LN_BACK_LOADS):
                s = (g + u * LN_BACK_GROUPS) * LN_BACK_FEATURES + f
                staged[s] = dout[u]
                staged[TILE + s] = x[u]
        cuda.syncthreads()
        if k < D and g < 2:
            for s in range(min(LN_BACK_SAMPLES, T - i0)):
                at = s * LN_BACK_FEATURES + f
                if g == 0:
                    dw = mad(fused, staged[at], staged[TILE + at], dw)
                else:
                    db += staged[at]
        cuda.syncthreads()  # the tiles are read before the next samples are staged over them
    if k < D:
        if g == 0:
            dL_dweight[k] = dw
        elif g == 1:
            dL_dbias[k] = db


@cuda.jit
def tf_attn_scores(c_attn, softmax, rows, n, n_keys, d_k, rsqrt_d_k, fused):
    """softmax[h, q, k] = (q_q . k_k) * rsqrt_d_k for k <= q, the dot over d ascending; n_keys
    bounds the keys of the last row (a bound is enough: the rest are skipped)."""
    H = softmax.shape[0]
    D = H * d_k
    first = rows[0]
    for idx in range(cuda.grid(1), H * n * n_keys, cuda.gridsize(1)):
        h, q_i, k_i = idx // (n * n_keys), first + idx // n_keys % n, idx % n_keys
        if k_i <= q_i:
            c = h * d_k
            dot = sequential_mad(ZERO, c_attn[q_i, c:c + d_k], c_attn[k_i, D + c:D + c + d_k], d_k, ONE, False, fused)
            softmax[h, q_i, k_i] = mul(dot, rsqrt_d_k)


@cuda.jit(device=True)
def staged_softmax(p, n, t, threads, part):
    """p[0:n] (shared memory) becomes its softmax in place, as tf.c computes it: the max (exact in
    any order: each of the block's `threads` threads takes every threads-th value, `part` holds
    their maxima), the exps, their sum in order by thread 0, and each exp times the sum's
    reciprocal. Every thread returns after a barrier, so that all of p may be read. Indices are
    unsigned: with signed ones every thread's scan of `part` spent most of its instructions fixing
    up negative indices (42 % of tf_attn's, ncu 2026-12-03)."""
    t, n, threads = np.uint64(t), np.uint64(n), np.uint64(threads)
    m = f32(-np.inf)
    for k in range(t, n, threads):
        if p[k] > m:
            m = p[k]
    part[t] = m
    cuda.syncthreads()
    softmax_max = part[0]
    j = U1
    while j < threads:
        if part[j] > softmax_max:
            softmax_max = part[j]
        j += U1
    for k in range(t, n, threads):
        p[k] = expf(p[k] - softmax_max)
    cuda.syncthreads()  # also: every thread has read part before thread 0 reuses it
    if t == 0:
        part[0] = ONE / staged_sum(ZERO, p, np.uint64(0), n)
    cuda.syncthreads()
    r_softmax_sum = part[0]
    for k in range(t, n, threads):
        p[k] = mul(p[k], r_softmax_sum)
    cuda.syncthreads()


@cuda.jit
def tf_attn_softmax(softmax, rows, n):
    """Block h * n + q - rows[0] owns row (head h, query q), keys k <= q: staged in shared memory,
    its softmax (staged_softmax) by the block's lanes, written back."""
    h, q_i = cuda.blockIdx.x // n, rows[0] + cuda.blockIdx.x % n
    lane = cuda.threadIdx.x
    row = softmax[h, q_i]
    n = q_i + 1
    p = cuda.shared.array(ATTN_T_MAX, np.float32)
    part = cuda.shared.array(ATTN_LANES, np.float32)
    for k in range(lane, n, ATTN_LANES):
        p[k] = row[k]
    staged_softmax(p, n, lane, ATTN_LANES, part)
    for k in range(lane, n, ATTN_LANES):
        row[k] = p[k]


@cuda.jit
def tf_attn_z(c_attn, softmax, z, rows, n, d_k, fused):
    """z[q, h*d_k + d] = sum over v <= q ascending of softmax[h, q, v] * v_v[d], from 0."""
    D = z.shape[1]
    first = rows[0]
    for idx in range(cuda.grid(1), n * D, cuda.gridsize(1)):
        q_i, c = first + idx // D, idx % D
        h = c // d_k
        n = q_i + 1
        z[q_i, c] = sequential_mad(ZERO, softmax[h, q_i, :n], c_attn[:n, 2 * D + c], n, ONE, False, fused)


def staged_row_geometry(d_k, wide):
    """(S, KEYS, VALUES) of tf_attn's staging buffer for heads of d_k: a staged row's stride, 16
    bytes aligned when wide, which puts 8 consecutive rows' vectors in distinct banks at GPT-2's
    64, else odd at even d_k, so that a warp's scalar loads down a column do not collide; the rows
    a chunk holds after the one row staged first; the rows a chunk holds alone."""
    S = d_k + 4 if wide else d_k + 1
    return S, min(ATTN_CHUNK_ROWS, ATTN_KV // S - 1), min(ATTN_CHUNK_ROWS, ATTN_KV // S)


@functools.cache
def staged_dots(d_k, wide):
    """A device function, for heads of d_k: out[r] = x[x_row, x_col:x_col + d_k] . y[r, y_col:y_col
    + d_k] for r < n, each dot over d ascending from 0 (times `scale` when `scaled`, rounded
    after the dot), by the block's ATTN_THREADS threads, a row each. The row of x, then a chunk of
    y's rows at a time, are copied into kv (shared memory: ATTN_KV floats) with their copies in
    flight together, and read there 4 steps at a time when wide (stage_rows). Ends with a barrier
    after its last read of kv."""
    S, KEYS, _ = staged_row_geometry(d_k, wide)
    S_U = np.uint64(S)

    @cuda.jit(device=True)
    def dots(x, x_row, x_col, y, n, y_col, scale, scaled, out, kv, t, fused):
        stage_rows(x, kv, np.uint64(0), x_row, 1, np.uint64(x.shape[1]), x_col, S, d_k, t, wide)
        ld = np.uint64(y.shape[1])
        for k0 in range(0, n, KEYS):
            rn = min(KEYS, n - k0)
            stage_rows(y, kv, S_U, k0, rn, ld, y_col, S, d_k, t, wide)
            commit()
            wait_all()
            cuda.syncthreads()
            for k in range(t, rn, ATTN_THREADS):
                y_at = np.uint64(k + 1) * S_U
                if wide:
                    dot = vector_dot(ZERO, kv, np.uint64(0), kv, y_at, d_k, fused)
                else:
                    dot = staged_dot(ZERO, kv, np.uint64(0), U1, kv, y_at, U1, d_k, fused)
                out[k0 + k] = mul(dot, scale) if scaled else dot
            cuda.syncthreads()  # the chunk is read before the next is copied over it

    return dots


@functools.cache
def tf_attn(d_k, wide):
    """The body of tf.c's loop over heads and queries, for heads of d_k and (head h, query q) a
    block (block h * n + q - rows[0]): tf_attn_scores, tf_attn_softmax and tf_attn_z in one
    launch, every value computed as those kernels compute it (the threads own keys, then
    staged_softmax, then the threads own outputs). The query, the keys and then the values are
    copied into shared memory a chunk of rows at a time, the copies of a chunk in flight together
    (reading its own key row from global memory, each thread waited on load after load, at 32
    cache lines a warp load). The values' first chunk flies during the softmax. `wide`
    (launch.attn: d_k and the rows' starts multiples of 4 floats) copies 16 bytes at a time and
    reads the keys 4 steps at a time. The passes launch it for many rows; the decode step's one
    row goes to the three kernels, which spread its keys and outputs over more threads.

    Built for one d_k (a kernel per head width, cached): the staged rows' stride and the chunks'
    lengths are then constants, and every shared load an address plus a constant offset. With them
    as arguments the kernel issued 3,210 instructions a warp, and waiting on fixed-latency results
    (its index arithmetic among them) was its largest stall
    (docs/results/2026-12-02-h200-warp/ncu_stalls_before.txt); built so, it has 80 registers
    against 124 and a third fewer SASS instructions."""
    S, _, VALUES = staged_row_geometry(d_k, wide)
    S_U = np.uint64(S)
    scores = staged_dots(d_k, wide)

    def kernel(c_attn, softmax, z, rows, n, rsqrt_d_k, fused):
        h, q_i = cuda.blockIdx.x // n, rows[0] + cuda.blockIdx.x % n
        t = cuda.threadIdx.x
        D = softmax.shape[0] * d_k
        ld = np.uint64(c_attn.shape[1])
        c = np.uint64(h * d_k)
        n_k = q_i + 1
        row = softmax[h, q_i]
        p = cuda.shared.array(ATTN_T_MAX, np.float32)  # the scores, their exps, the probabilities
        part = cuda.shared.array(ATTN_THREADS, np.float32)
        kv = cuda.shared.array(ATTN_KV, np.float32, alignment=SHARED_ALIGN)  # the query and keys, later values
        zs = cuda.shared.array(LN_D_MAX, np.float32)  # z's partial sums
        scores(c_attn, q_i, c, c_attn, n_k, np.uint64(D) + c, rsqrt_d_k, True, p, kv, t, fused)
        v_col = np.uint64(2 * D) + c
        stage_rows(c_attn, kv, np.uint64(0), 0, min(VALUES, n_k), ld, v_col, S, d_k, t, wide)
        commit()
        staged_softmax(p, n_k, t, ATTN_THREADS, part)
        for k in range(t, n_k, ATTN_THREADS):
            row[k] = p[k]
        for d in range(t, d_k, ATTN_THREADS):
            zs[d] = ZERO
        for v0 in range(0, n_k, VALUES):
            rn = min(VALUES, n_k - v0)
            wait_all()
            cuda.syncthreads()
            for d in range(t, d_k, ATTN_THREADS):
                zs[d] = staged_dot(zs[d], p, np.uint64(v0), U1, kv, np.uint64(d), S_U, rn, fused)
            if v0 + VALUES < n_k:
                cuda.syncthreads()  # the chunk is read before the next is copied over it
                stage_rows(c_attn, kv, np.uint64(0), v0 + VALUES, min(VALUES, n_k - v0 - VALUES), ld, v_col, S,
                           d_k, t, wide)
                commit()
        for d in range(t, d_k, ATTN_THREADS):
            z[q_i, c + np.uint64(d)] = zs[d]

    kernel.__name__ = kernel.__qualname__ = "tf_attn"  # the C loop's
    return cuda.jit(kernel)


@cuda.jit(device=True)
def stage_rows(c_attn, kv, dst, r0, rn, ld, col, S, d_k, t, wide):
    """tf_attn's copies of c_attn[r0 + r, col:col + d_k] into kv[dst + r * S:] for r < rn, by
    the block's threads: 4 floats a copy when wide, else 1. A thread's place in a row is worked out
    once, so each copy costs an add or two."""
    w = 4 if wide else 1
    per_row = d_k // w
    if per_row <= ATTN_THREADS:
        rows_at_once = ATTN_THREADS // per_row
        r = t // per_row
        if r < rows_at_once:
            o = np.uint64((t - r * per_row) * w)
            d_at = dst + np.uint64(r * S) + o
            s_at = np.uint64(r0 + r) * ld + col + o
            d_step, s_step = np.uint64(rows_at_once * S), np.uint64(rows_at_once) * ld
            while r < rn:
                if wide:
                    copy4(kv, d_at, c_attn, s_at, 4)
                else:
                    copy1(kv, d_at, c_attn, s_at, 1)
                r += rows_at_once
                d_at += d_step
                s_at += s_step
    else:  # a head wider than the block's copies
        for r in range(rn):
            for v in range(t, per_row, ATTN_THREADS):
                o = np.uint64(v * w)
                if wide:
                    copy4(kv, dst + np.uint64(r * S) + o, c_attn, np.uint64(r0 + r) * ld + col + o, 4)
                else:
                    copy1(kv, dst + np.uint64(r * S) + o, c_attn, np.uint64(r0 + r) * ld + col + o, 1)


VECTOR_DOT_RUN = 8  # vectors of 4 steps a vector_dot iteration loads before its steps
VECTOR_DOT_STEPS = 4 * VECTOR_DOT_RUN


@cuda.jit(device=True)
def vector_dot(total, x, x0, y, y0, n, fused):
    """staged_dot's sum at steps of 1 (total + x[x0 + k] * y[y0 + k], k < n ascending), reading 4
    steps of each at a time: x0, y0 and n multiples of 4, x and y 16-byte aligned shared arrays."""
    xv = cuda.local.array(VECTOR_DOT_STEPS, np.float32)
    yv = cuda.local.array(VECTOR_DOT_STEPS, np.float32)
    k = np.uint64(0)
    n = np.uint64(n)
    RUN = np.uint64(VECTOR_DOT_STEPS)
    while k + RUN <= n:
        for u in range(VECTOR_DOT_RUN):
            load4(xv, U(4 * u), x, x0 + k + U(4 * u))
            load4(yv, U(4 * u), y, y0 + k + U(4 * u))
        for u in range(VECTOR_DOT_STEPS):
            total = mad(fused, xv[u], yv[u], total)
        k += RUN
    while k < n:
        load4(xv, U(0), x, x0 + k)
        load4(yv, U(0), y, y0 + k)
        for u in range(4):
            total = mad(fused, xv[u], yv[u], total)
        k += U(4)
    return total


@cuda.jit(device=True)
def gelu(x):
    """tf_gelu's element: x * phi(x), phi = 0.5f * (1.0f + erff(x * M_SQRT1_2))."""
    phi = mul(HALF, ONE + erff(mul(x, SQRT1_2)))
    return mul(x, phi)


@cuda.jit
def tf_gelu(inp, out, rows, n):
    N = out.shape[1]
    first = rows[0]
    for idx in range(cuda.grid(1), n * N, cuda.gridsize(1)):
        i, k = first + idx // N, idx % N
        out[i, k] = gelu(inp[i, k])


@cuda.jit
def tf_unembedding(wte, ln_f, out, rows, fused):
    """The unembedding's dot products: out[i, v] = 0, then `dot += *weight * *in` over d ascending,
    for rows rows[0] <= i < rows[1] (training: all; generation: the last). Faithful."""
    V, D = wte.shape
    first = rows[0]
    for idx in range(cuda.grid(1), (rows[1] - first) * V, cuda.gridsize(1)):
        i, v = first + idx // V, idx % V
        dot = ZERO
        for d in range(D):
            dot = mad(fused, wte[v, d], ln_f[i, d], dot)
        out[i, v] = dot


@cuda.jit(device=True)
def slice_max(row, lo, hi, t, threads):
    """The largest of thread t's share of row[lo:hi] (every threads-th value), SOFTMAX_LOADS loads
    in flight: the row is 50,257 floats and many blocks read the logits at once, so one load at a
    time would wait on each."""
    got = cuda.local.array(SOFTMAX_LOADS, np.float32)
    m = f32(-np.inf)
    for v0 in range(lo + t, hi, threads * SOFTMAX_LOADS):
        for u in range(SOFTMAX_LOADS):
            v = v0 + u * threads
            got[u] = row[v] if v < hi else f32(-np.inf)
        for u in range(SOFTMAX_LOADS):
            if got[u] > m:
                m = got[u]
    return m


@cuda.jit(device=True)
def largest(x, start, n):
    """The largest of x[start:start + n], n >= 1, read in turn by one thread: a block's partial
    maxima (a max is exact in any order)."""
    top = x[start]
    for c in range(1, n):
        if x[start + c] > top:
            top = x[start + c]
    return top


@cuda.jit(device=True)
def row_max(row, V, t, partial):
    """The largest of row[0:V] (exact in any order): each of the block's SOFTMAX_THREADS threads
    takes its share (slice_max), then thread 0 takes the largest of theirs. Every thread gets it."""
    partial[t] = slice_max(row, 0, V, t, SOFTMAX_THREADS)
    cuda.syncthreads()
    if t == 0:
        partial[0] = largest(partial, 0, SOFTMAX_THREADS)
    cuda.syncthreads()
    return partial[0]


@cuda.jit(device=True)
def row_exps(row, chunk, c0, n, t, threads, softmax_max, got):
    """tf.c's exps of row[c0:c0 + n], each written back to the row and to chunk[0:n] (shared
    memory, for the sum): thread t of `threads` takes every threads-th value, SOFTMAX_LOADS
    loads in flight."""
    for v0 in range(t, n, threads * SOFTMAX_LOADS):
        for u in range(SOFTMAX_LOADS):
            v = v0 + u * threads
            got[u] = row[c0 + v] if v < n else ZERO
        for u in range(SOFTMAX_LOADS):
            v = v0 + u * threads
            if v < n:
                e = expf(got[u] - softmax_max)
                row[c0 + v] = e
                chunk[v] = e


@cuda.jit(device=True)
def row_scale(row, V, t, softmax_exp_sum, partial):
    """tf.c's last softmax loop: each exp in row[0:V] times 1.0f / the sum (thread 0's division,
    shared through partial[1]), by slice_pass over the whole row."""
    if t == 0:
        partial[1] = ONE / softmax_exp_sum
    cuda.syncthreads()
    slice_pass(row, 0, V, t, SOFTMAX_THREADS, partial[1], row, False)


@cuda.jit(device=True)
def block_max(m, t, part, threads):
    """The largest of the block's `threads` threads' m (exact in any order; none NaN), halved in
    shared memory, for every thread."""
    part[t] = m
    cuda.syncthreads()
    n = threads
    while n > 1:
        half = (n + 1) // 2
        if t < n - half and part[t + half] > part[t]:
            part[t] = part[t + half]
        cuda.syncthreads()
        n = half
    return part[0]


@cuda.jit(device=True)
def softmax_slice(V, parts, j):
    """[lo, hi) of slice j of a row of V split into `parts`."""
    L = -(-V // parts)
    return min(V, j * L), min(V, (j + 1) * L)


@cuda.jit(device=True)
def slice_pass(row, lo, hi, t, threads, value, copy, copying):
    """tf.c's scaling of thread t's share of row[lo:hi] (every threads-th value), in place,
    SOFTMAX_LOADS loads in flight: x * value; with `copying`, each result also into copy[v]."""
    got = cuda.local.array(SOFTMAX_LOADS, np.float32)
    for v0 in range(lo + t, hi, threads * SOFTMAX_LOADS):
        for u in range(SOFTMAX_LOADS):
            v = v0 + u * threads
            got[u] = row[v] if v < hi else ZERO
        for u in range(SOFTMAX_LOADS):
            v = v0 + u * threads
            if v < hi:
                x = mul(got[u], value)
                row[v] = x
                if copying:
                    copy[v] = x


@cuda.jit(device=True)
def softmax_row_max(softmax_max, i, maxima, t, threads, part):
    """Row i's max from the unembedding's maxima of its blocks of columns (softmax_max[i, :maxima],
    the "max" epilogue; a max is exact in any order), for every thread of the block."""
    m = f32(-np.inf)
    for q in range(t, maxima, threads):
        if softmax_max[i, q] > m:
            m = softmax_max[i, q]
    return block_max(m, t, part, threads)


@cuda.jit(device=True)
def load_chunk(row, c0, n, t, got):
    """Thread t's values of row[c0:c0 + n] (one load each, all in flight) into got: at constant
    steps from the first, in unsigned arithmetic, as store_exps stores them."""
    at = np.uint64(c0 + t)
    left = np.int32(np.int32(n) - np.int32(t))  # n <= SOFTMAX_CHUNK: 32 bits
    for u in range(SOFTMAX_LOADS):
        got[u] = row[at + np.uint64(u * SOFTMAX_THREADS)] if np.int32(u * SOFTMAX_THREADS) < left else ZERO


@cuda.jit(device=True)
def store_exps(row, c0, chunk, n, t, got, softmax_max, exp2_16):
    """tf.c's exps of load_chunk's logits (fp.expf_short: exp2_16 is its table in shared memory),
    each written back to row[c0:c0 + n] and staged in chunk (shared memory, where the ordered sum
    reads them: term v at ordered.slot(v)). The rare terms that fp.expf_or_nan leaves to expf
    are redone after the others, so that the loop over the others stays unrolled. Returns
    whether any of them is one the ordered sum refuses (ordered.refused): only those can be, since
    expf_or_nan's floats lie in (0, 1]."""
    # the u-th term's places: constant steps from the first's, in unsigned arithmetic
    at = np.uint64(c0 + t)
    slot = ordered.slot(t)
    left = np.int32(np.int32(n) - np.int32(t))  # n <= SOFTMAX_CHUNK: 32 bits
    handed = np.uint32(0)
    for u in range(SOFTMAX_LOADS):
        if np.int32(u * SOFTMAX_THREADS) < left:
            e = expf_or_nan(got[u] - softmax_max, exp2_16)
            row[at + np.uint64(u * SOFTMAX_THREADS)] = e
            chunk[slot + np.uint32(u * SOFTMAX_SLOT_STEP)] = e
            handed |= np.uint32(0 if e == e else 1 << u)
    refusing = False
    if handed != 0:
        for u in range(SOFTMAX_LOADS):
            if handed & np.uint32(1 << u):
                e = expf(got[u] - softmax_max)
                row[at + np.uint64(u * SOFTMAX_THREADS)] = e
                chunk[slot + np.uint32(u * SOFTMAX_SLOT_STEP)] = e
                refusing |= ordered.refused(e)
    return refusing


@cuda.jit(**SOFTMAX_OPTIONS)
def tf_unembedding_softmax(out, rows, softmax_max, maxima, r_softmax_exp_sum):
    """tf.c's max, exps and their sum, in its order, for row rows[0] + blockIdx: the max from the
    unembedding's "max" epilogue, then a chunk at a time, the logits loaded while the chunk before
    is summed, their exps written back to the row and staged in shared memory, where
    ordered.ordered_sum adds them (the chain's bits, scanned by the whole block);
    r_softmax_exp_sum[blockIdx] = 1.0f / the sum. The exps cost this block a few instructions a
    term, less than a pass of their own over the logits."""
    r = cuda.blockIdx.x
    t = cuda.threadIdx.x
    V = out.shape[1]
    i = rows[0] + r
    row = out[i]
    got = cuda.local.array(SOFTMAX_LOADS, np.float32)
    chunk = cuda.shared.array(SOFTMAX_SLOTS, np.float32)
    warps0 = cuda.shared.array(SOFTMAX_WARPS, np.int32)
    warps1 = cuda.shared.array(SOFTMAX_WARPS, np.int32)
    ctrl = cuda.shared.array(2, np.int32)
    exp2_16 = cuda.shared.array(16, np.float64)
    for j in range(t, 16, SOFTMAX_THREADS):  # read after softmax_row_max's barriers
        exp2_16[j] = EXP2_16[j]
    load_chunk(row, 0, min(SOFTMAX_CHUNK, V), t, got)
    m = softmax_row_max(softmax_max, i, maxima, t, SOFTMAX_THREADS, cuda.shared.array(SOFTMAX_THREADS, np.float32))
    softmax_exp_sum = ZERO
    for c0 in range(0, V, SOFTMAX_CHUNK):
        n = min(SOFTMAX_CHUNK, V - c0)
        refusing = cuda.syncthreads_or(np.int32(store_exps(row, c0, chunk, n, t, got, m, exp2_16))) != 0
        if c0 + SOFTMAX_CHUNK < V:
            load_chunk(row, c0 + SOFTMAX_CHUNK, min(SOFTMAX_CHUNK, V - c0 - SOFTMAX_CHUNK), t, got)
        # ends with a barrier after its last read of the chunk, which the next one overwrites
        softmax_exp_sum = ordered.ordered_sum(softmax_exp_sum, chunk, n, t, ordered.HEAD if c0 == 0 else 0,
                                              refusing, warps0, warps1, ctrl)
    if t == 0:
        r_softmax_exp_sum[r] = ONE / softmax_exp_sum


@cuda.jit
def tf_unembedding_scale(out, rows, parts, r_softmax_exp_sum, probs, copying):
    """tf.c's last softmax loop, by slices: block (row rows[0] + r, slice j) multiplies its slice of
    exps by r_softmax_exp_sum[r]. With `copying` (training), each probability also goes into the
    same place of probs (whose rows may be longer), the copy the backward turns into dL/dlogits:
    tf.c's memcpy, without a pass of its own over the logits."""
    r, j = cuda.blockIdx.x // parts, cuda.blockIdx.x % parts
    lo, hi = softmax_slice(out.shape[1], parts, j)
    i = rows[0] + r
    slice_pass(out[i], lo, hi, cuda.threadIdx.x, SOFTMAX_PASS_THREADS, r_softmax_exp_sum[r], probs[i],
               copying)


@cuda.jit(**SOFTMAX_OPTIONS)
def tf_unembedding_softmax_chain(out, rows):
    """tf.c's softmax of row rows[0] + blockIdx in one kernel, its sum as it is written: the
    reference of launch.unembedding_softmax's four (tests/tf/test_tf_ordered.py). The block finds
    the max; thread 0 adds the exps one by one, a chunk at a time from shared memory, while the
    threads from CHAIN_WARP on compute the next chunk's exps into the other buffer; the block
    scales by the reciprocal."""
    i = rows[0] + cuda.blockIdx.x
    t = cuda.threadIdx.x
    V = out.shape[1]
    row = out[i]
    partial = cuda.shared.array(SOFTMAX_THREADS, np.float32)
    got = cuda.local.array(SOFTMAX_LOADS, np.float32)
    softmax_max = row_max(row, V, t, partial)
    chunks = cuda.shared.array((2, CHAIN_CHUNK), np.float32)
    n_chunks = -(-V // CHAIN_CHUNK)
    softmax_exp_sum = ZERO
    EXP_THREADS = SOFTMAX_THREADS - CHAIN_WARP
    # step c: chunk c's exps go to the row and to buffer c % 2, as thread 0 adds chunk c - 1's
    for c in range(n_chunks + 1):
        if t >= CHAIN_WARP and c < n_chunks:
            c0 = c * CHAIN_CHUNK
            chunk = chunks[c % 2]
            n = min(CHAIN_CHUNK, V - c0)
            row_exps(row, chunk, c0, n, t - CHAIN_WARP, EXP_THREADS, softmax_max, got)
        if t == 0 and c > 0:
            c0 = (c - 1) * CHAIN_CHUNK
            softmax_exp_sum = staged_sum(softmax_exp_sum, chunks[(c - 1) % 2], np.uint64(0), min(CHAIN_CHUNK, V - c0))
        cuda.syncthreads()
    row_scale(row, V, t, softmax_exp_sum, partial)


@cuda.jit(device=True)
def advance(tokens, rows, end, token):
    """Generation's step on the device: the token appended at `end`, the row range moved to it."""
    tokens[end] = token
    rows[0] = end
    rows[1] = end + 1


@cuda.jit
def tf_argmax(out, rows, tokens):
    """Generation's next token: tokens[end] = the first index of the largest probability in
    row end - 1 (tf.c keeps the first of equal maxima), where rows = [end - 1, end]; then
    rows advances by one on the device. Each thread scans a stride, then the block keeps the
    larger value, or on a tie the smaller index. One block."""
    t = cuda.threadIdx.x
    end = rows[1]
    value = cuda.shared.array(ARGMAX_THREADS, np.float32)
    index = cuda.shared.array(ARGMAX_THREADS, np.int32)
    V = out.shape[1]
    best = -1
    for v in range(t, V, ARGMAX_THREADS):
        if best < 0 or out[end - 1, v] > out[end - 1, best]:
            best = v
    if best < 0:  # a thread past the vocabulary
        value[t] = -np.inf
        index[t] = V
    else:
        value[t] = out[end - 1, best]
        index[t] = best
    cuda.syncthreads()
    step = ARGMAX_THREADS // 2
    while step > 0:
        if t < step:
            o = t + step
            if value[o] > value[t] or (value[o] == value[t] and index[o] < index[t]):
                value[t] = value[o]
                index[t] = index[o]
        cuda.syncthreads()
        step //= 2
    if t == 0:
        advance(tokens, rows, end, index[0])


ARGMAX_LOADS = 8  # loads in flight per tf_argmax_logits thread (1,024 threads: at most 64 registers)
# expf(x) rounds to 1.0f only for |x| below about 2^-25; a difference under this bound is worth an expf
NEAR_MAX = f32(-2.0 ** -20)


@cuda.jit
def tf_argmax_logits(out, rows, tokens):
    """tf_argmax of the softmax of the logits in row end - 1, without the softmax: the faster
    kernel beside the unembedding softmax + tf_argmax (test_argmax_logits_is_the_softmax_argmax in
    tests/tf/test_tf_generate.py holds them equal). The softmax's probabilities are p_v = e_v * r,
    e_v = expf(logit_v - max) and r = 1 / sum: monotone in e_v, and e_v <= 1 = e at the max.
    For e_v < 1, e_v is at most 1 - 2^-24, and
    (1 - 2^-24) * r rounds below r for every float r: so p_v equals the largest probability r
    exactly when e_v is 1.0f, and tf.c's first maximum of p is the first v whose expf(logit_v -
    max) is 1.0f. That skips the ordered sum of the V exps. Then rows advances as in tf_argmax."""
    t = cuda.threadIdx.x
    end = rows[1]
    row = out[end - 1]
    V = out.shape[1]
    value = cuda.shared.array(ARGMAX_THREADS, np.float32)
    index = cuda.shared.array(ARGMAX_THREADS, np.int32)
    got = cuda.local.array(ARGMAX_LOADS, np.float32)
    m = f32(-np.inf)
    for v0 in range(t, V, ARGMAX_THREADS * ARGMAX_LOADS):  # ARGMAX_LOADS loads in flight at a time
        for u in range(ARGMAX_LOADS):
            v = v0 + u * ARGMAX_THREADS
            got[u] = row[v] if v < V else m
        for u in range(ARGMAX_LOADS):
            if got[u] > m:
                m = got[u]
    value[t] = m
    cuda.syncthreads()
    step = ARGMAX_THREADS // 2
    while step > 0:  # the max is exact in any order
        if t < step and value[t + step] > value[t]:
            value[t] = value[t + step]
        cuda.syncthreads()
        step //= 2
    m = value[0]
    first = V
    for v0 in range(t, V, ARGMAX_THREADS * ARGMAX_LOADS):
        for u in range(ARGMAX_LOADS):
            v = v0 + u * ARGMAX_THREADS
            got[u] = row[v] - m if v < V else f32(-np.inf)
        for u in range(ARGMAX_LOADS):
            if first == V and got[u] >= NEAR_MAX and expf(got[u]) == ONE:
                first = v0 + u * ARGMAX_THREADS
        if first < V:
            break
    index[t] = first
    cuda.syncthreads()
    step = ARGMAX_THREADS // 2
    while step > 0:
        if t < step and index[t + step] < index[t]:
            index[t] = index[t + step]
        cuda.syncthreads()
        step //= 2
    if t == 0:
        advance(tokens, rows, end, index[0])


@cuda.jit
def tf_loss(probs, expected, loss, T):
    """dL/dlogit = p - 1 at the expected token (probs holds a copy of the softmax), and the total
    cross-entropy: each sample's term -logf(p) by a thread of its own (a sample edits its own
    row), their sum in sample order by thread 0, as tf.c adds them. One thread doing it all
    waited on each sample's loads and double-precision log in turn: 21.9 us at T = 64 under ncu."""
    t = cuda.threadIdx.x
    terms = cuda.shared.array(ATTN_T_MAX, np.float32)  # T <= d_seq <= ATTN_T_MAX
    for i in range(t, T, cuda.blockDim.x):
        p_correct = probs[i, expected[i]]
        probs[i, expected[i]] = p_correct - ONE
        terms[i] = -logf(p_correct)
    cuda.syncthreads()
    if t == 0:
        loss[0] = staged_sum(ZERO, terms, np.uint64(0), T)


@cuda.jit
def tf_unembedding_back(wte, ln_f, dL_dout, dL_dwte, dL_din, T, r_input_size, fused):
    """The unembedding backward's two sets of sums: dL_dwte[v, d] += (dL_dout * in) * r_input_size
    over samples i ascending; dL_din[i, d] = 0, += dL_dout * weight over tokens v ascending, then
    *= r_input_size. Faithful."""
    V, D = wte.shape
    for idx in range(cuda.grid(1), V * D + T * D, cuda.gridsize(1)):
        if idx < V * D:
            v, d = idx // D, idx % D
            acc = dL_dwte[v, d]
            for i in range(T):
                acc = mad(fused, mul(dL_dout[i, v], ln_f[i, d]), r_input_size, acc)
            dL_dwte[v, d] = acc
        else:
            i, d = (idx - V * D) // D, (idx - V * D) % D
            acc = ZERO
            for v in range(V):
                acc = mad(fused, dL_dout[i, v], wte[v, d], acc)
            dL_din[i, d] = mul(acc, r_input_size)


@cuda.jit
def tf_gelu_back(inp, dL_dout, dL_din, T, fused):
    N = dL_din.shape[1]
    for idx in range(cuda.grid(1), T * N, cuda.gridsize(1)):
        i, k = idx // N, idx % N
        dL_din[i, k] = gelu_back(inp[i, k], dL_dout[i, k], fused)


@cuda.jit(device=True)
def gelu_back(x, dL_dout, fused):
    """tf_gelu_back's element: dL_dout * (phi(x) + x * the normal density at x)."""
    phi = mul(HALF, ONE + erff(mul(x, SQRT1_2)))
    dgelu_din = mad(fused, mul(x, R_SQRT_2PI), expf(mul(mul(-HALF, x), x)), phi)
    return mul(dL_dout, dgelu_din)


@cuda.jit
def tf_attn_back_dot(dL_dz, c_attn, dL_da, T, d_k, fused):
    """dL_da[h, i, j] = dL_dz[i, head h] . v_j over d ascending, for j <= i."""
    H = dL_da.shape[0]
    D = H * d_k
    for idx in range(cuda.grid(1), H * T * T, cuda.gridsize(1)):
        h, i, j = idx // (T * T), idx // T % T, idx % T
        if j <= i:
            c = h * d_k
            v = c_attn[j, 2 * D + c:2 * D + c + d_k]
            dL_da[h, i, j] = sequential_mad(ZERO, dL_dz[i, c:c + d_k], v, d_k, ONE, False, fused)


@cuda.jit(device=True)
def staged_ds(a, d, n, t, threads, part, out, fused):
    """out[j] = dL_ds = a * (dL_da - row_sum) for j < n, from the row the block's `threads` threads
    staged in shared memory (a: the softmax, d: dL_da), row_sum being the sum of a * dL_da in
    order, by thread 0."""
    cuda.syncthreads()
    if t == 0:
        part[0] = staged_dot(ZERO, a, np.uint64(0), U1, d, np.uint64(0), U1, n, fused)
    cuda.syncthreads()
    row_sum = part[0]
    for j in range(t, n, threads):
        out[j] = mul(a[j], d[j] - row_sum)


@cuda.jit
def tf_attn_back_softmax(softmax, dL_da, T, fused):
    """Block h * T + i owns row (head h, query i): its lanes stage a and dL_da for j <= i, one
    lane forms row_sum = sum of a * dL_da in order, the lanes turn each dL_da[j] into
    dL_ds = a * (dL_da - row_sum)."""
    h, i = cuda.blockIdx.x // T, cuda.blockIdx.x % T
    lane = cuda.threadIdx.x
    n = i + 1
    a = cuda.shared.array(ATTN_T_MAX, np.float32)
    d = cuda.shared.array(ATTN_T_MAX, np.float32)
    part = cuda.shared.array(1, np.float32)
    for j in range(lane, n, ATTN_LANES):
        a[j] = softmax[h, i, j]
        d[j] = dL_da[h, i, j]
    staged_ds(a, d, n, lane, ATTN_LANES, part, dL_da[h, i], fused)


@functools.cache
def tf_attn_back_row(d_k, wide):
    """The first half of tf.c's backward loop body for heads of d_k and row (head h, query i), a
    block each (block h * T + i): tf_attn_back_dot and tf_attn_back_softmax in one launch, the row
    kept in shared memory between them, every value computed as those kernels compute it: the
    threads own keys j <= i (their dots dL_da, staged_dots over dL_dz's row and the values, as
    tf_attn stages its query and keys), one thread forms row_sum, the threads write dL_ds. `wide`
    as tf_attn's (launch.attn_back_row). Reading the values from global memory, 8 loads ahead
    (sequential_mad), it took 15.6 us a launch under ncu at T = 64."""
    dots = staged_dots(d_k, wide)

    def kernel(dL_dz, c_attn, softmax, dL_da, T, fused):
        h, i = cuda.blockIdx.x // T, cuda.blockIdx.x % T
        t = cuda.threadIdx.x
        D = dL_da.shape[0] * d_k
        c = np.uint64(h * d_k)
        n = i + 1
        a = cuda.shared.array(ATTN_T_MAX, np.float32)
        d = cuda.shared.array(ATTN_T_MAX, np.float32)
        part = cuda.shared.array(1, np.float32)
        kv = cuda.shared.array(ATTN_KV, np.float32, alignment=SHARED_ALIGN)  # dL_dz's row and the values
        for j in range(t, n, ATTN_THREADS):
            a[j] = softmax[h, i, j]
        dots(dL_dz, i, c, c_attn, n, np.uint64(2 * D) + c, ONE, False, d, kv, t, fused)
        staged_ds(a, d, n, t, ATTN_THREADS, part, dL_da[h, i], fused)

    kernel.__name__ = kernel.__qualname__ = "tf_attn_back_row"
    return cuda.jit(kernel)


@cuda.jit
def tf_attn_back_qkv(dL_dz, c_attn, softmax, dL_ds, dL_dc_attn, T, d_k, rsqrt_d_k, fused):
    """dL/d(q, k, v), one element of the (T, 3D) gradient at a time, each a sum in tf.c's
    order: dq[i] over keys j <= i ascending; dk[j] and dv[j] over queries i >= j ascending."""
    D3 = dL_dc_attn.shape[1]
    D = D3 // 3
    for idx in range(cuda.grid(1), T * D3, cuda.gridsize(1)):
        row, c = idx // D3, idx % D3
        part, cd = c // D, c % D
        h = cd // d_k
        if part == 0:
            acc = sequential_mad(ZERO, dL_ds[h, row, :row + 1], c_attn[:row + 1, D + cd], row + 1, rsqrt_d_k, True,
                                 fused)
        elif part == 1:
            acc = sequential_mad(ZERO, dL_ds[h, row:T, row], c_attn[row:T, cd], T - row, rsqrt_d_k, True, fused)
        else:
            acc = sequential_mad(ZERO, dL_dz[row:T, cd], softmax[h, row:T, row], T - row, ONE, False, fused)
        dL_dc_attn[row, c] = acc


@cuda.jit
def tf_embedding_back(dL_dout, tokens, dL_dwte, dL_dwpe, T):
    """One thread per feature k, samples in order (a token that repeats adds in order). The loads
    of UNROLL samples go out together ahead of their adds, where one at a time each waited on the
    store before it; a token repeated among them adds to the sum its latest earlier sample left."""
    tok = cuda.local.array(UNROLL, np.int64)
    dout = cuda.local.array(UNROLL, np.float32)
    wte = cuda.local.array(UNROLL, np.float32)
    wpe = cuda.local.array(UNROLL, np.float32)
    for k in range(cuda.grid(1), dL_dout.shape[1], cuda.gridsize(1)):
        for i0 in range(0, T, UNROLL):
            for u in range(UNROLL):
                if i0 + u < T:
                    tok[u] = tokens[i0 + u]
                    dout[u] = dL_dout[i0 + u, k]
                    wte[u] = dL_dwte[tok[u], k]
                    wpe[u] = dL_dwpe[i0 + u, k]
            for u in range(UNROLL):
                if i0 + u < T:
                    for v in range(u):
                        if tok[v] == tok[u]:
                            wte[u] = wte[v]
                    wte[u] += dout[u]
                    dL_dwte[tok[u], k] = wte[u]
                    dL_dwpe[i0 + u, k] = wpe[u] + dout[u]
