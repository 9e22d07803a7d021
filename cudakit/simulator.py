"""A fix for Numba's CUDA simulator, installed when cudakit.devmath is imported with the simulator on.

The simulator runs each thread of a block as a Python thread. `cuda.shared.array(shape, dtype)`
finds a block's static shared array by the file and line that declare it, and creates it on the
first call, with no lock between the lookup and the store (numba-cuda 0.30.4, FakeCUDAShared.array).
Two threads that miss together each create an array; the later store wins, and the thread left
holding the other array works alone on memory no other thread sees. It happens only when the
interpreter switches threads inside that window: CI once saw it as garbage offset tables in one
thread of microgpt's fast engine (a sqrt of a negative Adam moment). Here the lookup and the store
happen under one lock. Dynamic shared memory (shape 0) is one buffer per block and needs no fix.
"""
import sys
import threading

from numba import config

_lock = threading.Lock()


def install():
    """Makes the simulator's static shared arrays one per block and declaration, whatever the
    thread schedule. Does nothing on a GPU, or when done already."""
    if not config.ENABLE_CUDASIM:
        return
    import numpy as np
    from numba.cuda import types
    from numba.cuda.np import numpy_support
    from numba.cuda.simulator.kernelapi import FakeCUDAShared

    unlocked = FakeCUDAShared.array
    if hasattr(unlocked, "unlocked"):
        return

    def array(self, shape, dtype, alignment=None):
        if shape == 0 or alignment is not None or not hasattr(self, "_allocations"):
            return unlocked(self, shape, dtype, alignment)
        frame = sys._getframe(1)
        caller = (frame.f_code.co_filename, frame.f_lineno)  # the key the simulator's own lookup uses
        with _lock:
            found = self._allocations.get(caller)
            if found is None:
                if isinstance(dtype, types.Type):
                    dtype = numpy_support.as_dtype(dtype)
                found = self._allocations[caller] = np.empty(shape, dtype)
        return found

    array.unlocked = unlocked  # the simulator's own, which tests/test_cudakit.py shows racing
    FakeCUDAShared.array = array
