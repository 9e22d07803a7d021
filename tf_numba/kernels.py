"""One kernel per tf.c routine or loop nest, each thread owning whole output elements.

Kernels walk their elements in a grid-stride loop: on the GPU the launch gives one thread per
element, in the simulator one thread walks them all (see `launch`).

tf.c's numbers depend on the order of every float32 accumulation, so a thread computes one
output's sum alone, in the C loop's order: dot products start from the bias (or 0) with k
ascending, gradient sums run over samples i ascending, input gradients over outputs ascending.
Nothing is split across threads. Statements that tf.c's fma build fuses are written
`mad(fused, ...)`; every other product is `mul` (see fp.py).

Shapes follow tf.c's comments: (v: rows, u: columns), row-major, Conv1D weights (in, out).
`T` is the number of samples (input_size); arrays may have more rows (d_seq), never read.
"""
import math

import numpy as np
from numba import config, cuda

from .fp import erff, expf, logf, mad, mul, sqrtf

f32 = np.float32
BLOCK = 128
SQRT1_2 = f32(math.sqrt(0.5))  # (float)M_SQRT1_2
R_SQRT_2PI = f32(1.0) / np.sqrt(f32(2.0) * f32(math.pi))  # 1.0f / sqrtf(2.0f * (float)M_PI)
HALF = f32(0.5)
ONE = f32(1.0)
ZERO = f32(0.0)
EPS = f32(1e-5)


@cuda.jit
def tf_memset(out, value):
    """memset of a flat float array (value 0, or a poison pattern for scratch)."""
    for i in range(cuda.grid(1), out.shape[0], cuda.gridsize(1)):
        out[i] = value


@cuda.jit
def tf_embedding(wte, wpe, tokens, out, T):
    """out[i] = wte[tokens[i]] + wpe[i]."""
    D = out.shape[1]
    for idx in range(cuda.grid(1), T * D, cuda.gridsize(1)):
        i, k = idx // D, idx % D
        out[i, k] = wte[tokens[i], k] + wpe[i, k]


@cuda.jit
def tf_add(in_1, in_2, out, T):
    D = out.shape[1]
    for idx in range(cuda.grid(1), T * D, cuda.gridsize(1)):
        i, k = idx // D, idx % D
        out[i, k] = in_1[i, k] + in_2[i, k]


@cuda.jit
def tf_ln(weight, bias, inp, r_std, mean, out, T, fused):
    """Layer norm, one thread per sample: mean, variance and the outputs in tf.c's order."""
    D = inp.shape[1]
    for i in range(cuda.grid(1), T, cuda.gridsize(1)):
        total = ZERO
        for k in range(D):
            total += inp[i, k]
        m = total / f32(D)
        mean[i] = m
        total_diff_squared = ZERO
        for k in range(D):
            diff = inp[i, k] - m
            total_diff_squared = mad(fused, diff, diff, total_diff_squared)
        variance = total_diff_squared / f32(D)
        r = ONE / sqrtf(variance + EPS)
        r_std[i] = r
        for k in range(D):
            n = mul(inp[i, k] - m, r)
            out[i, k] = mad(fused, n, weight[k], bias[k])


@cuda.jit
def tf_fc(weight, bias, inp, out, T, fused):
    """out[i, u] = bias[u] + sum over k ascending of in[i, k] * weight[k, u]."""
    U = out.shape[1]
    for idx in range(cuda.grid(1), T * U, cuda.gridsize(1)):
        i, u = idx // U, idx % U
        acc = bias[u]
        for k in range(inp.shape[1]):
            acc = mad(fused, inp[i, k], weight[k, u], acc)
        out[i, u] = acc


@cuda.jit
def tf_fc_back(weight, inp, dL_dout, dL_dweight, dL_dbias, dL_din, T, fused):
    """tf_fc_back's three results in one launch: elements [0, T*K) are input gradients (dot
    products over outputs u ascending, from 0; the longest loops, so they start first), the
    next U bias gradients and the last K*U weight gradients (sums over samples i ascending,
    into what is there)."""
    K, U = weight.shape[0], weight.shape[1]
    for idx in range(cuda.grid(1), T * K + U + K * U, cuda.gridsize(1)):
        if idx < T * K:
            i, k = idx // K, idx % K
            dot = ZERO
            for u in range(U):
                dot = mad(fused, dL_dout[i, u], weight[k, u], dot)
            dL_din[i, k] = dot
        elif idx < T * K + U:
            u = idx - T * K
            acc = dL_dbias[u]
            for i in range(T):
                acc += dL_dout[i, u]
            dL_dbias[u] = acc
        else:
            k, u = (idx - T * K - U) // U, (idx - T * K - U) % U
            acc = dL_dweight[k, u]
            for i in range(T):
                acc = mad(fused, dL_dout[i, u], inp[i, k], acc)
            dL_dweight[k, u] = acc


@cuda.jit
def tf_ln_back(weight, inp, r_std, mean, dL_dout, dL_dweight, dL_dbias, dL_din, T, fused):
    """tf_ln_back in one launch: elements [0, D) are weight and bias gradients (sums over
    samples i ascending); the next T are samples (partial sums, then the input gradient)."""
    D = inp.shape[1]
    for idx in range(cuda.grid(1), D + T, cuda.gridsize(1)):
        if idx < D:
            dw = dL_dweight[idx]
            db = dL_dbias[idx]
            for i in range(T):
                in_norm = mul(inp[i, idx] - mean[i], r_std[i])
                dw = mad(fused, dL_dout[i, idx], in_norm, dw)
                db += dL_dout[i, idx]
            dL_dweight[idx] = dw
            dL_dbias[idx] = db
            continue
        i = idx - D
        r, m = r_std[i], mean[i]
        mean_partial = ZERO
        var_partial = ZERO
        for k in range(D):
            dL_din_norm = mul(dL_dout[i, k], weight[k])
            in_norm = mul(inp[i, k] - m, r)
            mean_partial += dL_din_norm
            var_partial = mad(fused, dL_din_norm, in_norm, var_partial)
        mean_partial /= f32(D)
        var_partial /= f32(D)
        for k in range(D):
            dL_din_norm = mul(dL_dout[i, k], weight[k])
            in_norm = mul(inp[i, k] - m, r)
            acc = ZERO + dL_din_norm
            acc -= mean_partial
            acc = mad(fused, -var_partial, in_norm, acc)
            dL_din[i, k] = mul(acc, r)


@cuda.jit
def tf_attn_scores(c_attn, softmax, T, d_k, rsqrt_d_k, fused):
    """softmax[h, q, k] = (q_q . k_k) * rsqrt_d_k for k <= q, the dot over d ascending."""
    H = softmax.shape[0]
    D = H * d_k
    for idx in range(cuda.grid(1), H * T * T, cuda.gridsize(1)):
        h, q_i, k_i = idx // (T * T), idx // T % T, idx % T
        if k_i <= q_i:
            dot = ZERO
            for d in range(d_k):
                dot = mad(fused, c_attn[q_i, h * d_k + d], c_attn[k_i, D + h * d_k + d], dot)
            softmax[h, q_i, k_i] = mul(dot, rsqrt_d_k)


@cuda.jit
def tf_attn_softmax(softmax, T):
    """One thread per (head, query): max, exp and sum over keys k <= q ascending, then scale."""
    H = softmax.shape[0]
    for idx in range(cuda.grid(1), H * T, cuda.gridsize(1)):
        h, q_i = idx // T, idx % T
        softmax_max = f32(-np.inf)
        for k_i in range(q_i + 1):
            if softmax[h, q_i, k_i] > softmax_max:
                softmax_max = softmax[h, q_i, k_i]
        softmax_sum = ZERO
        for k_i in range(q_i + 1):
            e = expf(softmax[h, q_i, k_i] - softmax_max)
            softmax_sum += e
            softmax[h, q_i, k_i] = e
        r_softmax_sum = ONE / softmax_sum
        for k_i in range(q_i + 1):
            softmax[h, q_i, k_i] = mul(softmax[h, q_i, k_i], r_softmax_sum)


@cuda.jit
def tf_attn_z(c_attn, softmax, z, T, d_k, fused):
    """z[q, h*d_k + d] = sum over v <= q ascending of softmax[h, q, v] * v_v[d], from 0."""
    D = z.shape[1]
    for idx in range(cuda.grid(1), T * D, cuda.gridsize(1)):
        q_i, c = idx // D, idx % D
        h = c // d_k
        acc = ZERO
        for v_i in range(q_i + 1):
            acc = mad(fused, softmax[h, q_i, v_i], c_attn[v_i, 2 * D + c], acc)
        z[q_i, c] = acc


@cuda.jit
def tf_gelu(inp, out, T):
    N = out.shape[1]
    for idx in range(cuda.grid(1), T * N, cuda.gridsize(1)):
        i, k = idx // N, idx % N
        x = inp[i, k]
        phi = mul(HALF, ONE + erff(mul(x, SQRT1_2)))
        out[i, k] = mul(x, phi)


@cuda.jit
def tf_unembedding(wte, inp, out, row_0, T, fused):
    """Logits out[i, v] = wte[v] . in[i], the dot over k ascending from 0, rows row_0..T-1.
    Consecutive threads share v, so a warp reads one row of wte."""
    V, D = wte.shape[0], wte.shape[1]
    rows = T - row_0
    for idx in range(cuda.grid(1), rows * V, cuda.gridsize(1)):
        v, i = idx // rows, row_0 + idx % rows
        dot = ZERO
        for k in range(D):
            dot = mad(fused, wte[v, k], inp[i, k], dot)
        out[i, v] = dot


SOFTMAX_THREADS = 256


@cuda.jit
def tf_unembedding_softmax(out, row_0):
    """Softmax of row row_0 + blockIdx: the block finds the max (exact in any order) and the
    exps; one thread sums them in tf.c's order; the block scales by the reciprocal."""
    i = row_0 + cuda.blockIdx.x
    t = cuda.threadIdx.x
    V = out.shape[1]
    partial = cuda.shared.array(SOFTMAX_THREADS, np.float32)
    m = f32(-np.inf)
    for v in range(t, V, SOFTMAX_THREADS):
        if out[i, v] > m:
            m = out[i, v]
    partial[t] = m
    cuda.syncthreads()
    if t == 0:
        for j in range(1, SOFTMAX_THREADS):
            if partial[j] > m:
                m = partial[j]
        partial[0] = m
    cuda.syncthreads()
    softmax_max = partial[0]
    for v in range(t, V, SOFTMAX_THREADS):
        out[i, v] = expf(out[i, v] - softmax_max)
    cuda.syncthreads()
    if t == 0:
        softmax_exp_sum = ZERO
        for v in range(V):
            softmax_exp_sum += out[i, v]
        partial[1] = ONE / softmax_exp_sum
    cuda.syncthreads()
    r_softmax_exp_sum = partial[1]
    for v in range(t, V, SOFTMAX_THREADS):
        out[i, v] = mul(out[i, v], r_softmax_exp_sum)


ARGMAX_THREADS = 1024


@cuda.jit
def tf_argmax(out, row, tokens, position):
    """tokens[position] = the first index of the largest probability in out[row] (tf.c keeps
    the first of equal maxima): each thread scans a stride, then the block keeps the larger
    value, or on a tie the smaller index. One block."""
    t = cuda.threadIdx.x
    value = cuda.shared.array(ARGMAX_THREADS, np.float32)
    index = cuda.shared.array(ARGMAX_THREADS, np.int32)
    V = out.shape[1]
    best = -1
    for v in range(t, V, ARGMAX_THREADS):
        if best < 0 or out[row, v] > out[row, best]:
            best = v
    if best < 0:  # a thread past the vocabulary
        value[t] = -np.inf
        index[t] = V
    else:
        value[t] = out[row, best]
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
        tokens[position] = index[0]


@cuda.jit
def tf_loss(probs, expected, loss, T):
    """dL/dlogit = p - 1 at the expected token (probs holds a copy of the softmax), and the
    total cross-entropy, summed over samples in order by one thread."""
    if cuda.grid(1) != 0:
        return
    loss_total = ZERO
    for i in range(T):
        correct = expected[i]
        p_correct = probs[i, correct]
        probs[i, correct] = p_correct - ONE
        loss_total += -logf(p_correct)
    loss[0] = loss_total


@cuda.jit
def tf_unembedding_back(dL_dout, inp, wte, dL_dwte, dL_din, r_input_size, T, fused):
    """Unembedding backward in one launch: elements [0, T*D) are input gradients (over v
    ascending from 0, then scaled by 1/input_size; the longest loops, so they start first),
    the next V*D wte gradients (sums over samples i ascending, into what is there)."""
    V, D = wte.shape[0], wte.shape[1]
    for idx in range(cuda.grid(1), T * D + V * D, cuda.gridsize(1)):
        if idx < T * D:
            i, k = idx // D, idx % D
            acc = ZERO
            for v in range(V):
                acc = mad(fused, dL_dout[i, v], wte[v, k], acc)
            dL_din[i, k] = mul(acc, r_input_size)
        else:
            v, k = (idx - T * D) // D, (idx - T * D) % D
            acc = dL_dwte[v, k]
            for i in range(T):
                acc = mad(fused, mul(dL_dout[i, v], inp[i, k]), r_input_size, acc)
            dL_dwte[v, k] = acc


@cuda.jit
def tf_gelu_back(inp, dL_dout, dL_din, T, fused):
    N = dL_din.shape[1]
    for idx in range(cuda.grid(1), T * N, cuda.gridsize(1)):
        i, k = idx // N, idx % N
        x = inp[i, k]
        phi = mul(HALF, ONE + erff(mul(x, SQRT1_2)))
        dgelu_din = mad(fused, mul(x, R_SQRT_2PI), expf(mul(mul(-HALF, x), x)), phi)
        dL_din[i, k] = mul(dL_dout[i, k], dgelu_din)


@cuda.jit
def tf_attn_back_dot(dL_dz, c_attn, dL_da, T, d_k, fused):
    """dL_da[h, i, j] = dL_dz[i, head h] . v_j over d ascending, for j <= i."""
    H = dL_da.shape[0]
    D = H * d_k
    for idx in range(cuda.grid(1), H * T * T, cuda.gridsize(1)):
        h, i, j = idx // (T * T), idx // T % T, idx % T
        if j <= i:
            dot = ZERO
            for d in range(d_k):
                dot = mad(fused, dL_dz[i, h * d_k + d], c_attn[j, 2 * D + h * d_k + d], dot)
            dL_da[h, i, j] = dot


@cuda.jit
def tf_attn_back_softmax(softmax, dL_da, T, fused):
    """Per (head, query i): row_sum = sum over j <= i of a * dL_da, then turn each dL_da[j]
    into dL_ds = a * (dL_da - row_sum)."""
    H = softmax.shape[0]
    for idx in range(cuda.grid(1), H * T, cuda.gridsize(1)):
        h, i = idx // T, idx % T
        row_sum = ZERO
        for j in range(i + 1):
            row_sum = mad(fused, softmax[h, i, j], dL_da[h, i, j], row_sum)
        for j in range(i + 1):
            dL_da[h, i, j] = mul(softmax[h, i, j], dL_da[h, i, j] - row_sum)


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
        acc = ZERO
        if part == 0:
            for j in range(row + 1):
                acc = mad(fused, mul(dL_ds[h, row, j], c_attn[j, D + cd]), rsqrt_d_k, acc)
        elif part == 1:
            for i in range(row, T):
                acc = mad(fused, mul(dL_ds[h, i, row], c_attn[i, cd]), rsqrt_d_k, acc)
        else:
            for i in range(row, T):
                acc = mad(fused, dL_dz[i, cd], softmax[h, i, row], acc)
        dL_dc_attn[row, c] = acc


@cuda.jit
def tf_embedding_back(dL_dout, tokens, dL_dwte, dL_dwpe, T):
    """One thread per feature k, samples in order (a token that repeats adds in order)."""
    for k in range(cuda.grid(1), dL_dout.shape[1], cuda.gridsize(1)):
        for i in range(T):
            dL_dwte[tokens[i], k] += dL_dout[i, k]
            dL_dwpe[i, k] += dL_dout[i, k]


if config.ENABLE_CUDASIM:

    def launch(kernel, n, *args):
        """In the simulator every thread is a Python thread: one thread walks all n elements."""
        kernel[1, 1](*args)

else:

    def launch(kernel, n, *args):
        """kernel over n elements, one thread each (the kernels' loops then run once)."""
        block = min(BLOCK, n)
        kernel[-(-n // block), block](*args)
