"""Warp shuffles with one source for the GPU and the CUDA simulator.

Numba's simulator has no `shfl_up_sync` or `shfl_sync`. Its stand-ins here exchange values
through a block-wide scratch array at a `cuda.syncthreads()`, so they hold only where every
thread of a one-dimensional block makes the same calls in the same order (a scan that the whole
block runs, not one inside a branch). A simulated warp is WARP = 4 threads of the block, lane
t % WARP, so that the few threads a simulated block has make several warps and a scan's level
across warps runs; lanes past the block's end do not exist (a shuffle from one returns the
caller's own value).

On the GPU these are the full-warp intrinsics: every lane of every warp must call them.
"""
import threading

import numpy as np
from numba import config, cuda

from . import simulator

simulator.install()  # the stand-ins' scratch is a static shared array: one per block only so

FULL = 0xFFFFFFFF  # every lane of a warp

if config.ENABLE_CUDASIM:
    WARP = 4
    SIM_THREADS = 1024  # the scratch's size: the most threads a block may have
    _turn = threading.local()  # each simulated thread's count of exchanges (its own Python thread)

    # device functions, so that the simulator hands them its own `cuda` (threadIdx, shared arrays)
    @cuda.jit(device=True)
    def _exchange(value):
        """Every thread's value, once all have written theirs. Exchanges alternate between two
        scratch rows, so one barrier each is enough: a thread writes a row again only after the
        barrier of the exchange between, which every thread reaches after its reads of this one."""
        box = cuda.shared.array((2, SIM_THREADS), np.float64)  # exact for int32, uint32, float32
        p = getattr(_turn, "parity", 0)
        _turn.parity = 1 - p
        box[p, cuda.threadIdx.x] = value
        cuda.syncthreads()
        return box[p]

    @cuda.jit(device=True)
    def shfl_up(value, delta):
        """value from the lane `delta` below this one; lanes below `delta` keep their own."""
        t = cuda.threadIdx.x
        box = _exchange(value)
        return type(value)(box[t - delta]) if t % WARP >= delta else value

    @cuda.jit(device=True)
    def shfl_idx(value, lane):
        """value from lane `lane` of this warp (the caller's own where that lane does not exist)."""
        t = cuda.threadIdx.x
        box = _exchange(value)
        src = t - t % WARP + lane
        return type(value)(box[src]) if src < cuda.blockDim.x else value

else:
    WARP = 32

    @cuda.jit(device=True)
    def shfl_up(value, delta):
        """As the simulator's."""
        return cuda.shfl_up_sync(FULL, value, delta)

    @cuda.jit(device=True)
    def shfl_idx(value, lane):
        """As the simulator's."""
        return cuda.shfl_sync(FULL, value, lane)
