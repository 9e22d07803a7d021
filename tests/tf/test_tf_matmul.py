"""matmul.py's kernels against tf.c's loops written out in Python, element by element, in the C's
order and with the same roundings (fp.mad / fp.mul, which in the simulator are exact float32
emulations). Shapes are odd so every tile edge is crossed; rows start past 0 as in generation.
Simulator only: on a GPU the same kernels are checked, at full size, by the tf.c oracle fixtures."""
import numpy as np
import pytest
from numba import config, cuda

from tf_numba import launch
from tf_numba import matmul as M
from tf_numba.fp import mad, mul

pytestmark = pytest.mark.skipif(not config.ENABLE_CUDASIM, reason="the C loops in Python are simulator-sized")

ROWS, FIRST, END = 6, 1, 5  # out has ROWS rows; the kernel computes rows FIRST..END-1
COLS, S = 7, 5
SMALL = M.Tile(1, 2, 2, 2, 4)  # several blocks and staging rounds, each with a ragged edge


def reference(kind, a, b, start, out, scale, fused):
    """The C loop nest for one kind: each output's sum alone, s ascending, from its start value."""
    k = M.KINDS[kind]
    want = out.copy()
    for i in range(FIRST, END):
        for j in range(COLS):
            acc = out[i, j] if k.start_out else start[j]
            for s in range(S):
                x = a[s, i] if k.a_trans else a[i, s]
                y = b[j, s] if k.b_by_output else b[s, j]
                acc = mad(fused, mul(x, y), scale, acc) if k.scaled_product else mad(fused, x, y, acc)
            want[i, j] = mul(acc, scale) if k.scaled_result else acc
    return want


@pytest.mark.parametrize("small_tile", [False, True], ids=["tile_for", "small_tile"])
@pytest.mark.parametrize("fused", [True, False], ids=["fma", "nofma"])
@pytest.mark.parametrize("kind", list(M.KINDS))
def test_kernel_matches_the_c_loop(kind, fused, small_tile, monkeypatch):
    k = M.KINDS[kind]
    rng = np.random.default_rng(len(kind))
    a = rng.standard_normal((S, ROWS) if k.a_trans else (ROWS, S + 2), dtype=np.float32)  # wider than S
    b = rng.standard_normal((COLS, S) if k.b_by_output else (S, COLS), dtype=np.float32)
    start = rng.standard_normal(COLS, dtype=np.float32)
    out = rng.standard_normal((ROWS, COLS), dtype=np.float32)
    scale = np.float32(1 / 3)
    if small_tile:
        monkeypatch.setattr(M, "tile_for", lambda name, n_rows, n_cols, sum_len, fused: SMALL)
    d_out = cuda.to_device(out)
    launch.matmul(kind, cuda.to_device(a), cuda.to_device(b), cuda.to_device(start), d_out,
                  cuda.to_device(np.array([FIRST, END], dtype=np.int64)), END - FIRST, fused, S=S, scale=scale)
    got = d_out.copy_to_host()
    want = reference(kind, a, b, start, out, scale, fused)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), kind  # rows outside FIRST..END untouched too
