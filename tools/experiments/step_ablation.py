"""Where a recorded training step's time goes: the step's graph timed as it is, then with one
class of kernels left out (the results are then wrong: only the time counts), and with the next
product's weights read into the L2 on a branch while the current product runs.

    python3 tools/experiments/step_ablation.py ASSETS_DIR [fma|nofma] [T] [all|base|softmax]

(base: the step as it is only; softmax: and with tf.c's chain for the softmax's sum.)

A kernel left out that shortens the step by its own time sits on the critical path; one that
shortens it by less runs beside it (a graph branch) or overlaps. With the branches recorded on
the main chain, the step shows what running them beside it saves, or costs the chain. Prints
one line per variant.
"""
import contextlib
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from numba import cuda  # noqa: E402

from bench_tf import timed_replays  # noqa: E402

from cudakit import stream  # noqa: E402
from cudakit.stream import Recorded, Target  # noqa: E402
from tf_numba import assets, launch, training  # noqa: E402
from tf_numba import kernels as K  # noqa: E402
from tf_numba import matmul as M  # noqa: E402
from tf_numba.forward import forward  # noqa: E402
from tf_numba.model import TFModel  # noqa: E402
from tf_numba.training import run_step, training_step  # noqa: E402

T = int(sys.argv[3]) if len(sys.argv) > 3 else 64
PREFETCH_BLOCKS, PREFETCH_THREADS, PREFETCH_LOADS = 132, 256, 16


@cuda.jit
def l2_prefetch(x, sink):
    """Reads x once through the L2 (ld.global.cg), PREFETCH_LOADS loads in flight a thread."""
    n = x.shape[0]
    stride = cuda.gridsize(1)
    acc = np.float32(0.0)
    got = cuda.local.array(PREFETCH_LOADS, np.float32)
    for i0 in range(cuda.grid(1), n, stride * PREFETCH_LOADS):
        for u in range(PREFETCH_LOADS):
            i = i0 + u * stride
            got[u] = cuda.ldcg(x, i) if i < n else np.float32(0.0)
        for u in range(PREFETCH_LOADS):
            acc += got[u]
    if acc == np.float32(-1.2345e-38):  # never: keeps the loads
        sink[0] = acc


def timed(recorded):
    """ms a replay: bench.py's timing (the median of five means of 20 replays)."""
    return timed_replays(recorded, 20) * 1e3


@contextlib.contextmanager
def patched(obj, name, value):
    old = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)


def softmax_stand_in(ones, chain):
    """launch.unembedding_softmax's stand-in: the reference kernel, tf.c's chain, a block a row
    (`chain`), or no softmax; either way training's copy for the backward, by the scaling kernel
    at a factor of exactly 1 (ones: a device array of at least the rows)."""
    def softmax(out, rows, n, softmax_max, maxima, r_softmax_exp_sum, copy=None):
        if chain:
            launch.blocks(K.tf_unembedding_softmax_chain, n, K.SOFTMAX_THREADS, 0, out, rows)
        if copy is not None:
            parts = launch.softmax_parts(n)
            launch.blocks(K.tf_unembedding_scale, n * parts, K.SOFTMAX_PASS_THREADS, 0, out, rows, parts, ones, copy,
                          True)
    return softmax


def skipping_matmul(names):
    real = launch.matmul

    def matmul(name, a, b, start, out, rows, n_rows, fused, **kw):
        if name not in names:
            return real(name, a, b, start, out, rows, n_rows, fused, **kw)
        # what the launch would have returned (the unembedding's blocks, for the softmax)
        return M.column_blocks(M.launch_tile(name, n_rows, out.shape[1], kw.get("S") or a.shape[1], fused),
                               out.shape[1])
    return matmul


def skipping(fn, names):
    """fn(kernel, ...) but for the kernels of these names (a name: tf_attn is built per head width)."""
    def run(kernel, *args):
        if kernel.__name__ not in names:
            fn(kernel, *args)
    return run


def prefetching_matmul(order, ahead, sink):
    """launch.matmul, which first forks a branch reading the weights of the product `ahead`
    launches later into the L2 (order: the weights of every product of a pass, in launch order)."""
    real = launch.matmul
    count = [0]

    def matmul(name, a, b, *args, **kw):
        n = count[0]
        count[0] += 1
        if stream.recording() and n + ahead < len(order) and order[n + ahead] is not None:
            with stream.beside(f"prefetch{n}"):
                w = order[n + ahead]
                l2_prefetch[PREFETCH_BLOCKS, PREFETCH_THREADS, Target.stream](w, sink)
        return real(name, a, b, *args, **kw)
    return matmul, count


def weight_order(m):
    """The weights every product of a step reads, in launch order (None where it is not a weight
    that fits the L2)."""
    order = []
    real = launch.matmul

    def matmul(name, a, b, *args, **kw):
        streamed = name in ("tf_fc", "tf_fc_back_din") and b.size * 4 < 16 << 20
        order.append(b.reshape(-1) if streamed else None)
        return real(name, a, b, *args, **kw)
    with patched(launch, "matmul", matmul):
        training_step(m, T)
    cuda.synchronize()
    return order


def main():
    assets_dir = Path(sys.argv[1])
    fp_model = sys.argv[2] if len(sys.argv) > 2 else "fma"
    cfg, tensors = assets.load_model(assets_dir / "model.safetensors")
    data = assets.load_data(assets_dir / "data", cfg.d_vocab)
    m = TFModel(cfg, tensors, fp_model)
    run_step(m, data, T)
    cuda.synchronize()
    sink = cuda.device_array(1, np.float32)
    ones = cuda.to_device(np.ones(T, np.float32))

    def fwd():
        forward(m, T, last_only=False)

    def step():
        training_step(m, T)

    def report(label):
        f, s = timed(Recorded(fwd)), timed(Recorded(step))
        print(f"{label:40} forward {f:7.3f} ms   forward+backward {s:7.3f} ms", flush=True)

    report("as it is")
    mode = sys.argv[4] if len(sys.argv) > 4 else "all"
    if mode in ("all", "softmax"):
        with patched(launch, "unembedding_softmax", softmax_stand_in(ones, True)):
            report("softmax by tf.c's chain (the reference)")
    if mode != "all":
        return
    with patched(stream, "beside", lambda name: contextlib.nullcontext()):
        report("branches on the main chain")
    with patched(training, "zero_gradients", lambda m: None):
        report("no gradient memset")
    with patched(launch, "elementwise", skipping(launch.elementwise, {"tf_fc_back_dbias"})):
        report("no bias gradients")
    with patched(launch, "matmul", skipping_matmul({"tf_fc_back_dweight"})):
        report("no weight gradients (tf_fc_back_dweight)")
    with patched(launch, "matmul", skipping_matmul({"tf_unembedding_back_dwte"})):
        report("no wte gradient (dwte)")
    with patched(launch, "matmul", skipping_matmul({"tf_unembedding_back_din"})):
        report("no tf_unembedding_back_din")
    with patched(launch, "matmul", skipping_matmul({"tf_unembedding"})):
        report("no tf_unembedding")
    with patched(launch, "unembedding_softmax", softmax_stand_in(ones, False)):
        report("no unembedding softmax")
    with patched(launch, "ln", lambda *a, **k: None), patched(launch, "ln_back", lambda *a, **k: None):
        report("no layer norms")
    attn = {"tf_attn_scores", "tf_attn_z", "tf_attn_back_qkv"}
    with patched(launch, "elementwise", skipping(launch.elementwise, attn)), \
            patched(launch, "blocks", skipping(launch.blocks, {"tf_attn", "tf_attn_softmax", "tf_attn_back_row"})):
        report("no attention")
    order = weight_order(m)
    for ahead in (1, 2):
        matmul, count = prefetching_matmul(order, ahead, sink)

        def counted(fn):
            def run():
                count[0] = 0
                fn()
            return run
        with patched(launch, "matmul", matmul):
            f, s = timed(Recorded(counted(fwd))), timed(Recorded(counted(step)))
        print(f"{'weights into L2, ' + str(ahead) + ' product(s) ahead':40} forward {f:7.3f} ms   "
              f"forward+backward {s:7.3f} ms", flush=True)


if __name__ == "__main__":
    main()
