"""The unembedding softmax alone: tf_unembedding_softmax (the ordered sum, scanned by the block)
against tf_unembedding_softmax_chain (tf.c's chain of adds), on T rows of GPT-2's 50,257 logits,
each kernel timed as a CUDA graph of 20 launches (tf_matmul_sweep.time_kernel). The softmax runs
in place, so the later launches take rows of probabilities: the same work (every pass, every exp,
every add). Also the kernels' bits against each other on the first launch.

    python3 tools/experiments/softmax_probe.py [T]      (a GPU)
"""
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from numba import cuda  # noqa: E402

from tf_matmul_sweep import time_kernel  # noqa: E402
from tf_numba import kernels as K  # noqa: E402


def main():
    T = int(sys.argv[1]) if len(sys.argv) > 1 else 64
    logits = np.random.default_rng(0).standard_normal((T, 50257), dtype=np.float32)
    rows = cuda.to_device(np.array([0, T], np.int64))
    first = {}
    for kernel in (K.tf_unembedding_softmax, K.tf_unembedding_softmax_chain):
        out = cuda.to_device(logits)
        kernel[T, K.SOFTMAX_THREADS](out, rows)
        first[kernel.__name__] = out.copy_to_host()
        us = time_kernel(kernel, T, K.SOFTMAX_THREADS, (out, rows))
        print(f"{kernel.__name__:32} {us:8.1f} us a launch ({T} rows)", flush=True)
    a, b = first.values()
    print("same bits:", np.array_equal(a.view(np.uint32), b.view(np.uint32)))


if __name__ == "__main__":
    main()
