"""Every register-tiled matrix kernel (matmul.py) against the faithful kernel it replaces
(kernels.py: tf_fc, tf_fc_back, tf_unembedding, tf_unembedding_back, the C's loops with a thread
per output), bit for bit, launched with the arguments the passes give them.

In the simulator the shapes are small and odd, so every tile edge is crossed (and a small tile
forces several blocks and staging rounds, as a small row tile does for the one-row kernel); on a
GPU the shapes are GPT-2's at T = 64 and the tiles are the ones tile_for and row_tile_for pick
there. The *_last_row cases are generation's one row, which goes to the one-row kernel
(matmul.build_row)."""
from types import SimpleNamespace

import numpy as np
import pytest
from numba import config, cuda

from cudakit import sharedmem
from tf_numba import kernels as K
from tf_numba import launch
from tf_numba import matmul as M
from tf_numba.config import GPT2

SMALL = M.Tile(1, 2, 2, 2, 4, 2)
SMALL_2 = M.Tile(2, 1, 2, 2, 8, 3)  # two rows a thread: the vector loads across outputs
SMALL_QUAD = M.Tile(2, 2, 2, 4, 4, 2, True)  # the quad lane layout, several copies a thread
# UNEMBED's geometry scaled down: 4 rows and 4 columns a thread, strided where staged along s
SMALL_WIDE = M.Tile(4, 4, 2, 2, 4, 2, True)
SMALL_ROW = M.RowTile(4, 3, 4)  # several blocks, and chunks that end ragged
# odd sizes: every copy moves one float; multiples of 4: 16-byte copies where a block's rows allow
SIM_SHAPES = [SimpleNamespace(T=5, D=7, N=9, V=11), SimpleNamespace(T=6, D=8, N=12, V=16)]
GPU_SHAPES = [SimpleNamespace(T=64, D=GPT2.d_model, N=n, V=GPT2.d_vocab) for n in (3 * 768, 768, 4 * 768)] + \
    [SimpleNamespace(T=64, D=4 * 768, N=768, V=GPT2.d_vocab)]  # c_attn, attn.c_proj, c_fc, mlp.c_proj
FUSED = [pytest.param(True, id="fma"), pytest.param(False, id="nofma")]


def random(rng, *shape):
    return rng.standard_normal(shape, dtype=np.float32)


def rows(first, end):
    return cuda.to_device(np.array([first, end], dtype=np.int64))


def bits(*device_arrays):
    return [a.copy_to_host().view(np.uint32) for a in device_arrays]


def fc(s, fused, rng, first=None, epilogue=None):
    """tf_fc: forward.py's launch against the faithful kernel, over every row (training), or over
    row `first` only (generation's decode step, the one-row kernel). With an epilogue, also the
    statement after it (tf_gelu, or tf_add of a residual) against the faithful output's."""
    weight, bias, inp = (cuda.to_device(x) for x in (random(rng, s.D, s.N), random(rng, s.N), random(rng, s.T, s.D)))
    out0, extra0, res = random(rng, s.T, s.N), random(rng, s.T, s.N), cuda.to_device(random(rng, s.T, s.N))
    tiled, faithful = cuda.to_device(out0), cuda.device_array((s.T, s.N), np.float32)
    extra, extra_faithful = cuda.to_device(extra0), cuda.to_device(extra0)
    first, end = (0, s.T) if first is None else (first, first + 1)
    launch.matmul("tf_fc", inp, weight, bias, tiled, rows(first, end), end - first, fused, epilogue=epilogue,
                  res=res, extra=extra)
    launch.elementwise(K.tf_fc, s.T * s.N, weight, bias, inp, faithful, s.T, fused)
    want = out0.copy()
    want[first:end] = faithful.copy_to_host()[first:end]
    if epilogue is None:
        return bits(tiled), [want.view(np.uint32)]
    if epilogue == "gelu":
        launch.elementwise(K.tf_gelu, (end - first) * s.N, faithful, extra_faithful, rows(first, end), end - first)
    else:
        launch.elementwise(K.tf_add, (end - first) * s.N, res, faithful, extra_faithful, rows(first, end),
                           end - first)
    return bits(tiled, extra), [want.view(np.uint32)] + bits(extra_faithful)


def fc_back(s, fused, rng, epilogue=None):
    """tf_fc_back: backward.fc_back's three launches against the faithful kernel, which adds to
    the parameter gradients from tf.c's zeroed arena; the passes' kernels write them first
    (over the garbage here). With the epilogue "gelu_back", also tf_gelu_back of the input
    gradient against the faithful one's."""
    from tf_numba.backward import fc_back as pass_fc_back

    weight, inp, dL_dout = (cuda.to_device(x) for x in (random(rng, s.D, s.N), random(rng, s.T, s.D),
                                                         random(rng, s.T, s.N)))
    gelu_in = cuda.to_device(random(rng, s.T, s.D))  # the forward's c_fc.out, the gelu's input
    outs = []
    for run in ("tiled", "faithful"):
        start = random if run == "tiled" else lambda rng, *shape: np.zeros(shape, np.float32)
        dL_dweight, dL_dbias = cuda.to_device(start(rng, s.D, s.N)), cuda.to_device(start(rng, s.N))
        dL_din, dL_dgelu_in = cuda.device_array((s.T, s.D), np.float32), cuda.device_array((s.T, s.D), np.float32)
        if run == "tiled":
            m = SimpleNamespace(zeros=cuda.to_device(np.zeros(max(s.D, s.N), np.float32)), fused=fused,
                                rows=lambda end: rows(0, end))
            pass_fc_back(m, "fc", weight, inp, dL_dout, dL_dweight, dL_dbias, dL_din, s.T, epilogue=epilogue,
                         res=gelu_in, extra=dL_dgelu_in if epilogue else None)
        else:
            launch.elementwise(K.tf_fc_back, s.D * s.N + s.N + s.T * s.D, weight, inp, dL_dout, dL_dweight,
                               dL_dbias, dL_din, s.T, fused)
            if epilogue:
                launch.elementwise(K.tf_gelu_back, s.T * s.D, gelu_in, dL_din, dL_dgelu_in, s.T, fused)
        outs.append(bits(dL_dweight, dL_dbias, dL_din, *([dL_dgelu_in] if epilogue else [])))
    return outs


def fc_short_sum(s, fused, rng):
    """tf_fc summing only the first S = D - 3 steps of each row (launch.matmul's S), against the
    faithful kernel on the truncated arrays: the last copies along s are partial (zeros after
    the last real step, never summed)."""
    S = s.D - 3
    weight, bias, inp = random(rng, s.D, s.N), cuda.to_device(random(rng, s.N)), random(rng, s.T, s.D)
    tiled, faithful = cuda.to_device(random(rng, s.T, s.N)), cuda.device_array((s.T, s.N), np.float32)
    launch.matmul("tf_fc", cuda.to_device(inp), cuda.to_device(weight), bias, tiled, rows(0, s.T), s.T, fused, S=S)
    launch.elementwise(K.tf_fc, s.T * s.N, cuda.to_device(weight[:S].copy()), bias, cuda.to_device(inp[:, :S].copy()),
                       faithful, s.T, fused)
    return bits(tiled), bits(faithful)


def dweight_rows(s, fused, rng):
    """tf_fc_back's weight gradient for all but the last input feature: the last copies along the
    outputs are partial, and the row left out keeps what it held."""
    inp, dL_dout = random(rng, s.T, s.D), random(rng, s.T, s.N)
    held = random(rng, s.D, s.N)
    tiled, faithful = cuda.to_device(held), cuda.to_device(np.zeros((s.D, s.N), np.float32))
    zeros = cuda.to_device(np.zeros(max(s.D, s.N), np.float32))
    launch.matmul("tf_fc_back_dweight", cuda.to_device(inp), cuda.to_device(dL_dout), zeros, tiled,
                  rows(0, s.D - 1), s.D - 1, fused, S=s.T)
    launch.elementwise(K.tf_fc_back, s.D * s.N + s.N + s.T * s.D, cuda.to_device(random(rng, s.D, s.N)),
                       cuda.to_device(inp), cuda.to_device(dL_dout), faithful, cuda.device_array(s.N, np.float32),
                       cuda.device_array((s.T, s.D), np.float32), s.T, fused)
    want = faithful.copy_to_host()
    want[-1] = held[-1]
    return bits(tiled), [want.view(np.uint32)]


def unembedding(s, fused, rng, first=None, maxima=False):
    """The unembedding: every row (training), or only row `first` (generation's last row). With
    `maxima`, the "max" epilogue the softmax reads: each row's largest output of each block of
    columns, against the faithful kernel's outputs taken by the launch's block width (ties of a
    kind the C's `>` would pick differently: none in normal logits), and nothing written past
    the blocks or outside the rows."""
    wte, ln_f = cuda.to_device(random(rng, s.V, s.D)), cuda.to_device(random(rng, s.T, s.D))
    first, end = (0, s.T) if first is None else (first, first + 1)
    out0 = random(rng, s.T, s.V)  # rows outside [first, end) must stay as they are
    tiled, faithful = cuda.to_device(out0), cuda.to_device(out0)
    held = random(rng, s.T, s.V + 2)
    tops = cuda.to_device(held)
    blocks = launch.matmul("tf_unembedding", ln_f, wte, cuda.to_device(np.zeros(s.V, np.float32)), tiled,
                           rows(first, end), end - first, fused, epilogue="max" if maxima else None,
                           extra=tops if maxima else None)
    launch.elementwise(K.tf_unembedding, (end - first) * s.V, wte, ln_f, faithful, rows(first, end), fused)
    if not maxima:
        return bits(tiled), bits(faithful)
    if end - first == 1:
        width = M.row_tile_for(s.V, M.row_s_max(s.D)).BN
    else:
        tile = M.tile_for("tf_unembedding", end - first, s.V, s.D, fused)
        width = tile.TN * tile.CT
    assert blocks == -(-s.V // width)
    want = held.copy()
    logits = faithful.copy_to_host()
    for q in range(blocks):
        want[first:end, q] = logits[first:end, q * width:(q + 1) * width].max(axis=1)
    return bits(tiled, tops), bits(faithful) + [want.view(np.uint32)]


def unembedding_back(s, fused, rng):
    """The unembedding backward: backward.py's two launches, on dL/dlogits with rows padded to
    whole 16-byte runs as the arena pads them, and 4 floats more (so that every shape has
    garbage past d_vocab, which must never be summed), against the faithful kernel."""
    from tf_numba.arena import padded
    from tf_numba.backward import unembedding_back as pass_unembedding_back

    wte, ln_f = cuda.to_device(random(rng, s.V, s.D)), cuda.to_device(random(rng, s.T, s.D))
    dL_dout_padded = random(rng, s.T, padded(s.V) + 4)
    dL_dout = dL_dout_padded[:, :s.V].copy()
    r_input_size = np.float32(1.0) / np.float32(s.T)
    m = SimpleNamespace(zeros=cuda.to_device(np.zeros(max(s.V, s.D), np.float32)), fused=fused,
                        rows=lambda end: rows(0, end))
    outs = []
    for run in ("tiled", "faithful"):  # the faithful kernel adds to tf.c's zeroed gradient; ours writes it
        dwte0 = random(rng, s.V, s.D) if run == "tiled" else np.zeros((s.V, s.D), np.float32)
        dL_dwte, dL_din = cuda.to_device(dwte0), cuda.device_array((s.T, s.D), np.float32)
        if run == "tiled":
            pass_unembedding_back(m, wte, ln_f, cuda.to_device(dL_dout_padded), dL_dwte, dL_din, s.T)
        else:
            launch.elementwise(K.tf_unembedding_back, s.V * s.D + s.T * s.D, wte, ln_f, cuda.to_device(dL_dout),
                               dL_dwte, dL_din, s.T, r_input_size, fused)
        outs.append(bits(dL_dwte, dL_din))
    return outs


ROUTINES = {"tf_fc": fc, "tf_fc_last_row": lambda s, fused, rng: fc(s, fused, rng, first=s.T - 2),
            "tf_fc_add": lambda s, fused, rng: fc(s, fused, rng, epilogue="add"),
            "tf_fc_last_row_gelu": lambda s, fused, rng: fc(s, fused, rng, first=s.T - 2, epilogue="gelu"),
            "tf_fc_last_row_add": lambda s, fused, rng: fc(s, fused, rng, first=s.T - 2, epilogue="add"),
            "tf_fc_short_sum": fc_short_sum, "tf_fc_back_dweight_rows": dweight_rows,
            "tf_fc_back": fc_back, "tf_fc_back_gelu_back": lambda s, fused, rng: fc_back(s, fused, rng, "gelu_back"),
            "tf_unembedding": unembedding,
            "tf_unembedding_last_row": lambda s, fused, rng: unembedding(s, fused, rng, first=s.T - 2),
            "tf_unembedding_max": lambda s, fused, rng: unembedding(s, fused, rng, maxima=True),
            "tf_unembedding_last_row_max": lambda s, fused, rng: unembedding(s, fused, rng, first=s.T - 2, maxima=True),
            "tf_unembedding_back": unembedding_back}


def check(routine, shape, fused):
    tiled, faithful = ROUTINES[routine](shape, fused, np.random.default_rng(len(routine)))
    for got, want in zip(tiled, faithful):
        assert np.array_equal(got, want), routine


@pytest.mark.skipif(not config.ENABLE_CUDASIM, reason="simulator shapes; a GPU runs GPT-2's")
@pytest.mark.parametrize("small_tile", [None, SMALL, SMALL_2, SMALL_QUAD, SMALL_WIDE],
                         ids=["tile_for", "small_tile", "small_tile_2", "small_quad", "small_wide"])
@pytest.mark.parametrize("fused", FUSED)
@pytest.mark.parametrize("routine", list(ROUTINES))
def test_tiled_equals_faithful(routine, fused, small_tile, monkeypatch):
    if small_tile:
        monkeypatch.setattr(M, "tile_for", lambda name, n_rows, n_cols, sum_len, fused: small_tile)
        monkeypatch.setattr(M, "row_tile_for", lambda n_cols, s_max: SMALL_ROW)
    for shape in SIM_SHAPES:
        check(routine, shape, fused)


@pytest.mark.gpu
@pytest.mark.parametrize("fused", FUSED)
@pytest.mark.parametrize("routine", list(ROUTINES))
def test_tiled_equals_faithful_gpt2(routine, fused):
    shapes = GPU_SHAPES if routine.startswith("tf_fc") else GPU_SHAPES[:1]
    for shape in shapes:
        check(routine, shape, fused)


@pytest.mark.parametrize("optin_kib", [227, 163, 99, 48, 10], ids=["h200", "a100", "rtx4090", "static", "tiny"])
def test_fitted_keeps_the_staged_chunks_within_the_gpus_shared_memory(optin_kib, monkeypatch):
    """The H200's tiles on a GPU with less shared memory (launch.matmul fits them): as many chunks
    as fit, never more than the tile's own, never under the two a kernel needs; a fitted tile that
    fits in 48 KiB is built with static shared memory."""
    monkeypatch.setattr(sharedmem, "optin_bytes", lambda: optin_kib * 1024)
    for name, tile in (("tf_unembedding_back_din", M.Tile(2, 2, 8, 16, 64, 10)), ("tf_fc", M.Tile(2, 2, 8, 16, 64, 3))):
        got = M.fitted(tile, name)
        assert got._replace(ST=tile.ST) == tile
        stage = M.stage_bytes(tile, name)
        assert 2 <= got.ST <= tile.ST
        assert got.ST == 2 or got.ST * stage <= optin_kib * 1024  # fits
        assert got.ST == tile.ST or (got.ST + 1) * stage > optin_kib * 1024  # and no more would
        assert (M.dynamic_bytes(got, name) > 0) == (got.ST * stage > M.SHARED_BYTES)
