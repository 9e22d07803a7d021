"""The unembedding softmax alone: launch.unembedding_softmax (the max, exps and their ordered sum,
scanned, a block a row, then the scaling over slices of each row) against
tf_unembedding_softmax_chain (tf.c's chain of adds, a block a row), on T rows of GPT-2's 50,257
logits, each timed as a CUDA graph replayed (bench_tf.timed_replays). The softmax runs in place,
so the later replays take rows of probabilities: the same work (every pass, every exp, every
add). Also the two's bits against each other on the first run.

With a geometry THREADS/PER/HEAD (ordered.py's constants: the block's threads, the terms a
thread packs a round, the terms one thread adds first) the ordered sum's
kernel and the chain are built with it, before anything compiles, and limited to the registers
that many threads may hold.

    python3 tools/experiments/softmax_probe.py [T [THREADS/PER/HEAD]]      (a GPU)
"""
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from numba import cuda  # noqa: E402

from bench_tf import timed_replays  # noqa: E402

from cudakit.stream import Recorded  # noqa: E402
from tf_numba import kernels as K  # noqa: E402
from tf_numba import launch, ordered  # noqa: E402


def geometry(text):
    """ordered.py's and kernels.py's softmax constants set to THREADS/PER/HEAD; the ordered
    sum's kernel and the chain rebuilt with as many registers as a block of THREADS may hold."""
    threads, per, head = map(int, text.split("/"))
    ordered.THREADS, ordered.PER, ordered.HEAD = threads, per, head
    ordered.WARPS, ordered.WINDOW = -(-threads // ordered.WARP), threads * per
    K.SOFTMAX_THREADS, K.SOFTMAX_WARPS, K.SOFTMAX_CHUNK = threads, ordered.WARPS, ordered.WINDOW
    K.SOFTMAX_SLOTS, K.SOFTMAX_SLOT_STEP = ordered.slots(K.SOFTMAX_CHUNK), ordered.slots(threads)
    assert K.SOFTMAX_CHUNK <= threads * K.SOFTMAX_LOADS, "a chunk of exps is one load a thread's SOFTMAX_LOADS"
    options = K.softmax_options(threads)
    for name in ("tf_unembedding_softmax", "tf_unembedding_softmax_chain"):
        setattr(K, name, cuda.jit(**options)(getattr(K, name).py_func))


def main():
    T = int(sys.argv[1]) if len(sys.argv) > 1 else 64
    if len(sys.argv) > 2:
        geometry(sys.argv[2])
    print(f"geometry {ordered.THREADS}/{ordered.PER}/{ordered.HEAD}, "
          f"{launch.softmax_parts(T)} slices a row")
    logits = np.random.default_rng(0).standard_normal((T, 50257), dtype=np.float32)
    rows = cuda.to_device(np.array([0, T], np.int64))
    # the unembedding's "max" epilogue, as forward.py launches it: each row's maxima of 64 columns
    blocks = -(-logits.shape[1] // 64)
    tops = np.stack([logits[:, q * 64:(q + 1) * 64].max(axis=1) for q in range(blocks)], axis=1)
    scratch = cuda.to_device(np.ascontiguousarray(tops)), blocks, cuda.device_array(T, np.float32)
    passes = {
        "launch.unembedding_softmax": lambda out: launch.unembedding_softmax(out, rows, T, *scratch),
        "tf_unembedding_softmax_chain": lambda out: launch.blocks(K.tf_unembedding_softmax_chain, T,
                                                                  K.SOFTMAX_THREADS, 0, out, rows),
    }
    first = {}
    for label, run in passes.items():
        out = cuda.to_device(logits)
        run(out)
        first[label] = out.copy_to_host()
        us = timed_replays(Recorded(lambda: run(out)), 20) * 1e6
        print(f"{label:32} {us:8.1f} us a run ({T} rows)", flush=True)
    a, b = first.values()
    print("same bits:", np.array_equal(a.view(np.uint32), b.view(np.uint32)))


if __name__ == "__main__":
    main()
