"""Whether the forward runs faster as G groups of rows recorded side by side: each group's layer
norms, products and attention a chain of its own in the graph, joined after its ln_f. Rows are
independent everywhere but in attention, where a query reads the keys and values of every
earlier row, so a group's attention waits for c_attn of the groups before it (graph edges). The
groups' latency-bound kernels (the layer norms' chains, attention) can then run while other
groups' products hold the multiprocessors. Every kernel is the forward's own, launched for a
group's rows, so the bits must be the plain forward's: checked before timing.

    python3 tools/experiments/row_groups_probe.py ASSETS_DIR [fma|nofma] [T] [G ...]     (a GPU)

Prints, for each G, the recorded forward's and the recorded step's ms (bench.py's timing) and
whether the activations equal the plain forward's bit for bit.
"""
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from numba import cuda  # noqa: E402

from bench_tf import timed_replays  # noqa: E402

from cudakit import stream  # noqa: E402
from cudakit.stream import Recorded, Target  # noqa: E402
from tf_numba import assets, launch  # noqa: E402
from tf_numba import kernels as K  # noqa: E402
from tf_numba.backward import backward, zero_gradients  # noqa: E402
from tf_numba.forward import forward  # noqa: E402
from tf_numba.model import TFModel  # noqa: E402
from tf_numba.training import run_step  # noqa: E402


def grouped_forward(m, T, G, ranges, probs_copy=None):
    """forward(m, T, last_only=False, probs_copy=probs_copy) with the rows in G groups, each a
    chain of the graph."""
    cfg, p, a, fused = m.cfg, m.parameters, m.activations, m.fused
    D, d_k = cfg.d_model, cfg.d_k
    bounds = [T * g // G for g in range(G + 1)]
    rows = [ranges[(bounds[g], bounds[g + 1])] for g in range(G)]
    n = [bounds[g + 1] - bounds[g] for g in range(G)]
    launch.elementwise(K.tf_embedding, T * D, p.wte.weight, p.wpe.weight, m.tokens, a.embedding.out, m.rows(T), T)
    rec = stream.recording()
    chains = list(Target.stream.split(G)) if rec and G > 1 else [Target.stream] * G

    def on(g):
        Target.stream = chains[g]

    for layer_i in range(cfg.n_layers):
        w, x = p.h[layer_i], a.h[layer_i]
        layer_in = a.embedding.out if layer_i == 0 else a.h[layer_i - 1].res_2.out
        marks = [[] for _ in range(G)]  # marks[g]: the points after c_attn of each group before g
        for g in range(G):
            on(g)
            launch.ln(w.ln_1.weight, w.ln_1.bias, layer_in, x.ln_1.r_std, x.ln_1.mean, x.ln_1.out, rows[g], n[g], fused)
            launch.matmul("tf_fc", x.ln_1.out, w.attn.c_attn.weight, w.attn.c_attn.bias, x.attn.c_attn.out, rows[g],
                          n[g], fused)
            if rec and g < G - 1:
                parts = Target.stream.split(G - g)
                chains[g] = parts[0]
                for later, mark in zip(range(g + 1, G), parts[1:]):
                    marks[later].append(mark)
        for g in range(G):
            if rec and marks[g]:
                chains[g] = type(chains[g]).join(chains[g], *marks[g])
            on(g)
            launch.attn(x.attn.c_attn.out, x.attn.softmax.out, x.attn.z.out, rows[g], n[g], T, d_k, m.rsqrt_d_k, fused)
            launch.matmul("tf_fc", x.attn.z.out, w.attn.c_proj.weight, w.attn.c_proj.bias, x.attn.c_proj.out, rows[g],
                          n[g], fused, epilogue="add", res=layer_in, extra=x.res_1.out)
            launch.ln(w.ln_2.weight, w.ln_2.bias, x.res_1.out, x.ln_2.r_std, x.ln_2.mean, x.ln_2.out, rows[g], n[g],
                      fused)
            launch.matmul("tf_fc", x.ln_2.out, w.mlp.c_fc.weight, w.mlp.c_fc.bias, x.mlp.c_fc.out, rows[g], n[g],
                          fused, epilogue="gelu", extra=x.mlp.gelu.out)
            launch.matmul("tf_fc", x.mlp.gelu.out, w.mlp.c_proj.weight, w.mlp.c_proj.bias, x.mlp.c_proj.out, rows[g],
                          n[g], fused, epilogue="add", res=x.res_1.out, extra=x.res_2.out)
            chains[g] = Target.stream
    last = a.h[cfg.n_layers - 1].res_2.out
    for g in range(G):
        on(g)
        launch.ln(p.ln_f.weight, p.ln_f.bias, last, a.ln_f.r_std, a.ln_f.mean, a.ln_f.out, rows[g], n[g], fused)
        chains[g] = Target.stream
    Target.stream = type(chains[0]).join(*chains) if rec and G > 1 else chains[0]
    maxima = launch.matmul("tf_unembedding", a.ln_f.out, p.wte.weight, m.zeros, a.unembedding.out, m.rows(T), T,
                           fused, epilogue="max", extra=m.softmax_max)
    launch.unembedding_softmax(a.unembedding.out, m.rows(T), T, m.softmax_max, maxima, m.r_softmax_exp_sum,
                               probs_copy)


def activations_bits(m):
    cuda.synchronize()
    return m.activations.raw.copy_to_host().view(np.uint32)


def main():
    assets_dir = Path(sys.argv[1])
    fp_model = sys.argv[2] if len(sys.argv) > 2 else "fma"
    T = int(sys.argv[3]) if len(sys.argv) > 3 else 64
    groups = [int(g) for g in sys.argv[4:]] or [1, 2, 4]
    cfg, tensors = assets.load_model(assets_dir / "model.safetensors")
    data = assets.load_data(assets_dir / "data", cfg.d_vocab)
    m = TFModel(cfg, tensors, fp_model)
    run_step(m, data, T)
    ranges = {}
    for G in groups:
        for g in range(G):
            lo, hi = T * g // G, T * (g + 1) // G
            ranges.setdefault((lo, hi), cuda.to_device(np.array([lo, hi], np.int64)))

    def plain():
        forward(m, T, last_only=False)

    Recorded(plain)()
    want = activations_bits(m)
    base = timed_replays(Recorded(plain), 20) * 1e3
    print(f"plain forward {base:7.3f} ms", flush=True)
    for G in groups:
        def fwd():
            grouped_forward(m, T, G, ranges)

        def step():
            zero_gradients(m)
            grouped_forward(m, T, G, ranges, m.activations_back.unembedding.out)  # the backward's copy
            backward(m, T)

        m.activations.raw.copy_to_device(np.full(m.activations.raw.shape, np.nan, np.float32))
        rec = Recorded(fwd)
        rec()
        same = np.array_equal(activations_bits(m), want)
        f = timed_replays(rec, 20) * 1e3
        s = timed_replays(Recorded(step), 20) * 1e3
        print(f"G={G}: forward {f:7.3f} ms   forward+backward {s:7.3f} ms   activations = plain forward's: {same}",
              flush=True)


if __name__ == "__main__":
    main()
