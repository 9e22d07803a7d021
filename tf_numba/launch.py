"""Kernel launches: their sizes, and where they go (the default stream, or a CUDA graph being
recorded, see graph.py, where work that nothing waits for soon can run on a branch beside the
rest)."""
import contextlib
import functools

from numba import config, cuda

from . import kernels as K
from . import matmul as M

BLOCK = 128
RESIDENT_BLOCKS = 2048 // BLOCK  # blocks of BLOCK threads a multiprocessor holds at once
# Some of tf.c's stages are small by nature (one row, one block); Numba's low-occupancy
# warning on each of them would drown the output.
config.CUDA_LOW_OCCUPANCY_WARNINGS = False


class Target:
    """The stream launches go to: 0 (the default stream) or a cuda.core GraphBuilder; while a
    pass is recorded, `branches` holds the builders of work recorded beside it, by name, until
    they are joined."""

    stream = 0
    branches = {}


def recording():
    return not isinstance(Target.stream, int)


@contextlib.contextmanager
def beside(name):
    """Launches inside the block start after everything queued before it and run beside what is
    queued after it, until join(name). Eager launches (validation, the simulator) stay on one
    stream in program order. The caller joins a branch before anything overwrites what it reads."""
    if not recording():
        yield
        return
    join(name)
    main, branch = Target.stream.split(2)
    Target.stream = branch
    try:
        yield
    finally:
        Target.stream = main
        Target.branches[name] = branch


def join(name):
    """Later launches wait for the branch `name`, if one is open."""
    branch = Target.branches.pop(name, None)
    if branch is not None:
        Target.stream = type(branch).join(Target.stream, branch)


def join_all():
    for name in list(Target.branches):
        join(name)


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


def ln(*args):
    """tf_ln over T samples: args as the kernel's."""
    T = args[6]
    blocks(K.tf_ln, T, K.LN_THREADS, 0, *args)


def ln_back(*args):
    """tf_ln_back over T samples (and the parameter gradients): args as the kernel's."""
    inp, T = args[1], args[8]
    D = inp.shape[1]
    blocks(K.tf_ln_back, T + -(-D // K.LN_BACK_THREADS), K.LN_BACK_THREADS, 0, *args)


def matmul(name, a, b, start, out, rows, n_rows, fused, S=None, scale=None):
    """The matmul.py kernel `name` over n_rows rows from rows[0] (rows: a device array [first,
    end)); S, the sum's length, is a's row length unless given."""
    S = a.shape[1] if S is None else S
    tile = M.tile_for(name, n_rows, out.shape[1], S, fused)
    grid = (-(-out.shape[1] // (tile.TN * tile.CT)), -(-n_rows // (tile.TM * tile.RT)))
    scale = K.ONE if scale is None else scale
    M.build(name, tile, fused)[grid, (tile.CT, tile.RT), Target.stream](a, b, start, out, rows, S, scale)
