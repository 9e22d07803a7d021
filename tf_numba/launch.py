"""Kernel launches: their sizes, and where they go (cudakit.stream: the default stream, or a CUDA
graph being recorded, where work that nothing waits for soon can run on a branch beside the rest)."""
import functools

from numba import config, cuda

from cudakit.arrays import address
from cudakit.sharedmem import opt_in
from cudakit.stream import Target

from . import kernels as K
from . import matmul as M

BLOCK = 128
RESIDENT_BLOCKS = 2048 // BLOCK  # blocks of BLOCK threads a multiprocessor holds at once


if config.ENABLE_CUDASIM:

    def elementwise(kernel, n, *args):
        """In the simulator every thread is a Python thread: one thread walks all n elements."""
        kernel[1, 1](*args)

else:

    @functools.cache
    def multiprocessors():
        return cuda.get_current_device().MULTIPROCESSOR_COUNT

    def elementwise(kernel, n, *args):
        """kernel over n elements, at most one thread each: blocks of whole warps, small enough
        that a small kernel (latency-bound) reaches every multiprocessor, and no more blocks
        than the GPU holds at once, since a grid of a million blocks is bound by the rate at
        which blocks launch (the grid-stride loop walks the rest)."""
        sms = multiprocessors()
        per_sm = -(-n // sms)
        block = min(BLOCK, max(32, -(-per_sm // 32) * 32))
        kernel[min(-(-n // block), sms * RESIDENT_BLOCKS), block, Target.stream](*args)


def blocks(kernel, grid, block, shared_bytes, *args):
    kernel[grid, block, Target.stream, shared_bytes](*args)


def softmax_parts(n):
    """Slices a row of the unembedding softmax's scaling is spread over: about
    four blocks a multiprocessor for n rows."""
    if config.ENABLE_CUDASIM:
        return K.SOFTMAX_PARTS
    return min(K.SOFTMAX_PARTS, -(-4 * multiprocessors() // n))


def unembedding_softmax(out, rows, n, softmax_max, maxima, r_softmax_exp_sum, copy=None):
    """tf.c's softmax of the n rows of logits from rows[0], in place, after the unembedding's "max"
    epilogue (softmax_max[row, :maxima]: the largest logit of each of its blocks of columns): the
    row's max, its exps and their sum in tf.c's order a block a row (tf_unembedding_softmax), the
    scaling over slices (tf_unembedding_scale). r_softmax_exp_sum holds each row's 1.0f / sum.
    With `copy`, the scaling also writes the probabilities into its same rows (training's copy
    for the backward)."""
    parts = softmax_parts(n)
    blocks(K.tf_unembedding_softmax, n, K.SOFTMAX_THREADS, 0, out, rows, softmax_max, maxima, r_softmax_exp_sum)
    blocks(K.tf_unembedding_scale, n * parts, K.SOFTMAX_PASS_THREADS, 0, out, rows, parts, r_softmax_exp_sum,
           out if copy is None else copy, copy is not None)


def ln(weight, bias, inp, r_std, mean, out, rows, n, fused):
    """tf_ln over the n samples from rows[0], a block each."""
    blocks(K.tf_ln, n, K.LN_THREADS, 0, weight, bias, inp, r_std, mean, out, rows, fused)


def ln_back(weight, inp, r_std, mean, dL_dout, dL_dweight, dL_dbias, dL_din, T, fused, res=None, extra=None):
    """tf_ln_back over T samples, a block each, then the blocks of the parameter gradients. With
    `extra`, the tf_add that tf.c runs next (extra = res + dL_din) as each input gradient is
    stored."""
    add = extra is not None
    res, extra = (res, extra) if add else (dL_din, dL_din)
    blocks(K.tf_ln_back, T + K.ln_back_parameter_blocks(inp.shape[1]), K.LN_BACK_THREADS, 0,
           weight, inp, r_std, mean, dL_dout, dL_dweight, dL_dbias, dL_din, T, fused, res, extra, add)


def attn(c_attn, softmax, z, rows, n, T, d_k, rsqrt_d_k, fused):
    """tf.c's attention loop for the n rows from rows[0]: tf_attn, a block per head and row, 16-byte
    copies where every row of a head starts 16 bytes aligned; one row (the decode step, keys up to
    T) goes to the three kernels, which spread its keys and outputs over more threads."""
    H = softmax.shape[0]
    if n > 1:
        wide = d_k % 4 == 0 and c_attn.shape[1] % 4 == 0 and address(c_attn) % 16 == 0
        blocks(K.tf_attn(d_k, wide), H * n, K.ATTN_THREADS, 0, c_attn, softmax, z, rows, n, rsqrt_d_k, fused)
        return
    elementwise(K.tf_attn_scores, H * n * T, c_attn, softmax, rows, n, T, d_k, rsqrt_d_k, fused)
    blocks(K.tf_attn_softmax, H * n, K.ATTN_LANES, 0, softmax, rows, n)
    elementwise(K.tf_attn_z, n * H * d_k, c_attn, softmax, z, rows, n, d_k, fused)


def attn_back_row(dL_dz, c_attn, softmax, dL_da, T, d_k, fused):
    """tf_attn_back_row, a block per head and row; 16-byte copies where every row of a head starts
    16 bytes aligned, in dL_dz and in c_attn."""
    wide = d_k % 4 == 0 and all(x.shape[1] % 4 == 0 and address(x) % 16 == 0 for x in (dL_dz, c_attn))
    blocks(K.tf_attn_back_row(d_k, wide), softmax.shape[0] * T, K.ATTN_THREADS, 0, dL_dz, c_attn, softmax, dL_da, T,
           fused)


def matmul(name, a, b, start, out, rows, n_rows, fused, S=None, scale=None, epilogue=None, res=None, extra=None):
    """The matmul.py kernel `name` over n_rows rows from rows[0] (rows: a device array [first,
    end)); S, the sum's length, is a's row length unless given. `epilogue` is the element-wise
    statement tf.c runs next on the outputs, which the kernel applies as it stores each one:
    "gelu" (tf_gelu(out) into extra), "add" (tf_add(res, out) into extra) or "gelu_back"
    (tf_gelu_back(res, out) into extra), or "max" (the unembedding before the softmax: each
    row's largest output of each block of columns into extra[row, block]). One row of tf_fc or of
    the unembedding goes to the one-row kernel. Returns the blocks of columns."""
    S = a.shape[1] if S is None else S
    scale = K.ONE if scale is None else scale
    res, extra = out if res is None else res, out if extra is None else extra
    tile = M.launch_tile(name, n_rows, out.shape[1], S, fused)
    columns = M.column_blocks(tile, out.shape[1])
    assert epilogue != "max" or extra.shape[1] >= columns, "the maxima's array has a column a block"
    if isinstance(tile, M.RowTile):
        kernel = M.build_row(name, tile, fused, M.row_s_max(S), epilogue)
        kernel[columns, tile.NT, Target.stream](a, b, start, out, rows, S, scale, res, extra)
        return columns
    grid = (columns, -(-n_rows // (tile.TM * tile.RT)))
    kernel = M.tiled(name, tile, fused, a, b, epilogue)
    args = (a, b, start, out, rows, S, scale, res, extra)
    nbytes = M.dynamic_bytes(tile, name)  # past 48 KiB the kernel opts in first
    opt_in(kernel, args, nbytes)
    kernel[grid, (tile.CT, tile.RT), Target.stream, nbytes](*args)
    return columns
