"""tf.c's dot-product loop nests as register-tiled matrix kernels.

Six loops of tf.c are one shape of computation, out[i, j] = start + sum over s of A(i, s) * B(s, j):

    kind                        tf.c                                     A(i, s)      B(s, j)      start
    tf_fc                       tf_fc's `*out += *in * *weight`           in[i, s]     w[s, j]      bias[j]
    tf_fc_back_din              tf_fc_back's `dot += dL_dout * weight`   dout[i, s]   w[j, s]      0
    tf_fc_back_dweight          tf_fc_back's `*dL_dweight += ...`        in[s, i]     dout[s, j]   0
    tf_unembedding              the unembedding's `dot += ...`           ln_f[i, s]   wte[j, s]    0
    tf_unembedding_back_din     `*dL_din += *dL_dout * *weight`, scaled  dout[i, s]   wte[s, j]    0
    tf_unembedding_back_dwte    `*dL_dweight += (dout * in) * r`         dout[s, i]   in[s, j]     0

The bits depend only on each output's own chain of roundings, so a kernel may compute outputs in
any grouping as long as every output runs its whole sum alone, s ascending, from tf.c's start
value. A block of (RT, CT) threads owns a (TM*RT, TN*CT) tile of outputs; each thread keeps TM x TN
neighbouring accumulators in registers, and the block stages BK summation steps of A and B in shared
memory at a time, so each value loaded from memory serves many outputs. Each operand is staged in
its memory order by asynchronous copies (cudakit.asynccopy: no registers, 16 bytes each where the
rows allow), ST chunks at once, so that the copies of the next ST - 1 chunks fly while one is
summed; a full chunk is read four steps at a time by vector loads (cudakit.vector). Nothing is
split along s. Statements that tf.c's fma build fuses are `mad` (see fp.py); the
unembedding backward's wte gradient rounds its product first, as its C statement does. The
element-wise statement tf.c runs next on a product's outputs (gelu, a residual add) can be applied
as each output is stored (the epilogue); before the softmax, the unembedding's epilogue takes
each row's largest logit of its block's columns ("max"), so the softmax needs no pass of its own
for the max.

Kernels are built per kind, tile and fp model (closure constants, so the compiler drops the
branches that do not apply and keeps the accumulators in registers).

One row (generation: the decode step's tf_fc and the last row's unembedding) is a stream of the
weights, which a tile of rows cannot use: `build_row` gives each output a thread that sums it
alone as above, and has every thread of the block load the weights, two chunks ahead in
registers, into two shared-memory buffers, so that many loads are in flight per block while the
few summing threads run their chains. It can also apply the element-wise statement tf.c runs
next on each output (gelu, a residual add) as it writes it.
"""
import functools
from collections import namedtuple

import numpy as np
from numba import config, cuda

from cudakit.arrays import address
from cudakit import sharedmem
from cudakit.asynccopy import UNIT, commit, copy_async, copy_at, global_address, shared_address, wait
from cudakit.devmath import mad, mul
from cudakit.vector import SHARED_ALIGN, vector_load

from .kernels import U, U1, gelu, gelu_back, largest, staged_dot

U32 = np.uint32  # see build's chunk counters

f32 = np.float32
ZERO = f32(0.0)
VEC = 4  # summation steps a full chunk reads at a time
PAD = 4  # floats after each staged row: rows stay 16 bytes aligned

# a_trans: A(i, s) is a[s, i]; b_by_output: B(s, j) is b[j, s]; scaled_product: (A * B) * scale is the
# term; scaled_result: the finished sum is multiplied by scale. Every sum starts from start[j]: the
# bias, or zeros (tf.c's dot products, and its gradients, which accumulate into an arena it zeroes
# first: 0.0f + the first term is what the arena's first += gives).
Kind = namedtuple("Kind", "a_trans b_by_output scaled_product scaled_result")
KINDS = {
    "tf_fc": Kind(False, False, False, False),
    "tf_fc_back_din": Kind(False, True, False, False),
    "tf_fc_back_dweight": Kind(True, False, False, False),
    "tf_unembedding": Kind(False, True, False, False),
    "tf_unembedding_back_din": Kind(False, False, False, True),
    "tf_unembedding_back_dwte": Kind(True, False, True, False),
}

# TM x TN outputs per thread, RT x CT threads per block, BK summation steps a chunk, ST chunks staged
# at once (their copies in flight while one is summed); QUAD: a warp's lanes in 2 x 2 quads (see build).
Tile = namedtuple("Tile", "TM TN RT CT BK ST QUAD", defaults=(False,))
if config.ENABLE_CUDASIM:  # one simulated thread per block: the simulator pays per thread and per block
    WIDE = MID = UNEMBED = UNEMBED_NOFMA = T_WIDE = T_WARP = T_TALL = T_DEEP = ROW = \
        Tile(16, 16, 1, 1, 32, 3)
else:  # chosen with tools/tf_matmul_sweep.py on an H200 (docs/results/2026-12-02-h200-quad/sweep_fma.json)
    WIDE = Tile(4, 4, 8, 16, 32, 2)
    MID = Tile(4, 2, 8, 16, 32, 2, True)
    # 64 x 64 outputs a block, conflict-free since a thread's columns are CT apart; nofma's
    # separate products and adds make 32 outputs a thread issue-bound, and 4 x 4 ran faster
    # (docs/results/2026-12-02-h200-pdl/sweep_unembedding_{dbac1c9,nofma}.log)
    UNEMBED, UNEMBED_NOFMA = Tile(8, 4, 8, 16, 32, 2, True), Tile(4, 4, 16, 8, 32, 2, True)
    # every T-row tf_fc: 16 x 32 outputs a block. At 768 columns, 192 blocks; nofma's twice the
    # arithmetic a step runs faster with 4 chunks (tile_for: docs/results/2026-12-03-h200-merged,
    # sweep_fc_nofma_wide.json), fma's with 3 (docs/results/2026-12-03-h200-probes)
    T_WIDE = Tile(2, 2, 8, 16, 64, 3, True)
    T_WARP = Tile(2, 2, 4, 8, 64, 4, True)  # a warp a block (docs/results/2026-12-02-h200-warp/sweep_warp.log)
    T_TALL = Tile(4, 2, 8, 8, 64, 3, True)
    T_DEEP = Tile(2, 2, 8, 16, 64, 10, True)  # T_WIDE with 9 chunks in flight (132.5 KiB): the 50,257-step sums
    ROW = Tile(1, 1, 4, 32, 32, 4)


# BN outputs per block, KC summation steps staged at a time, NT threads loading them.
RowTile = namedtuple("RowTile", "BN KC NT")
ROW_KINDS = ("tf_fc", "tf_unembedding")
if config.ENABLE_CUDASIM:  # few blocks and chunks: the simulator pays per block and per barrier
    ROW_NARROW = ROW_MID = ROW_WIDE = RowTile(16, 32, 16)
else:
    # tools/tf_matmul_sweep.py --row on an H200 (docs/results/2026-12-01-h200-decode/row_sweep_fma.log)
    ROW_NARROW, ROW_MID, ROW_WIDE = RowTile(4, 512, 256), RowTile(8, 128, 128), RowTile(32, 64, 256)


SHARED_BYTES = sharedmem.STATIC_LIMIT  # the static shared memory a block may hold


def row_s_max(S):
    """The staged input row's length for sums of S steps: a power of two, so that few kernels compile."""
    return 1 << max(S - 1, 1).bit_length()


def row_buffer(tile):
    """(columns, floats) of each of build_row's two chunk buffers: a spare column, so that the
    transposed stores of the unembedding hit distinct banks."""
    return tile.BN + 1, tile.KC * (tile.BN + 1)


def row_shared_bytes(tile, s_max):
    """The static shared memory of build_row's block: the input row and the two chunk buffers."""
    return 4 * (s_max + 2 * row_buffer(tile)[1])


def row_tile_for(n_cols, s_max):
    """The row tile the sweep timed fastest at GPT-2's widths: 4 outputs a block for 768 (192 blocks,
    long chunks: the 3,072-step sum of mlp.c_proj has 6), 8 up to 4 x 768, 32 for the vocabulary. Where the input row (s_max
    floats) and the two chunk buffers would pass a block's shared memory (d_model over 1024),
    the chunks get shorter: a chunk is only what is staged at a time, the sum's order is the same."""
    tile = ROW_NARROW if n_cols <= 1024 else ROW_MID if n_cols <= 4096 else ROW_WIDE
    while row_shared_bytes(tile, s_max) > SHARED_BYTES and tile.KC > 1:
        tile = tile._replace(KC=tile.KC // 2)
    return tile


def launch_tile(name, n_rows, n_cols, sum_len, fused):
    """The tile launch.matmul launches this product with: row_tile_for's for one row of a ROW_KINDS
    kind (build_row), else tile_for's, fitted to this GPU's shared memory (build)."""
    if n_rows == 1 and name in ROW_KINDS:
        return row_tile_for(n_cols, row_s_max(sum_len))
    return fitted(tile_for(name, n_rows, n_cols, sum_len, fused), name)


def column_blocks(tile, n_cols):
    """The blocks of columns of n_cols outputs under launch_tile's tile: one maximum a row each under
    the "max" epilogue."""
    return -(-n_cols // (tile.BN if isinstance(tile, RowTile) else tile.TN * tile.CT))


def tile_for(name, n_rows, n_cols, sum_len, fused):
    """The tile the sweeps timed fastest for GPT-2's shapes (under fma; the unembedding, tf_fc
    and the input gradients also under nofma), by kind; every tile but the wte gradient's lays its lanes in
    quads (Tile.QUAD):
    - one row (of the backward's kinds, a step of T = 1; one row of tf_fc or the unembedding goes
      to build_row instead): blocks of 4 x 32 threads, one output each;
    - the wte gradient (50,257 x 768 sums of T terms): 4 x 4 outputs a thread;
    - the training unembedding: 8 x 4 outputs a thread (UNEMBED; 4 x 4 under nofma); the other
      weight gradients: 4 x 2 (MID); both T_WIDE where there are at most a million outputs;
    - T rows: 2 x 2 outputs a thread, in blocks of 8 x 16 threads (T_WIDE; for the 768-column
      products under nofma with 4 chunks); for the 768-column input gradients, blocks of one warp
      (T_WARP: 4 x 8 threads, 384 blocks); 4 x 2 in 8 x 8 for the input gradient with 3,072
      columns (T_TALL; under nofma T_WIDE, 21.1 against 24.1 us:
      docs/results/2026-12-03-h200-nofma/sweep_din_nofma.json); the unembedding's input gradient,
      whose 50,257-step sums stream wte from memory, T_WIDE with 10 chunks staged (dynamic shared
      memory).
    Generation asks with the same shapes at every length (one row to unembed, a bucket of rows
    otherwise), so its first, unrecorded pass compiles every kernel it needs."""
    if n_rows == 1:
        return ROW
    if name == "tf_unembedding_back_dwte":
        return WIDE
    if name in ("tf_fc_back_dweight", "tf_unembedding"):
        if n_rows * n_cols <= 1 << 20:
            return T_WIDE
        return MID if name == "tf_fc_back_dweight" else UNEMBED if fused else UNEMBED_NOFMA
    if name == "tf_unembedding_back_din":
        return T_DEEP
    if KINDS[name].b_by_output:
        return (T_TALL if fused else T_WIDE) if n_cols > 1024 else T_WARP
    return T_WIDE if n_cols > 1024 or fused else T_WIDE._replace(ST=4)


def copy_width(x, by_s, rows):
    """The floats build's copies move at a time for operand x (C-contiguous; see run_width)."""
    assert x.strides == (4 * x.shape[1], 4), "build's copies need C-contiguous operands"
    return run_width(x.shape[1], address(x) % 16 == 0, by_s, rows)


def run_width(row_len, aligned, by_s, rows):
    """4 where every run of 4 floats a chunk copies is 16 bytes aligned: the operand's start is
    (`aligned`) and its row length, and a by_s operand's runs start at multiples of its block's
    `rows` outputs, a multiple of 4; else 1 (a row length off a multiple of 4). A by_s first
    operand (the weight gradients' inputs) is summed from row 0, as backward.py launches it."""
    return 4 if aligned and row_len % 4 == 0 and (not by_s or rows % 4 == 0) else 1


def stage_bytes(tile, name):
    """The shared memory of one of build's ST staged chunks: A's and B's, rows padded by PAD."""
    a_trans, b_by_output = KINDS[name][:2]
    BM, BN = tile.TM * tile.RT, tile.TN * tile.CT
    a = tile.BK * (BM + PAD) if a_trans else BM * (tile.BK + PAD)
    b = BN * (tile.BK + PAD) if b_by_output else tile.BK * (BN + PAD)
    return 4 * (a + b)


def fitted(tile, name):
    """tile with as many staged chunks as this GPU's shared memory holds, at most its own ST (the
    chunks in flight decide the speed, never the bits): tile_for's tiles are the H200's."""
    return tile._replace(ST=max(2, min(tile.ST, sharedmem.optin_bytes() // stage_bytes(tile, name))))


def dynamic_bytes(tile, name):
    """The dynamic shared memory build's kernel is launched with: its ST staged chunks where they
    pass a block's static 48 KiB (long sums, whose copies need more chunks in flight), else 0."""
    n = tile.ST * stage_bytes(tile, name)
    return n if n > SHARED_BYTES else 0


EPILOGUES = (None, "gelu", "add", "gelu_back", "max")


@functools.cache
def make_store(epilogue, fused):
    """out[i, j] = v, then the epilogue: the element-wise statement tf.c runs next on the output,
    "gelu" (tf_gelu of it into extra), "add" (tf_add: res + it into extra), "gelu_back"
    (tf_gelu_back of it, the gelu's input in res, into extra), or None. "max" stores v alone:
    the kernel then takes the maxima of its block's rows (build's and build_row's own code)."""
    assert epilogue in EPILOGUES, epilogue

    @cuda.jit(device=True)
    def store(out, res, extra, i, j, v):
        out[i, j] = v
        if epilogue == "gelu":
            extra[i, j] = gelu(v)
        elif epilogue == "add":
            extra[i, j] = res[i, j] + v
        elif epilogue == "gelu_back":
            extra[i, j] = gelu_back(res[i, j], v, fused)

    return store


def tiled(name, tile, fused, a, b, epilogue=None):
    """build's kernel for these operands: their copy widths from their alignment (copy_width)."""
    a_trans, b_by_output = KINDS[name][:2]
    return build(name, tile, fused, copy_width(a, a_trans, tile.TM * tile.RT),
                 copy_width(b, not b_by_output, tile.TN * tile.CT), epilogue)


@functools.cache
def build(name, tile, fused, wa, wb, epilogue=None):
    """The kernel for KINDS[name] with this tile and fp model, its operands copied wa and wb floats
    at a time (copy_width); `epilogue` as build_row's (compiled at its first launch)."""
    a_trans, b_by_output, scaled_product, scaled_result = KINDS[name]
    TM, TN, RT, CT, BK, ST, QUAD = tile
    assert BK % VEC == 0 and ST >= 2 and ST * stage_bytes(tile, name) <= sharedmem.H200_OPTIN, tile
    BM, BN, NT = TM * RT, TN * CT, RT * CT
    # Each operand is staged in its own memory order, so both the copies and the shared stores
    # run along consecutive addresses. Rows are padded to keep them 16 bytes aligned.
    # A: a[s, i] rows of BM outputs (a_trans), else a[i, s] rows of BK steps; B likewise.
    A_ROW = BM + PAD if a_trans else BK + PAD
    B_ROW = BK + PAD if b_by_output else BN + PAD
    A_SIZE = BK * A_ROW if a_trans else BM * A_ROW
    B_SIZE = BN * B_ROW if b_by_output else BK * B_ROW
    A_BUFS, B_BUFS = ST * A_SIZE, ST * B_SIZE  # constants: shared array shapes must be literals
    assert A_BUFS % VEC == 0  # B's chunks start 16 bytes aligned after A's in dynamic shared memory
    if dynamic_bytes(tile, name):
        @cuda.jit(device=True)
        def buffers():
            staged = cuda.shared.array(0, np.float32)  # A_BUFS + B_BUFS, given at launch
            return staged[:A_BUFS], staged[A_BUFS:]
    else:
        @cuda.jit(device=True)
        def buffers():
            return (cuda.shared.array(A_BUFS, np.float32, alignment=SHARED_ALIGN),  # ST chunks each
                    cuda.shared.array(B_BUFS, np.float32, alignment=SHARED_ALIGN))
    # A full chunk is read VEC steps at a time. Where an operand's staged rows run along the
    # outputs (A a_trans, B by s), a thread's outputs are neighbours (rows ty*TM + m, columns
    # tx*TN + n), read TM or TN at a time by one vector load a step. Where they run along s, its
    # outputs are every RT-th row (ty + m*RT) or CT-th column (tx + n*CT), each read by one
    # 16-byte load of VEC steps: the lanes of a quarter warp then read consecutive staged rows,
    # an odd number of 16 bytes apart (BK + PAD floats), so in distinct banks, where neighbours
    # TN = 4 or TM = 8 rows apart shared them (the 4x4 and 8x2 tiles' 2-way conflicts).
    R_OWN, R_STEP = (TM, 1) if a_trans else (1, RT)  # a thread's row m: ty * R_OWN + m * R_STEP
    C_OWN, C_STEP = (1, CT) if b_by_output else (TN, 1)  # its column n: tx * C_OWN + n * C_STEP
    AV, BV = TM * VEC, TN * VEC  # the staged values of VEC steps in registers
    # With QUAD, lanes 4q .. 4q + 3 are the threads (ty, tx), (ty, tx + 1), (ty + 1, tx),
    # (ty + 1, tx + 1), so a quarter warp (lanes 8p .. 8p + 7) spans 2 rows of threads and 4
    # columns: its 16-byte loads along s read 2 staged rows of A and 4 of B, where a row of 8
    # threads read 8 of B, two of them in each bank when a thread's columns were neighbours.
    assert not QUAD or (RT % 2 == 0 and CT % 2 == 0), tile
    HALF_CT = CT // 2
    load_a = vector_load(TM, VEC) if a_trans else vector_load(VEC, 1)
    load_b = vector_load(TN, VEC) if not b_by_output else vector_load(VEC, 1)
    wait_staged = wait(ST - 2)
    store = make_store(epilogue, fused)
    MAXIMA = BM * CT  # the "max" epilogue's shared row maxima: a row's CT threads each

    @cuda.jit(device=True)
    def row_maxima(acc, scale, t, tx, ty, i0, i_end, j0, N, extra):
        """The "max" epilogue (the unembedding before tf.c's softmax): extra[i, blockIdx.x] = the
        largest of row i's outputs in this block. A max is exact in any order, so the softmax takes
        its row's from these (tf_unembedding_softmax) without a pass over the logits of its own."""
        part = cuda.shared.array(MAXIMA, np.float32)
        for m in range(TM):
            r = ty * R_OWN + m * R_STEP
            top = f32(-np.inf)
            for n in range(TN):
                v = mul(acc[m, n], scale) if scaled_result else acc[m, n]
                if j0 + tx * C_OWN + n * C_STEP < N and v > top:
                    top = v
            part[r * CT + tx] = top
        cuda.syncthreads()
        for r in range(t, BM, NT):
            if i0 + r < i_end:
                extra[i0 + r, cuda.blockIdx.x] = largest(part, r * CT, CT)

    def make_issue(by_s, ROWS, ROW_LEN, W, full):
        """The copies of one operand's chunk from s0 into the shared buffer at `base`, W floats
        each (zeros past the edges: staged, never summed). The operand is x[s, o] (by_s) or
        x[o, s], for its ROWS outputs from o0; consecutive threads copy consecutive runs. Every
        index is unsigned (no negative-index fix-ups), and a `full` chunk skips the check on s.
        This is the copies of a block at an edge of the output, or of the last, partial chunk;
        make_rows' are the others'."""
        assert (ROWS if by_s else BK) % W == 0 or W == 1
        PER_ROW = (ROWS if by_s else BK) // W  # runs in a staged row
        RUNS = BK * ROWS // W
        COPIES, EXACT = -(-RUNS // NT), RUNS % NT == 0
        copy = copy_async(W)

        @cuda.jit(device=True)
        def issue(x, s0, S, o0, o_end, ld, t, buf, base):
            for r in range(COPIES):
                q = t + U(r * NT)
                if EXACT or q < U(RUNS):
                    row, col = q // U(PER_ROW), q % U(PER_ROW) * U(W)
                    s, o = (s0 + row, o0 + col) if by_s else (s0 + col, o0 + row)
                    n = U(0)
                    if o < o_end and (full or s < S):
                        n = min(o_end - o, U(W)) if by_s else (U(W) if full else min(S - s, U(W)))
                    src = s * ld + o if by_s else o * ld + s
                    copy(buf, base + row * U(ROW_LEN) + col, x, src if n > U(0) else U(0), n)

        return issue

    def make_rows(by_s, ROWS, ROW_LEN, W):
        """The copies of a full chunk of a block inside the output, which need no check:
        (first, issue, usable), usable where each thread's copies keep one column of the staged
        rows (else make_issue's copies serve these chunks too). A thread's copies lie STRIDE staged rows apart, in the source and in
        the buffer, the same in every chunk, so `first` finds its first copy's addresses once,
        before the chunks: chunk c's are those moved on c chunks and by its slot, and its r-th
        copy's are r steps further, so a copy costs two adds. Indexing each chunk's copies afresh
        was a third of the instructions of tf_fc's chunk loop (ptxas 13.0, sm_90)."""
        PER_ROW = (ROWS if by_s else BK) // W
        RUNS = BK * ROWS // W
        COPIES, EXACT = -(-RUNS // NT), RUNS % NT == 0
        STRIDE = NT // max(PER_ROW, 1)
        copy = copy_at(W)

        @cuda.jit(device=True)
        def first(x, o0, ld, t, buf):
            """(global address, shared address in slot 0, source step between a thread's copies,
            source advance a chunk) of thread t's first copy of chunk 0; the steps in address units."""
            row, col = t // U(PER_ROW), t % U(PER_ROW) * U(W)
            src = row * ld + o0 + col if by_s else (o0 + row) * ld + col
            return (global_address(x, src), shared_address(buf, row * U(ROW_LEN) + col), U(STRIDE * UNIT) * ld,
                    U(BK * UNIT) * ld if by_s else U(BK * UNIT))

        @cuda.jit(device=True)
        def issue(x, g, step, t, buf, s):
            for r in range(COPIES):
                if EXACT or t + U(r * NT) < U(RUNS):
                    copy(buf, s + U(r * STRIDE * ROW_LEN * UNIT), x, g + U(r) * step)

        return first, issue, PER_ROW > 0 and NT % PER_ROW == 0

    first_a, rows_a, ROWS_A = make_rows(a_trans, BM, A_ROW, wa)
    first_b, rows_b, ROWS_B = make_rows(not b_by_output, BN, B_ROW, wb)
    full_a, edge_a = (make_issue(a_trans, BM, A_ROW, wa, full) for full in (True, False))
    full_b, edge_b = (make_issue(not b_by_output, BN, B_ROW, wb, full) for full in (True, False))

    @cuda.jit(device=True)
    def issue(c, n_full, n_chunks, a, b, S, i0, i_end, j0, N, lda, ldb, t, sa, sb, inside, slot, ga, a_step, sa0, gb,
              b_step, sb0):
        """Chunk c's copies into slot `slot` (c % ST), and the group closed (empty past the last
        chunk, so that every thread counts the same groups); chunks from n_full on are partial.
        For make_rows' copies: ga and gb, the global addresses of this thread's first copies of
        chunk c, a_step and b_step the steps between its copies, sa0 and sb0 their shared
        addresses in slot 0."""
        base_a, base_b = slot * U(A_SIZE), slot * U(B_SIZE)
        if c < n_full:
            if ROWS_A and inside:
                rows_a(a, ga, a_step, t, sa, sa0 + base_a * U(UNIT))
            else:
                full_a(a, c * U(BK), S, i0, i_end, lda, t, sa, base_a)
            if ROWS_B and inside:
                rows_b(b, gb, b_step, t, sb, sb0 + base_b * U(UNIT))
            else:
                full_b(b, c * U(BK), S, j0, N, ldb, t, sb, base_b)
        elif c < n_chunks:
            edge_a(a, c * U(BK), S, i0, i_end, lda, t, sa, base_a)
            edge_b(b, c * U(BK), S, j0, N, ldb, t, sb, base_b)
        commit()

    @cuda.jit(device=True)
    def terms(av, bv, k, acc, scale):
        """Step k of the staged values: one term added to each of the thread's outputs."""
        for m in range(TM):
            for n in range(TN):
                if scaled_product:
                    acc[m, n] = mad(fused, mul(av[m * VEC + k], bv[n * VEC + k]), scale, acc[m, n])
                else:
                    acc[m, n] = mad(fused, av[m * VEC + k], bv[n * VEC + k], acc[m, n])

    @cuda.jit(device=True)
    def steps(sa, sb, ab, bb, ss, tx, ty, av, bv, acc, scale):
        """Steps ss .. ss + VEC - 1 of a full chunk (ss a multiple of VEC), each in order."""
        # Unsigned offsets: Numba adds no negative-index fix-up to them.
        if a_trans:
            for k in range(VEC):
                load_a(av, U(k), sa, ab + U((ss + k) * A_ROW + ty * TM))
        else:
            for m in range(TM):
                load_a(av, U(m * VEC), sa, ab + U((ty + m * RT) * A_ROW + ss))
        if b_by_output:
            for n in range(TN):
                load_b(bv, U(n * VEC), sb, bb + U((tx + n * CT) * B_ROW + ss))
        else:
            for k in range(VEC):
                load_b(bv, U(k), sb, bb + U((ss + k) * B_ROW + tx * TN))
        for k in range(VEC):
            terms(av, bv, k, acc, scale)

    def make_groups(g):
        """Groups g .. BK / VEC - 1 of a full chunk as straight-line code: NVVM leaves a loop over
        them rolled (two groups an iteration, each group's loads waiting before its terms), so each
        group is its own call with a constant offset and every load can be issued ahead."""
        if g == BK // VEC:
            @cuda.jit(device=True)
            def done(sa, sb, ab, bb, tx, ty, av, bv, acc, scale):
                pass
            return done
        rest, SS = make_groups(g + 1), g * VEC

        @cuda.jit(device=True)
        def groups(sa, sb, ab, bb, tx, ty, av, bv, acc, scale):
            steps(sa, sb, ab, bb, SS, tx, ty, av, bv, acc, scale)
            rest(sa, sb, ab, bb, tx, ty, av, bv, acc, scale)

        return groups

    full_chunk = make_groups(0)

    @cuda.jit(device=True)
    def step(sa, sb, ab, bb, ss, tx, ty, av, bv, acc, scale):
        """Step ss alone (the last, partial chunk)."""
        for m in range(TM):
            i = ty * R_OWN + m * R_STEP
            av[m * VEC] = sa[ab + U(ss * A_ROW + i)] if a_trans else sa[ab + U(i * A_ROW + ss)]
        for n in range(TN):
            j = tx * C_OWN + n * C_STEP
            bv[n * VEC] = sb[bb + U(j * B_ROW + ss)] if b_by_output else sb[bb + U(ss * B_ROW + j)]
        terms(av, bv, 0, acc, scale)

    def kernel(a, b, start, out, rows, S, scale, res, extra):
        """out[i, j] for rows[0] <= i < rows[1] (device memory, so a recorded pass can move them)
        and j < out.shape[1], each a sum over 0 <= s < S (see the module's table); then the
        epilogue's extra[i, j]. ST chunks are staged at once: the copies of chunk c + ST - 1 fly
        while chunk c is summed."""
        tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
        t = ty * CT + tx  # consecutive threads copy consecutive runs, whatever their outputs
        if QUAD:
            quad, lane = t // 4, t % 4
            tx, ty = 2 * (quad % HALF_CT) + lane % 2, 2 * (quad // HALF_CT) + lane // 2
        i0 = rows[0] + cuda.blockIdx.y * BM
        i_end = rows[1]
        j0 = cuda.blockIdx.x * BN
        N = out.shape[1]
        sa, sb = buffers()
        acc = cuda.local.array((TM, TN), np.float32)
        av = cuda.local.array(AV, np.float32)
        bv = cuda.local.array(BV, np.float32)
        # the copies' indices, unsigned
        tu, Su, i0u, i_endu, j0u, Nu = U(t), U(S), U(i0), U(i_end), U(j0), U(N)
        lda, ldb = U(a.shape[1]), U(b.shape[1])
        # chunk counts, counters and slots in 32 bits: each cast back lets the compiler keep one
        # instruction an operation, where Numba's 64-bit arithmetic takes two
        n_chunks, n_full = U32((Su + U(BK - 1)) // U(BK)), U32(Su // U(BK))
        inside = i0u + U(BM) <= i_endu and j0u + U(BN) <= Nu  # no copy of this block's passes an edge of o
        # make_rows' addresses: the next chunk's first copies, moved on a chunk at each issue
        ga, sa0, a_step, a_adv = first_a(a, i0u, lda, tu, sa)
        gb, sb0, b_step, b_adv = first_b(b, j0u, ldb, tu, sb)
        for c in range(ST - 1):
            issue(U32(c), n_full, n_chunks, a, b, Su, i0u, i_endu, j0u, Nu, lda, ldb, tu, sa, sb, inside, U32(c),
                  ga, a_step, sa0, gb, b_step, sb0)
            ga += a_adv
            gb += b_adv
        for m in range(TM):  # the starts load while the first chunks fly
            for n in range(TN):
                j = j0 + tx * C_OWN + n * C_STEP
                acc[m, n] = start[j] if j < N else ZERO
        c = U32(0)
        slot = U32(0)  # chunk c's, c % ST, counted rather than divided
        while c < n_chunks:
            wait_staged()  # this thread's copies of chunk c have landed
            cuda.syncthreads()  # everyone's have; and everyone has summed chunk c - 1, whose slot is next
            issue(U32(c + U32(ST - 1)), n_full, n_chunks, a, b, Su, i0u, i_endu, j0u, Nu, lda, ldb, tu, sa, sb,
                  inside, U32(slot + U32(ST - 1)) if slot == U32(0) else U32(slot - U32(1)), ga, a_step, sa0, gb,
                  b_step, sb0)
            ga += a_adv
            gb += b_adv
            ab, bb = slot * U(A_SIZE), slot * U(B_SIZE)
            if c < n_full:  # a whole chunk: every load is base + constant
                full_chunk(sa, sb, ab, bb, tx, ty, av, bv, acc, scale)
            else:  # the last, partial chunk: only real steps (a padded one could flip a zero's sign)
                for ss in range(S % BK):
                    step(sa, sb, ab, bb, ss, tx, ty, av, bv, acc, scale)
            c = U32(c + U32(1))
            slot = U32(0) if slot == U32(ST - 1) else U32(slot + U32(1))
        for m in range(TM):
            i = i0 + ty * R_OWN + m * R_STEP
            for n in range(TN):
                j = j0 + tx * C_OWN + n * C_STEP
                if i < i_end and j < N:
                    store(out, res, extra, i, j, mul(acc[m, n], scale) if scaled_result else acc[m, n])
        if epilogue == "max":
            row_maxima(acc, scale, t, tx, ty, i0, i_end, j0, N, extra)

    kernel.__name__ = kernel.__qualname__ = name + ("_" + epilogue if epilogue else "")  # the C loop's name
    return cuda.jit(kernel)


@functools.cache
def build_row(name, tile, fused, s_max, epilogue=None):
    """The one-row kernel for a ROW_KINDS kind, for sums of at most s_max steps. `epilogue` also
    writes an element-wise function of each finished output, as the kernel that follows it in
    tf.c would (the decode step's launches fused, the same bits): "gelu" (tf_gelu of the output
    into `extra`), "add" (tf_add: `res` + the output into `extra`); "max" the block's largest
    output into extra[i, blockIdx.x] (the softmax's, as build's)."""
    b_by_output = KINDS[name].b_by_output
    BN, KC, NT = tile
    assert BN <= NT, tile
    B_COLS, BUF = row_buffer(tile)
    BUFS = 2 * BUF  # constants: shared array shapes must be literals to the GPU compiler
    LOADS = -(-KC * BN // NT)
    X_LOADS = -(-s_max // NT)
    STEP = np.uint64(B_COLS)  # an output's consecutive steps in a staged chunk
    store = make_store(epilogue, fused)

    @cuda.jit(device=True)
    def fetch(b, s0, S, j0, N, t, rb):
        """Chunk s0's weights into registers; consecutive threads read consecutive addresses."""
        for r in range(LOADS):
            q = t + r * NT
            if b_by_output:  # wte[j, s]: each output's row is contiguous
                jj, ss = q // KC, q % KC
            else:  # w[s, j]: each step's row of outputs is contiguous
                ss, jj = q // BN, q % BN
            ok = q < KC * BN and s0 + ss < S and j0 + jj < N
            if b_by_output:
                rb[r] = b[j0 + jj, s0 + ss] if ok else ZERO
            else:
                rb[r] = b[s0 + ss, j0 + jj] if ok else ZERO

    @cuda.jit(device=True)
    def stage(bufs, base, t, rb):
        """The fetched registers into the buffer at `base`: step ss of output jj at ss * B_COLS + jj."""
        for r in range(LOADS):
            q = t + r * NT
            if q < KC * BN:
                if b_by_output:
                    bufs[base + np.uint64((q % KC) * B_COLS + q // KC)] = rb[r]
                else:
                    bufs[base + np.uint64((q // BN) * B_COLS + q % BN)] = rb[r]

    @cuda.jit(device=True)
    def chunk(c, n_chunks, rb, base, b, xs, bufs, S, j0, N, t, acc):
        """Chunk c: its registers staged in the buffer at `base`, then summed there while the loads
        of chunk c + 2 fly in the same registers. Two chunks are thus in flight while one is summed.
        The barrier also says that chunk c - 1's buffer is summed before chunk c + 1 is staged into
        it."""
        stage(bufs, base, t, rb)
        cuda.syncthreads()
        if c + 2 < n_chunks:
            fetch(b, (c + 2) * KC, S, j0, N, t, rb)
        if t < BN:
            acc = staged_dot(acc, xs, np.uint64(c * KC), U1, bufs, base + np.uint64(t), STEP, min(KC, S - c * KC),
                             fused)
        return acc

    def kernel(a, b, start, out, rows, S, scale, res, extra):
        """out[i, j] = start[j] + sum over s < S ascending of a[i, s] * B(s, j), i = rows[0]; then
        the epilogue's extra[i, j]."""
        t = cuda.threadIdx.x
        i = rows[0]
        j0 = cuda.blockIdx.x * BN
        N = out.shape[1]
        xs = cuda.shared.array(s_max, np.float32)
        bufs = cuda.shared.array(BUFS, np.float32)
        r0 = cuda.local.array(LOADS, np.float32)  # the even chunks' registers, staged at 0
        r1 = cuda.local.array(LOADS, np.float32)  # the odd chunks', staged at BUF
        xr = cuda.local.array(X_LOADS, np.float32)
        n_chunks = -(-S // KC)
        fetch(b, 0, S, j0, N, t, r0)
        if n_chunks > 1:
            fetch(b, KC, S, j0, N, t, r1)
        for r in range(X_LOADS):  # the input row: all loads in flight, then the stores
            s = t + r * NT
            xr[r] = a[i, s] if s < S else ZERO
        for r in range(X_LOADS):
            if t + r * NT < S:
                xs[t + r * NT] = xr[r]
        j = j0 + t
        acc = start[j] if t < BN and j < N else ZERO
        for c in range(0, n_chunks, 2):
            acc = chunk(c, n_chunks, r0, np.uint64(0), b, xs, bufs, S, j0, N, t, acc)
            if c + 1 < n_chunks:
                acc = chunk(c + 1, n_chunks, r1, np.uint64(BUF), b, xs, bufs, S, j0, N, t, acc)
        if t < BN and j < N:
            store(out, res, extra, i, j, acc)
        if epilogue == "max":  # as build's row_maxima: this block's largest output
            part = cuda.shared.array(BN, np.float32)
            if t < BN:
                part[t] = acc if j < N else f32(-np.inf)
            cuda.syncthreads()
            if t == 0:
                extra[i, cuda.blockIdx.x] = largest(part, 0, BN)

    kernel.__name__ = kernel.__qualname__ = name + "_row" + ("_" + epilogue if epilogue else "")
    return cuda.jit(kernel)


@cuda.jit
def tf_fc_back_dbias(dL_dout, dL_dbias, T):
    """tf_fc_back's `*dL_dbias += *dL_dout` from the zeroed gradient, samples i ascending, one
    thread per bias."""
    for u in range(cuda.grid(1), dL_dbias.shape[0], cuda.gridsize(1)):
        acc = ZERO
        for i in range(T):
            acc += dL_dout[i, u]
        dL_dbias[u] = acc
