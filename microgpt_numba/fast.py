"""The fast engine: the training steps, then the sampling, in persistent single-block kernels (a launch
for each chunk of steps or samples: see chunk_plan).

A step's positions run in parallel. microgpt.cu's position loops only order accumulations, and
attention is the one link between positions (position t reads keys/values 0..t), so each phase
of the block (separated by cuda.syncthreads()) does one C launch's work for every position at
once, calling the same device functions as the reference kernels (kernels.py), and every float
is computed with the C's operations in the C's order:
- forward: position t's attention runs after every position's keys and values exist;
- backward, each position's chain of gradients uses its own copy of Scratch (the per-position
  scratch arena); what the C accumulates over positions (every parameter gradient element, the
  attention's grad_keys/grad_values rows, the wte row of a token seen twice) is summed by one
  thread per element over the positions in the C's order, n-1 down to 0;
- a position's softmax runs its lanes' strided work in parallel and scaled_softmax_kernel's two
  trees over SOFTMAX_THREADS lanes in one thread (live_tree).

It uses the reference engine's arenas: the host passes each view's offset (tables built from the
reference structs) and the kernels carve the same views. When the arenas fit in shared memory the
kernels work on copies there, staged in at the start and out at the end (parameters, train
cache; the per-position scratch lives only there), past the 48 KiB default through CUDA's
opt-in. At the end the scratch arena gets position 0's copy, which is where the C's last
backward pass leaves it.

The host keeps what is host math in the C: glibc powf for Adam's schedule and the glibc
rand_uniform draws for sampling; the loss is taken on the host from each position's target
probability, as in the C (model.sequence_loss).
"""
import numpy as np
from numba import config, cuda, float32

from cudakit.arrays import address
from cudakit.devmath import fma as fmaf
from cudakit.sharedmem import opt_in, optin_bytes

from .arena import LAYER_CACHE_FIELDS, KV_FIELDS, FloatArena, position_cache_fields, scratch_fields
from .constants import BLOCK_SIZE, HEAD_DIM, MLP_HIDDEN, N_EMBD, N_HEAD, N_LAYER
from .dataset import tokenize_doc, trained_positions
from .glibc_rand import rand_uniform
from .kernels import (ATTN_SCALE, ONE, SOFTMAX_THREADS, ZERO, adam_update, attention_grad_logit, attention_mix,
                      attention_softmax, attention_weighted_sum, cross_entropy_backward, head_dot, relu_backward,
                      relu_forward, rms_scale, rmsnorm_backward_element, rmsnorm_forward_at, row_add, scaled_grad,
                      sgemv_n, sgemv_t, sger_term, softmax_local_exp, softmax_local_max, softmax_normalize,
                      target_prob, tree_step, vec_add, vec_add_inplace)
from .model import adam_schedule, sequence_loss

THREADS = 512
# The simulator pays for every thread at every barrier. Which thread of the block computes an element
# never changes the element's operations (the phases stride over the block), so the simulator runs a
# warp: the same bits, five times sooner (tests/microgpt/test_microgpt_fast.py holds a THREADS run to it).
LAUNCH_THREADS = 32 if config.ENABLE_CUDASIM else THREADS
# 512 threads x 128 registers fill an SM's 64K registers. Uncapped, ptxas gives train_kernel 137 for
# sm_90 and the launch would fail; capped, it spills nothing. The simulator takes no such option.
KERNEL_OPTIONS = {"cache": True} if config.ENABLE_CUDASIM else {"cache": True, "max_registers": 128}
# The kernels' static shared arrays (softmax lanes, tables) stay under this; the rest of the
# block's opt-in shared memory may hold staged arenas.
STATIC_SHARED_BYTES = 48 * 1024

# Column indices of the offset tables, in the order arena.py carves the views.
DATA, GRAD, M, V = range(4)
WTE, WPE, LM_HEAD = range(3)
WQ, WK, WV, WO, FC1, FC2 = range(6)  # + 3 + 6 * layer
EMBED_IN, X0, LOGITS, PROBS = range(4)
X_IN, ATTN_NORM, Q, ATTN_LOGITS, ATTN_WEIGHTS, ATTN_OUT, ATTN_PROJ, MLP_IN, MLP_NORM, FC1_OUT, RELU, FC2_OUT, X_OUT = \
    range(13)  # + 4 + 13 * layer
KEYS, VALUES, GRAD_KEYS, GRAD_VALUES = range(4)
(GRAD_LOGITS, GRAD_X, GRAD_X_IN, GRAD_MLP_IN, GRAD_RELU, GRAD_FC1, GRAD_MLP_NORM, GRAD_NORM_TMP, GRAD_ATTN_OUT,
 GRAD_Q, GRAD_ATTN_NORM, GRAD_EMBED_IN) = range(12)
POS_FIELDS = len(position_cache_fields(0))
LC_FIELDS = len(LAYER_CACHE_FIELDS)
N_PARAMS = 3 + 6 * N_LAYER
POS_COLUMNS = POS_FIELDS + N_LAYER * LC_FIELDS
SCRATCH_FIELDS = len(scratch_fields(0))
RED_COLUMNS = SOFTMAX_THREADS + 1  # a position's softmax lanes, then its max


def _offset(view, base):
    return (address(view) - address(base)) // 4


class Layout:
    """Device tables of view offsets: params [param, data/grad/m/v], positions [pos, field],
    key/value rows [layer, field], scratch [field]; each param's element count; and the
    per-position scratch arena (BLOCK_SIZE copies of Scratch's layout)."""

    def __init__(self, model, param_arena, cache, cache_arena, scratch, scratch_arena):
        params = model.params()
        pbase, cbase, sbase = param_arena.base, cache_arena.base, scratch_arena.base
        ptab = [[_offset(getattr(p, f), pbase) for f in ("data", "grad", "m", "v")] for p in params]
        postab = []
        for pc in cache.pos:
            row = [_offset(getattr(pc, name), cbase) for name, _ in position_cache_fields(0)]
            for lc in pc.layers:
                row += [_offset(getattr(lc, name), cbase) for name, _ in LAYER_CACHE_FIELDS]
            postab.append(row)
        kvtab = [[_offset(getattr(cache, name)[layer], cbase) for name in KV_FIELDS] for layer in range(N_LAYER)]
        stab = [_offset(getattr(scratch, name), sbase) for name, _ in scratch_fields(0)]
        self.ptab = cuda.to_device(np.array(ptab, dtype=np.int32))
        self.pcount = cuda.to_device(np.array([p.count() for p in params], dtype=np.int32))
        self.postab = cuda.to_device(np.array(postab, dtype=np.int32))
        self.kvtab = cuda.to_device(np.array(kvtab, dtype=np.int32))
        self.stab = cuda.to_device(np.array(stab, dtype=np.int32))
        self.arenas = (pbase, cbase, sbase)
        self.pos_scratch = FloatArena(BLOCK_SIZE * sbase.shape[0]).base


@cuda.jit(device=True)
def load_tables(ptab, postab, kvtab, stab, ptab_s, postab_s, kvtab_s, stab_s, tid, nt):
    """Copies the offset tables to shared memory: every view a phase carves starts with a lookup."""
    for i in range(tid, N_PARAMS * 4, nt):
        ptab_s[i // 4, i % 4] = ptab[i // 4, i % 4]
    for i in range(tid, BLOCK_SIZE * POS_COLUMNS, nt):
        postab_s[i // POS_COLUMNS, i % POS_COLUMNS] = postab[i // POS_COLUMNS, i % POS_COLUMNS]
    for i in range(tid, N_LAYER * 4, nt):
        kvtab_s[i // 4, i % 4] = kvtab[i // 4, i % 4]
    for i in range(tid, SCRATCH_FIELDS, nt):
        stab_s[i] = stab[i]
    cuda.syncthreads()


@cuda.jit(device=True)
def stage(src, dst, count, tid, nt):
    for i in range(tid, count, nt):
        dst[i] = src[i]


@cuda.jit(device=True)
def forward_positions(params, cache, ptab, postab, kvtab, vocab_size, tokens, first, last, tid, nt):
    """forward_position for positions first..last-1 at once; keys/values of earlier ones are cached."""
    count = last - first
    for k in range(tid, count * N_EMBD, nt):  # the token's wte row plus the position's wpe row
        pos, i = first + k // N_EMBD, k % N_EMBD
        vec_add(params[ptab[WTE, DATA] + tokens[pos] * N_EMBD:], params[ptab[WPE, DATA] + pos * N_EMBD:],
                cache[postab[pos, EMBED_IN]:], N_EMBD, i)
    cuda.syncthreads()
    for k in range(tid, count * N_EMBD, nt):
        pos, i = first + k // N_EMBD, k % N_EMBD
        embed_in = cache[postab[pos, EMBED_IN]:]
        rmsnorm_forward_at(embed_in, cache[postab[pos, X0]:], rms_scale(embed_in, N_EMBD), i)
    cuda.syncthreads()

    for layer in range(N_LAYER):
        lc = POS_FIELDS + layer * LC_FIELDS
        pw = 3 + 6 * layer
        keys = cache[kvtab[layer, KEYS]:]
        values = cache[kvtab[layer, VALUES]:]
        for k in range(tid, count * N_EMBD, nt):  # copy_device into x_in; rmsnorm reads its source
            pos, i = first + k // N_EMBD, k % N_EMBD
            hidden = cache[postab[pos, lc - LC_FIELDS + X_OUT]:] if layer else cache[postab[pos, X0]:]
            cache[postab[pos, lc + X_IN] + i] = hidden[i]
            rmsnorm_forward_at(hidden, cache[postab[pos, lc + ATTN_NORM]:], rms_scale(hidden, N_EMBD), i)
        cuda.syncthreads()
        for k in range(tid, count * 3 * N_EMBD, nt):  # wq, wk, wv
            pos, r = first + k // (3 * N_EMBD), k % (3 * N_EMBD)
            which = r // N_EMBD
            out = cache[postab[pos, lc + Q]:] if which == 0 else \
                (keys[pos * N_EMBD:] if which == 1 else values[pos * N_EMBD:])
            sgemv_t(params[ptab[pw + WQ + which, DATA]:], cache[postab[pos, lc + ATTN_NORM]:], out, N_EMBD, N_EMBD,
                    r - which * N_EMBD)
        cuda.syncthreads()
        attention_forward_positions(cache, postab, lc, keys, values, first, count, tid, nt)
        for k in range(tid, count * N_EMBD, nt):
            pos, r = first + k // N_EMBD, k % N_EMBD
            sgemv_t(params[ptab[pw + WO, DATA]:], cache[postab[pos, lc + ATTN_OUT]:],
                    cache[postab[pos, lc + ATTN_PROJ]:], N_EMBD, N_EMBD, r)
        cuda.syncthreads()
        for k in range(tid, count * N_EMBD, nt):
            pos, i = first + k // N_EMBD, k % N_EMBD
            vec_add(cache[postab[pos, lc + ATTN_PROJ]:], cache[postab[pos, lc + X_IN]:],
                    cache[postab[pos, lc + MLP_IN]:], N_EMBD, i)
        cuda.syncthreads()
        for k in range(tid, count * N_EMBD, nt):
            pos, i = first + k // N_EMBD, k % N_EMBD
            mlp_in = cache[postab[pos, lc + MLP_IN]:]
            rmsnorm_forward_at(mlp_in, cache[postab[pos, lc + MLP_NORM]:], rms_scale(mlp_in, N_EMBD), i)
        cuda.syncthreads()
        for k in range(tid, count * MLP_HIDDEN, nt):  # matvec then relu of the same element
            pos, r = first + k // MLP_HIDDEN, k % MLP_HIDDEN
            fc1 = cache[postab[pos, lc + FC1_OUT]:]
            sgemv_t(params[ptab[pw + FC1, DATA]:], cache[postab[pos, lc + MLP_NORM]:], fc1, MLP_HIDDEN, N_EMBD, r)
            relu_forward(fc1, cache[postab[pos, lc + RELU]:], MLP_HIDDEN, r)
        cuda.syncthreads()
        for k in range(tid, count * N_EMBD, nt):  # matvec then the residual add of the same element
            pos, r = first + k // N_EMBD, k % N_EMBD
            fc2 = cache[postab[pos, lc + FC2_OUT]:]
            sgemv_t(params[ptab[pw + FC2, DATA]:], cache[postab[pos, lc + RELU]:], fc2, N_EMBD, MLP_HIDDEN, r)
            vec_add(fc2, cache[postab[pos, lc + MLP_IN]:], cache[postab[pos, lc + X_OUT]:], N_EMBD, r)
        cuda.syncthreads()

    for k in range(tid, count * vocab_size, nt):
        pos, r = first + k // vocab_size, k % vocab_size
        hidden = cache[postab[pos, POS_FIELDS + (N_LAYER - 1) * LC_FIELDS + X_OUT]:] if N_LAYER else \
            cache[postab[pos, X0]:]
        sgemv_t(params[ptab[LM_HEAD, DATA]:], hidden, cache[postab[pos, LOGITS]:], vocab_size, N_EMBD, r)
    cuda.syncthreads()


@cuda.jit(device=True)
def attention_forward_positions(cache, postab, lc, keys, values, first, count, tid, nt):
    """attention_forward for every (position, head): logits per key, softmax per head, output per element."""
    for k in range(tid, count * N_HEAD * BLOCK_SIZE, nt):
        pos, h, t = first + k // (N_HEAD * BLOCK_SIZE), (k // BLOCK_SIZE) % N_HEAD, k % BLOCK_SIZE
        if t <= pos:
            hs = h * HEAD_DIM
            cache[postab[pos, lc + ATTN_LOGITS] + h * BLOCK_SIZE + t] = \
                head_dot(cache[postab[pos, lc + Q] + hs:], keys[t * N_EMBD + hs:]) * ATTN_SCALE
    cuda.syncthreads()
    for k in range(tid, count * N_HEAD, nt):
        pos, h = first + k // N_HEAD, k % N_HEAD
        attention_softmax(cache[postab[pos, lc + ATTN_LOGITS] + h * BLOCK_SIZE:],
                          cache[postab[pos, lc + ATTN_WEIGHTS] + h * BLOCK_SIZE:], pos + 1)
    cuda.syncthreads()
    for k in range(tid, count * N_EMBD, nt):
        pos, c = first + k // N_EMBD, k % N_EMBD
        cache[postab[pos, lc + ATTN_OUT] + c] = attention_mix(
            cache[postab[pos, lc + ATTN_WEIGHTS] + (c // HEAD_DIM) * BLOCK_SIZE:], values[c:], pos + 1)
    cuda.syncthreads()


@cuda.jit(device=True)
def live_tree(row, live, take_max):
    """scaled_softmax's tree over SOFTMAX_THREADS lanes in one thread, skipping the steps whose right
    operand is a lane past the last live one (lane >= vocabulary size): such a lane holds the
    reduction's identity (-1e30, below every live lane's max, or +0 beside non-negative sums), so
    each skipped step would leave its left operand unchanged, and the result is the same float."""
    stride = SOFTMAX_THREADS // 2
    while stride > 0:
        for lane in range(live - stride):
            tree_step(row, lane, stride, take_max)
        live = min(live, stride)
        stride >>= 1


@cuda.jit(device=True)
def softmax_positions(cache, postab, vocab_size, scale, first, count, red, tid, nt):
    """scaled_softmax_kernel (SOFTMAX_THREADS threads) for positions first..first+count-1 at once:
    the lanes' strided work in parallel, each position's two trees by one thread in red[pos]."""
    lanes = SOFTMAX_THREADS
    live = min(vocab_size, lanes)
    for k in range(tid, count * live, nt):
        pos, lane = first + k // live, k % live
        red[pos, lane] = softmax_local_max(cache[postab[pos, LOGITS]:], scale, vocab_size, lane, lanes)
    cuda.syncthreads()
    for pos in range(first + tid, first + count, nt):
        live_tree(red[pos], live, True)
        red[pos, lanes] = red[pos, 0]  # the max, kept past the lanes the sums overwrite
    cuda.syncthreads()
    for k in range(tid, count * live, nt):
        pos, lane = first + k // live, k % live
        red[pos, lane] = softmax_local_exp(cache[postab[pos, LOGITS]:], cache[postab[pos, PROBS]:], scale,
                                           red[pos, lanes], vocab_size, lane, lanes)
    cuda.syncthreads()
    for pos in range(first + tid, first + count, nt):
        live_tree(red[pos], live, False)
    cuda.syncthreads()
    for k in range(tid, count * live, nt):
        pos, lane = first + k // live, k % live
        softmax_normalize(cache[postab[pos, PROBS]:], ONE / red[pos, 0], vocab_size, lane, lanes)
    cuda.syncthreads()


@cuda.jit(device=True)
def rmsnorm_backward_residual_positions(cache, ps, sc, postab, stab, x_col, grad_y, residual, copy_to, n, tid, nt):
    """Every position: rmsnorm_backward of cache field x_col into grad_norm_tmp, the residual
    gradient += it, then copied on (the C's launch, vec_add_inplace and copy_device)."""
    for k in range(tid, n * N_EMBD, nt):
        pos, c = k // N_EMBD, k % N_EMBD
        s = ps[pos * sc:]
        rmsnorm_backward_element(cache[postab[pos, x_col]:], s[stab[grad_y]:], s[stab[GRAD_NORM_TMP]:], N_EMBD, c)
        vec_add_inplace(s[stab[residual]:], s[stab[GRAD_NORM_TMP]:], N_EMBD, c)
        s[stab[copy_to] + c] = s[stab[residual] + c]
    cuda.syncthreads()


@cuda.jit(device=True)
def linear_backward_positions(params, cache, ps, sc, ptab, postab, stab, p, x_col, grad_out, grad_in, rows, cols,
                              relu_col, n, tid, nt):
    """launch_linear_backward (y = W x, W rows x cols) for all n positions in one phase.

    Threads k < n * cols: grad_in = 0 + W^T grad_out of one (position, column). The others: one
    element each of W.grad, adding its sger term of every position in the C's order, n-1 down to 0.
    x is the cache column x_col, grad_out and grad_in scratch fields. For fc2 (relu_col >= 0, the
    cache column of fc1's output) the C's relu_backward and grad_mlp_in = grad_x follow, element by
    element: the sgemv's thread wrote that element, so they need no barrier of their own.
    """
    for k in range(tid, n * cols + rows * cols, nt):
        if k < n * cols:
            pos, c = k // cols, k % cols
            s = ps[pos * sc:]
            grad_input = s[stab[grad_in]:]
            grad_input[c] = ZERO
            sgemv_n(params[ptab[p, DATA]:], s[stab[grad_out]:], grad_input, rows, cols, c)
            if relu_col >= 0:
                relu_backward(cache[postab[pos, relu_col]:], grad_input, s[stab[GRAD_FC1]:], cols, c)
                if c < N_EMBD:
                    s[stab[GRAD_MLP_IN] + c] = s[stab[grad_out] + c]
        else:
            e = k - n * cols
            grad_w = params[ptab[p, GRAD]:]
            acc = grad_w[e]
            for pos in range(n - 1, -1, -1):
                acc = sger_term(cache[postab[pos, x_col]:], ps[pos * sc + stab[grad_out]:], acc, cols, e)
            grad_w[e] = acc
    cuda.syncthreads()


@cuda.jit(device=True)
def backward_sequence(params, cache, ps, sc, ptab, postab, kvtab, stab, wsum, vocab_size, tokens, n, tid, nt):
    """backward_sequence for all n positions; ps is the per-position scratch (copy pos at pos * sc)."""
    loss_scale = ONE / np.float32(n)
    for k in range(tid, n * vocab_size, nt):
        pos, i = k // vocab_size, k % vocab_size
        cross_entropy_backward(cache[postab[pos, PROBS]:], ps[pos * sc + stab[GRAD_LOGITS]:], tokens[pos + 1],
                               loss_scale, vocab_size, i)
    cuda.syncthreads()
    # lm_head: grad_x = 0 + lm_head^T grad_logits; lm_head.grad's sger.
    top = POS_FIELDS + (N_LAYER - 1) * LC_FIELDS + X_OUT if N_LAYER else X0
    linear_backward_positions(params, cache, ps, sc, ptab, postab, stab, LM_HEAD, top, GRAD_LOGITS, GRAD_X,
                              vocab_size, N_EMBD, -1, n, tid, nt)

    for layer in range(N_LAYER - 1, -1, -1):
        lc = POS_FIELDS + layer * LC_FIELDS
        pw = 3 + 6 * layer
        # fc2: grad_relu = 0 + fc2^T grad_x, relu_backward, grad_mlp_in = grad_x; fc2.grad's sger.
        linear_backward_positions(params, cache, ps, sc, ptab, postab, stab, pw + FC2, lc + RELU, GRAD_X, GRAD_RELU,
                                  N_EMBD, MLP_HIDDEN, lc + FC1_OUT, n, tid, nt)
        # fc1: grad_mlp_norm = 0 + fc1^T grad_fc1; fc1.grad's sger.
        linear_backward_positions(params, cache, ps, sc, ptab, postab, stab, pw + FC1, lc + MLP_NORM, GRAD_FC1,
                                  GRAD_MLP_NORM, MLP_HIDDEN, N_EMBD, -1, n, tid, nt)
        # rmsnorm_backward into grad_norm_tmp, grad_mlp_in += it, grad_x_in = grad_mlp_in.
        rmsnorm_backward_residual_positions(cache, ps, sc, postab, stab, lc + MLP_IN, GRAD_MLP_NORM, GRAD_MLP_IN,
                                            GRAD_X_IN, n, tid, nt)
        # wo: grad_attn_out = 0 + wo^T grad_mlp_in; wo.grad's sger.
        linear_backward_positions(params, cache, ps, sc, ptab, postab, stab, pw + WO, lc + ATTN_OUT, GRAD_MLP_IN,
                                  GRAD_ATTN_OUT, N_EMBD, N_EMBD, -1, n, tid, nt)
        attention_backward_positions(cache, ps, sc, postab, kvtab, stab, wsum, lc, layer, n, tid, nt)
        # wq, wk, wv: grad_attn_norm = 0 + q's + k's + v's sgemv_n, in that order; their three sgers.
        # Not linear_backward_positions: three maps sum into one buffer, and k's and v's grad_out are
        # the cache's grad_keys/grad_values rows, not scratch fields.
        grad_keys = cache[kvtab[layer, GRAD_KEYS]:]
        grad_values = cache[kvtab[layer, GRAD_VALUES]:]
        for k in range(tid, n * N_EMBD + 3 * N_EMBD * N_EMBD, nt):
            if k < n * N_EMBD:
                pos, c = k // N_EMBD, k % N_EMBD
                s = ps[pos * sc:]
                grad_attn_norm = s[stab[GRAD_ATTN_NORM]:]
                grad_attn_norm[c] = ZERO
                sgemv_n(params[ptab[pw + WQ, DATA]:], s[stab[GRAD_Q]:], grad_attn_norm, N_EMBD, N_EMBD, c)
                sgemv_n(params[ptab[pw + WK, DATA]:], grad_keys[pos * N_EMBD:], grad_attn_norm, N_EMBD, N_EMBD, c)
                sgemv_n(params[ptab[pw + WV, DATA]:], grad_values[pos * N_EMBD:], grad_attn_norm, N_EMBD, N_EMBD, c)
            else:
                e = k - n * N_EMBD
                which = e // (N_EMBD * N_EMBD)
                e -= which * N_EMBD * N_EMBD
                grad_w = params[ptab[pw + WQ + which, GRAD]:]
                acc = grad_w[e]
                for pos in range(n - 1, -1, -1):
                    grad_out = ps[pos * sc + stab[GRAD_Q]:] if which == 0 else \
                        (grad_keys[pos * N_EMBD:] if which == 1 else grad_values[pos * N_EMBD:])
                    acc = sger_term(cache[postab[pos, lc + ATTN_NORM]:], grad_out, acc, N_EMBD, e)
                grad_w[e] = acc
        cuda.syncthreads()
        # rmsnorm_backward into grad_norm_tmp, grad_x_in += it, grad_x = grad_x_in.
        rmsnorm_backward_residual_positions(cache, ps, sc, postab, stab, lc + X_IN, GRAD_ATTN_NORM, GRAD_X_IN, GRAD_X,
                                            n, tid, nt)

    for k in range(tid, n * N_EMBD, nt):
        pos, c = k // N_EMBD, k % N_EMBD
        s = ps[pos * sc:]
        rmsnorm_backward_element(cache[postab[pos, EMBED_IN]:], s[stab[GRAD_X]:], s[stab[GRAD_EMBED_IN]:], N_EMBD, c)
    cuda.syncthreads()
    # wte rows: a token's row sums the positions holding it, n-1 down to 0; wpe: one row per position.
    for k in range(tid, vocab_size * N_EMBD + n * N_EMBD, nt):
        if k < vocab_size * N_EMBD:
            row, c = k // N_EMBD, k % N_EMBD
            for pos in range(n - 1, -1, -1):
                if tokens[pos] == row:
                    row_add(params[ptab[WTE, GRAD] + row * N_EMBD:], ps[pos * sc + stab[GRAD_EMBED_IN]:], N_EMBD, c)
        else:
            pos, c = (k - vocab_size * N_EMBD) // N_EMBD, k % N_EMBD
            row_add(params[ptab[WPE, GRAD] + pos * N_EMBD:], ps[pos * sc + stab[GRAD_EMBED_IN]:], N_EMBD, c)
    cuda.syncthreads()


@cuda.jit(device=True)
def attention_backward_positions(cache, ps, sc, postab, kvtab, stab, wsum, lc, layer, n, tid, nt):
    """attention_backward for every (position, head) in two phases.

    First, per (position, head, element): the head's weighted sum (kept in wsum) and grad_q. Then,
    per (key row t, element): grad_values[t] and grad_keys[t] from zero, adding the term of every
    position pos >= t in the C's order, n-1 down to t; rows t >= n stay zero as after the C's memset.
    """
    keys = cache[kvtab[layer, KEYS]:]
    values = cache[kvtab[layer, VALUES]:]
    for k in range(tid, n * N_EMBD, nt):
        pos, c = k // N_EMBD, k % N_EMBD
        h = c // HEAD_DIM
        hs = h * HEAD_DIM
        grad_out_h = ps[pos * sc + stab[GRAD_ATTN_OUT] + hs:]
        weights_h = cache[postab[pos, lc + ATTN_WEIGHTS] + h * BLOCK_SIZE:]
        weighted_sum = attention_weighted_sum(grad_out_h, values[hs:], weights_h, pos + 1)
        grad_q = ZERO
        for t in range(pos + 1):
            grad_logit = attention_grad_logit(grad_out_h, values[hs:], weights_h, t, weighted_sum)
            grad_q = scaled_grad(grad_logit, keys[t * N_EMBD + c], grad_q)
        ps[pos * sc + stab[GRAD_Q] + c] = grad_q
        if c == hs:
            wsum[pos, h] = weighted_sum
    cuda.syncthreads()
    for k in range(tid, BLOCK_SIZE * N_EMBD, nt):
        t, c = k // N_EMBD, k % N_EMBD
        h = c // HEAD_DIM
        hs = h * HEAD_DIM
        grad_v = ZERO
        grad_k = ZERO
        for pos in range(n - 1, t - 1, -1):
            grad_out_h = ps[pos * sc + stab[GRAD_ATTN_OUT] + hs:]
            weights_h = cache[postab[pos, lc + ATTN_WEIGHTS] + h * BLOCK_SIZE:]
            grad_v = fmaf(grad_out_h[c - hs], weights_h[t], grad_v)
            grad_logit = attention_grad_logit(grad_out_h, values[hs:], weights_h, t, wsum[pos, h])
            grad_k = scaled_grad(grad_logit, cache[postab[pos, lc + Q] + c], grad_k)
        cache[kvtab[layer, GRAD_VALUES] + t * N_EMBD + c] = grad_v
        cache[kvtab[layer, GRAD_KEYS] + t * N_EMBD + c] = grad_k
    cuda.syncthreads()


@cuda.jit(device=True)
def arena_views(params_g, cache_g, pos_scratch_g, staged, tid, nt):
    """The arenas the phases work on: global memory, or copies staged in dynamic shared memory."""
    if not staged:
        return params_g, cache_g, pos_scratch_g
    dyn = cuda.shared.array(0, float32)
    p, c, s = params_g.shape[0], cache_g.shape[0], pos_scratch_g.shape[0]
    params, cache, pos_scratch = dyn[:p], dyn[p:p + c], dyn[p + c:p + c + s]
    stage(params_g, params, p, tid, nt)
    stage(cache_g, cache, c, tid, nt)
    cuda.syncthreads()
    return params, cache, pos_scratch


@cuda.jit(**KERNEL_OPTIONS)
def train_kernel(params_g, cache_g, scratch_g, pos_scratch_g, staged, ptab_g, pcount, postab_g, kvtab_g, stab_g,
                 vocab_size, doc_tokens, doc_start, doc_positions, schedule, num_steps, target_probs):
    """Steps 0..num_steps-1: forward_sequence (its positions' target probabilities into
    target_probs[step], from which the host takes the loss as the C does), backward, Adam.
    Document d's tokens start at doc_start[d]; it trains doc_positions[d] positions."""
    tid = cuda.threadIdx.x
    nt = cuda.blockDim.x
    params, cache, pos_scratch = arena_views(params_g, cache_g, pos_scratch_g, staged, tid, nt)
    sc = scratch_g.shape[0]
    ptab = cuda.shared.array((N_PARAMS, 4), np.int32)
    postab = cuda.shared.array((BLOCK_SIZE, POS_COLUMNS), np.int32)
    kvtab = cuda.shared.array((N_LAYER, 4), np.int32)
    stab = cuda.shared.array(SCRATCH_FIELDS, np.int32)
    load_tables(ptab_g, postab_g, kvtab_g, stab_g, ptab, postab, kvtab, stab, tid, nt)
    red = cuda.shared.array((BLOCK_SIZE, RED_COLUMNS), np.float32)
    wsum = cuda.shared.array((BLOCK_SIZE, N_HEAD), np.float32)
    for step in range(num_steps):
        doc = step % doc_positions.shape[0]
        tokens = doc_tokens[doc_start[doc]:]
        n = doc_positions[doc]
        forward_positions(params, cache, ptab, postab, kvtab, vocab_size, tokens, 0, n, tid, nt)
        softmax_positions(cache, postab, vocab_size, ONE, 0, n, red, tid, nt)
        for pos in range(tid, n, nt):
            target_prob(cache[postab[pos, PROBS]:], tokens[pos + 1], target_probs[step], pos)
        backward_sequence(params, cache, pos_scratch, sc, ptab, postab, kvtab, stab, wsum, vocab_size, tokens, n,
                          tid, nt)
        lr_t, beta1_corr, beta2_corr = schedule[step, 0], schedule[step, 1], schedule[step, 2]
        for p in range(pcount.shape[0]):
            for i in range(tid, pcount[p], nt):
                adam_update(params[ptab[p, DATA]:], params[ptab[p, GRAD]:], params[ptab[p, M]:],
                            params[ptab[p, V]:], lr_t, beta1_corr, beta2_corr, pcount[p], i)
        cuda.syncthreads()
    if staged:
        stage(params, params_g, params_g.shape[0], tid, nt)
        stage(cache, cache_g, cache_g.shape[0], tid, nt)
    stage(pos_scratch, scratch_g, sc, tid, nt)  # position 0's copy


@cuda.jit(device=True)
def pick_token(probs, n, r):
    """sample_from_probs after its draw: the first id whose float32 running sum reaches r."""
    cumulative = np.float32(0.0)
    for i in range(n):
        cumulative += probs[i]
        if r <= cumulative:
            return i
    return n - 1


@cuda.jit(**KERNEL_OPTIONS)
def generate_kernel(params_g, cache_g, pos_scratch_g, staged, ptab_g, postab_g, kvtab_g, stab_g, vocab_size, bos_id,
                    inv_temperature, uniforms, num_samples, samples, lengths):
    """generate_samples on device: uniforms[k] is the k-th rand_uniform() draw after the init."""
    tid = cuda.threadIdx.x
    nt = cuda.blockDim.x
    params, cache, _ = arena_views(params_g, cache_g, pos_scratch_g, staged, tid, nt)
    ptab = cuda.shared.array((N_PARAMS, 4), np.int32)
    postab = cuda.shared.array((BLOCK_SIZE, POS_COLUMNS), np.int32)
    kvtab = cuda.shared.array((N_LAYER, 4), np.int32)
    stab = cuda.shared.array(SCRATCH_FIELDS, np.int32)
    load_tables(ptab_g, postab_g, kvtab_g, stab_g, ptab, postab, kvtab, stab, tid, nt)
    red = cuda.shared.array((BLOCK_SIZE, RED_COLUMNS), np.float32)
    tokens = cuda.shared.array(BLOCK_SIZE, np.int32)
    draw = 0
    for s in range(num_samples):
        token_id = bos_id
        length = 0
        for pos in range(BLOCK_SIZE):
            if tid == 0:
                tokens[pos] = token_id
            cuda.syncthreads()
            forward_positions(params, cache, ptab, postab, kvtab, vocab_size, tokens, pos, pos + 1, tid, nt)
            softmax_positions(cache, postab, vocab_size, inv_temperature, pos, 1, red, tid, nt)
            token_id = pick_token(cache[postab[pos, PROBS]:], vocab_size, uniforms[draw])
            draw += 1
            if token_id == bos_id:
                break
            if tid == 0:
                samples[s, length] = token_id
            length += 1
        if tid == 0:
            lengths[s] = length
    cuda.syncthreads()
    if staged:
        stage(cache, cache_g, cache_g.shape[0], tid, nt)


def document_tokens(dataset, num_steps):
    """The token lists of the documents the run trains on, flattened, with start offsets and each
    one's trained positions. At most one entry per document, however many steps the run has."""
    used = dataset.docs[:min(num_steps, len(dataset.docs))]
    lists = [tokenize_doc(dataset, doc) for doc in used]
    start = np.zeros(len(lists) + 1, dtype=np.int32)
    start[1:] = np.cumsum([len(t) for t in lists])
    positions = np.array([trained_positions(len(t)) for t in lists], dtype=np.int32)
    return np.concatenate([np.asarray(t, dtype=np.int32) for t in lists]), start, positions


def stage_budget():
    """Dynamic shared memory a block may opt in to, beside the kernels' static arrays."""
    return optin_bytes() - STATIC_SHARED_BYTES


def load(kernel, args, nbytes):
    """Loads (or compiles) the kernel for these arguments, ready for nbytes of dynamic shared memory
    (cudakit.sharedmem)."""
    if config.ENABLE_CUDASIM:
        return
    kernel.compile(tuple(kernel.typeof_pyval(a) for a in args))
    opt_in(kernel, args, nbytes)


def launch(kernel, args, nbytes, stream=0):
    """One block of LAUNCH_THREADS with nbytes of dynamic shared memory (0: arenas in global memory)."""
    load(kernel, args, nbytes)
    kernel[1, LAUNCH_THREADS, stream, nbytes](*args)


def staged_bytes(*arenas):
    nbytes = 4 * sum(a.shape[0] for a in arenas)
    return nbytes if nbytes <= stage_budget() else 0


# Training and sampling run in launches of bounded chunks: the first small, so that its lines print
# soon, then doubling up to a cap, so that host memory does not grow with --steps or --samples and
# a run of any length is a few launches per second at most. On the H200 a step takes about 71 us,
# so the first 1,024 steps (the default run's 1,000 in one launch) print after about 0.07 s and a
# full chunk of 32,768 takes about 2.3 s. In the simulator a step takes seconds: one per launch.
# A launch keeps nothing from the previous one but the arenas (the kernels stage them back; the
# per-position scratch is written before it is read in every step, see train_kernel), so the
# printed losses, the samples and the arenas are the bits of a single launch.
if config.ENABLE_CUDASIM:
    FIRST_CHUNK_STEPS, MAX_CHUNK_STEPS = 1, 1
    FIRST_CHUNK_SAMPLES, MAX_CHUNK_SAMPLES = 1, 1
else:
    FIRST_CHUNK_STEPS, MAX_CHUNK_STEPS = 1024, 32768
    FIRST_CHUNK_SAMPLES, MAX_CHUNK_SAMPLES = 256, 4096


def chunk_plan(total, first, cap):
    """(start, count) of each launch for items 0..total-1: first, then doubling up to cap."""
    start, size = 0, max(1, min(first, cap))
    while start < total:
        count = min(size, total - start)
        yield start, count
        start += count
        size = min(2 * size, cap)


def chunk_tables(start, positions, num_steps, first_step, count, out_schedule=None):
    """Steps first_step..first_step+count-1 of a run of num_steps, as train_kernel reads a launch's
    steps 0..count-1: Adam's schedule (count x 3) and the document tables rotated so that the
    launch's step 0 trains document first_step mod the document count."""
    docs = positions.shape[0]
    order = (first_step + np.arange(docs)) % docs
    schedule = np.empty((count, 3), dtype=np.float32) if out_schedule is None else out_schedule[:count]
    for i in range(count):
        schedule[i] = adam_schedule(first_step + i, num_steps)
    return schedule, np.ascontiguousarray(start[order]), np.ascontiguousarray(positions[order])


def list_ahead(items):
    """(item, the next item or None) for each item."""
    items = iter(items)
    current = next(items, None)
    while current is not None:
        upcoming = next(items, None)
        yield current, upcoming
        current = upcoming


class _TrainChunk:
    """One launch's host and device buffers; two alternate so that the next launch is prepared and
    queued while the current one runs."""

    def __init__(self, cap, docs):
        self.h_schedule = cuda.pinned_array((cap, 3), dtype=np.float32)
        self.h_target_probs = cuda.pinned_array((cap, BLOCK_SIZE), dtype=np.float32)
        self.d_schedule = cuda.device_array((cap, 3), dtype=np.float32)
        self.d_target_probs = cuda.device_array((cap, BLOCK_SIZE), dtype=np.float32)
        self.d_start = cuda.device_array(docs, dtype=np.int32)
        self.d_positions = cuda.device_array(docs, dtype=np.int32)
        self.first_step = self.count = 0
        self.done = None


def train_chunks(layout, dataset, num_steps, while_training=None):
    """Runs the steps on the device, a chunk per launch, yielding each launch's losses (float32, as
    forward_sequence would print them) as it finishes, while the next launch runs. while_training()
    runs on the host right after the first launch is queued (before any wait)."""
    params, cache, scratch = layout.arenas
    flat, start, positions = document_tokens(dataset, num_steps)
    d_flat = cuda.to_device(flat)
    nbytes = staged_bytes(params, cache, layout.pos_scratch)
    cap = min(MAX_CHUNK_STEPS, num_steps)
    stream = cuda.stream()
    one_launch = num_steps <= min(FIRST_CHUNK_STEPS, MAX_CHUNK_STEPS)
    buffers = [_TrainChunk(cap, positions.shape[0]) for _ in range(1 if one_launch else 2)]
    queued = []

    def queue(chunk, first_step, count):
        schedule, rot_start, rot_positions = chunk_tables(start, positions, num_steps, first_step, count,
                                                          chunk.h_schedule)
        chunk.first_step, chunk.count = first_step, count
        chunk.d_schedule[:count].copy_to_device(schedule, stream=stream)
        chunk.d_start.copy_to_device(rot_start, stream=stream)  # from pageable memory: copied before the call returns
        chunk.d_positions.copy_to_device(rot_positions, stream=stream)
        args = (params, cache, scratch, layout.pos_scratch, nbytes > 0, layout.ptab, layout.pcount, layout.postab,
                layout.kvtab, layout.stab, dataset.vocab_size, d_flat, chunk.d_start, chunk.d_positions,
                chunk.d_schedule[:count], count, chunk.d_target_probs[:count])
        if first_step == 0:
            load(train_kernel, args, nbytes)
        train_kernel[1, LAUNCH_THREADS, stream, nbytes](*args)
        chunk.d_target_probs[:count].copy_to_host(chunk.h_target_probs[:count], stream=stream)
        chunk.done = cuda.event()
        chunk.done.record(stream)
        queued.append(chunk)

    def finish():
        chunk = queued.pop(0)
        chunk.done.synchronize()
        n = positions[(chunk.first_step + np.arange(chunk.count)) % positions.shape[0]]
        return [sequence_loss(chunk.h_target_probs[i], n[i]) for i in range(chunk.count)]

    for index, (first_step, count) in enumerate(chunk_plan(num_steps, FIRST_CHUNK_STEPS, MAX_CHUNK_STEPS)):
        queue(buffers[index % len(buffers)], first_step, count)
        if index == 0 and while_training is not None:
            while_training()
        if len(queued) > 1:  # the previous launch's losses, while this one runs
            yield finish()
    while queued:
        yield finish()


def train_losses(layout, dataset, num_steps, while_training=None):
    """train_chunks' losses one step at a time."""
    for losses in train_chunks(layout, dataset, num_steps, while_training):
        yield from losses


def train(layout, dataset, num_steps, while_training=None):
    """Runs all steps on the device; returns the per-step losses as forward_sequence would print them.
    while_training() runs on the host between the first launch and the first wait for the losses.
    A list of num_steps floats: a command line iterates train_chunks instead."""
    return list(train_losses(layout, dataset, num_steps, while_training))


class Generation:
    """generate_samples' launches, set up before training so that the kernel can load while the GPU trains.

    The kernel reads the rand_uniform() draws it needs from a table drawn ahead, one draw per generated
    token as in the C (training draws none, so the first is the first after the init). Samples run in
    chunks, a launch each; a chunk of s samples is handed s * BLOCK_SIZE draws, the most it can take,
    and the draws it did not take (a sample ending at BOS takes its length + 1) start the next chunk's
    table, so the glibc stream is consumed exactly as the C consumes it."""

    def __init__(self, layout, dataset, num_samples, temperature, gen):
        params, cache, _ = layout.arenas
        self.cap = max(1, min(num_samples, MAX_CHUNK_SAMPLES))
        self.gen = gen
        self.pending = np.zeros(0, dtype=np.float32)  # draws made and not yet taken
        first = min(num_samples, FIRST_CHUNK_SAMPLES, self.cap)
        self.first_uniforms = self.draws(max(first, 1) * BLOCK_SIZE)
        self.d_uniforms = cuda.to_device(np.zeros(self.cap * BLOCK_SIZE, dtype=np.float32))
        self.d_uniforms[:self.first_uniforms.shape[0]].copy_to_device(self.first_uniforms)
        self.d_samples = cuda.device_array((self.cap, BLOCK_SIZE), dtype=np.int32)
        self.d_lengths = cuda.device_array(self.cap, dtype=np.int32)
        self.nbytes = staged_bytes(params, cache, layout.pos_scratch)
        self.base_args = (params, cache, layout.pos_scratch, self.nbytes > 0, layout.ptab, layout.postab,
                          layout.kvtab, layout.stab, dataset.vocab_size, dataset.bos_id,
                          np.float32(1.0) / np.float32(temperature))
        self.num_samples = num_samples
        self.id_to_char = dataset.id_to_char

    def fresh(self, count):
        return np.array([rand_uniform(self.gen) for _ in range(count)], dtype=np.float32)

    def draws(self, count):
        """The next count draws of the stream: the pending ones first, then new ones."""
        table = np.concatenate([self.pending, self.fresh(max(0, count - self.pending.shape[0]))])
        self.pending = table[count:]
        return table[:count]

    def args(self, count):
        return self.base_args + (self.d_uniforms, count, self.d_samples, self.d_lengths)

    def load(self):
        load(generate_kernel, self.args(max(1, min(self.num_samples, FIRST_CHUNK_SAMPLES))), self.nbytes)

    def chunks(self):
        """The samples as byte strings, a chunk (a launch) at a time."""
        plan = list_ahead(chunk_plan(self.num_samples, FIRST_CHUNK_SAMPLES, self.cap))
        for (first, count), upcoming in plan:
            table = self.first_uniforms if first == 0 else self.draws(count * BLOCK_SIZE)
            self.start(table, count, upload=first > 0)
            if upcoming is not None:  # while the kernel runs: new draws for the next chunk, no more than it may need
                need = upcoming[1] * BLOCK_SIZE - self.pending.shape[0]
                self.pending = np.concatenate([self.pending, self.fresh(max(0, need))])
            samples, lengths = self.collect()
            # The draws each sample took: one per token, BOS included; a full-length sample takes BLOCK_SIZE.
            taken = int(np.minimum(lengths[:count].astype(np.int64) + 1, BLOCK_SIZE).sum())
            self.pending = np.concatenate([table[taken:], self.pending])
            yield [bytes(self.id_to_char[samples[s, :lengths[s]]]) for s in range(count)]

    def start(self, table, count, upload=True):
        """Queues the launch of count samples reading the draws in table (on the device already unless upload)."""
        if upload:
            self.d_uniforms[:table.shape[0]].copy_to_device(table)
        launch(generate_kernel, self.args(count), self.nbytes)

    def collect(self):
        """The launch's samples (token ids) and lengths, once it has finished."""
        return self.d_samples.copy_to_host(), self.d_lengths.copy_to_host()

    def run(self):
        """The samples as byte strings (a list of num_samples: a command line iterates chunks())."""
        return [sample for chunk in self.chunks() for sample in chunk]
