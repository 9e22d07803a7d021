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

    python3 tools/experiments/ln_runs_probe.py ASSETS_DIR fma|nofma THREADSxRUNS[p] ...

A trailing p pipelines the chains (pipelined_chains: two register sets of RUNS steps, one set's
loads issued before the other's adds).

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


def pipelined_chains(R):
    """(staged_sum, staged_squared_differences) as kernels.py's, with two register sets of R steps:
    the loads of one set are issued before the other's adds, so that a set's loads fly while the
    set before is added (kernels.py's runs leave that order to the compiler)."""
    RU, TWO = np.uint64(R), np.uint64(2)

    @cuda.jit(device=True)
    def fill(v, x, at):
        for u in range(R):
            v[u] = x[at + np.uint64(u)]

    def chain(term):
        """total + term(x[x0 + k]) for k < n ascending: the chain over staged values, each step
        `term(total, value, m, fused)`."""
        @cuda.jit(device=True)
        def add(total, v, m, fused):
            for u in range(R):
                total = term(total, v[u], m, fused)
            return total

        @cuda.jit(device=True)
        def run(total, x, x0, n, m, fused):
            a = cuda.local.array(R, np.float32)
            b = cuda.local.array(R, np.float32)
            n = np.uint64(n)
            runs, r = n // RU, np.uint64(0)
            if runs > r:
                fill(a, x, x0)
            while r + TWO <= runs:
                fill(b, x, x0 + (r + K.U1) * RU)
                total = add(total, a, m, fused)
                if r + TWO < runs:
                    fill(a, x, x0 + (r + TWO) * RU)
                total = add(total, b, m, fused)
                r += TWO
            if r < runs:
                total = add(total, a, m, fused)
                r += K.U1
            k = r * RU
            while k < n:
                total = term(total, x[x0 + k], m, fused)
                k += K.U1
            return total

        return run

    @cuda.jit(device=True)
    def plus(total, value, m, fused):
        return total + value

    @cuda.jit(device=True)
    def plus_square(total, value, m, fused):
        d = value - m  # tf.c's diff, rounded on its own
        return K.mad(fused, d, d, total)

    sums, squares = chain(plus), chain(plus_square)

    @cuda.jit(device=True)
    def staged_sum(total, x, x0, n):
        return sums(total, x, x0, n, np.float32(0), False)

    @cuda.jit(device=True)
    def staged_squared_differences(total, x, m, n, fused):
        return squares(total, x, np.uint64(0), n, m, fused)

    return {"staged_sum": staged_sum, "staged_squared_differences": staged_squared_differences}


def tf_ln_variant(threads, runs, pipelined=False):
    """main's tf_ln with LN_THREADS = threads, its chains (staged_sum, staged_squared_differences)
    in runs of `runs` steps, or, `pipelined`, pipelined_chains(runs)."""
    if pipelined:
        chains = pipelined_chains(runs)
    else:
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

    variants = [(spec, *(int(x) for x in spec.rstrip("p").split("x")), spec.endswith("p")) for spec in argv[2:]]
    runs = [(spec, using(tf_ln_variant(t, r, p), t)) for spec, t, r, p in variants]
    timed_runs(assets_dir, fp_model, [("main", using(*main_ln))] + runs + [("main", using(*main_ln))])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
