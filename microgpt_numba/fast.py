"""The fast engine: all training steps, then all sampling, each in one persistent single-block kernel.

Each reference launch becomes a phase of the block, made of the same device functions (kernels.py)
and separated by cuda.syncthreads(), so every float is computed as the reference kernels compute
it. Launches that touch disjoint outputs share a phase; memsets before a full overwrite are skipped.

It uses the same three arenas as the reference engine: the host passes each view's offset in its
arena (tables built from the reference structs), and the kernels carve the same views on device.
When the train cache and scratch arenas fit in a block's shared memory (vocabularies up to ~90
bytes), a kernel works on a copy of them there, staged in at its start and out at its end, since
every phase reads what the previous one wrote; the parameter arena stays in global memory.

The host keeps what is host math in the C: glibc powf for Adam's schedule and the glibc
rand_uniform draws for sampling; the loss is summed on the device as the reference engine sums it.
"""
import numpy as np
from numba import config, cuda, float32

from .arena import LAYER_CACHE_FIELDS, KV_FIELDS, position_cache_fields, scratch_fields
from .constants import BLOCK_SIZE, MLP_HIDDEN, N_EMBD, N_HEAD, N_LAYER
from .dataset import tokenize_doc
from .glibc_rand import rand_uniform
from .kernels import (SOFTMAX_THREADS, accumulate_loss, adam_update, attention_backward, attention_forward,
                      cross_entropy_backward, relu_backward, relu_forward, rmsnorm_backward, rmsnorm_forward, row_add,
                      scaled_softmax, sgemv_n, sger, sgemv_t, vec_add, vec_add_inplace)
from .model import adam_schedule

THREADS = SOFTMAX_THREADS  # one block; scaled_softmax's reduction wants all of it
# Dynamic shared memory for the staged arenas; with the static tables and softmax scratch the
# block stays under the 48 KiB it gets without an opt-in.
STAGE_BYTES = 44 * 1024

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


def _address(view):
    # The simulator's device arrays wrap numpy arrays and expose only the host interface.
    return (view.__array_interface__ if config.ENABLE_CUDASIM else view.__cuda_array_interface__)["data"][0]


def _offset(view, base):
    return (_address(view) - _address(base)) // 4


class Layout:
    """Device tables of view offsets: params [param, data/grad/m/v], positions [pos, field],
    key/value rows [layer, field], scratch [field]; plus each param's element count."""

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
def forward_position(params, cache, ptab, postab, kvtab, vocab_size, token_id, pos_id, tid, nt):
    embed_in = cache[postab[pos_id, EMBED_IN]:]
    x0 = cache[postab[pos_id, X0]:]
    tok_emb = params[ptab[WTE, DATA] + token_id * N_EMBD:]
    pos_emb = params[ptab[WPE, DATA] + pos_id * N_EMBD:]
    for i in range(tid, N_EMBD, nt):
        vec_add(tok_emb, pos_emb, embed_in, N_EMBD, i)
    cuda.syncthreads()
    if tid == 0:
        rmsnorm_forward(embed_in, x0, N_EMBD)
    cuda.syncthreads()

    hidden = x0
    for layer in range(N_LAYER):
        lc = POS_FIELDS + layer * LC_FIELDS
        pw = 3 + 6 * layer
        x_in = cache[postab[pos_id, lc + X_IN]:]
        attn_norm = cache[postab[pos_id, lc + ATTN_NORM]:]
        q = cache[postab[pos_id, lc + Q]:]
        k = cache[kvtab[layer, KEYS] + pos_id * N_EMBD:]
        v = cache[kvtab[layer, VALUES] + pos_id * N_EMBD:]
        attn_out = cache[postab[pos_id, lc + ATTN_OUT]:]
        attn_proj = cache[postab[pos_id, lc + ATTN_PROJ]:]
        mlp_in = cache[postab[pos_id, lc + MLP_IN]:]
        mlp_norm = cache[postab[pos_id, lc + MLP_NORM]:]
        fc1 = cache[postab[pos_id, lc + FC1_OUT]:]
        relu = cache[postab[pos_id, lc + RELU]:]
        fc2 = cache[postab[pos_id, lc + FC2_OUT]:]
        x_out = cache[postab[pos_id, lc + X_OUT]:]

        if tid == 0:  # copy_device, then the one-thread rmsnorm
            for i in range(N_EMBD):
                x_in[i] = hidden[i]
            rmsnorm_forward(x_in, attn_norm, N_EMBD)
        cuda.syncthreads()
        for r in range(tid, 3 * N_EMBD, nt):  # wq, wk, wv: three matvecs with disjoint outputs
            which = r // N_EMBD
            out = q if which == 0 else (k if which == 1 else v)
            sgemv_t(params[ptab[pw + WQ + which, DATA]:], attn_norm, out, N_EMBD, N_EMBD, r - which * N_EMBD)
        cuda.syncthreads()
        if tid < N_HEAD:
            attention_forward(q, cache[kvtab[layer, KEYS]:], cache[kvtab[layer, VALUES]:],
                              cache[postab[pos_id, lc + ATTN_LOGITS]:], cache[postab[pos_id, lc + ATTN_WEIGHTS]:],
                              attn_out, pos_id, tid)
        cuda.syncthreads()
        for r in range(tid, N_EMBD, nt):
            sgemv_t(params[ptab[pw + WO, DATA]:], attn_out, attn_proj, N_EMBD, N_EMBD, r)
        cuda.syncthreads()
        if tid == 0:
            for i in range(N_EMBD):
                vec_add(attn_proj, x_in, mlp_in, N_EMBD, i)
            rmsnorm_forward(mlp_in, mlp_norm, N_EMBD)
        cuda.syncthreads()
        for r in range(tid, MLP_HIDDEN, nt):  # matvec then relu of the same element
            sgemv_t(params[ptab[pw + FC1, DATA]:], mlp_norm, fc1, MLP_HIDDEN, N_EMBD, r)
            relu_forward(fc1, relu, MLP_HIDDEN, r)
        cuda.syncthreads()
        for r in range(tid, N_EMBD, nt):
            sgemv_t(params[ptab[pw + FC2, DATA]:], relu, fc2, N_EMBD, MLP_HIDDEN, r)
            vec_add(fc2, mlp_in, x_out, N_EMBD, r)
        cuda.syncthreads()
        hidden = x_out

    logits = cache[postab[pos_id, LOGITS]:]
    for r in range(tid, vocab_size, nt):
        sgemv_t(params[ptab[LM_HEAD, DATA]:], hidden, logits, vocab_size, N_EMBD, r)
    cuda.syncthreads()


@cuda.jit(device=True)
def linear_backward(w, x, grad_out, grad_w, grad_x, rows, cols, tid, nt):
    """sger into grad_w and sgemv N into grad_x in one phase: they touch disjoint memory."""
    for i in range(tid, rows * cols + cols, nt):
        if i < rows * cols:
            sger(x, grad_out, grad_w, rows, cols, i)
        else:
            sgemv_n(w, grad_out, grad_x, rows, cols, i - rows * cols)
    cuda.syncthreads()


@cuda.jit(device=True)
def backward_sequence(params, cache, scratch, ptab, postab, kvtab, stab, vocab_size, tokens, n, tid, nt):
    grad_logits = scratch[stab[GRAD_LOGITS]:]
    grad_x = scratch[stab[GRAD_X]:]
    grad_x_in = scratch[stab[GRAD_X_IN]:]
    grad_mlp_in = scratch[stab[GRAD_MLP_IN]:]
    grad_relu = scratch[stab[GRAD_RELU]:]
    grad_fc1 = scratch[stab[GRAD_FC1]:]
    grad_mlp_norm = scratch[stab[GRAD_MLP_NORM]:]
    grad_norm_tmp = scratch[stab[GRAD_NORM_TMP]:]
    grad_attn_out = scratch[stab[GRAD_ATTN_OUT]:]
    grad_q = scratch[stab[GRAD_Q]:]
    grad_attn_norm = scratch[stab[GRAD_ATTN_NORM]:]
    grad_embed_in = scratch[stab[GRAD_EMBED_IN]:]

    for layer in range(N_LAYER):  # zero_attention_accums
        for i in range(tid, BLOCK_SIZE * N_EMBD, nt):
            cache[kvtab[layer, GRAD_KEYS] + i] = 0
            cache[kvtab[layer, GRAD_VALUES] + i] = 0
    loss_scale = np.float32(1.0) / np.float32(n)

    for pos in range(n - 1, -1, -1):
        for i in range(tid, vocab_size, nt):
            cross_entropy_backward(cache[postab[pos, PROBS]:], grad_logits, tokens[pos + 1], loss_scale,
                                   vocab_size, i)
        for i in range(tid, N_EMBD, nt):
            grad_x[i] = 0
        cuda.syncthreads()
        hidden = cache[postab[pos, POS_FIELDS + (N_LAYER - 1) * LC_FIELDS + X_OUT]:] if N_LAYER else \
            cache[postab[pos, X0]:]
        linear_backward(params[ptab[LM_HEAD, DATA]:], hidden, grad_logits, params[ptab[LM_HEAD, GRAD]:], grad_x,
                        vocab_size, N_EMBD, tid, nt)

        for layer in range(N_LAYER - 1, -1, -1):
            lc = POS_FIELDS + layer * LC_FIELDS
            pw = 3 + 6 * layer
            for i in range(tid, MLP_HIDDEN, nt):
                if i < N_EMBD:
                    grad_mlp_in[i] = grad_x[i]
                grad_relu[i] = 0
            cuda.syncthreads()
            linear_backward(params[ptab[pw + FC2, DATA]:], cache[postab[pos, lc + RELU]:], grad_x,
                            params[ptab[pw + FC2, GRAD]:], grad_relu, N_EMBD, MLP_HIDDEN, tid, nt)
            for i in range(tid, MLP_HIDDEN, nt):  # relu_backward overwrites grad_fc1 entirely
                relu_backward(cache[postab[pos, lc + FC1_OUT]:], grad_relu, grad_fc1, MLP_HIDDEN, i)
                if i < N_EMBD:
                    grad_mlp_norm[i] = 0
            cuda.syncthreads()
            linear_backward(params[ptab[pw + FC1, DATA]:], cache[postab[pos, lc + MLP_NORM]:], grad_fc1,
                            params[ptab[pw + FC1, GRAD]:], grad_mlp_norm, MLP_HIDDEN, N_EMBD, tid, nt)
            if tid == 0:  # rmsnorm_backward overwrites grad_norm_tmp, then the in-place add and the copy
                rmsnorm_backward(cache[postab[pos, lc + MLP_IN]:], grad_mlp_norm, grad_norm_tmp, N_EMBD)
                for i in range(N_EMBD):
                    vec_add_inplace(grad_mlp_in, grad_norm_tmp, N_EMBD, i)
                    grad_x_in[i] = grad_mlp_in[i]
                    grad_attn_out[i] = 0
            cuda.syncthreads()
            linear_backward(params[ptab[pw + WO, DATA]:], cache[postab[pos, lc + ATTN_OUT]:], grad_mlp_in,
                            params[ptab[pw + WO, GRAD]:], grad_attn_out, N_EMBD, N_EMBD, tid, nt)
            if tid < N_HEAD:
                attention_backward(cache[postab[pos, lc + Q]:], cache[kvtab[layer, KEYS]:],
                                   cache[kvtab[layer, VALUES]:], cache[postab[pos, lc + ATTN_WEIGHTS]:],
                                   grad_attn_out, grad_q, cache[kvtab[layer, GRAD_KEYS]:],
                                   cache[kvtab[layer, GRAD_VALUES]:], pos, tid)
            for i in range(tid, N_EMBD, nt):
                grad_attn_norm[i] = 0
            cuda.syncthreads()
            attn_norm = cache[postab[pos, lc + ATTN_NORM]:]
            grad_k = cache[kvtab[layer, GRAD_KEYS] + pos * N_EMBD:]
            grad_v = cache[kvtab[layer, GRAD_VALUES] + pos * N_EMBD:]
            # wq, wk, wv: the three sger are disjoint; each grad_attn_norm[c] adds q's, k's, v's sums in order.
            for i in range(tid, 3 * N_EMBD * N_EMBD + N_EMBD, nt):
                if i < 3 * N_EMBD * N_EMBD:
                    which = i // (N_EMBD * N_EMBD)
                    grad_out = grad_q if which == 0 else (grad_k if which == 1 else grad_v)
                    sger(attn_norm, grad_out, params[ptab[pw + WQ + which, GRAD]:], N_EMBD, N_EMBD,
                         i - which * N_EMBD * N_EMBD)
                else:
                    c = i - 3 * N_EMBD * N_EMBD
                    sgemv_n(params[ptab[pw + WQ, DATA]:], grad_q, grad_attn_norm, N_EMBD, N_EMBD, c)
                    sgemv_n(params[ptab[pw + WK, DATA]:], grad_k, grad_attn_norm, N_EMBD, N_EMBD, c)
                    sgemv_n(params[ptab[pw + WV, DATA]:], grad_v, grad_attn_norm, N_EMBD, N_EMBD, c)
            cuda.syncthreads()
            if tid == 0:
                rmsnorm_backward(cache[postab[pos, lc + X_IN]:], grad_attn_norm, grad_norm_tmp, N_EMBD)
                for i in range(N_EMBD):
                    vec_add_inplace(grad_x_in, grad_norm_tmp, N_EMBD, i)
                    grad_x[i] = grad_x_in[i]
            cuda.syncthreads()

        if tid == 0:
            rmsnorm_backward(cache[postab[pos, EMBED_IN]:], grad_x, grad_embed_in, N_EMBD)
        cuda.syncthreads()
        for i in range(tid, 2 * N_EMBD, nt):  # the token's wte row and the position's wpe row
            if i < N_EMBD:
                row_add(params[ptab[WTE, GRAD] + tokens[pos] * N_EMBD:], grad_embed_in, N_EMBD, i)
            else:
                row_add(params[ptab[WPE, GRAD] + pos * N_EMBD:], grad_embed_in, N_EMBD, i - N_EMBD)
        cuda.syncthreads()


@cuda.jit(cache=True)
def train_kernel(params, cache_g, scratch_g, staged, ptab_g, pcount, postab_g, kvtab_g, stab_g, vocab_size,
                 doc_tokens, doc_start, num_docs, schedule, num_steps, loss_sums):
    """Steps 0..num_steps-1: forward_sequence (summing the loss into loss_sums[step]), backward, Adam."""
    tid = cuda.threadIdx.x
    nt = cuda.blockDim.x
    dyn = cuda.shared.array(0, float32)
    cache = dyn[:cache_g.shape[0]] if staged else cache_g
    scratch = dyn[cache_g.shape[0]:] if staged else scratch_g
    if staged:
        stage(cache_g, cache, cache_g.shape[0], tid, nt)
        stage(scratch_g, scratch, scratch_g.shape[0], tid, nt)
    ptab = cuda.shared.array((N_PARAMS, 4), np.int32)
    postab = cuda.shared.array((BLOCK_SIZE, POS_COLUMNS), np.int32)
    kvtab = cuda.shared.array((N_LAYER, 4), np.int32)
    stab = cuda.shared.array(SCRATCH_FIELDS, np.int32)
    load_tables(ptab_g, postab_g, kvtab_g, stab_g, ptab, postab, kvtab, stab, tid, nt)
    softmax_scratch = cuda.shared.array(SOFTMAX_THREADS, np.float32)
    for step in range(num_steps):
        doc = step % num_docs
        tokens = doc_tokens[doc_start[doc]:]
        n = min(doc_start[doc + 1] - doc_start[doc] - 1, BLOCK_SIZE)
        for pos in range(n):
            forward_position(params, cache, ptab, postab, kvtab, vocab_size, tokens[pos], pos, tid, nt)
            probs = cache[postab[pos, PROBS]:]
            scaled_softmax(cache[postab[pos, LOGITS]:], probs, np.float32(1.0), vocab_size, softmax_scratch, tid, nt)
            cuda.syncthreads()
            if tid == 0:
                accumulate_loss(probs, tokens[pos + 1], loss_sums, step)
        backward_sequence(params, cache, scratch, ptab, postab, kvtab, stab, vocab_size, tokens, n, tid, nt)
        lr_t, beta1_corr, beta2_corr = schedule[step, 0], schedule[step, 1], schedule[step, 2]
        for p in range(pcount.shape[0]):
            for i in range(tid, pcount[p], nt):
                adam_update(params[ptab[p, DATA]:], params[ptab[p, GRAD]:], params[ptab[p, M]:],
                            params[ptab[p, V]:], lr_t, beta1_corr, beta2_corr, pcount[p], i)
        cuda.syncthreads()
    if staged:
        stage(cache, cache_g, cache_g.shape[0], tid, nt)
        stage(scratch, scratch_g, scratch_g.shape[0], tid, nt)


@cuda.jit(device=True)
def pick_token(probs, n, r):
    """sample_from_probs after its draw: the first id whose float32 running sum reaches r."""
    cumulative = np.float32(0.0)
    for i in range(n):
        cumulative += probs[i]
        if r <= cumulative:
            return i
    return n - 1


@cuda.jit(cache=True)
def generate_kernel(params, cache_g, staged, ptab_g, postab_g, kvtab_g, stab_g, vocab_size, bos_id, inv_temperature,
                    uniforms, num_samples, samples, lengths):
    """generate_samples on device: uniforms[k] is the k-th rand_uniform() draw after the init."""
    tid = cuda.threadIdx.x
    nt = cuda.blockDim.x
    dyn = cuda.shared.array(0, float32)
    cache = dyn[:cache_g.shape[0]] if staged else cache_g
    if staged:
        stage(cache_g, cache, cache_g.shape[0], tid, nt)
    ptab = cuda.shared.array((N_PARAMS, 4), np.int32)
    postab = cuda.shared.array((BLOCK_SIZE, POS_COLUMNS), np.int32)
    kvtab = cuda.shared.array((N_LAYER, 4), np.int32)
    stab = cuda.shared.array(SCRATCH_FIELDS, np.int32)
    load_tables(ptab_g, postab_g, kvtab_g, stab_g, ptab, postab, kvtab, stab, tid, nt)
    softmax_scratch = cuda.shared.array(SOFTMAX_THREADS, np.float32)
    picked = cuda.shared.array(1, np.int32)
    draw = 0
    for s in range(num_samples):
        token_id = bos_id
        length = 0
        for pos in range(BLOCK_SIZE):
            forward_position(params, cache, ptab, postab, kvtab, vocab_size, token_id, pos, tid, nt)
            probs = cache[postab[pos, PROBS]:]
            scaled_softmax(cache[postab[pos, LOGITS]:], probs, inv_temperature, vocab_size, softmax_scratch, tid, nt)
            cuda.syncthreads()
            if tid == 0:
                picked[0] = pick_token(probs, vocab_size, uniforms[draw])
            cuda.syncthreads()
            token_id = picked[0]
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
    """The token lists of the documents the run trains on, flattened, with start offsets."""
    used = dataset.docs[:min(num_steps, len(dataset.docs))]
    lists = [tokenize_doc(dataset, doc) for doc in used]
    start = np.zeros(len(lists) + 1, dtype=np.int32)
    start[1:] = np.cumsum([len(t) for t in lists])
    return np.concatenate([np.asarray(t, dtype=np.int32) for t in lists]), start


def train(layout, dataset, num_steps):
    """Runs all steps on the device; returns the per-step losses as forward_sequence would print them."""
    params, cache, scratch = layout.arenas
    flat, start = document_tokens(dataset, num_steps)
    schedule = np.array([adam_schedule(step, num_steps) for step in range(num_steps)], dtype=np.float32)
    loss_sums = cuda.to_device(np.zeros(num_steps, dtype=np.float32))
    nbytes = 4 * (cache.shape[0] + scratch.shape[0])
    staged = nbytes <= STAGE_BYTES
    train_kernel[1, THREADS, 0, nbytes if staged else 0](
        params, cache, scratch, staged, layout.ptab, layout.pcount, layout.postab, layout.kvtab, layout.stab,
        dataset.vocab_size, cuda.to_device(flat), cuda.to_device(start), len(start) - 1, cuda.to_device(schedule),
        num_steps, loss_sums)
    doc = np.arange(num_steps) % (len(start) - 1)
    n = np.minimum(start[doc + 1] - start[doc] - 1, BLOCK_SIZE).astype(np.float32)
    return list(loss_sums.copy_to_host() / n)


def generate(layout, dataset, num_samples, temperature, gen):
    """The samples as byte strings; draws up to BLOCK_SIZE uniforms per sample from gen up front."""
    params, cache, _ = layout.arenas
    uniforms = np.array([rand_uniform(gen) for _ in range(max(num_samples, 1) * BLOCK_SIZE)], dtype=np.float32)
    samples = cuda.device_array((max(num_samples, 1), BLOCK_SIZE), dtype=np.int32)
    lengths = cuda.device_array(max(num_samples, 1), dtype=np.int32)
    nbytes = 4 * cache.shape[0]
    staged = nbytes <= STAGE_BYTES
    generate_kernel[1, THREADS, 0, nbytes if staged else 0](
        params, cache, staged, layout.ptab, layout.postab, layout.kvtab, layout.stab, dataset.vocab_size,
        dataset.bos_id, np.float32(1.0) / np.float32(temperature), cuda.to_device(uniforms), num_samples, samples,
        lengths)
    samples, lengths = samples.copy_to_host(), lengths.copy_to_host()
    return [bytes(dataset.id_to_char[samples[s, :lengths[s]]]) for s in range(num_samples)]
