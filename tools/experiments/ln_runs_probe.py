"""A recorded forward and training step with tf_ln rebuilt at another block size and another run
length of its two chains, beside tf_ln as on main (before and after, to show drift), each checked as
bench.py checks it (tile_variants.timed_runs: bench_tf.time_tf, validation 39/39 against the oracle
fixture, the checkpoint sums after the replays, the replayed arenas against an eager step).

tf_ln's thread 0 adds the mean's chain and the squared differences' chain from the staged row in
runs of kernels.STAGED_UNROLL steps (32), whose loads the GPU compiler issues ahead of the adds.
chain_probe.py times one chain alone, warm, repeated 2,000 times in a launch; this times the 25 layer
norms where they run, once each in a recorded pass. A variant is main's code throughout: tf_ln,
staged_sum and staged_squared_differences compiled again with the variant's LN_THREADS and
STAGED_UNROLL (main's other kernels keep theirs).

    python3 tools/experiments/ln_runs_probe.py ASSETS_DIR fma|nofma THREADSxRUNS ...

For example `1024x8 1024x16 1024x64 256x64 256x128`. On the H200 on 2026-12-03 every one of those
made the recorded forward slower than main's 1024 x 32 (docs/results/2026-12-03-h200-probes; the
figures came from this probe's first form, one variant a process, whose chains were copies of
main's with another run length). Prints one line per run: main, each variant, main again.
"""
import sys
import types
from pathlib import Path

import numpy as np
from numba import cuda

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tf_numba import kernels as K  # noqa: E402
from tile_variants import timed_runs  # noqa: E402


def rebuilt(jitted, names, device=False):
    """jitted's Python code compiled again, reading its globals from `names`."""
    f = jitted.py_func
    return cuda.jit(types.FunctionType(f.__code__, names, f.__name__), device=device)


def tf_ln_variant(threads, runs):
    """main's tf_ln with LN_THREADS = threads, its chains (staged_sum, staged_squared_differences)
    in runs of `runs` steps."""
    names = dict(vars(K), STAGED_UNROLL=np.uint64(runs))
    chains = {f: rebuilt(getattr(K, f), names, device=True) for f in ("staged_sum", "staged_squared_differences")}
    return rebuilt(K.tf_ln, dict(vars(K), **chains, LN_THREADS=threads, LN_PER_THREAD=-(-K.LN_D_MAX // threads)))


def main(argv):
    assets_dir, fp_model = Path(argv[0]), argv[1]
    main_ln = (K.tf_ln, K.LN_THREADS)

    def using(kernel, threads):
        def setup():
            K.tf_ln, K.LN_THREADS = kernel, threads  # launch.ln launches K.tf_ln with K.LN_THREADS
        return setup

    variants = [tuple(int(x) for x in spec.split("x")) for spec in argv[2:]]
    runs = [(f"{t}x{r}", using(tf_ln_variant(t, r), t)) for t, r in variants]
    timed_runs(assets_dir, fp_model, [("main", using(*main_ln))] + runs + [("main", using(*main_ln))])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
