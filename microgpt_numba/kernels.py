"""microgpt.cu's kernels, plus the three cuBLAS calls it makes (sgemv T, sgemv N, sger) written out.

Each kernel's per-thread work is a device function, and the @cuda.jit kernel under the C's name
only works out which element or head its thread owns, as the C kernel does. The fused engine
(fast.py) calls the same device functions, so both engines do the same arithmetic in the same
order. Sums run sequentially in the C's loop order.

Fused multiply-adds are written out (fmaf) where nvcc contracts the C statement (a product feeding
an add or subtract in one expression, the first product when there are two), and nowhere else.
Left implicit, whether NVVM fuses depends on the code around an inlined device function, so the
two engines would round differently.
"""
import numpy as np
from numba import cuda

from .constants import ADAM_EPS, BETA1, BETA2, BLOCK_SIZE, HEAD_DIM, N_EMBD, N_HEAD, RMS_EPS
from .devmath import expf, fmaf, logf, rsqrtf, sqrtf

ZERO = np.float32(0.0)
ONE = np.float32(1.0)
NEG_HUGE = np.float32(-1e30)
ATTN_SCALE = ONE / np.sqrt(np.float32(HEAD_DIM))  # 1.0f / sqrtf((float)HEAD_DIM), exactly 0.5
PROB_FLOOR = np.float32(1e-20)
SOFTMAX_THREADS = 256  # scaled_softmax_kernel's block and shared scratch size


@cuda.jit(device=True)
def vec_add(a, b, out, n, idx):
    if idx < n:
        out[idx] = a[idx] + b[idx]


@cuda.jit(device=True)
def vec_add_inplace(dst, src, n, idx):
    if idx < n:
        dst[idx] += src[idx]


@cuda.jit(device=True)
def relu_forward(x, y, n, idx):
    if idx < n:
        y[idx] = x[idx] if x[idx] > ZERO else ZERO


@cuda.jit(device=True)
def relu_backward(x, grad_y, grad_x, n, idx):
    if idx < n:
        grad_x[idx] = grad_y[idx] if x[idx] > ZERO else ZERO


@cuda.jit(device=True)
def rmsnorm_forward(x, y, n):
    mean_square = ZERO
    for i in range(n):
        mean_square = fmaf(x[i], x[i], mean_square)
    mean_square /= np.float32(n)
    scale = rsqrtf(mean_square + RMS_EPS)
    for i in range(n):
        y[i] = x[i] * scale


@cuda.jit(device=True)
def rmsnorm_backward(x, grad_y, grad_x, n):
    mean_square = ZERO
    dot = ZERO
    for i in range(n):
        mean_square = fmaf(x[i], x[i], mean_square)
        dot = fmaf(grad_y[i], x[i], dot)
    mean_square /= np.float32(n)
    scale = rsqrtf(mean_square + RMS_EPS)
    scale_cubed = scale * scale * scale
    for i in range(n):
        grad_x[i] = fmaf(grad_y[i], scale, -(x[i] * dot * scale_cubed / np.float32(n)))


@cuda.jit(device=True)
def scaled_softmax(logits, probs, scale, n, scratch, tid, nthreads):
    """Block-wide softmax of logits * scale: strided max and sum, then tree reductions in scratch."""
    local_max = NEG_HUGE
    for i in range(tid, n, nthreads):
        v = logits[i] * scale
        if v > local_max:
            local_max = v
    scratch[tid] = local_max
    cuda.syncthreads()

    stride = nthreads // 2
    while stride > 0:
        if tid < stride and scratch[tid + stride] > scratch[tid]:
            scratch[tid] = scratch[tid + stride]
        cuda.syncthreads()
        stride >>= 1

    max_val = scratch[0]
    local_sum = ZERO
    for i in range(tid, n, nthreads):
        e = expf(fmaf(logits[i], scale, -max_val))
        probs[i] = e
        local_sum += e
    # Everyone has read scratch[0] before it is overwritten (the C relies on warp timing here).
    cuda.syncthreads()
    scratch[tid] = local_sum
    cuda.syncthreads()

    stride = nthreads // 2
    while stride > 0:
        if tid < stride:
            scratch[tid] += scratch[tid + stride]
        cuda.syncthreads()
        stride >>= 1

    inv_sum = ONE / scratch[0]
    for i in range(tid, n, nthreads):
        probs[i] *= inv_sum


@cuda.jit(device=True)
def cross_entropy_backward(probs, grad_logits, target_id, loss_scale, n, idx):
    if idx < n:
        grad = probs[idx] * loss_scale
        if idx == target_id:
            grad = fmaf(probs[idx], loss_scale, -loss_scale)
        grad_logits[idx] = grad


@cuda.jit(device=True)
def accumulate_loss(probs, target_id, total, slot):
    """forward_sequence's total_loss += -logf(prob), with the C's 1e-20 floor, summed on the device."""
    prob = probs[target_id]
    if prob < PROB_FLOOR:
        prob = PROB_FLOOR
    total[slot] += -logf(prob)


@cuda.jit(device=True)
def adam_update(data, grad, m, v, lr_t, beta1_corr, beta2_corr, n, idx):
    if idx < n:
        g = grad[idx]
        m_new = fmaf(BETA1, m[idx], (ONE - BETA1) * g)
        v_new = fmaf(BETA2, v[idx], (ONE - BETA2) * g * g)
        m[idx] = m_new
        v[idx] = v_new
        m_hat = m_new / beta1_corr
        v_hat = v_new / beta2_corr
        data[idx] -= lr_t * m_hat / (sqrtf(v_hat) + ADAM_EPS)
        grad[idx] = ZERO


@cuda.jit(device=True)
def row_add(row_grad, grad, n, idx):
    if idx < n:
        row_grad[idx] += grad[idx]


@cuda.jit(device=True)
def attention_forward(q, keys, values, attn_logits, attn_weights, attn_out, pos_id, h):
    """Head h of causal attention for the query at pos_id over the cached keys/values 0..pos_id."""
    hs = h * HEAD_DIM
    logits_local = cuda.local.array(BLOCK_SIZE, np.float32)
    weights_local = cuda.local.array(BLOCK_SIZE, np.float32)
    max_val = NEG_HUGE
    total = ZERO

    for t in range(pos_id + 1):
        dot = ZERO
        k_t = t * N_EMBD + hs
        for j in range(HEAD_DIM):
            dot = fmaf(q[hs + j], keys[k_t + j], dot)
        logits_local[t] = dot * ATTN_SCALE
        if logits_local[t] > max_val:
            max_val = logits_local[t]

    for t in range(pos_id + 1):
        w = expf(logits_local[t] - max_val)
        weights_local[t] = w
        total += w

    inv_sum = ONE / total
    for t in range(pos_id + 1):
        w = weights_local[t] * inv_sum
        attn_logits[h * BLOCK_SIZE + t] = logits_local[t]
        attn_weights[h * BLOCK_SIZE + t] = w
        weights_local[t] = w

    for j in range(HEAD_DIM):
        out = ZERO
        for t in range(pos_id + 1):
            out = fmaf(weights_local[t], values[t * N_EMBD + hs + j], out)
        attn_out[hs + j] = out


@cuda.jit(device=True)
def attention_backward(q, keys, values, attn_weights, grad_attn_out, grad_q, grad_keys, grad_values, pos_id, h):
    """Head h's gradients: grad_q is written, grad_keys/grad_values rows 0..pos_id accumulate."""
    hs = h * HEAD_DIM
    grad_w = cuda.local.array(BLOCK_SIZE, np.float32)
    grad_q_local = cuda.local.array(HEAD_DIM, np.float32)
    weighted_sum = ZERO

    for j in range(HEAD_DIM):
        grad_q_local[j] = ZERO

    for t in range(pos_id + 1):
        row = t * N_EMBD + hs
        dot = ZERO
        weight = attn_weights[h * BLOCK_SIZE + t]
        for j in range(HEAD_DIM):
            go = grad_attn_out[hs + j]
            dot = fmaf(go, values[row + j], dot)
            grad_values[row + j] = fmaf(go, weight, grad_values[row + j])
        grad_w[t] = dot
        weighted_sum = fmaf(dot, weight, weighted_sum)

    for t in range(pos_id + 1):
        row = t * N_EMBD + hs
        weight = attn_weights[h * BLOCK_SIZE + t]
        grad_logit = weight * (grad_w[t] - weighted_sum)
        for j in range(HEAD_DIM):
            grad_q_local[j] = fmaf(grad_logit * keys[row + j], ATTN_SCALE, grad_q_local[j])
            grad_keys[row + j] = fmaf(grad_logit * q[hs + j], ATTN_SCALE, grad_keys[row + j])

    for j in range(HEAD_DIM):
        grad_q[hs + j] = grad_q_local[j]


@cuda.jit(device=True)
def sum_in_halves(w, start, stride, x, count):
    """cuBLAS's sgemv order at microgpt's shapes: two contiguous halves (the first one longer when
    count is odd), each summed in order with fma, then added (tools/cublas_order_probe.cu)."""
    half = (count + 1) // 2
    first = ZERO
    for k in range(half):
        first = fmaf(w[start + k * stride], x[k], first)
    second = ZERO
    for k in range(half, count):
        second = fmaf(w[start + k * stride], x[k], second)
    return first + second


@cuda.jit(device=True)
def sum_in_pairs(w, start, x, count):
    """cuBLAS's sgemv OP_T order for 64 terms: 32 pairs, each fma'd from zero, added by a halving tree."""
    part = cuda.local.array(32, np.float32)
    for p in range(count // 2):
        part[p] = fmaf(w[start + 2 * p + 1], x[2 * p + 1], fmaf(w[start + 2 * p], x[2 * p], ZERO))
    width = count // 4
    while width > 0:
        for p in range(width):
            part[p] = part[p] + part[p + width]
        width //= 2
    return part[0]


@cuda.jit(device=True)
def sgemv_t(w, x, y, rows, cols, r):
    """launch_matvec's cublasSgemv(OP_T): y[r] = sum_c w[r, c] * x[c], in cuBLAS's order."""
    if r < rows:
        if cols == 64:
            y[r] = sum_in_pairs(w, r * cols, x, cols)
        else:
            y[r] = sum_in_halves(w, r * cols, 1, x, cols)


@cuda.jit(device=True)
def sger(x, grad_out, grad_w, rows, cols, idx):
    """launch_linear_backward's cublasSger: grad_w[r, c] += x[c] * grad_out[r], one element per thread."""
    if idx < rows * cols:
        r = idx // cols
        c = idx - r * cols
        grad_w[idx] = fmaf(x[c], grad_out[r], grad_w[idx])


@cuda.jit(device=True)
def sgemv_n(w, grad_out, grad_x, rows, cols, c):
    """launch_linear_backward's cublasSgemv(OP_N, beta 1): grad_x[c] += sum_r w[r, c] * grad_out[r]."""
    if c < cols:
        grad_x[c] += sum_in_halves(w, c, cols, grad_out, rows)


@cuda.jit(device=True)
def grid_index():
    return cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x


@cuda.jit(device=True)
def first_thread():
    return cuda.blockIdx.x == 0 and cuda.threadIdx.x == 0


@cuda.jit(cache=True)
def vec_add_kernel(a, b, out, n):
    vec_add(a, b, out, n, grid_index())


@cuda.jit(cache=True)
def token_embed_kernel(wte, pos_emb, tokens, pos_id, out, n):
    """vec_add of the token's wte row (token read from device memory) and the position's wpe row."""
    vec_add(wte[tokens[pos_id] * N_EMBD:], pos_emb, out, n, grid_index())


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


@cuda.jit(cache=True)
def loss_kernel(probs, tokens, pos_id, total):
    if first_thread():
        accumulate_loss(probs, tokens[pos_id + 1], total, 0)


@cuda.jit(cache=True)
def vec_add_inplace_kernel(dst, src, n):
    vec_add_inplace(dst, src, n, grid_index())


@cuda.jit(cache=True)
def relu_forward_kernel(x, y, n):
    relu_forward(x, y, n, grid_index())


@cuda.jit(cache=True)
def relu_backward_kernel(x, grad_y, grad_x, n):
    relu_backward(x, grad_y, grad_x, n, grid_index())


@cuda.jit(cache=True)
def rmsnorm_forward_kernel(x, y, n):
    if first_thread():
        rmsnorm_forward(x, y, n)


@cuda.jit(cache=True)
def rmsnorm_backward_kernel(x, grad_y, grad_x, n):
    if first_thread():
        rmsnorm_backward(x, grad_y, grad_x, n)


@cuda.jit(cache=True)
def scaled_softmax_kernel(logits, probs, scale, n):
    scratch = cuda.shared.array(SOFTMAX_THREADS, np.float32)
    scaled_softmax(logits, probs, scale, n, scratch, cuda.threadIdx.x, cuda.blockDim.x)


@cuda.jit(cache=True)
def cross_entropy_backward_kernel(probs, grad_logits, tokens, pos_id, loss_scale, n):
    cross_entropy_backward(probs, grad_logits, tokens[pos_id + 1], loss_scale, n, grid_index())


@cuda.jit(cache=True)
def adam_update_kernel(data, grad, m, v, schedule, n):
    """schedule = (lr_t, beta1_corr, beta2_corr) of this step, in device memory."""
    adam_update(data, grad, m, v, schedule[0], schedule[1], schedule[2], n, grid_index())


@cuda.jit(cache=True)
def row_add_kernel(row_grad, grad, n):
    row_add(row_grad, grad, n, grid_index())


@cuda.jit(cache=True)
def token_row_add_kernel(wte_grad, tokens, pos_id, grad, n):
    """row_add into the wte gradient row of the token at pos_id (token read from device memory)."""
    row_add(wte_grad[tokens[pos_id] * N_EMBD:], grad, n, grid_index())


@cuda.jit(cache=True)
def attention_forward_kernel(q, keys, values, attn_logits, attn_weights, attn_out, pos_id):
    h = cuda.threadIdx.x
    if h < N_HEAD:
        attention_forward(q, keys, values, attn_logits, attn_weights, attn_out, pos_id, h)


@cuda.jit(cache=True)
def attention_backward_kernel(q, keys, values, attn_weights, grad_attn_out, grad_q, grad_keys, grad_values, pos_id):
    h = cuda.threadIdx.x
    if h < N_HEAD:
        attention_backward(q, keys, values, attn_weights, grad_attn_out, grad_q, grad_keys, grad_values, pos_id, h)


@cuda.jit(cache=True)
def sgemv_t_kernel(w, x, y, rows, cols):
    sgemv_t(w, x, y, rows, cols, grid_index())


@cuda.jit(cache=True)
def sger_kernel(x, grad_out, grad_w, rows, cols):
    sger(x, grad_out, grad_w, rows, cols, grid_index())


@cuda.jit(cache=True)
def sgemv_n_kernel(w, grad_out, grad_x, rows, cols):
    sgemv_n(w, grad_out, grad_x, rows, cols, grid_index())
