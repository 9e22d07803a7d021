"""The unembedding softmax alone: tf_unembedding_softmax (the ordered sum, scanned by the block)
against tf_unembedding_softmax_chain (tf.c's chain of adds), on T rows of GPT-2's 50,257 logits,
each kernel timed as a CUDA graph of 20 launches (tf_matmul_sweep.time_kernel). The softmax runs
in place, so the later launches take rows of probabilities: the same work (every pass, every exp,
every add). Also the kernels' bits against each other on the first launch.

With a geometry THREADS/PER/GROUPS/HEAD (ordered.py's constants: the block's threads, the terms a
thread packs a round, the scan's groups, the terms one thread adds first) both kernels are built
with it, before anything compiles, and limited to the registers that many threads may hold.

    python3 tools/experiments/softmax_probe.py [T [THREADS/PER/GROUPS/HEAD]]      (a GPU)
"""
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from numba import cuda  # noqa: E402

from tf_matmul_sweep import time_kernel  # noqa: E402
from tf_numba import kernels as K  # noqa: E402
from tf_numba import ordered  # noqa: E402


def geometry(text):
    """ordered.py's and kernels.py's softmax constants set to THREADS/PER/GROUPS/HEAD; the two
    kernels rebuilt with as many registers as a block of THREADS may hold."""
    threads, per, groups, head = map(int, text.split("/"))
    ordered.THREADS, ordered.PER, ordered.GROUPS, ordered.HEAD = threads, per, groups, head
    ordered.GROUP, ordered.WINDOW = ordered.layout(threads, per, groups)
    K.SOFTMAX_THREADS, K.SOFTMAX_GROUPS, K.SOFTMAX_CHUNK = threads, groups, ordered.WINDOW
    options = K.softmax_options(threads)
    return [cuda.jit(**options)(k.py_func) for k in (K.tf_unembedding_softmax, K.tf_unembedding_softmax_chain)]


def main():
    T = int(sys.argv[1]) if len(sys.argv) > 1 else 64
    kernels = geometry(sys.argv[2]) if len(sys.argv) > 2 else (K.tf_unembedding_softmax, K.tf_unembedding_softmax_chain)
    print(f"geometry {ordered.THREADS}/{ordered.PER}/{ordered.GROUPS}/{ordered.HEAD}")
    logits = np.random.default_rng(0).standard_normal((T, 50257), dtype=np.float32)
    rows = cuda.to_device(np.array([0, T], np.int64))
    first = {}
    for kernel in kernels:
        out = cuda.to_device(logits)
        kernel[T, ordered.THREADS](out, rows)
        first[kernel.__name__] = out.copy_to_host()
        us = time_kernel(kernel, T, ordered.THREADS, (out, rows))
        print(f"{kernel.__name__:32} {us:8.1f} us a launch ({T} rows)", flush=True)
    a, b = first.values()
    print("same bits:", np.array_equal(a.view(np.uint32), b.view(np.uint32)))


if __name__ == "__main__":
    main()
