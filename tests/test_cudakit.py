"""cudakit, the plumbing both ports share: the simulator's float32 fused multiply-add is exact (one
rounding of a*b + c, ties included, against exact rational arithmetic rounded to nearest-even);
mad's two profiles; vector_load's neighbours; copy_async's copies and zeros; copy_at's copies between addresses taken once; the byte range of a device view; a failed recording leaves no stream capturing; quiet() keeps
Numba's advice off the terminal."""
import os
import subprocess
import sys
import textwrap
import threading
import time
from fractions import Fraction

import numpy as np
import pytest
from numba import config, cuda

from cudakit import devmath as fp
from cudakit.asynccopy import UNIT, commit, copy_async, copy_at, global_address, shared_address, wait
from cudakit.vector import SHARED_ALIGN, vector_load
from tests.conftest import PYTHONPATH, ROOT

simulator_only = pytest.mark.skipif(not config.ENABLE_CUDASIM,
                                    reason="host-callable only in the simulator; the GPU has fma.rn")


def rounded(a, b, c):
    x = Fraction(float(a)) * Fraction(float(b)) + Fraction(float(c))
    f = np.float32(float(x))  # within one float32 ulp of the answer
    candidates = [f, np.nextafter(f, np.float32(np.inf)), np.nextafter(f, np.float32(-np.inf))]
    return min(candidates, key=lambda y: (abs(Fraction(float(y)) - x), int(np.array(y).view(np.uint32)) & 1))


def cases(n):
    rng = np.random.default_rng(7)
    for i in range(n):
        a, b = rng.standard_normal(2).astype(np.float32)
        kind = i % 4
        if kind == 0:
            c = np.float32(rng.standard_normal())
        elif kind == 1:  # cancellation: c close to -a*b
            c = np.float32(-(float(a) * float(b)) + float(np.float32(rng.standard_normal() * 1e-7)))
        elif kind == 2:  # a*b exactly halfway between floats, nudged by a tiny c: the tie cases
            a = np.float32(1 + 2.0**-23)
            b = np.float32(1 + 2.0**-23 * int(rng.integers(1, 4)))
            c = np.float32(float(rng.choice([-1.0, 1.0])) * 2.0 ** -int(rng.integers(20, 50)))
        else:  # subnormal results
            a, b = np.float32(rng.standard_normal() * 1e-20), np.float32(rng.standard_normal() * 1e-20)
            c = np.float32(rng.standard_normal() * 1e-39)
        yield a, b, c


@simulator_only
def test_simulator_fma_is_correctly_rounded():
    bad = [(a, b, c) for a, b, c in cases(4000) if fp.fma(a, b, c) != rounded(a, b, c)]
    assert not bad


@simulator_only
def test_mad_profiles():
    a, b, c = np.float32(1 + 2.0**-23), np.float32(1 - 2.0**-23), np.float32(-1.0)
    assert fp.mad(True, a, b, c) == np.float32(-(2.0**-46))  # one rounding keeps the tail
    assert fp.mad(False, a, b, c) == np.float32(0.0)  # the product rounds to 1 first


@simulator_only
def test_simulator_shared_array_is_one_per_block(monkeypatch):
    """Every thread of a block gets the one static shared array even when the interpreter switches
    threads while the first ones declare it (forced: np.empty sleeps). With two threads held inside
    the simulator's own, unlocked lookup at once (the first to create the array waits for a second),
    some threads get arrays of their own, so the check can fail. A sleep alone did not always
    bring a second thread in under a loaded CI run."""
    from numba.cuda.simulator.kernelapi import FakeCUDAShared

    @cuda.jit
    def neighbour(out):
        s = cuda.shared.array(64, np.int32)
        s[cuda.threadIdx.x] = cuda.threadIdx.x
        cuda.syncthreads()
        out[cuda.threadIdx.x] = s[(cuda.threadIdx.x + 1) % 64]

    def wrong_reads():
        out = np.zeros(64, np.int32)
        neighbour[1, 64](out)
        return int((out != (np.arange(64) + 1) % 64).sum())

    empty = np.empty

    def slow_empty(*args, **kwargs):
        time.sleep(0.005)
        return empty(*args, **kwargs)

    monkeypatch.setattr(np, "empty", slow_empty)
    assert wrong_reads() == 0

    second, calls, count = threading.Event(), [0], threading.Lock()

    def racing_empty(shape, *args, **kwargs):
        """The block's array (64 int32): the first thread to create it waits, at most 5 s, until a
        second comes in to create its own; filled with -1, which no thread writes."""
        if shape != 64:
            return empty(shape, *args, **kwargs)
        with count:
            calls[0] += 1
            first = calls[0] == 1
        if first:
            second.wait(5)
        else:
            second.set()
        a = empty(shape, *args, **kwargs)
        a.fill(-1)
        return a

    monkeypatch.setattr(np, "empty", racing_empty)
    monkeypatch.setattr(FakeCUDAShared, "array", FakeCUDAShared.array.unlocked)
    assert wrong_reads() > 0


VL_SIZE = 64
LOAD2, LOAD4, LOAD4_STRIDED = vector_load(2, 1), vector_load(4, 1), vector_load(4, 3)


@cuda.jit
def vector_load_probe(src, out):
    """Each thread stages src, then reads 4 floats at 4 * t as one vector into out[t, 0:4], 2 at
    2 * t into out[t, 4:6], and 4 at 4 * t again into out[t, 6], out[t, 9], out[t, 12], out[t, 15]."""
    t = cuda.threadIdx.x
    sh = cuda.shared.array(VL_SIZE, np.float32, alignment=SHARED_ALIGN)
    for q in range(t, VL_SIZE, cuda.blockDim.x):
        sh[q] = src[q]
    cuda.syncthreads()
    regs = cuda.local.array(16, np.float32)
    for k in range(16):
        regs[k] = np.float32(-1.0)
    LOAD4(regs, np.uint64(0), sh, np.uint64(4 * t))
    LOAD2(regs, np.uint64(4), sh, np.uint64(2 * t))
    LOAD4_STRIDED(regs, np.uint64(6), sh, np.uint64(4 * t))
    for k in range(16):
        out[t, k] = regs[k]


def test_vector_load_reads_neighbours_into_registers():
    """The neighbours land where the stride says, and nothing else is written (GPU: one aligned
    vector load each; simulator: the same in Python)."""
    src = np.arange(VL_SIZE, dtype=np.float32) * np.float32(0.5)
    threads = VL_SIZE // 4
    out = cuda.device_array((threads, 16), np.float32)
    vector_load_probe[1, threads](cuda.to_device(src), out)
    got = out.copy_to_host()
    for t in range(threads):
        want = np.full(16, -1.0, np.float32)
        want[0:4] = src[4 * t:4 * t + 4]
        want[4:6] = src[2 * t:2 * t + 2]
        want[6:16:3] = src[4 * t:4 * t + 4]
        assert np.array_equal(got[t], want), t


CP_ROWS, CP_COLS = 3, 8  # a 2-D source whose rows are 16-byte copies wide
CP_SHARED = 2 * CP_ROWS * CP_COLS  # a literal: the GPU compiler needs shared array sizes constant
COPY4, COPY1, WAIT_ALL = copy_async(4), copy_async(1), wait(0)


@cuda.jit
def copy_async_probe(src, n4, n1, out):
    """Thread t copies 4 floats of src from flat offset 4 * t (n4[t] of them, zeros after), and 1
    float from flat offset t + 1 (n1[t] of them) into a second buffer, as two groups; then every
    thread waits, and after the barrier reads the other threads' copies out."""
    t = cuda.threadIdx.x
    nt = cuda.blockDim.x
    sh = cuda.shared.array(CP_SHARED, np.float32, alignment=SHARED_ALIGN)
    COPY4(sh, np.uint64(4 * t), src, np.uint64(4 * t), np.uint64(n4[t]))
    commit()
    COPY1(sh, np.uint64(4 * nt + t), src, np.uint64(t + 1), np.uint64(n1[t]))
    commit()
    WAIT_ALL()
    cuda.syncthreads()
    for q in range(t, 5 * nt, nt):
        out[q] = sh[q]


def test_copy_async_lands_after_the_wait_with_zeros_past_n():
    """Each copy moves n floats from the row-major offset and zeros the rest of its width; the
    waiting thread and the barrier make every thread's copies visible (GPU: cp.async of 16 and 4
    bytes; simulator: the same in Python)."""
    src = (np.arange(CP_ROWS * CP_COLS, dtype=np.float32) + np.float32(1.0)).reshape(CP_ROWS, CP_COLS)
    threads = CP_ROWS * CP_COLS // 4
    n4 = np.array([4, 3, 0, 1, 4, 2], dtype=np.int64)[:threads]
    n1 = np.array([1, 0, 1, 1, 0, 1], dtype=np.int64)[:threads]
    out = cuda.to_device(np.full(5 * threads, -1.0, np.float32))
    copy_async_probe[1, threads](cuda.to_device(src), cuda.to_device(n4), cuda.to_device(n1), out)
    got = out.copy_to_host()
    flat = src.reshape(-1)
    want = np.zeros(5 * threads, np.float32)
    for t in range(threads):
        want[4 * t:4 * t + n4[t]] = flat[4 * t:4 * t + n4[t]]
        want[4 * threads + t] = flat[t + 1] if n1[t] else 0.0
    assert np.array_equal(got, want)


AT4, AT1 = copy_at(4), copy_at(1)


@cuda.jit
def copy_at_probe(src, out):
    """Thread t takes the addresses of src's flat element 4 * t and of its staged place once, then
    copies 4 floats from there and 1 float from 4 * t + 3, stepped by UNIT a float, as the tiled
    products copy their chunks."""
    t = cuda.threadIdx.x
    nt = cuda.blockDim.x
    sh = cuda.shared.array(CP_SHARED, np.float32, alignment=SHARED_ALIGN)
    g, d = global_address(src, np.uint64(4 * t)), shared_address(sh, np.uint64(4 * t))
    AT4(sh, d, src, g)
    AT1(sh, d + np.uint64((4 * nt - 3 * t) * UNIT), src, g + np.uint64(3 * UNIT))  # to 4 * nt + t
    commit()
    WAIT_ALL()
    cuda.syncthreads()
    for q in range(t, 5 * nt, nt):
        out[q] = sh[q]


def test_copy_at_copies_between_addresses_taken_once():
    """copy_at moves whole widths between global_address's and shared_address's addresses, a float
    UNIT apart (GPU: cp.async on 32-bit shared and 64-bit global addresses; simulator: indices)."""
    src = (np.arange(CP_ROWS * CP_COLS, dtype=np.float32) + np.float32(1.0)).reshape(CP_ROWS, CP_COLS)
    threads = CP_ROWS * CP_COLS // 4
    out = cuda.to_device(np.full(5 * threads, -1.0, np.float32))
    copy_at_probe[1, threads](cuda.to_device(src), out)
    flat = src.reshape(-1)
    want = np.concatenate([flat[:4 * threads], flat[3:4 * threads:4]])
    assert np.array_equal(out.copy_to_host(), want)


def test_byte_bounds_of_views():
    from numba import cuda

    from cudakit.arrays import address, byte_bounds

    base = cuda.device_array((6, 8), dtype=np.float32)
    lo = address(base)
    assert byte_bounds(base) == (lo, lo + 6 * 8 * 4)
    assert byte_bounds(base[2]) == (lo + 2 * 8 * 4, lo + 3 * 8 * 4)
    assert byte_bounds(base[1:3, 2:5]) == (lo + (8 + 2) * 4, lo + (2 * 8 + 5) * 4)
    assert byte_bounds(base[:, 7]) == (lo + 7 * 4, lo + (5 * 8 + 8) * 4)


def test_failed_recording_leaves_no_capture(monkeypatch):
    """stream.record ends the capture and forgets its branches when the launches raise."""
    from cudakit import stream

    class Builder:
        ended = False

        def begin_building(self):
            pass

        def split(self, count):
            return self, Builder()

        @staticmethod
        def join(a, b):
            return a

        def end_building(self):
            Builder.ended = True
            return self

    class Stream:
        def create_graph_builder(self):
            return Builder()

    def launches():
        with stream.beside("branch"):
            pass
        raise RuntimeError("a launch failed")

    monkeypatch.setattr("numba.cuda.synchronize", lambda: None)
    with pytest.raises(RuntimeError, match="a launch failed"):
        stream.record(Stream(), launches)
    assert Builder.ended and stream.Target.stream == 0 and stream.Target.branches == {}


def test_no_numba_warning_reaches_the_terminal():
    """numba-cuda's low-occupancy warning (a one-block grid) is raised when a launch is configured,
    GPU or not; after cudakit's quiet() neither it nor any other Numba warning class prints."""
    script = textwrap.dedent("""\
        import warnings
        from numba import cuda
        from numba.cuda.core.errors import NumbaPerformanceWarning
        from cudakit.gpu import quiet

        @cuda.jit
        def k(x):
            x[0] = 1

        k[1, 1]
        print("before", flush=True)
        quiet()
        k[1, 1]
        warnings.warn(NumbaPerformanceWarning("host array copied"))
        from numba.core.errors import NumbaWarning
        warnings.warn(NumbaWarning("numba's own"))
        """)
    # the caller's warning filters (PYTHONWARNINGS=ignore hides the first warning too) are not quiet()'s
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_ENABLE_CUDASIM", "PYTHONWARNINGS")}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, cwd=ROOT, timeout=120,
                            env={**env, "PYTHONPATH": PYTHONPATH, "CUDA_VISIBLE_DEVICES": ""})
    assert result.returncode == 0, result.stderr
    err = result.stderr.decode()
    assert err.count("Grid size 1") == 1  # before quiet(), and only then
    assert "host array copied" not in err and "numba's own" not in err
