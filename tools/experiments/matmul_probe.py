"""Launches tf_numba's tiled matrix kernel once per tile at one shape between cudaProfilerStart
and cudaProfilerStop, so that ncu can say where its time goes (stall reasons, occupancy, memory):

    ncu --profile-from-start off --section SpeedOfLight --section Occupancy --section WarpStateStats \\
        --section MemoryWorkloadAnalysis python3 tools/experiments/matmul_probe.py tf_fc 64 768 3072 t_wide 2x2/8x12/64/6/q

Arguments: kind, rows, columns, sum length, then tile labels of tools/tf_matmul_sweep.py.
"""
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from numba import cuda  # noqa: E402

from tf_matmul_sweep import CANDIDATES  # noqa: E402

from cudakit.sharedmem import opt_in  # noqa: E402
from tf_numba import matmul as M  # noqa: E402


def main(kind, rows, cols, S, *labels):
    rows, cols, S = int(rows), int(cols), int(S)
    rng = np.random.default_rng(0)
    a_trans, b_by_output = M.KINDS[kind].a_trans, M.KINDS[kind].b_by_output
    a = cuda.to_device(rng.standard_normal((S, rows) if a_trans else (rows, S), dtype=np.float32))
    b = cuda.to_device(rng.standard_normal((cols, S) if b_by_output else (S, cols), dtype=np.float32))
    start = cuda.to_device(rng.standard_normal(cols, dtype=np.float32))
    out = cuda.to_device(rng.standard_normal((rows, cols), dtype=np.float32))
    row_range = cuda.to_device(np.array([0, rows], dtype=np.int64))
    for label in labels:
        tile = CANDIDATES[label]
        grid = (-(-cols // (tile.TN * tile.CT)), -(-rows // (tile.TM * tile.RT)))
        kernel = M.tiled(kind, tile, True, a, b)
        args = (a, b, start, out, row_range, S, np.float32(0.5), out, out)
        nbytes = M.dynamic_bytes(tile, kind)
        opt_in(kernel, args, nbytes)
        kernel[grid, (tile.CT, tile.RT), 0, nbytes](*args)
        cuda.synchronize()
        cuda.profile_start()
        kernel[grid, (tile.CT, tile.RT), 0, nbytes](*args)
        cuda.synchronize()
        cuda.profile_stop()
        print(f"matmul_probe: {kind} {rows}x{cols}x{S} {label} {tile}", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
