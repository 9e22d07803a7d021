"""microgpt.cu's kernels in its order, then the three cuBLAS calls it makes (sgemv T, sger, sgemv N)
written out, then what it does on the host or with cudaMemset/cudaMemcpy, as kernels.

Each kernel's per-thread work is a device function, directly above the @cuda.jit kernel under the
C's name, which only works out which element or head its thread owns, as the C kernel does. The fused engine
(fast.py) calls the same device functions, so both engines do the same arithmetic in the same
order. Sums run sequentially in the C's loop order.

Fused multiply-adds are written out (fmaf) where nvcc contracts the C statement (a product feeding
an add or subtract in one expression, the first product when there are two), and nowhere else.
Left implicit, whether NVVM fuses depends on the code around an inlined device function, so the
two engines would round differently.
"""
import numpy as np
from numba import cuda, float32

from .constants import ADAM_EPS, BETA1, BETA2, BLOCK_SIZE, HEAD_DIM, N_EMBD, N_HEAD, RMS_EPS
from cudakit.devmath import expf, mul, rsqrtf, sqrtf
from cudakit.devmath import fma as fmaf  # the C's name

ZERO = np.float32(0.0)
ONE = np.float32(1.0)
NEG_HUGE = np.float32(-1e30)
ATTN_SCALE = ONE / np.sqrt(np.float32(HEAD_DIM))  # 1.0f / sqrtf((float)HEAD_DIM), exactly 0.5
SOFTMAX_THREADS = 256  # scaled_softmax_kernel's block and shared scratch size


@cuda.jit(device=True)
def grid_index():
    return cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x


@cuda.jit(device=True)
def first_thread():
    return cuda.blockIdx.x == 0 and cuda.threadIdx.x == 0


@cuda.jit(device=True)
def stage(src, dst, count):
    """The block copies src[:count] to (shared) dst[:count], each thread a strided share; then a barrier."""
    for i in range(cuda.threadIdx.x, count, cuda.blockDim.x):
        dst[i] = src[i]
    cuda.syncthreads()


# ---- microgpt.cu's kernels, in its order; each kernel's device functions directly above it


@cuda.jit(device=True)
def vec_add(a, b, out, n, idx):
    if idx < n:
        out[idx] = a[idx] + b[idx]


@cuda.jit(cache=True)
def vec_add_kernel(a, b, out, n):
    vec_add(a, b, out, n, grid_index())


@cuda.jit(cache=True)
def token_embed_kernel(wte, pos_emb, tokens, pos_id, out, n):
    """vec_add of the token's wte row (token read from device memory) and the position's wpe row."""
    vec_add(wte[tokens[pos_id] * N_EMBD:], pos_emb, out, n, grid_index())


@cuda.jit(device=True)
def vec_add_inplace(dst, src, n, idx):
    if idx < n:
        dst[idx] += src[idx]


@cuda.jit(cache=True)
def vec_add_inplace_kernel(dst, src, n):
    vec_add_inplace(dst, src, n, grid_index())


@cuda.jit(device=True)
def relu_forward(x, y, n, idx):
    if idx < n:
        y[idx] = x[idx] if x[idx] > ZERO else ZERO


@cuda.jit(cache=True)
def relu_forward_kernel(x, y, n):
    relu_forward(x, y, n, grid_index())


@cuda.jit(device=True)
def relu_backward(x, grad_y, grad_x, n, idx):
    if idx < n:
        grad_x[idx] = grad_y[idx] if x[idx] > ZERO else ZERO


@cuda.jit(cache=True)
def relu_backward_kernel(x, grad_y, grad_x, n):
    relu_backward(x, grad_y, grad_x, n, grid_index())


@cuda.jit(device=True)
def rms_scale(x, n):
    mean_square = ZERO
    for i in range(n):
        mean_square = fmaf(x[i], x[i], mean_square)
    mean_square /= np.float32(n)
    return rsqrtf(mean_square + RMS_EPS)


@cuda.jit(device=True)
def rmsnorm_forward_at(x, y, scale, i):
    y[i] = x[i] * scale


# The C runs rmsnorm in one thread, which reads the vector element by element, waiting on global
# memory each time. Here n threads (n <= N_EMBD) copy it to shared memory at once; each thread then
# takes the sums with the C's loops (every thread gets the same floats) and writes its own element.
@cuda.jit(cache=True)
def rmsnorm_forward_kernel(x, y, n):
    xs = cuda.shared.array(N_EMBD, np.float32)
    stage(x, xs, n)
    i = cuda.threadIdx.x
    if i < n:
        rmsnorm_forward_at(xs, y, rms_scale(xs, n), i)


@cuda.jit(device=True)
def rmsnorm_backward_terms(x, grad_y, n):
    """(scale, dot, scale^3): what every element of rmsnorm_backward needs from the whole vector."""
    scale = rms_scale(x, n)
    dot = ZERO
    for i in range(n):
        dot = fmaf(grad_y[i], x[i], dot)
    return scale, dot, scale * scale * scale


@cuda.jit(device=True)
def rmsnorm_backward_at(x, grad_y, grad_x, n, scale, dot, scale_cubed, i):
    # nvcc fuses nothing here (its PTX: mul, mul, mul, div, sub)
    grad_x[i] = mul(grad_y[i], scale) - mul(mul(x[i], dot), scale_cubed) / np.float32(n)


@cuda.jit(device=True)
def rmsnorm_backward_element(x, grad_y, grad_x, n, i):
    """Element i of rmsnorm_backward; each thread takes the vector's terms itself."""
    scale, dot, scale_cubed = rmsnorm_backward_terms(x, grad_y, n)
    rmsnorm_backward_at(x, grad_y, grad_x, n, scale, dot, scale_cubed, i)


@cuda.jit(cache=True)
def rmsnorm_backward_kernel(x, grad_y, grad_x, n):
    xs = cuda.shared.array(N_EMBD, np.float32)
    gs = cuda.shared.array(N_EMBD, np.float32)
    stage(x, xs, n)
    stage(grad_y, gs, n)
    i = cuda.threadIdx.x
    if i < n:
        rmsnorm_backward_element(xs, gs, grad_x, n, i)


@cuda.jit(device=True)
def softmax_local_max(logits, scale, n, lane, lanes):
    local_max = NEG_HUGE
    for i in range(lane, n, lanes):
        v = logits[i] * scale
        if v > local_max:
            local_max = v
    return local_max


@cuda.jit(device=True)
def softmax_local_exp(logits, probs, scale, max_val, n, lane, lanes):
    local_sum = ZERO
    for i in range(lane, n, lanes):
        e = expf(mul(logits[i], scale) - max_val)  # not fused by nvcc
        probs[i] = e
        local_sum += e
    return local_sum


@cuda.jit(device=True)
def softmax_normalize(probs, inv_sum, n, lane, lanes):
    for i in range(lane, n, lanes):
        probs[i] *= inv_sum


@cuda.jit(device=True)
def tree_step(scratch, lane, stride, take_max):
    """One level of scaled_softmax's tree reduction, for the lane below stride."""
    if take_max:
        if scratch[lane + stride] > scratch[lane]:
            scratch[lane] = scratch[lane + stride]
    else:
        scratch[lane] += scratch[lane + stride]


@cuda.jit(device=True)
def scaled_softmax(logits, probs, scale, n, scratch, tid, nthreads):
    """Block-wide softmax of logits * scale: strided max and sum, then tree reductions in scratch."""
    scratch[tid] = softmax_local_max(logits, scale, n, tid, nthreads)
    cuda.syncthreads()

    stride = nthreads // 2
    while stride > 0:
        if tid < stride:
            tree_step(scratch, tid, stride, True)
        cuda.syncthreads()
        stride >>= 1

    max_val = scratch[0]
    local_sum = softmax_local_exp(logits, probs, scale, max_val, n, tid, nthreads)
    # Everyone has read scratch[0] before it is overwritten (the C relies on warp timing here).
    cuda.syncthreads()
    scratch[tid] = local_sum
    cuda.syncthreads()

    stride = nthreads // 2
    while stride > 0:
        if tid < stride:
            tree_step(scratch, tid, stride, False)
        cuda.syncthreads()
        stride >>= 1

    softmax_normalize(probs, ONE / scratch[0], n, tid, nthreads)


@cuda.jit(cache=True)
def scaled_softmax_kernel(logits, probs, scale, n):
    scratch = cuda.shared.array(SOFTMAX_THREADS, np.float32)
    scaled_softmax(logits, probs, scale, n, scratch, cuda.threadIdx.x, cuda.blockDim.x)


@cuda.jit(device=True)
def cross_entropy_backward(probs, grad_logits, target_id, loss_scale, n, idx):
    if idx < n:
        grad = mul(probs[idx], loss_scale)
        if idx == target_id:  # a statement of its own: nvcc does not fuse it with the product
            grad = grad - loss_scale
        grad_logits[idx] = grad


@cuda.jit(cache=True)
def cross_entropy_backward_kernel(probs, grad_logits, tokens, pos_id, loss_scale, n):
    cross_entropy_backward(probs, grad_logits, tokens[pos_id + 1], loss_scale, n, grid_index())


@cuda.jit(device=True)
def adam_update(data, grad, m, v, lr_t, beta1_corr, beta2_corr, n, idx):
    if idx < n:
        g = grad[idx]
        # nvcc fuses the second product of each sum: fma(g, 1 - BETA1, BETA1 * m), and
        # fma(g, (1 - BETA2) * g, BETA2 * v)
        m_new = fmaf(g, ONE - BETA1, mul(BETA1, m[idx]))
        v_new = fmaf(g, mul(ONE - BETA2, g), mul(BETA2, v[idx]))
        m[idx] = m_new
        v[idx] = v_new
        m_hat = m_new / beta1_corr
        v_hat = v_new / beta2_corr
        data[idx] -= lr_t * m_hat / (sqrtf(v_hat) + ADAM_EPS)
        grad[idx] = ZERO


@cuda.jit(cache=True)
def adam_update_kernel(data, grad, m, v, schedule, n):
    """schedule = (lr_t, beta1_corr, beta2_corr) of this step, in device memory."""
    adam_update(data, grad, m, v, schedule[0], schedule[1], schedule[2], n, grid_index())


@cuda.jit(device=True)
def row_add(row_grad, grad, n, idx):
    if idx < n:
        row_grad[idx] += grad[idx]


@cuda.jit(cache=True)
def row_add_kernel(row_grad, grad, n):
    row_add(row_grad, grad, n, grid_index())


@cuda.jit(cache=True)
def token_row_add_kernel(wte_grad, tokens, pos_id, grad, n):
    """row_add into the wte gradient row of the token at pos_id (token read from device memory)."""
    row_add(wte_grad[tokens[pos_id] * N_EMBD:], grad, n, grid_index())


@cuda.jit(device=True)
def head_dot(a, b):
    """sum_j a[j] * b[j] over one head's HEAD_DIM elements, in order with fma."""
    dot = ZERO
    for j in range(HEAD_DIM):
        dot = fmaf(a[j], b[j], dot)
    return dot


@cuda.jit(device=True)
def attention_softmax(logits, weights, count):
    """One head's softmax over positions 0..count-1, serial as in attention_forward_kernel."""
    max_val = NEG_HUGE
    for t in range(count):
        if logits[t] > max_val:
            max_val = logits[t]
    total = ZERO
    for t in range(count):
        w = expf(logits[t] - max_val)
        weights[t] = w
        total += w
    inv_sum = ONE / total
    for t in range(count):
        weights[t] *= inv_sum


@cuda.jit(device=True)
def attention_mix(weights, values_j, count):
    """sum_t weights[t] * values[t][j], values_j starting at column j of row 0."""
    out = ZERO
    for t in range(count):
        out = fmaf(weights[t], values_j[t * N_EMBD], out)
    return out


@cuda.jit(device=True)
def attention_forward(q, keys, values, attn_logits, attn_weights, attn_out, pos_id, h):
    """Head h of causal attention for the query at pos_id over the cached keys/values 0..pos_id."""
    hs = h * HEAD_DIM
    row = h * BLOCK_SIZE
    for t in range(pos_id + 1):
        attn_logits[row + t] = head_dot(q[hs:], keys[t * N_EMBD + hs:]) * ATTN_SCALE
    attention_softmax(attn_logits[row:], attn_weights[row:], pos_id + 1)
    for j in range(HEAD_DIM):
        attn_out[hs + j] = attention_mix(attn_weights[row:], values[hs + j:], pos_id + 1)


@cuda.jit(cache=True)
def attention_forward_kernel(q, keys, values, attn_logits, attn_weights, attn_out, pos_id):
    h = cuda.threadIdx.x
    if h < N_HEAD:
        attention_forward(q, keys, values, attn_logits, attn_weights, attn_out, pos_id, h)


@cuda.jit(device=True)
def attention_weighted_sum(grad_out_h, values_h, weights_h, count):
    """sum_t (grad_out . values[t]) * weights[t] for one head (the _h views start at the head)."""
    weighted_sum = ZERO
    for t in range(count):
        weighted_sum = fmaf(head_dot(grad_out_h, values_h[t * N_EMBD:]), weights_h[t], weighted_sum)
    return weighted_sum


@cuda.jit(device=True)
def attention_grad_logit(grad_out_h, values_h, weights_h, t, weighted_sum):
    return weights_h[t] * (head_dot(grad_out_h, values_h[t * N_EMBD:]) - weighted_sum)


@cuda.jit(device=True)
def scaled_grad(grad_logit, x, acc):
    """acc + grad_logit * x * scale: one position's term of grad_q[j] or grad_keys[t][j]."""
    return fmaf(grad_logit * x, ATTN_SCALE, acc)


@cuda.jit(device=True)
def attention_backward(q, keys, values, attn_weights, grad_attn_out, grad_q, grad_keys, grad_values, pos_id, h):
    """Head h's gradients: grad_q is written, grad_keys/grad_values rows 0..pos_id accumulate."""
    hs = h * HEAD_DIM
    grad_out_h = grad_attn_out[hs:]
    values_h = values[hs:]
    weights_h = attn_weights[h * BLOCK_SIZE:]
    grad_q_local = cuda.local.array(HEAD_DIM, np.float32)

    for t in range(pos_id + 1):
        for j in range(HEAD_DIM):
            grad_values[t * N_EMBD + hs + j] = fmaf(grad_out_h[j], weights_h[t], grad_values[t * N_EMBD + hs + j])
    weighted_sum = attention_weighted_sum(grad_out_h, values_h, weights_h, pos_id + 1)

    for j in range(HEAD_DIM):
        grad_q_local[j] = ZERO
    for t in range(pos_id + 1):
        grad_logit = attention_grad_logit(grad_out_h, values_h, weights_h, t, weighted_sum)
        for j in range(HEAD_DIM):
            row = t * N_EMBD + hs + j
            grad_q_local[j] = scaled_grad(grad_logit, keys[row], grad_q_local[j])
            grad_keys[row] = scaled_grad(grad_logit, q[hs + j], grad_keys[row])

    for j in range(HEAD_DIM):
        grad_q[hs + j] = grad_q_local[j]


@cuda.jit(cache=True)
def attention_backward_kernel(q, keys, values, attn_weights, grad_attn_out, grad_q, grad_keys, grad_values, pos_id):
    h = cuda.threadIdx.x
    if h < N_HEAD:
        attention_backward(q, keys, values, attn_weights, grad_attn_out, grad_q, grad_keys, grad_values, pos_id, h)


# ---- launch_matvec's and launch_linear_backward's cuBLAS calls, written out
#
# How cuBLAS adds up its sums, as traced on an H200 with the CUDA 13 cuBLAS (tools/microgpt_trace.py
# fit, docs/microgpt.md): sgemv OP_T with 16 columns, and OP_N at every shape microgpt.cu calls it,
# sum two halves of the terms and add them; OP_T with 64 columns sums 32 runs of two and adds them
# up in a halving tree; each run from 0, in order, with fma. sger is one fma per element.
SGEMV_T_WIDE = 64  # OP_T's sums of this many terms or more go in 32 runs
SGEMV_T_PARTS_WIDE = 32


@cuda.jit(device=True)
def run_sum(a, stride, b, k0, k1):
    """sum over k0 <= k < k1 ascending of a[k * stride] * b[k], from 0, with fma."""
    acc = ZERO
    for k in range(k0, k1):
        acc = fmaf(a[k * stride], b[k], acc)
    return acc


# The halving tree over 32 runs (part[l] += part[l + width], width 16, 8, 4, 2, 1), written as the
# nested sums it adds up, so that the runs are summed depth first and only a few partial sums are
# live at once (a local array of 32 would spill the fast engine's registers).
@cuda.jit(device=True)
def tree_leaf(a, stride, b, K, length, lane):
    return run_sum(a, stride, b, lane * length, min(lane * length + length, K))


@cuda.jit(device=True)
def tree16(a, stride, b, K, length, lane):
    return tree_leaf(a, stride, b, K, length, lane) + tree_leaf(a, stride, b, K, length, lane + 16)


@cuda.jit(device=True)
def tree8(a, stride, b, K, length, lane):
    return tree16(a, stride, b, K, length, lane) + tree16(a, stride, b, K, length, lane + 8)


@cuda.jit(device=True)
def tree4(a, stride, b, K, length, lane):
    return tree8(a, stride, b, K, length, lane) + tree8(a, stride, b, K, length, lane + 4)


@cuda.jit(device=True)
def tree2(a, stride, b, K, length, lane):
    return tree4(a, stride, b, K, length, lane) + tree4(a, stride, b, K, length, lane + 2)


@cuda.jit(device=True)
def cublas_sum(a, stride, b, K, parts):
    """sum over k < K of a[k * stride] * b[k] the way cuBLAS's sgemv adds it up: K split into
    `parts` (2 or 32) runs of ceil(K / parts) consecutive terms, each summed from 0 in order with
    fma, then a halving tree (part[l] += part[l + width], width = parts / 2 down to 1)."""
    length = (K + parts - 1) // parts
    if parts == 2:  # one loop, two accumulators: two loops unrolled side by side spill the fast engine
        first = second = ZERO
        for k in range(K):
            if k < length:
                first = fmaf(a[k * stride], b[k], first)
            else:
                second = fmaf(a[k * stride], b[k], second)
        return first + second
    return tree2(a, stride, b, K, length, 0) + tree2(a, stride, b, K, length, 1)


@cuda.jit(device=True)
def sgemv_t(w, x, y, rows, cols, r):
    """launch_matvec's cublasSgemv(OP_T): y[r] = sum_c w[r, c] * x[c] in cuBLAS's grouping."""
    if r < rows:
        y[r] = cublas_sum(w[r * cols:], 1, x, cols, SGEMV_T_PARTS_WIDE if cols >= SGEMV_T_WIDE else 2)


@cuda.jit(cache=True)
def sgemv_t_kernel(w, x, y, rows, cols):
    # Staging w's rows in shared memory first (coalesced, rows padded) made it slower on the H200,
    # 10.3 us against 3.7 (ncu, perf2 device call): splitting each element's index costs more than it saves.
    sgemv_t(w, x, y, rows, cols, grid_index())


@cuda.jit(device=True)
def sger_term(x, grad_out, acc, cols, idx):
    """acc + x[c] * grad_out[r] for element idx = r * cols + c: cublasSger's one fma per element."""
    r = idx // cols
    c = idx - r * cols
    return fmaf(x[c], grad_out[r], acc)


@cuda.jit(device=True)
def sger(x, grad_out, grad_w, rows, cols, idx):
    """launch_linear_backward's cublasSger: grad_w[r, c] += x[c] * grad_out[r], one element per thread."""
    if idx < rows * cols:
        grad_w[idx] = sger_term(x, grad_out, grad_w[idx], cols, idx)


@cuda.jit(cache=True)
def sger_kernel(x, grad_out, grad_w, rows, cols):
    sger(x, grad_out, grad_w, rows, cols, grid_index())


@cuda.jit(device=True)
def sgemv_n(w, grad_out, grad_x, rows, cols, c):
    """launch_linear_backward's cublasSgemv(OP_N, beta 1): grad_x[c] += sum_r w[r, c] * grad_out[r]
    in cuBLAS's grouping (two halves), then the old grad_x[c] added."""
    if c < cols:
        grad_x[c] += cublas_sum(w[c:], cols, grad_out, rows, 2)


@cuda.jit(cache=True)
def sgemv_n_kernel(w, grad_out, grad_x, rows, cols):
    """One block (cols <= its threads). The block first copies grad_out and w to dynamic shared
    memory, all threads at once in coalesced loads; then thread c sums column c in order, waiting
    on shared memory instead of global memory at every term."""
    smem = cuda.shared.array(0, float32)
    gs, ws = smem[:rows], smem[rows:]
    for i in range(cuda.threadIdx.x, rows * cols, cuda.blockDim.x):
        ws[i] = w[i]
    stage(grad_out, gs, rows)
    sgemv_n(ws, gs, grad_x, rows, cols, cuda.threadIdx.x)


# ---- what the C does on the host or with the runtime, as kernels a CUDA graph can record


@cuda.jit(cache=True)
def zero_kernel(x, n):
    """cudaMemset(x, 0): a kernel, so that it can be recorded into a CUDA graph."""
    idx = grid_index()
    if idx < n:
        x[idx] = ZERO


@cuda.jit(cache=True)
def copy_kernel(dst, src, n):
    """cudaMemcpy device to device: a kernel, so that it can be recorded into a CUDA graph."""
    idx = grid_index()
    if idx < n:
        dst[idx] = src[idx]


@cuda.jit(device=True)
def target_prob(probs, target_id, out, slot):
    """What forward_sequence copies to the host: the target's probability. The C takes the loss
    there, with glibc's logf (model.sequence_loss)."""
    out[slot] = probs[target_id]


@cuda.jit(cache=True)
def target_prob_kernel(probs, tokens, pos_id, target_probs):
    if first_thread():
        target_prob(probs, tokens[pos_id + 1], target_probs, pos_id)
