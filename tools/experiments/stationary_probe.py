"""tf_fc at GPT-2's four forward shapes (T = 64): the tiled kernel (tile_for's tile) against
build_stationary under candidate tiles CWxCLxKRxRxRBxD, on a GPU; every candidate's bits must equal
the tiled kernel's. Weights cycle through copies past the L2, as in tools/tf_matmul_sweep.py.

    python3 tools/experiments/stationary_probe.py [--fp-model fma|nofma] [TILE ...]

The weight-stationary lead of docs/tf.md, tried on the H200 (2026-12-02, fma): every candidate gave
tf_fc's bits and every one was slower, 2.7-12x (c_attn 47.6 us at best against the tiled 17.8,
attn.c_proj 41.0 against 10.2, c_fc 77.0 against 19.3, mlp.c_proj 102.5 against 31.6): at T = 64
the pipeline's fill (stages - 1 ticks of a block's 32-55) and a barrier a tick cost more than the
shared loads of B it saves. See docs/results/2026-12-02-h200-ln.
"""
import argparse
import functools
import hashlib
import sys
from collections import namedtuple
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from numba import cuda  # noqa: E402

from cudakit.gpu import quiet  # noqa: E402
from cudakit.sharedmem import opt_in  # noqa: E402
from tf_matmul_sweep import SHAPES, shape_operands, time_kernel  # noqa: E402
from tf_numba import matmul as M  # noqa: E402
from tf_numba.fp import is_fused  # noqa: E402
from cudakit.asynccopy import commit, copy_async, wait  # noqa: E402
from cudakit.devmath import mad  # noqa: E402
from cudakit.vector import vector_load  # noqa: E402
from tf_numba.matmul import PAD, VEC, ZERO, make_store  # noqa: E402
from tf_numba.kernels import U  # noqa: E402


# tf_fc with the weights held in registers ("stationary"): CW threads side by side own CW columns
# (CL each, CW apart), and the sum's steps are cut into stages of KR, a stage per group of CW
# threads; R rows pass through the stages together, D ticks of A's copies staged ahead; RB rows a block.
Stationary = namedtuple("Stationary", "CW CL KR R RB D")


def stationary_stages(tile, S):
    """The stages (groups of tile.CW threads) of a sum of S steps."""
    return -(-S // tile.KR)


def stationary_bytes(tile, S):
    """The dynamic shared memory of build_stationary's block: D slots of each stage's rows of A,
    then the two tick buffers of the partial sums handed from stage to stage."""
    n = stationary_stages(tile, S)
    return 4 * (tile.D * n * (tile.R * tile.KR + PAD) + 2 * n * tile.R * tile.CL * tile.CW)


@functools.cache
def build_stationary(tile, fused, wa, epilogue=None):
    """tf_fc, out[i, j] = bias[j] + sum over s ascending of a[i, s] * w[s, j], as a pipeline.

    Thread (q, c) of a block (c < CW, q a stage) holds w[s, j] for its KR steps s of stage q and
    its CL columns j in registers, loaded once. Each tick, every stage takes R rows: their
    partial sums from stage q - 1 (or the bias, at stage 0), adds its KR terms to each in order,
    and hands them to stage q + 1 through shared memory (the last stage stores the outputs, with
    the epilogue). Stage q thus works on rows R * (tick - q) onwards, and every output's sum still
    runs in order, step by step, from the bias: only which thread adds a step changes. The rows
    of A a stage needs are copied into shared memory (cp.async, wa floats a copy) D - 1 ticks
    ahead, and the CW threads of a stage read them together (one address a warp's group)."""
    CW, CL, KR, R, RB, D = tile
    assert RB % R == 0 and KR % VEC == 0 and D >= 2 and 32 % CW == 0, tile
    SEG = R * KR + PAD  # a stage's rows of A in one slot, padded: a warp's stages hit other banks
    RUNS = R * KR // wa  # copies of one stage's rows a tick
    COPIES = -(-RUNS // CW)  # of which a thread starts at most this many
    PER_ROW = KR // wa
    BAND = CW * CL
    WR, ACC, AV = KR * CL, R * CL, R * VEC  # local arrays' sizes: literals to the GPU compiler
    copy = copy_async(wa)
    wait_staged = wait(D - 2)
    store = make_store(epilogue, fused)
    load_a = vector_load(VEC, 1)

    @cuda.jit(device=True)
    def issue(a, ring, tick, q, c, S, s0, n, i0, i1, G, lda):
        """The copies of the rows stage q sums at `tick` into slot tick % D (zeros past the edges),
        and the group closed, whether or not there are any (every thread counts the same groups)."""
        g = tick - q
        if g >= 0 and g < G:
            base = U((tick % D) * S + q) * U(SEG)
            for u in range(COPIES):
                p = c + u * CW
                if RUNS % CW == 0 or p < RUNS:
                    r, kk = p // PER_ROW, p % PER_ROW * wa
                    i = i0 + g * R + r
                    m = U(wa) if i < i1 and kk < n else U(0)
                    copy(ring, base + U(r * KR + kk), a, U(i * lda + s0 + kk) if m > U(0) else U(0), m)
        commit()

    def kernel(a, w, start, out, rows, S, scale, res, extra):
        """out[i, j] for rows[0] <= i < rows[1] and j < out.shape[1] (see build_stationary), each
        a sum of S steps; the block holds stationary_stages(S) * CW threads."""
        t = cuda.threadIdx.x
        c, q = t % CW, t // CW
        n_stages = cuda.blockDim.x // CW
        N = out.shape[1]
        j0 = cuda.blockIdx.x * BAND + c
        i0 = rows[0] + cuda.blockIdx.y * RB
        i1 = min(rows[1], i0 + RB)
        G = (i1 - i0 + R - 1) // R
        s0 = q * KR
        n = min(KR, S - s0)
        lda = a.shape[1]
        wr = cuda.local.array(WR, np.float32)
        for k in range(KR):
            for l in range(CL):
                j = j0 + l * CW
                wr[k * CL + l] = w[s0 + k, j] if k < n and j < N else ZERO
        shared = cuda.shared.array(0, np.float32)
        ring = shared[:D * n_stages * SEG]
        hand = shared[D * n_stages * SEG:]
        HAND = n_stages * CW  # floats of one (row, column) entry of a tick buffer
        acc = cuda.local.array(ACC, np.float32)
        av = cuda.local.array(AV, np.float32)
        for tick in range(D - 1):
            issue(a, ring, tick, q, c, n_stages, s0, n, i0, i1, G, lda)
        for tick in range(G + n_stages - 1):
            wait_staged()
            cuda.syncthreads()  # the copies of this tick have landed; the last tick's hand-offs are written
            issue(a, ring, tick + D - 1, q, c, n_stages, s0, n, i0, i1, G, lda)
            g = tick - q
            if g >= 0 and g < G:
                for r in range(R):
                    for l in range(CL):
                        if q == 0:
                            j = j0 + l * CW
                            acc[r * CL + l] = start[j] if j < N else ZERO
                        else:
                            acc[r * CL + l] = hand[U((((tick - 1) % 2) * R * CL + r * CL + l) * HAND + t - CW)]
                base = U((tick % D) * n_stages + q) * U(SEG)
                if n == KR:
                    for kk in range(0, KR, VEC):
                        for r in range(R):
                            load_a(av, r * VEC, ring, base + U(r * KR + kk))
                        for k in range(VEC):
                            for r in range(R):
                                for l in range(CL):
                                    acc[r * CL + l] = mad(fused, av[r * VEC + k], wr[(kk + k) * CL + l],
                                                          acc[r * CL + l])
                else:  # the last stage of a sum that is not a multiple of KR: its real steps only
                    for k in range(KR):
                        if k < n:
                            for r in range(R):
                                x = ring[base + U(r * KR + k)]
                                for l in range(CL):
                                    acc[r * CL + l] = mad(fused, x, wr[k * CL + l], acc[r * CL + l])
                if q == n_stages - 1:
                    for r in range(R):
                        i = i0 + g * R + r
                        for l in range(CL):
                            j = j0 + l * CW
                            if i < i1 and j < N:
                                store(out, res, extra, i, j, acc[r * CL + l])
                else:
                    for r in range(R):
                        for l in range(CL):
                            hand[U(((tick % 2) * R * CL + r * CL + l) * HAND + t)] = acc[r * CL + l]

    kernel.__name__ = kernel.__qualname__ = "tf_fc_stationary" + ("_" + epilogue if epilogue else "")
    return cuda.jit(kernel)


FORWARD = {"c_attn": 0, "attn.c_proj": 3, "c_fc": 6, "mlp.c_proj": 9}
EPILOGUE = {"c_attn": None, "attn.c_proj": "add", "c_fc": "gelu", "mlp.c_proj": "add"}
K768 = ["8x2x32x2x64x4", "8x2x32x1x64x4", "8x4x16x2x64x4", "4x2x32x2x64x4", "8x2x32x2x32x4", "4x4x32x2x64x4",
        "8x2x32x4x64x4"]
DEFAULT = {"c_attn": K768, "attn.c_proj": K768 + ["4x2x32x2x32x4", "2x4x32x2x64x4"], "c_fc": K768,
           "mlp.c_proj": ["4x2x48x2x64x4", "8x1x48x2x64x4", "4x2x48x2x32x4", "4x1x48x4x64x4", "4x2x64x2x64x4",
                          "8x2x96x1x64x3"]}


def digest(x):
    return hashlib.sha256(x.copy_to_host().tobytes()).hexdigest()[:12]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--fp-model", default="fma")
    p.add_argument("tiles", nargs="*")
    args = p.parse_args()
    quiet()
    fused = is_fused(args.fp_model)
    for name, index in FORWARD.items():
        kind, rows, cols, S, *_ = SHAPES[index]
        a, host_b, start, row_range, init, copies = shape_operands(index)
        a, start, row_range = cuda.to_device(a), cuda.to_device(start), cuda.to_device(row_range)
        bs = [cuda.to_device(host_b) for _ in range(copies)]
        res = cuda.to_device(init)
        out, extra = cuda.to_device(init), cuda.to_device(init)
        ep = EPILOGUE[name]
        tile = M.fitted(M.tile_for(kind, rows, cols, S, fused), kind)
        grid = (-(-cols // (tile.TN * tile.CT)), -(-rows // (tile.TM * tile.RT)))
        kernel = M.tiled(kind, tile, fused, a, bs[0], ep)
        sets = [(a, b, start, out, row_range, S, np.float32(1), res, extra) for b in bs]
        kernel[grid, (tile.CT, tile.RT)](*sets[0])
        want = digest(out) + digest(extra)
        us = time_kernel(kernel, grid, (tile.CT, tile.RT), sets, repeats=4 * copies)
        print(f"{name:12s} tiled {tile}  {us:7.2f} us", flush=True)
        for label in args.tiles or DEFAULT[name]:
            st = Stationary(*map(int, label.split("x")))
            try:
                stages = stationary_stages(st, S)
                threads = stages * st.CW
                if threads > 1024:
                    print(f"{name:12s} {label:16s} {threads} threads: skipped", flush=True)
                    continue
                k2 = build_stationary(st, fused, 4, ep)
                nbytes = stationary_bytes(st, S)
                g2 = (-(-cols // (st.CW * st.CL)), -(-rows // st.RB))
                out2, extra2 = cuda.to_device(init), cuda.to_device(init)
                sets2 = [(a, b, start, out2, row_range, S, np.float32(1), res, extra2) for b in bs]
                opt_in(k2, sets2[0], nbytes)
                k2[g2, threads, 0, nbytes](*sets2[0])
                cuda.synchronize()
                same = digest(out2) + digest(extra2) == want
                us2 = time_kernel(k2, g2, threads, sets2, repeats=4 * copies, nbytes=nbytes)
                regs = max(k2.get_regs_per_thread().values())
                print(f"{name:12s} {label:16s} {us2:7.2f} us  x{us / us2:4.2f}  grid {g2} x {threads}  "
                      f"{nbytes} B  regs {regs}  {'same bits' if same else 'OTHER BITS'}", flush=True)
            except Exception as exc:  # noqa: BLE001
                print(f"{name:12s} {label:16s} failed: {type(exc).__name__}: {str(exc)[:300]}", flush=True)


if __name__ == "__main__":
    main()
