"""A recorded forward and training step with tf_ln rebuilt at another block size and another run
length of its two chains, beside tf_ln as on main (before and after, to show drift), each checked as
bench.py checks it (bench_tf.time_tf: validation 39/39 against the oracle fixture, the checkpoint
sums after the replays, the replayed arenas against an eager step).

tf_ln's thread 0 adds the mean's chain and the squared differences' chain from the staged row in
runs of kernels.STAGED_UNROLL steps (32), whose loads the GPU compiler issues ahead of the adds.
chain_probe.py times one chain alone, warm, repeated 2,000 times in a launch; this times the 25 layer
norms where they run, once each in a recorded pass. The variant's chains are this file's copies of
kernels.staged_sum and staged_squared_differences with another run length; its tf_ln is main's
code compiled against them and the variant's LN_THREADS (main's other kernels keep theirs).

    python3 tools/experiments/ln_runs_probe.py ASSETS_DIR fma|nofma THREADSxRUNS ...

For example `1024x8 1024x16 1024x64 256x64 256x128`. On the H200 on 2026-12-03 every one of those
made the recorded forward slower than main's 1024 x 32 (docs/results/2026-12-03-h200-probes; the
figures came from this probe's first form, one variant a process, with the same tf_ln build).
Prints one line per run: main, each variant, main again.
"""
import json
import sys
import types
from pathlib import Path

import numpy as np
from numba import cuda

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench_tf import time_tf  # noqa: E402
from cudakit.devmath import mad  # noqa: E402
from tf_numba import assets  # noqa: E402
from tf_numba import kernels as K  # noqa: E402
from tf_numba.model import TFModel  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
KEYS = ("validate_checkpoints_match", "after_graph_replays_match", "graph_arenas_equal_eager", "forward_ms",
        "forward_logits_ms", "forward_backward_ms", "error")


def chains(runs):
    """kernels.staged_sum and staged_squared_differences with runs of `runs` steps."""
    R, ONE = np.uint64(runs), np.uint64(1)

    @cuda.jit(device=True)
    def staged_sum(total, x, x0, n):
        k = np.uint64(0)
        n = np.uint64(n)
        while k + R <= n:
            for u in range(runs):
                total += x[x0 + k + np.uint64(u)]
            k += R
        while k < n:
            total += x[x0 + k]
            k += ONE
        return total

    @cuda.jit(device=True)
    def staged_squared_differences(total, x, m, n, fused):
        k = np.uint64(0)
        n = np.uint64(n)
        while k + R <= n:
            for u in range(runs):
                d = x[k + np.uint64(u)] - m
                total = mad(fused, d, d, total)
            k += R
        while k < n:
            d = x[k] - m
            total = mad(fused, d, d, total)
            k += ONE
        return total

    return staged_sum, staged_squared_differences


def tf_ln_variant(threads, runs):
    """main's tf_ln compiled against the variant's chains and LN_THREADS."""
    staged_sum, staged_squared_differences = chains(runs)
    names = dict(vars(K), staged_sum=staged_sum, staged_squared_differences=staged_squared_differences,
                 LN_THREADS=threads, LN_PER_THREAD=-(-K.LN_D_MAX // threads))
    return cuda.jit(types.FunctionType(K.tf_ln.py_func.__code__, names, "tf_ln"))


def main(argv):
    assets_dir, fp_model = Path(argv[0]), argv[1]
    variants = [tuple(int(x) for x in spec.split("x")) for spec in argv[2:]]
    cfg, tensors = assets.load_model(assets_dir / "model.safetensors")
    data = assets.load_data(assets_dir / "data", cfg.d_vocab)
    fixture = ROOT / "tests" / "fixtures" / f"tf_oracle_gpt2_{fp_model}.json"
    main_ln = (K.tf_ln, K.LN_THREADS)
    runs = [("main", main_ln)] + [(f"{t}x{r}", (tf_ln_variant(t, r), t)) for t, r in variants] + [("main", main_ln)]
    for label, (kernel, threads) in runs:
        K.tf_ln, K.LN_THREADS = kernel, threads  # launch.ln launches K.tf_ln with K.LN_THREADS
        m = TFModel(cfg, tensors, fp_model)
        r = time_tf(m, data, fixture)
        print(label, json.dumps({k: r.get(k) for k in KEYS}), flush=True)
        del m
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
